"""``prompt | trimmer | model``, streamed token by token, with the time to first token printed.

The trimmer's budget is the settings' ``llm.prompt.token_budget`` (6,000 by default; a
``config.toml`` in the folder it is run from, or ``--config``, sets another).
Run: ``python examples/chain_with_trimmer.py`` (embedded simulator, its trace printed as a tree)
or ``python examples/chain_with_trimmer.py --base-url https://api.example.com/v1 --model M --otlp``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from _common import TrimReport, example_setup, parse_args
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from agent_latency import PriorityTrimmer, build_chat_model


def long_history(rounds: int = 40) -> list[BaseMessage]:
    """A chat history long enough to need trimming at the default budget (~6,700 tokens)."""
    history: list[BaseMessage] = []
    for n in range(rounds):
        history.append(HumanMessage(f"Question {n}: summarise report {n} " + "detail " * 60))
        history.append(AIMessage(f"Report {n} says: " + "finding " * 80))
    return history


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__ or "", argv)
    with example_setup(args) as (settings, telemetry):
        prompt = ChatPromptTemplate.from_messages(
            [
                ("system", "You are a concise analyst. Answer in two sentences."),
                MessagesPlaceholder("history"),
                ("user", "{question}"),
            ]
        )
        trimmer = PriorityTrimmer.from_settings(settings)
        chain = prompt | trimmer | build_chat_model(settings, streaming=True)
        inputs = {"history": long_history(), "question": "What changed since report 0?"}

        report = TrimReport()
        started = time.perf_counter()
        first_token_ms = None
        for chunk in chain.stream(inputs, config={"callbacks": [telemetry.handler(), report]}):
            if first_token_ms is None and chunk.content:
                first_token_ms = (time.perf_counter() - started) * 1000
            print(chunk.content, end="", flush=True)
        total_ms = (time.perf_counter() - started) * 1000

        [result] = report.results  # the trim the chain did: one call, one trim, one trace
        print(
            f"\n\nprompt {result.tokens_before} -> {result.tokens_after} tokens "
            f"(budget {result.budget}); TTFT {first_token_ms or total_ms:.0f} ms, "
            f"total {total_ms:.0f} ms",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
