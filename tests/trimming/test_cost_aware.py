"""The cost-aware trimmer: cache-state decisions, conversation state, span attributes."""

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_latency import semconv
from agent_latency._latency_model import LatencyModel
from agent_latency.bench._scenario import call_points, load_scenario
from agent_latency.trimming import PriorityTrimmer, TrimResult
from agent_latency.trimming._conversations import CacheState, Conversation, cache_state
from agent_latency.trimming._cost_aware import MIN_OBSERVATIONS, CostAwareTrimmer

SCENARIO = load_scenario()
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


def cost_aware(clock: Clock, **options: object) -> CostAwareTrimmer:
    return CostAwareTrimmer(
        PriorityTrimmer(3000, prefix_stable=True),
        context_window=8192,
        reserve_for_output=2048,
        cache_lifetime_s=300.0,
        clock=clock,
        **{
            "latency_model": learned(),
            "deep_trimmers": [PriorityTrimmer(1500, prefix_stable=True)],
            **options,
        },  # type: ignore[arg-type]
    )


def replay(
    trimmer: CostAwareTrimmer, clock: Clock, points: list[int], gap: float = 10.0
) -> Iterator:
    for end in points:
        clock.now += gap
        yield trimmer.choose(SCENARIO[:end], key="c")


def test_without_a_key_it_is_the_plain_trimmer(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    plain = PriorityTrimmer(3000, prefix_stable=True).trim(SCENARIO)
    assert trimmer.trim(SCENARIO).messages == plain.messages
    assert trimmer.trim(SCENARIO).messages == plain.messages  # nothing remembered


def test_before_enough_evidence_it_sends_the_plain_cut_and_predicts_nothing(clock: Clock) -> None:
    fresh = LatencyModel()
    trimmer = cost_aware(clock, latency_model=fresh)
    plain = PriorityTrimmer(3000, prefix_stable=True)
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


def test_idle_past_the_lifetime_cuts_instead_of_appending(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    list(replay(trimmer, clock, [POINTS[12]]))
    (after_idle,) = replay(trimmer, clock, [POINTS[13]], gap=301.0)
    assert after_idle.cache_state == "expired"
    assert after_idle.option in {"cut", "deep_cut"}
    assert after_idle.predicted_ms[after_idle.option] < after_idle.predicted_ms["append"]
    assert after_idle.result.tokens_after <= trimmer.trimmer.budget


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
    fixed = PriorityTrimmer(3000, prefix_stable=True).trim(SCENARIO[: POINTS[12]]).fixed_tokens
    too_small = PriorityTrimmer(fixed - 1, prefix_stable=True)
    holds = PriorityTrimmer(fixed + 300, prefix_stable=True)
    trimmer = cost_aware(clock, deep_trimmers=[PriorityTrimmer(1500, prefix_stable=True), holds])
    both = cost_aware(clock, deep_trimmers=[too_small, PriorityTrimmer(1500, prefix_stable=True)])
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
    trimmer = cost_aware(clock)
    _, second = replay(trimmer, clock, [POINTS[12], POINTS[13]])
    assert second.option == "append"
    assert second.result.on_usage is not None
    second.result.on_usage(second.result.tokens_after, 0, None)  # the server: none reused
    (third,) = replay(trimmer, clock, [POINTS[14]])
    assert third.cache_state == "evicted"
    # Nothing is assumed cached: appending prefills the whole, larger, prompt and loses.
    assert third.option != "append"
    assert third.predicted_ms[third.option] < third.predicted_ms["append"]


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


@pytest.mark.parametrize(
    ("state", "shared", "reported", "missed_before", "missed"),
    [
        ("warm", 2000, 0, False, True),  # expected 2,000 cached, none reported
        ("warm", 2000, 1900, True, False),  # the cache holds it again
        ("warm", 500, 0, False, False),  # too short to tell (OpenAI caches from 1,024 tokens)
        ("expired", 2000, 0, False, False),  # nothing was expected cached
        ("warm", 2000, None, True, True),  # no report: as before
        ("evicted", 2000, 1900, True, False),
    ],
)
def test_the_evidence_of_one_report(
    state: CacheState, shared: int, reported: int | None, missed_before: bool, missed: bool
) -> None:
    record = Conversation((), 0, (), 0, (), 0.0, 0.0, state, shared, missed_before)
    record.report_usage(shared + 100, reported, None)
    assert record.server_missed() is missed
    assert cache_state(record, 10.0, 300.0) == ("evicted" if missed else "warm")
    assert cache_state(record, 301.0, 300.0) == "expired"
    assert cache_state(None, 0.0, 300.0) == "cold"


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
    record = Conversation((), 0, (), 0, (), 0.0, 0.0, state, 2000, missed_before, 400.0)
    record.report_usage(None if reported is None else 2100, reported, ttft_ms)
    assert record.server_missed() is missed
    too_close = Conversation((), 0, (), 0, (), 0.0, 0.0, state, 2000, missed_before, None)
    too_close.report_usage(None, None, 800.0)  # predictions too close to tell: no evidence
    assert too_close.server_missed() is missed_before


def test_the_threshold_lies_between_the_predicted_hit_and_miss(clock: Clock) -> None:
    trimmer = cost_aware(clock)
    first, second = replay(trimmer, clock, [POINTS[12], POINTS[13]])
    assert second.option == "append"
    record = trimmer._conversations.get("c")
    model, size = trimmer.latency_model, second.result.tokens_after
    shared = record.shared
    assert shared == sum(first.result.sent_message_tokens)
    hit, miss = model.predict(size - shared, size), model.predict(size, size)
    assert record.miss_after_ms is not None and hit < record.miss_after_ms < miss
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
    from agent_latency._latency_model import LatencyCoefficients
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
    record = trimmer._conversations.get("t")
    assert record.reported_cached is None and record.timed_miss is (not prefix_cache)
    expected = "warm" if prefix_cache else "evicted"
    assert trimmer.choose(SCENARIO[: POINTS[14]], key="t").cache_state == expected


def test_the_handler_passes_a_blocking_call_no_time_to_first_token(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A blocking call's first text waits for the whole answer: timed, it would read as a miss.
    from agent_latency import LatencyCallbackHandler, LLMSettings, Settings, build_chat_model
    from agent_latency.sim import SimulatorConfig, running_simulator

    received: list[tuple[int | None, int | None, float | None]] = []
    report = Conversation.report_usage

    def spy(self: Conversation, *args: Any) -> None:
        received.append(args)
        report(self, *args)

    monkeypatch.setattr(Conversation, "report_usage", spy)
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
    from dataclasses import replace

    base = PriorityTrimmer(3000).trim(SCENARIO[: POINTS[14]])
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
    cut = PriorityTrimmer(3000, prefix_stable=True).trim(SCENARIO[: POINTS[12]])
    # A deep budget just below the system prompt, the question and the framing.
    shallow = cost_aware(clock)
    too_small = CostAwareTrimmer(
        PriorityTrimmer(3000, prefix_stable=True),
        context_window=8192,
        reserve_for_output=2048,
        deep_trimmers=[PriorityTrimmer(cut.fixed_tokens - 1, prefix_stable=True)],
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
