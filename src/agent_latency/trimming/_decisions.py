"""The vocabulary of a trim's decisions: what happened to each input message, and by which rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from agent_latency.config import PriorityClass

Action = Literal["kept", "dropped", "shortened"]
"""What happened to one input message."""

Rule = Literal[
    "fits",
    "must_keep",
    "latest_tool_call",
    "within_budget",
    "dropped_for_budget",
    "dropped_at_cut",
    "recalled",
    "orphan_tool_result",
    "unanswered_tool_call",
    "late_tool_result",
    "tool_result_cap",
    "compacted",
    "shortened_to_fit",
]
"""Why it happened; :data:`RULE_EXPLANATIONS` says what each rule means."""

RULE_EXPLANATIONS: Final[Mapping[Rule, tuple[str, str]]] = {
    "fits": ("all fits the budget", "the whole request fits the budget; kept unchanged."),
    "must_keep": (
        "always kept",
        "a system message (`keep_system`) or the latest user message (`keep_latest_user`), "
        "with what the agent was working on when the user wrote it while a tool ran (the tool "
        "call whose result came after it, its results and the question it was made for) or a "
        "user message after a call no result answers; never dropped.",
    ),
    "latest_tool_call": (
        "current tool call",
        "part of the newest tool call of the current turn (with what its tool added as a user "
        "message, such as an image); never dropped.",
    ),
    "within_budget": (
        "budget left for it",
        "kept; the budget left after the higher-priority classes allowed it.",
    ),
    "dropped_for_budget": (
        "lower priority/older",
        "dropped; its class ranks lower or it is older than what was kept.",
    ),
    "dropped_at_cut": (
        "left out at the cut",
        "dropped when the cache-first cut last moved: the rounds before the cut keep the head, "
        "what the question asked there needed and the most recent, and the cut stays put while "
        "the conversation grows, so the server's cached prefix keeps hitting.",
    ),
    "recalled": (
        "the question needs it",
        "left out at the cut, but the latest user message names something only it mentions: "
        "sent again right before the current turn, after the cached prefix.",
    ),
    "orphan_tool_result": (
        "no tool call asked",
        "dropped; a tool result that no preceding tool call asked for.",
    ),
    "unanswered_tool_call": (
        "no tool result",
        "tool calls that no tool message answers (a result removed from the history) are left "
        "out of the assistant message, or the message is dropped when nothing else is left: an "
        "endpoint rejects a call without its result.",
    ),
    "late_tool_result": (
        "sent with its call",
        "a tool result that came after other messages (say a user message sent while the tool "
        "ran): kept, and sent right after its call with the call's other results, as an "
        "endpoint rejects a call whose results do not follow it.",
    ),
    "tool_result_cap": ("over tool result cap", "shortened to `max_tool_result_tokens`."),
    "compacted": (
        "old tool result",
        "a history tool result replaced by a one-line stub (`compact_tool_results`) before "
        "whole rounds were dropped; the call stays.",
    ),
    "shortened_to_fit": (
        "must-keep over budget",
        "shortened further because the must-keep messages exceed the budget.",
    ),
}
"""For each :data:`Rule`: a short reason (the ``trim`` command's column) and its meaning (the
table of docs/trimming.md, checked against this by a test)."""
GAP_RULES: Final[frozenset[Rule]] = frozenset({"orphan_tool_result", "unanswered_tool_call"})
"""The rules of what a trim drops whatever the budget: gaps in the tool calls, no cut."""


@dataclass(frozen=True, slots=True)
class MessageDecision:
    """What a trim did with one input message, and why.

    Attributes:
        index: Position of the message in the input.
        role: Its OpenAI role (``system``, ``user``, ``assistant``, ``tool``, ...).
        priority_class: The class it was ranked in.
        action: ``kept``, ``dropped`` or ``shortened``.
        rule: Why (see :data:`Rule`).
        tokens: Its tokens in the input, framing included.
        tokens_after: Its tokens in the output (0 when dropped).
    """

    index: int
    role: str
    priority_class: PriorityClass
    action: Action
    rule: Rule
    tokens: int
    tokens_after: int
