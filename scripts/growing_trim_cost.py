"""The per-call cost of trimming a growing conversation: ours beside ``trim_messages``.

A chat grows one turn per call up to 700 messages (the shipped LongMemEval histories, one after
another: real text, user and assistant in turn, long assistant turns; ``--data locomo10.json``
replays LoCoMo's conversations instead: short chat turns, as in the issue's own measurement,
where ``trim_messages`` keeps ten times as many messages). Every call is trimmed to the budget
twice, interleaved, by the default ``PriorityTrimmer`` and by langchain-core's
``trim_messages`` (``strategy="last"``, the same token counter with its per-message cache, the
system message kept, starting on a user message). The counter counts each call's messages
before either trim (untimed), so neither pays for tokenizing the new turn and the other finds it
cached. The chat is replayed ``--repeat`` times (a new trimmer each time), and each call counts
at its quickest replay, for each trimmer: what the call costs when nothing else on the machine
got in its way. It prints, per band of 100 messages, the median of those CPU times and their
ratio (CPU time of this process: the machine is shared). ``--middleware`` times ours as
``create_agent`` calls it, through ``TrimmingMiddleware`` with recall on (see
:func:`as_middleware`). ``--dicts`` gives both the chat as OpenAI-format dicts, the same
dicts on every call (the raw OpenAI SDK's list grown by appending, as in the article's setup).
``--fresh`` gives both, on every call, new message objects equal to the last call's (copied
untimed, the system message kept): what a ``create_agent`` with a checkpointer gets at each new
turn, its history read back from the checkpoint. ``--tool-results`` replays an agent's history
instead: every round a question, a tool call and its result far above the tool-result cap (a
long assistant turn of the chat, twice), then an answer. ``--compaction`` turns on ours
``compact_tool_results`` (old tool results to one-line stubs).

Run: ``python scripts/growing_trim_cost.py [--budget 4000] [--messages 700] [--data FILE]
[--repeat 5] [--middleware] [--dicts | --fresh] [--tool-results] [--compaction]`` (about a
minute).
"""

from __future__ import annotations

import argparse
import math
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    SystemMessage,
    convert_to_openai_messages,
    trim_messages,
)

from agent_latency.bench import load_public_set
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

_DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "longmemeval_s_20k.json.gz"
_BAND = 100


def real_chat(messages: int, data: Path = _DATA) -> list[BaseMessage]:
    """The first ``messages`` turns of the conversations in ``data`` (LongMemEval or LoCoMo), one
    after another."""
    turns: list[BaseMessage] = []
    for conversation in load_public_set(data):
        turns.extend(conversation.messages)
        if len(turns) >= messages:
            break
    return turns[:messages]


def with_tool_results(chat: list[BaseMessage], messages: int) -> list[BaseMessage]:
    """An agent's history of about ``messages`` messages: every round a question, a lookup, its
    result (a long assistant turn of ``chat``, twice) and a short answer."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    long_turns = [m.text for m in chat if m.type == "ai" and len(m.text) > 3000] or ["x " * 4000]
    history: list[BaseMessage] = []
    for r in range(messages // 4):
        call = {"name": "lookup", "args": {"topic": r}, "id": f"call_{r}", "type": "tool_call"}
        history += [
            HumanMessage(f"Question {r}: look topic {r} up."),
            AIMessage("", tool_calls=[call]),
            ToolMessage(long_turns[r % len(long_turns)] * 2, tool_call_id=f"call_{r}"),
            AIMessage(f"Topic {r} is covered."),
        ]
    return history


def as_middleware(trimmer: PriorityTrimmer) -> Callable[[list[BaseMessage]], object]:
    """What a ``create_agent`` model call with ``TrimmingMiddleware(trimmer)`` does before the
    model: the trim, the elision marker and the runs of left-out messages the recall tool
    reads (the model is not called: the next handler answers at once)."""
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from agent_latency.trimming import TrimmingMiddleware

    middleware, model = TrimmingMiddleware(trimmer), GenericFakeChatModel(messages=iter(()))
    answer = ModelResponse(result=[AIMessage("ok")])

    def call(messages: list[BaseMessage]) -> object:
        system, *rest = messages
        assert isinstance(system, SystemMessage)
        history: Any = rest  # an agent's state holds these very messages
        request = ModelRequest(
            model=model,
            messages=history,
            system_message=system,
            tools=list(middleware.tools),  # its recall tool, as create_agent hands it
            state={"messages": history},
        )
        return middleware.wrap_model_call(request, lambda _: answer)

    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--messages", type=int, default=700)
    parser.add_argument("--data", type=Path, default=_DATA, help="LongMemEval or LoCoMo file")
    parser.add_argument("--repeat", type=int, default=5, help="replays; each call's quickest")
    parser.add_argument(
        "--middleware",
        action="store_true",
        help="time ours as create_agent calls it: TrimmingMiddleware, recall on",
    )
    parser.add_argument(
        "--dicts",
        action="store_true",
        help="give both the chat as OpenAI-format dicts, one list grown by appending (the raw "
        "OpenAI SDK's way, the article's)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="give both new message objects equal to the last call's on every call (a "
        "checkpointed agent's history, read back at each new turn)",
    )
    parser.add_argument(
        "--tool-results",
        action="store_true",
        help="replay an agent's history of lookups whose results are far above the cap",
    )
    parser.add_argument(
        "--compaction",
        action="store_true",
        help="ours with compact_tool_results on (old tool results to one-line stubs)",
    )
    args = parser.parse_args(argv)
    if args.dicts and args.middleware:
        parser.error("--dicts and --middleware: an agent's state holds message objects")
    if args.dicts and args.fresh:
        parser.error("--dicts and --fresh: a list of dicts grown by appending keeps its dicts")
    counter = TokenCounter.for_model("qwen")
    try:
        chat = real_chat(args.messages, args.data)
        if args.tool_results:
            chat = with_tool_results(chat, args.messages)
    except OSError as error:
        print(
            f"growing_trim_cost: cannot read --data: {error}. "
            "Fix: pass a LongMemEval or LoCoMo file.",
            file=sys.stderr,
        )
        return 2
    except ValueError as error:  # names the file and the fix
        print(f"growing_trim_cost: {error}", file=sys.stderr)
        return 2
    system = SystemMessage("You are a helpful assistant. Answer briefly.")
    calls = [end for end in range(1, len(chat) + 1) if chat[end - 1].type == "human"]
    given: list[Any] = [system, *chat]
    if args.dicts:  # made once: every call passes the same dicts, as a growing list does
        given = convert_to_openai_messages(given)
    ours = [math.inf] * len(calls)
    theirs = [math.inf] * len(calls)
    for _ in range(args.repeat):  # each call's quickest replay: what the machine let it take
        # A new conversation.
        trimmer = PriorityTrimmer(
            args.budget, token_counter=counter, compact_tool_results=args.compaction
        )
        trim = as_middleware(trimmer) if args.middleware else trimmer.trim
        for call, end in enumerate(calls):
            messages = given[: end + 1]
            if args.fresh:  # as a checkpoint reads them back: equal, new objects
                messages = [system, *pickle.loads(pickle.dumps(messages[1:]))]
            counter.count_messages(messages)
            started = time.process_time()
            trim(messages)
            middle = time.process_time()
            trim_messages(
                messages,
                max_tokens=args.budget,
                token_counter=counter.count_messages,
                strategy="last",
                include_system=True,
                start_on="human",
            )
            ended = time.process_time()
            ours[call] = min(ours[call], (middle - started) * 1000)
            theirs[call] = min(theirs[call], (ended - middle) * 1000)
    bands: dict[int, list[int]] = {}
    for call, end in enumerate(calls):
        bands.setdefault(end // _BAND * _BAND, []).append(call)
    print(
        f"budget {args.budget:,}; median CPU ms per call, {len(chat)} messages of real chat "
        f"({args.data.name}){'; ours: TrimmingMiddleware' if args.middleware else ''}"
        f"{'; as OpenAI-format dicts' if args.dicts else ''}"
        f"{'; new objects on every call' if args.fresh else ''}"
        f"{'; an agent history of long tool results' if args.tool_results else ''}"
        f"{'; ours compacts old tool results' if args.compaction else ''}"
    )
    print(f"{'messages':>10} {'calls':>6} {'ours':>8} {'trim_messages':>14} {'ratio':>6}")
    for band, members in bands.items():
        mine = statistics.median(ours[call] for call in members)
        peer = statistics.median(theirs[call] for call in members)
        print(
            f"{band:>4}-{band + _BAND - 1:<5} {len(members):>6} {mine:>8.2f} {peer:>14.2f} "
            f"{mine / peer:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
