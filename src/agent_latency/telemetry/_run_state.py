"""What the callback handler remembers about each LangChain run while it is open: its state,
in a :class:`RunRegistry` that hands each out exactly once and stays bounded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.messages import BaseMessage
from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from agent_latency._trace_link import PendingTrim
from agent_latency.telemetry._log import logger

_PRUNE_CHILDREN_EVERY = 256
"""A run's list of children is cleared of ended ones each time it reaches a multiple of this."""


@dataclass(slots=True, eq=False)
class RunState:
    """An open run: its span (``None`` for runs we keep out of the trace) and its children.

    Attributes:
        run_id: LangChain's id of the run.
        parent_run_id: LangChain's id of the enclosing run, if any.
        span: The run's span, or ``None`` when the run is transparent in the trace.
        context: The context children start in: the run's span, or its parent's context.
        children: Ids of the runs started under this one (some may have ended already).
        pending_trim: A trim reported in this run or handed on by a child run that ended, not
            yet attached to a model call.
        task: For a run in asyncio: the task it started in (not always the one that carries
            it on: ``abatch`` starts runs in a short-lived ``gather`` task).
        task_watch: For a root run whose cancellation LangChain does not report: the
            done-callback on ``task`` that ends the run if the task finishes first.
        reader: For such a run: the task that read its first chunk, when not ``task``; the
            run ends with it at the latest if ``task`` ends first without being cancelled.
    """

    run_id: UUID
    parent_run_id: UUID | None
    span: Span | None
    context: Context
    children: list[UUID] = field(default_factory=list)
    pending_trim: PendingTrim | None = None
    task: asyncio.Task[object] | None = None
    task_watch: Callable[[asyncio.Task[object]], None] | None = None
    reader: asyncio.Task[object] | None = None


@dataclass(slots=True, eq=False)
class ModelRunState(RunState):
    """An open chat-model (or completion-model) call and its timing so far.

    Times are ``perf_counter_ns`` readings. Only chunks that carry content count: LangChain's
    empty end-of-stream chunk and a role-only first delta say nothing about when text arrived.

    Attributes:
        model: The requested model, or ``None`` when the integration does not say.
        started_ns: When the call started.
        stall_ns: A wait between chunks longer than this is a stall.
        messages: The prompt, kept by reference for the token estimate at the end.
        tools: The tool definitions sent with it, for the same estimate.
        metric_attributes: The low-cardinality attributes of the call's metrics.
        streamed: Whether the request asked to stream, any token callback arrived or it failed
            inside the model's streaming method.
        first_chunk_ns: When the first content chunk arrived.
        last_chunk_ns: When the latest content chunk arrived.
        chunks: Content chunks so far.
        max_gap_ns: Longest wait between content chunks so far.
        stalls: How many waits exceeded ``stall_ns``.
        trim: The trim that prepared this call, when there was one.
        server: The endpoint's host and port, when the integration says.
        last_delivery: The latest chunk (or stream event) delivered, so the same one delivered
            again, to a handler listed twice, is not counted twice.
        by_events: Whether the call's chunks are timed from the streaming protocol's events
            (``on_stream_event``) rather than token callbacks, once the first of either came: a
            model whose ``_stream`` reports its tokens, driven by the protocol's bridge, reports
            each chunk both ways.
        read_in: Where its first chunk was delivered: the thread and asyncio task (see
            :func:`running_in`).
    """

    model: str | None = None
    started_ns: int = 0
    stall_ns: int = 0
    messages: Sequence[BaseMessage] | None = None
    tools: Sequence[Any] = ()
    metric_attributes: dict[str, AttributeValue] = field(default_factory=dict)
    streamed: bool = False
    first_chunk_ns: int | None = None
    last_chunk_ns: int = 0
    chunks: int = 0
    max_gap_ns: int = 0
    stalls: int = 0
    trim: PendingTrim | None = None
    server: tuple[str, int] | None = None
    last_delivery: object = None
    by_events: bool | None = None
    read_in: tuple[int, asyncio.Task[Any] | None] | None = None

    def add_chunk(self, now_ns: int) -> int:
        """Records a content chunk arriving at ``now_ns``; returns the wait before it when that
        was a stall, else 0."""
        self.chunks += 1
        if self.first_chunk_ns is None:
            self.first_chunk_ns = self.last_chunk_ns = now_ns
            return 0
        gap = now_ns - self.last_chunk_ns
        self.last_chunk_ns = now_ns
        return self._account_gap(gap)

    def close_stream(self, end_ns: int) -> int:
        """Accounts for the wait from the last chunk to the call's end (a server that stalls,
        then fails, sends no chunk to end the gap); returns it when it was a stall, else 0. Not
        for a stream its consumer left: its chunks were there to read."""
        if self.first_chunk_ns is None:
            return 0
        return self._account_gap(end_ns - self.last_chunk_ns)

    @property
    def chunk_spread_ms(self) -> float | None:
        """From the first content chunk to the last (0 for one chunk); ``None`` without one."""
        if self.first_chunk_ns is None:
            return None
        return (self.last_chunk_ns - self.first_chunk_ns) / 1e6

    def _account_gap(self, gap: int) -> int:
        """Adds a wait between chunks to the figures; returns it when it was a stall, else 0."""
        if gap > self.max_gap_ns:
            self.max_gap_ns = gap
        if gap > self.stall_ns:
            self.stalls += 1
            return gap
        return 0


def current_task() -> asyncio.Task[Any] | None:
    """The asyncio task the calling code runs in; ``None`` outside one."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop in this thread
        return None


def running_in() -> tuple[int, asyncio.Task[Any] | None]:
    """The thread and the asyncio task (``None`` outside one) the calling code runs in."""
    return threading.get_ident(), current_task()


class RunRegistry:
    """The open runs of one handler, keyed by ``run_id``, bounded in size.

    Reads are lock-free (a dict lookup is atomic); adding and removing take a lock so that a run
    is handed out for finalisation exactly once even when callbacks come from several threads.

    Args:
        max_runs: Most runs kept open; adding one more evicts the oldest.
        on_evict: Called (outside the lock) with each evicted state, to end it.
    """

    def __init__(self, max_runs: int, on_evict: Callable[[RunState], None]) -> None:
        self._runs: dict[UUID, RunState] = {}
        self._lock = threading.Lock()
        self._max_runs = max_runs
        self._on_evict = on_evict
        self._evictions = 0

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def get(self, run_id: UUID | None) -> RunState | None:
        """Returns the open run ``run_id``, or ``None``."""
        if run_id is None:
            return None
        return self._runs.get(run_id)

    def add(self, state: RunState) -> RunState | None:
        """Registers a new open run, evicting the oldest if the registry is full; returns its
        parent when that is open (the run is listed among its children), else ``None``."""
        evicted: list[RunState] = []
        with self._lock:
            previous = self._runs.pop(state.run_id, None)
            if previous is not None:
                evicted.append(previous)  # a reused run_id: the old run can no longer end
            while len(self._runs) >= self._max_runs:
                oldest = next(iter(self._runs))
                evicted.append(self._runs.pop(oldest))
            self._runs[state.run_id] = state
            parent = self._runs.get(state.parent_run_id) if state.parent_run_id else None
            if parent is not None:
                children = parent.children
                children.append(state.run_id)
                if len(children) % _PRUNE_CHILDREN_EVERY == 0:
                    # A long-lived run (an agent loop) must not remember every child forever.
                    children[:] = [child for child in children if child in self._runs]
        for old in evicted:
            self._evictions += 1
            if self._evictions == 1 or self._evictions % 1000 == 0:
                logger.warning(
                    "agent-latency: %d run(s) ended without an end callback so far; the "
                    "handler keeps at most %d open runs and ends the oldest (is a stream kept "
                    "open without being consumed?)",
                    self._evictions,
                    self._max_runs,
                )
            self._on_evict(old)
        return parent

    def pop(self, run_id: UUID) -> RunState | None:
        """Removes and returns the open run ``run_id``; ``None`` if it was already handed out."""
        with self._lock:
            return self._runs.pop(run_id, None)

    def take_trim(self, run_id: UUID | None) -> PendingTrim | None:
        """Takes the trim waiting nearest to ``run_id``: on it, or on an enclosing run."""
        run = self.get(run_id)
        while run is not None:
            pending = run.pending_trim
            if pending is not None:
                run.pending_trim = None
                return pending
            run = self.get(run.parent_run_id)
        return None

    def hand_on_trim(self, ended: RunState) -> None:
        """Gives the enclosing run the trim an ended run still holds: it prepared a later call
        (the next step, or a LangGraph ``pre_model_hook``'s sibling ``agent`` node)."""
        parent = self.get(ended.parent_run_id)
        if ended.pending_trim is not None and parent is not None:
            parent.pending_trim = ended.pending_trim
