"""Time to first token on a growing conversation against a real caching server (llama-server).

One conversation of a public set (the shipped LongMemEval subset, or LoCoMo's ``locomo10.json``
where you have it) grows one turn per call; each call is the system prompt, every turn before
it and the user turn, trimmed by a strategy and streamed to the server with a 4-token answer.
Strategies run one after another, each from an empty cache (a request that shares nothing
with the next strategy's is sent in between). Per strategy it prints the tokens sent, the
server's cached prompt tokens (llama-server's ``timings.cache_n``, or
``usage.prompt_tokens_details.cached_tokens``), the uncached ones, and the mean, median and
p95 time to first token.

Run against llama-server with one slot (``make bench-real`` builds it)::

    python scripts/growing_ttft.py --base-url http://127.0.0.1:PORT/v1 --model smollm2 \\
        --data /path/to/locomo10.json --turns 120 --budget 1500
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import BaseMessage, convert_to_openai_messages

from agent_latency.bench import cache_first_strategies, growing_calls, load_public_set
from agent_latency.tokens import TokenCounter

_DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "longmemeval_s_20k.json.gz"


def _stream(client: httpx.Client, model: str, messages: list[BaseMessage]) -> dict[str, Any]:
    """Streams one call; returns its time to first token and the server's counts."""
    body = {
        "model": model,
        "messages": convert_to_openai_messages(messages),
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    with client.stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and any(
                (c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()
            ):
                first = time.perf_counter()
            usage = chunk.get("usage") or usage
            timings = chunk.get("timings") or timings
    ended = time.perf_counter()
    prompt = usage.get("prompt_tokens", 0)
    cached = timings.get("cache_n")
    if cached is None:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"ttft_ms": ((first or ended) - started) * 1000, "prompt": prompt, "cached": cached}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default=str(_DATA))
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--strategies", default="default,age_1_1,send_everything")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    conversation = load_public_set(args.data)[args.conversation]
    calls = list(growing_calls(conversation, args.turns))
    counter = TokenCounter.for_model(args.model, tokenizer="server", base_url=args.base_url)
    factories = cache_first_strategies(counter)
    rows = []
    base = args.base_url.rstrip("/")
    # No kept-alive connection: llama-server may close one between two strategies.
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=base, timeout=600, limits=limits) as client:
        for name in args.strategies.split(","):
            strategy = factories[name](args.budget)
            _stream(client, args.model, [calls[0][0].model_copy(update={"content": name})])
            per_call = [_stream(client, args.model, strategy(messages)) for messages in calls]
            ttft = [c["ttft_ms"] for c in per_call]
            row = {
                "strategy": name,
                "calls": len(per_call),
                "mean_prompt": statistics.mean(c["prompt"] for c in per_call),
                "mean_cached": statistics.mean(c["cached"] for c in per_call),
                "mean_ttft_ms": statistics.mean(ttft),
                "median_ttft_ms": statistics.median(ttft),
                "p95_ttft_ms": sorted(ttft)[max(round(0.95 * len(ttft)) - 1, 0)],
                "per_call": per_call,
            }
            rows.append(row)
            print(
                f"{name:16s} prompt {row['mean_prompt']:7.0f} cached {row['mean_cached']:7.0f} "
                f"uncached {row['mean_prompt'] - row['mean_cached']:6.0f} "
                f"TTFT mean {row['mean_ttft_ms']:7.0f} median {row['median_ttft_ms']:7.0f} "
                f"p95 {row['p95_ttft_ms']:7.0f} ms",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
