"""Which caches of the trim path pay: each one switched off, side by side with all of them on.

Three growing conversations are trimmed call by call, as ``growing_trim_cost.py`` grows its
chat (up to ``--messages``, 4,000-token budget, the Qwen counter):

- ``chat``: the LongMemEval chat of ``growing_trim_cost.py`` (a system message, then user and
  assistant turns), the default ``PriorityTrimmer``;
- ``dicts``: the same chat as OpenAI-format dicts, converted anew on every call (as an app that
  keeps its history as JSON does), so no message object is seen twice;
- ``agent``: the same chat as an agent loop (each question answered after a tool call whose
  result is large; trimmed before each model call: after the question and after the result),
  with 12 tools, ``tool_budget=300`` and ``compact_tool_results=True``.

Every call of a conversation goes, interleaved, to a trimmer with every cache on and to one
trimmer per cache with only that cache off (each trimmer with its own counter). A cache is
switched off by putting a cache that remembers nothing in its place (or, for the conversation
memo, a new memo before every call; for the tool choices, which every trimmer shares, around
the call). Printed per cache and conversation: the median CPU ms of a
call with the cache off over the calls from ``--from`` messages on, and the ratio off / on
(above 1: the cache saves that share; the machine is shared, so ratios within about 0.05 of 1
are noise). Caches a conversation does not use print ``-``.

Run: ``python scripts/trim_caches.py [--messages 700] [--from 300]`` (about six minutes of CPU;
fifteen on the shared machine).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from growing_trim_cost import real_chat  # the same real chat (scripts/ is on the path)
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

_BUDGET = 4000
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} of the user's records.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    for name in (
        "search_notes",
        "read_calendar",
        "list_orders",
        "get_weather",
        "find_recipe",
        "book_flight",
        "track_parcel",
        "read_email",
        "send_email",
        "list_contacts",
        "convert_units",
        "translate_text",
    )
]


class _Off:
    """A cache that remembers nothing (the interface of the package's bounded caches)."""

    def get(self, *_: object) -> None:
        return None

    def put(self, *_: object, **__: object) -> None:
        return None

    def on_death(self, key: Hashable) -> Callable[[object], None]:
        return lambda _: None

    def __len__(self) -> int:
        return 0


class _Forgetful(dict[Any, Any]):
    """A dict that stores nothing: for the counter's caches that are plain dicts."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


_TOOLS_MODULE = sys.modules[PriorityTrimmer.__module__.rpartition(".")[0] + "._tools"]


@contextlib.contextmanager
def _no_tool_choices() -> Iterator[None]:
    """The tool choices every trimmer shares, switched off around a call."""
    kept = _TOOLS_MODULE._CHOICES
    _TOOLS_MODULE._CHOICES = _Off()
    try:
        yield
    finally:
        _TOOLS_MODULE._CHOICES = kept


def _fresh_memo(trimmer: PriorityTrimmer) -> None:
    trimmer._analyses = type(trimmer._analyses)(trimmer.token_counter)


def _set(path: str) -> Callable[[PriorityTrimmer], None]:
    """Switches off the cache at ``path`` (attributes from the trimmer) once, at the start."""
    *owners, name = path.split(".")

    def switch(trimmer: PriorityTrimmer) -> None:
        owner: Any = trimmer
        for attribute in owners:
            owner = getattr(owner, attribute)
        empty = _Forgetful() if isinstance(getattr(owner, name), dict) else _Off()
        setattr(owner, name, empty)

    return switch


# Per cache: what switches it off, and whether before every call (True) or once.
CACHES: dict[str, tuple[Callable[[PriorityTrimmer], None], bool]] = {
    "counter: per message object": (_set("token_counter._by_identity"), False),
    "counter: per message content": (_set("token_counter._by_content"), False),
    "conversation memo (_rounds)": (_fresh_memo, True),
    "term counts per text": (_set("term_cache._cache"), False),
    "scores and stable parts": (_set("term_cache.scores"), False),
    "term index per conversation": (_set("_term_index._indexed"), False),
    "request extras (tools)": (_set("_extras_counter._cache"), False),
    "shortened copies": (_set("_shortener._cache"), False),
    "compaction stubs": (_set("compactor._cache"), False),
    "tool choices (shared)": (lambda trimmer: None, False),
}


def _agent(chat: list[BaseMessage]) -> list[BaseMessage]:
    """The chat with a tool call and a large result before every assistant answer."""
    turns: list[BaseMessage] = []
    for index, message in enumerate(chat):
        if message.type == "ai":
            call = f"call_{index}"
            turns.append(
                AIMessage("", tool_calls=[{"name": "search_notes", "args": {}, "id": call}])
            )
            turns.append(ToolMessage(f"{message.text}\n" * 4, tool_call_id=call))
        turns.append(message)
    return turns


def _calls(name: str, messages: int) -> Iterator[Callable[[], object]]:
    """Per call of a conversation, what gives the trimmer its input."""
    chat = real_chat(messages)
    system = SystemMessage("You are a helpful assistant. Answer briefly.")
    turns = _agent(chat) if name == "agent" else chat
    calls_after = ("human", "tool") if name == "agent" else ("human",)
    for end in range(1, len(turns) + 1):
        if turns[end - 1].type not in calls_after:
            continue
        conversation = [system, *turns[:end]]
        if name == "dicts":
            wire = [{"role": _ROLES[m.type], "content": m.text} for m in conversation]
            yield lambda wire=wire: [dict(m) for m in wire]
        else:
            yield lambda conversation=conversation: conversation


_ROLES = {"system": "system", "human": "user", "ai": "assistant"}


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _count_messages(messages: int, start: int) -> tuple[float, float]:
    """The median ms of ``count_messages`` of the growing chat, with the per-object cache on
    and off."""
    on, off = TokenCounter.for_model("qwen"), TokenCounter.for_model("qwen")
    _set("_by_identity")(off)  # type: ignore[arg-type]
    system = SystemMessage("You are a helpful assistant. Answer briefly.")
    chat = real_chat(messages)
    times: tuple[list[float], list[float]] = ([], [])
    for end in range(start, len(chat) + 1):
        conversation = [system, *chat[:end]]
        for counter, kept in zip((on, off), times, strict=True):
            started = time.process_time()
            counter.count_messages(conversation)
            kept.append((time.process_time() - started) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def _trimmer(name: str) -> PriorityTrimmer:
    counter = TokenCounter.for_model("qwen")
    if name == "agent":
        return PriorityTrimmer(
            _BUDGET,
            token_counter=counter,
            tools=_TOOLS,
            tool_budget=300,
            compact_tool_results=True,
        )
    return PriorityTrimmer(_BUDGET, token_counter=counter)


def _run(name: str, messages: int, start: int) -> dict[str, tuple[float, float]]:
    """Per cache, the median ms of a call with it off and the ratio off / on."""
    on = _trimmer(name)
    off = {cache: _trimmer(name) for cache in CACHES}
    for cache, (switch, every_call) in CACHES.items():
        if not every_call:
            switch(off[cache])
    times: dict[str, list[float]] = {cache: [] for cache in ["", *CACHES]}
    size = 0
    for make in _calls(name, messages):
        given = make()
        size = len(given)  # type: ignore[arg-type]
        for cache, trimmer in [("", on), *off.items()]:
            switch, every_call = CACHES.get(cache, (None, False))
            if every_call and switch is not None:
                switch(trimmer)
            given = make()
            off_around = _no_tool_choices() if cache == "tool choices (shared)" else _nothing()
            with off_around:
                started = time.process_time()
                trimmer.trim(given)
                ended = time.process_time()
            if size >= start:
                times[cache].append((ended - started) * 1000)
    base = statistics.median(times[""])
    return {
        cache: (statistics.median(t), statistics.median(t) / base) for cache, t in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=700)
    parser.add_argument("--from", dest="start", type=int, default=300)
    args = parser.parse_args(argv)
    names = ("chat", "dicts", "agent")
    results = {name: _run(name, args.messages, args.start) for name in names}
    print(f"median CPU ms per call from {args.start} messages on; ratio = cache off / all on")
    print(f"{'cache':<30}" + "".join(f"{name + ' ms':>11}{'ratio':>7}" for name in names))
    for cache in ["", *CACHES]:
        row = f"{cache or 'all caches on':<30}"
        for name in names:
            ms, ratio = results[name][cache]
            row += f"{ms:>11.2f}{ratio:>7.2f}"
        print(row)
    on, off = _count_messages(args.messages, args.start)
    print(
        f"count_messages of the chat: {on:.2f} ms with the counter's per-object cache, "
        f"{off:.2f} ms without (ratio {off / on:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
