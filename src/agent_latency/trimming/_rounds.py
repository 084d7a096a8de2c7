"""Grouping a conversation into the units a trimmer keeps or drops whole, and remembering it.

A *unit* is the smallest group of messages that can be dropped without leaving the rest invalid
for an OpenAI-compatible endpoint: an ``AIMessage`` with tool calls together with every
``ToolMessage`` answering one of its calls (parallel calls included), or any other single
message. Its calls include ``invalid_tool_calls`` (arguments that are not JSON): ChatOpenAI
sends those too. A ``ToolMessage`` joins the unit of the latest preceding ``AIMessage`` that
issued its ``tool_call_id``, even when other messages sit in between (a *late* result, which is
sent right after its call: :attr:`MessageFacts.late`); one that answers no preceding call, or
a call already answered (OpenAI refuses a second result of a call), is an ``"orphan"`` unit of
its own, and so is a ``ChatMessage(role="tool")`` that names no preceding
call in ``additional_kwargs["tool_call_id"]``. A *round* is a user message and everything up to
the next user message; messages before the first user message form round 0. Messages are
classified by the OpenAI role they are sent with, so a ``ChatMessage(role="user")`` is a user
message; but a user message a tool added with its result (an image: see
``_Grouping._added_by_a_tool``) is a ``"message"`` of the tool's turn and round, not a question.

An agent trims its whole conversation before every model call: the same message objects and a
few new ones. :class:`AnalysisMemo` (an in-process memo of that analysis) remembers, per
conversation, each message's tokens, text and unit, and works out only the messages after the
remembered ones. Whether those are unchanged is checked on every call, for every message, in
bulk (a few passes in C, each message's fields read once): the same object (told by its
``__dict__``, which a message re-initialised in place replaces), the same content, name and
tool-call id objects, and the fields that can change in place (tool calls, list content, a
role) equal to a copy taken when the message was first seen, or, when they were empty lists,
the same lists, still empty (:func:`~agent_latency._caches.stamp`, the rule every per-message
cache follows; its one known limit is an edit to an equal value of another type, such as a
tool-call argument ``1`` set to ``1.0``); and, of an ``AIMessage`` without calls, whether its
``additional_kwargs`` hold raw calls (ChatOpenAI sends those then: one more pass in C), or, when
they were empty, that they still are (held like its empty lists: most answers).

A ``create_agent`` with a checkpointer reads its history back from the checkpoint at each new
turn: new message objects, equal to those of the last call. A conversation is therefore also
remembered by the values of its first messages (their types, ids and texts), past its messages'
lives but holding nothing of them but strings and copies: messages no memo knows by identity
are compared by value with the one remembered so (the same checks, the same types standing for
the same objects: equal content, names and tool-call ids, the other fields equal to their
copies, the lists that were empty still empty), and what is equal is taken over for the new
objects rather than worked out again.
"""

from __future__ import annotations

import bisect
import logging
import operator
import sys
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, count, islice, pairwise, repeat, takewhile
from typing import Any, Literal, NamedTuple, cast

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from agent_latency._caches import (
    CONVERSATIONS_ACROSS_TURNS,
    FirstTimes,
    LRUCache,
    edit_check,
    getter_also,
)
from agent_latency._chat_format import role_of
from agent_latency._user_input import check_message_content, tool_calls_of
from agent_latency.config import PriorityClass
from agent_latency.tokens import TokenCounting
from agent_latency.trimming._relevance import text_bytes, text_of
from agent_latency.trimming._shortening import split_content

logger = logging.getLogger("agent_latency.trimming")

_SYSTEM_ROLES = frozenset({"system", "developer"})
_CONVERSATIONS = 16
_KEY_MESSAGES = 2  # a conversation is told apart by its first messages
_PARTINGS = _CONVERSATIONS
"""How many partings are noted per opening: conversations opening with the same message objects
are told apart up to as many as are remembered."""
BY_VALUE_BYTES = 64 * 1024 * 1024
"""The most that the conversations remembered by value hold, about (see ``_Memo.weight``): they
outlive their messages."""
_WARNED = 1024
"""How many gaps in tool calls (call ids) a memo remembers having warned of."""
_GENERATIONS = count(1)
"""Numbers each grouping worked out from units (see ``_Grouping.generation``), process-wide: no
two conversations' groupings share one (``next`` of it is atomic)."""
_CONVERSATIONS_SEEN = count(1)
"""Numbers the conversations remembered (what else is remembered of one is keyed by its number),
process-wide: trimmers made from one another share their term index."""

UnitKind = Literal["system", "user", "tool_call", "message", "orphan"]
"""What a unit holds: a system message, a user message, a tool call with its results, any other
single message, or an orphan tool result (a ``ToolMessage``, or a ``ChatMessage(role="tool")``, no
preceding tool call asked for)."""


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


@dataclass(slots=True)
class _Grouping:
    """The units of a conversation's first messages, what a trim derives from them, and what
    grouping the next messages needs (extended in place: :meth:`copy` before sharing)."""

    units: list[Unit] = field(default_factory=list)
    # The units that issued tool-call ids, ascending, with those ids.
    issued: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    unit_of_call: dict[str, int] = field(default_factory=dict)  # the latest unit to issue an id
    round: int = 0  # the round of the last message
    classes: list[PriorityClass] = field(default_factory=list)
    users: list[int] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    rounds: list[list[int]] = field(default_factory=list)  # a round's list: copied on change
    owner: list[int] = field(default_factory=list)
    round_tokens: list[int] = field(default_factory=list)
    skipped: int = 0  # 1 when round 0 has no history message (the rounds start at round 1)
    unanswered: dict[int, tuple[str, ...]] = field(default_factory=dict)
    late: dict[int, int] = field(default_factory=dict)
    added: list[int] = field(default_factory=list)  # the user messages a tool added (_user)
    calls_shared: bool = False  # unit_of_call is another grouping's too: copy it to change it
    # Which grouping this is: new for each one worked out from units (a first call, or after an
    # edit), kept by copies extended with new messages (which change no earlier round's
    # messages but by adding late results, which change its size).
    generation: int = field(default_factory=lambda: next(_GENERATIONS))

    @classmethod
    def of(cls, units: list[Unit], counts: list[int]) -> _Grouping:
        """The grouping of ``units`` (tool-call ids issued come from ``issued`` afterwards)."""
        grouping = cls(classes=["history"] * len(counts), owner=[-1] * len(counts))
        for unit in units:
            grouping._add(unit, counts)
        return grouping

    def copy(self) -> _Grouping:
        """A copy whose lists and dict can be extended without changing this one's (the dict
        is copied when first changed: few calls add tool calls)."""
        return _Grouping(
            self.units.copy(),
            self.issued.copy(),
            self.unit_of_call,
            self.round,
            self.classes.copy(),
            self.users.copy(),
            self.orphans.copy(),
            self.rounds.copy(),
            self.owner.copy(),
            self.round_tokens.copy(),
            self.skipped,
            self.unanswered.copy(),
            self.late.copy(),
            self.added.copy(),
            calls_shared=True,
            generation=self.generation,
        )

    def facts(self, counts: list[int], texts: list[str]) -> MessageFacts:
        return MessageFacts(
            counts,
            texts,
            self.units,
            self.classes,
            self.users,
            self.orphans,
            self.rounds,
            self.owner,
            self.round_tokens,
            self.unanswered,
            self.late,
            self.added,
            self.generation,
            len(self.issued),
        )

    def extend(
        self,
        messages: Sequence[BaseMessage],
        counts: list[int],
        count: Callable[[BaseMessage], int],
        direct: frozenset[str],
    ) -> None:
        """Groups the messages after those grouped so far.

        Args:
            messages: The conversation.
            counts: The tokens of the messages grouped so far; extended with ``count``.
            count: Counts a message (after its content and tool calls are checked: a message
                spoiled in place is named).
            direct: The names of the tools whose result ends the agent's run
                (``return_direct``), when known.
        """
        for index in range(len(self.owner), len(messages)):
            message = messages[index]
            check_message_content(message, index)
            kind: UnitKind
            ids: tuple[str, ...] = ()
            if isinstance(message, ToolMessage):
                if self._joined(message, index, counts, count):
                    continue
                kind = "orphan"
            elif isinstance(message, AIMessage) and (calls := tool_calls_of(message, index)):
                kind = "tool_call"
                ids = tuple(call["id"] for call in calls if call["id"] is not None)
                if self.calls_shared:
                    self.unit_of_call, self.calls_shared = dict(self.unit_of_call), False
                self.unit_of_call.update(dict.fromkeys(ids, len(self.units)))
                if ids:
                    self.unanswered[index] = ids
            elif isinstance(message, AIMessage) and raw_calls_only(message.__dict__):
                # Its calls emptied in place: ChatOpenAI would send the raw ones it keeps there
                # (answered or not, uncounted). None is paired: they are left out (no ids).
                kind = "message"
                self.unanswered[index] = ()
            elif isinstance(message, AIMessage):
                kind = "message"  # the common types first: see below
            elif isinstance(message, HumanMessage):
                # The common types first: role_of looks at ChatMessage roles and their aliases.
                kind = self._user(messages, index, direct)
            elif isinstance(message, SystemMessage):
                kind = "system"
            else:
                role = role_of(message)
                if role == "tool":
                    # A ChatMessage(role="tool"): with its call, or an orphan like a ToolMessage.
                    if self._joined(message, index, counts, count):
                        continue
                    kind = "orphan"
                elif role == "user":
                    kind = self._user(messages, index, direct)
                else:
                    kind = "system" if role in _SYSTEM_ROLES else "message"
            counts.append(count(message))
            self.classes.append("history")
            self.owner.append(-1)
            self._add(_unit(kind, (index,), self.round), counts)
            if ids:
                self.issued.append((len(self.units) - 1, ids))

    def _user(
        self, messages: Sequence[BaseMessage], index: int, direct: frozenset[str]
    ) -> UnitKind:
        """The kind of the user message at ``index``: ``"user"``, a new round, unless a tool
        added it with its result (:meth:`_added_by_a_tool`): then a ``"message"`` of the turn it
        came in, as the result is."""
        if self._added_by_a_tool(messages, index, direct):
            self.added.append(index)
            return "message"
        self.round += 1
        return "user"

    def _added_by_a_tool(
        self, messages: Sequence[BaseMessage], index: int, direct: frozenset[str]
    ) -> bool:
        """Whether the user message at ``index`` is one a tool added with its result: it holds
        other parts than text (an image, a file: chat endpoints take those in a user message
        only, so a tool fetching a chart returns a ``Command`` adding its result and one) and
        comes right after a tool result, a tool call (the result listed after it) or another
        such message. A text alone is a question, and so is any user message right after a
        result that ended the agent's run (:meth:`_ends_the_run`)."""
        content = messages[index].content
        if index == 0 or type(content) is not list or not split_content(content)[1]:
            return False
        before = index - 1
        if self.orphans and self.orphans[-1] == before:  # answers no call: no tool's
            return False
        if role_of(messages[before]) == "tool":
            return not direct or not self._ends_the_run(messages, before, direct)
        if self.added and self.added[-1] == before:
            return True
        last = self.units[-1] if self.units else None  # the unit of the message before
        return last is not None and last.indices[0] == before and last.kind == "tool_call"

    def _ends_the_run(
        self, messages: Sequence[BaseMessage], index: int, direct: frozenset[str]
    ) -> bool:
        """Whether the tool result at ``index`` (joined to its call) ends the agent's run: every
        tool its call's message called is in ``direct``, as ``create_agent`` ends a run."""
        call_id = _answered_call(messages[index])
        if call_id is None:
            return False
        call = self.units[self.unit_of_call[call_id]].indices[0]
        calls = tool_calls_of(cast("AIMessage", messages[call]), call)  # a tool call's unit
        return all(c["name"] in direct for c in calls)

    def _add(self, unit: Unit, counts: list[int]) -> None:
        """Adds a unit after the others (its messages' classes and owners already listed)."""
        position = len(self.units)
        self.units.append(unit)
        if unit.kind == "system":
            for index in unit.indices:
                self.classes[index] = "system"
            return
        if unit.kind == "orphan":
            self.orphans.append(unit.indices[0])
            return
        indices = unit.indices
        if len(indices) > 1:  # a tool call with its results (a cut memo's units)
            for before, index in pairwise(indices):
                if index != before + 1:
                    self.late[index] = indices[0]
        if unit.kind == "user":
            self.users.append(position)
            if not self.rounds:  # round 0 holds no history message
                self.skipped = 1
        round_ = unit.round - self.skipped
        if round_ == len(self.rounds):
            self.rounds.append([])
            self.round_tokens.append(0)
        self.rounds[round_] = [*self.rounds[round_], *unit.indices]
        self.round_tokens[round_] += sum(map(counts.__getitem__, unit.indices))
        for index in unit.indices:
            self.owner[index] = round_

    def _joined(
        self,
        message: BaseMessage,
        index: int,
        counts: list[int],
        count: Callable[[BaseMessage], int],
    ) -> bool:
        """Adds the tool result at ``index`` to the unit of the call it answers, if any."""
        call_id = _answered_call(message)
        owner = self.unit_of_call.get(call_id) if call_id is not None else None
        if owner is None:
            return False
        call = self.units[owner].indices[0]
        if call_id not in self.unanswered.get(call, ()):  # a second result of its call
            return False
        counts.append(count(message))
        self._join(owner, index, counts[index])
        rest = tuple(id_ for id_ in self.unanswered.get(call, ()) if id_ != call_id)
        if rest:
            self.unanswered[call] = rest
        else:
            self.unanswered.pop(call, None)
        return True

    def _join(self, position: int, index: int, count: int) -> None:
        """Adds the message at ``index`` (a tool result) to the unit at ``position``."""
        unit = self.units[position]
        if index != unit.indices[-1] + 1:  # another message came in between
            self.late[index] = unit.indices[0]
        self.units[position] = _unit(unit.kind, (*unit.indices, index), unit.round)
        round_ = self.owner[unit.indices[0]]  # a tool call's: a round of the history
        self.classes.append("history")
        self.owner.append(round_)
        self.round_tokens[round_] += count
        members = self.rounds[round_]
        after = members.index(unit.indices[-1]) + 1  # in unit order, as a fresh grouping
        self.rounds[round_] = [*members[:after], index, *members[after:]]


def _answered_call(message: BaseMessage | None) -> str | None:
    """The id of the tool call ``message`` answers: a ``ToolMessage``'s, or the one a
    ``ChatMessage(role="tool")`` names in ``additional_kwargs``; else ``None``."""
    if isinstance(message, ToolMessage):
        return message.tool_call_id
    if isinstance(message, ChatMessage):
        call_id = message.additional_kwargs.get("tool_call_id")
        return call_id if isinstance(call_id, str) else None
    return None


def _raw_ids(message: BaseMessage) -> tuple[str, ...]:
    """The ids of the raw calls in an ``AIMessage``'s ``additional_kwargs`` (ChatOpenAI's)."""
    raw = message.additional_kwargs.get("tool_calls")
    if not isinstance(raw, list):
        return ()
    return tuple(c["id"] for c in raw if isinstance(c, dict) and isinstance(c.get("id"), str))


def _unit(kind: UnitKind, indices: tuple[int, ...], round_: int) -> Unit:
    # A NamedTuple's own constructor is Python code; tuple.__new__ makes the same tuple in C.
    return tuple.__new__(Unit, (kind, indices, round_))


class MessageFacts(NamedTuple):
    """What a trim needs to know of each message of a conversation (shared: do not modify).

    The fields after ``units`` are what a trim derives from them, kept here so that a growing
    conversation's next trim reads them rather than walking every message again. A *history
    message* is one of a unit that is neither a system message nor an orphan; before the latest
    user message it is what the trim classes ``"history"``.

    Attributes:
        counts: Each message's tokens, framing included.
        texts: Each message's text (see :func:`~agent_latency.trimming._relevance.text_of`).
        units: The units, ordered by their first message (each message in exactly one).
        classes: Each message's class before the latest user message is known: ``"system"``
            for a system unit's, ``"history"`` for every other.
        users: The positions in ``units`` of the user messages' units, ascending.
        orphans: The positions of the orphan tool results, ascending.
        rounds: The history messages of each round holding any, oldest first, in unit order
            (round 0 left out when it holds none).
        owner: Per message, its round in ``rounds``; ``-1`` for a system or orphan message.
        round_tokens: Per round of ``rounds``, the tokens of its messages.
        unanswered: Per ``AIMessage`` with tool calls that no ``ToolMessage`` answers (by
            position), the ids of those calls; ``()`` for one whose ``tool_calls`` and
            ``invalid_tool_calls`` are empty but whose ``additional_kwargs`` still hold raw calls
            (ChatOpenAI's fallback, see :func:`raw_calls_only`).
        late: Per tool result that came apart from its call (another message between it and
            the message of its unit before it, such as a user message sent while the tool
            ran), by position, the position of its call.
        added: The positions of the user messages a tool added with its result (see
            ``_Grouping._added_by_a_tool``), ascending.
        generation: Which grouping of the messages these are: the same while a conversation only
            grows, another after an edit (what was derived from the rounds before may be stale).
        issuers: How many units issued tool-call ids (a tool result is in one of those, or an
            orphan).
    """

    counts: list[int]
    texts: list[str]
    units: list[Unit]
    classes: list[PriorityClass]
    users: list[int]
    orphans: list[int]
    rounds: list[list[int]]
    owner: list[int]
    round_tokens: list[int]
    unanswered: dict[int, tuple[str, ...]]
    late: dict[int, int]
    added: list[int]
    generation: int
    issuers: int

    def added_by_a_tool(self, index: int) -> bool:
        """Whether the message at ``index`` is a user message a tool added (:attr:`added`)."""
        at = bisect.bisect_left(self.added, index)
        return at < len(self.added) and self.added[at] == index

    def asking(self, question: int) -> list[int]:
        """The user message at ``question`` and those a tool added after it in its round: what
        its turn asks.

        A user message a tool added (an image) is the tool's, or, right after a
        ``return_direct`` tool's result when the trim was not told which tools return directly,
        the user's own next question: the position is all there is to tell them apart then, so
        its text is asked either way (a tool's caption says what the turn fetched).
        """
        added, owner = self.added, self.owner
        after = islice(added, bisect.bisect_right(added, question), None)
        return [question, *takewhile(lambda index: owner[index] == owner[question], after)]

    def query(self, question: int) -> str:
        """What the turn of the user message at ``question`` asks (:meth:`asking`), as text."""
        return "\n".join(map(self.texts.__getitem__, self.asking(question)))


def analysis(
    counter: TokenCounting,
    messages: Sequence[BaseMessage],
    direct: frozenset[str] = frozenset(),
) -> MessageFacts:
    """The facts of ``messages``, worked out afresh (what :class:`AnalysisMemo` remembers);
    ``direct``: the names of the ``return_direct`` tools, when known."""
    counts: list[int] = []
    grouping = _Grouping()
    grouping.extend(messages, counts, counter.count_message, direct)
    return grouping.facts(counts, list(map(text_of, messages)))


class _Memo(NamedTuple):
    """A conversation as last seen, and what tells its messages unchanged on the next call."""

    refs: list[weakref.ref[BaseMessage]]
    # Each message's __dict__: the same object only while it is the same message (one that
    # died cannot hand its own on, as the memo holds it) and was not re-initialised.
    dicts: list[dict[str, Any]]
    # Each message's content: the string object, or a copy of list content (see ``listed``).
    contents: list[object]
    names: list[object]  # each message's name object
    call_ids: _Group  # of the messages with a tool_call_id field: those objects
    # Of the AIMessages without calls whose additional_kwargs were not empty (else held, with
    # their empty calls, in ``compared``): whether those hold raw calls.
    raw_calls: _Group
    # Per getter of fields to compare (see edit_check), and whether they are held: copies of
    # those fields; or, when they were empty lists (an AIMessage without calls), those very
    # lists and its additional_kwargs when empty too (the same, or equal, and still empty:
    # cheaper to tell than equal to copies).
    compared: dict[tuple[Callable[[dict[str, Any]], Any], bool], _Group]
    facts: MessageFacts
    grouping: _Grouping  # not extended in place: copied first
    types: list[type[BaseMessage]]  # each message's class: what stands for its identity by value
    listed: dict[int, object]  # by position, copies of the list contents (the snapshots')
    # Its number (see _CONVERSATIONS_SEEN), kept while it grows, also into new objects equal to
    # its messages; 0 before its first message.
    conversation: int
    weight: int  # about the bytes its texts and copies hold (see _weight)


class _Group(NamedTuple):
    """Values seen of some messages, and what picks those messages' items from a list."""

    indices: list[int]  # the messages', ascending
    values: list[Any]
    pick: Callable[[list[Any]], Sequence[Any]]  # the items at ``indices`` (in C)
    held: list[list[Any]]  # the lists held, of every message (see _Memo.compared)

    @classmethod
    def of(cls, indices: list[int], values: list[Any], held: list[list[Any]]) -> _Group:
        if len(indices) == 1:  # an itemgetter of one index returns the item itself
            pick = operator.itemgetter(slice(indices[0], indices[0] + 1))
            return cls(indices, values, pick, held)
        return cls(indices, values, operator.itemgetter(*indices) if indices else _none, held)

    def cut(self, length: int) -> _Group:
        """The group of the messages before ``length``."""
        end = bisect.bisect_left(self.indices, length)
        if end == len(self.indices):
            return self
        values = self.values[:end]
        held = _held_lists(values) if self.held else []
        return _Group.of(self.indices[:end], values, held)

    def plus(self, indices: list[int], values: list[Any], held: list[list[Any]]) -> _Group:
        """The group with more messages, after its own (its lists are not changed)."""
        if not indices:
            return self
        return _Group.of(self.indices + indices, self.values + values, self.held + held)


def _none(items: list[Any]) -> tuple[()]:
    return ()


class _Seen(NamedTuple):
    """What a call reads of its messages to tell them unchanged (once per call, in C): every
    message's ``__dict__``; the content and name objects of the first ones, then of all."""

    dicts: list[dict[str, Any]]
    contents: list[object]
    names: list[object]

    @classmethod
    def of(cls, messages: list[BaseMessage], first: int) -> _Seen:
        """Reads the content and name of the ``first`` messages (to compare with as many
        remembered, without a slice of each list)."""
        seen = cls(list(map(_DICT, messages)), [], [])
        seen.complete(first)
        return seen

    def complete(self, upto: int | None = None) -> None:
        """Reads the content and name of the messages after those read, up to ``upto``."""
        start = len(self.contents)
        dicts = self.dicts[start:upto]
        try:
            self.contents.extend(map(_CONTENT, dicts))
            self.names.extend(map(_NAME, dicts))
        except KeyError:  # a field deleted from a message's __dict__: read as None
            del self.contents[start:], self.names[start:]
            self.contents.extend(map(dict.get, dicts, repeat("content")))
            self.names.extend(map(dict.get, dicts, repeat("name")))


_DICT = operator.attrgetter("__dict__")
_CONTENT = operator.itemgetter("content")
_NAME = operator.itemgetter("name")
_KWARGS = operator.itemgetter("additional_kwargs")
_TOOL_CALLS = repeat("tool_calls")


def raw_calls_only(fields: dict[str, Any]) -> bool | None:
    """Of an ``AIMessage``'s fields (its ``__dict__``): ``None`` when it has calls
    (``tool_calls`` or ``invalid_tool_calls``), else whether its ``additional_kwargs`` still
    hold raw ``"tool_calls"``, which ChatOpenAI then sends instead (they were emptied in place
    on a message it built)."""
    if fields.get("tool_calls") or fields.get("invalid_tool_calls"):
        return None
    extra = fields.get("additional_kwargs")
    return isinstance(extra, dict) and "tool_calls" in extra


class AnalysisMemo:
    """The analysis of conversations (:class:`MessageFacts`), once per message while unchanged.

    Remembers the last state of a few conversations, told apart by their first two messages
    and, among conversations opening with the same message objects (a system prompt and
    few-shot examples kept as constants, forks of one conversation), by where each parted from
    the others (a message edited in place, removed or replaced is an edit, not a parting); a
    call reuses what it remembers for the longest unchanged first part of the messages. Holds no
    message alive, and what it holds of a message that died (its ``__dict__``, copies of list
    content, text) is let go at the next call. Safe to share between threads.

    It warns of the gaps in tool calls it finds, which a trim leaves out (tool calls no result
    answers, orphan results): once per call id (the last :data:`_WARNED` remembered), not on
    every call of a conversation that keeps the gap in its history.

    Args:
        counter: Counts the messages' tokens.
        direct: The names of the tools whose result ends the agent's run (``return_direct``),
            when known: a user message right after such a result is the user's question.
    """

    def __init__(self, counter: TokenCounting, direct: frozenset[str] = frozenset()) -> None:
        self._counter = counter
        self._direct = direct
        # A memo is cut before its first message that died (whose content, copies of list
        # content and text it would otherwise hold), at the next call.
        self._memos = LRUCache(_CONVERSATIONS, on_death=_alive_part)
        # Per opening (the first messages' ids) shared by several conversations: where each
        # parted from the one remembered before it, as (position, id of its message there).
        self._partings = LRUCache(_CONVERSATIONS)
        # The latest memo of each conversation by the values of its opening (_opening_values),
        # kept past its messages' lives: a checkpointed agent's next turn brings new objects.
        self._by_values = LRUCache(CONVERSATIONS_ACROSS_TURNS, BY_VALUE_BYTES)
        self._warned = FirstTimes(_WARNED)  # the gaps warned of, by call id

    def analyse(self, messages: list[BaseMessage]) -> tuple[MessageFacts, Hashable]:
        """Returns the facts of ``messages`` and the key their conversation is remembered under
        (stable while it grows, also into new objects equal to its messages: what else is
        remembered of it can be kept under the same).

        Raises:
            ValueError: Naming the message, when its content or an ``AIMessage``'s tool calls
                were made malformed in place (see
                :func:`~agent_latency._user_input.check_message_content` and
                :func:`~agent_latency._user_input.tool_calls_of`): each message read anew (new,
                or changed since it was seen) is checked, so the caller may leave its content
                unchecked (``coerce_messages(..., check_content=False)``).
        """
        facts, key = self._analysed(messages)
        if facts.unanswered or facts.orphans:
            self._warn(messages, facts)
        return facts, key

    def _analysed(self, messages: list[BaseMessage]) -> tuple[MessageFacts, Hashable]:
        """:meth:`analyse`, the warning apart."""
        opening = tuple(map(id, messages[:_KEY_MESSAGES]))
        key = self._key(opening, messages)
        memo: _Memo = self._memos.get(key) or _EMPTY
        seen = _Seen.of(messages, len(memo.refs))
        unchanged = _unchanged(messages, seen, memo)
        if unchanged == len(memo.refs) == len(messages):
            return memo.facts, memo.conversation
        seen.complete()
        if unchanged < _KEY_MESSAGES <= len(messages):  # an opening not known by identity
            memo, unchanged = self._by_value(messages, seen, key) or (memo, unchanged)
        elif found := self._by_value(messages, seen, key, known=memo, beyond=unchanged):
            # Known by identity as far as ``unchanged``, then new objects equal to those this
            # conversation went on with: after a constant opening (a system prompt and examples),
            # its history read back from a checkpointer at a new turn.
            memo, unchanged = found
        elif _parts(messages, memo, unchanged):
            # A fork, or another conversation with the same opening: remembered apart, so that
            # both go on from theirs (its own memo, when one is left, if that goes further).
            key = self._part(opening, unchanged, id(messages[unchanged]))
            own: _Memo = self._memos.get(key) or _EMPTY
            own_unchanged = _unchanged(messages, seen, own)
            if own_unchanged > unchanged:
                memo, unchanged = own, own_unchanged
            else:  # the shared part, its messages' deaths now noted at the new key too
                memo = _truncated(memo, unchanged)
                callback = self._memos.on_death(key)
                refs = list(map(weakref.ref, messages[:unchanged], repeat(callback)))
                memo = memo._replace(refs=refs, conversation=0)  # a conversation of its own
        try:
            memo = self._extended(_truncated(memo, unchanged), messages, seen, key)
        except _Uncopyable:  # edits in place could not be told later: nothing is remembered
            return analysis(self._counter, messages, self._direct), key
        self._memos.put(key, memo)
        if len(messages) >= _KEY_MESSAGES:
            remembered_as = _opening_values(memo.types, memo.dicts, memo.facts.texts)
            self._by_values.put(remembered_as, _by_values_only(memo), max(memo.weight, 1))
        return memo.facts, memo.conversation

    def _by_value(
        self,
        messages: list[BaseMessage],
        seen: _Seen,
        key: Hashable,
        *,
        known: _Memo | None = None,
        beyond: int = _KEY_MESSAGES - 1,
    ) -> tuple[_Memo, int] | None:
        """The memo remembered of a conversation whose opening ``messages`` equal by value,
        taken over for them (at ``key``) as far as they are equal to it, and how far that is;
        ``None`` when there is none, or it goes no further than ``beyond`` messages (by default:
        it parts from them in their opening). ``known``: the memo of their opening known by
        identity, whose conversation's it must be."""
        if known is not None:
            remembered_as = _opening_values(known.types, known.dicts, known.facts.texts)
        else:
            opening = messages[:_KEY_MESSAGES]
            remembered_as = _opening_values(
                list(map(type, opening)), seen.dicts, list(map(text_of, opening))
            )
        then: _Memo | None = self._by_values.get(remembered_as)
        if then is None or len(then.types) <= beyond:
            return None
        if known is not None and then.conversation != known.conversation:
            return None
        unchanged = _unchanged(messages, seen, then, by_value=True)
        if unchanged <= beyond:
            return None
        # New references first: a cut tool call's unit reads its results' messages.
        callback = self._memos.on_death(key)
        refs = list(map(weakref.ref, messages[:unchanged], repeat(callback)))
        memo = _truncated(then._replace(refs=refs, dicts=seen.dicts), unchanged)
        compared = dict(memo.compared)
        for (getter, held), group in compared.items():
            if held:  # the new messages' own lists (still empty), held from now on
                values = list(map(getter, group.pick(seen.dicts)))
                compared[getter, held] = _Group.of(group.indices, values, _held_lists(values))
        # Another conversation where it parts from the one remembered (an edit of a copy, a fork).
        conversation = then.conversation if unchanged == len(then.types) else 0
        return memo._replace(compared=compared, conversation=conversation), unchanged

    def _warn(self, messages: list[BaseMessage], facts: MessageFacts) -> None:
        """Warns of the gaps of ``facts`` not warned of yet (by call id; by position where a
        message names none): indices only, never content."""
        named = {
            index: ids or _raw_ids(messages[index]) or (f"#{index}",)
            for index, ids in facts.unanswered.items()
        }
        calls = {index: ids for index, ids in named.items() if self._first_time("call", ids)}
        if calls:
            logger.warning(
                "Left out %d tool call(s) that no tool message answers, at message index(es) "
                "%s: an endpoint rejects a call without its result (was its ToolMessage "
                "removed?). Said once per call.",
                sum(map(len, calls.values())),
                list(calls),
            )
        orphans = [
            index
            for index in facts.orphans
            if self._first_time("result", (_answered_call(messages[index]) or f"#{index}",))
        ]
        if orphans:
            logger.warning(
                "Dropped %d tool result(s) answering no preceding tool call, or a call already "
                "answered, at message index(es) %s; check the tool_call_id of the ToolMessages "
                "you pass. Said once per call id.",
                len(orphans),
                orphans,
            )

    def _first_time(self, kind: str, ids: tuple[str, ...]) -> bool:
        """Whether any of ``ids`` (of calls, or of the calls results name) was not warned of
        yet; notes them all."""
        return any([self._warned.first((kind, id_)) for id_ in ids])  # each noted

    def _key(self, opening: tuple[int, ...], messages: list[BaseMessage]) -> Hashable:
        """The key of the conversation ``messages`` go on: the latest parting they pass through
        that is remembered, else their opening."""
        partings: tuple[tuple[int, int], ...] = self._partings.get(opening) or ()
        for at, parted in partings:  # the latest first
            if at < len(messages) and id(messages[at]) == parted:
                return (opening, at, parted)
        return opening

    def _part(self, opening: tuple[int, ...], at: int, parted: int) -> Hashable:
        """Notes that a conversation of ``opening`` parts from another at ``at``, with the
        message of id ``parted``; returns its key."""
        partings = self._partings.get(opening) or ()
        self._partings.put(opening, ((at, parted), *partings[: _PARTINGS - 1]))
        return (opening, at, parted)

    def _extended(
        self, memo: _Memo, messages: list[BaseMessage], seen: _Seen, key: Hashable
    ) -> _Memo:
        """``memo`` (which ``messages`` begin with) with the messages after it added, at ``key``
        (its lists are not changed: copied when extended)."""
        start = len(memo.refs)
        new = messages[start:]
        added: dict[tuple[Any, bool], tuple[list[int], list[Any], list[list[Any]]]] = {}
        calls: tuple[list[int], list[Any], list[list[Any]]] = ([], [], [])
        raw: tuple[list[int], list[Any], list[list[Any]]] = ([], [], [])
        listed: dict[int, object] = {}
        new_texts = list(map(text_of, new))
        weight = memo.weight + text_bytes(new_texts)
        for index, message in enumerate(new, start):
            try:
                getter, snapshot = edit_check(message)
            except Exception:
                raise _Uncopyable from None
            weight += _weight(snapshot)
            fields = seen.dicts[index]
            if type(seen.contents[index]) is list:
                # A list content is the first field its snapshot copied (see edit_check): that
                # copy stands for it, so the memo holds none of the message's own objects.
                listed[index] = snapshot[0] if type(snapshot) is tuple else snapshot
            only = raw_calls_only(fields) if "tool_calls" in fields else None
            if getter is not None:
                values = getter(fields)
                lists = _lists(values)
                held = all(type(each) is list and not each for each in lists)
                if held and only is False and fields.get("additional_kwargs") == {}:
                    # Its calls and additional_kwargs all held empty: no raw calls while they
                    # stay so (one pass in C fewer per call than asking the kwargs).
                    getter, only = getter_also(getter, "additional_kwargs"), None
                    values = getter(fields)
                    lists = _lists(values)
                indices, seen_values, seen_lists = added.setdefault((getter, held), ([], [], []))
                indices.append(index)
                seen_values.append(values if held else snapshot)
                seen_lists += lists if held else ()
            if "tool_call_id" in fields:
                calls[0].append(index)
                calls[1].append(fields["tool_call_id"])
            elif only is not None:
                raw[0].append(index)
                raw[1].append(only)
        compared = dict(memo.compared)
        for getter_held, group in added.items():
            compared[getter_held] = compared.get(getter_held, _NO_GROUP).plus(*group)
        counts = memo.facts.counts.copy()
        # A conversation's first grouping is a new one (a generation of its own), not _EMPTY's.
        grouping = memo.grouping.copy() if memo.refs else _Grouping()
        grouping.extend(messages, counts, self._counter.count_message, self._direct)
        facts = grouping.facts(counts, memo.facts.texts + new_texts)
        refs = memo.refs + list(map(weakref.ref, new, repeat(self._memos.on_death(key))))
        call_ids, raw_calls = memo.call_ids.plus(*calls), memo.raw_calls.plus(*raw)
        types = memo.types + list(map(type, new))
        listed = {**memo.listed, **listed} if listed else memo.listed
        contents = seen.contents
        for index, copied in listed.items():
            contents[index] = copied
        # The fields read by this call: those of the memo's messages (or equal), then the new.
        return _Memo(
            refs,
            seen.dicts,
            contents,
            seen.names,
            call_ids,
            raw_calls,
            compared,
            facts,
            grouping,
            types,
            listed,
            memo.conversation or next(_CONVERSATIONS_SEEN),
            weight,
        )


def _by_values_only(memo: _Memo) -> _Memo:
    """What is remembered of ``memo`` to find its conversation by value (see
    :meth:`AnalysisMemo._by_value`): nothing of its messages' own objects (their references,
    ``__dict__``, lists held: only that those were empty), so that it can outlive them."""
    compared = {
        getter_held: group._replace(values=[], held=[]) if getter_held[1] else group
        for getter_held, group in memo.compared.items()
    }
    return memo._replace(refs=[], dicts=[], compared=compared)


def _opening_values(
    types: Sequence[type[BaseMessage]], dicts: Sequence[dict[str, Any]], texts: Sequence[str]
) -> Hashable:
    """What a conversation is remembered by besides identity: the types, ids and texts of its
    first messages."""
    ids = [fields.get("id") for fields in dicts[:_KEY_MESSAGES]]
    return tuple(zip(types[:_KEY_MESSAGES], ids, texts[:_KEY_MESSAGES], strict=True))


class _Uncopyable(Exception):
    """A message's fields cannot be copied to find edits in place later."""


_NO_GROUP = _Group.of([], [], [])
_EMPTY = _Memo(
    [], [], [], [], _NO_GROUP, _NO_GROUP, {}, _Grouping().facts([], []), _Grouping(), [], {}, 0, 0
)


def _unchanged(
    messages: list[BaseMessage], seen: _Seen, memo: _Memo, *, by_value: bool = False
) -> int:
    """How many first messages are the memo's, each unchanged since it was seen; ``by_value``:
    how many are of the same types, each equal to the memo's as it was seen.

    The checks run in C over the whole conversation; only the deep comparisons concern just the
    messages with tool calls, list content or a role, and the tool-call ids just tool results.
    """
    length = min(len(messages), len(memo.types))
    if by_value:
        length = _same_before(list(map(type, messages[:length])), memo.types, length)
    elif not all(map(operator.is_, seen.dicts, memo.dicts)):  # the same messages (see _Memo)
        length = next(compress(count(), map(operator.is_not, seen.dicts, memo.dicts)))
    length = _same_before(seen.contents, memo.contents, length)
    length = _same_before(seen.names, memo.names, length)
    calls = memo.call_ids.cut(length)
    now = list(map(dict.get, calls.pick(seen.dicts), repeat("tool_call_id")))
    if now != calls.values:
        length = calls.indices[_same_before(now, calls.values, len(now))]
    raw = memo.raw_calls.cut(length)
    try:
        now = list(map(operator.contains, map(_KWARGS, raw.pick(seen.dicts)), _TOOL_CALLS))
    except (KeyError, TypeError):  # additional_kwargs deleted, or not a dict: read anew
        now = [None] * len(raw.indices)
    if now != raw.values:
        length = raw.indices[_same_before(now, raw.values, len(now))]
    for (getter, held), group in memo.compared.items():
        group = group.cut(length)
        try:
            values = list(map(getter, group.pick(seen.dicts)))
        except KeyError:  # a field deleted from a message's __dict__: read anew from there
            length = next(i for i in group.indices if not _readable(getter, seen.dicts[i]))
            group = group.cut(length)
            values = list(map(getter, group.pick(seen.dicts)))
        if held and by_value:  # lists that were empty (held no longer: _by_values_only)
            if any(_held_lists(values)):
                length = next(
                    index
                    for index, value in zip(group.indices, values, strict=True)
                    if _filled(value)
                )
            continue
        if by_value:
            # Equal and sent alike: 1, 1.0 and True are "1", "1.0" and "true", keys go in their
            # order. (An edit in place has this limit, docs/reliability.md; a new object is read
            # as it is.)
            same = list(map(_same_json, values, group.values))
            if not all(same):
                length = group.indices[same.index(False)]
        elif values != group.values or any(group.held):
            pairs = zip(group.indices, values, group.values, strict=True)
            length = next(
                index for index, value, then in pairs if value != then or (held and _filled(then))
            )
    return length


def _readable(getter: Callable[[dict[str, Any]], Any], fields: dict[str, Any]) -> bool:
    """Whether ``getter`` finds its fields in ``fields`` (a message's ``__dict__``)."""
    try:
        getter(fields)
    except KeyError:
        return False
    return True


def _same_json(value: object, copy: object) -> bool:
    """Whether ``value`` equals ``copy`` and is sent alike: every item of the same type, keys in
    the same order, and what JSON cannot hold written alike (``json.dumps(default=str)``)."""
    kind = type(value)
    if kind is not type(copy):
        return False
    if kind is str:  # the most items: names, ids, texts
        return value == copy
    if kind is dict:
        assert isinstance(value, dict) and isinstance(copy, dict)
        return list(value) == list(copy) and all(_same_json(v, copy[k]) for k, v in value.items())
    if kind is list or kind is tuple:
        assert isinstance(value, list | tuple) and isinstance(copy, list | tuple)
        return len(value) == len(copy) and all(map(_same_json, value, copy))
    return value == copy and (kind in _JSON_ATOMS or str(value) == str(copy))


_JSON_ATOMS = frozenset({int, float, bool, type(None)})


def _weight(snapshot: object) -> int:
    """About the bytes a copy of fields (see edit_check) holds: its strings', as
    :func:`~agent_latency.trimming._relevance.text_bytes` counts texts (what makes one large:
    list content's images, tool-call arguments), each container once."""
    weight, seen = 0, set()
    stack: list[Any] = [snapshot]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            weight += sys.getsizeof(item)
        elif (kind is dict or kind is list or kind is tuple) and id(item) not in seen:
            seen.add(id(item))  # a copy of a cycle is a cycle
            stack += item.values() if kind is dict else item
    return weight


def _lists(values: Any) -> tuple[Any, ...]:
    """The values of a getter of fields (a tuple when it gets several), one by one."""
    return values if type(values) is tuple else (values,)


def _held_lists(values: list[Any]) -> list[Any]:
    """The lists (and dicts) a held group's values are (see _Memo.compared), one by one: a getter of
    several fields gets a tuple of them per message."""
    if values and type(values[0]) is tuple:
        return list(chain.from_iterable(values))
    return list(values)


def _filled(held: Any) -> bool:
    """Whether a list held (see _Memo.compared), or one of a tuple of them, is not empty."""
    return any(_lists(held))


def _same_before(now: list[Any], then: list[Any], length: int) -> int:
    """How many of the first ``length`` items of ``now`` and ``then`` are equal: field values
    (a string equal to the one seen is as good as the same object; list content is compared
    with its copy), compared in C, items that are the same object quickly."""
    if len(now) > length:
        now = now[:length]
    if len(then) > length:
        then = then[:length]
    if now == then:
        return length
    return next(compress(count(), map(operator.ne, now, then)))


def _parts(messages: list[BaseMessage], memo: _Memo, at: int) -> bool:
    """Whether ``messages``, the same as ``memo``'s before ``at`` but not there, part from the
    conversation it remembers (a fork, another conversation with the same opening) rather than
    edit it: a message changed in place, removed or replaced there, the rest going on alike."""
    if not _KEY_MESSAGES <= at < min(len(memo.refs), len(messages)):
        return False
    then = memo.refs[at]()
    edited = then is messages[at] or (
        at + 1 < len(memo.refs)
        and (
            memo.refs[at + 1]() is messages[at]  # removed
            or (at + 1 < len(messages) and memo.refs[at + 1]() is messages[at + 1])  # replaced
        )
    )
    return not edited


def _truncated(memo: _Memo, length: int) -> _Memo:
    """The memo of its first ``length`` messages."""
    if length == len(memo.types):
        return memo
    units = memo.facts.units
    units_before = bisect.bisect_left(units, length, key=first_index)
    # A tool call's unit keeps only the results before the cut.
    kept = [
        unit if unit.indices[-1] < length else _unit(unit.kind, _before(unit, length), unit.round)
        for unit in units[:units_before]
    ]
    counts, texts = memo.facts.counts[:length], memo.facts.texts[:length]
    grouping = _Grouping.of(kept, counts)
    issuers_before = bisect.bisect_left(memo.grouping.issued, units_before, key=_position)
    grouping.issued = memo.grouping.issued[:issuers_before]
    # As it was (shared: copied when changed), unless cut units issued calls.
    grouping.unit_of_call, grouping.calls_shared = memo.grouping.unit_of_call, True
    if issuers_before < len(memo.grouping.issued):
        grouping.unit_of_call = {id_: unit for unit, ids in grouping.issued for id_ in ids}
        grouping.calls_shared = False
    grouping.round = kept[-1].round if kept else 0
    grouping.unanswered = _unanswered(memo, kept, length)
    added = memo.grouping.added
    grouping.added = added[: bisect.bisect_left(added, length)]
    compared = {getter: group.cut(length) for getter, group in memo.compared.items()}
    snapshots = (group.values for (_, held), group in compared.items() if not held)
    weight = text_bytes(texts) + sum(map(_weight, chain.from_iterable(snapshots)))
    return _Memo(
        memo.refs[:length],
        memo.dicts[:length],
        memo.contents[:length],
        memo.names[:length],
        memo.call_ids.cut(length),
        memo.raw_calls.cut(length),
        compared,
        grouping.facts(counts, texts),
        grouping,
        memo.types[:length],
        {index: copied for index, copied in memo.listed.items() if index < length},
        memo.conversation,
        weight,
    )


def _unanswered(memo: _Memo, kept: list[Unit], length: int) -> dict[int, tuple[str, ...]]:
    """The tool calls of ``kept`` (the memo's units before ``length``, a tool call's cut after
    its results before ``length``) that none of those results answers."""
    unanswered = {call: ids for call, ids in memo.grouping.unanswered.items() if call < length}
    for position, ids in memo.grouping.issued:
        if position >= len(kept):
            break
        unit = kept[position]
        if unit is not memo.facts.units[position]:  # results cut: they answer no longer
            answered = {_answered_call(memo.refs[index]()) for index in unit.indices}
            if rest := tuple(id_ for id_ in ids if id_ not in answered):
                unanswered[unit.indices[0]] = rest
    return dict(sorted(unanswered.items()))


def _alive_part(memo: _Memo) -> _Memo | None:
    """The memo cut before its first dead message; ``None`` when that is one its key names."""
    alive = map(operator.call, memo.refs)
    dead = next(compress(count(), map(operator.is_, alive, repeat(None))), None)
    if dead is None:  # the memo at the key is now another conversation's
        return memo
    return None if dead < _KEY_MESSAGES else _truncated(memo, dead)


def first_index(unit: Unit) -> int:
    """The position of a unit's first message (what orders the units)."""
    return unit.indices[0]


def _position(issuer: tuple[int, tuple[str, ...]]) -> int:
    return issuer[0]


def _before(unit: Unit, length: int) -> tuple[int, ...]:
    return tuple(index for index in unit.indices if index < length)
