"""prompt.mode in the settings files chooses the trimmer: trimmer_from_settings and
TrimmingMiddleware.from_settings build it; a bad mode is refused naming the key."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from support.fakes import ToolCallingFake

from agent_latency import ConfigError, PromptSettings, Settings, load_settings
from agent_latency.trimming import (
    CostAwareTrimmer,
    PriorityTrimmer,
    TrimmingMiddleware,
    trimmer_from_settings,
)

pytestmark = pytest.mark.usefixtures("clean_environment")


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}: " + "record " * 500


def test_both_files_select_the_mode_and_the_default_is_prefix_stable(tmp_path: Path) -> None:
    # Outside the working directory, where load_settings() would find them by default.
    (tmp_path / "files").mkdir()
    config = tmp_path / "files" / "config.toml"
    config.write_text('[llm.prompt]\nmode = "moving_cut"\n', encoding="utf-8")
    settings = tmp_path / "files" / "settings.json"
    settings.write_text('{"promptTrimmer": {"mode": "cost_aware"}}', encoding="utf-8")
    assert load_settings().prompt.mode == "prefix_stable"
    assert load_settings(config).prompt.mode == "moving_cut"
    assert load_settings(None, settings).prompt.mode == "cost_aware"


@pytest.mark.parametrize(
    ("mode", "kind", "prefix_stable"),
    [
        ("prefix_stable", PriorityTrimmer, True),
        ("moving_cut", PriorityTrimmer, False),
        ("cost_aware", CostAwareTrimmer, True),
    ],
)
def test_the_factory_builds_the_trimmer_of_the_mode(
    mode: str, kind: type, prefix_stable: bool
) -> None:
    settings = Settings(prompt=PromptSettings(mode=mode, token_budget=1200))  # type: ignore[arg-type]
    trimmer = trimmer_from_settings(settings)
    assert type(trimmer) is kind
    plain = trimmer.trimmer if isinstance(trimmer, CostAwareTrimmer) else trimmer
    assert plain.prefix_stable is prefix_stable and plain.budget == 1200
    # Options win over the settings.
    again = trimmer_from_settings(settings, budget=900)
    assert (again.trimmer if isinstance(again, CostAwareTrimmer) else again).budget == 900


def test_both_files_can_forbid_cost_aware_appends_past_the_budget(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[llm.prompt]\nmode = "cost_aware"\nallow_over_budget_on_warm_cache = false\n',
        encoding="utf-8",
    )
    settings = tmp_path / "settings.json"
    settings.write_text(
        '{"promptTrimmer": {"mode": "cost_aware", "allowOverBudgetOnWarmCache": false}}',
        encoding="utf-8",
    )
    for loaded in (load_settings(config), load_settings(None, settings)):
        trimmer = trimmer_from_settings(loaded)
        assert isinstance(trimmer, CostAwareTrimmer)
        assert trimmer.allow_over_budget_on_warm_cache is False
        # An option given in code still wins over the files.
        again = trimmer_from_settings(loaded, allow_over_budget_on_warm_cache=True)
        assert again.allow_over_budget_on_warm_cache is True  # type: ignore[union-attr]
    assert (
        trimmer_from_settings(  # the default: appends may pass the budget, never the limit
            Settings(prompt=PromptSettings(mode="cost_aware"))
        ).allow_over_budget_on_warm_cache
        is True
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"promptTrimmer": {"mode": "fastest"}}', "promptTrimmer.mode"),
        ('{"promptTrimmer": {"mode": 1}}', "promptTrimmer.mode"),
        ('{"promptTrimmer": {"defaultBudget": 1000000000}}', "promptTrimmer.defaultBudget"),
        (
            '{"promptTrimmer": {"allowOverBudgetOnWarmCache": "no"}}',
            "promptTrimmer.allowOverBudgetOnWarmCache",
        ),
    ],
)
def test_a_bad_mode_or_budget_is_refused_naming_the_key(
    tmp_path: Path, text: str, named: str
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(None, settings)
    message = str(caught.value)
    assert named in message and "settings.json" in message and "Fix" in message, message


def test_the_middleware_from_cost_aware_settings_keeps_its_record_in_the_agents_state() -> None:
    settings = Settings(prompt=PromptSettings(mode="cost_aware", token_budget=800))
    middleware = TrimmingMiddleware.from_settings(settings, tool_budget=300)
    assert isinstance(middleware.trimmer, CostAwareTrimmer)
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "x"}, "id": "call_1"}])
    model = ToolCallingFake(messages=itertools.cycle([call, AIMessage("done")]))
    agent = create_agent(
        model, tools=[lookup], middleware=[middleware], checkpointer=InMemorySaver()
    )
    config: dict[str, object] = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("look x up")]}, config)
    state = agent.get_state(config).values
    assert state["agent_latency_latest_call"] is not None  # the conversation's record
    assert state["messages"][-1].content == "done"
    plain = TrimmingMiddleware.from_settings(Settings())
    assert isinstance(plain.trimmer, PriorityTrimmer) and plain.trimmer.prefix_stable
