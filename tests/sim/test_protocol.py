"""The latency simulator's protocol, driven by the real ``openai`` client and ``ChatOpenAI``."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from agent_latency.sim import (
    DEFAULT_MODEL,
    RunningSimulator,
    SimulatorConfig,
    create_app,
    running_simulator,
)
from agent_latency.tokens import TokenCounter

FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=5000, answer_tokens=8
)
KEY = "sk-sim-test-0123456789abcdef"
QUESTION = [
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Looks up the weather.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(FAST) as running:
        yield running


@pytest.fixture(scope="module")
def keyed_sim() -> Iterator[RunningSimulator]:
    with running_simulator(SimulatorConfig(overhead_ms=0, answer_tokens=4, api_key=KEY)) as running:
        yield running


def client_for(sim: RunningSimulator, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key=api_key, max_retries=0, timeout=10)


def chat_model(sim: RunningSimulator, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=sim.base_url, api_key="unused", model=DEFAULT_MODEL, max_retries=0, **options
    )


def post(sim: RunningSimulator, path: str, **request: Any) -> httpx.Response:
    return httpx.post(sim.base_url.removesuffix("/v1") + path, timeout=10, **request)


# --- answers ---------------------------------------------------------------------------------


def test_blocking_answer_reports_usage_as_the_token_counter_counts(sim: RunningSimulator) -> None:
    response = client_for(sim).chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION)

    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.startswith("The agent")
    assert choice.finish_reason == "stop"
    assert response.model == DEFAULT_MODEL
    assert response.usage is not None
    # The simulator counts in the served model's own tokens, as its server would.
    assert response.usage.prompt_tokens == TokenCounter.for_model(DEFAULT_MODEL).count_messages(
        convert_to_messages(QUESTION)
    )
    assert response.usage.completion_tokens == FAST.answer_tokens
    assert response.usage.total_tokens == response.usage.prompt_tokens + FAST.answer_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_deepseek_usage_also_reports_cache_hits_and_misses(stream: bool) -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=2, usage_format="deepseek")
    with running_simulator(config) as deepseek:
        client = client_for(deepseek)
        options: dict[str, Any] = (
            {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        )
        first = [*QUESTION[:1], {"role": "user", "content": "word " * 200}]
        client.chat.completions.create(model=DEFAULT_MODEL, messages=first)
        answer = client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[*first, *QUESTION[1:]], **options
        )
        usage = list(answer)[-1].usage if stream else answer.usage

    assert usage is not None and usage.model_extra is not None
    cached = usage.prompt_tokens_details.cached_tokens
    assert cached > 0
    assert usage.model_extra["prompt_cache_hit_tokens"] == cached
    assert usage.model_extra["prompt_cache_miss_tokens"] == usage.prompt_tokens - cached


@pytest.mark.parametrize("cap_field", ["max_tokens", "max_completion_tokens"])
def test_output_caps_cut_the_answer_with_finish_reason_length(
    sim: RunningSimulator, cap_field: str
) -> None:
    response = client_for(sim).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        **{cap_field: 3},
    )

    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 3
    assert response.choices[0].message.content == "The agent waited"


def test_a_cap_above_the_answer_length_does_not_lengthen_it(sim: RunningSimulator) -> None:
    response = client_for(sim).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        max_tokens=1000,
    )

    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None and response.usage.completion_tokens == FAST.answer_tokens


def test_stream_sends_one_token_per_chunk_then_a_usage_chunk(sim: RunningSimulator) -> None:
    client = client_for(sim)
    blocking = client.chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION)
    chunks = list(
        client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=QUESTION,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    *token_chunks, final, usage_chunk = chunks
    assert len(token_chunks) == FAST.answer_tokens
    assert token_chunks[0].choices[0].delta.role == "assistant"
    assert all(chunk.choices[0].delta.role is None for chunk in token_chunks[1:])
    assert all(chunk.choices[0].delta.content for chunk in token_chunks)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in token_chunks)
    assert text == blocking.choices[0].message.content
    assert final.choices[0].finish_reason == "stop"
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None and blocking.usage is not None
    assert usage_chunk.usage.prompt_tokens == blocking.usage.prompt_tokens
    assert usage_chunk.usage.completion_tokens == FAST.answer_tokens
    assert len({chunk.id for chunk in chunks}) == 1


def test_stream_without_include_usage_has_no_usage_chunk(sim: RunningSimulator) -> None:
    response = post(
        sim,
        "/v1/chat/completions",
        json={"model": DEFAULT_MODEL, "messages": QUESTION, "stream": True},
    )

    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line]
    assert events[-1] == "[DONE]"
    payloads = [json.loads(event) for event in events[:-1]]
    assert all("usage" not in payload for payload in payloads)
    assert all(len(payload["choices"]) == 1 for payload in payloads)


def test_chat_openai_streams_and_reports_usage_with_cached_tokens(sim: RunningSimulator) -> None:
    model = chat_model(sim, streaming=True, stream_usage=True)
    prompt = [HumanMessage("Tell me about prefix caching. " * 20)]

    model.invoke(prompt)
    chunks = list(model.stream(prompt))

    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.content == "The agent waited for the first token of"
    usage = merged.usage_metadata
    assert usage is not None
    assert usage["output_tokens"] == FAST.answer_tokens
    # Whole 16-token blocks, as vLLM reuses them; the last token is always prefilled.
    assert usage["input_token_details"]["cache_read"] == (usage["input_tokens"] - 1) // 16 * 16


def test_models_are_listed_and_retrieved(sim: RunningSimulator) -> None:
    client = client_for(sim)

    assert [model.id for model in client.models.list()] == [DEFAULT_MODEL]
    assert client.models.retrieve(DEFAULT_MODEL).id == DEFAULT_MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-unknown")


def test_several_model_names_can_be_served() -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=2, model=["small", "large"])
    with running_simulator(config) as running:
        client = client_for(running)
        assert [model.id for model in client.models.list()] == ["small", "large"]
        answer = client.chat.completions.create(model="large", messages=QUESTION)
    assert answer.model == "large"


def test_answers_are_deterministic(sim: RunningSimulator) -> None:
    client = client_for(sim)
    request: dict[str, Any] = {
        "model": DEFAULT_MODEL,
        "messages": QUESTION,
        "tools": [WEATHER_TOOL],
    }

    first = client.chat.completions.create(**request)
    second = client.chat.completions.create(**request)

    assert first.choices[0].message.tool_calls == second.choices[0].message.tool_calls
    assert first.id != second.id


# --- tool calls ------------------------------------------------------------------------------


def test_offered_tools_get_called_with_arguments_fitting_their_schema(
    sim: RunningSimulator,
) -> None:
    response = client_for(sim).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        tools=[WEATHER_TOOL],
    )

    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert arguments == {"city": "example", "unit": "celsius", "days": 1}


def test_streamed_tool_call_assembles_into_the_same_call(sim: RunningSimulator) -> None:
    model = chat_model(sim).bind_tools([WEATHER_TOOL])

    blocking = model.invoke(QUESTION)
    chunks = list(model.stream(QUESTION))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk

    assert isinstance(blocking, AIMessage)
    assert blocking.tool_calls[0]["name"] == "get_weather"
    assert merged.tool_calls == blocking.tool_calls
    assert len(chunks) > 3  # the arguments arrive in token-sized pieces


def test_a_tool_result_gets_a_text_answer(sim: RunningSimulator) -> None:
    model = chat_model(sim).bind_tools([WEATHER_TOOL])
    call = model.invoke(QUESTION)
    assert isinstance(call, AIMessage)

    answer = model.invoke(
        [
            *convert_to_messages(QUESTION),
            call,
            ToolMessage("Sunny", tool_call_id=call.tool_calls[0]["id"]),
        ]
    )

    assert isinstance(answer, AIMessage)
    assert answer.tool_calls == []
    assert answer.text.startswith("The agent")


@pytest.mark.parametrize(
    ("tool_choice", "last_role", "calls"),
    [
        ("none", "user", None),
        ("required", "tool", "get_time"),  # one call made so far: the second tool in turn
        ({"type": "function", "function": {"name": "get_time"}}, "user", "get_time"),
    ],
)
def test_tool_choice_is_honoured(
    sim: RunningSimulator, tool_choice: Any, last_role: str, calls: str | None
) -> None:
    time_tool = {"type": "function", "function": {"name": "get_time"}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    if last_role == "tool":
        call = {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "noon"},
        ]
    response = client_for(sim).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=messages,
        tools=[WEATHER_TOOL, time_tool],
        tool_choice=tool_choice,
    )

    tool_calls = response.choices[0].message.tool_calls
    if calls is None:
        assert tool_calls is None
    else:
        assert tool_calls and [call.function.name for call in tool_calls] == [calls]


def test_an_agent_runs_to_its_final_answer(sim: RunningSimulator) -> None:
    seen: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Looks up the weather in a city."""
        seen.append(city)
        return "Sunny, 21 °C"

    agent = create_agent(chat_model(sim, streaming=True), tools=[get_weather])
    result = agent.invoke({"messages": [{"role": "user", "content": "Weather in Paris?"}]})

    kinds = [type(message).__name__ for message in result["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert seen == ["example"]
    assert result["messages"][-1].text.startswith("The agent")


# --- errors ----------------------------------------------------------------------------------


def test_a_missing_or_wrong_key_gets_401_without_echoing_any_key(
    keyed_sim: RunningSimulator,
) -> None:
    wrong_key = "sk-wrong-key-that-must-not-be-echoed"
    with pytest.raises(openai.AuthenticationError) as wrong:
        client_for(keyed_sim, wrong_key).chat.completions.create(
            model=DEFAULT_MODEL,
            messages=QUESTION,
        )
    missing = post(keyed_sim, "/v1/chat/completions", json={"model": DEFAULT_MODEL})

    assert wrong.value.status_code == 401
    assert wrong.value.code == "invalid_api_key"
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "invalid_request_error"
    for text in (wrong.value.response.text, missing.text, repr(keyed_sim.config)):
        assert KEY not in text and wrong_key not in text
    with pytest.raises(openai.AuthenticationError):
        client_for(keyed_sim, wrong_key).models.list()


def test_the_right_key_is_accepted(keyed_sim: RunningSimulator) -> None:
    response = client_for(keyed_sim, KEY).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
    )

    assert response.choices[0].message.content == "The agent waited for"


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/", 404, "unknown_url"),
        ("POST", "/v1/completions", 404, "unknown_url"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
    ],
)
def test_unknown_paths_and_methods_get_json_errors(
    sim: RunningSimulator, method: str, path: str, status: int, code: str
) -> None:
    response = httpx.request(method, sim.base_url.removesuffix("/v1") + path, timeout=10)

    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code


def test_an_unknown_model_gets_404_model_not_found(sim: RunningSimulator) -> None:
    with pytest.raises(openai.NotFoundError) as error:
        client_for(sim).chat.completions.create(model="gpt-4o", messages=QUESTION)

    assert error.value.code == "model_not_found"
    assert DEFAULT_MODEL in error.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"\xff\xfe", None),
        (b"[" * 100_000 + b"]" * 100_000, None),
        (b"[1, 2]", None),
        (b'{"messages": []}', "model"),
        (b'{"model": 7, "messages": []}', "model"),
        (b'{"model": "m"}', "messages"),
        (b'{"model": "m", "messages": []}', "messages"),
        (b'{"model": "m", "messages": {"role": "user"}}', "messages"),
        (b'{"model": "m", "messages": ["hi"]}', "messages[0]"),
        (b'{"model": "m", "messages": [{"role": "robot", "content": "x"}]}', "messages[0].role"),
        (b'{"model": "m", "messages": [{"role": "user"}]}', "messages[0].content"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}',
            "messages[0].content[0].text",
        ),
        (
            b'{"model": "m", "messages": [{"role": "tool", "content": "x"}]}',
            "messages[0].tool_call_id",
        ),
        (
            b'{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]}',
            "messages[0].tool_calls[0].function",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
            "stream",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
            "max_tokens",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": true}',
            "max_tokens",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}',
            "tools[0].type",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "any"}',
            "tool_choice",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": 1}',
            "stream_options",
        ),
    ],
)
def test_malformed_bodies_get_400_naming_the_field(
    sim: RunningSimulator, body: bytes, param: str | None
) -> None:
    response = post(
        sim, "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_bodies_that_are_not_declared_json_get_415(
    sim: RunningSimulator, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    body = json.dumps({"model": DEFAULT_MODEL, "messages": QUESTION}).encode()

    response = post(sim, "/v1/chat/completions", content=body, headers=headers)

    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_json_with_a_charset_parameter_is_accepted(sim: RunningSimulator) -> None:
    body = json.dumps({"model": DEFAULT_MODEL, "messages": QUESTION}).encode()

    response = post(
        sim,
        "/v1/chat/completions",
        content=body,
        headers={"content-type": "Application/JSON; charset=utf-8"},
    )

    assert response.status_code == 200


@pytest.mark.parametrize("chunked", [False, True])
def test_bodies_over_the_size_limit_get_413(chunked: bool) -> None:
    body = json.dumps(
        {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "x" * 5000}]}
    ).encode()
    content: Any = iter([body[:2000], body[2000:]]) if chunked else body

    with running_simulator(SimulatorConfig(max_body_bytes=4096)) as limited:
        response = post(
            limited,
            "/v1/chat/completions",
            content=content,
            headers={"content-type": "application/json"},
        )
        stats = limited.stats

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert stats.errors == 1 and stats.requests == 0


def test_error_rate_one_answers_every_request_with_500() -> None:
    with running_simulator(SimulatorConfig(error_rate=1.0, overhead_ms=0)) as failing:
        with pytest.raises(openai.InternalServerError) as error:
            client_for(failing).chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION)
        stats = failing.stats

    assert error.value.status_code == 500
    assert error.value.type == "server_error"
    assert stats.errors == 1


def test_error_rate_fails_a_seeded_share_of_requests() -> None:
    config = SimulatorConfig(error_rate=0.5, seed=7, overhead_ms=0, answer_tokens=1)
    body = {"model": DEFAULT_MODEL, "messages": QUESTION}
    outcomes = []
    for _ in range(2):
        with running_simulator(config) as flaky, httpx.Client(base_url=flaky.base_url) as http:
            outcomes.append(
                [http.post("/chat/completions", json=body).status_code for _ in range(20)]
            )

    assert outcomes[0] == outcomes[1]  # the same seed fails the same requests
    assert set(outcomes[0]) == {200, 500}


def test_rate_limit_answers_429_with_retry_after() -> None:
    config = SimulatorConfig(rate_limit_rate=1.0, retry_after_s=2.5, overhead_ms=0)
    with running_simulator(config) as limited, pytest.raises(openai.RateLimitError) as error:
        client_for(limited).chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION)

    headers = error.value.response.headers
    assert error.value.status_code == 429
    assert error.value.code == "rate_limit_exceeded"
    assert headers["retry-after"] == "3" and headers["retry-after-ms"] == "2500"


def test_a_connection_reset_mid_stream_reaches_the_client() -> None:
    config = SimulatorConfig(overhead_ms=0, answer_tokens=8, reset_after_chunks=3)
    received: list[str] = []
    with running_simulator(config) as resetting:
        stream = client_for(resetting).chat.completions.create(
            model=DEFAULT_MODEL,
            messages=QUESTION,
            stream=True,
        )
        # openai wraps the broken stream, or lets its transport's error through (httpx's, or
        # httpx2's in the openai releases that use that fork).
        with pytest.raises(Exception) as raised:
            for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        assert isinstance(raised.value, openai.APIConnectionError) or (
            type(raised.value).__name__ == "RemoteProtocolError"
        ), repr(raised.value)
        # The server survives the reset.
        after = client_for(resetting).chat.completions.create(
            model=DEFAULT_MODEL, messages=QUESTION
        )

    assert received == ["The", " agent", " waited"]
    assert after.choices[0].finish_reason == "stop"


# --- serving ---------------------------------------------------------------------------------


async def test_many_concurrent_connections_are_all_answered() -> None:
    config = SimulatorConfig(overhead_ms=100, prefill_ms_per_token=0, answer_tokens=4)
    async with running_simulator(config) as busy:
        client = openai.AsyncOpenAI(
            base_url=busy.base_url,
            api_key="unused",
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None)
            ),
        )

        async def ask(index: int) -> str:
            messages = [{"role": "user", "content": f"question {index}"}]
            stream = await client.chat.completions.create(
                model=DEFAULT_MODEL,
                messages=messages,
                stream=index % 2 == 0,
            )
            if isinstance(stream, openai.AsyncStream):
                return "".join([c.choices[0].delta.content or "" async for c in stream])
            return stream.choices[0].message.content or ""

        answers = await asyncio.gather(*(ask(index) for index in range(60)))
        stats = busy.stats
        await client.close()

    assert answers == ["The agent waited for"] * 60
    assert stats.requests == 60 and stats.errors == 0


def test_a_consumer_abandoning_a_stream_leaves_the_server_serving() -> None:
    config = SimulatorConfig(overhead_ms=0, decode_tokens_per_s=20, answer_tokens=50)
    with running_simulator(config) as slow:
        with httpx.stream(
            "POST",
            slow.base_url + "/chat/completions",
            json={"model": DEFAULT_MODEL, "messages": QUESTION, "stream": True},
            timeout=10,
        ) as response:
            first = next(response.iter_lines())
        after = client_for(slow).chat.completions.create(
            model=DEFAULT_MODEL,
            messages=QUESTION,
            max_tokens=1,
        )

    assert first.startswith("data: ")
    assert after.choices[0].message.content == "The"


def test_the_server_binds_only_the_given_address(sim: RunningSimulator) -> None:
    assert sim.base_url == f"http://127.0.0.1:{sim.port}/v1"
    # The whole of 127.0.0.0/8 reaches this host, so a wildcard bind would accept here.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.2", sim.port), timeout=2).close()
    socket.create_connection(("127.0.0.1", sim.port), timeout=2).close()


def test_a_stopped_simulator_releases_its_port() -> None:
    running = running_simulator(FAST)
    with running:
        port = running.port
        assert "serving" in repr(running)

    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(RuntimeError, match="not started"):
        _ = running.port


def test_create_app_serves_in_process_over_asgi() -> None:
    transport = httpx.ASGITransport(app=create_app(FAST))

    async def ask() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            return await client.post(
                "/v1/chat/completions", json={"model": DEFAULT_MODEL, "messages": QUESTION}
            )

    response = asyncio.run(ask())
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"].startswith("The agent")


def test_health_needs_no_key(keyed_sim: RunningSimulator) -> None:
    response = httpx.get(keyed_sim.base_url.removesuffix("/v1") + "/health", timeout=10)

    assert response.json() == {"status": "ok"}
