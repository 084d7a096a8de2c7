"""A second attack on the cache-first default (``PriorityTrimmer()``), from the user's side.

The quick check before recall (``_History.may_reach``) against full scoring on inputs the first
comparison did not draw, and conversations as users run them: prefixes of one conversation
trimmed at once, conversations sharing their first message objects, forks, removals. The
oracle of every trim is what a fresh trimmer (nothing remembered) returns for the same input.
Each defect found is a test marked ``xfail(strict=True)``: it turns red once fixed.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
SYSTEM = SystemMessage("You are a helpful assistant. Answer briefly.", id="system")
VOCABULARY = [f"w{i}" for i in range(400)]
ZIPF = [1 / (i + 1) for i in range(400)]


def zipf_text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(VOCABULARY, ZIPF, k=rng.randint(low, high)))


def wire(result: TrimResult) -> list[tuple[str, str | None, str]]:
    return [(type(m).__name__, m.id, json.dumps(m.content)) for m in result.messages]


def fresh(messages: list[BaseMessage], budget: int) -> list[tuple[str, str | None, str]]:
    return wire(PriorityTrimmer(budget, token_counter=COUNTER).trim(messages))


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch every microsecond (CPython's default is 5 ms): what a loaded server, or
    a build without the GIL, does now and then shows on every run."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def questions_about_the_past(rounds: int, seed: int = 1) -> list[BaseMessage]:
    """A chat whose every user turn asks about terms said in earlier rounds (so recall scores
    the history on every call)."""
    rng = random.Random(seed)
    messages: list[BaseMessage] = [SYSTEM]
    for n in range(rounds):
        question = f"{zipf_text(rng, 20, 60)} zeta{n % 7} kappa?"
        messages.append(HumanMessage(question, id=f"u{n}"))
        messages.append(AIMessage(f"{zipf_text(rng, 20, 60)} zeta{n % 5}", id=f"a{n}"))
    return messages


@pytest.mark.xfail(
    strict=True,
    reason="a trim reads term postings that a concurrent trim of a longer prefix extends in "
    "place: IndexError (or other idf) in _History.weigh/scores/may_reach",
)
@pytest.mark.usefixtures("busy_switching")
def test_batch_over_the_prefixes_of_one_conversation_returns_what_fresh_trimmers_return() -> None:
    """``trimmer.batch`` over a conversation's last prefixes (an evaluation replaying each step
    of a chat, or two requests of one thread in flight): the calls share their first message
    objects, so a longer prefix extends the term index the shorter one is reading."""
    budget = 1500
    chat = questions_about_the_past(200)
    prefixes = [chat[:end] for end in range(len(chat) - 40, len(chat) + 1, 2)]
    expected = [fresh(messages, budget) for messages in prefixes]
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    for _ in range(5):
        got: list[Any] = trimmer.batch(
            prefixes, config={"max_concurrency": 4}, return_exceptions=True
        )
        failed = [repr(out) for out in got if isinstance(out, Exception)]
        assert failed == []
        sent = [[(type(m).__name__, m.id, json.dumps(m.content)) for m in out] for out in got]
        assert sent == expected
