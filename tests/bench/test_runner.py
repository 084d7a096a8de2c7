"""The benchmark runner: statistics, scenario, replay, gate, and runs on the simulator."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from pydantic import SecretStr
from support.conversations import INSTANT, agent_conversation

from agent_latency.bench import (
    BenchInterrupted,
    BenchOptions,
    BenchReport,
    check_regression,
    load_baseline,
    open_endpoint,
    run_bench,
)
from agent_latency.bench._errors import EndpointError
from agent_latency.bench._measurements import (
    GATED_MODE,
    MODES,
    STRATEGIES,
    ModeResult,
    Sample,
    percentile,
)
from agent_latency.bench._report import saving_breakdown
from agent_latency.bench._scenario import call_points, load_scenario, with_cache_salt
from agent_latency.config import Settings
from agent_latency.sim import RunningSimulator, SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter

ROOT = Path(__file__).resolve().parents[2]
# Decoding is slow enough (12 tokens at 100/s: 110 ms) that a blocking call's first text
# arrives well after a streamed call's; prefill is fast so the tests stay fast.
SIM = SimulatorConfig(
    overhead_ms=20, prefill_ms_per_token=0.02, decode_tokens_per_s=100, answer_tokens=12
)


# For token-count tests only: calls as fast as the client allows.
def settings_for(sim: RunningSimulator, **llm: Any) -> Settings:
    settings = Settings()
    return replace(settings, llm=replace(settings.llm, base_url=sim.base_url, **llm))


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(SIM) as running:
        yield running


@pytest.fixture(scope="module")
def instant_sim() -> Iterator[RunningSimulator]:
    with running_simulator(INSTANT) as running:
        yield running


@pytest.fixture(scope="module")
def report(sim: RunningSimulator) -> BenchReport:
    messages = convert_to_messages(agent_conversation())
    return run_bench(settings_for(sim), messages, BenchOptions(runs=1, budget=300), simulator=SIM)


# -- statistics -----------------------------------------------------------------------------------


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert percentile([10.0, 20.0], 0.5) == 15.0
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([1.0, 9.0], 0.0) == 1.0
    assert percentile([1.0, 9.0], 1.0) == 9.0


@pytest.mark.parametrize(("samples", "fraction"), [([], 0.5), ([1.0], 1.5), ([1.0], -0.1)])
def test_percentile_rejects_bad_input(samples: list[float], fraction: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile(samples, fraction)


def test_saving_breakdown_splits_prefill_and_decode() -> None:
    def result(
        trimmed: bool, streaming: bool, ttft: float, total: float, tokens: int
    ) -> ModeResult:
        mode = next(m for m in MODES if (m.trimmed, m.streaming) == (trimmed, streaming))
        return ModeResult(mode, (Sample(ttft, total, tokens, None, 64),))

    modes = (
        result(False, False, 4800, 4800, 8000),
        result(False, True, 3500, 4790, 8000),
        result(True, False, 2150, 2150, 2000),
        result(True, True, 900, 2150, 2000),
    )
    report = BenchReport("http://h/v1", "m", None, 1, 2500, modes)
    breakdown = saving_breakdown(report)
    assert breakdown is not None
    assert breakdown.saving_ms == 3900
    assert breakdown.prefill_saved_ms == 2600
    assert breakdown.decode_ms == 1290
    assert breakdown.rest_ms == 10
    assert "3,900 ms sooner" in breakdown.describe()
    assert breakdown.model_prefill_saved_ms is None
    assert "predicts" not in breakdown.describe()
    # 8,000 tokens at 0.16 + 0.03 × 8 ms each, against 2,000 at 0.16 + 0.03 × 2: 3,200 - 440;
    # 64 answer tokens, 63 after the first at 50/s.
    simulated = saving_breakdown(replace(report, simulator=SimulatorConfig()))
    assert simulated is not None
    assert simulated.model_prefill_saved_ms == pytest.approx(2760)
    assert simulated.model_decode_ms == pytest.approx(1260)
    assert "predicts 4,020 ms (2,760 ms prefill + 1,260 ms decode)" in simulated.describe()


def test_bench_plan_validates_and_counts_calls() -> None:
    assert BenchOptions(runs=5).calls() == 1 + 5 * 4
    assert BenchOptions(runs=2, turns=3, sweep=True).calls() == 1 + 2 * 4 + 3 * 4 + 6
    # --runs 0 skips the four modes and their warm-up.
    assert BenchOptions(runs=0, turns=3).calls() == 3 * 4
    for options in ({"runs": -1}, {"turns": 0}, {"budget": -1}, {"runs": True}):
        with pytest.raises(ValueError, match=f"--{next(iter(options))}"):
            BenchOptions(**options)  # type: ignore[arg-type]


# -- inputs ---------------------------------------------------------------------------------------


def test_default_scenario_is_a_realistic_8k_agent_request() -> None:
    path = ROOT / "src/agent_latency/scenarios/agent_8k.json"
    assert isinstance(json.loads(path.read_text("utf-8")), list)  # a plain message list
    messages = load_scenario()
    tokens = TokenCounter().count_messages(messages)
    assert 8_100 <= tokens <= 8_400
    assert isinstance(messages[0], SystemMessage)
    assert "## Tools" in str(messages[0].content)
    assert isinstance(messages[-1], HumanMessage)
    tool_calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    tool_results = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(tool_calls) == len(tool_results) == 12
    assert len(call_points(messages)) == 25


def test_generator_reproduces_the_shipped_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_scenario", ROOT / "scripts/make_scenario.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    shipped = json.loads((ROOT / "src/agent_latency/scenarios/agent_8k.json").read_text("utf-8"))
    assert module.make_scenario(module.DEFAULT_TOKENS) == shipped


def test_load_scenario_names_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('[{"role": "user", "content": "hi"},', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json"):
        load_scenario(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.json.*empty"):
        load_scenario(empty)


def test_call_points_are_before_each_assistant_turn_and_at_the_end() -> None:
    messages = convert_to_messages(agent_conversation(rounds=2))
    # system, (user, ai-call, tool, ai) x 2, user
    assert call_points(messages) == [2, 4, 6, 8, 10]
    assert call_points(messages[:-1]) == [2, 4, 6, 8]
    doubled = [*messages[:5], AIMessage("more"), *messages[5:]]
    assert call_points(doubled) == [2, 4, 7, 9, 11]


def test_a_cache_salt_makes_the_prompt_start_unique_without_touching_the_input() -> None:
    messages = convert_to_messages(agent_conversation(rounds=1))
    original = messages[0].content
    first = with_cache_salt(messages, "000000001")
    second = with_cache_salt(messages, "987654321")
    assert messages[0].content == original
    assert str(first[0].content).startswith("Request 000000001.")
    assert first[0].content != second[0].content
    assert first[1:] == messages[1:]
    counter = TokenCounter()
    assert counter.count_messages(first) == counter.count_messages(second)
    parts = [SystemMessage(content=[{"type": "text", "text": "Be brief."}])]
    assert with_cache_salt(parts, "123")[0].content[0] == {  # type: ignore[index]
        "type": "text",
        "text": "Request 123.\n\n",
    }


# -- the regression gate --------------------------------------------------------------------------


def test_load_baseline_reads_the_gated_mode(tmp_path: Path, report: BenchReport) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(report.to_json()), encoding="utf-8")
    assert load_baseline(path) == round(report.mode(GATED_MODE).ttft_ms(0.5), 1)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"modes": []}', "no mode"),
        ("[1, 2]", "no mode"),
        ('{"modes": [{"trimmed": true, "streaming": true, "ttft_ms": {"p50": "fast"}}]}', "p50"),
        ('{"modes": [{"trimmed": true, "streaming": true, "ttft_ms": {"p50": 0}}]}', "p50"),
        # Python's json reads both as inf: every run would be 100% faster, a gate never failing.
        ('{"modes": [{"trimmed": true, "streaming": true, "ttft_ms": {"p50": Infinity}}]}', "p50"),
        ('{"modes": [{"trimmed": true, "streaming": true, "ttft_ms": {"p50": 1e999}}]}', "p50"),
        ('{"modes": [{"trimmed": true, "streaming": true, "ttft_ms": {"p50": NaN}}]}', "p50"),
    ],
)
def test_malformed_baseline_is_a_value_error_naming_the_file(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "old.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"old\.json.*{problem}"):
        load_baseline(path)
    with pytest.raises(ValueError, match="not found"):
        load_baseline(tmp_path / "missing.json")


def test_gate_fails_only_beyond_the_allowed_regression(report: BenchReport) -> None:
    current = report.mode(GATED_MODE).ttft_ms(0.5)
    assert check_regression(report, current, 0).passed
    assert check_regression(report, current / 1.09, 10).passed
    slower = check_regression(report, current / 1.2, 10)
    assert not slower.passed
    assert slower.change_pct == pytest.approx(20)
    assert "REGRESSION" in slower.describe() and "+20.0%" in slower.describe()
    assert check_regression(report, current * 2, 10).change_pct == pytest.approx(-50)


# -- runs on the simulator ------------------------------------------------------------------------


def test_report_has_four_modes_in_order_with_one_sample_each(report: BenchReport) -> None:
    assert [result.mode for result in report.modes] == list(MODES)
    assert all(len(result.samples) == 1 for result in report.modes)
    assert report.budget == 300


def test_trimmed_modes_send_fewer_tokens(report: BenchReport) -> None:
    untrimmed = {r.input_tokens for r in report.modes if not r.mode.trimmed}
    trimmed = {r.input_tokens for r in report.modes if r.mode.trimmed}
    assert len(untrimmed) == len(trimmed) == 1
    assert max(trimmed) <= 300 < min(untrimmed)


def test_streaming_shows_the_first_token_before_blocking(report: BenchReport) -> None:
    for trimmed in (False, True):
        by_mode = {r.mode.streaming: r for r in report.modes if r.mode.trimmed == trimmed}
        blocking, streaming = by_mode[False], by_mode[True]
        assert blocking.ttft_ms(0.5) == blocking.total_ms(0.5)
        # The simulator decodes 11 tokens after the first at 100/s: a 110 ms structural gap.
        assert streaming.ttft_ms(0.5) < blocking.ttft_ms(0.5)
        assert streaming.ttft_ms(0.5) < streaming.total_ms(0.5)


def test_report_json_has_the_documented_schema(report: BenchReport) -> None:
    document = json.loads(json.dumps(report.to_json()))
    assert {"endpoint", "model", "runs", "modes"} <= document.keys()
    assert document["simulator"]["prefill_ms_per_token"] == SIM.prefill_ms_per_token
    assert document["runs"] == 1
    assert len(document["modes"]) == 4
    for entry in document["modes"]:
        assert isinstance(entry["trimmed"], bool) and isinstance(entry["streaming"], bool)
        assert isinstance(entry["input_tokens"], int)
        for key in ("ttft_ms", "total_ms"):
            assert set(entry[key]) == {"p50", "p95"}
            assert all(math.isfinite(v) and v > 0 for v in entry[key].values())


def test_multi_turn_prefix_stable_trimming_prefills_less(instant_sim: RunningSimulator) -> None:
    messages = convert_to_messages(agent_conversation(rounds=10))
    report = run_bench(
        settings_for(instant_sim),
        messages,
        BenchOptions(runs=1, turns=16, budget=1500),
    )
    results = {r.strategy.key: r for r in report.turns}
    assert [r.strategy for r in report.turns] == list(STRATEGIES)
    assert all(len(r.samples) == 16 for r in report.turns)
    stable, moving, untrimmed = (
        results["prefix_stable"],
        results["moving_cut"],
        results["untrimmed"],
    )
    for result in (stable, moving, untrimmed):
        assert result.cached_tokens is not None
    assert stable.prompt_tokens < untrimmed.prompt_tokens
    # What the cache cannot serve must be prefilled: that is what the first token waits for.
    stable_prefilled = stable.prompt_tokens - stable.cached_tokens  # type: ignore[operator]
    moving_prefilled = moving.prompt_tokens - moving.cached_tokens  # type: ignore[operator]
    assert stable_prefilled < moving_prefilled
    # The hard-limit-only replay sends more than a budget-trimmed one.
    assert results["hard_limit"].prompt_tokens > moving.prompt_tokens
    turns = report.to_json()["turns"]
    assert turns["calls"] == 16
    assert [s["strategy"] for s in turns["strategies"]] == [s.key for s in STRATEGIES]


def test_ctrl_c_keeps_the_modes_replays_and_calls_that_finished(
    instant_sim: RunningSimulator, tmp_path: Path
) -> None:
    # Before: the KeyboardInterrupt carried nothing, and every call made was lost.
    def ctrl_c_after(step: str) -> None:
        if step == "hard limit only: call 1/2":  # as SIGINT would, once that call is recorded
            raise KeyboardInterrupt

    messages = convert_to_messages(agent_conversation())
    options = BenchOptions(runs=2, turns=2, budget=300, sweep=True)
    with pytest.raises(BenchInterrupted) as stopped:
        run_bench(settings_for(instant_sim), messages, options, on_call=ctrl_c_after)

    assert isinstance(stopped.value, KeyboardInterrupt)  # a caller that ignores it still stops
    report = stopped.value.report
    assert report.interrupted
    assert [len(result.samples) for result in report.modes] == [2, 2, 2, 2]
    # Only the replay that finished: a replay cut short would compare its first calls only.
    assert [(r.strategy.key, len(r.samples)) for r in report.turns] == [("untrimmed", 2)]
    assert report.sweep == ()
    assert len(report.calls) == 1 + 8 + 3  # the warm-up, the modes, and 3 replayed calls
    assert report.missing == (
        "the replay of hard limit only",
        "the replay of trimming, moving cut",
        "the replay of prefix-stable trimming",
        "the prefill sweep",
    )
    document = json.loads(json.dumps(report.to_json()))
    assert document["interrupted"] is True and document["missing"] == list(report.missing)
    assert [mode["runs"] for mode in document["modes"]] == [2, 2, 2, 2]
    # A partial run is no baseline: its figures are of fewer runs than asked.
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match=r"partial\.json: baseline is a partial run"):
        load_baseline(path)


@pytest.mark.parametrize("signalled", [True, False], ids=["after a signal", "no signal"])
def test_an_error_after_a_stopping_signal_keeps_the_calls_that_finished(
    instant_sim: RunningSimulator, signalled: bool
) -> None:
    # Ctrl-C's KeyboardInterrupt can land in an import a call makes, and the call then fails
    # otherwise (a message class loaded twice): the bench lost every finished call (a CI run).
    def fails_after(step: str) -> None:
        if step == "run 1/2: trimmed + blocking":
            raise ValueError("Input should be a valid dictionary or instance of BaseMessage")

    messages = convert_to_messages(agent_conversation())
    options = BenchOptions(runs=2, budget=300)
    settings = settings_for(instant_sim)
    if not signalled:
        with pytest.raises(ValueError, match="valid dictionary"):
            run_bench(settings, messages, options, on_call=fails_after, stopped=lambda: False)
        return
    with pytest.raises(BenchInterrupted) as stopped:
        run_bench(settings, messages, options, on_call=fails_after, stopped=lambda: True)

    report = stopped.value.report
    assert report.interrupted
    assert sum(len(result.samples) for result in report.modes) == 3


def test_every_call_lists_our_count_next_to_the_servers() -> None:
    # The simulator counts in the model's tokenizer and template, as the trimmer does.
    config = replace(INSTANT, tokenizer=Settings().llm.model)
    plan = BenchOptions(runs=1, turns=3, budget=600, sweep=True)
    with running_simulator(config) as running:
        report = run_bench(
            settings_for(running), convert_to_messages(agent_conversation(rounds=8)), plan
        )
    calls = report.calls
    # No llm.context_window: the hard limit is the smallest window in common use less the reserve.
    hard_limit = 8192 - Settings().prompt.reserve_for_output
    assert len(calls) == plan.calls()
    assert calls[0].step == "warm-up" and calls[0].budget == 600
    for mode in report.modes:
        listed = [c for c in calls if c.step == f"run 1/1: {mode.mode.label}"]
        assert [c.input_tokens for c in listed] == [s.input_tokens for s in mode.samples]
        assert {c.budget for c in listed} == {600 if mode.mode.trimmed else None}
    replay = [c for c in calls if ": call " in c.step]
    assert len(replay) == 3 * len(STRATEGIES)
    budgets = {
        s.label: {c.budget for c in replay if c.step.startswith(s.label)} for s in STRATEGIES
    }
    assert budgets == {
        "no trimming": {None},
        "hard limit only": {hard_limit},
        "trimming, moving cut": {600},
        "prefix-stable trimming": {600},
    }
    swept = {c.budget for c in calls if c.step.startswith("prefill sweep")}
    assert swept == {p.budget for p in report.sweep}
    for call in calls:
        assert call.server_input_tokens == call.input_tokens, call
        assert call.cached_tokens is not None and 0 <= call.cached_tokens < call.input_tokens
        if call.budget is not None:
            assert call.input_tokens <= call.budget or call.over_budget, call
    # A replay's later calls are served from the prefix cache; a fresh cache salt is not.
    assert any(c.cached_tokens for c in replay)
    assert calls[0].cached_tokens == 0
    listed_json = report.to_json()["calls"]
    assert listed_json[0] == calls[0].to_json()
    assert set(listed_json[0]) == {
        "step",
        "budget",
        "over_budget",
        "input_tokens",
        "server_input_tokens",
        "cached_tokens",
    }


def test_too_many_turns_fail_before_any_call() -> None:
    settings = Settings()
    unreachable = replace(settings, llm=replace(settings.llm, base_url="http://127.0.0.1:9/v1"))
    messages = convert_to_messages(agent_conversation(rounds=2))
    with pytest.raises(ValueError, match=r"--turns 6: .* only 5 model calls"):
        run_bench(unreachable, messages, BenchOptions(runs=1, turns=6))


def test_endpoint_errors_name_the_endpoint_but_never_the_key() -> None:
    secret = "sk-bench-secret-0123456789"
    with running_simulator(replace(INSTANT, api_key="sk-the-right-one")) as keyed:
        settings = settings_for(keyed, api_key=SecretStr(secret))
        with pytest.raises(EndpointError) as caught:
            run_bench(settings, convert_to_messages(agent_conversation(1)), BenchOptions(runs=1))
    message = str(caught.value)
    assert "HTTP 401" in message and keyed.host in message and "API key" in message
    assert secret not in message
    unreachable = replace(Settings(), llm=replace(Settings().llm, base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(EndpointError, match="could not be reached"):
        run_bench(unreachable, convert_to_messages(agent_conversation(1)), BenchOptions(runs=1))


def test_open_endpoint_starts_the_simulator_only_without_a_base_url(
    instant_sim: RunningSimulator,
) -> None:
    given = settings_for(instant_sim)
    with open_endpoint(given) as (settings, simulator):
        assert settings is given and simulator is None
    keyed = replace(Settings(), llm=replace(Settings().llm, api_key=SecretStr("sk-not-for-sim")))
    with open_endpoint(keyed) as (settings, simulator):
        # It serves the configured model and counts in that model's tokens, as its server would.
        model = settings.llm.model
        assert simulator == SimulatorConfig(model=model, tokenizer=model)
        assert settings.llm.api_key is None
        assert settings.llm.base_url is not None
        assert settings.llm.base_url.startswith("http://127.0.0.1:")
        models = httpx.get(f"{settings.llm.base_url}/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == [settings.llm.model]
