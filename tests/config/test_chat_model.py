"""build_chat_model: settings become a ChatOpenAI, and the output limit reaches the server in the
field it understands (checked on the wire against a local stand-in for a third-party server)."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from agent_latency.config import LLMSettings, Settings, StreamingSettings, build_chat_model
from agent_latency.config._chat_model import CompatibleChatOpenAI
from agent_latency.sim import DEFAULT_MODEL, SimulatorConfig, running_simulator

SECRET = "sk-test-channel-51c7e0"
OPENAI_ROOT = "https://api.openai.com/v1"


@pytest.fixture(autouse=True)
def _no_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(variable, raising=False)


def _settings(base_url: str | None, **llm: Any) -> Settings:
    return Settings(
        llm=LLMSettings(
            base_url=base_url,
            api_key=SecretStr(SECRET),
            model="qwen2.5-7b-instruct",
            timeout_seconds=12.5,
            **llm,
        ),
        streaming=StreamingSettings(enabled=False, temperature=0.3, max_tokens=256),
    )


# --- A local OpenAI-compatible server that records what it receives ---------------------------


@dataclass
class Received:
    """One request as the server saw it."""

    body: dict[str, Any]
    authorization: str | None


@dataclass
class ChatServer:
    """Answers /v1/chat/completions with a minimal valid completion (JSON or SSE stream)."""

    base_url: str
    received: list[Received] = field(default_factory=list)
    vllm: bool = False  # answer as vLLM with --enable-per-request-metrics, not as llama-server
    # The server's timing on the finish chunk too, not only on the last (usage) chunk: these
    # figures there, or the final ones when {}.
    finish_chunk_timing: dict[str, Any] | None = None


# llama-server's timings of the answer (tools/server/server-task.cpp, result_timings::to_json).
TIMINGS = {"cache_n": 3, "prompt_n": 2, "prompt_ms": 12.5, "predicted_n": 2, "predicted_ms": 7.25}
# vLLM's per-request metrics (docs/features/per_request_metrics.md).
VLLM_METRICS = {
    "time_to_first_token_ms": 85.2,
    "generation_time_ms": 1240.5,
    "queue_time_ms": 12.3,
    "mean_itl_ms": 9.1,
    "tokens_per_second": 103.2,
}


def _running_timings(predicted_n: int) -> dict[str, Any]:
    """What llama-server puts on each chunk with ``timings_per_token``: the figures so far."""
    return TIMINGS | {"predicted_n": predicted_n, "predicted_ms": 3.5 * predicted_n}


def _completion(
    stream: bool,
    *,
    include_usage: bool = True,
    per_token: bool = False,
    vllm: bool = False,
    finish_chunk_timing: dict[str, Any] | None = None,
    content: str = "ok",
) -> bytes:
    """A llama-server answer: ``timings`` at the top level of a body, on a stream's last chunk
    (the usage chunk with include_usage, else the finish chunk), and with ``timings_per_token``
    running figures on every content chunk too. Or vLLM's: ``metrics`` at the top level of a
    body, on the usage chunk of a stream (none without include_usage). With
    ``finish_chunk_timing`` the finish chunk carries a timing too (those figures, or the final
    ones when empty), as a server or proxy that repeats it on every closing chunk does."""
    timing = {"metrics": VLLM_METRICS} if vllm else {"timings": TIMINGS}
    base = {"id": "chatcmpl-1", "created": 0, "model": "stand-in"}
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    if not stream:
        return json.dumps(
            base
            | {
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
            | timing
        ).encode()
    chunk = base | {"object": "chat.completion.chunk"}
    events = [
        chunk | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]},
        chunk | {"choices": [{"index": 0, "delta": {"content": "!" if content == "ok" else ""}}]},
        chunk | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    if finish_chunk_timing is not None:
        name = "metrics" if vllm else "timings"
        events[2][name] = finish_chunk_timing or timing[name]
    if per_token:
        for predicted_n, event in enumerate(events[:2], start=1):
            event["timings"] = _running_timings(predicted_n)
    if include_usage:
        events.append(chunk | {"choices": [], "usage": usage})
    if include_usage or not vllm:
        events[-1] = events[-1] | timing
    lines = [f"data: {json.dumps(event)}\n\n" for event in events] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server_record = ChatServer(base_url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server_record.received.append(Received(body, self.headers.get("Authorization")))
            stream = bool(body.get("stream"))
            payload = _completion(
                stream,
                include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
                per_token=body.get("timings_per_token") is True,
                vllm=server_record.vllm,
                finish_chunk_timing=server_record.finish_chunk_timing,
                # Structured output (json_mode, json_schema) is parsed by the client: JSON.
                content='{"text": "ok"}' if "response_format" in body else "ok",
            )
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Keeps the test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server_record.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server_record
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _invoke(model: Any) -> None:
    model.invoke([HumanMessage("hi")])


# --- Fields ----------------------------------------------------------------------------------


def test_fields_come_from_the_settings() -> None:
    model = build_chat_model(_settings("http://127.0.0.1:8000/v1"))

    assert model.model_name == "qwen2.5-7b-instruct"
    assert model.openai_api_base == "http://127.0.0.1:8000/v1"
    assert model.request_timeout == 12.5
    assert model.temperature == 0.3
    assert model.streaming is False
    assert model.stream_usage is True
    assert model.openai_api_key is not None
    assert model.openai_api_key.get_secret_value() == SECRET


def test_streaming_setting_is_passed() -> None:
    settings = _settings("http://127.0.0.1:8000/v1")
    streaming = replace(settings, streaming=replace(settings.streaming, enabled=True))

    assert build_chat_model(streaming).streaming is True


def test_key_is_not_in_repr() -> None:
    model = build_chat_model(_settings("http://127.0.0.1:8000/v1"))

    assert SECRET not in repr(model)
    assert SECRET not in str(model)


def test_overrides_win() -> None:
    model = build_chat_model(
        _settings("http://127.0.0.1:8000/v1"),
        model="llama-3.1-8b",
        temperature=0.9,
        streaming=True,
        timeout=3,
        api_key="sk-override",
    )

    assert model.model_name == "llama-3.1-8b"
    assert model.temperature == 0.9
    assert model.streaming is True
    assert model.request_timeout == 3
    assert model.openai_api_key is not None
    assert model.openai_api_key.get_secret_value() == "sk-override"


def test_defaults_build_an_openai_model() -> None:
    model = build_chat_model(api_key="sk-default")

    assert model.model_name == Settings().llm.model
    assert model.openai_api_base is None
    assert model.max_tokens == Settings().streaming.max_tokens


def test_local_server_needs_no_key() -> None:
    settings = Settings(llm=LLMSettings(base_url="http://127.0.0.1:8000/v1"))

    model = build_chat_model(settings)

    assert model.openai_api_key is not None
    assert model.openai_api_key.get_secret_value() == "EMPTY"


def test_unknown_max_tokens_param_is_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens_param"):
        build_chat_model(_settings("http://127.0.0.1:8000/v1", max_tokens_param="max_new_tokens"))


# --- Which field carries the output limit ----------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "chosen", "expected"),
    [
        (OPENAI_ROOT, "auto", "max_completion_tokens"),
        ("https://api.openai.com", "auto", "max_completion_tokens"),
        (None, "auto", "max_completion_tokens"),
        ("http://127.0.0.1:8000/v1", "auto", "max_tokens"),
        ("https://api.example.com/v1", "auto", "max_tokens"),
        ("https://api.openai.com.example.net/v1", "auto", "max_tokens"),
        (OPENAI_ROOT, "max_tokens", "max_tokens"),
        ("http://127.0.0.1:8000/v1", "max_completion_tokens", "max_completion_tokens"),
    ],
)
def test_output_limit_param(base_url: str | None, chosen: str, expected: str) -> None:
    assert _settings(base_url, max_tokens_param=chosen).llm.output_limit_field == expected


@pytest.mark.parametrize("streaming", [False, True])
def test_other_servers_get_plain_max_tokens_on_the_wire(
    chat_server: ChatServer, streaming: bool
) -> None:
    model = build_chat_model(_settings(chat_server.base_url), streaming=streaming)

    _invoke(model)

    (request,) = chat_server.received
    assert request.body["max_tokens"] == 256
    assert "max_completion_tokens" not in request.body
    assert request.body["model"] == "qwen2.5-7b-instruct"
    assert request.body["temperature"] == 0.3
    assert request.authorization == f"Bearer {SECRET}"
    if streaming:
        assert request.body["stream"] is True
        assert request.body["stream_options"] == {"include_usage": True}


def test_max_completion_tokens_when_configured(chat_server: ChatServer) -> None:
    settings = _settings(chat_server.base_url, max_tokens_param="max_completion_tokens")

    _invoke(build_chat_model(settings))

    (request,) = chat_server.received
    assert request.body["max_completion_tokens"] == 256
    assert "max_tokens" not in request.body


def test_overridden_output_limit_is_sent_as_max_tokens(chat_server: ChatServer) -> None:
    _invoke(build_chat_model(_settings(chat_server.base_url), max_tokens=32))

    (request,) = chat_server.received
    assert request.body["max_tokens"] == 32
    assert "max_completion_tokens" not in request.body


@pytest.mark.parametrize("bound", [False, True])
def test_a_per_call_limit_replaces_the_configured_one_on_the_wire(
    chat_server: ChatServer, bound: bool
) -> None:
    model = build_chat_model(_settings(chat_server.base_url))

    if bound:
        model.bind(max_tokens=5).invoke("hi")
    else:
        model.invoke("hi", max_tokens=5)

    (request,) = chat_server.received
    assert request.body["max_tokens"] == 5
    assert "max_completion_tokens" not in request.body


def test_extra_body_override_is_kept_next_to_max_tokens(chat_server: ChatServer) -> None:
    _invoke(build_chat_model(_settings(chat_server.base_url), extra_body={"top_k": 5}))

    (request,) = chat_server.received
    assert request.body["top_k"] == 5
    assert request.body["max_tokens"] == 256


def test_overridden_base_url_decides_the_field_and_the_key(chat_server: ChatServer) -> None:
    # Default settings point at OpenAI; the override points at a local server with no key.
    _invoke(build_chat_model(Settings(), base_url=chat_server.base_url))

    (request,) = chat_server.received
    assert request.body["max_tokens"] == Settings().streaming.max_tokens
    assert "max_completion_tokens" not in request.body
    assert request.authorization == "Bearer EMPTY"


def test_openai_gets_max_completion_tokens_on_the_wire() -> None:
    # OpenAI's own host, answered in-process: no network.
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=_completion(stream=False))

    model = build_chat_model(
        _settings(OPENAI_ROOT), http_client=httpx.Client(transport=httpx.MockTransport(answer))
    )

    _invoke(model)

    assert bodies[0]["max_completion_tokens"] == 256
    assert "max_tokens" not in bodies[0]


# --- The key as httpx sees it ------------------------------------------------------------------


@pytest.mark.parametrize("via", ["settings", "override"])
def test_a_key_ending_in_a_newline_is_sent_stripped(chat_server: ChatServer, via: str) -> None:
    # A key read from a file keeps its newline; httpx refuses such a header and quotes it.
    if via == "settings":
        settings = _settings(chat_server.base_url)
        settings = replace(settings, llm=replace(settings.llm, api_key=SecretStr(f"{SECRET}\n")))
        model = build_chat_model(settings)
    else:
        model = build_chat_model(_settings(chat_server.base_url), api_key=f" {SECRET}\r\n")

    _invoke(model)

    (request,) = chat_server.received
    assert request.authorization == f"Bearer {SECRET}"


# --- Streamed usage on the wire, against the simulator ----------------------------------------


class _Ends(BaseCallbackHandler):
    """Keeps the result of every model call, as a callback handler receives it."""

    def __init__(self) -> None:
        self.results: list[LLMResult] = []

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        self.results.append(response)


def test_a_streamed_call_reports_the_servers_prompt_tokens_to_the_handler() -> None:
    ends = _Ends()
    fast = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0.0, decode_tokens_per_s=10_000)
    with running_simulator(fast) as sim:
        settings = replace(_settings(sim.base_url), streaming=StreamingSettings(enabled=True))
        model = build_chat_model(settings, model=DEFAULT_MODEL)
        chunks = list(
            model.stream(
                [HumanMessage("How long is a piece of string?")], config={"callbacks": [ends]}
            )
        )
        served = sim.stats.prompt_tokens

    assert served > 0
    streamed = sum(chunks[1:], chunks[0])
    assert streamed.usage_metadata is not None
    assert streamed.usage_metadata["input_tokens"] == served
    (result,) = ends.results
    (generation,) = result.generations[0]
    assert isinstance(generation, ChatGeneration)
    assert isinstance(generation.message, AIMessage)
    assert generation.message.usage_metadata is not None
    assert generation.message.usage_metadata["input_tokens"] == served


# --- Contract with langchain-openai: the one private method we override ----------------------


def test_chatopenai_request_payload_keeps_the_signature_we_override() -> None:
    # If this fails, langchain-openai changed _get_request_payload: CompatibleChatOpenAI's
    # override must follow, or max_tokens stops reaching servers that ignore
    # max_completion_tokens (they then generate until the context is full).
    theirs = inspect.signature(ChatOpenAI._get_request_payload)
    ours = inspect.signature(CompatibleChatOpenAI._get_request_payload)

    assert [(p.name, p.kind, p.default) for p in theirs.parameters.values()] == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("input_", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("stop", inspect.Parameter.KEYWORD_ONLY, None),
        ("kwargs", inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty),
    ]
    assert [(p.name, p.kind) for p in ours.parameters.values()] == [
        (p.name, p.kind) for p in theirs.parameters.values()
    ]


@pytest.mark.parametrize("per_call", [False, True])
def test_chatopenai_request_payload_carries_the_limit_as_we_expect(per_call: bool) -> None:
    # The override assumes ChatOpenAI puts the output limit in max_completion_tokens, whether
    # it is a field of the model or an argument of the call.
    fields = {"model": "m", "api_key": "k", "base_url": "http://127.0.0.1:9/v1"}
    limit = {} if per_call else {"max_tokens": 7}
    call = {"max_tokens": 7} if per_call else {}
    messages = [HumanMessage("hi")]

    theirs = ChatOpenAI(**fields, **limit)._get_request_payload(messages, **call)
    ours = CompatibleChatOpenAI(**fields, **limit, output_limit_field="max_tokens")
    payload = ours._get_request_payload(messages, **call)

    assert theirs["max_completion_tokens"] == 7 and "max_tokens" not in theirs
    assert payload["max_tokens"] == 7 and "max_completion_tokens" not in payload
    assert {k: v for k, v in payload.items() if k != "max_tokens"} == {
        k: v for k, v in theirs.items() if k != "max_completion_tokens"
    }


# --- llama-server's timings: kept where ChatOpenAI drops them -------------------------------


def _answer(model: Any, streaming: bool) -> Any:
    if not streaming:
        return model.invoke([HumanMessage("hi")])
    chunks = list(model.stream([HumanMessage("hi")]))
    return sum(chunks[1:], chunks[0])


@pytest.mark.parametrize(
    ("streaming", "include_usage"),
    [(False, False), (True, True), (True, False)],
    ids=["blocking", "streamed with usage", "streamed without usage"],
)
def test_llama_servers_timings_reach_the_answers_response_metadata(
    chat_server: ChatServer, streaming: bool, include_usage: bool
) -> None:
    model = build_chat_model(
        _settings(chat_server.base_url), streaming=streaming, stream_usage=include_usage
    )
    answer = _answer(model, streaming)
    assert answer.response_metadata["timings"] == TIMINGS
    plain = ChatOpenAI(
        base_url=chat_server.base_url,
        api_key=SECRET,  # type: ignore[arg-type]
        model="stand-in",
        streaming=streaming,
        stream_usage=include_usage,
    )
    # If langchain-openai ever keeps them itself, the two overrides can go.
    assert "timings" not in _answer(plain, streaming).response_metadata


@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streamed"])
def test_vllms_per_request_metrics_reach_the_answers_response_metadata(
    chat_server: ChatServer, streaming: bool
) -> None:
    chat_server.vllm = True
    model = build_chat_model(_settings(chat_server.base_url), streaming=streaming)
    answer = _answer(model, streaming)
    assert answer.response_metadata["metrics"] == VLLM_METRICS
    assert "timings" not in answer.response_metadata


def test_running_timings_on_every_chunk_leave_the_stream_whole(chat_server: ChatServer) -> None:
    # With timings_per_token every content chunk carries the figures so far; LangChain's merge
    # of two chunks refuses two different floats under one key, so only the last chunk's count.
    model = build_chat_model(
        _settings(chat_server.base_url), streaming=True, extra_body={"timings_per_token": True}
    )
    answer = _answer(model, streaming=True)
    assert chat_server.received[-1].body["timings_per_token"] is True
    assert answer.content == "ok!"
    assert answer.response_metadata["timings"] == TIMINGS


@pytest.mark.parametrize(
    "finish_chunk_timing",
    [{}, _running_timings(2)],
    ids=["the same figures", "running figures"],
)
@pytest.mark.parametrize("vllm", [False, True], ids=["llama.cpp", "vLLM"])
def test_a_timing_on_the_finish_and_the_usage_chunk_is_kept_once(
    chat_server: ChatServer, finish_chunk_timing: dict[str, Any], vllm: bool
) -> None:
    # LangChain merges a stream's chunks: two different floats under one key raised TypeError
    # into the caller's stream, and two equal counts were summed (prompt_n 2 read as 4).
    chat_server.vllm = vllm
    chat_server.finish_chunk_timing = finish_chunk_timing
    model = build_chat_model(_settings(chat_server.base_url), streaming=True)
    answer = _answer(model, streaming=True)
    assert answer.content == "ok!"
    name, final = ("metrics", VLLM_METRICS) if vllm else ("timings", TIMINGS)
    # The first closing chunk's figures: the answer was complete when it was sent.
    assert answer.response_metadata[name] == (finish_chunk_timing or final)
    assert model.invoke([HumanMessage("hi")]).response_metadata[name] == (
        finish_chunk_timing or final
    )


class _Answer(BaseModel):
    text: str


# langchain-openai dumps openai's stream events, whose snapshot holds the parsed model.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("method", ["json_schema", "json_mode", "function_calling"])
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streamed"])
def test_structured_output_keeps_the_servers_timings(
    chat_server: ChatServer, method: str, streaming: bool
) -> None:
    # A response_format is streamed through openai's beta stream, whose events carry the chunk
    # under "chunk": the timings on its last chunk were lost, and with them the split.
    model = build_chat_model(_settings(chat_server.base_url), streaming=streaming)
    structured = model.with_structured_output(_Answer, method=method, include_raw=True)
    result: Any = structured.invoke([HumanMessage("hi")])
    assert result["parsed"] == _Answer(text="ok") or method == "function_calling"
    assert result["raw"].response_metadata["timings"] == TIMINGS


@pytest.mark.parametrize(
    ("method", "parameters"),
    [
        ("_create_chat_result", ["self", "response", "generation_info"]),
        (
            "_convert_chunk_to_generation_chunk",
            ["self", "chunk", "default_chunk_class", "base_generation_info"],
        ),
    ],
)
def test_chatopenai_keeps_the_signatures_of_the_result_methods_we_override(
    method: str, parameters: list[str]
) -> None:
    # If this fails, langchain-openai changed how it builds a result from the body or a chunk:
    # CompatibleChatOpenAI's override must follow, or llama-server's timings are lost.
    theirs = inspect.signature(getattr(ChatOpenAI, method))
    ours = inspect.signature(getattr(CompatibleChatOpenAI, method))
    assert list(theirs.parameters) == parameters
    assert [(p.name, p.kind) for p in ours.parameters.values()] == [
        (p.name, p.kind) for p in theirs.parameters.values()
    ]
