"""`agent-latency bench --workload mixed` on an endpoint, cut down by the --workload-* options."""

from __future__ import annotations

import json
from pathlib import Path

from agent_latency import cli
from agent_latency.sim import SimulatorConfig, running_simulator

FAST = SimulatorConfig(overhead_ms=5, prefill_ms_per_token=0.01, decode_tokens_per_s=2000)


def test_a_reduced_workload_runs_on_the_benchs_endpoint(tmp_path: Path, capsys: object) -> None:
    with running_simulator(FAST) as sim:
        status = cli.main(
            [
                "bench",
                "--base-url",
                sim.base_url,
                "--runs",
                "1",
                "--budget",
                "2500",
                "--workload",
                "mixed",
                "--workload-endpoint",
                "--workload-strategies",
                "prefix_stable, cost_aware",
                "--workload-calls",
                "2",
                "--workload-conversations",
                "1",
                "--json",
                str(tmp_path / "bench.json"),
            ]
        )
        base_url = sim.base_url
    output = capsys.readouterr().out  # type: ignore[attr-defined]
    assert status == 0, output
    mixed = json.loads((tmp_path / "bench.json").read_text("utf-8"))["workload"]
    assert [s["name"] for s in mixed["strategies"]] == ["prefix_stable", "cost_aware"]
    assert all(s["calls"] == 2 for s in mixed["strategies"])
    assert mixed["workload"]["budget"] == 2500
    assert mixed["endpoint"]["server"] == base_url
    assert "Mixed workload: 1 conversations × 2 calls" in output


def test_workload_options_are_checked_before_any_call(capsys: object) -> None:
    assert cli.main(["bench", "--workload-calls", "3"]) == 2
    assert "--workload-calls needs --workload mixed" in capsys.readouterr().err  # type: ignore[attr-defined]
    assert cli.main(["bench", "--workload", "mixed", "--workload-strategies", "fast"]) == 2
    assert "unknown ['fast']" in capsys.readouterr().err  # type: ignore[attr-defined]
