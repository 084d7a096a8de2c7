"""Counting with the endpoint's own tokenize route (``tokenizer="server"``), over real HTTP.

The servers here speak llama.cpp's ``POST /tokenize`` and llama-cpp-python's
``POST /extras/tokenize`` with Qwen's real vocabulary, on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import quicktok
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import SecretStr

from agent_latency import PriorityTrimmer
from agent_latency.config import Settings
from agent_latency.tokens import TokenCounter

KEY = "sk-canary-0123456789abcdef"
QWEN = quicktok.get_encoding("qwen3")
BOS = 151_643
MESSAGES = [
    SystemMessage("你是一个旅行助手。Be brief."),
    HumanMessage("帮我查一下北京明天的天气。What should I pack?"),
    AIMessage("北京明天晴朗，12–25°C。Pack light layers."),
]


class _Server(ThreadingHTTPServer):
    routes: dict[str, Any]
    requests: list[tuple[str, str | None]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, self.headers.get("Authorization")))
        route = self.server.routes.get(self.path)
        if route is None:
            self._send(404, {"error": "not found"})
        elif self.headers.get("Authorization") != f"Bearer {KEY}":
            self._send(401, {"error": f"bad key {self.headers.get('Authorization')}"})
        else:
            self._send(200, route(body))

    def _send(self, status: int, answer: object) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError):  # the client timed out and left
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _llama_cpp_tokenize(body: dict[str, Any]) -> dict[str, Any]:
    assert body["add_special"] is False and body["parse_special"] is True
    return {"tokens": QWEN.encode_with_special(body["content"])}


def _llama_cpp_python_tokenize(body: dict[str, Any]) -> dict[str, Any]:
    return {"tokens": [BOS, *QWEN.encode_with_special(body["input"])]}  # always adds BOS


def _detokenize(body: dict[str, Any]) -> dict[str, Any]:
    return {"content": QWEN.decode(body["tokens"])}


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[_Server] = []

    def start(routes: dict[str, Any]) -> _Server:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.routes, server.requests = routes, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _base_url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_llama_cpp_tokenize_route_counts_as_the_offline_vocabulary(serve: Any) -> None:
    server = serve({"/tokenize": _llama_cpp_tokenize, "/detokenize": _detokenize})
    counter = TokenCounter.for_model(
        "qwen2.5-7b-instruct", tokenizer="server", base_url=_base_url(server), api_key=KEY
    )

    assert counter.count_messages(MESSAGES) == (
        TokenCounter.for_model("qwen2.5-7b-instruct").count_messages(MESSAGES)
    )
    assert counter.decode(counter.encode("北京 weather")) == "北京 weather"
    assert {auth for _, auth in server.requests} == {f"Bearer {KEY}"}


def test_each_text_is_sent_once_then_counted_from_the_cache(serve: Any) -> None:
    server = serve({"/tokenize": _llama_cpp_tokenize})
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=_base_url(server), api_key=KEY
    )
    counter.count_messages(MESSAGES)
    sent = len(server.requests)

    counter.count_messages([*(m.model_copy() for m in MESSAGES), HumanMessage("再见")])

    assert len(server.requests) == sent + 1  # only the new message's text


def test_llama_cpp_python_route_has_its_bos_token_taken_off(serve: Any) -> None:
    server = serve({"/extras/tokenize": _llama_cpp_python_tokenize})
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=_base_url(server), api_key=KEY
    )

    assert counter.encode("你好 world") == QWEN.encode_with_special("你好 world")


def test_a_server_without_a_tokenize_route_gets_a_clear_error(serve: Any) -> None:
    server = serve({})
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=_base_url(server), api_key=KEY
    )

    with pytest.raises(ValueError, match=r"no tokenize route.*/tokenize.*Fix") as raised:
        counter.count_messages(MESSAGES)
    assert KEY not in str(raised.value) and KEY not in repr(counter)


def test_a_refused_key_is_reported_without_the_key(serve: Any) -> None:
    server = serve({"/tokenize": _llama_cpp_tokenize})
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=_base_url(server), api_key="sk-wrong-key-123"
    )

    with pytest.raises(ValueError, match=r"HTTP 401.*Fix") as raised:
        counter.count_text("hi")
    assert "sk-wrong-key-123" not in str(raised.value)


def test_an_unreachable_server_is_named_without_its_credentials() -> None:
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url="http://user:secret@127.0.0.1:9/v1"
    )

    with pytest.raises(ValueError, match=r"http://127\.0\.0\.1:9.*ConnectError") as raised:
        counter.count_text("hi")
    assert "secret" not in str(raised.value)


def test_server_tokenizer_needs_the_base_url() -> None:
    with pytest.raises(ValueError, match=r"base_url.*Fix"):
        TokenCounter.for_model("qwen-7b-chat", tokenizer="server")


def test_the_tokenize_route_waits_as_long_as_the_endpoints_own_timeout(serve: Any) -> None:
    # llama-cpp-python serves one request at a time: a count made while it is answering gets
    # its reply only after that completion, so the trimmer waits as long as a model call would.
    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(1.0)
        return _llama_cpp_tokenize(body)

    url = _base_url(serve({"/tokenize": slow}))
    patient = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=url, api_key=KEY, timeout_s=30.0
    )
    assert patient.count_text("你好 hello") == len(QWEN.encode("你好 hello"))

    llm = replace(
        Settings().llm,
        model="qwen-7b-chat",
        tokenizer="server",
        base_url=url,
        api_key=SecretStr(KEY),
        timeout_seconds=0.2,
    )
    trimmer = PriorityTrimmer.from_settings(replace(Settings(), llm=llm))
    with pytest.raises(ValueError, match=r"ReadTimeout"):
        trimmer.token_counter.count_text("hi")


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ({"tokens": [{"piece": "x"}]}, "tokens[0] = {'piece': 'x'}"),
        ({"tokens": [None]}, "tokens[0] = None"),
        ({"tokens": [1e400]}, "tokens[0] = inf"),  # JSON's 1e400 is a float too large
        ({"tokens": ["abc"]}, "tokens[0] = 'abc'"),
        ({"tokens": [7, True]}, "tokens[1] = True"),
        ({"tokens": [-3]}, "tokens[0] = -3"),
        ({"tokens": [2**40]}, f"tokens[0] = {2**40}"),
        ({"tokens": [1.5]}, "tokens[0] = 1.5"),
        ({"tokens": [{"id": "12"}]}, "tokens[0] = {'id': '12'}"),
        ({"tokens": ["x" * 500]}, "tokens[0] = 'xxxxxxxxx"),
    ],
)
def test_a_malformed_tokenize_answer_gets_an_error_naming_the_route_and_the_fix(
    serve: Any, answer: dict[str, Any], shown: str
) -> None:
    server = serve({"/tokenize": lambda body: {"tokens": []} if not body["content"] else answer})
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=_base_url(server), api_key=KEY
    )

    with pytest.raises(ValueError) as raised:
        counter.count_text("hello")

    message = str(raised.value)
    assert message.startswith(f"tokenizer 'server': POST /tokenize of {_base_url(server)[:-3]}")
    assert shown in message and "not a token id" in message
    assert "Fix: point llm.base_url at a llama.cpp, vLLM or llama-cpp-python server" in message
    assert len(message) < 400  # a long bad value is cut short


def test_a_malformed_answer_to_the_route_probe_names_the_route(serve: Any) -> None:
    server = serve({"/tokenize": lambda body: {"tokens": [None]}})
    counter = TokenCounter.for_model(
        "qwen-7b-chat", tokenizer="server", base_url=_base_url(server), api_key=KEY
    )

    with pytest.raises(ValueError, match=r"POST /tokenize .*tokens\[0\] = None.*Fix"):
        counter.count_text("hello")


def test_the_text_cache_is_bounded_by_bytes(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 distinct 25 KB texts of ~6,000 tokens each: kept as tuples of ints, their ids took
    # ~48 MB (the 1,500 took 94 -> 319 MB). The bound is lowered to 2 MiB to see it.
    from agent_latency.tokens import _server

    monkeypatch.setattr(_server, "_TEXT_CACHE_BYTES", 2 * 1024 * 1024, raising=False)
    server = serve(
        {"/tokenize": lambda body: {"tokens": [1000 + i for i in range(len(body["content"]) // 4)]}}
    )
    counter = TokenCounter.for_model(
        "qwen-7b-chat",
        tokenizer="server",
        base_url=_base_url(server),
        api_key=KEY,
        cache_size=16,
    )
    texts = [f"{n:05d} " + "word " * 5_000 for n in range(200)]
    counter.count_text("warm up the route and the client")

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        counts = [counter.count_text(text) for text in texts]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert counts == [len(text) // 4 for text in texts]
    assert grown < 6 * 1024 * 1024, f"{grown / 2**20:.1f} MiB"
    assert counter.count_text(texts[-1]) == counts[-1]  # the latest is still cached
