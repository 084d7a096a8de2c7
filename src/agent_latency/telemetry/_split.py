"""Where a call's time to first token went: the server's prefill (and a blocking call's decode)
by the server's own word, and the remainder (client, network, queue). Where the server says
nothing, or more than the client waited, there is no split: absent, never wrong."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

SPLIT_TOLERANCE: Final = 0.05
"""The server's parts may exceed the client's wait by this share (clocks and rounding) and no
more: a server reporting more time than the client waited is not believed."""

BUFFERED_MEAN_GAP_MS: Final = 1.0
"""Chunks closer together than this on average were released at once by a buffer (1,000
tokens/s); LangChain's own work between two chunks takes about 0.25 ms on a loaded machine."""

MIN_JUDGED_CHUNKS: Final = 4
"""Fewer content chunks than this say nothing about buffering."""


@dataclass(frozen=True, slots=True)
class TtftSplit:
    """A call's time to first token in parts that add up to it.

    Attributes:
        ttft_ms: The time to first token the client measured (a blocking call's: its total).
        server_prefill_ms: How long the server says it prefilled.
        server_decode_ms: A blocking call's: how long the server says it generated the answer,
            which the first text waits for; ``None`` for a streamed call.
        remainder_ms: The rest: client, network and the server's queue (never below 0).
        prefilled_tokens: The prompt tokens the server prefilled, if it said.
    """

    ttft_ms: float
    server_prefill_ms: float
    server_decode_ms: float | None
    remainder_ms: float
    prefilled_tokens: int | None = None

    def describe(self, *, unseen_ms: float | None = None) -> str:
        """The split in words: ``of 1,420 ms to the first token: 1,310 ms prefill of 1,845
        uncached tokens, 110 ms client, network and queue``.

        Args:
            unseen_ms: Of the remainder, how long the server generated before the first
                content chunk (:func:`held_back_ms`), named apart when given.
        """
        tokens = self.prefilled_tokens
        plural = "" if tokens == 1 else "s"
        prefilled = "" if tokens is None else f" of {tokens:,} uncached token{plural}"
        decode = self.server_decode_ms
        decoded = "" if decode is None else f", {decode:,.0f} ms decoding the answer"
        rest = self.remainder_ms
        if unseen_ms:
            decoded += f", {unseen_ms:,.0f} ms generating before the first content chunk"
            rest -= unseen_ms
        return (
            f"of {self.ttft_ms:,.0f} ms to the first token: {self.server_prefill_ms:,.0f} ms "
            f"prefill{prefilled}{decoded}, {rest:,.0f} ms client, network and queue"
        )


def split_ttft(
    ttft_ms: float | None,
    *,
    prefill_ms: float | None,
    decode_ms: float | None = None,
    prefilled_tokens: int | None = None,
    streamed: bool,
) -> TtftSplit | None:
    """Splits a call's time to first token by what the server reported about it.

    Args:
        ttft_ms: The time to first token measured, ``None`` when there is none.
        prefill_ms: How long the server says it prefilled (``ServerUsage.prefill_ms``).
        decode_ms: How long it says it generated the answer (``ServerUsage.decode_ms``).
        prefilled_tokens: The prompt tokens it prefilled (``ServerUsage.prefilled_tokens``).
        streamed: Whether the call streamed; a blocking call's split needs the decode time too.

    Returns:
        The split, or ``None`` when the server did not say enough or said more time than the
        client waited (more than :data:`SPLIT_TOLERANCE` over it).
    """
    if ttft_ms is None or prefill_ms is None:
        return None
    decode = None if streamed else decode_ms
    if not streamed and decode is None:
        return None
    server_ms = prefill_ms + (decode or 0.0)
    if server_ms > ttft_ms * (1 + SPLIT_TOLERANCE):
        return None
    return TtftSplit(ttft_ms, prefill_ms, decode, max(0.0, ttft_ms - server_ms), prefilled_tokens)


class SlowCause(Enum):
    """What held up a slow first token, as the chunks and the server tell it."""

    BUFFERED = "buffered"
    """The chunks arrived at once: the client or a proxy held the stream back."""
    UNSEEN_OUTPUT = "unseen_output"
    """The server generated for most of the wait before the first content chunk: reasoning
    tokens that are no content, or a tool call sent whole."""
    QUEUE_OR_NETWORK = "queue_or_network"
    """Most of the wait was not the server's prefill: client, network or the server's queue."""
    PREFILL = "prefill"
    """Most of the wait was the server's prefill: the prompt's uncached tokens."""
    UNKNOWN = "unknown"
    """The server did not say how long it prefilled."""


def is_buffered(chunks: int, mean_chunk_gap_s: float | None) -> bool:
    """Whether a stream's chunks arrived in one burst (a mean gap under
    :data:`BUFFERED_MEAN_GAP_MS`, over at least :data:`MIN_JUDGED_CHUNKS` chunks)."""
    return (
        chunks >= MIN_JUDGED_CHUNKS
        and mean_chunk_gap_s is not None
        and mean_chunk_gap_s * 1e3 < BUFFERED_MEAN_GAP_MS
    )


def held_back_ms(
    split: TtftSplit | None, spread_ms: float | None, server_decode_ms: float | None
) -> float | None:
    """How long the server generated before a stream's first content chunk, by its own word:
    its decode time less the chunks' ``spread_ms`` (a buffer, a reasoning model's thinking or a
    tool call sent whole), never below 0 nor above the split's remainder; ``None`` when the
    server did not say or no content arrived."""
    if server_decode_ms is None or spread_ms is None:
        return None
    held_ms = max(0.0, server_decode_ms - spread_ms)
    return held_ms if split is None else min(held_ms, split.remainder_ms)


def slow_cause(split: TtftSplit | None, *, buffered: bool, held_ms: float | None) -> SlowCause:
    """What held up a first token: the largest of the server's prefill, the output it generated
    before the first content chunk (``held_ms``: a buffer when ``buffered``, else unseen output)
    and the rest; without ``held_ms``, a burst is taken for a buffer."""
    if split is None or held_ms is None:
        if buffered:
            return SlowCause.BUFFERED
        if split is None:
            return SlowCause.UNKNOWN
        held_ms = 0.0
    server_ms = split.server_prefill_ms + (split.server_decode_ms or 0.0)
    rest_ms = split.remainder_ms - held_ms
    if held_ms > server_ms and held_ms > rest_ms:
        return SlowCause.BUFFERED if buffered else SlowCause.UNSEEN_OUTPUT
    if rest_ms > server_ms:
        return SlowCause.QUEUE_OR_NETWORK
    return SlowCause.PREFILL
