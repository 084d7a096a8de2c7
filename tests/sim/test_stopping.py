"""Stopping the simulator and clients that vanish or dawdle: Ctrl-C on ``agent-latency sim``
with requests in prefill, a client gone mid-body, a client too slow to send its headers or its
body, a stop while a body arrives, and the command's one-line errors.

Subprocess tests run ``python -m agent_latency.cli sim --port 0`` and send it SIGINT; every wait
is bounded.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
from typer.main import get_command

from agent_latency.cli import app, main
from agent_latency.sim import DEFAULT_MODEL, SimulatorConfig, running_simulator

LONG_PREFILL_MS = "600000"  # ten minutes: a Ctrl-C that waits for it fails the bounded wait
EXIT_WAIT_S = 60  # the process's own exit is slow on a loaded machine: import teardown
BODY = json.dumps({"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "hi"}]})


def request_head(length: int) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
    )


def connect(port: int) -> socket.socket:
    """Connects once the server listens (it is bound before it listens)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def sim_command(*options: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    command = [sys.executable, "-m", "agent_latency.cli", "sim", "--port", "0", *options]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        before = [child.stderr.readline() for _ in range(1)]
        while not (port := re.search(r"127\.0\.0\.1:(\d+)/v1", before[-1])):
            assert before[-1] and len(before) < 20, before  # it exited, or never said where
            before.append(child.stderr.readline())
        yield child, int(port.group(1))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(EXIT_WAIT_S)


def interrupted(child: subprocess.Popen[str], times: int = 1) -> tuple[int, str]:
    """Sends Ctrl-C ``times`` times; returns the exit status and what was left on stderr."""
    for _ in range(times):
        child.send_signal(signal.SIGINT)
        time.sleep(0.2)
    try:
        _, stderr = child.communicate(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail("agent-latency sim did not stop on Ctrl-C")
    return child.returncode, stderr


def in_prefill(port: int) -> socket.socket:
    """Sends a whole blocking request and returns its connection, the answer not yet due."""
    connection = connect(port)
    connection.sendall(request_head(len(BODY)) + BODY.encode())
    time.sleep(0.5)  # accepted and waiting out its prefill
    return connection


def test_ctrl_c_stops_at_once_while_a_gone_clients_request_is_in_prefill() -> None:
    with sim_command("--overhead-ms", LONG_PREFILL_MS) as (child, port):
        in_prefill(port).close()
        status, stderr = interrupted(child)

    assert status == 128 + signal.SIGINT
    assert "Traceback" not in stderr and "ERROR" not in stderr


def test_ctrl_c_on_an_idle_simulator_exits_130_too() -> None:
    # uvicorn raises the signal again once stopped, and asyncio's own handler could take it:
    # an idle simulator exited 0, one with a request in prefill 130, by a race.
    with sim_command() as (child, _port):
        status, stderr = interrupted(child)

    assert status == 128 + signal.SIGINT
    assert "Traceback" not in stderr


def test_a_second_ctrl_c_exits_without_a_traceback() -> None:
    with sim_command("--overhead-ms", LONG_PREFILL_MS) as (child, port):
        connection = in_prefill(port)
        status, stderr = interrupted(child, times=2)
        connection.close()

    assert status in (128 + signal.SIGINT, -signal.SIGINT)  # exits, or dies of the signal
    assert "Traceback" not in stderr and "ERROR" not in stderr


def test_stopping_answers_requests_in_prefill_503_and_ends_streams_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: dict[str, object] = {}

    def ask(kind: str, base_url: str) -> None:
        body = json.loads(BODY) | {"stream": kind == "streaming"}
        try:
            answers[kind] = httpx.post(f"{base_url}/chat/completions", json=body, timeout=30)
        except httpx.HTTPError as error:
            answers[kind] = error

    long_prefill = SimulatorConfig(overhead_ms=float(LONG_PREFILL_MS))
    with caplog.at_level(logging.INFO):
        with running_simulator(long_prefill) as sim:
            clients = [
                threading.Thread(target=ask, args=(kind, sim.base_url))
                for kind in ("blocking", "streaming")
            ]
            for client in clients:
                client.start()
            time.sleep(1)  # both in prefill
        for client in clients:  # the simulator has stopped
            client.join(30)

    blocking = answers["blocking"]
    assert isinstance(blocking, httpx.Response) and blocking.status_code == 503
    assert "shutting down" in blocking.json()["error"]["message"]
    streaming = answers["streaming"]  # ends with an error event, as OpenAI's streams do
    assert isinstance(streaming, httpx.Response) and streaming.status_code == 200
    events = [line for line in streaming.text.splitlines() if line.startswith("data: ")]
    assert events == [
        'data: {"error":{"message":"The server is shutting down; try again.",'
        '"type":"server_error","param":null,"code":null}}'
    ]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_client_gone_while_sending_its_body_leaves_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=1)
    with caplog.at_level(logging.INFO), running_simulator(config) as sim:
        for _ in range(3):
            with connect(sim.port) as connection:
                connection.sendall(request_head(1000) + b'{"model": ')
                time.sleep(0.2)
        served = httpx.post(
            f"{sim.base_url}/chat/completions",
            content=BODY,
            timeout=10,
            headers={"content-type": "application/json"},
        )
        stats = sim.stats

    assert served.status_code == 200
    assert stats.errors == 0 and stats.requests == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def read_until_closed(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(65_536):
        data += chunk
    return data


def test_a_client_too_slow_with_its_headers_gets_408_and_is_disconnected() -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=1, header_timeout_s=0.5)
    with running_simulator(config) as sim, connect(sim.port) as slow, connect(sim.port) as silent:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\n")
        answer_to_slow = read_until_closed(slow)  # socket timeout: 10 s
        answer_to_silent = read_until_closed(silent)

    assert answer_to_slow.startswith(b"HTTP/1.1 408 ")
    assert answer_to_silent.startswith(b"HTTP/1.1 408 ")


def test_the_header_deadline_spares_a_request_whose_answer_takes_longer() -> None:
    config = SimulatorConfig(overhead_ms=1500, answer_tokens=1, header_timeout_s=0.5)
    with running_simulator(config) as sim, connect(sim.port) as connection:
        connection.sendall(request_head(len(BODY)))  # the head in time, the body a bit later
        time.sleep(0.2)
        connection.sendall(BODY.encode())
        answer = connection.recv(65_536)

    assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_body_trickled_a_byte_at_a_time_gets_408_at_the_deadline() -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=1, header_timeout_s=0.5)
    with running_simulator(config) as sim, connect(sim.port) as connection:
        connection.sendall(request_head(10_000))  # the head in time, then a byte every 0.1 s
        trickling = threading.Event()
        trickling.set()

        def trickle() -> None:
            for _ in range(100):
                if not trickling.is_set():
                    return
                try:
                    connection.sendall(b" ")
                except OSError:  # disconnected, as it should be
                    return
                time.sleep(0.1)

        sender = threading.Thread(target=trickle)
        sender.start()
        try:
            answer = read_until_closed(connection)  # socket timeout: 10 s
        finally:
            trickling.clear()
            sender.join(15)
        stats = sim.stats

    assert answer.startswith(b"HTTP/1.1 408 ")
    assert stats.requests == 0


def test_stopping_while_a_body_arrives_answers_503_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=1)
    with caplog.at_level(logging.INFO), connect_later() as connections:
        with running_simulator(config) as sim:
            connection = connections(sim.port)
            connection.sendall(request_head(1000) + b'{"model": ')
            time.sleep(0.3)  # the head is in, the app waits for the rest of the body
            stopping_since = time.monotonic()
        stopped_in_s = time.monotonic() - stopping_since
        answer = read_until_closed(connection)

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert json.loads(body)["error"]["message"] == "The server is shutting down; try again."
    assert stopped_in_s < 5  # not the graceful timeout, then a cancelled task
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@contextmanager
def connect_later() -> Iterator[Callable[[int], socket.socket]]:
    """Connections that outlive the server they were made to, closed at the end."""
    made: list[socket.socket] = []

    def connection(port: int) -> socket.socket:
        made.append(connect(port))
        return made[-1]

    try:
        yield connection
    finally:
        for each in made:
            each.close()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--log-level", "garbage"], "--log-level"),
        (["--cache-tokens", "0"], "cache_tokens"),
        (["--tokenizer", "server"], "tokenizer"),
        (["--attention-ms-per-1k-context", "-1"], "attention_ms_per_1k_context"),
    ],
)
def test_bad_options_get_one_line_and_exit_2(
    options: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["sim", "--port", "0", *options])

    stderr = capsys.readouterr().err
    assert status == 2
    assert len(stderr.strip().splitlines()) == 1 and named in stderr


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_the_help_reads_whole_at_80_columns(
    flag: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["sim", flag]) == 0

    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 80
    for option in sim_command_options():
        assert re.search(rf"(^|\s){re.escape(option)}(\s|$)", text, re.MULTILINE), option
    assert "AGENT_LATENCY_SIM_API_KEY" in text
    assert "<bool>" not in text and "…" not in text
    assert "parallel_tool_calls" in text  # how tools are chosen is documented


def sim_command_options() -> list[str]:
    command = get_command(app).commands["sim"]  # type: ignore[attr-defined]
    return [name for param in command.params for name in (*param.opts, *param.secondary_opts)]


@pytest.mark.parametrize(
    ("options", "counted_as"),
    [((), "qwen + qwen framing"), (("--tokenizer", "qwem"), "cl100k_base + openai framing")],
    ids=["the served model's own", "a misspelt name"],
)
def test_the_listening_line_says_what_prompt_tokens_are_counted_in(
    options: tuple[str, ...], counted_as: str
) -> None:
    # A name it does not know is taken for a model's and counted as cl100k, and nothing said
    # so: a typo (qwem for qwen) counted every prompt in another vocabulary, unseen.
    command = [sys.executable, "-m", "agent_latency.cli", "sim", "--port", "0", *options]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
    finally:
        child.kill()
        child.wait(EXIT_WAIT_S)
    assert re.search(r"127\.0\.0\.1:\d+/v1", line)
    assert f"prompt tokens counted as {counted_as}" in line
