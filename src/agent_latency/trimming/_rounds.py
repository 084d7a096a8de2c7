"""Grouping a conversation into the units a trimmer keeps or drops whole, and remembering it.

A *unit* is the smallest group of messages that can be dropped without leaving the rest invalid
for an OpenAI-compatible endpoint: an ``AIMessage`` with tool calls together with every
``ToolMessage`` answering one of its calls (parallel calls included), or any other single
message. Its calls include ``invalid_tool_calls`` (arguments that are not JSON): ChatOpenAI sends
those too. A *round* is a user message and everything up to the next user message; messages
before the first user message form round 0. Messages are classified by the OpenAI role they are
sent with, so a ``ChatMessage(role="user")`` is a user message.

An agent trims its whole conversation before every model call: the same message objects and a
few new ones. :class:`AnalysisMemo` (an in-process memo of that analysis) remembers, per
conversation, each message's tokens, text and unit, and works out only the messages after the
remembered ones. Whether those are unchanged is checked on every call, for every message, in
bulk: the same object, the same content, name and tool-call id objects, and the fields that can
change in place (tool calls, list content, a role) equal to a copy taken when the message was
first seen (:func:`~agent_latency._caches.stamp`, the rule every per-message cache follows; its
one known limit is an edit to an equal value of another type, such as a tool-call argument ``1``
set to ``1.0``).
"""

from __future__ import annotations

import bisect
import operator
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, count, repeat
from typing import Any, Literal, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency._caches import IDENTITY_FIELDS, LRUCache, edit_check
from agent_latency._chat_format import role_of
from agent_latency._user_input import tool_calls_of
from agent_latency.tokens import TokenCounting
from agent_latency.trimming._relevance import text_of

_SYSTEM_ROLES = frozenset({"system", "developer"})
_CONVERSATIONS = 16
_KEY_MESSAGES = 2  # a conversation is told apart by its first messages

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

    Raises:
        ValueError: Naming the message, when an ``AIMessage``'s tool calls are malformed.
    """
    units: list[Unit] = []
    _group(messages, 0, units, [], {}, 0)
    return units


def _group(
    messages: Sequence[BaseMessage],
    start: int,
    units: list[Unit],
    issued: list[tuple[str, ...]],
    unit_of_call: dict[str, int],
    current_round: int,
) -> int:
    """Groups ``messages[start:]`` into ``units``, which hold the units of the messages before.

    Args:
        messages: The conversation.
        start: The first message to group.
        units: The units so far; extended, and a unit a result joins is replaced.
        issued: The tool-call ids each unit issued; extended.
        unit_of_call: The latest unit that issued each tool-call id so far; updated.
        current_round: The round of ``messages[start - 1]``.

    Returns:
        The round of the last message.
    """
    for index in range(start, len(messages)):
        message = messages[index]
        kind: UnitKind
        ids: tuple[str, ...] = ()
        if isinstance(message, ToolMessage):
            owner = unit_of_call.get(message.tool_call_id)
            if owner is not None:
                unit = units[owner]
                units[owner] = _unit(unit.kind, (*unit.indices, index), unit.round)
                continue
            kind = "orphan"
        elif isinstance(message, AIMessage) and (calls := tool_calls_of(message, index)):
            kind = "tool_call"
            ids = tuple(call["id"] for call in calls if call["id"] is not None)
            unit_of_call.update(dict.fromkeys(ids, len(units)))
        elif isinstance(message, HumanMessage):
            # The common types first: role_of looks at ChatMessage roles and their aliases.
            current_round += 1
            kind = "user"
        elif isinstance(message, SystemMessage):
            kind = "system"
        else:
            role = role_of(message)
            if role == "user":
                current_round += 1
                kind = "user"
            else:
                kind = "system" if role in _SYSTEM_ROLES else "message"
        units.append(_unit(kind, (index,), current_round))
        issued.append(ids)
    return current_round


def _unit(kind: UnitKind, indices: tuple[int, ...], round_: int) -> Unit:
    # A NamedTuple's own constructor is Python code; tuple.__new__ makes the same tuple in C.
    return tuple.__new__(Unit, (kind, indices, round_))


class MessageFacts(NamedTuple):
    """What a trim needs to know of each message of a conversation (shared: do not modify).

    Attributes:
        counts: Each message's tokens, framing included.
        texts: Each message's text (see :func:`~agent_latency.trimming._relevance.text_of`).
        units: The units, as :func:`group_units` returns them.
    """

    counts: list[int]
    texts: list[str]
    units: list[Unit]


@dataclass(frozen=True, slots=True)
class _Memo:
    """A conversation as last seen, and what tells its messages unchanged on the next call."""

    refs: list[weakref.ref[BaseMessage]]
    fields: list[list[object]]  # content, name and tool_call_id objects, per field
    # Per getter of fields to compare (see edit_check): message indices, ascending, and copies.
    compared: list[tuple[Callable[[dict[str, Any]], Any], list[int], list[Any]]]
    facts: MessageFacts
    issued: list[tuple[str, ...]]
    unit_of_call: dict[str, int]
    round: int


class AnalysisMemo:
    """The analysis of conversations: counts, texts and units, once per message while unchanged.

    Remembers the last state of a few conversations (told apart by their first two messages);
    a call reuses what it remembers for the longest unchanged first part of the messages. Holds
    no message alive, and what it holds of a message that died (content, copies of list content,
    text) is let go at the next call. Safe to share between threads.

    Args:
        counter: Counts the messages' tokens.
    """

    def __init__(self, counter: TokenCounting) -> None:
        self._counter = counter
        # A memo is cut before its first message that died (whose content, copies of list
        # content and text it would otherwise hold), at the next call.
        self._memos = LRUCache(_CONVERSATIONS, on_death=_alive_part)

    def analyse(self, messages: list[BaseMessage]) -> MessageFacts:
        """Returns the counts, texts and units of ``messages``.

        Raises:
            ValueError: Naming the message, when an ``AIMessage``'s tool calls were made
                malformed in place (see :func:`~agent_latency._user_input.tool_calls_of`).
        """
        key = tuple(map(id, messages[:_KEY_MESSAGES]))
        memo: _Memo = self._memos.get(key) or _EMPTY
        unchanged = _unchanged(messages, memo)
        if unchanged == len(memo.refs) == len(messages):
            return memo.facts
        try:
            memo = self._extended(_truncated(memo, unchanged), messages, key)
        except _Uncopyable:  # edits in place could not be told later: nothing is remembered
            counts = list(map(self._counter.count_message, messages))
            return MessageFacts(counts, list(map(text_of, messages)), group_units(messages))
        self._memos.put(key, memo)
        return memo.facts

    def _extended(self, memo: _Memo, messages: list[BaseMessage], key: tuple[int, ...]) -> _Memo:
        """``memo`` (which ``messages`` begin with) with the messages after it added, at ``key``."""
        start = len(memo.refs)
        new = messages[start:]
        groups = {getter: (indices, snapshots) for getter, indices, snapshots in memo.compared}
        for index, message in enumerate(new, start):
            try:
                getter, snapshot = edit_check(message)
            except Exception:
                raise _Uncopyable from None
            if getter is not None:
                indices, snapshots = groups.get(getter, ((), ()))
                groups[getter] = ([*indices, index], [*snapshots, snapshot])
        compared = [(getter, *group) for getter, group in groups.items()]
        units = list(memo.facts.units)
        issued = list(memo.issued)
        unit_of_call = dict(memo.unit_of_call)
        round_ = _group(messages, start, units, issued, unit_of_call, memo.round)
        facts = MessageFacts(
            memo.facts.counts + list(map(self._counter.count_message, new)),
            memo.facts.texts + list(map(text_of, new)),
            units,
        )
        fields = [
            old + new_fields for old, new_fields in zip(memo.fields, _fields(new), strict=True)
        ]
        refs = memo.refs + list(map(weakref.ref, new, repeat(self._memos.on_death(key))))
        return _Memo(refs, fields, compared, facts, issued, unit_of_call, round_)


class _Uncopyable(Exception):
    """A message's fields cannot be copied to find edits in place later."""


_EMPTY = _Memo([], [[], [], []], [], MessageFacts([], [], []), [], {}, 0)


def _fields(messages: Sequence[BaseMessage]) -> list[list[object]]:
    """The content, name and tool_call_id objects of each message, per field (in C)."""
    dicts = list(map(_DICT, messages))
    return [list(map(dict.get, dicts, repeat(name))) for name in IDENTITY_FIELDS]


_DICT = operator.attrgetter("__dict__")


def _unchanged(messages: list[BaseMessage], memo: _Memo) -> int:
    """How many first messages are the memo's, each unchanged since it was seen.

    The checks run in C over the whole conversation; only the deep comparisons concern just the
    messages with tool calls, list content or a role.
    """
    length = min(len(messages), len(memo.refs))
    prefix = messages[:length]
    dicts = list(map(_DICT, prefix))
    checks: list[tuple[list[Any], list[Any]]] = [
        (list(map(operator.call, memo.refs[:length])), prefix)
    ]
    checks += (
        (list(map(dict.get, dicts, repeat(name))), then[:length])
        for name, then in zip(IDENTITY_FIELDS, memo.fields, strict=True)
    )
    for now, then in checks:
        # Equal lists are compared in C (items that are the same object, quickly); a string
        # field equal to the one seen is as good as the same object. Past the first item that
        # is not the same object nothing is reused (a message's __eq__ would be slow).
        if now != then:
            length = min(length, next(compress(count(), map(operator.is_not, now, then))))
    for getter, indices, snapshots in memo.compared:
        end = bisect.bisect_left(indices, length)
        values = list(map(getter, map(dicts.__getitem__, indices[:end])))
        if values != snapshots[:end]:
            pairs = zip(indices, values, snapshots, strict=False)  # values stop at the cut
            length = next(index for index, value, then in pairs if value != then)
    return length


def _truncated(memo: _Memo, length: int) -> _Memo:
    """The memo of its first ``length`` messages."""
    if length == len(memo.refs):
        return memo
    units_before = bisect.bisect_left(memo.facts.units, length, key=_first)
    # A tool call's unit keeps only the results before the cut.
    units = [
        unit if unit.indices[-1] < length else _unit(unit.kind, _before(unit, length), unit.round)
        for unit in memo.facts.units[:units_before]
    ]
    issued = memo.issued[:units_before]
    unit_of_call = memo.unit_of_call  # as it was, unless a unit after the cut issued calls
    if any(memo.issued[units_before:]):
        unit_of_call = {id_: unit for unit, ids in enumerate(issued) for id_ in ids}
    counts, texts = memo.facts.counts[:length], memo.facts.texts[:length]
    compared = []
    for getter, indices, snapshots in memo.compared:
        end = bisect.bisect_left(indices, length)
        compared.append((getter, indices[:end], snapshots[:end]))
    return _Memo(
        memo.refs[:length],
        [field[:length] for field in memo.fields],
        compared,
        MessageFacts(counts, texts, units),
        issued,
        unit_of_call,
        units[-1].round if units else 0,
    )


def _alive_part(memo: _Memo) -> _Memo | None:
    """The memo cut before its first dead message; ``None`` when that is one its key names."""
    alive = map(operator.call, memo.refs)
    dead = next(compress(count(), map(operator.is_, alive, repeat(None))), None)
    if dead is None:  # the memo at the key is now another conversation's
        return memo
    return None if dead < _KEY_MESSAGES else _truncated(memo, dead)


def _first(unit: Unit) -> int:
    return unit.indices[0]


def _before(unit: Unit, length: int) -> tuple[int, ...]:
    return tuple(index for index in unit.indices if index < length)
