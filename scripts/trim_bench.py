"""Trimming a long agent history: PriorityTrimmer against langchain-core's ``trim_messages``.

A deterministic 400-message, ~116k-token agent history (tool calls, parallel calls, a few large
tool results) is trimmed to 6,000 tokens. Side by side in one run:

- ``PriorityTrimmer`` cold: a new trimmer and token counter, every message tokenised;
- ``PriorityTrimmer`` warm: the agent-loop case, the same history plus one new message, in three
  cases side by side: plain, with 40 tool definitions on the request (passed on every call, as
  ``TrimmingMiddleware`` passes a ``ModelRequest``'s tools) and with moving cuts
  (``prefix_stable=False``: the history ranked by relevance on every call); and with
  ``compact_tool_results``;
- ``trim_messages`` with an exact counter: the same counting rule, without a cache (what a
  tiktoken counter costs: every call re-tokenises the prefixes it measures);
- ``trim_messages`` with the exact counter and our per-message cache, for reference;
- ``trim_messages`` with ``"approximate"`` counting.

It prints the median time per trim (wall clock and CPU time of this process: the machine is
shared, CPU time is less disturbed by other processes), the tokens after trimming by exact count,
whether the result is a valid OpenAI request, and the ratios against the warm PriorityTrimmer.
Then it replays the conversation call by call and compares how much of each prompt's prefix the
previous call shares (what a server's prefix cache can reuse) with and without ``prefix_stable``.

Run: ``python scripts/trim_bench.py`` (about ten seconds on 2 cores).
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from tokenizer_cost import main as tokenizer_costs  # this script's folder is on sys.path

from agent_latency import PriorityTrimmer, TokenCounter

BUDGET = 6000
HISTORY_MESSAGES = 400
HISTORY_TOKENS = 116_000
ROUNDS = 8
# Parallel tool calls per agent step: 16 steps, (1 + calls) messages each, 48 messages a round.
STEP_CALLS = (1, 2, 3, 2) * 4
_OTHER_TOKENS = 12_500  # measured: everything but the text of tool results

_VOCABULARY = (
    "the a to of and in is it for on with that this we can not be as at by or from the the a "
    "file line error value return function call result data table user request status check "
    "update config server client token model agent query index record field list item test "
    "build cache log time count total first last next open read write path name type size page "
    "search match found missing empty valid retry timeout response header body key number"
)
_WORDS = _VOCABULARY.split()
_STATUSES = ("ok", "error", "skipped", "timeout", "not_found")
_DIRECTORIES = ("src/app", "src/app/handlers", "src/lib/cache", "tests/unit", "services/billing")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
    return " ".join(words).capitalize() + "."


def _record(rng: random.Random) -> str:
    """One JSON line of the kind search and query tools return."""
    name = "_".join(rng.choice(_WORDS) for _ in range(2))
    return (
        f'{{"id": {rng.randrange(100_000)}, "path": "{rng.choice(_DIRECTORIES)}/{name}.py", '
        f'"line": {rng.randrange(1, 2000)}, "status": "{rng.choice(_STATUSES)}", '
        f'"message": "{" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 9)))}"}}'
    )


def _text(rng: random.Random, tokens: int, counter: TokenCounter, *, records: bool) -> str:
    """Returns about ``tokens`` tokens of prose, or of JSON records and prose mixed."""
    lines: list[str] = []
    total = 0
    while total < tokens:
        line = _record(rng) if records and rng.random() < 0.7 else _sentence(rng)
        lines.append(line)
        total += counter.count_text(line) + 1  # the newline
    return "\n".join(lines)


def synthetic_agent_history(seed: int = 7) -> list[BaseMessage]:
    """Returns a deterministic agent conversation of 400 messages and about 116k tokens.

    Eight rounds of a user request followed by 16 agent steps (one to three parallel tool calls
    each, with their results) and, except in the last round, a final answer; the conversation
    ends with tool results, where an agent calls the model next. Tool results are mostly a few
    hundred tokens, with an occasional file-sized one.
    """
    rng = random.Random(seed)
    counter = TokenCounter()

    def prose(tokens: int) -> str:
        return _text(rng, tokens, counter, records=False)

    result_count = ROUNDS * sum(STEP_CALLS)
    sizes = [
        rng.randint(2000, 5000) if rng.random() < 0.06 else rng.randint(80, 500)
        for _ in range(result_count)
    ]
    scale = (HISTORY_TOKENS - _OTHER_TOKENS) / sum(sizes)
    sizes = [round(size * scale) for size in sizes]

    messages: list[BaseMessage] = [SystemMessage(prose(400))]
    call_number = 0
    for round_number in range(ROUNDS):
        messages.append(HumanMessage(prose(rng.randint(40, 200))))
        for calls in STEP_CALLS:
            ids = [f"call_{call_number + k:04d}" for k in range(calls)]
            call_number += calls
            messages.append(
                AIMessage(
                    "",
                    tool_calls=[
                        {
                            "name": rng.choice(("read_file", "search", "run_query")),
                            "id": i,
                            "args": {"query": prose(8)},
                        }
                        for i in ids
                    ],
                )
            )
            messages.extend(
                ToolMessage(_text(rng, sizes.pop(), counter, records=True), tool_call_id=i)
                for i in ids
            )
        if round_number < ROUNDS - 1:  # the last round ends with tool results
            messages.append(AIMessage(prose(rng.randint(100, 300))))
    assert len(messages) == HISTORY_MESSAGES, len(messages)
    return messages


def is_valid_request(messages: Sequence[BaseMessage], latest_user: BaseMessage) -> bool:
    """Whether every tool result answers a kept call, every kept call has its results, and the
    latest user message is there."""
    requested: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            requested.update(c["id"] for c in message.tool_calls if c["id"])
        elif isinstance(message, ToolMessage):
            if message.tool_call_id not in requested:
                return False
            answered.add(message.tool_call_id)
    return requested == answered and any(m is latest_user for m in messages)


def model_call_points(history: Sequence[BaseMessage]) -> list[int]:
    """Lengths of the prefixes an agent sends the model: after a user message, or after the
    last result of a tool step."""
    points = []
    for end, message in enumerate(history, start=1):
        following = history[end] if end < len(history) else None
        if isinstance(message, HumanMessage) or (
            isinstance(message, ToolMessage) and not isinstance(following, ToolMessage)
        ):
            points.append(end)
    return points


def _timed(run: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Returns the median wall-clock and CPU milliseconds of ``repeat`` runs, and the output."""
    wall, cpu = [], []
    output = None
    gc.collect()
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        output = run()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return statistics.median(wall), statistics.median(cpu), output


def _uncached_exact_counter() -> Callable[[list[BaseMessage]], int]:
    # The same rule with nothing remembered: a new counter (the vocabulary is loaded once per
    # process) for every count, as a plain tiktoken counter would.
    return lambda messages: TokenCounter().count_messages(messages)


def measure_speed(history: list[BaseMessage]) -> list[dict[str, Any]]:
    """Times each method on the history; tokens after and validity by exact count."""
    exact = TokenCounter()
    latest_user = next(m for m in reversed(history) if isinstance(m, HumanMessage))
    rows: list[dict[str, Any]] = []

    def row(name: str, ms: float, cpu_ms: float, output: list[BaseMessage]) -> None:
        rows.append(
            {
                "method": name,
                "ms": ms,
                "cpu_ms": cpu_ms,
                "tokens": exact.count_messages(output),
                "messages": len(output),
                "valid": is_valid_request(output, latest_user),
            }
        )

    new_messages = iter([AIMessage(f"note {k}: " + "progress " * 20) for k in range(1000)])

    def cold() -> list[BaseMessage]:
        return PriorityTrimmer(BUDGET, token_counter=TokenCounter()).trim(history).messages

    row("PriorityTrimmer cold", *_timed(cold, 5))

    trimmer = PriorityTrimmer(BUDGET, token_counter=TokenCounter())
    trimmer.trim(history)  # the previous model call of the agent loop

    def warm() -> list[BaseMessage]:
        return trimmer.trim([*history, next(new_messages)]).messages

    row("PriorityTrimmer warm", *_timed(warm, 200))

    def warm_with(
        budget: int = BUDGET, request: dict[str, Any] | None = None, **options: Any
    ) -> Callable[[], list[BaseMessage]]:
        variant = PriorityTrimmer(budget, token_counter=TokenCounter(), **options)
        variant.trim(history, **(request or {}))
        return lambda: variant.trim([*history, next(new_messages)], **(request or {})).messages

    tools = forty_tools()
    tool_tokens = TokenCounter().count_tools(tools)
    # On every call, as TrimmingMiddleware passes a ModelRequest's tools. The budget grows by
    # the tools' tokens, so the messages get the same 6,000 as above.
    request = {"tools": tools, "response_format": None, "strict_tools": None, "output_tools": []}
    row(
        f"PriorityTrimmer warm, 40 tools ({tool_tokens:,} tok)",
        *_timed(warm_with(BUDGET + tool_tokens, request), 200),
    )
    row("PriorityTrimmer warm, moving cut", *_timed(warm_with(prefix_stable=False), 200))
    row("PriorityTrimmer warm, compaction", *_timed(warm_with(compact_tool_results=True), 200))

    def with_counter(counter: Any) -> Callable[[], Any]:
        return lambda: trim_messages(
            history,
            max_tokens=BUDGET,
            token_counter=counter,
            strategy="last",
            include_system=True,
        )

    row("trim_messages exact (no cache)", *_timed(with_counter(_uncached_exact_counter()), 3))
    row("trim_messages exact (cached)", *_timed(with_counter(exact.count_messages), 20))
    row("trim_messages approximate", *_timed(with_counter("approximate"), 20))
    return rows


def forty_tools() -> list[dict[str, Any]]:
    """Forty OpenAI tool definitions of about 150 tokens each, as an agent with many tools has."""
    rng = random.Random(40)
    return [
        {
            "type": "function",
            "function": {
                "name": f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{k}",
                "description": " ".join(_sentence(rng) for _ in range(3)),
                "parameters": {
                    "type": "object",
                    "properties": {
                        name: {"type": "string", "description": _sentence(rng)}
                        for name in rng.sample(_WORDS, 4)
                    },
                },
            },
        }
        for k in range(40)
    ]


def measure_one_counting_pass(history: list[BaseMessage]) -> float:
    """Milliseconds to count every message once with a new counter: one tokenisation of all
    the text a trim must measure (content, roles, tool-call ids and arguments)."""
    ms, _, _ = _timed(lambda: TokenCounter().count_messages(history), 5)
    return ms


def measure_prefix_reuse(history: list[BaseMessage], **options: Any) -> dict[str, float]:
    """Replays the agent loop: one model call at each point where the agent calls the model.

    Returns the mean prompt tokens sent, the mean tokens not in a prefix shared with the
    previous call (what a server with a prefix cache must still prefill), the share of prompt
    tokens reused, and how many calls changed the previous prompt before its end (cut moves).
    """
    counter = TokenCounter()
    trimmer = PriorityTrimmer(BUDGET, token_counter=counter, **options)
    calls = model_call_points(history)
    previous: list[BaseMessage] = []
    sent = shared = moves = 0
    for end in calls:
        output = trimmer.trim(history[:end]).messages
        common = 0
        for before, now in zip(previous, output, strict=False):
            if before is not now:
                break
            common += 1
        moves += bool(previous) and common < len(previous)
        sent += counter.count_messages(output)
        shared += sum(counter.count_message(m) for m in output[:common])
        previous = output
    return {
        "calls": len(calls),
        "sent": sent / len(calls),
        "prefill": (sent - shared) / len(calls),
        "reuse": shared / sent,
        "moves": moves,
    }


def _load_average() -> str:
    try:
        return ", ".join(f"{load:.2f}" for load in os.getloadavg())
    except OSError:  # not on every platform
        return "unknown"


def main() -> None:
    history = synthetic_agent_history()
    total = TokenCounter().count_messages(history)
    print(f"History: {len(history)} messages, {total:,} tokens; budget {BUDGET:,} tokens.")
    print(f"Load average at the start: {_load_average()}.\n")

    rows = measure_speed(history)
    warm_ms = next(r["ms"] for r in rows if r["method"] == "PriorityTrimmer warm")
    print(
        f"{'method':42} {'ms/trim':>8} {'cpu ms':>7} {'tokens after':>13} {'msgs':>5} "
        f"{'valid':>6} {'over budget':>12} {'x warm':>7}"
    )
    for r in rows:
        over = r["tokens"] - BUDGET
        over_text = f"+{over / BUDGET:.1%}" if over > 0 else "no"
        print(
            f"{r['method']:42} {r['ms']:8.2f} {r['cpu_ms']:7.2f} {r['tokens']:13,} "
            f"{r['messages']:5} {'yes' if r['valid'] else 'NO':>6} {over_text:>12} "
            f"{r['ms'] / warm_ms:7.1f}"
        )
    print(f"ms/trim, cpu ms: medians (wall clock, CPU time); load average now {_load_average()}.")
    print(
        "valid: every tool result answers a kept tool call, every kept call has its results, "
        "and the latest user message is kept."
    )
    latest_user = next(m for m in reversed(history) if isinstance(m, HumanMessage))
    docs_config = trim_messages(
        history,
        max_tokens=BUDGET,
        token_counter=TokenCounter().count_messages,
        strategy="last",
        include_system=True,
        start_on="human",
    )
    print(
        f'trim_messages with start_on="human" keeps {len(docs_config)} message(s); latest user '
        f"message kept: {any(m is latest_user for m in docs_config)}."
    )

    cold_ms = next(r["ms"] for r in rows if r["method"] == "PriorityTrimmer cold")
    exact_ms = next(r["ms"] for r in rows if r["method"].startswith("trim_messages exact (no"))
    one_pass = measure_one_counting_pass(history)
    warm_times = "; ".join(
        f"{r['method'].removeprefix('PriorityTrimmer ')} {r['ms']:.2f}"
        for r in rows
        if r["method"].startswith("PriorityTrimmer warm")
    )
    print(
        f"\nTargets: warm trim <= 2 ms ({warm_times}); cold / one counting pass "
        f"({one_pass:.1f} ms) = {cold_ms / one_pass:.2f} (<= ~1); trim_messages exact / warm "
        f"= {exact_ms / warm_ms:,.0f}x (>= 100x); PriorityTrimmer over budget: "
        f"{any(r['tokens'] > BUDGET for r in rows if r['method'].startswith('Priority'))}."
    )

    print("\nAgent loop replay, one model call per user message or completed tool step:")
    print(
        f"{'trimmer':34} {'calls':>6} {'tokens sent':>12} {'prefilled':>10} {'reused':>7} "
        f"{'cut moves':>10}"
    )
    step = BUDGET // 4
    for name, options in (
        ("prefix_stable=False", {"prefix_stable": False}),
        (f"prefix_stable, step {step} (default)", {}),
        (f"prefix_stable, step {2 * step}", {"prefix_step_tokens": 2 * step}),
        ("prefix_stable, compaction", {"compact_tool_results": True}),
    ):
        p = measure_prefix_reuse(history, **options)
        print(
            f"{name:34} {p['calls']:6} {p['sent']:12,.0f} {p['prefill']:10,.0f} "
            f"{p['reuse']:7.1%} {p['moves']:10}"
        )
    print(
        "prefilled: mean prompt tokens per call not shared with the previous prompt (what a "
        "server with a prefix cache still has to process before the first token)."
    )

    print("\nCold cost of each tokenizer (scripts/tokenizer_cost.py):")
    tokenizer_costs()


if __name__ == "__main__":
    main()
