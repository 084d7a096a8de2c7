"""``doctor``'s newer probes: stream pattern, streamed usage, tokenizer error, prefix cache,
and output made safe to print. Against the real simulator where the server matters."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.fakes import DropsRequestField

from agent_latency.cli import main
from agent_latency.config import LLMSettings, Settings
from agent_latency.doctor import CheckResult, CheckStatus, Endpoint, printable, run_checks
from agent_latency.doctor._checks import (
    check_api_root,
    check_prefill,
    check_prefix_cache,
    check_streaming,
    check_tokenizer,
    stream_bursts,
)
from agent_latency.doctor._probes import (
    STREAM_PROBE_PROMPT,
    HttpReply,
    PrefillSample,
    ServerUsage,
    StreamProbe,
    TokenizerProbe,
    fitting_size,
)
from agent_latency.sim import SimulatorConfig, running_simulator

# The simulator counts in the default model's own tokens, as a healthy endpoint does.
FAST = {
    "overhead_ms": 20.0,
    "prefill_ms_per_token": 0.05,
    "decode_tokens_per_s": 100.0,
    "tokenizer": "qwen-7b-chat",
}

pytestmark = pytest.mark.usefixtures("clean_environment")


def _stream(*chunk_ms: float, text: str = "") -> StreamProbe:
    return StreamProbe(HttpReply("u", 200), chunk_ms, True, text)


def _by_name(settings: Settings, transport: httpx.BaseTransport | None = None) -> dict[str, str]:
    with Endpoint(settings, transport=transport) as endpoint:
        return {
            r.name: f"{r.status.value}: {r.message}"
            for r in run_checks(settings, endpoint=endpoint)
        }


# --- streaming: judged by the arrival pattern -----------------------------------------------


def test_a_fast_decoder_streams_though_its_chunks_span_only_31_ms() -> None:
    # As reported: first chunk after 208 ms, last after 239 ms, 32 chunks, one per millisecond.
    fast = _stream(*(208.0 + i for i in range(32)))

    result = check_streaming(fast)

    assert result.status is CheckStatus.PASS, result.message
    assert result.message == "first of 32 chunks after 208 ms, last after 239 ms, each on its own"


def test_chunks_released_together_are_one_burst_however_late() -> None:
    # A buffer releases everything within microseconds of the last token being decoded.
    buffered = _stream(*(900.0 + i * 0.01 for i in range(32)))
    # A proxy flushing 8 kB blocks: two bursts, still buffered.
    blocks = _stream(*[400.0 + i * 0.01 for i in range(16)], *[800.0 + i * 0.01 for i in range(16)])

    assert stream_bursts(buffered.chunk_ms) == 1
    assert stream_bursts(blocks.chunk_ms) == 2
    for probe in (buffered, blocks):
        result = check_streaming(probe)
        assert result.status is CheckStatus.FAIL
        assert "buffers the stream" in result.message


def test_an_empty_answer_is_named_as_such_not_as_a_streaming_fault() -> None:
    result = check_streaming(_stream())

    assert result.status is CheckStatus.WARN
    assert result.message.startswith("the model answered nothing to the streaming probe")
    assert "0 content chunks" not in result.message


def test_the_streaming_probe_asks_for_an_answer_any_model_gives() -> None:
    assert "Count from 1 to 30" in STREAM_PROBE_PROMPT


# --- streamed usage ---------------------------------------------------------------------------


def test_a_server_sending_no_usage_when_streaming_is_reported() -> None:
    with running_simulator(SimulatorConfig(**FAST)) as sim:
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192))
        healthy = _by_name(settings)
        silent = _by_name(settings, DropsRequestField("stream_options"))

    assert healthy["streamed usage"].startswith("pass: ")
    assert silent["streamed usage"].startswith("warn: the server sends no usage when streaming")
    assert silent["streaming"].startswith("pass: ")


# --- the tokenizer's error against the server's count ---------------------------------------


def _probe(server_text: int | None, server_with_tools: int | None = None) -> TokenizerProbe:
    return TokenizerProbe(
        HttpReply("u", 200),
        "p",
        ServerUsage(prompt_tokens=server_text),
        ({"type": "function", "function": {"name": "t"}},) if server_with_tools else (),
        HttpReply("u", 200) if server_with_tools else None,
        ServerUsage(prompt_tokens=server_with_tools),
    )


def _counts(text: int, tools: int = 0) -> Callable[[str, Sequence[Mapping[str, Any]]], int]:
    """Our count: ``text`` for the prompt, ``tools`` more when tool definitions are sent."""
    return lambda _prompt, sent: text + (tools if sent else 0)


def test_a_tokenizer_counting_under_the_server_warns_with_the_budget_it_needs() -> None:
    # Gemma on llama.cpp: 3,587 server tokens for 2,972 of ours.
    result = check_tokenizer(_probe(3587), "cl100k_base", _counts(2972), Settings())

    assert result.status is CheckStatus.WARN
    assert result.message.startswith(
        "cl100k_base counts 2,972 tokens where the server counts 3,587 (-17.1%) for English "
        "and Chinese text"
    )
    assert "may be about 7,242 tokens to the server" in result.message
    assert "set llm.tokenizer" in result.fix and "lower token_budget to about 4,971" in result.fix


def test_tokenizer_error_within_tolerance_passes_and_overcounting_warns() -> None:
    close = check_tokenizer(_probe(2000, 2300), "t", _counts(2010, 300), Settings())
    assert close.status is CheckStatus.PASS
    assert close.message == (
        "t counts 2,010 tokens where the server counts 2,000 (+0.5%) for English and Chinese "
        "text; for 1 tool definitions 300 where it counts 300"
    )

    over = check_tokenizer(_probe(2000), "t", _counts(2400), Settings())
    assert over.status is CheckStatus.WARN and "trimmed further" in over.message

    unknown = check_tokenizer(_probe(None), "t", _counts(1), Settings())
    assert unknown.status is CheckStatus.WARN and "reports no usage.prompt_tokens" in (
        unknown.message
    )


def test_offsetting_errors_in_text_and_tools_still_warn() -> None:
    # Text undercounted by 300, tools overcounted by 300: the whole request looks right.
    result = check_tokenizer(_probe(1000, 1500), "t", _counts(700, 800), Settings())

    assert result.status is CheckStatus.WARN


def test_a_cl100k_simulator_under_a_qwen_trimmer_is_caught() -> None:
    # A simulator once counted cl100k with OpenAI's framing while the library's default
    # model is qwen-7b-chat; doctor passed (+1.0-1.4%) because its probe text was English.
    with running_simulator(SimulatorConfig(**{**FAST, "tokenizer": "cl100k"})) as sim:
        checks = _by_name(Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192)))

    assert checks["tokenizer"].startswith("warn: qwen")
    assert "for English and Chinese text" in checks["tokenizer"]
    assert "tool definitions" in checks["tokenizer"]


# --- the prefix cache -----------------------------------------------------------------------


def test_the_prefix_cache_is_found_or_its_absence_reported() -> None:
    with running_simulator(SimulatorConfig(**FAST)) as sim:
        caching = _by_name(Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192)))
    with running_simulator(SimulatorConfig(**FAST, prefix_cache=False)) as sim:
        cold = _by_name(Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192)))

    assert caching["prefix cache"].startswith("pass: the same ")
    assert "tokens reported cached the second time" in caching["prefix cache"]
    assert cold["prefix cache"].startswith("warn: the same ")
    assert "0 tokens reported cached" in cold["prefix cache"]


# --- llama-server's slots (GET /props) -----------------------------------------------------


@pytest.mark.parametrize(
    ("slots", "slot_context", "window", "expected"),
    [
        (
            2,
            8192,
            8192,
            "pass: llama.cpp server (build agent-latency-sim): 2 slots of 8,192 tokens",
        ),
        (1, 8192, 8192, "warn: llama.cpp server (build agent-latency-sim): 1 slot of 8,192"),
        (2, 4096, 8192, "fail: llama.cpp server (build agent-latency-sim): 2 slots of 4,096"),
    ],
)
def test_a_llama_server_s_slots_are_read_from_props_and_checked_against_the_window(
    slots: int, slot_context: int, window: int, expected: str
) -> None:
    config = SimulatorConfig(**FAST, cache_slots=slots, context_window=slot_context)
    with running_simulator(config) as sim:
        checks = _by_name(Settings(llm=LLMSettings(base_url=sim.base_url, context_window=window)))
    assert checks["server"].startswith(expected), checks["server"]
    if slots == 1:
        assert "concurrent conversations evict each other" in checks["server"]
    if slot_context < window:
        assert "exceeds a slot's 4,096" in checks["server"]


def test_a_server_without_props_gets_no_server_check() -> None:
    # vLLM, OpenAI and the simulator without slots answer GET /props with 404.
    with running_simulator(SimulatorConfig(**FAST)) as sim:
        checks = _by_name(Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192)))
    assert "server" not in checks


def test_a_cache_shown_only_by_time_counts_and_noise_does_not() -> None:
    first = PrefillSample(2000, 900.0)

    by_time = check_prefix_cache(first, PrefillSample(2000, 60.0))
    noise = check_prefix_cache(PrefillSample(2000, 30.0), PrefillSample(2000, 14.0))

    assert by_time.status is CheckStatus.PASS and "reports no cached tokens" in by_time.message
    assert noise.status is CheckStatus.WARN


# --- output safe to print ---------------------------------------------------------------------


def test_printable_escapes_control_and_format_characters() -> None:
    assert printable("gpt-4o") == "gpt-4o"
    assert printable("a\x1b[31mb\nc\u202ed\x7f") == "a\\x1b[31mb\\nc\\u202ed\\x7f"
    assert printable("non\u00a0breaking, ünïcode 中文") == "non breaking, ünïcode 中文"
    result = CheckResult("x", CheckStatus.WARN, "m\x1b[2J", "f\r\nFAIL")
    assert (result.message, result.fix) == ("m\\x1b[2J", "f\\r\\nFAIL")


def test_a_server_message_with_escape_codes_is_shown_escaped() -> None:
    reply = HttpReply("http://h/v1/models", 500, body={"error": {"message": "disk\x1b[2J full"}})

    assert check_api_root(reply).message == "http://h/v1/models answered 500: disk\\x1b[2J full"


def test_a_model_name_with_escape_codes_and_newlines_prints_on_one_line(tmp_path: Path) -> None:
    model = "evil\x1b[31m\nPASS  api key: forged"
    out = io.StringIO()
    with running_simulator(SimulatorConfig(**FAST)) as sim, redirect_stdout(out):
        main(["doctor", "--base-url", sim.base_url, "--model", model])
    output = out.getvalue()

    assert "\x1b" not in output
    assert "\nPASS  api key: forged" not in output
    assert output.splitlines()[0].endswith("model evil\\x1b[31m\\nPASS  api key: forged")


# --- impossible usage: no traceback at 1e12, no "lower token_budget to about -304,800" ------


class ReportsPromptTokens(httpx.HTTPTransport):
    """Forwards to the simulator and rewrites every reported ``usage.prompt_tokens`` to one
    value, line by line as the answer streams, as a broken server or proxy would."""

    def __init__(self, prompt_tokens: float) -> None:
        super().__init__()
        self.prompt_tokens = prompt_tokens

    def _rewrite(self, line: bytes) -> bytes:
        prefix = b"data: " if line.startswith(b"data: ") else b""
        try:
            event = json.loads(line[len(prefix) :])
        except ValueError:
            return line
        if isinstance(event, dict) and isinstance(event.get("usage"), dict):
            event["usage"]["prompt_tokens"] = self.prompt_tokens
        return prefix + json.dumps(event).encode()

    def _lines(self, response: httpx.Response) -> Iterator[bytes]:
        for line in response.iter_lines():
            yield self._rewrite(line.encode()) + b"\n"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method != "POST":
            return response
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=headers, content=self._lines(response))


@pytest.mark.parametrize("prompt_tokens", [1e12, -5])
def test_impossible_prompt_tokens_fail_one_check_and_nothing_else_breaks(
    prompt_tokens: float,
) -> None:
    with running_simulator(SimulatorConfig(**FAST)) as sim:
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192))
        results = list(
            run_checks(
                settings, endpoint=Endpoint(settings, transport=ReportsPromptTokens(prompt_tokens))
            )
        )

    by_name = {r.name: r for r in results}
    failed = by_name["server usage"]
    assert failed.status is CheckStatus.FAIL
    assert failed.message.startswith("the server reported impossible usage: prompt_tokens in its")
    assert "2,000-token prefill probe" not in failed.message  # our count, not the server's
    assert [r.name for r in results if r.status is CheckStatus.FAIL] == ["server usage"]
    assert by_name["latency model"].status is CheckStatus.PASS
    assert "-" not in by_name["prefill"].fix  # no negative budget is suggested


# --- a slow server: the prefill probes shrink to fit the probe timeout ------------------------


def test_prefill_probes_on_a_slow_server_fit_the_probe_timeout() -> None:
    # 2 ms per prompt token: the 2,000-token probe would take 4 s, past a 3 s probe timeout (a
    # CPU llama-server prefilling ~100 tokens/s timed out on doctor's 10 s this way).
    slow = SimulatorConfig(**{**FAST, "overhead_ms": 20.0, "prefill_ms_per_token": 2.0})
    with running_simulator(slow) as sim:
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192))
        with Endpoint(settings, timeout_s=3.0) as endpoint:
            samples = endpoint.probe_prefill()

    assert isinstance(samples, list), samples
    sizes = [sample.prompt_tokens for sample in samples]
    assert len(sizes) == 2 and 200 <= sizes[0] < sizes[1] < 1000
    assert all(sample.ttft_ms < 3000 for sample in samples)
    assert "the probes went up to" in check_prefill(samples, settings).message


def test_a_size_is_cut_to_what_the_probes_so_far_predict_fits() -> None:
    first = [PrefillSample(200, 1000.0)]  # 5 ms per token, fixed costs included

    assert fitting_size(200, [], 500.0) == 200
    assert fitting_size(1000, first, 5000.0) == 1000
    assert fitting_size(2000, first, 5000.0) == 1000
    assert fitting_size(2000, first, 1200.0) is None  # 240 tokens: too close to 200 to add much


class DropsKeptAliveConnection(httpx.HTTPTransport):
    """Forwards to the simulator, but the first POST finds its kept-alive connection closed by
    the server before any answer, as llama-server's do."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and not self.dropped:
            self.dropped += 1
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return super().handle_request(request)


def test_a_connection_the_server_closed_between_probes_is_not_a_failed_check() -> None:
    # Reported against llama-server: "FAIL streaming: ... RemoteProtocolError: Server
    # disconnected without sending a response."
    transport = DropsKeptAliveConnection()
    with running_simulator(SimulatorConfig(**FAST)) as sim:
        checks = _by_name(
            Settings(llm=LLMSettings(base_url=sim.base_url, context_window=8192)), transport
        )

    assert transport.dropped == 1
    assert [name for name, found in checks.items() if not found.startswith("pass")] == []
