"""What a tool budget does to the first token: 40 tool definitions sent, or the ~8 that matter.

An agent with 40 tools (``create_agent`` + ``TrimmingMiddleware`` over the real ``ChatOpenAI``,
streaming) holds a few multi-turn conversations; the user turns alternate a new subject and a
follow-up on it, each naming one tool; the model calls it, then answers. Side by side in one
run, with the same trimmer budget (the message budget plus every tool definition, so no message
is trimmed and both modes send the same messages):

- ``all 40 tools``: every definition on every call;
- ``tool_budget N``: ``PriorityTrimmer(tool_budget=N)`` keeps the tools it chose before while
  they serve the new question (a follow-up), else adds the best matches and evicts the least
  recently called or needed (see ``agent_latency.trimming._tools``).

For each it prints the mean and median TTFT (the callback handler's time to the first streamed
chunk), the mean TTFT of a turn's first call (where the question, and so the kept tools, change),
the server's prompt tokens, the share of each prompt's tokens that start the previous call's
prompt too (what a prefix cache can reuse; tool definitions come first in the template), the
server's cached tokens, and how often the tool list changed: inside a turn (it must not), at a
new subject's first call, at a follow-up's (it should not: the tools kept serve it). Then the
ratios. On the embedded simulator (default latency model) it runs twice: with its prefix cache
(the default) and without (a server that caches nothing, or every conversation's first call).

Run: ``python scripts/tool_budget_bench.py`` (about two and a quarter minutes on 2 cores), or
against another endpoint: ``--base-url http://host:8000/v1 --model NAME`` (key:
``OPENAI_API_KEY``); it must report ``usage`` on streamed calls.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, StructuredTool

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    LLMSettings,
    PriorityTrimmer,
    Settings,
    TokenCounter,
    TrimmingMiddleware,
    build_chat_model,
)
from agent_latency.sim import SimulatorConfig, running_simulator

MESSAGE_BUDGET = 6_000
TOOL_BUDGET = 1_200  # about 8 of the 40 definitions (5,707 tokens, 143 each on average)
ANSWER_TOKENS = 16  # TTFT does not depend on the answer's length; shorter answers run faster
_NO_THRESHOLD_MS = 1e12  # the bench reports every call itself: no threshold logs
SYSTEM_PROMPT = (
    "You are the operations assistant of an online retailer. Use the tools to look things up "
    "and act; never invent identifiers, amounts or dates. When a tool fails, say so and what "
    "you tried. Answer briefly, with the figures the user asked for."
)

CATALOGUE: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "scenarios" / "forty_tools.json").read_text(encoding="utf-8")
)
"""Forty function definitions (name, description, JSON schema) as an agent platform has them."""

# Each subject: a question, then a follow-up the user asks next; both name the same tool by a
# word of its name only (the simulated model calls the tools a user message names).
SUBJECTS = (
    (
        "Will it rain in Lisbon on Saturday? Check the weather before we plan the offsite.",
        "And on Sunday? If the forecast says rain, we move it indoors.",
    ),
    (
        "Checkout got slow at noon: pull the p95 metrics for the last six hours.",
        "Now the error-rate metrics for the same window, please.",
    ),
    (
        "Where is parcel CT-44821-PT right now? Please track it.",
        "Has it moved since this morning? Track it once more.",
    ),
    (
        "Anything in the runbooks about a card processor timeout? Look in the knowledge pages.",
        "Nothing there? Look in the knowledge base for a gateway timeout instead.",
    ),
    (
        "We are low on espresso cups: what inventory does each warehouse hold?",
        "And the inventory of saucers, in the same warehouses?",
    ),
    (
        "The nightly job failed twice: show me the latest container logs of worker-7.",
        "Now the logs of worker-8 for the same hour.",
    ),
    (
        "Card charge ch_5521 went through twice; refund the duplicate one.",
        "There is a third charge, ch_5530: refund it too.",
    ),
    (
        "Page the on-call engineers, this looks like a sev2 incident in checkout.",
        "Still failing after ten minutes: escalate it to sev1.",
    ),
)
CONVERSATION_OFFSET = 3  # conversation k starts at subject 3k: the conversations differ


def question(conversation: int, turn: int) -> str:
    """A conversation's turns alternate a new subject and a follow-up on it."""
    subject = SUBJECTS[(CONVERSATION_OFFSET * conversation + turn // 2) % len(SUBJECTS)]
    return subject[turn % 2]


def agent_tools() -> list[BaseTool]:
    """The catalogue as tools an agent runs; each returns a small JSON result."""

    def runner(name: str) -> Callable[..., str]:
        def run(**arguments: Any) -> str:
            rows = [{"id": f"{name}-{k}", "status": "ok", "detail": arguments} for k in range(3)]
            return json.dumps({"tool": name, "results": rows})

        return run

    return [
        StructuredTool.from_function(
            runner(spec["name"]),
            name=spec["name"],
            description=spec["description"],
            args_schema=spec["parameters"],
        )
        for spec in CATALOGUE
    ]


# -- running ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One model call as sent and answered.

    Attributes:
        conversation: Which conversation, and turn: which user turn of it.
        first_of_turn: Whether it is the turn's first call (the question is new).
        tools: The names of the tools sent, in order.
        called: The tools this call's answer called.
        prompt_ids: The prompt as the template renders it (our counter), for prefix reuse.
        tool_tokens: The tool definitions' share of it.
        record: The callback handler's record: TTFT, server's prompt and cached tokens.
    """

    conversation: int
    turn: int
    first_of_turn: bool
    tools: tuple[str, ...]
    called: tuple[str, ...]
    prompt_ids: list[int]
    tool_tokens: int
    record: LatencyRecord


def rendered(counter: TokenCounter, body: dict[str, Any]) -> tuple[list[int], int]:
    """The prompt tokens of a request body as its chat template lays them out (tools first, as
    the simulator prefills them), and how many of them are tool definitions."""
    messages = body["messages"]
    head, tail = counter.render_framing(messages[0]["role"] if messages else None)
    tools = counter.render_tools(body["tools"]) if body.get("tools") else []
    ids = [*head, *tools]
    for message in messages:
        ids += counter.render_message(message)
    return [*ids, *tail], len(tools)


def run_mode(
    base_url: str,
    model: str,
    *,
    tool_budget: int | None,
    conversations: int,
    turns: int,
    counter: TokenCounter,
) -> list[Call]:
    """Holds ``conversations`` conversations of ``turns`` user turns; returns every model call."""
    bodies: list[dict[str, Any]] = []
    records: list[LatencyRecord] = []
    client = httpx.Client(event_hooks={"request": [lambda r: bodies.append(json.loads(r.content))]})
    chat = build_chat_model(
        Settings(llm=LLMSettings(base_url=base_url, model=model)),
        streaming=True,
        max_tokens=ANSWER_TOKENS,
        http_client=client,
    )
    tools = agent_tools()
    budget = MESSAGE_BUDGET + counter.count_tools(tools)
    trimmer = PriorityTrimmer(budget, token_counter=counter, tool_budget=tool_budget)
    # No recall tool: the 40 tools are what is measured, and the figures stay comparable.
    middleware = TrimmingMiddleware(trimmer, recall=False)
    agent = create_agent(chat, tools, system_prompt=SYSTEM_PROMPT, middleware=[middleware])
    handler = LatencyCallbackHandler(
        ttft_warn_ms=_NO_THRESHOLD_MS,
        ttft_error_ms=_NO_THRESHOLD_MS,
        log_every_request=False,
        on_record=records.append,
    )
    calls: list[Call] = []
    with client:
        for conversation in range(conversations):
            messages: list[BaseMessage] = []
            for turn in range(turns):
                sent = len(bodies)
                state = agent.invoke(
                    {"messages": [*messages, HumanMessage(question(conversation, turn))]},
                    {"callbacks": [handler]},
                )
                answers = [
                    m for m in state["messages"][len(messages) :] if isinstance(m, AIMessage)
                ]
                messages = state["messages"]
                new_bodies, new_records = bodies[sent:], records[sent:]
                if not len(new_bodies) == len(new_records) == len(answers):
                    raise RuntimeError("requests, records and answers do not pair up (retries?)")
                for k, (body, record, answer) in enumerate(
                    zip(new_bodies, new_records, answers, strict=True)
                ):
                    ids, tool_tokens = rendered(counter, body)
                    calls.append(
                        Call(
                            conversation=conversation,
                            turn=turn,
                            first_of_turn=k == 0,
                            tools=tuple(t["function"]["name"] for t in body.get("tools", ())),
                            called=tuple(c["name"] for c in answer.tool_calls),
                            prompt_ids=ids,
                            tool_tokens=tool_tokens,
                            record=record,
                        )
                    )
    return calls


# -- figures ---------------------------------------------------------------------------------------


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _pairs(calls: Sequence[Call]) -> Iterator[tuple[Call, Call]]:
    """Consecutive calls of the same conversation."""
    for before, after in itertools.pairwise(calls):
        if before.conversation == after.conversation:
            yield before, after


@dataclass(frozen=True)
class Summary:
    """The figures of one mode's calls.

    Attributes:
        mode: What was sent. The rest: means per call unless named otherwise.
        prefix_reuse: Of the prompt tokens of every call but a conversation's first, the share
            that begins the previous call's prompt too.
        changes_within_turn: Calls whose tool list differs from the previous call of the same turn.
        changes_at_new_turn: Turns whose first call's tool list differs from the previous call.
        changes_at_follow_up: Of those, the turns that follow up on the previous turn's subject.
        new_turns: Turns but a conversation's first.
        called_tools_kept: Every tool a call's answer called is sent with every later call of the
            conversation.
    """

    mode: str
    calls: int
    tools_sent: float
    tool_tokens: float
    message_tokens: float
    prompt_tokens: float
    server_cached_share: float
    ttft_mean_ms: float
    ttft_median_ms: float
    ttft_new_turn_ms: float
    prefix_reuse: float
    changes_within_turn: int
    changes_at_new_turn: int
    changes_at_follow_up: int
    new_turns: int
    called_tools_kept: bool
    called: tuple[tuple[str, ...], ...]


def summarize(mode: str, calls: Sequence[Call]) -> Summary:
    """Works out a mode's figures from its calls."""
    ttft = [c.record.ttft_ms for c in calls if c.record.ttft_ms is not None]
    server = [c.record.input_tokens for c in calls if c.record.input_tokens is not None]
    if len(server) < len(calls):
        raise SystemExit(
            "tool_budget_bench: the endpoint did not report usage.prompt_tokens on streamed "
            "calls (stream_options.include_usage); the bench compares the server's own counts."
        )
    pairs = list(_pairs(calls))
    reused = sum(_common_prefix(a.prompt_ids, b.prompt_ids) for a, b in pairs)
    kept = all(
        set(c.called) <= set(later.tools)
        for i, c in enumerate(calls)
        for later in calls[i + 1 :]
        if later.conversation == c.conversation
    )
    return Summary(
        mode=mode,
        calls=len(calls),
        tools_sent=statistics.fmean(len(c.tools) for c in calls),
        tool_tokens=statistics.fmean(c.tool_tokens for c in calls),
        message_tokens=statistics.fmean(len(c.prompt_ids) - c.tool_tokens for c in calls),
        prompt_tokens=statistics.fmean(server),
        server_cached_share=sum(c.record.cache_read_tokens or 0 for c in calls) / sum(server),
        ttft_mean_ms=statistics.fmean(ttft),
        ttft_median_ms=statistics.median(ttft),
        ttft_new_turn_ms=statistics.fmean(
            c.record.ttft_ms for c in calls if c.first_of_turn and c.record.ttft_ms is not None
        ),
        prefix_reuse=reused / sum(len(b.prompt_ids) for _, b in pairs) if pairs else 0.0,
        changes_within_turn=sum(a.tools != b.tools for a, b in pairs if not b.first_of_turn),
        changes_at_new_turn=sum(a.tools != b.tools for a, b in pairs if b.first_of_turn),
        changes_at_follow_up=sum(
            a.tools != b.tools for a, b in pairs if b.first_of_turn and b.turn % 2
        ),
        new_turns=sum(b.first_of_turn for _, b in pairs),
        called_tools_kept=kept,
        called=tuple(c.called for c in calls),
    )


def print_table(title: str, rows: Sequence[Summary]) -> None:
    print(f"\n{title}")
    print(
        f"{'mode':18} {'calls':>5} {'tools':>6} {'tool tok':>9} {'msg tok':>8} {'server tok':>10} "
        f"{'TTFT mean':>10} {'median':>8} {'new turn':>9} {'prefix':>7} {'cached':>7} "
        f"{'changes':>12}"
    )
    for r in rows:
        print(
            f"{r.mode:18} {r.calls:5} {r.tools_sent:6.1f} {r.tool_tokens:9,.0f} "
            f"{r.message_tokens:8,.0f} {r.prompt_tokens:10,.0f} {r.ttft_mean_ms:8,.0f}ms "
            f"{r.ttft_median_ms:6,.0f}ms {r.ttft_new_turn_ms:7,.0f}ms {r.prefix_reuse:7.1%} "
            f"{r.server_cached_share:7.1%} {r.changes_within_turn:3}/{r.changes_at_new_turn}"
            f"({r.changes_at_follow_up})/{r.new_turns}"
        )
    full, trimmed = rows
    print(
        f"{'budget / all':18} ratios: server tokens "
        f"{trimmed.prompt_tokens / full.prompt_tokens:.2f}x, TTFT mean "
        f"{trimmed.ttft_mean_ms / full.ttft_mean_ms:.2f}x, median "
        f"{trimmed.ttft_median_ms / full.ttft_median_ms:.2f}x, new turn "
        f"{trimmed.ttft_new_turn_ms / full.ttft_new_turn_ms:.2f}x; same tool calls: "
        f"{'yes' if full.called == trimmed.called else 'NO'}; called tools kept: "
        f"{'yes' if trimmed.called_tools_kept else 'NO'}"
    )


def compare(
    base_url: str, model: str, args: argparse.Namespace, counter: TokenCounter
) -> list[Summary]:
    """Runs both modes against one endpoint; returns (all tools, tool budget)."""
    return [
        summarize(
            mode,
            run_mode(
                base_url,
                model,
                tool_budget=budget,
                conversations=args.conversations,
                turns=args.turns,
                counter=counter,
            ),
        )
        for mode, budget in (
            (f"all {len(CATALOGUE)} tools", None),
            (f"tool_budget {args.tool_budget}", args.tool_budget),
        )
    ]


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, got {text!r}")
    return int(text)


def _host(base_url: str) -> str:
    """The endpoint's host and port, for the table's title (never its user info or path)."""
    parts = urlsplit(base_url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def main(
    argv: Sequence[str] | None = None, *, simulator: SimulatorConfig | None = None
) -> dict[str, list[Summary]]:
    """Runs the bench and prints its tables; returns the figures by setup.

    Args:
        argv: Command-line arguments (``--help`` lists them).
        simulator: The embedded simulator's configuration when no ``--base-url`` is given;
            default: ``SimulatorConfig()``. It runs with its prefix cache, then without.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint instead of the simulator")
    parser.add_argument("--model", help="the model to ask (default: the simulator's)")
    parser.add_argument("--conversations", type=_positive, default=2)
    parser.add_argument("--turns", type=_positive, default=6)
    parser.add_argument("--tool-budget", type=_positive, default=TOOL_BUDGET, help="tokens")
    args = parser.parse_args(argv)
    config = simulator or SimulatorConfig()
    model = args.model or config.models[0]
    counter = TokenCounter.for_model(config.prompt_tokenizer if args.base_url is None else model)
    every = counter.count_tools(agent_tools())
    print(
        f"{len(CATALOGUE)} tools, {every:,} tokens of definitions; {args.conversations} "
        f"conversation(s) x {args.turns} turn(s); message budget {MESSAGE_BUDGET:,}, "
        f"tool budget {args.tool_budget:,}; counted with {counter.name}."
    )
    setups: dict[str, list[Summary]] = {}
    if args.base_url is not None:
        setups[f"{model} at {_host(args.base_url)}"] = compare(args.base_url, model, args, counter)
    else:
        for title, options in (
            ("prefix cache on (default)", {}),
            ("prefix cache off", {"prefix_cache": False}),
        ):
            with running_simulator(replace(config, **options)) as sim:
                setups[f"simulator, {title}"] = compare(sim.base_url, model, args, counter)
    for title, rows in setups.items():
        print_table(title, rows)
    print(
        "\ntools: tools sent per call; tool tok / msg tok: our count of the definitions and of "
        "the rest; server tok: usage.prompt_tokens; new turn: TTFT of a turn's first call; "
        "prefix: share of a prompt that starts the previous call's prompt too; cached: the "
        "server's cached tokens; changes: tool list changes within a turn / at a new turn (of "
        "which at a follow-up) / new turns."
    )
    return setups


if __name__ == "__main__":
    main()
