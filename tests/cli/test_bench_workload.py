"""`agent-latency bench --workload mixed` cut down by the --workload-* options: on an endpoint, on
a server profile, with the frontier; its table explained, its options checked before any call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
                "prefix_stable, trim_messages_exact",
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
    document = json.loads((tmp_path / "bench.json").read_text("utf-8"))
    mixed = document["workload"]
    assert "frontier" not in document
    assert [s["name"] for s in mixed["strategies"]] == ["prefix_stable", "trim_messages_exact"]
    assert all(s["calls"] == 2 and "retention" in s for s in mixed["strategies"])
    assert mixed["workload"]["budget"] == 2500
    assert mixed["endpoint"]["server"] == base_url
    text = " ".join(output.split())
    assert "Mixed workload: 1 conversations × 2 calls" in text
    # The columns are explained.
    assert "Over limit: calls whose prompt exceeded the hard limit" in text
    assert "Invalid: calls an OpenAI endpoint would reject" in text
    assert "or that the server refused." in text
    assert "Kept, by the kind of fact the question needs" in text


def test_workload_options_are_checked_before_any_call(capsys: object) -> None:
    assert cli.main(["bench", "--workload-calls", "3"]) == 2
    assert "--workload-calls needs --workload mixed" in capsys.readouterr().err  # type: ignore[attr-defined]
    assert cli.main(["bench", "--workload", "mixed", "--workload-strategies", "fast"]) == 2
    assert "unknown ['fast']" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_the_frontier_on_a_server_profile_writes_every_point(
    tmp_path: Path, capsys: object
) -> None:
    status = cli.main(
        [
            "bench",
            "--runs",
            "0",
            "--workload",
            "mixed",
            "--workload-profile",
            "vllm-h100-7b",
            "--frontier",
            "--workload-strategies",
            "none,prefix_stable",
            "--workload-calls",
            "2",  # the last question round and the final call
            "--workload-conversations",
            "1",
            "--plot",
            str(tmp_path / "frontier.png"),
            "--json",
            str(tmp_path / "bench.json"),
        ]
    )
    captured = capsys.readouterr()  # type: ignore[attr-defined]
    assert status == 0, captured.err
    assert "untrimmed + blocking" not in captured.out  # --runs 0: no four-mode table
    document = json.loads((tmp_path / "bench.json").read_text("utf-8"))
    assert document["modes"] == []
    frontier = document["frontier"]
    assert [(p["strategy"], p["knob"], p["default"]) for p in frontier] == [
        ("none", {}, True),
        *(("prefix_stable", {"budget": b}, b == 6000) for b in (1500, 3000, 4500, 6000)),
    ]
    assert all(p["profile"] == "vllm-h100-7b" for p in frontier)
    assert all(0 <= p["retention"] <= 1 for p in frontier)
    assert all(p["mean_wait_ms"] > 0 for p in frontier if p["strategy"] == "prefix_stable")
    # Untrimmed, the last calls leave the answer less than its reserve: vLLM refuses them.
    assert frontier[0]["invalid_requests"] == 2 and frontier[0]["mean_wait_ms"] is None
    workload = document["workload"]
    assert workload["profile"] == "vllm-h100-7b"
    assert workload["simulator"]["cache_block_tokens"] == 16
    assert workload["simulator"]["clock_scale"] == 1.0  # a fast profile runs at its own speed
    assert "Frontier on the simulator as vllm-h100-7b" in " ".join(captured.out.split())
    assert (tmp_path / "frontier.png").read_bytes().startswith(b"\x89PNG")
    # Without a terminal, a few progress lines, not one per call.
    lines = captured.err.splitlines()
    assert 1 <= len(lines) <= 10 and all(
        line.startswith("workload vllm-h100-7b: ") for line in lines
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--frontier"], "--frontier needs --workload mixed."),
        (["--workload-profile", "vllm-h100-7b"], "--workload-profile needs --workload mixed."),
        (
            ["--workload", "mixed", "--workload-profile", "h100"],
            "unknown server profile 'h100'; choose from openai-hosted, deepseek, vllm-h100-7b, "
            "llama-cpu.",
        ),
        (
            ["--workload", "mixed", "--workload-profile", "deepseek", "--workload-endpoint"],
            "--workload-profile sets up the simulator; with --workload-endpoint",
        ),
        (
            ["--workload", "mixed", "--workload-answers"],
            "--workload-answers scores a real model's answers (the simulator answers filler)",
        ),
        (["--runs", "0"], "--runs 0 skips the four modes, so give something else to run"),
        (
            ["--runs", "0", "--quality", "--baseline", "x.json"],
            "--baseline compares the trimmed + streaming mode",
        ),
    ],
)
def test_conflicting_or_unknown_workload_options_fail_before_any_call(
    args: list[str], error: str, capsys: object
) -> None:
    assert cli.main(["bench", *args]) == 2
    assert error in capsys.readouterr().err  # type: ignore[attr-defined]


def test_every_profile_one_after_another_writes_one_workload_each(
    tmp_path: Path, capsys: object
) -> None:
    args = ["--workload-strategies", "prefix_stable", "--workload-calls", "1"]
    args += ["--workload-conversations", "1", "--json", str(tmp_path / "bench.json")]
    status = cli.main(
        ["bench", "--runs", "0", "--workload", "mixed", "--workload-profile", "all", *args]
    )
    assert status == 0, capsys.readouterr().err  # type: ignore[attr-defined]
    document = json.loads((tmp_path / "bench.json").read_text("utf-8"))
    assert "workload" not in document and "frontier" not in document
    assert [w["profile"] for w in document["workloads"]] == [
        "openai-hosted",
        "deepseek",
        "vllm-h100-7b",
        "llama-cpu",
    ]
    blocks = {w["profile"]: w["simulator"]["cache_block_tokens"] for w in document["workloads"]}
    assert blocks == {"openai-hosted": 128, "deepseek": 64, "vllm-h100-7b": 16, "llama-cpu": 1}


def test_waits_of_six_digits_stay_apart_in_the_workload_table() -> None:
    # A CPU server's waits run to tens of seconds; the columns used to run into each other
    # ("8,09412,798").
    from types import SimpleNamespace

    from agent_latency.cli._tables import _workload_row

    run = SimpleNamespace(
        strategy="prefix_stable",
        mean_wait_ms=98_094.0,
        p95_wait_ms=112_798.0,
        retention=1.0,
        context_tokens=1998.0,
        prefilled_tokens=4710,
        violations=0,
        invalid_requests=0,
        answer_accuracy=0.5,
    )
    row = _workload_row(run, True)  # type: ignore[arg-type]
    assert row.split() == [
        "prefix_stable",
        "98,094",
        "112,798",
        "100%",
        "1,998",
        "4,710",
        "0",
        "0",
        "50%",
    ]
