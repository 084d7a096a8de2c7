"""Trims with recall's quick check (``_History.may_reach``) beside trims that score every call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from agent_latency.tokens import TokenCounting
from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._cache_first import _History


def compare_with_full_scoring(
    calls: Iterable[list[BaseMessage]],
    budget: int,
    counter: TokenCounting,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, int]:
    """Trims each request of ``calls`` (a growing chat's, in order) with one trimmer as shipped
    and with another whose quick check says yes every time, and asserts the two trims are the
    same.

    Returns:
        How often the check said no (scoring skipped), and how many calls recalled.
    """
    said: list[bool] = []
    may_reach = _History.may_reach

    def recorded(history: _History, query: Any, share: float) -> bool:
        said.append(may_reach(history, query, share))
        return said[-1]

    checked = PriorityTrimmer(budget, token_counter=counter)
    scored = PriorityTrimmer(budget, token_counter=counter)
    recalled = 0
    for messages in calls:
        with monkeypatch.context() as patch:
            patch.setattr(_History, "may_reach", recorded)
            quick = checked.trim(messages)
        with monkeypatch.context() as patch:
            patch.setattr(_History, "may_reach", lambda *_: True)
            full = scored.trim(messages)
        assert quick.messages == full.messages
        assert [d.rule for d in quick.decisions] == [d.rule for d in full.decisions]
        recalled += any(d.rule == "recalled" for d in full.decisions)
    return said.count(False), recalled
