"""``agent-latency bench`` end to end on a tiny scenario: table, JSON, plot, gate, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from langchain_core.messages import convert_to_messages
from typer.testing import CliRunner, Result

from agent_latency.cli._bench import bench
from agent_latency.config import Settings
from agent_latency.sim import RunningSimulator, SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter

KEY = "sk-bench-cli-secret-0123456789"
FAST = SimulatorConfig(
    overhead_ms=5, prefill_ms_per_token=0.01, decode_tokens_per_s=2000, answer_tokens=8, api_key=KEY
)
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a support agent. " + "Follow the policy. " * 40},
    *[
        message
        for n in range(4)
        for message in (
            {"role": "user", "content": f"Where is order {n}?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": f'{{"id": {n}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{n}", "content": "in transit. " * 60},
            {"role": "assistant", "content": f"Order {n} is in transit."},
        )
    ],
    {"role": "user", "content": "Which orders are late?"},
]


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(FAST) as running:
        yield running


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "tiny.json"
    path.write_text(json.dumps(CONVERSATION), encoding="utf-8")
    return path


def run_cli(*args: str | Path) -> Result:
    app = typer.Typer()
    app.command()(bench)

    @app.callback()
    def root() -> None:
        """Makes ``bench`` a subcommand, as in the real CLI."""

    return CliRunner().invoke(app, ["bench", *map(str, args)])


def endpoint_args(sim: RunningSimulator, scenario: Path) -> list[str | Path]:
    return ["--base-url", sim.base_url, "--api-key", KEY, "--messages", scenario]


@pytest.fixture(scope="module")
def full_run(
    sim: RunningSimulator, scenario: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Result, Path]:
    out = tmp_path_factory.mktemp("out")
    result = run_cli(
        *endpoint_args(sim, scenario),
        "--runs",
        "1",
        "--budget",
        "500",
        "--turns",
        "3",
        "--json",
        out / "bench.json",
        "--plot",
        out / "bench.png",
    )
    return result, out


def test_bench_prints_the_table_and_writes_json_and_plot(full_run: tuple[Result, Path]) -> None:
    result, out = full_run
    assert result.exit_code == 0, result.output
    for label in (
        "untrimmed + blocking",
        "untrimmed + streaming",
        "trimmed + blocking",
        "trimmed + streaming",
        "change vs untrimmed + blocking",
        "TTFT = total",
        "unique cache salt",
        "prefix-stable trimming",
        "per 1k prefilled tokens",
        "per 1k tokens of context",
    ):
        assert label in " ".join(result.output.split()), label
    document = json.loads((out / "bench.json").read_text("utf-8"))
    assert document["endpoint"].startswith("http://127.0.0.1:")
    assert document["runs"] == 1
    assert [(m["trimmed"], m["streaming"]) for m in document["modes"]] == [
        (False, False),
        (False, True),
        (True, False),
        (True, True),
    ]
    for mode in document["modes"]:
        assert set(mode["ttft_ms"]) == set(mode["total_ms"]) == {"p50", "p95"}
        assert mode["input_tokens"] <= 500 if mode["trimmed"] else mode["input_tokens"] > 500
    assert document["turns"]["calls"] == 3
    assert (out / "bench.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_the_api_key_appears_nowhere(full_run: tuple[Result, Path]) -> None:
    result, out = full_run
    assert result.exit_code == 0
    assert KEY not in result.output
    assert KEY not in (out / "bench.json").read_text("utf-8")


def write_baseline(path: Path, p50: float) -> Path:
    mode = {"trimmed": True, "streaming": True, "input_tokens": 1, "ttft_ms": {"p50": p50}}
    path.write_text(json.dumps({"modes": [mode]}), encoding="utf-8")
    return path


@pytest.mark.parametrize(("baseline_ms", "exit_code"), [(60_000.0, 0), (0.001, 1)])
def test_regression_gate_exit_codes(
    sim: RunningSimulator, scenario: Path, tmp_path: Path, baseline_ms: float, exit_code: int
) -> None:
    baseline = write_baseline(tmp_path / "baseline.json", baseline_ms)
    result = run_cli(
        *endpoint_args(sim, scenario),
        "--runs",
        "1",
        "--baseline",
        baseline,
        "--max-regression",
        "10",
    )
    assert result.exit_code == exit_code, result.output
    assert "Regression gate (trimmed + streaming TTFT p50)" in result.output
    assert ("REGRESSION" in result.output) == (exit_code == 1)


def test_malformed_messages_file_is_a_value_error_naming_it(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    bad = tmp_path / "my-conversation.json"
    bad.write_text('[{"role": "wizard", "content": "hi"}]', encoding="utf-8")
    result = run_cli("--base-url", sim.base_url, "--messages", bad)
    assert isinstance(result.exception, ValueError)
    assert "my-conversation.json" in str(result.exception)
    assert "unknown role" in str(result.exception)


def test_malformed_baseline_fails_before_any_call(scenario: Path, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}", encoding="utf-8")
    # Nothing listens on port 9: had the bench called the endpoint, the error would differ.
    result = run_cli(
        "--base-url", "http://127.0.0.1:9/v1", "--messages", scenario, "--baseline", baseline
    )
    assert isinstance(result.exception, ValueError)
    assert "baseline.json" in str(result.exception)
    assert "no mode" in str(result.exception)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-regression", "5"], "--max-regression needs --baseline"),
        # inf passes click's min=0 and makes a gate that can never fail.
        (["--max-regression", "inf", "--baseline", "b.json"], "--max-regression inf"),
        (["--base-url", "localhost:8000"], "--base-url: 'localhost:8000' is not an http(s) URL"),
        (["--turns", "99"], "--turns 99"),
        (["--json", "/nonexistent-folder/out.json"], "does not exist"),
        # A folder given for a file: refused before the run, not after it (results lost).
        (
            ["--json", "/tmp"],
            "--json /tmp: that is a folder; give a file path, e.g. /tmp/bench.json",
        ),
        (["--plot", "/tmp"], "--plot /tmp: that is a folder"),
    ],
)
def test_bad_options_are_value_errors(scenario: Path, args: list[str], message: str) -> None:
    result = run_cli("--base-url", "http://127.0.0.1:9/v1", "--messages", scenario, *args)
    assert isinstance(result.exception, ValueError)
    assert message in str(result.exception)


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": f"lookup_{n}",
            "description": f"Looks up record kind {n}. " + "Use it only when asked. " * 30,
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        },
    }
    for n in range(4)
]


def test_the_tools_of_a_request_body_are_sent_and_counted(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    """The body's ``tools`` are sent and counted (ignored, they gave 94 tokens where ``trim``
    counted 4,649)."""
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"messages": CONVERSATION, "tools": TOOLS}), encoding="utf-8")
    out = tmp_path / "bench.json"

    result = run_cli(*endpoint_args(sim, body), "--runs", "1", "--budget", "2500", "--json", out)

    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text("utf-8"))
    counter = TokenCounter.for_model(Settings().llm.model)
    messages = convert_to_messages(CONVERSATION)
    tools_tokens = counter.count_tools(TOOLS)
    assert tools_tokens > 1000
    untrimmed = counter.count_request(messages, TOOLS)  # what `agent-latency trim` counts
    for mode in document["modes"]:
        if mode["trimmed"]:
            assert tools_tokens < mode["input_tokens"] <= 2500
        else:
            # ...and the cache salt the bench puts first (a dozen tokens)
            assert untrimmed < mode["input_tokens"] <= untrimmed + 20
    # The server saw the tools too (it counts in another tokenizer: roughly ours).
    for call in document["calls"]:
        assert call["server_input_tokens"] > tools_tokens, call


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_as_messages_is_refused_in_one_line_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "request.json"
    os.mkfifo(fifo)

    # In its own process: a regression that waits for a writer fails on the timeout.
    result = subprocess.run(
        [sys.executable, "-m", "agent_latency.cli", "bench", "--messages", str(fifo)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"agent-latency: error: {fifo}: not a regular file")


class _FallsOverAfter:
    """An endpoint that hands its first ``calls`` chat completions to the simulator and answers
    every later one 500 (a provider falling over during a run); anything else goes through."""

    def __init__(self, sim: RunningSimulator, calls: int) -> None:
        self.left = calls
        target = sim.base_url.removesuffix("/v1")
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(httpx.get(f"{target}{self.path}", headers=self._passed_on()))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/chat/completions"):
                    if endpoint.left == 0:
                        self._answer(httpx.Response(500, json={"error": {"message": "down"}}))
                        return
                    endpoint.left -= 1
                headers = {"Content-Type": "application/json", **self._passed_on()}
                self._answer(httpx.post(f"{target}{self.path}", content=body, headers=headers))

            def _passed_on(self) -> dict[str, str]:
                return {"Authorization": self.headers.get("Authorization", "")}

            def _answer(self, response: httpx.Response) -> None:
                content = response.content
                self.send_response(response.status_code)
                self.send_header("Content-Type", response.headers.get("content-type", "text/plain"))
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> _FallsOverAfter:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_an_endpoint_failing_midway_keeps_the_runs_that_finished(
    sim: RunningSimulator, scenario: Path, tmp_path: Path
) -> None:
    # A 500 after a run of answers lost every finished call: one line, exit 2, no table and no
    # --json, as for an endpoint that never answered.
    out = tmp_path / "out.json"
    with _FallsOverAfter(sim, calls=3) as endpoint:  # the warm-up and two modes' first run
        result = run_cli(
            *["--base-url", endpoint.base_url, "--api-key", KEY, "--messages", scenario],
            *["--runs", "2", "--json", out],
        )

    assert result.exit_code == 2, result.output
    document = json.loads(out.read_text("utf-8"))
    assert document["interrupted"] is True
    assert [mode["runs"] for mode in document["modes"]] == [1, 1, 0, 0]
    assert document["missing"][0] == "1 of 2 runs of untrimmed + blocking"
    output = " ".join(result.output.split())
    assert "Partial results: a call failed (http://127.0.0.1:" in output
    # The openai client words its error by version ("- down", or the body as a dict).
    said = r"answered HTTP 500: Error code: 500 - .*down.* Fix: check the endpoint's logs\)"
    assert re.search(said, output), output
    assert "Traceback" not in output
    assert output.endswith("Fix: check the endpoint's logs): the results above are partial.")
