"""What is remembered while it stays true: :class:`LRUCache`, the one bounded map every cache is
built on; :func:`stamp` and :func:`unchanged`, the one rule for telling a message was edited in
place; :class:`MessageCache`, a value per (message, key) while the message lives unchanged; and
:class:`CopiesByValue`, the text a message was made into, for an equal message read back later.
"""

from __future__ import annotations

import copy
import functools
import operator
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any, Final

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

CONVERSATIONS_ACROSS_TURNS: Final = 256
"""How many conversations a trimmer remembers from one turn to the next where it keeps them past
their messages' lives (by value, their term index, their scores; each cache bounded by bytes
too): a service's threads interleave between one thread's turns, and a thread missed there has
its whole history read again."""

# Entries whose object died, as (cache, key): appended by weakref callbacks, which the garbage
# collector can run while a thread holds a cache's lock, so they only note it; let go at the next
# get or put of any cache (a trimmer's every call uses one), outside every lock.
_GONE: deque[tuple[weakref.ref[LRUCache], Hashable]] = deque()


class LRUCache:
    """A bounded least-recently-used map, safe to share between threads.

    An entry about an object can end with it: a weak reference to the object made with
    :meth:`on_death` as its callback lets go of the entry (or of its dead part, see ``on_death``)
    once the object is gone, at the next ``get`` or ``put`` of any cache.

    Args:
        max_entries: How many entries it holds at most.
        max_weight: The most total weight (e.g. bytes) it holds; ``None``: no limit. An entry
            heavier alone is not kept (nor what was at its key), and lets no other go.
        on_death: What is left of an entry once an object it is about died (``None``: nothing);
            ``None``: the entry is removed.
    """

    def __init__(
        self,
        max_entries: int,
        max_weight: int | None = None,
        *,
        on_death: Callable[[Any], Any] | None = None,
    ) -> None:
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._max_entries = max_entries
        self._max_weight = max_weight
        self._weight = 0
        self._left = on_death
        # Without it, another thread can evict a key between get() and move_to_end().
        self._lock = threading.Lock()

    def on_death(self, key: Hashable) -> Callable[[weakref.ref[Any]], None]:
        """Returns a weakref callback that lets go of the entry at ``key`` (see the class)."""
        noted = (weakref.ref(self), key)
        return lambda _: _GONE.append(noted)

    def get(self, key: Hashable) -> Any:
        if _GONE:
            _let_go()
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return None
            self._data.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: Any, weight: int = 1) -> None:
        if _GONE:
            _let_go()
        with self._lock:
            old = self._data.pop(key, None)
            self._weight -= old[1] if old else 0
            if self._max_weight is not None and weight > self._max_weight:
                return  # never kept: the others are not let go for it
            self._weight += weight
            self._data[key] = (value, weight)
            while len(self._data) > self._max_entries or (
                self._max_weight is not None and self._weight > self._max_weight
            ):
                self._weight -= self._data.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._data)

    def _expire(self, key: Hashable) -> None:
        # Another thread may have put an entry about a newer object at the key since: at worst
        # it is cut or lost, never wrong (every user checks that an entry's objects are alive).
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return
            left = self._left(found[0]) if self._left is not None else None
            if left is None:
                del self._data[key]
                self._weight -= found[1]
            else:
                self._data[key] = (left, found[1])


class FirstTimes:
    """The keys met lately (the last ``max_keys``), to say something once per key: safe to
    share between threads (two first meetings at once: one is the first)."""

    def __init__(self, max_keys: int) -> None:
        self._met: OrderedDict[Hashable, None] = OrderedDict()
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        """Whether ``key`` is met for the first time (of those remembered); notes it."""
        with self._lock:
            if key in self._met:
                self._met.move_to_end(key)
                return False
            self._met[key] = None
            if len(self._met) > self._max_keys:
                self._met.popitem(last=False)
            return True


def _let_go() -> None:
    while _GONE:
        # The deaths noted so far, each note once (objects of one entry die together, a list
        # let go); then those noted meanwhile (objects that what was let go held alive).
        batch = []
        while _GONE:
            try:
                batch.append(_GONE.popleft())
            except IndexError:  # another thread took the last one
                break
        handled = set()
        for noted in batch:
            if id(noted) in handled:
                continue
            handled.add(id(noted))
            cache, key = noted
            found = cache()
            if found is not None:
                found._expire(key)


# What a message's count depends on: fields checked by identity while they are strings (or
# None), and fields compared with a deep copy (a ChatMessage's role, tool calls; and its
# additional_kwargs, where a ChatMessage(role="tool") names the call it answers).
IDENTITY_FIELDS: Final = ("content", "name", "tool_call_id")
_COMPARED_FIELDS: Final = ("role", "tool_calls", "invalid_tool_calls")
_CHAT_MESSAGE_FIELDS: Final = ("additional_kwargs",)  # with "role": only a ChatMessage has one
_TEXT: Final = (str, type(None))  # a tuple: isinstance of a union is slower


def edit_check(message: BaseMessage) -> tuple[Callable[[dict[str, Any]], Any] | None, Any]:
    """Returns what finds in-place edits of a message that identity checks of
    :data:`IDENTITY_FIELDS` miss (list content, tool calls, a ``ChatMessage``'s role and
    ``additional_kwargs``).

    Returns:
        A getter of those fields from the message's ``__dict__`` (one object per set of fields)
        and a deep copy of their values: the message is unchanged while
        ``getter(message.__dict__) == snapshot``. ``(None, None)`` when identity suffices.

    Raises:
        Exception: Whatever ``copy.deepcopy`` raises for values that cannot be copied.
    """
    fields = message.__dict__
    compared = [name for name in IDENTITY_FIELDS if not isinstance(fields.get(name), _TEXT)]
    compared += [name for name in _COMPARED_FIELDS if name in fields]
    if "role" in fields:
        compared += _CHAT_MESSAGE_FIELDS
    if not compared:
        return None, None
    getter = _getter(tuple(compared))
    values = getter(fields)
    try:
        return getter, _copied(values)
    except RecursionError:  # nested too deeply, or a cycle
        return getter, copy.deepcopy(values)


_ATOMS: Final = frozenset({str, int, float, bool, type(None)})


def _copied(value: Any) -> Any:
    """A deep copy of ``value``: of JSON-like data (what tool calls and content parts hold)
    without ``copy.deepcopy``'s bookkeeping, of anything else by it."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list:
        return [_copied(item) for item in value]
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is tuple:
        return tuple(_copied(item) for item in value)
    return copy.deepcopy(value)


Stamp = tuple[Any, ...]
"""What :func:`stamp` returns: a message's fields as seen, to tell in-place edits later."""


def stamp(message: BaseMessage) -> Stamp:
    """Returns what tells later whether ``message`` was edited in place (see :func:`unchanged`).

    The same content, name and tool-call id objects, and the other fields equal to a copy taken
    now (:func:`edit_check`, which raises what ``copy.deepcopy`` raises for values that cannot
    be copied). Known limit: an edit to an equal value of another type (``1`` to ``1.0``) is not
    seen, though its JSON differs by a token or two.
    """
    fields = message.__dict__
    getter, snapshot = edit_check(message)
    return (fields["content"], fields.get("name"), fields.get("tool_call_id"), getter, snapshot)


def unchanged(message: BaseMessage, seen: Stamp) -> bool:
    """Whether ``message`` is as it was when ``seen`` was stamped (see :func:`stamp`)."""
    fields = message.__dict__
    return (
        seen[0] is fields["content"]
        and seen[1] is fields.get("name")
        and seen[2] is fields.get("tool_call_id")
        and (seen[3] is None or seen[3](fields) == seen[4])
    )


@functools.cache
def _getter(names: tuple[str, ...]) -> Callable[[dict[str, Any]], Any]:
    # One getter per set of fields, so that callers can group messages by it.
    getter = operator.itemgetter(*names)
    _FIELDS[getter] = names
    return getter


_FIELDS: dict[Callable[[dict[str, Any]], Any], tuple[str, ...]] = {}
"""The fields each getter of :func:`_getter` gets."""


def getter_also(
    getter: Callable[[dict[str, Any]], Any], name: str
) -> Callable[[dict[str, Any]], Any]:
    """The getter of :func:`edit_check` that gets the fields ``getter`` gets and ``name`` (one
    per set of fields, like those)."""
    return _getter((*_FIELDS[getter], name))


class MessageCache:
    """A bounded, thread-safe map from (a message, a key about it) to what it yields.

    A value must not hold the message itself: the entry ends when the message dies, which a
    strong reference in the value would prevent.

    Args:
        max_entries: How many entries it holds at most.
        max_weight: The most total weight (e.g. bytes of text) of the values; ``None``: no limit.
    """

    def __init__(self, max_entries: int, max_weight: int | None = None) -> None:
        self._cache = LRUCache(max_entries, max_weight)

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, message: BaseMessage, key: Hashable) -> Any:
        """Returns what was put for ``message`` at ``key``, or ``None`` (gone, edited, never)."""
        entry = self._cache.get(key)
        if entry is not None and entry[0]() is message and unchanged(message, entry[1]):
            return entry[2]
        return None

    def put(self, message: BaseMessage, key: Hashable, value: Any, weight: int = 1) -> None:
        """Remembers ``value`` for ``message`` at ``key`` (include ``id(message)`` in the key).

        Content that cannot be copied is not remembered: its edits could not be told later.
        """
        try:
            seen = stamp(message)
        except Exception:
            return
        entry = (weakref.ref(message, self._cache.on_death(key)), seen, value)
        self._cache.put(key, entry, weight)


class CopiesByValue:
    """The text copies of messages were given (shortened, compacted), remembered past the
    messages' lives by their values: a checkpointed agent's history comes back at each new turn
    as new objects, equal to the last turn's, and each is given the same text again without
    its being worked out anew. Safe to share between threads.

    Only tool results and user messages of text content, told apart by their type, name and
    tool-call id, what the copy is for (``purpose``), and of the text its length and ends
    (hashing a long text read back anew costs more than a look-up saves: the whole is compared on
    a hit); other messages are made anew each time.

    Args:
        max_entries: How many texts it remembers.
        max_bytes: How many characters of texts and copies' texts it holds at most.
    """

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        # Per key: the text, then the copy's text (None: the message as it is) and its tokens.
        self._cache = LRUCache(max_entries, max_bytes)

    def copy_of(
        self,
        message: BaseMessage,
        purpose: Hashable,
        make: Callable[[BaseMessage], tuple[BaseMessage, int]],
    ) -> tuple[BaseMessage, int]:
        """Returns ``make(message)`` (a copy of ``message`` that differs in its text only, or
        ``message`` itself, and its tokens), or for a message equal to one made for the same
        ``purpose`` before, a copy of it with the text that one was given."""
        key, remembered = self._found(message, purpose)
        if remembered is None:
            return self._made(key, message, make)
        _, made_text, count = remembered
        if made_text is None:
            return message, count
        return message.model_copy(update={"content": made_text}), count

    def count_of(
        self,
        message: BaseMessage,
        purpose: Hashable,
        make: Callable[[BaseMessage], tuple[BaseMessage, int]],
    ) -> int:
        """The tokens of :meth:`copy_of`'s copy, which is not made for a message found by value
        (a plan weighs every old tool result, and sends few of them)."""
        key, remembered = self._found(message, purpose)
        return self._made(key, message, make)[1] if remembered is None else remembered[2]

    def _found(
        self, message: BaseMessage, purpose: Hashable
    ) -> tuple[Hashable | None, tuple[str, str | None, int] | None]:
        """The key ``message`` is remembered by for ``purpose`` (``None``: it is not, by its
        kind), and what is remembered there of a message equal to it, if any."""
        fields = message.__dict__
        text = fields.get("content")
        if type(message) not in _BY_VALUE or type(text) is not str:
            return None, None
        key = (
            type(message),
            (len(text), text[:_ENDS], text[-_ENDS:]),
            fields.get("name"),
            fields.get("tool_call_id"),
            purpose,
        )
        remembered: tuple[str, str | None, int] | None = self._cache.get(key)
        return key, remembered if remembered is not None and remembered[0] == text else None

    def _made(
        self,
        key: Hashable | None,
        message: BaseMessage,
        make: Callable[[BaseMessage], tuple[BaseMessage, int]],
    ) -> tuple[BaseMessage, int]:
        """``make(message)``, remembered at ``key`` (if any)."""
        copy, count = make(message)
        if key is not None:
            text = str(message.content)
            made_text = None if copy is message else str(copy.content)
            self._cache.put(key, (text, made_text, count), len(text) + len(made_text or ""))
        return copy, count


_ENDS: Final = 64
"""The characters of each end of a text that tell it apart (with its length)."""
_BY_VALUE: Final = frozenset({ToolMessage, HumanMessage})
