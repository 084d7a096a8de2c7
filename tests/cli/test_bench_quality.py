"""``agent-latency bench --quality``: retention next to TTFT in the table, the JSON and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_latency import cli
from agent_latency.bench import needle_places
from agent_latency.sim import SimulatorConfig, running_simulator

FAST = SimulatorConfig(overhead_ms=5, prefill_ms_per_token=0.01, decode_tokens_per_s=2000)


def test_quality_prints_retention_and_writes_it_to_json_and_the_plot(
    tmp_path: Path, capsys: object
) -> None:
    with running_simulator(FAST) as sim:
        status = cli.main(
            [
                "bench",
                "--base-url",
                sim.base_url,
                "--runs",
                "1",
                "--quality",
                "--json",
                str(tmp_path / "bench.json"),
                "--plot",
                str(tmp_path / "bench.png"),
            ]
        )
    output = capsys.readouterr().out  # type: ignore[attr-defined]
    assert status == 0
    assert "Retention" in output and "cache_first+compaction" in output
    rows = json.loads((tmp_path / "bench.json").read_text("utf-8"))["quality"]
    strategies = {row["strategy"] for row in rows}
    assert strategies == {
        "age",
        "age+compaction",
        "cache_first",
        "cache_first+compaction",
        "moving_cut",
        "trim_messages_last",
    }
    assert {row["budget"] for row in rows} == {6000, 3000}
    by = {(row["strategy"], row["budget"]): row for row in rows}
    # Moving cuts rank the history by relevance on every call; cache-first cuts keep less of it.
    assert by["moving_cut", 6000]["retention"] >= 0.9
    assert by["cache_first", 6000]["retention"] > by["age", 6000]["retention"]
    assert set(by["age", 3000]["by_place"]) == set(needle_places())
    assert by["age", 3000]["model_ttft_ms"] < by["age", 6000]["model_ttft_ms"]
    # The TTFT column is the simulator's default latency model for the mean prompt sent.
    default = SimulatorConfig()
    for row in rows:
        predicted = default.ttft_ms(row["mean_tokens"], row["mean_tokens"])
        assert row["model_ttft_ms"] == pytest.approx(predicted, abs=0.2)
    assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG")


def test_an_unknown_workload_is_refused_before_any_call(capsys: object) -> None:
    assert cli.main(["bench", "--workload", "busy"]) == 2
    error = capsys.readouterr().err  # type: ignore[attr-defined]
    assert error.strip() == "agent-latency: error: --workload 'busy': the only workload is 'mixed'."
