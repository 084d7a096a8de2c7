"""``scripts/cache_first_bench.py`` on a tiny slice of the shipped set."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.scripts import benchmark_script

STRATEGIES = [
    "send_everything",
    "age_1_1",
    "default",
    "trim_messages",
    "clear_tool_uses",
    "bm25_neighbours",
    "summarization_stand_in",
]


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with benchmark_script("cache_first_bench") as module:
        yield module


def test_a_tiny_slice_prints_a_table_per_budget_and_writes_its_figures(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "figures.json"
    argv = ["--conversations", "2", "--turns", "10", "--budgets", "2000,4000", "--json", str(out)]

    figures = bench.main(argv)

    printed = capsys.readouterr().out
    assert "longmemeval_s_20k.json.gz: 2 conversations" in printed
    assert printed.count("budget 2,000 tokens (10 calls replayed)") == 1
    assert printed.count("budget 4,000 tokens (10 calls replayed)") == 1
    for name in STRATEGIES:
        assert printed.count(f"\n{name} ") == 2, name
    assert json.loads(out.read_text(encoding="utf-8")) == figures
    # The stand-in summariser is labelled as one under each table and in the figures.
    assert printed.count("summarization_stand_in: SummarizationMiddleware with a STAND-IN") == 2
    assert "STAND-IN" in figures["notes"]["summarization_stand_in"]
    assert [(r["budget"], r["strategy"]) for r in figures["replay"]] == [
        (b, s) for b in (2000, 4000) for s in STRATEGIES
    ]
    evidence = {(r["strategy"], r["budget"]): r for r in figures["evidence"]}
    assert evidence["send_everything", 2000] == {
        "strategy": "send_everything",
        "budget": 2000,
        "questions": 2,
        "kept": 2,
        "percent": 100.0,
    }
    replay = {(r["strategy"], r["budget"]): r for r in figures["replay"]}
    assert replay["age_1_1", 2000]["mean_sent"] <= 2000
    assert replay["send_everything", 2000]["mean_sent"] > replay["age_1_1", 2000]["mean_sent"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--budgets", "2000,0"], "--budgets"),
        (["--turns", "many"], "--turns"),
        (["--data", "no/such/file.json"], "no/such/file.json"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(
    bench: ModuleType, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)

    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert says in error
    assert error.startswith("cache_first_bench: ") and error.count("\n") == 1
