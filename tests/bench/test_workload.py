"""The mixed workload, small, on the embedded simulator through the real ChatOpenAI."""

import pytest

from agent_latency.bench._workload import (
    MixedWorkload,
    run_mixed_workload,
    schedule,
    workload_table,
)

STRATEGIES = [
    "none",
    "hard_limit",
    "moving_cut",
    "prefix_stable",
    "cost_aware",
    "trim_messages_approximate",
    "trim_messages_exact",
    "context_editing_default",
    "context_editing_exact",
    "summarization",
]


def test_a_small_mixed_workload_reports_every_strategy_and_peer() -> None:
    calls: list[str] = []
    report = run_mixed_workload(
        MixedWorkload(conversations=2, calls=2, idle_every=2), on_call=calls.append
    )
    assert len(calls) == 4 * len(STRATEGIES)
    assert any("after an idle gap" in call for call in calls)
    assert report["name"] == "mixed"
    by_name = {entry["name"]: entry for entry in report["strategies"]}
    assert list(by_name) == STRATEGIES
    for entry in report["strategies"]:
        assert entry["calls"] == 4
        assert entry["p95_ttft_ms"] >= entry["mean_ttft_ms"] / 2 > 0
        assert 0 < entry["prefilled_tokens"] <= entry["prompt_tokens"]
        assert entry["invalid_requests"] == 0
    # The last calls of the scenario exceed the 6,144-token hard limit untrimmed.
    assert by_name["none"]["hard_limit_violations"] == 4
    assert by_name["context_editing_default"]["hard_limit_violations"] == 4
    for name in ("hard_limit", "moving_cut", "prefix_stable", "cost_aware", "summarization"):
        assert by_name[name]["hard_limit_violations"] == 0
    assert report["workload"]["hard_limit"] == 8192 - 2048
    # Doctor's probes taught the cost-aware trimmer the simulator's speed: from its first (cold)
    # calls it predicts, and cuts deeper than the plain trimmer.
    assert report["simulator"]["latency_probes"] == 4
    assert by_name["cost_aware"]["prompt_tokens"] < by_name["prefix_stable"]["prompt_tokens"]
    table = workload_table(report).splitlines()
    assert [row.split()[0] for row in table[1:-1]] == STRATEGIES


def test_only_runs_the_named_strategies_and_rejects_unknown_ones() -> None:
    with pytest.raises(ValueError, match="unknown strategies"):
        run_mixed_workload(MixedWorkload(conversations=1, calls=1), only=["cost_aware", "nope"])


def test_schedule_interleaves_conversations_and_marks_idle_turns() -> None:
    workload = MixedWorkload(conversations=2, idle_every=2)
    turns = schedule(workload, [10, 20, 30])
    assert [t.conversation for t in turns[:2]] == [0, 1]
    assert [t.at for t in turns] == sorted(t.at for t in turns)
    idle = [t for t in turns if t.idle]
    assert idle and all(t.end != 10 for t in idle)  # never the first turn


@pytest.mark.parametrize(
    ("options", "named"),
    [({"conversations": 0}, "conversations"), ({"idle_gap_s": 10.0}, "idle_gap_s")],
)
def test_bad_workloads_name_the_option(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        MixedWorkload(**options)  # type: ignore[arg-type]


def test_on_an_endpoint_it_says_where_it_ran_and_what_the_server_reported() -> None:
    from agent_latency import LLMSettings, Settings
    from agent_latency.sim import SimulatorConfig, running_simulator

    fast = SimulatorConfig(overhead_ms=2, prefill_ms_per_token=0.01, decode_tokens_per_s=5000)
    with running_simulator(fast) as sim:
        settings = Settings(llm=LLMSettings(model=sim.config.models[0]))
        report = run_mixed_workload(
            MixedWorkload(conversations=1, calls=3, idle_every=2),
            settings=settings,
            base_url=sim.base_url,
            only=["prefix_stable", "cost_aware"],
        )
        base_url = sim.base_url
    assert "simulator" not in report
    assert report["endpoint"]["server"] == base_url
    assert report["endpoint"]["latency_probes"] == 4  # doctor's probes seeded the cost model
    assert [entry["name"] for entry in report["strategies"]] == ["prefix_stable", "cost_aware"]
    for entry in report["strategies"]:
        assert entry["calls"] == 3
        assert entry["prompt_tokens_counted"] == 0  # the simulator reports usage when streaming
    assert f"at {base_url}" in workload_table(report)


def test_a_stream_without_usage_reports_no_counts() -> None:
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    from agent_latency.bench._workload import _stream
    from agent_latency.sim import SimulatorConfig, running_simulator

    with running_simulator(SimulatorConfig(overhead_ms=1, decode_tokens_per_s=5000)) as sim:
        model = ChatOpenAI(
            model=sim.config.models[0], base_url=sim.base_url, api_key="none", max_tokens=2
        )
        ttft, prompt, cached = _stream(model, [HumanMessage("hello")])
        assert ttft > 0 and prompt is None and cached is None
        with_usage = model.model_copy(update={"stream_usage": True})
        _, prompt, cached = _stream(with_usage, [HumanMessage("hello")])
        assert prompt and cached == 0


def test_bad_endpoint_options_are_refused() -> None:
    from agent_latency.sim import SimulatorConfig

    with pytest.raises(ValueError, match="not both"):
        run_mixed_workload(simulator=SimulatorConfig(), base_url="http://127.0.0.1:1/v1")
