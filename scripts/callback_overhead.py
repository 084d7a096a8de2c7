"""What the latency callback handler adds to a streamed model call, per chunk and per call.

The same fake streams (GenericFakeChatModel, no network) are consumed with no handler, with a
handler that does nothing (what LangChain itself spends to call any handler), with
agent-latency's LatencyCallbackHandler, and with the official OpenTelemetry LangChain handler
(``opentelemetry-instrumentation-genai-langchain``, attached explicitly, no global patching),
interleaved round by round so machine noise hits all of them alike. Both real handlers get the
same SDK providers: spans are recorded (sampled, not exported), metrics aggregated in memory.

Added cost per chunk is measured on a long stream (2,000 chunks by default); added cost per call
on a one-chunk call. Targets: at most 5 µs per chunk, and no more than the official handler.

Run: ``python scripts/callback_overhead.py [--chunks 2000] [--rounds 15]``. The official
handler is optional: ``pip install --pre opentelemetry-instrumentation-genai-langchain``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time
from collections.abc import Callable

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from agent_latency.telemetry import LatencyCallbackHandler

PER_CHUNK_TARGET_US = 5.0


class BenchModel(GenericFakeChatModel):
    """GenericFakeChatModel with a model name (the official handler skips unnamed models)."""

    model: str = "bench-model"


class NoopHandler(BaseCallbackHandler):
    """Does nothing: what remains is LangChain's own cost of dispatching to a handler."""

    run_inline = True


def answer(chunks: int) -> AIMessage:
    """An answer GenericFakeChatModel streams in about ``chunks`` chunks (words, spaces)."""
    return AIMessage(content=" ".join(["tok"] * ((chunks + 1) // 2)))


def official_handler(
    tracer_provider: TracerProvider, meter_provider: MeterProvider
) -> BaseCallbackHandler | None:
    try:
        from opentelemetry.instrumentation.genai.langchain.callback_handler import (
            OpenTelemetryLangChainCallbackHandler,
        )
        from opentelemetry.util.genai.handler import TelemetryHandler
    except ImportError:
        return None
    telemetry = TelemetryHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return OpenTelemetryLangChainCallbackHandler(telemetry_handler=telemetry)


def time_sync(handlers: list[BaseCallbackHandler], message: AIMessage) -> tuple[float, int]:
    model = BenchModel(messages=iter([message]))
    count = 0
    started = time.perf_counter()
    for _ in model.stream("hi", config={"callbacks": handlers}):
        count += 1
    return time.perf_counter() - started, count


def time_async(handlers: list[BaseCallbackHandler], message: AIMessage) -> tuple[float, int]:
    async def consume() -> tuple[float, int]:
        model = BenchModel(messages=iter([message]))
        count = 0
        started = time.perf_counter()
        async for _ in model.astream("hi", config={"callbacks": handlers}):
            count += 1
        return time.perf_counter() - started, count

    return asyncio.run(consume())


def measure(
    timer: Callable[[list[BaseCallbackHandler], AIMessage], tuple[float, int]],
    variants: dict[str, list[BaseCallbackHandler]],
    message: AIMessage,
    rounds: int,
) -> tuple[dict[str, float], int]:
    """Fastest seconds per call of each variant, run interleaved in shuffled order.

    The fastest of several rounds is the one least disturbed by other processes; interleaving
    gives every variant the same chances.
    """
    samples: dict[str, list[float]] = {name: [] for name in variants}
    chunks = 0
    for handlers in variants.values():  # warm-up: imports, caches, first spans
        timer(handlers, message)
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            gc.collect()
            elapsed, chunks = timer(variants[name], message)
            samples[name].append(elapsed)
    return {name: min(values) for name, values in samples.items()}, chunks


def report(
    title: str,
    timer: Callable[[list[BaseCallbackHandler], AIMessage], tuple[float, int]],
    variants: dict[str, list[BaseCallbackHandler]],
    chunks: int,
    rounds: int,
) -> dict[str, tuple[float, float]]:
    long_run, streamed = measure(timer, variants, answer(chunks), rounds)
    short_run, _ = measure(timer, variants, answer(1), rounds * 4)
    print(f"\n{title}: {streamed} chunks per long call, fastest of {rounds} rounds")
    print(f"{'handler':<16}{'long call ms':>14}{'added µs/chunk':>16}{'added µs/call':>15}")
    added: dict[str, tuple[float, float]] = {}
    for name in variants:
        per_chunk = (long_run[name] - long_run["none"]) / streamed * 1e6
        per_call = (short_run[name] - short_run["none"]) * 1e6
        added[name] = (per_chunk, per_call)
        shown = ("—", "—") if name == "none" else (f"{per_chunk:.2f}", f"{per_call:.0f}")
        print(f"{name:<16}{long_run[name] * 1e3:>14.2f}{shown[0]:>16}{shown[1]:>15}")
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2000, help="chunks of the long stream")
    parser.add_argument("--rounds", type=int, default=15, help="measurements per variant")
    args = parser.parse_args(argv)
    if args.chunks < 2 or args.rounds < 1:
        parser.error("--chunks must be >= 2 and --rounds >= 1")

    tracer_provider = TracerProvider()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    ours = LatencyCallbackHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)
    variants: dict[str, list[BaseCallbackHandler]] = {
        "none": [],
        "no-op handler": [NoopHandler()],
        "agent-latency": [ours],
    }
    official = official_handler(tracer_provider, meter_provider)
    if official is None:
        print(
            "official handler: not installed; run "
            "`pip install --pre opentelemetry-instrumentation-genai-langchain` to compare"
        )
    else:
        variants["official OTel"] = [official]

    sync_added = report("sync stream()", time_sync, variants, args.chunks, args.rounds)
    async_added = report(
        "async astream()", time_async, variants, args.chunks, max(3, args.rounds // 3)
    )

    per_chunk, _ = sync_added["agent-latency"]
    lines = [
        "",
        f"agent-latency adds {per_chunk:.2f} µs per chunk to a sync stream "
        f"(target <= {PER_CHUNK_TARGET_US} µs): "
        + ("met" if per_chunk <= PER_CHUNK_TARGET_US else "MISSED"),
    ]
    if "official OTel" in sync_added:
        official_chunk, _ = sync_added["official OTel"]
        lines.append(
            f"the official handler adds {official_chunk:.2f} µs per chunk; agent-latency "
            + ("adds no more: met" if per_chunk <= official_chunk else "adds more: MISSED")
        )
    # What LangChain spends to call any handler at all is in the no-op row; the rest is ours.
    own = [
        f"{mode} {added['agent-latency'][0] - added['no-op handler'][0]:.2f} µs"
        for mode, added in (("sync", sync_added), ("async", async_added))
    ]
    lines.append(f"agent-latency's own share per chunk, above a no-op handler: {', '.join(own)}")
    print("\n".join(lines))
    print(f"python {sys.version.split()[0]}, open runs left: {ours.open_runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
