"""Cache-first bench: tokens sent, uncached tokens per call and evidence kept, per strategy.

On a public long-conversation QA set with labelled evidence turns (by default the shipped
``benchmarks/data/longmemeval_s_20k.json.gz``: 60 LongMemEval questions, each after its own
~18k-token chat history; ``--data`` also reads LoCoMo's ``locomo10.json``), one table per budget:

- ``mean sent``, ``mean uncached``, ``% cached``, ``trim ms``: the growing replay (each user
  turn of each conversation is the question of a call that sends the system prompt, all turns
  before it and that turn; a one-slot prefix cache holding the previous call's prompt, counted
  in the model's tokens as the simulator renders them; the median time per call in the strategy);
- ``evidence kept``: the share of questions whose every evidence turn the strategy sends when
  the question is asked after the whole conversation, and how many questions.

``summarization_stand_in`` is LangChain's ``SummarizationMiddleware`` with a *stand-in* summary
(a fixed 150-word text from langchain-core's ``GenericFakeChatModel``, no model call): it shows
what summarising does to the prefix and the tokens sent, not what a summary keeps, nor the
prefill of the summary call itself (a real summariser reads the summarised messages first); the
tables say so under each budget.

``--conversations N`` takes the first N conversations of the set (for both measurements; no
sampling otherwise), ``--turns N`` replays only each conversation's first N turns. The default
(the whole shipped set, budgets 2,000 / 4,000 / 8,000) runs in about two minutes on 2 cores.

Run: ``python scripts/cache_first_bench.py [--budgets 2000,4000,8000] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from agent_latency.bench import (
    EvidenceRow,
    PromptRenderer,
    ReplayRow,
    cache_first_strategies,
    evidence_retention,
    growing_replay,
    load_public_set,
)
from agent_latency.config import LLMSettings
from agent_latency.tokens import TokenCounter

DEFAULT_DATA = (
    Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "longmemeval_s_20k.json.gz"
)
DEFAULT_BUDGETS = (2000, 4000, 8000)
COLUMNS = ("strategy", "mean sent", "mean uncached", "% cached", "trim ms", "evidence kept")
STAND_IN = "summarization_stand_in"
STAND_IN_NOTE = (
    f"{STAND_IN}: SummarizationMiddleware with a STAND-IN summary (a fixed text from a fake "
    "chat model, no model call): its prefix and token figures are those of summarising, "
    "without the summary call's own prefill; its evidence kept counts only turns sent verbatim."
)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _budgets(text: str) -> tuple[int, ...]:
    return tuple(_positive(part.strip()) for part in text.split(","))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"cache_first_bench: {message}. Fix: see --help.", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="LongMemEval or LoCoMo file"
    )
    parser.add_argument(
        "--budgets", type=_budgets, default=DEFAULT_BUDGETS, help="comma-separated token budgets"
    )
    parser.add_argument("--conversations", type=_positive, help="the first N conversations only")
    parser.add_argument("--turns", type=_positive, help="replay each conversation's first N turns")
    parser.add_argument("--model", default=LLMSettings().model, help="count in this model's tokens")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser


def tables(evidence: list[EvidenceRow], replay: list[ReplayRow]) -> str:
    """The figures as one text table per budget."""
    kept = {(row.strategy, row.budget): row for row in evidence}
    out = []
    for budget in dict.fromkeys(row.budget for row in replay):
        lines = [COLUMNS]
        for row in (r for r in replay if r.budget == budget):
            asked = kept[row.strategy, budget]
            lines.append(
                (
                    row.strategy,
                    f"{row.mean_sent:,.0f}",
                    f"{row.mean_uncached:,.0f}",
                    f"{row.cached_percent:.1f}",
                    f"{row.median_trim_ms:.2f}",
                    f"{asked.percent:.1f}% of {asked.questions}",
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
        calls = next(r.calls for r in replay if r.budget == budget)
        out.append(f"budget {budget:,} tokens ({calls} calls replayed)")
        out += [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            )
            for line in lines
        ]
        if any(line[0] == STAND_IN for line in lines):
            out.append(STAND_IN_NOTE)
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the bench, prints its tables and returns its figures (as ``--json`` writes them)."""
    options = _parser().parse_args(argv)
    try:
        conversations = load_public_set(options.data)[: options.conversations]
        counter = TokenCounter.for_model(options.model)
    except (OSError, ValueError) as error:
        print(f"cache_first_bench: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    strategies = cache_first_strategies(counter)
    evidence = evidence_retention(conversations, strategies, options.budgets)
    replay = growing_replay(
        conversations,
        strategies,
        options.budgets,
        renderer=PromptRenderer(counter),
        turns=options.turns,
    )
    print(f"{options.data.name}: {len(conversations)} conversations, counted as {counter.name}")
    print(tables(evidence, replay))
    figures = {
        "data": options.data.name,
        "conversations": len(conversations),
        "turns": options.turns,
        "tokens": counter.name,
        "notes": {STAND_IN: STAND_IN_NOTE},
        "replay": [row.as_dict() for row in replay],
        "evidence": [{**vars(row), "percent": round(row.percent, 1)} for row in evidence],
    }
    if options.json is not None:
        options.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return figures


if __name__ == "__main__":
    main()
