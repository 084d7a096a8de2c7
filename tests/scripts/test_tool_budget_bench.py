"""``scripts/tool_budget_bench.py`` on a tiny configuration: what it measures holds together.

The TTFT figures are the bench's (printed, never asserted here); this checks the structural
facts behind them on a zero-latency simulator: the tool budget sends fewer prompt tokens, the
kept tool list changes neither inside a turn nor at a follow-up question, the tools called stay
kept, and both modes hold the same conversation.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from support.scripts import benchmark_script

from agent_latency.sim import SimulatorConfig

INSTANT = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, attention_ms_per_1k_context=0, decode_tokens_per_s=5000
)


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with benchmark_script("tool_budget_bench") as module:
        yield module


def test_the_catalogue_is_forty_distinct_tools_of_several_thousand_tokens(
    bench: ModuleType,
) -> None:
    tools = bench.agent_tools()
    assert len({tool.name for tool in tools}) == len(tools) == 40
    assert bench.TokenCounter().count_tools(tools) > 4000


def test_a_tool_budget_sends_fewer_tokens_and_keeps_its_tool_list_within_a_turn(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    setups = bench.main(["--conversations", "2", "--turns", "2"], simulator=INSTANT)

    assert list(setups) == ["simulator, prefix cache on (default)", "simulator, prefix cache off"]
    for full, trimmed in setups.values():
        assert (full.calls, trimmed.calls) == (8, 8)  # a tool call and an answer per turn
        assert full.tools_sent == 40 and trimmed.tools_sent < 40
        assert trimmed.prompt_tokens < full.prompt_tokens  # the server's own count
        # Our rendering (behind the prefix-reuse share) is what the simulator counted.
        for summary in (full, trimmed):
            rendered = summary.tool_tokens + summary.message_tokens
            assert rendered == pytest.approx(summary.prompt_tokens)
        assert (full.changes_within_turn, full.changes_at_new_turn) == (0, 0)
        assert trimmed.changes_within_turn == 0
        # Each conversation's second turn follows up on its first: the kept tools serve it.
        assert trimmed.new_turns == 2 and trimmed.changes_at_follow_up == 0
        assert trimmed.called_tools_kept
        # Each turn's question names one tool, and both modes called the same ones.
        assert [len(called) for called in full.called[::2]] == [1] * 4
        assert trimmed.called == full.called
    cache_on, cache_off = setups.values()
    assert cache_on[0].server_cached_share > 0 and cache_off[0].server_cached_share == 0
    output = capsys.readouterr().out
    assert output.count("same tool calls: yes; called tools kept: yes") == 2
