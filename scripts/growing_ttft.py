"""Time to first token on growing conversations against a real caching server (llama-server).

Conversations of a public set (the shipped LongMemEval subset, or LoCoMo's ``locomo10.json``
where you have it) grow one turn per call; each call is the system prompt, every turn before
it and the user turn, trimmed by a strategy and streamed to the server with a 4-token answer.
With ``--conversations K`` the K conversations from ``--conversation`` on grow in turn,
round-robin (call 1 of each, then call 2 of each, ...), as K users of one server do, each with
its own strategy instance; with ``--concurrent`` their calls are sent at once, a thread per
conversation. Strategies run one after another, each from empty slots (before each, a request
that shares nothing with any prompt goes to every slot of the server, ``total_slots`` of
llama-server's ``/props``, else one per conversation). Per strategy, overall and per
conversation, it prints the tokens sent, the server's cached prompt tokens (llama-server's
``timings.cache_n``, or ``usage.prompt_tokens_details.cached_tokens``), the uncached ones, the
mean, median and p95 time to first token, and, when the server lists its slots (llama-server's
``/slots``; calls in turn only), which slot served the calls and how many found their slot
last used by another conversation (whose prompt they then replaced).

Run against llama-server with two slots (``make bench-real`` builds it)::

    python scripts/growing_ttft.py --base-url http://127.0.0.1:PORT/v1 --model smollm2 \\
        --data /path/to/locomo10.json --conversations 2 --turns 120 --budget 1500
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import BaseMessage, SystemMessage, convert_to_openai_messages

from agent_latency.bench import cache_first_strategies, growing_calls, load_public_set
from agent_latency.tokens import TokenCounter

_DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "longmemeval_s_20k.json.gz"
# Long enough that the chat framing it shares with every prompt is under 10% of it, so
# llama-server (--slot-prompt-similarity 0.1) sends it to the least recently used slot.
_RESET_WORDS = 80

Call = dict[str, Any]
Strategy = Callable[[list[BaseMessage]], list[BaseMessage]]
Replays = dict[int, tuple[Strategy, list[list[BaseMessage]]]]
"""By conversation (its index in the data set): its strategy instance and its calls."""


def _client(base_url: str) -> httpx.Client:
    # No kept-alive connection: llama-server may close one between two strategies.
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(base_url=base_url, timeout=600, limits=limits)


def _stream(client: httpx.Client, model: str, messages: list[BaseMessage]) -> Call:
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


def _server_json(client: httpx.Client, path: str) -> Any:
    """GETs one of llama-server's own endpoints (beside ``/v1``); ``None`` where there is none."""
    try:
        response = client.get(str(client.base_url).removesuffix("/v1/") + path)
    except httpx.HTTPError:
        return None
    return response.json() if response.is_success else None


def _last_slot(client: httpx.Client) -> int | None:
    """The slot that served the latest request (llama-server's ``/slots``: the latest task)."""
    slots = _server_json(client, "/slots")
    if not isinstance(slots, list) or not slots:
        return None
    served = max(slots, key=lambda slot: slot.get("id_task", -1))
    return int(served["id"]) if "id_task" in served else None


def _empty_slots(client: httpx.Client, model: str, name: str, conversations: int) -> None:
    """Replaces the prompt of every slot with one that shares nothing with any other."""
    props = _server_json(client, "/props")
    slots = props.get("total_slots") if isinstance(props, dict) else None
    for index in range(slots if isinstance(slots, int) and slots > 0 else conversations):
        words = " ".join(f"{name}-{index}-{n}" for n in range(_RESET_WORDS))
        _stream(client, model, [SystemMessage(content=words)])


def _in_turn(client: httpx.Client, model: str, replays: Replays) -> list[Call]:
    """Sends call 1 of each conversation, then call 2 of each, ...; notes each one's slot."""
    sent: list[Call] = []
    for index in range(max(len(calls) for _strategy, calls in replays.values())):
        for conversation, (strategy, calls) in replays.items():
            if index < len(calls):
                call = _stream(client, model, strategy(calls[index]))
                call.update(conversation=conversation, call=index, slot=_last_slot(client))
                sent.append(call)
    return sent


def _at_once(base_url: str, model: str, replays: Replays) -> list[Call]:
    """Sends each conversation's calls in order, on a thread per conversation, all at once."""

    def replay(conversation: int) -> list[Call]:
        strategy, calls = replays[conversation]
        sent = []
        with _client(base_url) as client:
            for index, messages in enumerate(calls):
                call = _stream(client, model, strategy(messages))
                call.update(conversation=conversation, call=index, slot=None)
                sent.append(call)
        return sent

    with ThreadPoolExecutor(max_workers=len(replays)) as pool:
        return [call for sent in pool.map(replay, replays) for call in sent]


def _displaced(sent: list[Call]) -> set[int]:
    """The calls (by position in ``sent``) served by a slot another conversation used last."""
    holder: dict[int, int] = {}
    displaced = set()
    for position, call in enumerate(sent):
        if call["slot"] is None:
            continue
        if holder.get(call["slot"], call["conversation"]) != call["conversation"]:
            displaced.add(position)
        holder[call["slot"]] = call["conversation"]
    return displaced


def _figures(calls: list[Call]) -> dict[str, Any]:
    ttft = [c["ttft_ms"] for c in calls]
    prompt = statistics.mean(c["prompt"] for c in calls)
    cached = statistics.mean(c["cached"] for c in calls)
    return {
        "calls": len(calls),
        "mean_prompt": prompt,
        "mean_cached": cached,
        "mean_uncached": prompt - cached,
        "mean_ttft_ms": statistics.mean(ttft),
        "median_ttft_ms": statistics.median(ttft),
        "p95_ttft_ms": sorted(ttft)[max(round(0.95 * len(ttft)) - 1, 0)],
    }


def _line(label: str, figures: dict[str, Any]) -> str:
    line = (
        f"{label:16s} prompt {figures['mean_prompt']:7.0f} cached {figures['mean_cached']:7.0f} "
        f"uncached {figures['mean_uncached']:6.0f} "
        f"TTFT mean {figures['mean_ttft_ms']:7.0f} median {figures['median_ttft_ms']:7.0f} "
        f"p95 {figures['p95_ttft_ms']:7.0f} ms"
    )
    if figures.get("slots"):
        slots = ", ".join(f"{slot}: {n}" for slot, n in sorted(figures["slots"].items()))
        line += f"; slots {slots}; after another conversation {figures['displaced']}"
    return line


def _row(name: str, sent: list[Call]) -> dict[str, Any]:
    displaced = _displaced(sent)
    for position, call in enumerate(sent):
        call["displaced"] = position in displaced
    row: dict[str, Any] = {"strategy": name, **_figures(sent), "conversations": []}
    for conversation in sorted({c["conversation"] for c in sent}):
        own = [c for c in sent if c["conversation"] == conversation]
        figures = _figures(own)
        served = Counter(c["slot"] for c in own if c["slot"] is not None)
        if served:
            figures.update(slots=dict(served), displaced=sum(c["displaced"] for c in own))
        row["conversations"].append({"conversation": conversation, **figures})
    row["per_call"] = sent
    return row


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default=str(_DATA))
    parser.add_argument("--conversation", type=int, default=0, help="the first conversation")
    parser.add_argument(
        "--conversations", type=_positive, default=1, help="how many, in turn (default: 1)"
    )
    parser.add_argument(
        "--concurrent", action="store_true", help="send their calls at once, a thread each"
    )
    parser.add_argument("--turns", type=_positive, default=120)
    parser.add_argument("--budget", type=_positive, default=1500)
    parser.add_argument("--strategies", default="default,age_1_1,send_everything")
    parser.add_argument(
        "--tokenizer", default="server", help="the trimmers' (default: the server's /tokenize)"
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    dataset = load_public_set(args.data)
    chosen = range(args.conversation, args.conversation + args.conversations)
    if args.conversation < 0 or chosen.stop > len(dataset):
        parser.error(
            f"--conversation {args.conversation} --conversations {args.conversations}: "
            f"{args.data} holds conversations 0 to {len(dataset) - 1}"
        )
    calls = {index: list(growing_calls(dataset[index], args.turns)) for index in chosen}
    counter = TokenCounter.for_model(args.model, tokenizer=args.tokenizer, base_url=args.base_url)
    factories = cache_first_strategies(counter)
    unknown = sorted(set(args.strategies.split(",")) - set(factories))
    if unknown:
        parser.error(f"--strategies: unknown {', '.join(unknown)}; known: {', '.join(factories)}")
    rows = []
    base = args.base_url.rstrip("/")
    with _client(base) as client:
        for name in args.strategies.split(","):
            replays = {index: (factories[name](args.budget), own) for index, own in calls.items()}
            _empty_slots(client, args.model, name, len(calls))
            if args.concurrent:
                sent = _at_once(base, args.model, replays)
            else:
                sent = _in_turn(client, args.model, replays)
            row = _row(name, sent)
            rows.append(row)
            print(_line(name, row), flush=True)
            if len(calls) > 1:
                for figures in row["conversations"]:
                    label = f"  conversation {figures['conversation']}"
                    print(_line(label, figures), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
