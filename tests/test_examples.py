"""Every example in ``examples/``, run end to end as a user runs it, against its own simulator.

The six runs start together (they mostly wait on their simulators) and each test checks one.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from support.doc_runner import ISOLATED_PREFIXES, REPO, fenced_blocks
from support.otlp_receiver import OTLPReceiver

EXAMPLES = (
    "chain_with_trimmer",
    "agent_with_middleware",
    "attach_to_existing_agent",
    "langgraph_pre_model_hook",
)
# Runs that export to their own OTLP collector instead of the console: label -> example.
OTLP_RUNS = {"otlp": "chain_with_trimmer", "otlp_hook": "langgraph_pre_model_hook"}
# The console run of the chain reads this config (no base_url: it still starts its simulator);
# the others run on the defaults.
CHAIN_CONFIG = "[llm.prompt]\ntoken_budget = 1700\nreserve_for_output = 500\n"
DEFAULT_BUDGET = 6000
TIMEOUT_S = 120
# Every test here waits for the examples' runs: tens of seconds in all.
pytestmark = pytest.mark.slow
# The answer of the simulator, streamed one word at a time.
ANSWER_START = "The agent waited for the first token of this answer"


# The console exporter's trace tree: a "trace <id>" line, then indented lines, each a span's
# ("name  duration  ...") or a model call's details ("TTFT ...", "tokens sent ...").
_TRACE_LINE = re.compile(r"trace ([0-9a-f]{32})")
_SPAN_LINE = re.compile(r"  +(\S.*?)  \d+(?:\.\d+)? m?s(?:  .*)?")
_DETAIL_LINE = re.compile(r"  +(?:TTFT |tokens sent )")


@dataclass(frozen=True)
class Run:
    """An example's finished run: exit status, stdout and stderr, and the console spans."""

    status: int
    out: str
    err: str

    def spans(self) -> list[dict[str, Any]]:
        """The spans the console exporter printed to stdout: each one's name and trace id."""
        return [
            {"name": name, "context": {"trace_id": trace_id}}
            for trace_id, name in _tree_lines(self.out)
            if name is not None
        ]

    def text(self) -> str:
        """What the example itself printed to stdout, without the printed traces."""
        lines = self.out.splitlines(keepends=True)
        tree = set(_tree_indexes(lines))
        return "".join(line for index, line in enumerate(lines) if index not in tree)


def _tree_indexes(lines: list[str]) -> Iterator[int]:
    """The indexes of the lines that belong to a printed trace tree."""
    in_tree = False
    for index, line in enumerate(lines):
        line = line.rstrip("\n")
        if _TRACE_LINE.fullmatch(line):
            in_tree = True
        elif not (in_tree and (_SPAN_LINE.fullmatch(line) or _DETAIL_LINE.match(line))):
            in_tree = False
            continue
        yield index


def _tree_lines(out: str) -> Iterator[tuple[str, str | None]]:
    """Each tree line's trace id, and the span's name if it is a span's line."""
    lines = out.splitlines()
    trace_id = ""
    for index in _tree_indexes(lines):
        header = _TRACE_LINE.fullmatch(lines[index])
        if header:
            trace_id = header[1]
            continue
        span = _SPAN_LINE.fullmatch(lines[index])
        yield trace_id, span[1] if span else None


class _Started:
    """An example running in the background, its output going to files."""

    def __init__(self, label: str, name: str, args: list[str], workdir: Path) -> None:
        self._out = workdir / f"{label}.out"
        self._err = workdir / f"{label}.err"
        environment = {k: v for k, v in os.environ.items() if not k.startswith(ISOLATED_PREFIXES)}
        with self._out.open("w") as out, self._err.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "examples" / f"{name}.py"), *args],
                stdout=out,
                stderr=err,
                cwd=workdir,  # no config.toml there: the example starts its simulator
                env=environment,
            )

    def finish(self) -> Run:
        try:
            status = self.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"still running after {TIMEOUT_S} s:\n{self._err.read_text()}")
        return Run(status, self._out.read_text(), self._err.read_text())


@pytest.fixture(scope="module")
def collectors() -> Iterator[dict[str, OTLPReceiver]]:
    """One collector per OTLP run, so each one's spans can be told apart."""
    with contextlib.ExitStack() as stack:
        yield {label: stack.enter_context(OTLPReceiver()) for label in OTLP_RUNS}


@pytest.fixture(scope="module")
def runs(
    collectors: dict[str, OTLPReceiver], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, _Started]]:
    workdir = tmp_path_factory.mktemp("examples")
    (workdir / "chain.toml").write_text(CHAIN_CONFIG, encoding="utf-8")
    options = {"chain_with_trimmer": ["--config", "chain.toml"]}
    started = {name: _Started(name, name, options.get(name, []), workdir) for name in EXAMPLES}
    for label, name in OTLP_RUNS.items():
        otlp = ["--otlp", "--otlp-endpoint", collectors[label].endpoint]
        started[label] = _Started(label, name, otlp, workdir)
    yield started
    for run in started.values():
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()


def _finished(runs: dict[str, _Started], name: str) -> Run:
    run = runs[name].finish()
    assert run.status == 0, run.err
    assert "Traceback" not in run.err
    return run


def _span_names(run: Run) -> set[str]:
    return {span["name"] for span in run.spans()}


def test_every_example_is_run() -> None:
    scripts = {path.stem for path in (REPO / "examples").glob("*.py")}

    assert scripts - {"_common"} == set(EXAMPLES)


def _chain_summary(run: Run) -> tuple[int, int, int, int, int]:
    """The chain's last line: tokens before and after, budget, TTFT and total."""
    summary = re.search(
        r"prompt (\d+) -> (\d+) tokens \(budget (\d+)\); TTFT (\d+) ms, total (\d+) ms", run.err
    )
    assert summary, run.err
    before, after, budget, ttft, total = map(int, summary.groups())
    return before, after, budget, ttft, total


def test_chain_streams_the_trimmed_answer_and_prints_ttft(runs: dict[str, _Started]) -> None:
    run = _finished(runs, "chain_with_trimmer")

    assert run.text().startswith(ANSWER_START)
    before, after, budget, ttft, total = _chain_summary(run)
    assert budget == 1700  # the config's llm.prompt.token_budget, not a number of the example's
    assert after <= budget < before
    assert ttft < total  # streamed: the first token came before the 64th
    assert {"chat qwen-7b-chat", "agent_latency.trim"} <= _span_names(run)


def test_the_chain_trims_at_the_default_budget_without_a_config(
    runs: dict[str, _Started],
) -> None:
    before, after, budget, _, _ = _chain_summary(_finished(runs, "otlp"))

    assert budget == DEFAULT_BUDGET
    assert after <= budget < before


def test_agent_with_middleware_calls_a_tool(runs: dict[str, _Started]) -> None:
    run = _finished(runs, "agent_with_middleware")

    # One line per message of the final state: the question, the call, its result, the answer.
    lines = [line for line in run.text().splitlines() if line.strip()]
    assert [line.split(":")[0].strip() for line in lines] == ["human", "ai", "tool", "ai"]
    assert lines[1] == "    ai: '' -> tools ['search_orders']"
    assert "order 1043 (delayed at customs)" in lines[2]
    assert lines[3].startswith(f"    ai: '{ANSWER_START[:40]}")
    names = _span_names(run)
    assert {"chat qwen-7b-chat", "agent_latency.trim", "execute_tool search_orders"} <= names


def test_attached_agent_is_traced_and_leaves_no_open_run(runs: dict[str, _Started]) -> None:
    run = _finished(runs, "attach_to_existing_agent")

    assert "open runs after the call: 0" in run.err.splitlines()
    assert f"answer: '{ANSWER_START}" in run.text()
    assert {"chat qwen-7b-chat", "agent_latency.trim", "execute_tool weather"} <= _span_names(run)


def test_pre_model_hook_sends_fewer_messages_than_the_state_keeps(
    runs: dict[str, _Started],
) -> None:
    run = _finished(runs, "langgraph_pre_model_hook")

    counts = re.search(
        r"state keeps (\d+) messages; the model saw (\d+) of the first (\d+) \((\d+) tokens\)",
        run.text(),
    )
    assert counts, run.text()
    state, seen, first, tokens = map(int, counts.groups())
    assert seen < first < state
    assert tokens <= 600  # the example's budget
    assert {"chat qwen-7b-chat", "agent_latency.trim"} <= _span_names(run)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_one_user_call_of_an_example_is_one_trace(name: str, runs: dict[str, _Started]) -> None:
    run = _finished(runs, name)

    traces = {span["context"]["trace_id"] for span in run.spans()}
    assert len(traces) == 1, sorted(
        (span["name"], span["context"]["trace_id"]) for span in run.spans()
    )


@pytest.mark.parametrize("label", sorted(OTLP_RUNS))
def test_the_collector_receives_one_trace_per_user_call(
    label: str, runs: dict[str, _Started], collectors: dict[str, OTLPReceiver]
) -> None:
    _finished(runs, label)

    spans = collectors[label].spans()
    assert {"chat qwen-7b-chat", "agent_latency.trim"} <= {span.name for span in spans}
    # What the example prints about its trim comes from the run, not from a second trim.
    assert len({span.trace_id for span in spans}) == 1, sorted(
        (span.name, span.trace_id) for span in spans
    )


def test_otlp_export_reaches_the_collector(
    runs: dict[str, _Started], collectors: dict[str, OTLPReceiver]
) -> None:
    run = _finished(runs, "otlp")
    collector = collectors["otlp"]

    assert run.spans() == []  # nothing on the console
    spans = collector.spans()
    [chat] = [span for span in spans if span.name == "chat qwen-7b-chat"]
    trims = [span for span in spans if span.name == "agent_latency.trim"]
    # The trim inside the chain sits in the model call's trace.
    assert chat.trace_id in {span.trace_id for span in trims}
    assert chat.resource["service.name"] == "agent-latency-example"
    # Cumulative: the last export counts the one streamed call.
    ttft = collector.points(gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK)
    assert ttft and ttft[-1].count == 1


def test_the_quickstart_shows_the_example_config_files_as_they_are() -> None:
    # The quickstart is read in an empty folder, maybe after a non-editable install: it shows
    # the templates inline instead of asking for examples/, and must show them as they are.
    blocks = fenced_blocks((REPO / "docs" / "quickstart.md").read_text(encoding="utf-8"))
    shown = {block.language: block.text for block in blocks if block.language in ("toml", "json")}

    assert shown["toml"] == (REPO / "examples" / "config.toml").read_text(encoding="utf-8")
    assert shown["json"] == (REPO / "examples" / "settings.json").read_text(encoding="utf-8")


def test_the_quickstarts_commands_need_no_file_of_the_checkout() -> None:
    blocks = fenced_blocks((REPO / "docs" / "quickstart.md").read_text(encoding="utf-8"))
    commands = [
        line
        for block in blocks
        if block.language == "console"
        for line in block.text.splitlines()
        if line.startswith("$ ")
    ]

    assert commands
    assert [c for c in commands if re.search(r"\b(examples|scripts)/", c)] == []
