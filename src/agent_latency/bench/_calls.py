"""One measured model call: the time to first token as the callback handler records it, the
server's usage as :func:`agent_latency._server_usage.usage_of_message` reads it.

Every call of the bench (single-turn modes, replay, prefill sweep, mixed workload) goes through
:class:`CallMeter`, so the bench measures the first token exactly as an application running
:class:`~agent_latency.telemetry.LatencyCallbackHandler` does, and reads every provider's usage
and cached tokens with the project's one reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.runnables import Runnable

from agent_latency._server_usage import ServerUsage, usage_of_message
from agent_latency.telemetry import LatencyCallbackHandler, LatencyRecord

# The bench reports every call itself; the handler's per-call threshold logs would only
# interleave with the progress line, so its thresholds are set out of reach.
_NO_THRESHOLD_MS: Final = 1e12


@dataclass(frozen=True)
class MeasuredCall:
    """What one model call measured.

    Attributes:
        ttft_ms: The handler's time to the first content chunk (the total for a blocking call).
        total_ms: The handler's time to the end of the answer.
        usage: What the server reported (``None`` fields where it said nothing).
        text: The answer's text.
        server_prefill_ms: The handler's split of the first token: how long the server said it
            prefilled (llama.cpp's ``timings``, vLLM's ``metrics``); ``None`` where it did not.
        ttft_remainder_ms: The rest of the time to first token: client, network and queue.
    """

    ttft_ms: float
    total_ms: float
    usage: ServerUsage
    text: str
    server_prefill_ms: float | None = None
    ttft_remainder_ms: float | None = None


class CallMeter:
    """Measures calls of chat models built with :attr:`callbacks`.

    Args:
        chunk_timeout_ms: The handler's stall threshold.
    """

    def __init__(self, *, chunk_timeout_ms: float = 800) -> None:
        self._records: list[LatencyRecord] = []
        self._handler = LatencyCallbackHandler(
            ttft_warn_ms=_NO_THRESHOLD_MS,
            ttft_error_ms=_NO_THRESHOLD_MS,
            chunk_timeout_ms=chunk_timeout_ms,
            log_every_request=False,
            on_record=self._records.append,
        )

    @property
    def callbacks(self) -> list[LatencyCallbackHandler]:
        """The callbacks a measured model is built with."""
        return [self._handler]

    def stream(self, model: Runnable[Any, Any], messages: list[BaseMessage]) -> MeasuredCall:
        """Streams one call and measures it (``model``: a chat model built with
        :attr:`callbacks`, maybe bound to tools).

        Raises:
            openai.APIError: When the call fails; the caller explains it.
            RuntimeError: When the handler did not record exactly one answered call.
        """
        self._records.clear()
        merged: AIMessageChunk | None = None
        for chunk in model.stream(messages):
            merged = chunk if merged is None else merged + chunk
        return self._measured(merged)

    def invoke(self, model: Runnable[Any, Any], messages: list[BaseMessage]) -> MeasuredCall:
        """Makes one blocking call and measures it (``model``: a chat model built with
        :attr:`callbacks`, maybe bound to tools).

        Raises:
            openai.APIError: When the call fails; the caller explains it.
            RuntimeError: When the handler did not record exactly one answered call.
        """
        self._records.clear()
        answer = model.invoke(messages)
        return self._measured(answer if isinstance(answer, AIMessage) else None)

    def _measured(self, answer: AIMessage | None) -> MeasuredCall:
        if len(self._records) != 1:
            raise RuntimeError(
                f"Bench: the latency handler recorded {len(self._records)} calls for one request; "
                "see the agent_latency log."
            )
        record = self._records[0]
        if record.ttft_ms is None:
            raise RuntimeError(f"Bench: the call ended without an answer ({record.outcome}).")
        return MeasuredCall(
            ttft_ms=record.ttft_ms,
            total_ms=record.total_ms,
            usage=usage_of_message(answer),
            text=str(answer.text) if answer is not None else "",
            server_prefill_ms=record.server_prefill_ms,
            ttft_remainder_ms=record.ttft_remainder_ms,
        )
