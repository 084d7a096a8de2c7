"""The simulator under hostile or careless clients, beyond ``test_sim.py``.

Body size edges and a declared length that is never sent, JSON that is not an object or not JSON,
strings holding a lone UTF-16 surrogate, more wrong content types, 200 concurrent connections
mixing every kind of request (each gets its own proper status), idle half-open connections, and
the exact listening sockets: the simulator (in-process and ``agent-latency sim``) listens on the
address given and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_latency.sim import DEFAULT_MODEL, RunningSimulator, SimulatorConfig, running_simulator

LIMIT = 16_384
FAST = SimulatorConfig(overhead_ms=0, prefill_ms_per_token=0, answer_tokens=2, max_body_bytes=LIMIT)
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
JSON_HEADERS = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(FAST) as running:
        yield running


def chat_url(sim: RunningSimulator) -> str:
    return f"{sim.base_url}/chat/completions"


def body_of_size(size: int) -> bytes:
    """A valid chat request of exactly ``size`` bytes."""

    def request(content: str) -> bytes:
        return json.dumps(
            {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": content}]}
        ).encode()

    body = request("x" * (size - len(request(""))))
    assert len(body) == size
    return body


def read_response(connection: socket.socket) -> bytes:
    """Reads one HTTP response, head and body (by its Content-Length), from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += receive(connection)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += receive(connection)
    return head + b"\r\n\r\n" + body


def receive(connection: socket.socket) -> bytes:
    data = connection.recv(65_536)
    if not data:
        raise ConnectionError("the server closed the connection mid-response")
    return data


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI-style error object of a refusal."""
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] and error["message"]
    return dict(error)


# --- bodies ------------------------------------------------------------------------------------


def test_a_body_of_exactly_the_limit_is_served_and_one_byte_more_is_refused(
    sim: RunningSimulator,
) -> None:
    at_limit = httpx.post(chat_url(sim), content=body_of_size(LIMIT), headers=JSON_HEADERS)
    over = httpx.post(chat_url(sim), content=body_of_size(LIMIT + 1), headers=JSON_HEADERS)

    assert at_limit.status_code == 200
    assert over.status_code == 413 and error_of(over)["code"] == "request_too_large"


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(
    sim: RunningSimulator,
) -> None:
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as connection:
        connection.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
        )
        response = read_response(connection)  # answered without the 100 MB, never sent

    assert response.startswith(b"HTTP/1.1 413 ")
    assert b'"request_too_large"' in response


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"null", "must be a JSON object"),
        (b'"a string"', "must be a JSON object"),
        (b"42", "must be a JSON object"),
        (b"true", "must be a JSON object"),
        (b"", "could not parse"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "\xff"}]}', "could not parse"),
        (b'{"model": "m", "messages": [], "max_tokens": ' + b"9" * 5000 + b"}", "could not parse"),
        (b'{"model": "m", "messages": [', "could not parse"),
        (b'{"model": "m", "messages": [], "temperature": NaN}', "could not parse"),
        (b'{"model": "m", "messages": [], "top_p": -Infinity}', "could not parse"),
        (b'{"model": "m", "messages": [], "max_tokens": Infinity}', "could not parse"),
    ],
    ids=[
        "null",
        "string",
        "number",
        "boolean",
        "empty",
        "not-utf8",
        "huge-integer",
        "truncated",
        "nan",
        "minus-infinity",
        "infinity",
    ],
)
def test_bodies_that_are_not_a_json_object_get_400(
    sim: RunningSimulator, body: bytes, message: str
) -> None:
    response = httpx.post(chat_url(sim), content=body, headers=JSON_HEADERS)

    assert response.status_code == 400
    assert message in error_of(response)["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("request_fields", "param", "surrogate"),
    [
        (
            {"messages": [{"role": "user", "content": "half a pair: \ud800"}]},
            "messages[0].content",
            "\\ud800",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "\U0001f600 ok, \udc00 not"}],
                    }
                ]
            },
            "messages[0].content[0].text",
            "\\udc00",
        ),
        (
            {
                "messages": QUESTION,
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "lookup",
                            "parameters": {"type": "object", "properties": {"city\udbff": {}}},
                        },
                    }
                ],
            },
            "tools[0].function.parameters.properties.city\\udbff",
            "\\udbff",
        ),
        ({"messages": QUESTION, "model": "gpt\ud800"}, "model", "\\ud800"),
    ],
    ids=["content", "content-part", "tool-schema-key", "model"],
)
def test_a_lone_surrogate_gets_openais_400_naming_the_field(
    sim: RunningSimulator, request_fields: dict[str, Any], param: str, surrogate: str, stream: bool
) -> None:
    # json.dumps escapes it as JavaScript's JSON.stringify does; the openai client cannot send it.
    body = json.dumps({"model": DEFAULT_MODEL, "stream": stream} | request_fields).encode()
    assert surrogate.encode() in body

    response = httpx.post(chat_url(sim), content=body, headers=JSON_HEADERS)

    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert f"lone UTF-16 surrogate ({surrogate} at character" in error["message"]


def test_a_surrogate_pair_is_text_and_is_served(sim: RunningSimulator) -> None:
    body = json.dumps(
        {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "smile \U0001f600"}]}
    ).encode()
    assert b"\\ud83d\\ude00" in body

    assert httpx.post(chat_url(sim), content=body, headers=JSON_HEADERS).status_code == 200


@pytest.mark.parametrize(
    "content_type",
    ["application/json-patch+json", "application/jsonx", "text/json", "multipart/form-data; b=x"],
)
def test_near_miss_content_types_get_415(sim: RunningSimulator, content_type: str) -> None:
    body = json.dumps({"model": DEFAULT_MODEL, "messages": QUESTION}).encode()
    response = httpx.post(chat_url(sim), content=body, headers={"content-type": content_type})

    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_a_wrong_content_type_is_refused_as_such_even_with_an_oversized_body(
    sim: RunningSimulator,
) -> None:
    response = httpx.post(
        chat_url(sim), content=b"x" * (LIMIT * 4), headers={"content-type": "text/plain"}
    )

    assert response.status_code == 415


# --- the context window ----------------------------------------------------------------------


def test_a_prompt_beyond_the_context_window_gets_openais_400() -> None:
    with running_simulator(replace(FAST, context_window=10**6)) as measuring:
        first = httpx.post(chat_url(measuring), json={"model": DEFAULT_MODEL, "messages": QUESTION})
    prompt_tokens = first.json()["usage"]["prompt_tokens"]
    window = prompt_tokens + 5
    with running_simulator(replace(FAST, context_window=window)) as sim:
        fits = httpx.post(
            chat_url(sim), json={"model": DEFAULT_MODEL, "messages": QUESTION, "max_tokens": 5}
        )
        too_long = httpx.post(
            chat_url(sim), json={"model": DEFAULT_MODEL, "messages": QUESTION, "max_tokens": 6}
        )
        messages_alone = httpx.post(
            chat_url(sim),
            json={"model": DEFAULT_MODEL, "messages": [*QUESTION, *QUESTION]},
        )

    assert fits.status_code == 200
    assert too_long.status_code == 400
    error = error_of(too_long)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["message"] == (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt_tokens + 6} tokens ({prompt_tokens} in the messages, 6 in the completion). "
        "Please reduce the length of the messages or completion."
    )
    assert messages_alone.status_code == 400
    assert "your messages resulted in" in error_of(messages_alone)["message"]


# --- many clients at once ---------------------------------------------------------------------

VALID = json.dumps({"model": DEFAULT_MODEL, "messages": QUESTION}).encode()
KINDS: dict[str, tuple[str, dict[str, Any], int]] = {
    "blocking": ("POST", {"content": VALID, "headers": JSON_HEADERS}, 200),
    "streaming": (
        "POST",
        {
            "content": json.dumps(
                {"model": DEFAULT_MODEL, "messages": QUESTION, "stream": True}
            ).encode(),
            "headers": JSON_HEADERS,
        },
        200,
    ),
    "malformed": ("POST", {"content": b"{not json", "headers": JSON_HEADERS}, 400),
    "missing_field": ("POST", {"content": b'{"model": "m"}', "headers": JSON_HEADERS}, 400),
    "not_json": ("POST", {"content": VALID, "headers": {"content-type": "text/plain"}}, 415),
    "too_large": ("POST", {"content": body_of_size(LIMIT + 1), "headers": JSON_HEADERS}, 413),
    "unknown_model": (
        "POST",
        {"content": VALID.replace(DEFAULT_MODEL.encode(), b"gpt-nope"), "headers": JSON_HEADERS},
        404,
    ),
    "wrong_method": ("GET", {}, 405),
}


async def test_200_concurrent_connections_each_get_their_proper_status() -> None:
    # Requests wait 100 ms in the server, so all 200 are open at the same time.
    config = SimulatorConfig(overhead_ms=100, answer_tokens=2, max_body_bytes=LIMIT)
    kinds = [list(KINDS)[index % len(KINDS)] for index in range(200)]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with running_simulator(config) as busy:
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:

            async def send(kind: str) -> tuple[str, int, bytes]:
                method, request, _ = KINDS[kind]
                response = await client.request(method, chat_url(busy), **request)
                return kind, response.status_code, response.content

            answers = await asyncio.gather(*(send(kind) for kind in kinds))
            health = await client.get(busy.base_url.removesuffix("/v1") + "/health")
        stats = busy.stats

    wrong = [(kind, status) for kind, status, _ in answers if status != KINDS[kind][2]]
    assert wrong == []
    for kind, status, content in answers:
        if kind == "streaming":
            assert content.rstrip().endswith(b"data: [DONE]")
        elif status != 200:
            assert json.loads(content)["error"]["message"]
    counts = Counter(kinds)
    assert stats.requests == counts["blocking"] + counts["streaming"]
    refused_chats = sum(counts[kind] for kind in KINDS if KINDS[kind][2] in (400, 404, 413, 415))
    assert stats.errors == refused_chats
    assert health.status_code == 200


def test_idle_half_open_connections_do_not_hold_up_other_clients(sim: RunningSimulator) -> None:
    with contextlib.ExitStack() as stack:
        for _ in range(50):
            idle = stack.enter_context(socket.create_connection(("127.0.0.1", sim.port), 5))
            idle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Le")
        started = time.monotonic()
        response = httpx.post(chat_url(sim), content=VALID, headers=JSON_HEADERS, timeout=10)
        waited = time.monotonic() - started

    assert response.status_code == 200
    assert waited < 5  # served, not queued behind the idle ones (the timeout would say so)


# --- listening sockets ------------------------------------------------------------------------


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[offset : offset + 4][::-1] for offset in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening_sockets(pid: int | str = "self") -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket process ``pid`` listens on (Linux ``/proc``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                hex_address, hex_port = local.split(":")
                found.add((_address(hex_address), int(hex_port, 16)))
    return found


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1"])
def test_the_simulator_listens_on_the_given_address_only(host: str) -> None:
    before = listening_sockets()
    with running_simulator(FAST, host=host) as running:
        during = listening_sockets()
        port = running.port
        served = httpx.get(running.base_url.removesuffix("/v1") + "/health", timeout=5)
    after = listening_sockets()

    assert during - before == {(host, port)}
    assert served.status_code == 200
    assert after == before


def test_the_sim_command_listens_on_the_given_address_only(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "agent_latency.cli._app", "sim", "--host", "127.0.0.2"]
    child = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while not listening_sockets(child.pid) and time.monotonic() < deadline:
            assert child.poll() is None, "agent-latency sim exited"
            time.sleep(0.05)
        sockets = listening_sockets(child.pid)
        served = httpx.get(f"http://127.0.0.2:{port}/health", timeout=5)
    finally:
        child.terminate()
        child.wait(10)

    assert sockets == {("127.0.0.2", port)}
    assert served.status_code == 200
