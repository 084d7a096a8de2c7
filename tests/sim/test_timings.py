"""The simulator's llama.cpp ``timings``: where its first token's time went, on the wire.

Driven by the real ``openai`` client and ``ChatOpenAI``. The figures are the simulator's own
latency model (``SimulatorConfig.prefill_ms``), so each test can say exactly what they must be.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from agent_latency.sim import DEFAULT_MODEL, RunningSimulator, SimulatorConfig, running_simulator

# A prefill long enough to see (about 0.1 s for the question below), a quick decode.
CONFIG = SimulatorConfig(
    overhead_ms=20,
    prefill_ms_per_token=2.0,
    attention_ms_per_1k_context=0.5,
    decode_tokens_per_s=1000,
    answer_tokens=6,
    cache_block_tokens=1,
)
TIMINGS_FIELDS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
}
SYSTEM = "You are a helpful travel agent. " * 6


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(CONFIG) as running:
        yield running


def client_for(sim: RunningSimulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0, timeout=10)


def question(text: str, system: str = SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def assert_llama_cpp_timings(timings: dict[str, Any], usage: Any) -> None:
    """The shape llama.cpp's server sends, and the simulator's latency model in its figures."""
    assert set(timings) == TIMINGS_FIELDS
    assert timings["cache_n"] + timings["prompt_n"] == usage.prompt_tokens
    assert timings["cache_n"] == usage.prompt_tokens_details.cached_tokens
    assert timings["prompt_ms"] == pytest.approx(
        CONFIG.prefill_ms(timings["prompt_n"], usage.prompt_tokens)
    )
    assert timings["prompt_per_token_ms"] == pytest.approx(
        timings["prompt_ms"] / timings["prompt_n"]
    )
    assert timings["prompt_per_second"] == pytest.approx(
        timings["prompt_n"] * 1000 / timings["prompt_ms"]
    )
    # llama.cpp's decode runs from the first output token to the last.
    assert timings["predicted_n"] == usage.completion_tokens
    assert timings["predicted_ms"] == pytest.approx(
        (usage.completion_tokens - 1) * 1000 / CONFIG.decode_tokens_per_s
    )
    assert timings["predicted_per_token_ms"] == pytest.approx(
        timings["predicted_ms"] / timings["predicted_n"]
    )
    assert timings["predicted_per_second"] == pytest.approx(
        timings["predicted_n"] * 1000 / timings["predicted_ms"]
    )


def test_a_blocking_answer_carries_timings_beside_usage(sim: RunningSimulator) -> None:
    response = client_for(sim).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=question("Which trains run from Lyon to Turin?", system="Answer in French."),
    )

    assert response.model_extra is not None
    timings = response.model_extra["timings"]
    assert_llama_cpp_timings(timings, response.usage)
    assert timings["cache_n"] == 0  # a prompt never seen before is prefilled whole
    assert timings["prompt_ms"] > 0


def test_a_cached_prefix_is_not_in_the_prefill_time(sim: RunningSimulator) -> None:
    client = client_for(sim)
    first = question("Is there a night train from Vienna to Rome?")
    cold = client.chat.completions.create(model=DEFAULT_MODEL, messages=first)
    answer = cold.choices[0].message.content
    warm = client.chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[*first, {"role": "assistant", "content": answer}, question("And back?")[1]],
    )

    assert warm.model_extra is not None and cold.model_extra is not None
    cold_timings, warm_timings = cold.model_extra["timings"], warm.model_extra["timings"]
    assert_llama_cpp_timings(warm_timings, warm.usage)
    assert warm_timings["cache_n"] == cold.usage.prompt_tokens  # the whole previous prompt
    assert warm_timings["prompt_n"] < cold_timings["prompt_n"]
    assert warm_timings["prompt_ms"] < cold_timings["prompt_ms"]


def test_with_include_usage_only_the_usage_chunk_carries_timings(sim: RunningSimulator) -> None:
    chunks = list(
        client_for(sim).chat.completions.create(
            model=DEFAULT_MODEL,
            messages=question("Which ferries cross to Corsica in winter?"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    *others, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.model_extra is not None
    assert_llama_cpp_timings(last.model_extra["timings"], last.usage)
    assert others[-1].choices[0].finish_reason == "stop"
    assert all("timings" not in (chunk.model_extra or {}) for chunk in others)


def test_without_include_usage_the_finish_chunk_carries_timings(sim: RunningSimulator) -> None:
    client = client_for(sim)
    messages = question("How long is the walk from the station to the port?")
    chunks = list(
        client.chat.completions.create(model=DEFAULT_MODEL, messages=messages, stream=True)
    )

    *others, last = chunks
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra is not None
    timings = last.model_extra["timings"]
    assert set(timings) == TIMINGS_FIELDS
    assert timings["predicted_n"] == len(others) == CONFIG.answer_tokens
    assert all("timings" not in (chunk.model_extra or {}) for chunk in others)


class _RecordingTransport(httpx.HTTPTransport):
    """Keeps a copy of every response body as the client reads it: what came over the wire."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytearray] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        body = bytearray()
        self.bodies.append(body)
        stream = response.stream

        class Teed(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for part in stream:  # type: ignore[union-attr]
                    body.extend(part)
                    yield part

            def close(self) -> None:
                stream.close()  # type: ignore[union-attr]

        response.stream = Teed()
        return response


def _last_json(body: bytes) -> dict[str, Any]:
    """Returns a blocking answer's JSON, or a stream's last event before ``[DONE]``."""
    if not body.startswith(b"data: "):
        return json.loads(body)  # type: ignore[no-any-return]
    events = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    return json.loads(events[-2])  # type: ignore[no-any-return]


@pytest.mark.parametrize("streaming", [False, True])
def test_chat_openai_gets_a_first_token_no_sooner_than_overhead_plus_prefill(
    sim: RunningSimulator, streaming: bool
) -> None:
    transport = _RecordingTransport()
    model = ChatOpenAI(
        base_url=sim.base_url,
        api_key="unused",
        model=DEFAULT_MODEL,
        max_retries=0,
        streaming=streaming,
        stream_usage=True,
        http_client=httpx.Client(transport=transport),
    )
    messages = [
        SystemMessage(SYSTEM),
        HumanMessage("Can I take a bicycle on the train to Geneva?"),
        AIMessage("Yes, with a reservation."),
        HumanMessage("How much is the reservation? " + "Please be precise. " * 10),
    ]

    started = time.perf_counter()
    first_token_s = None
    for chunk in model.stream(messages):
        if first_token_s is None and chunk.content:
            first_token_s = time.perf_counter() - started
    assert first_token_s is not None

    (body,) = transport.bodies
    last = _last_json(bytes(body))
    timings = last["timings"]
    assert set(timings) == TIMINGS_FIELDS
    assert timings["cache_n"] + timings["prompt_n"] == last["usage"]["prompt_tokens"]
    assert timings["prompt_ms"] == pytest.approx(
        CONFIG.prefill_ms(timings["prompt_n"], last["usage"]["prompt_tokens"])
    )
    # The server never answers before its overhead and prefill are over: the client's first
    # token (blocking: the whole answer) comes no sooner.
    assert first_token_s * 1000 >= CONFIG.overhead_ms + timings["prompt_ms"]


def test_a_one_token_answer_reports_null_rates_where_llama_cpp_would_divide_by_zero() -> None:
    config = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, attention_ms_per_1k_context=0, answer_tokens=1
    )
    with running_simulator(config) as sim:
        response = client_for(sim).chat.completions.create(
            model=DEFAULT_MODEL, messages=question("Yes or no?")
        )

    assert response.model_extra is not None
    timings = response.model_extra["timings"]
    assert timings["predicted_n"] == 1
    assert timings["predicted_ms"] == 0
    assert timings["predicted_per_second"] is None
    assert timings["prompt_ms"] == 0
    assert timings["prompt_per_second"] is None
    assert timings["prompt_per_token_ms"] == 0


def test_a_server_that_sends_no_timings_sends_none_blocking_or_streamed() -> None:
    # OpenAI, DeepSeek and vLLM send no timings: their profiles set timings=False.
    with running_simulator(SimulatorConfig(overhead_ms=0, answer_tokens=3, timings=False)) as sim:
        client = client_for(sim)
        blocking = client.chat.completions.create(model=DEFAULT_MODEL, messages=question("Hi?"))
        streamed = list(
            client.chat.completions.create(
                model=DEFAULT_MODEL,
                messages=question("Hi?"),
                stream=True,
                stream_options={"include_usage": True},
            )
        )

    assert blocking.usage is not None and blocking.usage.prompt_tokens > 0
    assert "timings" not in (blocking.model_extra or {})
    assert streamed[-1].usage is not None
    assert all("timings" not in (chunk.model_extra or {}) for chunk in streamed)
