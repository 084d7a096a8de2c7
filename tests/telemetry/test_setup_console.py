"""What a user reads on the console: the ``console`` exporter's trace tree and the
slow-first-token warning on a line of its own.

Real ``ChatOpenAI`` streaming over HTTP from the embedded simulator.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_openai import ChatOpenAI
from support.ports import refused_port
from support.simulators import QUICK, chat_openai_of, settings_of

from agent_latency import (
    LatencyRecord,
    PriorityTrimmer,
    build_chat_model,
    configure_telemetry,
)
from agent_latency.sim import SimulatorConfig, running_simulator

SIMULATOR = SimulatorConfig(
    overhead_ms=150, prefill_ms_per_token=0.05, decode_tokens_per_s=400, answer_tokens=12
)


def test_one_streamed_call_is_a_short_tree_naming_its_ttft_and_trim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # It printed 490-830 lines of JSON for one model call.
    records: list[LatencyRecord] = []
    history = [
        message
        for n in range(20)
        for message in (HumanMessage(f"Report {n}: " + "sales up " * 40), AIMessage(f"Noted {n}."))
    ]
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are concise."), MessagesPlaceholder("history"), ("user", "{question}")]
    )
    with running_simulator(SIMULATOR) as sim:
        # The project's model class: it reads the server's prefill time (llama.cpp's timings).
        model = build_chat_model(settings_of(sim), streaming=True)
        with configure_telemetry(exporter="console", set_global=False) as telemetry:
            trimmer = PriorityTrimmer(budget=600, tracer_provider=telemetry.tracer_provider)
            chain = prompt | trimmer | model
            inputs = {"history": history, "question": "What changed?"}
            config = {"callbacks": [telemetry.handler(on_record=records.append)]}
            for _ in chain.stream(inputs, config=config):  # type: ignore[arg-type]
                pass
    out = capsys.readouterr().out

    lines = out.splitlines()
    assert 0 < len(lines) <= 25, out
    assert lines[0] == "" and re.fullmatch(r"trace [0-9a-f]{32}", lines[1])
    (record,) = records
    assert record.ttft_ms is not None
    chat = next(n for n, line in enumerate(lines) if line.strip().startswith("chat "))
    ttft = lines[chat + 1].strip()
    assert ttft.startswith(f"TTFT {record.ttft_ms:.0f} ms = server prefill "), out
    assert "+ remainder " in ttft
    assert lines[chat + 2].strip().startswith(f"tokens sent {record.input_tokens:,} (0 cached)")
    (trim,) = [line for line in lines if line.strip().startswith("agent_latency.trim ")]
    assert re.search(r"sent [\d,]+ of 600 tokens \(from [\d,]+\)  \d+ dropped  0 shortened", trim)

    # Indented as the tree: the chain, then the trimmer's and the model's spans under it.
    def depth(start: str) -> int:
        (line,) = [line for line in lines if line.lstrip().startswith(start)]
        return len(line) - len(line.lstrip())

    assert depth("chain RunnableSequence") < depth("chat ") < depth("TTFT ")
    assert depth("chain RunnableSequence") < depth("chain PriorityTrimmer")


def test_the_slow_first_token_warning_starts_a_line_of_its_own() -> None:
    # With stdout and stderr on one terminal it read "Theslow first token: ...", written right
    # after the streamed answer's first word.
    program = textwrap.dedent(
        f"""
        from langchain_openai import ChatOpenAI
        from agent_latency import configure_telemetry
        from agent_latency.sim import SimulatorConfig, running_simulator

        with running_simulator(SimulatorConfig(overhead_ms=150, answer_tokens=6)) as sim:
            model = ChatOpenAI(base_url=sim.base_url, api_key="unused",
                               model=sim.config.models[0], streaming=True, max_retries=0)
            with configure_telemetry(exporter="none", set_global=False) as telemetry:
                handler = telemetry.handler(ttft_warn_ms=1, ttft_error_ms=60_000)
                for chunk in model.stream("hi", config={{"callbacks": [handler]}}):
                    print(chunk.content, end="", flush=True)
        print({"END"!r})
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one file for both, as a terminal is
        text=True,
        timeout=120,
        check=True,
    )

    lines = done.stdout.splitlines()
    warnings = [line for line in lines if "slow first token:" in line]
    assert len(warnings) == 1, done.stdout
    assert warnings[0].startswith("slow first token: "), done.stdout
    assert lines[-1].endswith("END")  # the answer itself went on, on stdout


def test_a_failed_call_says_so_on_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    port = refused_port()  # nothing listens there
    model = ChatOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="unused",  # type: ignore[arg-type]
        model="m",
        max_retries=0,
    )
    with (
        configure_telemetry(exporter="console", set_global=False) as telemetry,
        pytest.raises(Exception, match="Connection error"),
    ):
        model.invoke("hi", config={"callbacks": [telemetry.handler()]})
    lines = capsys.readouterr().out.splitlines()

    (chat,) = [line for line in lines if line.strip().startswith("chat m ")]
    assert re.search(r"  error: \w*ConnectionError$", chat), lines  # the class, not its module


class _ClosedPipe:
    """stdout once the program it was piped to has exited (``app | head``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("exporter", ["console", "console-json"])
def test_a_stdout_that_cannot_be_written_is_one_warning_not_a_traceback_per_export(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, exporter: str
) -> None:
    # Each export logged "Exception while exporting Span." (and metrics) with the
    # BrokenPipeError's traceback.
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    with (
        running_simulator(QUICK) as sim,
        caplog.at_level(logging.WARNING),
        configure_telemetry(exporter=exporter, set_global=False) as telemetry,
    ):
        handler = telemetry.handler(log_every_request=False)
        for _ in range(3):
            chat_openai_of(sim).invoke("hi", config={"callbacks": [handler]})
            telemetry.tracer_provider.force_flush()

    assert "Exception while exporting" not in caplog.text
    assert [record.getMessage() for record in caplog.records] == [
        "agent-latency: the console exporter cannot write to stdout (BrokenPipeError); it "
        "prints nothing more"
    ]
