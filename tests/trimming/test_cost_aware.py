"""The cost-aware trimmer: cache-state decisions, the append path, its record, span attributes."""

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from importlib import resources
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_latency import LatencyCoefficients, LatencyModel, semconv
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimResult
from agent_latency.trimming._cache_state import CacheState, cache_state
from agent_latency.trimming._cost_aware import (
    MIN_OBSERVATIONS,
    CostAwareTrimmer,
    _fastest_keeping_context,
)
from agent_latency.trimming._latest_call import LatestCall


def call_points(messages: Sequence[BaseMessage]) -> list[int]:
    """The prompt lengths at which the agent called the model: before each of its answers, and
    the whole conversation when it ends in a question."""
    points = [
        index
        for index in range(1, len(messages))
        if isinstance(messages[index], AIMessage) and not isinstance(messages[index - 1], AIMessage)
    ]
    return points if isinstance(messages[-1], AIMessage) else [*points, len(messages)]


SCENARIO = convert_to_messages(
    json.loads((resources.files("agent_latency") / "scenarios" / "agent_8k.json").read_text())
)
POINTS = call_points(SCENARIO)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def learned(model: LatencyModel | None = None) -> LatencyModel:
    """A latency model that has seen enough calls to choose, each exactly as its priors predict
    (so its fit stays at the priors)."""
    model = model or LatencyModel()
    for prompt, cached in ((500, 0), (2500, 0), (3000, 2800)):
        model.observe(model.predict(prompt - cached, prompt), prompt, cached)
    assert model.observations >= MIN_OBSERVATIONS
    return model


def slow_prefill() -> LatencyModel:
    """A server where prefilling costs 2 ms a token (a CPU): re-prefilling a cut costs more than
    appending a longer prompt to a cached one."""
    priors = LatencyModel().coefficients
    return learned(LatencyModel(replace(priors, ms_per_token=2.0, ms_per_token_per_ktoken=0.0)))


# The cost-aware mechanics are tested on cuts by age with two head and four tail rounds (the
# plain trimmer's defaults until the frontier chose relevance with one of each): the rounds the
# tests name are those cuts'.
AGE: dict[str, Any] = {"history_selection": "age", "history_keep_head": 2, "history_keep_tail": 4}


def cost_aware(clock: Clock, budget: int = 3000, **options: object) -> CostAwareTrimmer:
    return CostAwareTrimmer(
        PriorityTrimmer(budget, prefix_stable=True, **AGE),
        context_window=8192,
        reserve_for_output=2048,
        cache_lifetime_s=300.0,
        clock=clock,
        **{
            "latency_model": learned(),
            "deep_trimmers": [PriorityTrimmer(1500, prefix_stable=True, **AGE)],
            **options,
        },  # type: ignore[arg-type]
    )


def replay(
    trimmer: CostAwareTrimmer,
    clock: Clock,
    points: list[int],
    gap: float = 10.0,
    *,
    held: bool = False,
) -> Iterator:
    """Each call of the conversation up to each point, ``gap`` seconds apart; with ``held`` the
    server reports each time that it held the prefix expected cached."""
    for end in points:
        clock.now += gap
        choice = trimmer.choose(SCENARIO[:end], key="c")
        if held:
            choice.result.on_usage(choice.result.tokens_after, choice.record.expected, None)
        yield choice


def test_without_a_key_it_is_the_plain_trimmer(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    plain = PriorityTrimmer(3000, prefix_stable=True, **AGE).trim(SCENARIO)
    assert trimmer.trim(SCENARIO).messages == plain.messages
    assert trimmer.trim(SCENARIO).messages == plain.messages  # nothing remembered


def test_before_enough_evidence_it_sends_the_plain_cut_and_predicts_nothing(clock: Clock) -> None:
    fresh = LatencyModel()
    trimmer = cost_aware(clock, latency_model=fresh)
    plain = PriorityTrimmer(3000, prefix_stable=True, **AGE)
    choices = list(replay(trimmer, clock, POINTS[8:14]))
    assert [c.option for c in choices] == ["cut"] * 6
    assert all(c.predicted_ms == {} for c in choices)
    assert [c.result.messages for c in choices] == [
        plain.trim(SCENARIO[:end]).messages for end in POINTS[8:14]
    ]
    assert {c.cache_state for c in choices[1:]} == {"warm"}  # the states are still tracked
    # Once the model has seen the endpoint, the same conversation appends on its warm cache.
    learned(fresh)
    (next_call,) = replay(trimmer, clock, [POINTS[14]])
    assert (next_call.option, next_call.cache_state) == ("append", "warm")
    assert set(next_call.predicted_ms) >= {"append", "cut"}


def test_first_call_is_cold_and_a_warm_call_appends_to_the_prompt_as_sent(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    first, second = replay(trimmer, clock, [POINTS[12], POINTS[13]])
    assert first.cache_state == "cold"
    assert first.option == "deep_cut"  # everything is prefilled anyway: the smallest prompt
    assert first.predicted_ms["deep_cut"] < first.predicted_ms["cut"]
    assert (second.cache_state, second.option) == ("warm", "append")
    sent = first.result.messages
    assert second.result.messages[: len(sent)] == sent
    assert second.result.messages[len(sent) :] == SCENARIO[POINTS[12] : POINTS[13]]
    assert first.result.tokens_after < second.result.tokens_after <= trimmer.hard_limit
    assert len(second.result.decisions) == POINTS[13]
    assert second.result.dropped_messages == first.result.dropped_messages


def test_idle_past_the_lifetime_nothing_is_assumed_cached(clock: Clock) -> None:
    idle, busy = cost_aware(clock), cost_aware(Clock())
    for trimmer in (idle, busy):
        list(replay(trimmer, trimmer._clock, POINTS[10:13], held=True))  # type: ignore[arg-type]
    (after_idle,) = replay(idle, clock, [POINTS[13]], gap=301.0)
    (warm,) = replay(busy, busy._clock, [POINTS[13]])  # type: ignore[arg-type]
    assert (after_idle.cache_state, warm.cache_state) == ("expired", "warm")
    assert warm.option == "append"
    assert after_idle.predicted_ms["append"] > warm.predicted_ms["append"]  # all prefilled
    assert after_idle.predicted_ms["cut"] >= warm.predicted_ms["cut"]
    assert after_idle.result.tokens_after <= idle.hard_limit


def test_the_hard_limit_is_never_exceeded(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    for choice in replay(trimmer, clock, POINTS[5:]):
        assert choice.result.tokens_after <= trimmer.hard_limit
    assert {c.option for c in replay(cost_aware(clock), clock, POINTS[5:])} >= {"append"}


def test_a_changed_conversation_cannot_append(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    trimmer.choose(SCENARIO[: POINTS[12]], key="c")
    edited = [SCENARIO[0], *SCENARIO[2 : POINTS[13]]]
    choice = trimmer.choose(edited, key="c")
    assert "append" not in choice.predicted_ms


def test_the_least_recently_used_conversation_is_forgotten(clock: Clock) -> None:
    trimmer = cost_aware(clock, max_conversations=1)
    trimmer.choose(SCENARIO[: POINTS[3]], key="a")
    trimmer.choose(SCENARIO[: POINTS[3]], key="b")
    assert trimmer.choose(SCENARIO[: POINTS[4]], key="b").cache_state == "warm"
    assert trimmer.choose(SCENARIO[: POINTS[4]], key="a").cache_state == "cold"


def test_remembered_conversations_are_bounded_by_the_bytes_of_their_shortened_copies(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A record keeps the shortened copies it sent after the input messages are gone: 1,024
    # conversations of them were bounded by count only.
    from agent_latency.trimming import _cost_aware

    result = ToolMessage("R" * 40_000, tool_call_id="c1")
    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
    messages = [SystemMessage("s"), HumanMessage("q"), call, result]
    probe = cost_aware(clock)
    probe.choose(messages, key="probe")
    (record,) = [probe._conversations.get("probe")]
    assert record.shortened and record.weight > 1_500  # the shortened result is held
    monkeypatch.setattr(_cost_aware, "CONVERSATION_BYTES", 3 * record.weight)
    trimmer = cost_aware(clock)
    for key in "abcde":
        trimmer.choose(messages, key=key)
    assert len(trimmer._conversations) == 3
    assert trimmer.choose(messages, key="a").cache_state == "cold"  # forgotten
    assert trimmer.choose(messages, key="e").cache_state != "cold"  # remembered


def test_the_span_says_the_state_the_predictions_and_the_option(clock: Clock) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trimmer = cost_aware(clock, tracer_provider=provider)
    config = {"configurable": {"thread_id": "t-1"}}
    trimmer.invoke(SCENARIO[: POINTS[12]], config=config)  # type: ignore[arg-type]
    clock.now += 5
    sent = trimmer.invoke(SCENARIO[: POINTS[13]], config=config)  # type: ignore[arg-type]
    spans = [s for s in exporter.get_finished_spans() if s.name == semconv.TRIM_SPAN_NAME]
    assert len(spans) == 2  # the candidate cuts record no spans of their own
    attributes = spans[1].attributes or {}
    assert attributes[semconv.TRIM_CACHE_STATE] == "warm"
    assert attributes[semconv.TRIM_OPTION] == "append"
    assert attributes[semconv.TRIM_HARD_LIMIT] == 8192 - 2048
    assert semconv.TRIM_PREDICTED_TTFT_PREFIX + "append" in attributes
    assert semconv.TRIM_PREDICTED_TTFT_PREFIX + "cut" in attributes
    assert attributes[semconv.TRIM_TOKENS_AFTER] <= 8192 - 2048
    assert sent[-1] is SCENARIO[POINTS[13] - 1]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"context_window": 4000}, "below the budget"),
        ({"cache_lifetime_s": 0}, "cache_lifetime_s"),
        ({"horizon_calls": 0}, "horizon_calls"),
        ({"trimmer": "not a trimmer"}, "trimmer must be a PriorityTrimmer"),
        ({"deep_trimmers": PriorityTrimmer(1500)}, "deep_trimmers must be a sequence"),
        ({"deep_trimmers": [PriorityTrimmer(1500), 900]}, "each of deep_trimmers must be a"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, object], named: str) -> None:
    arguments: dict[str, object] = {
        "trimmer": PriorityTrimmer(3000),
        "context_window": 8192,
        "reserve_for_output": 2048,
        **options,
    }
    trimmer = arguments.pop("trimmer")
    with pytest.raises(ValueError, match=named):
        CostAwareTrimmer(trimmer, **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("fractions", [0.5, (0.4, 1.0), (True,), ("0.5",)])
def test_bad_deep_cut_fractions_are_named(fractions: object) -> None:
    from agent_latency import Settings

    with pytest.raises(ValueError, match="deep_cut_fractions must be a sequence"):
        CostAwareTrimmer.from_settings(Settings(), deep_cut_fractions=fractions)  # type: ignore[arg-type]


def test_from_settings_builds_one_deep_trimmer_per_fraction_sharing_the_counter() -> None:
    from agent_latency import Settings

    trimmer = CostAwareTrimmer.from_settings(Settings(), deep_cut_fractions=(0.5, 0.25))
    budget = trimmer.trimmer.budget
    assert [deep.budget for deep in trimmer.deep_trimmers] == [budget // 4, budget // 2]
    assert all(d.token_counter is trimmer.trimmer.token_counter for d in trimmer.deep_trimmers)
    assert "deep_cuts=[" in repr(trimmer)
    assert CostAwareTrimmer.from_settings(Settings(), deep_cut_fractions=()).deep_trimmers == ()


def test_the_deep_cut_is_the_smallest_budget_that_holds_what_no_trim_removes(
    clock: Clock,
) -> None:
    fixed = (
        PriorityTrimmer(3000, prefix_stable=True, **AGE).trim(SCENARIO[: POINTS[12]]).fixed_tokens
    )
    too_small = PriorityTrimmer(fixed - 1, prefix_stable=True, **AGE)
    holds = PriorityTrimmer(fixed + 300, prefix_stable=True, **AGE)
    trimmer = cost_aware(
        clock, deep_trimmers=[PriorityTrimmer(1500, prefix_stable=True, **AGE), holds]
    )
    both = cost_aware(
        clock, deep_trimmers=[too_small, PriorityTrimmer(1500, prefix_stable=True, **AGE)]
    )
    (deepest,) = replay(trimmer, clock, [POINTS[12]])
    (fallback,) = replay(both, clock, [POINTS[12]])
    assert deepest.option == fallback.option == "deep_cut"
    assert deepest.result.budget == holds.budget  # the smaller budget, in any order given
    assert fallback.result.budget == 1500  # the smallest cannot hold the fixed part: the next
    assert not fallback.result.over_budget


def test_choose_needs_a_key(clock: Clock) -> None:
    with pytest.raises(ValueError, match="key"):
        cost_aware(clock).choose(SCENARIO, key=None)


def test_inside_a_run_the_key_is_the_runs_thread_id(clock: Clock) -> None:
    # As in TrimmingMiddleware, which calls trim() inside the agent's model node.
    from langchain_core.runnables import RunnableLambda

    trimmer = cost_aware(clock)
    step = RunnableLambda(lambda messages: trimmer.trim(messages))
    step.invoke(SCENARIO[: POINTS[12]], config={"configurable": {"thread_id": 7}})
    clock.now += 5
    result = step.invoke(SCENARIO[: POINTS[13]], config={"configurable": {"thread_id": 7}})
    assert trimmer.choose(SCENARIO[: POINTS[14]], key="7").cache_state == "warm"
    assert len(result.decisions) == POINTS[13]


# --- the server's reported cached tokens ------------------------------------------------------


def test_a_warm_call_the_server_did_not_cache_makes_the_next_assume_nothing_cached(
    clock: Clock,
) -> None:
    missed, held = cost_aware(clock), cost_aware(Clock())
    lasts = [
        list(replay(trimmer, trimmer._clock, POINTS[10:14], held=True))[-1]  # type: ignore[arg-type]
        for trimmer in (missed, held)
    ]
    assert [last.option for last in lasts] == ["append", "append"]
    lasts[0].result.on_usage(lasts[0].result.tokens_after, 0, None)  # the server: none reused
    (after_miss,) = replay(missed, clock, [POINTS[14]])
    (after_hit,) = replay(held, held._clock, [POINTS[14]])  # type: ignore[arg-type]
    assert (after_miss.cache_state, after_hit.cache_state) == ("evicted", "warm")
    # Nothing is assumed cached: the append's whole prompt is predicted prefilled.
    assert after_miss.predicted_ms["append"] > after_hit.predicted_ms["append"]


def test_reported_cache_hits_keep_the_cache_warm_and_no_report_judges_by_time(
    clock: Clock,
) -> None:
    reported, silent = cost_aware(clock), cost_aware(clock)
    for trimmer in (reported, silent):
        _, second = replay(trimmer, clock, [POINTS[12], POINTS[13]])
        if trimmer is reported:
            assert second.result.on_usage is not None
            second.result.on_usage(
                second.result.tokens_after, second.result.tokens_after - 50, None
            )
    assert next(replay(reported, clock, [POINTS[14]])).cache_state == "warm"
    assert next(replay(silent, clock, [POINTS[14]])).cache_state == "warm"


def record(
    state: CacheState, expected: int, missed_before: bool, miss_after_ms: float | None = None
) -> LatestCall:
    """A conversation's latest call, sent assuming ``state``, ``expected`` tokens of it cached."""
    return LatestCall(
        inputs=0,
        inputs_digest=b"",
        actions=(),
        shortened={},
        request_digest=b"",
        level=3000,
        input_tokens=0,
        at=0.0,
        growth=0.0,
        state=state,
        expected=expected,
        missed=missed_before,
        miss_after_ms=miss_after_ms,
    )


@pytest.mark.parametrize(
    ("state", "expected", "reported", "missed_before", "missed"),
    [
        ("warm", 2000, 0, False, True),  # expected 2,000 cached, none reported
        ("warm", 2000, 1900, True, False),  # the cache holds it again
        ("warm", 500, 0, False, False),  # too short to tell (OpenAI caches from 1,024 tokens)
        ("warm", 500, 0, True, True),  # ... either way
        ("evicted", 500, 480, True, False),  # a short prefix reported cached: it holds it again
        ("evicted", 800, 336, True, True),  # under half of a short prefix: nothing new
        ("expired", 2000, 0, False, False),  # nothing was expected cached
        ("warm", 0, 0, True, True),  # nothing shared with the previous prompt
        ("warm", 2000, None, True, True),  # no report: as before
        ("evicted", 2000, 1900, True, False),
    ],
)
def test_the_evidence_of_one_report(
    state: CacheState, expected: int, reported: int | None, missed_before: bool, missed: bool
) -> None:
    call = record(state, expected, missed_before)
    call.report_usage(expected + 100, reported, None)
    assert call.server_missed() is missed
    at = {"at": call.at, "missed": call.server_missed(), "same_request": True}
    assert cache_state(**at, now=10.0, lifetime_s=300.0) == ("evicted" if missed else "warm")
    assert cache_state(**at, now=301.0, lifetime_s=300.0) == "expired"
    assert cache_state(**{**at, "same_request": False}, now=10.0, lifetime_s=300.0) == "cold"
    assert cache_state(at=None, missed=False, same_request=True, now=0.0, lifetime_s=1) == "cold"


def test_the_callback_handler_reports_the_servers_cached_tokens_to_the_conversation(
    clock: Clock,
) -> None:
    # A server without a prefix cache: the warm append it gets reports 0 cached tokens.
    from agent_latency import LatencyCallbackHandler, LLMSettings, Settings, build_chat_model
    from agent_latency.sim import SimulatorConfig, running_simulator

    trimmer = cost_aware(clock)
    handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
    fast = SimulatorConfig(
        overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=5000, prefix_cache=False
    )
    with running_simulator(fast) as sim:
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]))
        chain = trimmer | build_chat_model(settings, max_tokens=2)
        config = {"callbacks": [handler], "configurable": {"thread_id": "t"}}
        for end in (POINTS[12], POINTS[13]):
            clock.now += 5
            list(chain.stream(SCENARIO[:end], config=config))  # type: ignore[arg-type]
    assert trimmer.choose(SCENARIO[: POINTS[14]], key="t").cache_state == "evicted"


@pytest.mark.parametrize(
    ("state", "reported", "ttft_ms", "missed_before", "missed"),
    [
        ("warm", None, 800.0, False, True),  # the first token came as late as a full prefill
        ("warm", None, 200.0, True, False),  # as early as a cache hit: it holds the prompt again
        ("evicted", None, 200.0, True, False),
        ("warm", 1900, 800.0, False, False),  # a report outweighs the clock
        ("warm", None, None, True, True),  # a blocking call: no time, as before
        ("expired", None, 800.0, False, False),  # nothing was expected cached
    ],
)
def test_without_a_report_the_time_to_first_token_is_the_evidence(
    state: CacheState,
    reported: int | None,
    ttft_ms: float | None,
    missed_before: bool,
    missed: bool,
) -> None:
    call = record(state, 2000, missed_before, miss_after_ms=400.0)
    call.report_usage(None if reported is None else 2100, reported, ttft_ms)
    assert call.server_missed() is missed
    too_close = record(state, 2000, missed_before)
    too_close.report_usage(None, None, 800.0)  # predictions too close to tell: no evidence
    assert too_close.server_missed() is missed_before


def test_the_threshold_lies_between_the_predicted_hit_and_miss(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    first, second = replay(trimmer, clock, [POINTS[12], POINTS[13]])
    assert second.option == "append"
    latest = trimmer._conversations.get("c")
    model, size = trimmer.latency_model, second.result.tokens_after
    expected = latest.expected
    assert expected == sum(first.result.sent_message_tokens)  # no tools: the messages sent
    hit, miss = model.predict(size - expected, size), model.predict(size, size)
    assert latest.miss_after_ms is not None and hit < latest.miss_after_ms < miss
    # No prediction without evidence, so no threshold either.
    blind = cost_aware(clock, latency_model=LatencyModel())
    list(replay(blind, clock, [POINTS[12], POINTS[13]], gap=1.0))
    assert blind._conversations.get("c").miss_after_ms is None


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_a_server_silent_about_its_cache_is_judged_by_the_first_tokens_time(
    clock: Clock, prefix_cache: bool
) -> None:
    # As llama-cpp-python streams: no usage. The real ChatOpenAI, the real callback handler.
    from langchain_openai import ChatOpenAI

    from agent_latency import LatencyCallbackHandler
    from agent_latency.sim import SimulatorConfig, running_simulator

    speed = LatencyCoefficients(fixed_ms=50.0, ms_per_token=0.5, ms_per_token_per_ktoken=0.0)
    sim_config = SimulatorConfig(
        overhead_ms=speed.fixed_ms,
        prefill_ms_per_token=speed.ms_per_token,
        attention_ms_per_1k_context=0.0,
        decode_tokens_per_s=5000,
        prefix_cache=prefix_cache,
    )
    trimmer = cost_aware(clock, latency_model=learned(LatencyModel(speed)))
    handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
    with running_simulator(sim_config) as sim:
        model = ChatOpenAI(
            base_url=sim.base_url,
            api_key="sk-test",  # type: ignore[arg-type]
            model=sim.config.models[0],
            max_tokens=2,  # type: ignore[call-arg]
            stream_usage=False,
        )
        chain = trimmer | model
        config = {"callbacks": [handler], "configurable": {"thread_id": "t"}}
        for end in (POINTS[12], POINTS[13]):
            clock.now += 5
            chunks = list(chain.stream(SCENARIO[:end], config=config))  # type: ignore[arg-type]
            assert not any(c.usage_metadata for c in chunks)  # the server said nothing
    latest = trimmer._conversations.get("t")
    assert latest.reported_cached is None and latest.timed_miss is (not prefix_cache)
    expected = "warm" if prefix_cache else "evicted"
    assert trimmer.choose(SCENARIO[: POINTS[14]], key="t").cache_state == expected


def test_the_handler_passes_a_blocking_call_no_time_to_first_token(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A blocking call's first text waits for the whole answer: timed, it would read as a miss.
    from agent_latency import LatencyCallbackHandler, LLMSettings, Settings, build_chat_model
    from agent_latency.sim import SimulatorConfig, running_simulator

    received: list[tuple[int | None, int | None, float | None]] = []
    report = LatestCall.report_usage

    def spy(self: LatestCall, *args: Any) -> None:
        received.append(args)
        report(self, *args)

    monkeypatch.setattr(LatestCall, "report_usage", spy)
    trimmer = cost_aware(clock)
    handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
    fast = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=5000)
    with running_simulator(fast) as sim:
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]))
        config: Any = {"callbacks": [handler], "configurable": {"thread_id": "t"}}
        for streaming in (False, True):
            clock.now += 5
            chain = trimmer | build_chat_model(settings, streaming=streaming, max_tokens=2)
            list(chain.stream(SCENARIO[: POINTS[12]], config=config))
    (blocking, streamed) = received
    assert blocking[0] is not None and blocking[2] is None
    assert streamed[0] is not None and streamed[2] is not None and streamed[2] > 0


def test_a_result_from_decisions_takes_its_counts_from_them() -> None:
    base = PriorityTrimmer(3000, **AGE).trim(SCENARIO[: POINTS[14]])
    kept_all = tuple(
        replace(d, action="kept", rule="fits", tokens_after=d.tokens) for d in base.decisions
    )
    everything = TrimResult.from_decisions(
        base, kept_all, messages=SCENARIO[: POINTS[14]], tokens_after=base.tokens_before
    )
    assert everything.decisions == kept_all
    assert (everything.dropped_messages, everything.shortened_messages) == (0, 0)
    assert everything.sent_message_tokens == base.message_tokens
    assert everything.budget == base.budget and everything.tool_tokens == base.tool_tokens
    assert base.dropped_messages > 0  # the base is untouched
    assert sum(base.sent_message_tokens) + base.framing_tokens == base.tokens_after


def test_no_deep_cut_when_its_budget_cannot_hold_what_no_trim_removes(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    cut = PriorityTrimmer(3000, prefix_stable=True, **AGE).trim(SCENARIO[: POINTS[12]])
    # A deep budget just below the system prompt, the question and the framing.
    shallow = cost_aware(clock)
    too_small = CostAwareTrimmer(
        PriorityTrimmer(3000, prefix_stable=True, **AGE),
        context_window=8192,
        reserve_for_output=2048,
        deep_trimmers=[PriorityTrimmer(cut.fixed_tokens - 1, prefix_stable=True, **AGE)],
        clock=clock,
        latency_model=learned(),
    )
    with caplog.at_level("WARNING", logger="agent_latency"):
        (choice,) = replay(too_small, clock, [POINTS[12]])
    assert choice.option == "cut" and "deep_cut" not in choice.predicted_ms
    assert not choice.result.over_budget
    assert not [r for r in caplog.records if "over budget" in r.getMessage()]
    (deep,) = replay(shallow, clock, [POINTS[12]])  # a deep budget that fits is still tried
    assert "deep_cut" in deep.predicted_ms


# --- the append path is a trim like any other (issue 22: cost-aware, attacked) ------------------


def own_copy(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages as new objects, which a test may edit in place (SCENARIO stays as it is)."""
    return [message.model_copy(deep=True) for message in messages]


def test_a_message_edited_in_place_is_sent_and_counted_as_it_is_now(clock: Clock) -> None:
    # (a) The append matched earlier messages by identity: 5,316 real tokens sent, 368 counted.
    conversation = own_copy(SCENARIO[: POINTS[12]])
    trimmer = cost_aware(clock)
    first = trimmer.choose(conversation[: POINTS[11]], key="c")
    kept = next(d.index for d in first.result.decisions if d.role == "user" and d.action == "kept")
    conversation[kept].content = str(conversation[kept].content) + " more detail" * 1500
    clock.now += 10
    second = trimmer.choose(conversation, key="c")
    assert "append" not in second.predicted_ms  # the prompt the server holds is not this one
    sent = second.result
    assert TokenCounter().count_messages(sent.messages) == sent.tokens_after <= trimmer.hard_limit


def test_a_tool_result_redacted_in_place_is_never_sent_in_its_old_form(clock: Clock) -> None:
    # (a) The previous call sent a shortened copy of the result; the application then removed a
    # password from it. Appending to the previous prompt would send the copy, password and all.
    conversation = own_copy(SCENARIO[: POINTS[12]])
    result = conversation[23]
    assert isinstance(result, ToolMessage)
    result.content = "admin password: hunter2\n" + str(result.content)
    trimmer = cost_aware(clock)
    first = trimmer.choose(conversation[: POINTS[11]], key="c")
    assert first.result.decisions[23].action == "shortened"
    assert any("hunter2" in m.text for m in first.result.messages)
    result.content = str(result.content).replace("hunter2", "[redacted]")
    clock.now += 10
    second = trimmer.choose(conversation, key="c")
    assert not any("hunter2" in m.text for m in second.result.messages)
    assert any("[redacted]" in m.text for m in second.result.messages)


def answered_calls_only(messages: Sequence[BaseMessage]) -> bool:
    """Whether every tool result answers a call of a message before it (or OpenAI says 400)."""
    asked: set[str | None] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            asked.update(call["id"] for call in message.tool_calls)
        if isinstance(message, ToolMessage) and message.tool_call_id not in asked:
            return False
    return True


def test_an_orphan_tool_result_is_dropped_on_append_as_the_plain_trimmer_drops_it(
    clock: Clock,
) -> None:
    # (b) It was sent (OpenAI answers 400), and its decision read kept/within_budget.
    trimmer = cost_aware(clock)
    trimmer.choose(SCENARIO[: POINTS[11]], key="c")
    orphan = ToolMessage("a late result", tool_call_id="call_nobody_made")
    conversation = [*SCENARIO[: POINTS[11]], orphan, *SCENARIO[POINTS[11] : POINTS[12]]]
    clock.now += 10
    choice = trimmer.choose(conversation, key="c")
    assert choice.option == "append"
    assert orphan not in choice.result.messages and answered_calls_only(choice.result.messages)
    decision = choice.result.decisions[POINTS[11]]
    assert (decision.action, decision.rule) == ("dropped", "orphan_tool_result")
    assert choice.result.dropped_messages == sum(
        d.action == "dropped" for d in choice.result.decisions
    )


def test_a_new_result_of_a_call_the_previous_prompt_dropped_rules_the_append_out(
    clock: Clock,
) -> None:
    # Not an orphan in the input (the plain cut keeps it with its call, or drops both), but
    # after the previous prompt, which left its call out, it would be one.
    trimmer = cost_aware(clock)
    first = trimmer.choose(SCENARIO[: POINTS[11]], key="c")
    dropped_call = next(
        m
        for m, d in zip(SCENARIO, first.result.decisions, strict=False)
        if isinstance(m, AIMessage) and m.tool_calls and d.action == "dropped"
    )
    assert isinstance(dropped_call, AIMessage)
    late = ToolMessage("a second answer", tool_call_id=dropped_call.tool_calls[0]["id"])
    clock.now += 10
    choice = trimmer.choose([*SCENARIO[: POINTS[12]], late], key="c")
    assert "append" not in choice.predicted_ms
    assert answered_calls_only(choice.result.messages)


def test_one_eviction_report_under_a_small_budget_is_not_evicted_for_good(clock: Clock) -> None:
    # (c) Under a small budget the shared prefixes are under 1,024 tokens, and such a prefix
    # never counted as evidence of a warm cache: one report of a miss kept it evicted.
    trimmer = CostAwareTrimmer(
        PriorityTrimmer(1500, prefix_stable=True, **AGE),
        context_window=8192,
        reserve_for_output=2048,
        clock=clock,
        latency_model=learned(),
    )
    counter = TokenCounter()
    states, expected, previous, missed = [], [], None, False
    for end in POINTS[10:24]:
        clock.now += 10
        choice = trimmer.choose(SCENARIO[:end], key="c")
        states.append(choice.cache_state)
        expected.append(choice.record.expected)
        sent = choice.result.messages
        shared = 0  # what a perfect prefix cache holds of this prompt
        for message, cached in zip(sent, previous or [], strict=False):
            if message is not cached:
                break
            shared += counter.count_message(message)
        assert choice.result.on_usage is not None
        # The first long enough prefix expected cached is reported missed, then all held.
        miss = not missed and choice.record.expected >= 1024
        missed |= miss
        choice.result.on_usage(choice.result.tokens_after, 0 if miss else shared, None)
        previous = sent
    evicted = states.index("evicted")
    assert expected[evicted - 1] >= 1024  # the miss
    assert expected[evicted] < 1024  # what the next call shares is short, and the server held it
    assert states[evicted + 1] == "warm" and "evicted" not in states[evicted + 1 :]


def test_from_settings_records_a_trim_span_without_a_key() -> None:
    # (d) Its candidate cuts record no spans, and without a key only a candidate cut ran.
    from agent_latency import Settings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trimmer = CostAwareTrimmer.from_settings(Settings(), tracer_provider=provider)
    result = trimmer.trim(SCENARIO)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == semconv.TRIM_SPAN_NAME]
    attributes = span.attributes or {}
    assert attributes[semconv.TRIM_TOKENS_AFTER] == result.tokens_after
    assert semconv.TRIM_OPTION not in attributes  # no conversation: no cost-aware choice


@pytest.mark.parametrize("key", [["thread", 1], {"thread": 1}, {1, 2}])
def test_an_unhashable_key_gets_a_clear_error_naming_it(clock: Clock, key: object) -> None:
    # (e) It raised a raw TypeError from the conversation cache.
    trimmer = cost_aware(clock)
    with pytest.raises(ValueError, match=rf"key must be hashable.*got {type(key).__name__}"):
        trimmer.trim(SCENARIO, key=key)
    with pytest.raises(ValueError, match="key must be hashable"):
        trimmer.choose(SCENARIO, key=key)


# --- what the budget means (issue 22: written once, honoured, reported) ----------------------


def test_an_append_over_the_budget_says_so_and_a_setting_forbids_it(clock: Clock) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    # At 2,500 the appends on this replay run past the budget (at 3,000 they stay under it).
    def at_2500(**options: Any) -> CostAwareTrimmer:
        return cost_aware(clock, 2500, latency_model=slow_prefill(), deep_trimmers=[], **options)

    allowed = at_2500(tracer_provider=provider)
    for end in POINTS[11:]:
        clock.now += 10
        result = allowed.trim(SCENARIO[:end], key="c")
        assert result.on_usage is not None
        result.on_usage(result.tokens_after, result.tokens_after, None)  # all of it cached
    spans = [s.attributes or {} for s in exporter.get_finished_spans()]
    for attributes in spans:
        over = attributes[semconv.TRIM_TOKENS_AFTER] > attributes[semconv.TRIM_EFFECTIVE_BUDGET]
        assert attributes[semconv.TRIM_OVER_BUDGET] is over
        assert attributes[semconv.TRIM_TOKENS_AFTER] <= allowed.hard_limit
    over_budget = [a for a in spans if a[semconv.TRIM_OVER_BUDGET]]
    assert over_budget and {a[semconv.TRIM_OPTION] for a in over_budget} == {"append"}
    assert all("warm cache" in str(a[semconv.TRIM_OVER_BUDGET_CAUSE]) for a in over_budget)
    # The one-word reason the fleet's over-budget alert leaves out (a choice, not a misfit).
    assert {a[semconv.TRIM_OVER_BUDGET_REASON] for a in over_budget} == {"warm_cache_append"}
    assert not any(
        semconv.TRIM_OVER_BUDGET_REASON in a for a in spans if not a[semconv.TRIM_OVER_BUDGET]
    )

    within = at_2500(allow_over_budget_on_warm_cache=False)
    choices = list(replay(within, clock, POINTS[11:], held=True))
    assert all(c.result.tokens_after <= c.result.effective_budget for c in choices)
    assert not any(c.result.over_budget for c in choices)
    assert "append" in {c.option for c in choices}  # it still appends while that fits
    assert "allow_over_budget_on_warm_cache=False" in repr(within)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_the_over_budget_setting_must_be_a_flag(value: object) -> None:
    with pytest.raises(ValueError, match="allow_over_budget_on_warm_cache must be True or False"):
        CostAwareTrimmer(
            PriorityTrimmer(3000, **AGE),
            context_window=8192,
            reserve_for_output=2048,
            allow_over_budget_on_warm_cache=value,  # type: ignore[arg-type]
        )


# --- the record of a conversation, carried as state (issue 22: restarts and replicas) ---------


def test_a_record_carried_as_plain_state_decides_as_the_trimmer_that_made_it(
    clock: Clock,
) -> None:
    # Another replica (or the same one restarted): new message objects, a JSON round trip.
    here, elsewhere = cost_aware(clock), cost_aware(clock)
    decisions = []
    first = here.choose(SCENARIO[: POINTS[11]], key="c")
    state: Any = first.record.to_state()
    for end in POINTS[12:16]:
        clock.now += 10
        restored = convert_to_messages(
            [m.model_dump() for m in SCENARIO[:end]]  # what a checkpointer gives back
        )
        carried = elsewhere.choose_after(
            restored, LatestCall.from_state(json.loads(json.dumps(state)))
        )
        same = here.choose(SCENARIO[:end], key="c")
        decisions.append(carried.option)
        assert (carried.cache_state, carried.option) == (same.cache_state, same.option)
        assert carried.result.tokens_after == same.result.tokens_after
        assert [m.text for m in carried.result.messages] == [m.text for m in same.result.messages]
        assert carried.record.to_state() == {**same.record.to_state(), "at": clock.now}
        state = carried.record.to_state()
    assert "append" in decisions


@pytest.mark.parametrize(
    "state",
    [
        "not a record",
        {"format": 99},
        {"format": 1, "inputs": 2},
        {**{"format": 1}, "actions": [[2, "kept", "no such rule"]]},
    ],
)
def test_an_unreadable_record_is_a_first_call_with_a_warning(
    state: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="agent_latency"):
        assert LatestCall.from_state(state) is None
    assert "taken as its first" in caplog.text
    assert LatestCall.from_state(None) is None


def test_a_record_holds_no_input_message_alive(clock: Clock) -> None:
    import gc
    import weakref

    conversation = own_copy(SCENARIO[: POINTS[11]])
    trimmer = cost_aware(clock)
    choice = trimmer.choose(conversation, key="c")
    kept = next(
        m for m, d in zip(conversation, choice.result.decisions, strict=True) if d.action == "kept"
    )
    gone = weakref.ref(kept)
    del conversation, kept, choice
    gc.collect()
    assert gone() is None  # only the shortened copies it sent are kept


# --- context kept: an append never sends less than the cut; less context must be clearly faster


def plain_cut(end: int) -> TrimResult:
    return PriorityTrimmer(3000, prefix_stable=True, **AGE).trim(SCENARIO[:end])


def test_an_append_sends_at_least_what_the_cut_sends(clock: Clock) -> None:
    trimmer = cost_aware(clock, deep_trimmers=[])
    choices = list(replay(trimmer, clock, POINTS[10:], held=True))
    assert "append" in {c.option for c in choices}
    for choice, end in zip(choices, POINTS[10:], strict=True):
        cut = plain_cut(end)
        for sent, plain in zip(choice.result.decisions, cut.decisions, strict=True):
            assert sent.tokens_after >= plain.tokens_after, (end, sent.index)


def places(*questions: str) -> list[BaseMessage]:
    """Six described places, then the questions (each answered but the last)."""
    messages: list[BaseMessage] = [SystemMessage("You answer about the places described.")]
    for place in ("lighthouse", "glacier", "volcano", "harbour", "orchard", "canyon"):
        description = f"The {place}: " + f"the {place} is old and the {place} is large. " * 40
        messages += [HumanMessage(f"Describe the {place}."), AIMessage(description)]
    for question in questions[:-1]:
        messages += [HumanMessage(question), AIMessage("It is old.")]
    return [*messages, HumanMessage(questions[-1])]


def test_no_append_leaves_out_the_round_a_relevance_cut_keeps_for_the_new_question(
    clock: Clock,
) -> None:
    # The previous prompt kept the lighthouse's round for its question; the next question asks
    # about the volcano, whose round that prompt had left out: appending would not send it.
    relevance = PriorityTrimmer(1200, history_selection="relevance", history_keep_tail=1)
    trimmer = CostAwareTrimmer(
        relevance,
        context_window=8192,
        reserve_for_output=2048,
        clock=clock,
        latency_model=learned(),
    )
    first = trimmer.choose(places("What about the lighthouse?"), key="k")
    assert "Describe the volcano." not in [m.text for m in first.result.messages]
    clock.now += 10
    conversation = places("What about the lighthouse?", "And what about the volcano?")
    second = trimmer.choose(conversation, key="k")
    assert "append" not in second.predicted_ms
    assert second.result.messages == relevance.trim(conversation).messages
    assert "Describe the volcano." in [m.text for m in second.result.messages]


def test_no_prompt_larger_than_the_cut_is_bet_on_a_cache_not_yet_seen_to_hold(
    clock: Clock,
) -> None:
    # Other conversations can evict this one's prompt where it cannot see them (llama.cpp's
    # slots): until the server has held one of its prompts, it sends nothing larger than the cut.
    silent = cost_aware(clock, deep_trimmers=[])
    for choice, end in zip(replay(silent, clock, POINTS[10:20]), POINTS[10:20], strict=True):
        assert choice.result.tokens_after <= plain_cut(end).tokens_after
    holding = cost_aware(Clock(), deep_trimmers=[])
    choices = list(replay(holding, holding._clock, POINTS[10:20], held=True))  # type: ignore[arg-type]
    larger = [
        c
        for c, end in zip(choices, POINTS[10:20], strict=True)
        if c.result.tokens_after > plain_cut(end).tokens_after
    ]
    assert larger and {c.option for c in larger} == {"append"}
    assert choices[-1].record.hits[0] / choices[-1].record.hits[1] > 0.5


@pytest.mark.parametrize(
    ("predicted", "chosen"),
    [
        ({"append": 100.0, "cut": 95.0}, "cut"),  # the append sends at least the cut's
        ({"append": 95.0, "cut": 100.0}, "append"),
        ({"cut": 100.0, "deep_cut": 95.0}, "cut"),  # a deep cut sends less: 10% faster only
        ({"cut": 100.0, "deep_cut": 85.0}, "deep_cut"),
        ({"append": 100.0, "cut": 120.0, "deep_cut": 92.0}, "append"),
    ],
)
def test_a_deep_cut_must_be_predicted_clearly_faster(
    predicted: dict[Any, float], chosen: str
) -> None:
    assert _fastest_keeping_context(predicted) == chosen


def test_deep_cuts_are_opted_into() -> None:
    from agent_latency import Settings
    from agent_latency.trimming import DEEP_CUT_FRACTIONS

    assert CostAwareTrimmer.from_settings(Settings()).deep_trimmers == ()
    opted = CostAwareTrimmer.from_settings(Settings(), deep_cut_fractions=DEEP_CUT_FRACTIONS)
    assert len(opted.deep_trimmers) == len(DEEP_CUT_FRACTIONS)
