"""Needle questions on a real model: does trimming change the answer?

The retention benchmark (``agent-latency bench --quality``) checks, without a model, whether the
fact a question needs survives the trim. This script asks a real model: the generated agent
conversations of :mod:`agent_latency.bench._quality` (one fact hidden at the head, in the middle
or the tail of the history, in an old tool result, in the current turn's tool result, or as a
constraint the user stated once), sized for a small context window, are sent untrimmed and
trimmed to ``--budget`` three ways, greedy (temperature 0) with short answers: ``default``, the
trimmer a user gets with no options (``PriorityTrimmer.from_settings``: cache-first cuts, one
head and one tail round); ``age_2_4``, the defaults before the latency-quality frontier
(history by age, two head and four tail rounds); and LangChain's ``trim_messages`` keeping the
last messages (exact counter). It prints, per strategy:

- retained: the fact still occurs in the trimmed prompt (the model-free measure);
- correct: the answer contains the fact's value (the door code; for the constraint, euros);
- agreement: the trimmed answer is correct exactly when the untrimmed one is;
- identical: the same answer text.

The control is the untrimmed accuracy: a model that cannot find the fact in the whole
conversation says nothing about what trimming costs (Gemma 3 270M, a base model, answered none).
Below 50%, the script says the signal is weak instead of claiming agreement. A trimmed prompt
identical to the untrimmed one is not sent again (greedy decoding gives the same answer).

Run it with the project's environment against a running llama.cpp server (``make bench-real``
does, with SmolLM2-135M-Instruct; see docs/real-model.md)::

    .venv/bin/python scripts/real_needles.py --base-url http://127.0.0.1:PORT/v1 \\
        --model smollm2-135m-instruct --json build/bench-real/needles.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, trim_messages

from agent_latency import PriorityTrimmer, build_chat_model
from agent_latency.bench import NeedleCase, make_case, needle_places, retained
from agent_latency.config import Settings

STRATEGIES = ("default", "age_2_4", "trim_messages_last")
WEAK_BELOW = 0.5


def correct(case: NeedleCase, answer: str) -> bool:
    """Whether the answer states the fact (the constraint's: prices in euros)."""
    text = answer.lower()
    if case.place == "constraint":
        return "euro" in text or "€" in text or "eur " in text
    return case.answer.lower() in text


def _settings(base_url: str, model: str) -> Settings:
    defaults = Settings()
    llm = replace(
        defaults.llm,
        base_url=base_url,
        model=model,
        api_key=None,
        tokenizer="server",
        max_tokens_param="max_tokens",
        timeout_seconds=900,
    )
    return replace(defaults, llm=llm)


def run(options: argparse.Namespace) -> dict[str, Any]:
    """Asks every case untrimmed and trimmed; returns the per-case rows and the summary."""
    settings = _settings(options.base_url, options.model)
    chat = build_chat_model(
        settings, temperature=0, max_tokens=options.max_tokens, max_retries=0, streaming=False
    )
    default = PriorityTrimmer.from_settings(settings, budget=options.budget)
    counter = default.token_counter
    old_defaults = PriorityTrimmer.from_settings(
        settings,
        budget=options.budget,
        history_selection="age",
        history_keep_head=2,
        history_keep_tail=4,
        token_counter=counter,
    )

    def last(messages: list[BaseMessage]) -> list[BaseMessage]:
        return trim_messages(
            messages,
            max_tokens=options.budget,
            token_counter=counter.count_messages,
            strategy="last",
            include_system=True,
            start_on="human",
        )

    trims = {
        "default": lambda messages: default.trim(messages).messages,
        "age_2_4": lambda messages: old_defaults.trim(messages).messages,
        "trim_messages_last": last,
    }
    cases = [
        make_case(seed, place, "en", options.rounds)
        for seed in range(options.seeds)
        for place in needle_places()
    ]
    rows = []
    started = time.perf_counter()
    for number, case in enumerate(cases, start=1):
        messages = case.messages
        untrimmed = str(chat.invoke(messages).content)
        row: dict[str, Any] = {
            "place": case.place,
            "answer": case.answer,
            "tokens": counter.count_messages(messages),
            "untrimmed": {"text": untrimmed, "correct": correct(case, untrimmed)},
        }
        for name, trim in trims.items():
            sent = trim(list(messages))
            text = untrimmed if sent == list(messages) else str(chat.invoke(sent).content)
            row[name] = {
                "tokens": counter.count_messages(sent),
                "retained": retained(case, sent),
                "text": text,
                "correct": correct(case, text),
            }
        rows.append(row)
        elapsed = time.perf_counter() - started
        print(
            f"real_needles: {number}/{len(cases)} {case.place:<19} "
            + " ".join(
                f"{key} {'ok' if row[key]['correct'] else '--'}"
                for key in ("untrimmed", *STRATEGIES)
            )
            + f"  ({elapsed:,.0f} s)",
            flush=True,
        )
    return {"budget": options.budget, "rounds": options.rounds, "rows": rows}


def summary(results: dict[str, Any]) -> list[str]:
    """The summary lines: control accuracy, then per strategy retained/correct/agreement."""
    rows = results["rows"]
    n = len(rows)
    control = sum(r["untrimmed"]["correct"] for r in rows)
    tokens = sum(r["tokens"] for r in rows) / n
    lines = [
        f"Needle questions: {n} conversations ({results['rounds']} history rounds, "
        f"{tokens:,.0f} prompt tokens on average), greedy, budget {results['budget']:,}.",
        f"  untrimmed          correct {control:>2}/{n}",
    ]
    for name in STRATEGIES:
        kept = sum(r[name]["retained"] for r in rows)
        right = sum(r[name]["correct"] for r in rows)
        agree = sum(r[name]["correct"] == r["untrimmed"]["correct"] for r in rows)
        same = sum(r[name]["text"].strip() == r["untrimmed"]["text"].strip() for r in rows)
        mean = sum(r[name]["tokens"] for r in rows) / n
        lines.append(
            f"  {name:<18} correct {right:>2}/{n}   retained {kept:>2}/{n}   agreement "
            f"{agree:>2}/{n}   identical answers {same:>2}/{n}   ({mean:,.0f} tokens on average)"
        )
    by_place = ", ".join(
        f"{place} {sum(r['untrimmed']['correct'] for r in rows if r['place'] == place)}/"
        f"{sum(r['place'] == place for r in rows)}"
        for place in needle_places()
    )
    lines.append(f"  untrimmed correct by place: {by_place}")
    if control < WEAK_BELOW * n:
        lines.append(
            f"  The signal is weak: untrimmed, the model answers only {control} of {n} needle "
            "questions correctly, so agreement between trimmed and untrimmed answers says "
            "little about what trimming costs in answer quality."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the server's API root (…/v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=4, help="history rounds per conversation")
    parser.add_argument("--seeds", type=int, default=2, help="conversations per place")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--json", type=Path, help="write the rows and answers here")
    options = parser.parse_args(argv)
    for option in ("budget", "rounds", "seeds", "max_tokens"):
        if getattr(options, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be a positive integer")
    results = run(options)
    lines = summary(results)
    print("\n".join(lines))
    if options.json is not None:
        results["summary"] = lines
        options.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
