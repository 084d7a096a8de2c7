"""What the cost-aware trimmer keeps of a conversation between calls: its latest call.

A :class:`LatestCall` records what the call sent (told by content, so that another process can
read it: see ``_fingerprints``), when, and what the server then reported of its cache. The
callback handler passes the report on through the trim result's ``on_usage``;
``TrimmingMiddleware`` also reads it from the model's answer. The record is held in memory per
conversation key and, as the plain JSON value of :meth:`LatestCall.to_state`, in an agent's
state, where the user's LangGraph checkpointer carries it across restarts and replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, get_args

from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from agent_latency._validation import (
    checked_bool,
    checked_int,
    checked_number,
    is_integer,
    is_number,
)
from agent_latency.trimming._cache_state import NO_HITS, CacheState, Hits, held, hits_after
from agent_latency.trimming._decisions import Action, Rule
from agent_latency.trimming._fingerprints import sequence_digest

logger = logging.getLogger("agent_latency.trimming")

STATE_FORMAT: Final = 1
"""The version of :meth:`LatestCall.to_state`'s value; another version is read as no record."""

_ACTIONS: Final = frozenset(get_args(Action))
_RULES: Final = frozenset(get_args(Rule))
_STATES: Final = frozenset(get_args(CacheState))
# A record's own fields (digests, counts, the state) before its actions and shortened copies.
_RECORD_BYTES: Final = 512


@dataclass(slots=True, eq=False)
class LatestCall:
    """A conversation's latest call as sent, and what the server reported of it.

    Attributes:
        inputs: How many input messages the call had.
        inputs_digest: The digest of those messages, in order.
        actions: What was done to each input message, and by which rule.
        shortened: The copies sent in place of the shortened input messages, by index.
        request_digest: The digest of the tools and response format sent.
        level: The budget the prompt was cut to (a deep cut's, or the cut's); an append keeps
            the one of the prompt it extends.
        input_tokens: The input messages' tokens.
        at: When, by the trimmer's clock, in seconds.
        growth: Tokens the conversation adds per call, smoothed.
        state: The cache state the call was sent assuming.
        expected: Tokens at the start of its prompt (tool definitions included) that the
            previous call's prompt began with: what a warm cache held of it.
        missed: Whether, as of the call before, the server did not hold what it had been sent.
        miss_after_ms: A first token later than this says the server did not hold the expected
            prefix; ``None`` when the predictions are too close to tell.
        reported_cached: The server's cached prompt tokens of the call, once reported.
        timed_miss: Whether the call's first token came after ``miss_after_ms``, once reported.
        hits: How often the server held the conversation's prompts before this call (not
            counting its report: :meth:`hits_after`).
    """

    inputs: int
    inputs_digest: bytes
    actions: tuple[tuple[Action, Rule], ...]
    shortened: Mapping[int, BaseMessage]
    request_digest: bytes
    level: int
    input_tokens: int
    at: float
    growth: float
    state: CacheState
    expected: int
    missed: bool
    miss_after_ms: float | None = None
    reported_cached: int | None = None
    timed_miss: bool | None = None
    hits: Hits = NO_HITS

    def report_usage(
        self, prompt_tokens: int | None, cached_tokens: int | None, ttft_ms: float | None
    ) -> None:
        """Takes the server's usage and the time to first token of the call (``on_usage`` of
        the trim result).

        Args:
            prompt_tokens: The server's ``prompt_tokens`` (unused: the expected prefix is ours).
            cached_tokens: The prompt tokens it reported cached; ``None``: not reported.
            ttft_ms: The call's time to first token; ``None``: not streamed, or no token.
        """
        # One write each: safe across threads.
        if is_integer(cached_tokens):
            self.reported_cached = max(int(cached_tokens), 0)
        elif self.miss_after_ms is not None and is_number(ttft_ms):
            self.timed_miss = ttft_ms > self.miss_after_ms

    @property
    def weight(self) -> int:
        """About the bytes the record holds: its shortened copies' text, and the rest."""
        copies = sum(
            len(c.content) if isinstance(c.content, str) else len(str(c.content))
            for c in self.shortened.values()
        )
        return _RECORD_BYTES + 16 * len(self.actions) + copies

    def held(self) -> bool | None:
        """What this call's report says of the cache (see ``_cache_state.held``)."""
        return held(
            state=self.state,
            expected=self.expected,
            reported_cached=self.reported_cached,
            timed_miss=self.timed_miss,
        )

    def hits_after(self) -> Hits:
        """How often the server held the conversation's prompts, this call's report included."""
        return hits_after(self.hits, self.held())

    def server_missed(self) -> bool:
        """Whether, as of this call's report, the server does not hold what it was sent."""
        found = self.held()
        return self.missed if found is None else not found

    def extended_by(self, digests: Sequence[bytes]) -> bool:
        """Whether the messages of ``digests`` are this call's input with others after it."""
        return len(digests) >= self.inputs and (
            sequence_digest(digests[: self.inputs]) == self.inputs_digest
        )

    def sent_prompt(self, inputs: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages this call sent, made of ``inputs``, which must extend its input."""
        shortened = self.shortened
        return [
            shortened.get(index, inputs[index])
            for index, (action, _) in enumerate(self.actions)
            if action != "dropped"
        ]

    def to_state(self) -> dict[str, Any]:
        """The record as a plain JSON value, for an agent's state (a checkpointer stores it)."""
        runs: list[list[Any]] = []
        for action, rule in self.actions:
            if runs and runs[-1][1] == action and runs[-1][2] == rule:
                runs[-1][0] += 1
            else:
                runs.append([1, action, rule])
        return {
            "format": STATE_FORMAT,
            "inputs": self.inputs,
            "inputs_digest": self.inputs_digest.hex(),
            "actions": runs,
            "shortened": [[i, message_to_dict(m)] for i, m in sorted(self.shortened.items())],
            "request_digest": self.request_digest.hex(),
            "level": self.level,
            "input_tokens": self.input_tokens,
            "at": self.at,
            "growth": self.growth,
            "state": self.state,
            "expected": self.expected,
            "missed": self.missed,
            "miss_after_ms": self.miss_after_ms,
            "reported_cached": self.reported_cached,
            "timed_miss": self.timed_miss,
            "hits": list(self.hits),
        }

    @classmethod
    def from_state(cls, value: object) -> LatestCall | None:
        """The record :meth:`to_state` gave; ``None`` (logged) for anything else.

        Stored state is read from outside the process: whatever it holds, a record that cannot
        be read only means the conversation's next call is taken as its first.
        """
        if value is None:
            return None
        try:
            return _read(value)
        except Exception as exc:  # whatever the storage gave back: no record, never a crash
            logger.warning(
                "agent-latency: the cost-aware record in the agent's state cannot be read (%s); "
                "the conversation's next call is taken as its first.",
                exc,
            )
            return None


def _read(value: object) -> LatestCall:
    if not isinstance(value, Mapping):
        raise TypeError(f"a mapping expected, got {type(value).__name__}")
    if value.get("format") != STATE_FORMAT:
        raise ValueError(f"format {value.get('format')!r}, not {STATE_FORMAT}")
    actions: list[tuple[Action, Rule]] = []
    for count, action, rule in value["actions"]:
        if not (is_integer(count) and count > 0 and action in _ACTIONS and rule in _RULES):
            raise ValueError(f"an invalid action run {[count, action, rule]!r}")
        actions.extend([(action, rule)] * count)
    inputs = _count(value, "inputs")
    if len(actions) != inputs:
        raise ValueError(f"{len(actions)} actions for {inputs} input messages")
    shortened: dict[int, BaseMessage] = {}
    for index, message in value["shortened"]:
        if not (is_integer(index) and 0 <= index < inputs and actions[index][0] == "shortened"):
            raise ValueError(f"a shortened copy at {index!r} for no shortened message")
        (shortened[index],) = messages_from_dict([message])
    if len(shortened) != sum(action == "shortened" for action, _ in actions):
        raise ValueError("a shortened message without its copy")
    state = value["state"]
    if state not in _STATES:
        raise ValueError(f"an unknown cache state {state!r}")
    return LatestCall(
        inputs=inputs,
        inputs_digest=bytes.fromhex(value["inputs_digest"]),
        actions=tuple(actions),
        shortened=shortened,
        request_digest=bytes.fromhex(value["request_digest"]),
        level=_count(value, "level"),
        input_tokens=_count(value, "input_tokens"),
        at=_number(value, "at"),
        growth=_number(value, "growth"),
        state=state,
        expected=_count(value, "expected"),
        missed=_flag(value, "missed"),
        miss_after_ms=_optional(value, "miss_after_ms", _number),
        reported_cached=_optional(value, "reported_cached", _count),
        timed_miss=_optional(value, "timed_miss", _flag),
        hits=_hits(value["hits"]),
    )


_OWNER: Final = "the cost-aware record"


def _count(value: Mapping[str, Any], name: str) -> int:
    return checked_int(_OWNER, name, value[name], minimum=0)


def _number(value: Mapping[str, Any], name: str) -> float:
    return checked_number(_OWNER, name, value[name])


def _flag(value: Mapping[str, Any], name: str) -> bool:
    return checked_bool(_OWNER, name, value[name])


def _hits(value: Any) -> Hits:
    held_calls, calls = value
    hits = (
        checked_number(_OWNER, "hits", held_calls, minimum=0),
        checked_number(_OWNER, "hits", calls, minimum=0, above=True),
    )
    if hits[0] > hits[1]:
        raise ValueError(f"hits: {hits[0]} held of {hits[1]} calls")
    return hits


def _optional(value: Mapping[str, Any], name: str, read: Any) -> Any:
    return None if value.get(name) is None else read(value, name)
