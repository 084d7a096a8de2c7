"""Grouping a conversation into the units a trimmer keeps or drops whole.

A *unit* is the smallest group of messages that can be dropped without leaving the rest invalid
for an OpenAI-compatible endpoint: an ``AIMessage`` with tool calls together with every
``ToolMessage`` answering one of its calls (parallel calls included), or any other single
message. Its calls include ``invalid_tool_calls`` (arguments that are not JSON): ChatOpenAI sends
those too. A *round* is a user message and everything up to the next user message; messages
before the first user message form round 0. Messages are classified by the OpenAI role they are
sent with, so a ``ChatMessage(role="user")`` is a user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency._tokens import role_of

_SYSTEM_ROLES = frozenset({"system", "developer"})

UnitKind = Literal["system", "user", "tool_call", "message", "orphan"]
"""What a unit holds: a system message, a user message, a tool call with its results, any other
single message, or an orphan tool result (a ``ToolMessage`` no preceding tool call asked for)."""


class Unit(NamedTuple):
    """Messages that are kept or dropped together (a tuple: cheap to make by the hundred).

    Attributes:
        kind: What the unit holds.
        indices: Positions of its messages in the conversation, ascending.
        round: The round of its first message (0 before the first user message).
    """

    kind: UnitKind
    indices: tuple[int, ...]
    round: int


def group_units(messages: Sequence[BaseMessage]) -> list[Unit]:
    """Splits a conversation into units, ordered by their first message.

    A ``ToolMessage`` joins the unit of the latest preceding ``AIMessage`` that issued its
    ``tool_call_id``, even when other messages sit in between. One that matches no preceding call
    becomes an ``"orphan"`` unit.

    Args:
        messages: The conversation.

    Returns:
        Every message belongs to exactly one unit.
    """
    kinds: list[UnitKind] = []
    members: list[list[int]] = []
    rounds: list[int] = []
    unit_of_call: dict[str, int] = {}
    current_round = 0

    def open_unit(kind: UnitKind, index: int) -> int:
        kinds.append(kind)
        members.append([index])
        rounds.append(current_round)
        return len(kinds) - 1

    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            owner = unit_of_call.get(message.tool_call_id)
            if owner is None:
                open_unit("orphan", index)
            else:
                members[owner].append(index)
        elif isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            owner = open_unit("tool_call", index)
            for call in (*message.tool_calls, *message.invalid_tool_calls):
                if call["id"] is not None:
                    unit_of_call[call["id"]] = owner
        else:
            # The common types first: role_of looks at ChatMessage roles and their aliases.
            role = (
                "user"
                if isinstance(message, HumanMessage)
                else "system"
                if isinstance(message, SystemMessage)
                else role_of(message)
            )
            if role == "user":
                current_round += 1
                open_unit("user", index)
            else:
                open_unit("system" if role in _SYSTEM_ROLES else "message", index)
    return [
        Unit(kind, tuple(indices), round_)
        for kind, indices, round_ in zip(kinds, members, rounds, strict=True)
    ]
