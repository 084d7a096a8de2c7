"""The mixed workload's shape and its timeline: interleaved conversations, idle gaps.

Each conversation replays the scenario call by call as it grew, with its own id at the start of
the system prompt. The conversations' calls are interleaved by a virtual clock: turns of one
conversation come ``turn_gap_s`` apart, and every ``idle_every``-th turn comes ``idle_gap_s``
later, longer than ``cache_lifetime_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent_latency._validation import checked_int, checked_number
from agent_latency.config import PromptSettings

_OWNER = "MixedWorkload"


@dataclass(frozen=True, kw_only=True)
class MixedWorkload:
    """The mixed workload's shape.

    Attributes:
        conversations: How many conversations run interleaved.
        calls: Model calls per conversation: the last ``calls`` call points of the conversation
            (``None``: all). The default, 17, starts at the shipped scenario's first question
            round, so every planted fact is asked about.
        budget: The trimmers' budget (the default point of every budget knob): the library's
            default budget, so that the point a user gets with no options is the one measured.
        context_window: The model's context window.
        reserve_for_output: Tokens kept free for the answer; the hard limit is
            ``context_window − reserve_for_output``.
        cache_lifetime_s: The server's cache lifetime.
        turn_gap_s: Virtual time between two turns of a conversation.
        idle_gap_s: Virtual time before a turn after an idle gap.
        idle_every: Every this many turns of a conversation comes after an idle gap.
    """

    conversations: int = 3
    calls: int | None = 17
    budget: int = PromptSettings().token_budget
    context_window: int = 8192
    reserve_for_output: int = 2048
    cache_lifetime_s: float = 300.0
    turn_gap_s: float = 20.0
    idle_gap_s: float = 600.0
    idle_every: int = 5

    def __post_init__(self) -> None:
        for name in ("conversations", "budget", "context_window", "idle_every"):
            checked_int(_OWNER, name, getattr(self, name), minimum=1)
        if self.calls is not None:
            checked_int(_OWNER, "calls", self.calls, minimum=1, hint="or None for all")
        checked_int(_OWNER, "reserve_for_output", self.reserve_for_output, minimum=0)
        for name in ("cache_lifetime_s", "turn_gap_s", "idle_gap_s"):
            checked_number(_OWNER, name, getattr(self, name), minimum=0, above=True)
        if self.hard_limit < self.budget:
            raise ValueError(
                f"MixedWorkload: context_window - reserve_for_output ({self.hard_limit}) must "
                f"not be below the budget ({self.budget})."
            )
        if self.idle_gap_s <= self.cache_lifetime_s:
            raise ValueError("MixedWorkload: idle_gap_s must exceed cache_lifetime_s.")

    @property
    def hard_limit(self) -> int:
        """The prompt tokens a request must not exceed."""
        return self.context_window - self.reserve_for_output


@dataclass(frozen=True)
class Turn:
    """One model call of the schedule.

    Attributes:
        at: Its virtual time, in seconds.
        conversation: Which conversation it belongs to.
        end: The prompt is the conversation's first ``end`` messages.
        idle: It comes after an idle gap: the server's prefix cache of it has expired.
    """

    at: float
    conversation: int
    end: int
    idle: bool


def schedule(workload: MixedWorkload, points: Sequence[int]) -> list[Turn]:
    """Returns every conversation's turns, interleaved by their virtual time."""
    turns = []
    for conversation in range(workload.conversations):
        at = conversation * workload.turn_gap_s / workload.conversations
        for index, end in enumerate(points):
            idle = index > 0 and (index + conversation) % workload.idle_every == 0
            at += workload.idle_gap_s if idle else workload.turn_gap_s
            turns.append(Turn(at, conversation, end, idle))
    return sorted(turns, key=lambda turn: (turn.at, turn.conversation))
