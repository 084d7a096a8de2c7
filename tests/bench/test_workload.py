"""The mixed workload, small, on the embedded simulator through the real ChatOpenAI: every
strategy and peer, retention of the planted facts, refused requests, the frontier's points."""

from __future__ import annotations

from dataclasses import replace
from itertools import accumulate
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_latency import LLMSettings, Settings
from agent_latency.bench import (
    MixedWorkload,
    WorkloadProgress,
    run_mixed_workload,
    workload_strategies,
    write_frontier_plot,
)
from agent_latency.bench._contenders import budget_points
from agent_latency.bench._facts import Fact
from agent_latency.bench._mixed import schedule
from agent_latency.bench._scenario import with_cache_salt, without_cache_salt
from agent_latency.bench._workload import (
    _plan_calls,
    _score_answers,
    profile_simulator,
    workload_simulator,
)
from agent_latency.bench._workload_report import StrategyCall, StrategyRun
from agent_latency.sim import SimulatorConfig, running_simulator

FAST_LATENCY = {"overhead_ms": 1, "prefill_ms_per_token": 0.002, "decode_tokens_per_s": 5000}
FAST = SimulatorConfig(**FAST_LATENCY, answer_tokens=4)
# The last three calls of each conversation: two of the last round, and the last question round
# before them (one planted fact asked about).
SMALL = MixedWorkload(conversations=2, calls=3, idle_every=2)


@pytest.fixture(scope="module")
def small_run() -> tuple[dict[str, object], list[WorkloadProgress]]:
    calls: list[WorkloadProgress] = []
    report = run_mixed_workload(SMALL, simulator=FAST, on_call=calls.append)
    return report.to_json(), calls


def test_a_small_mixed_workload_reports_every_strategy_and_peer(
    small_run: tuple[dict[str, object], list[WorkloadProgress]],
) -> None:
    report, calls = small_run
    strategies = list(workload_strategies())
    assert len(calls) == 6 * len(strategies)
    assert calls[-1].done == calls[-1].total == 6 * len(strategies)
    assert any("after an idle gap" in call.step for call in calls)
    assert report["name"] == "mixed"
    entries = report["strategies"]
    assert isinstance(entries, list)
    by_name = {entry["name"]: entry for entry in entries}
    assert list(by_name) == strategies
    for entry in entries:
        assert entry["calls"] == 6
        assert entry["p95_wait_ms"] >= entry["mean_wait_ms"] / 2 > 0
        assert 0 < entry["prefilled_tokens"] <= entry["prompt_tokens"]
        assert entry["invalid_requests"] == entry["refused_requests"] == 0
        assert entry["facts_needed"] == 2  # one question round per conversation
        assert entry["retention"] == entry["facts_kept"] / 2
        assert entry["context_tokens"] == pytest.approx(entry["prompt_tokens"] / 6, abs=0.1)
        assert len(entry["per_call"]) == 6
        assert sum(call["facts_kept"] for call in entry["per_call"]) == entry["facts_kept"]
        assert set(entry["retention_by"]) == {"where", "same_words", "language"}
        # Per call: our count, the server's and its cached tokens (the simulator counts in the
        # model's tokens, as the trimmers do).
        for call in entry["per_call"]:
            assert call["server_tokens"] == call["tokens"] and call["cached_tokens"] is not None
    # Untrimmed, every fact is sent; the last calls exceed the 6,144-token hard limit.
    assert by_name["none"]["retention"] == 1.0
    assert by_name["none"]["hard_limit_violations"] == 6
    assert by_name["context_editing_default"]["hard_limit_violations"] == 6
    # At the default budget (6,000) SummarizationMiddleware never triggers: it counts the state
    # approximately and without the system prompt, under 6,000, while the request is over 9,000.
    assert by_name["summarization"]["hard_limit_violations"] == 6
    assert by_name["summarization"]["retention"] == 1.0
    for name in ("hard_limit", "prefix_stable", "moving_cut", "age_2_4"):
        assert by_name[name]["hard_limit_violations"] == 0
    # The cache-first default recalls by the question's words, scored by BM25: it keeps the
    # returns-desk fact, asked with one word of its statement ("returns"), which the age cut
    # (two head, four tail rounds) loses. The order fact, asked with no word of its statement
    # ("what reference did we get for the new parcel"), only recency keeps: the age cut keeps
    # it, the default does not (the history it sends without recall is under a third of the
    # room), and the recall tool is how an agent gets it back.
    assert by_name["prefix_stable"]["retention_by"]["where"] == {"tool_result": 0.0, "user": 1.0}
    assert by_name["prefix_stable"]["retention"] == 0.5
    assert by_name["age_2_4"]["retention_by"]["where"] == {"tool_result": 1.0, "user": 0.0}
    assert by_name["age_2_4"]["retention"] == 0.5
    assert report["workload"]["hard_limit"] == 8192 - 2048
    assert report["simulator"]["tokenizer"] == Settings().llm.model


def test_the_default_simulator_runs_at_half_its_clock() -> None:
    report = run_mixed_workload(SMALL, only=["prefix_stable"]).to_json()
    (entry,) = report["strategies"]
    assert report["simulator"]["clock_scale"] == 0.5
    assert entry["hard_limit_violations"] == 0 and entry["calls"] == 6


def test_only_runs_the_named_strategies_and_rejects_unknown_ones() -> None:
    with pytest.raises(ValueError, match="unknown strategies"):
        run_mixed_workload(MixedWorkload(conversations=1, calls=1), only=["prefix_stable", "nope"])


def test_schedule_interleaves_conversations_and_marks_idle_turns() -> None:
    workload = MixedWorkload(conversations=2, idle_every=2)
    turns = schedule(workload, [10, 20, 30])
    assert [t.conversation for t in turns[:2]] == [0, 1]
    assert [t.at for t in turns] == sorted(t.at for t in turns)
    idle = [t for t in turns if t.idle]
    assert idle and all(t.end != 10 for t in idle)  # never the first turn


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"conversations": 0}, "conversations"),
        ({"idle_gap_s": 10.0}, "idle_gap_s"),
        ({"budget": 7000}, "budget"),
    ],
)
def test_bad_workloads_name_the_option(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        MixedWorkload(**options)  # type: ignore[arg-type]


def test_a_workload_option_of_the_wrong_type_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="calls"):
        MixedWorkload(calls=True)


def test_on_an_endpoint_it_says_where_it_ran_and_what_the_server_reported() -> None:
    with running_simulator(replace(FAST, tokenizer=Settings().llm.model)) as sim:
        settings = Settings(llm=LLMSettings(model=sim.config.models[0]))
        report = run_mixed_workload(
            MixedWorkload(conversations=1, calls=3, idle_every=2),
            settings=settings,
            base_url=sim.base_url,
            only=["prefix_stable", "trim_messages_exact"],
        ).to_json()
        base_url = sim.base_url
    assert "simulator" not in report
    assert report["endpoint"]["server"] == base_url
    assert [entry["name"] for entry in report["strategies"]] == [
        "prefix_stable",
        "trim_messages_exact",
    ]
    for entry in report["strategies"]:
        assert entry["calls"] == 3
        assert entry["prompt_tokens_counted"] == 0  # the simulator reports usage when streaming
        # The simulator sends llama.cpp's timings: the handler splits the first token.
        assert entry["mean_server_prefill_ms"] is not None
        assert entry["mean_ttft_remainder_ms"] is not None


def test_bad_endpoint_options_are_refused() -> None:
    with pytest.raises(ValueError, match="one of simulator, profile or base_url"):
        run_mixed_workload(simulator=FAST, base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="unknown server profile 'h100'; choose from"):
        run_mixed_workload(profile="h100")


# -- refused requests -----------------------------------------------------------------------------


@pytest.mark.parametrize("on_endpoint", [False, True])
def test_a_request_the_server_refuses_is_recorded_and_the_others_go_on(on_endpoint: bool) -> None:
    # The workload's 8,192-token context window: the untrimmed calls (over 9,000 tokens) get
    # OpenAI's 400 context_length_exceeded; trimmed ones fit.
    small_window = replace(FAST, context_window=8192, tokenizer=Settings().llm.model)
    workload = MixedWorkload(conversations=1, calls=3)
    strategies = ["none", "prefix_stable", "trim_messages_exact"]
    if on_endpoint:
        with running_simulator(small_window) as sim:
            report = run_mixed_workload(
                workload,
                settings=Settings(llm=LLMSettings(model=sim.config.models[0])),
                base_url=sim.base_url,
                only=strategies,
            )
    else:
        report = run_mixed_workload(workload, simulator=small_window, only=strategies)
    by_name = {run.strategy: run for run in report.strategies}
    untrimmed = by_name["none"]
    assert [c.refused is not None for c in untrimmed.calls] == [True, True, True]
    assert untrimmed.mean_wait_ms is None and untrimmed.context_tokens is None
    assert untrimmed.invalid_requests == 3
    assert untrimmed.retention == 0.0  # a refused call delivers none of its facts
    messages = untrimmed.refusals  # each names its own prompt size
    assert len(messages) == 3
    assert all("context length is 8192 tokens" in message for message in messages), messages
    entry = untrimmed.to_json()
    assert entry["refused_requests"] == 3 and entry["refusals"] == messages
    assert entry["per_call"][0]["refused"] == messages[0]
    assert entry["per_call"][0]["wait_ms"] is None
    for name in ("prefix_stable", "trim_messages_exact"):
        assert all(call.refused is None for call in by_name[name].calls), name
        assert by_name[name].mean_wait_ms is not None


def test_on_the_simulator_a_call_past_the_hard_limit_is_refused_where_the_server_would() -> None:
    # Each call reserves the answer's room (max_tokens = reserve_for_output), as a user's
    # settings do: OpenAI-like servers refuse a prompt past the hard limit; llama.cpp only one
    # past the window.
    workload = MixedWorkload(conversations=1, calls=3)
    assert workload_simulator(workload).context_window == workload.context_window == 8192
    hosted, _ = profile_simulator("openai-hosted", workload)
    llama, _ = profile_simulator("llama-cpu", workload)
    assert hosted.window_holds_max_tokens and not llama.window_holds_max_tokens
    report = run_mixed_workload(
        workload,
        simulator=replace(workload_simulator(workload), **FAST_LATENCY),
        only=["none", "hard_limit", "prefix_stable"],
    )
    by_name = {run.strategy: run for run in report.strategies}
    # Untrimmed, the last calls are over 9,000 tokens: past the window itself.
    assert by_name["none"].invalid_requests == 3
    assert "2048 in the completion" in by_name["none"].refusals[0]
    # At the hard limit, prompt + reserve = the window: accepted.
    for name in ("hard_limit", "prefix_stable"):
        assert by_name[name].invalid_requests == 0, by_name[name].refusals


def test_the_cache_salt_counts_against_the_budget() -> None:
    # Every call's prompt starts with a cache salt (its strategy, conversation and epoch); salted
    # after the trim, the hard-limit strategy sent 6,145 and 6,146 tokens and was refused twice.
    workload = MixedWorkload(conversations=2, calls=None)
    report = run_mixed_workload(
        workload,
        simulator=replace(workload_simulator(workload), **FAST_LATENCY),
        only=["hard_limit"],
    )
    (run,) = report.strategies
    assert max(call.tokens for call in run.calls) <= workload.hard_limit
    assert run.invalid_requests == 0, run.refusals


# -- retention accounting -------------------------------------------------------------------------


def strategy_call(
    *, needed: int, kept: int, refused: str | None = None, **fields: object
) -> StrategyCall:
    values: dict[str, object] = {
        "conversation": 0,
        "end": 10,
        "idle": False,
        "wait_ms": None if refused else 100.0,
        "ttft_ms": None if refused else 90.0,
        "tokens": 1000,
        "server_tokens": None if refused else 1010,
        "cached_tokens": None if refused else 500,
        "invalid": False,
        "refused": refused,
        "needed": needed,
        "kept": kept,
    }
    return StrategyCall(**{**values, **fields})  # type: ignore[arg-type]


def test_retention_is_the_share_of_needed_facts_sent_and_calls_needing_none_do_not_count() -> None:
    run = StrategyRun(
        "s",
        {"budget": 3000},
        True,
        (
            strategy_call(needed=0, kept=0),
            strategy_call(needed=1, kept=1),
            strategy_call(needed=1, kept=0),
            strategy_call(needed=1, kept=0, refused="too long", tokens=9000),
            strategy_call(needed=0, kept=0, tokens=7000, server_tokens=7100),
        ),
        hard_limit=6144,
    )
    assert run.retention == pytest.approx(1 / 3)
    assert run.mean_wait_ms == 100.0 and run.context_tokens == pytest.approx((1010 * 3 + 7100) / 4)
    assert run.violations == 2  # the refused 9,000-token request and the 7,100-token one
    assert run.invalid_requests == 1 and run.refusals == ["too long"]
    assert run.answer_accuracy is None  # answers were not asked for
    assert StrategyRun("t", {}, True, (strategy_call(needed=0, kept=0),), 6144).retention is None


def test_answer_accuracy_counts_a_refused_question_as_wrong() -> None:
    calls = (
        strategy_call(needed=1, kept=1, answered=True),
        strategy_call(needed=1, kept=1, answered=False),
        strategy_call(needed=1, kept=0, refused="too long"),
        strategy_call(needed=0, kept=0, answered=None),
    )
    scored = StrategyRun("s", {}, True, calls, 6144, answers=True)
    assert scored.answer_accuracy == pytest.approx(1 / 3)


def test_answers_are_scored_only_for_fact_questions_with_the_option() -> None:
    report = run_mixed_workload(
        MixedWorkload(conversations=1, calls=3), simulator=FAST, only=["none"], answers=True
    )
    (run,) = report.strategies
    scored = [call.answered for call in run.calls]
    # The simulator answers filler: the question's fact is not in it.
    assert scored == [None, False, None] and run.answer_accuracy == 0.0
    assert report.to_json()["answers"] is True
    # The answer is kept beside its score, so that a reader can see why it was wrong.
    answers = [call["answer"] for call in report.to_json()["strategies"][0]["per_call"]]
    assert answers[0] is None and answers[2] is None and answers[1]


def test_answers_are_asked_without_the_cache_salt_and_once_per_prompt_sent() -> None:
    fact = Fact("8443", "The port is 8443.", "Which port?", "8443.", "en", "user", True)
    system = SystemMessage("Rules.")
    question = [HumanMessage("The port is 8443."), AIMessage("Noted."), HumanMessage("Which port?")]
    # Two strategies sent the same prompt under their own markers; a third dropped the fact.
    prompts = [
        without_cache_salt(with_cache_salt([system, *question], "a 0"), "a 0"),
        without_cache_salt(with_cache_salt([system, *question], "b 1"), "b 1"),
        without_cache_salt(with_cache_salt([system, question[-1]], "c 2"), "c 2"),
        None,  # refused, or no question: not asked
    ]
    asked: list[list[BaseMessage]] = []

    def ask(prompt: list[BaseMessage]) -> str | None:
        asked.append(prompt)
        return "Port 8443." if "8443" in str([m.content for m in prompt]) else None

    calls = [strategy_call(needed=1, kept=1, fact=fact) for _ in prompts]
    scored = _score_answers(calls, prompts, ask, {})
    assert [call.answered for call in scored] == [True, True, False, None]
    assert [call.answer for call in scored] == ["Port 8443.", "Port 8443.", None, None]
    # The model saw the user's prompt, not the bench's marker, and the same prompt once.
    assert len(asked) == 2 and asked[0][0].content == "Rules."
    assert asked[0] == [system, *question]


def test_a_turn_s_epoch_counts_the_idle_gaps_its_own_conversation_has_been_through() -> None:
    plan = _plan_calls(SMALL, None)
    assert any(turn.idle for turn in plan.turns) and len(plan.epochs) == len(plan.turns)
    for conversation in range(SMALL.conversations):
        own = [
            (turn.idle, epoch)
            for turn, epoch in zip(plan.turns, plan.epochs, strict=True)
            if turn.conversation == conversation
        ]
        assert [epoch for _, epoch in own] == list(accumulate(int(idle) for idle, _ in own))


def test_without_cache_salt_undoes_with_cache_salt_and_leaves_other_prompts_alone() -> None:
    parts: list[str | dict[str, object]] = [{"type": "text", "text": "Rules."}]
    for first in (SystemMessage("Rules."), SystemMessage(content=parts)):
        prompt = [first, HumanMessage("hi")]
        marked = with_cache_salt(prompt, "x 1")
        assert marked != prompt and without_cache_salt(marked, "x 1") == prompt
        assert without_cache_salt(marked, "y 2") == marked  # another marker: not removed
    assert without_cache_salt([], "x") == []


# -- the frontier ---------------------------------------------------------------------------------


def test_the_frontier_runs_every_point_of_each_knob_and_marks_one_default_per_strategy() -> None:
    workload = MixedWorkload(conversations=1, calls=2)
    strategies = ["none", "prefix_stable", "context_editing_default", "summarization"]
    report = run_mixed_workload(workload, simulator=FAST, only=strategies, frontier=True)
    points = report.frontier_json()
    knobs = {
        name: [entry["knob"] for entry in points if entry["strategy"] == name]
        for name in strategies
    }
    assert budget_points(workload) == [1500, 3000, 4500, 6000]
    assert knobs["none"] == [{}]
    assert knobs["prefix_stable"] == [{"budget": b} for b in (1500, 3000, 4500, 6000)]
    assert knobs["context_editing_default"] == [
        {"trigger": 100_000, "keep": 3},
        *({"trigger": b, "keep": 3} for b in (1500, 3000, 4500, 6000)),
        {"trigger": 6000, "keep": 1},
    ]
    assert len(knobs["summarization"]) == 6
    defaults = {e["strategy"]: e["knob"] for e in points if e["default"]}
    assert defaults == {
        "none": {},
        "prefix_stable": {"budget": 6000},
        "context_editing_default": {"trigger": 100_000, "keep": 3},
        "summarization": {"trigger": 6000, "keep": 20},
    }
    assert sum(e["default"] for e in points) == len(strategies)
    for entry in points:
        assert set(entry) >= {
            "strategy",
            "knob",
            "mean_wait_ms",
            "p95_wait_ms",
            "retention",
            "context_tokens",
            "default",
        }
    # The workload's strategies are the default points, with their retention.
    document = report.to_json()
    assert [(e["name"], e["knob"]) for e in document["strategies"]] == list(defaults.items())
    assert all("retention" in entry for entry in document["strategies"])
    # A larger budget sends more context.
    stable = [e for e in points if e["strategy"] == "prefix_stable"]
    assert [e["context_tokens"] for e in stable] == sorted(e["context_tokens"] for e in stable)


def test_the_frontier_plot_draws_one_panel_per_profile_from_the_json_entries(
    tmp_path: Path,
) -> None:
    entries = [
        {
            "profile": profile,
            "strategy": strategy,
            "knob": {"budget": budget},
            "default": budget == 2,
            "mean_wait_ms": 100.0 * budget,
            "retention": budget / 4,
            "context_tokens": 1000.0 * budget,
        }
        for profile in ("vllm-h100-7b", "llama-cpu", "openai-hosted")
        for strategy in ("prefix_stable", "trim_messages_exact")
        for budget in (1, 2, 3)
    ]
    write_frontier_plot(entries, tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="no frontier entries"):
        write_frontier_plot([], tmp_path / "empty.png")


def test_retention_is_broken_down_by_the_kind_of_fact() -> None:
    user = Fact("24117", "s", "q", "a", "en", "user", same_words=True)
    tool = Fact("QC-1234", "s", "q", "a", "zh", "tool_result", same_words=False)
    run = StrategyRun(
        "s",
        {},
        True,
        (
            strategy_call(needed=1, kept=1, fact=user),
            strategy_call(needed=1, kept=0, fact=tool),
            strategy_call(needed=1, kept=1, fact=tool),
            strategy_call(needed=0, kept=0),
        ),
        6144,
    )
    assert run.retention_by() == {
        "where": {"tool_result": 0.5, "user": 1.0},
        "same_words": {"false": 0.5, "true": 1.0},
        "language": {"en": 1.0, "zh": 0.5},
    }
    entry = run.to_json()
    assert entry["retention_by"] == run.retention_by()
    assert entry["per_call"][1]["fact"] == {
        "value": "QC-1234",
        "where": "tool_result",
        "language": "zh",
        "same_words": False,
    }
    assert entry["per_call"][3]["fact"] is None


def test_an_untimed_warm_up_call_comes_before_the_first_strategys_calls() -> None:
    # The simulator's first request loads its tokenizer and tokenises every message (2.6 s on
    # the shipped scenario); it fell on the first strategy's first call (`none`'s mean wait).
    with running_simulator(replace(FAST, tokenizer=Settings().llm.model)) as sim:
        report = run_mixed_workload(
            MixedWorkload(conversations=1, calls=2),
            settings=Settings(llm=LLMSettings(model=sim.config.models[0])),
            base_url=sim.base_url,
            only=["none"],
        )
        served = sim.stats
    (run,) = report.strategies
    assert len(run.calls) == 2
    assert served.requests == 1 + 2  # the warm-up, then the two timed calls
    # The warm-up sent the longest prompt: as long as the last call's, give or take its marker.
    warm_up = served.prompt_tokens - sum(call.tokens for call in run.calls)
    assert abs(warm_up - run.calls[-1].tokens) < 10
