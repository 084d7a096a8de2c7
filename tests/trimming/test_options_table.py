"""The trimmer's options follow the settings' declarations (issue 30, item 1).

``TrimOptions`` is the trimmer's options table and ``TrimmerOptions`` types its keywords; an
option a setting also sets takes its default and its check from that setting's declaration, and
``from_settings`` passes every such setting on. No mirror properties: ``trimmer.options``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from agent_latency import ConfigError, load_settings
from agent_latency.config import SETTINGS, PromptSettings, Settings
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._options import (
    DEFAULTS,
    FROM_SETTINGS,
    TrimmerOptions,
    TrimOptions,
    settings_options,
)


def test_the_trimmer_keywords_are_the_options_table() -> None:
    """``TrimmerOptions`` (the typed ``**options``) and ``TrimOptions`` name the same options."""
    keywords = list(TrimmerOptions.__annotations__)
    assert ["budget", *keywords] == [field.name for field in dataclasses.fields(TrimOptions)]


def test_each_option_a_setting_sets_has_the_settings_default() -> None:
    assert sorted(FROM_SETTINGS) == sorted(
        each.declared.trimmer for each in SETTINGS if each.declared.trimmer
    )
    for name, declared in FROM_SETTINGS.items():
        assert getattr(DEFAULTS, name) == declared.default, name


def test_from_settings_passes_every_declared_option() -> None:
    prompt = PromptSettings(
        token_budget=900,
        keep_system=False,
        keep_latest_user=False,
        priority_order=("history", "tool_result", "latest_user", "system"),
        history_keep_head=3,
        history_keep_tail=5,
        history_selection="age",
        compact_tool_results=True,
        mode="moving_cut",
    )
    trimmer = PriorityTrimmer.from_settings(Settings(prompt=prompt), token_counter=TokenCounter())
    for name, declared in FROM_SETTINGS.items():
        assert getattr(trimmer.options, name) == getattr(prompt, declared.name), name
    assert trimmer.options.prefix_stable is False
    assert settings_options(PromptSettings())["prefix_stable"] is True


# --- one check, two messages --------------------------------------------------------------------

BAD_VALUES: dict[str, tuple[object, str]] = {
    # option: (a value of the right kind that breaks the rule, how a file writes it)
    "budget": (0, "0"),
    "priority_order": (("system", "history"), '["system", "history"]'),
    "history_keep_head": (-1, "-1"),
    "history_keep_tail": (10**7, "10000000"),
    "history_selection": ("newest", '"newest"'),
}


@pytest.mark.parametrize("option", sorted(BAD_VALUES))
def test_the_trimmer_and_the_loader_refuse_a_value_by_the_same_rule(
    option: str, tmp_path: Path
) -> None:
    declared = FROM_SETTINGS[option]
    value, written = BAD_VALUES[option]
    with pytest.raises(ValueError) as in_code:
        PriorityTrimmer(**{option: value})  # type: ignore[arg-type]
    assert str(in_code.value) == (
        f"PriorityTrimmer: {option} {declared.requirement}, got {value!r}."
    )
    key = declared.declared.json
    assert key is not None
    section, name = key.split(".")
    path = tmp_path / "settings.json"
    path.write_text(f'{{"{section}": {{"{name}": {written}}}}}', encoding="utf-8")
    with pytest.raises(ConfigError) as in_file:
        load_settings(None, path)
    assert str(in_file.value).endswith(f"Fix: it {declared.requirement}.")
    assert str(in_file.value).startswith(f"{path}: {key}: ")


def test_a_removed_value_gets_the_fix_in_code_that_a_file_naming_it_gets(tmp_path: Path) -> None:
    """``history_selection="relevance"`` was removed: the keyword says why and what to set, as
    the settings file does, not only which values are accepted."""
    path = tmp_path / "settings.json"
    path.write_text('{"promptTrimmer": {"historySelection": "relevance"}}', encoding="utf-8")
    with pytest.raises(ConfigError) as in_file:
        load_settings(None, path)
    why_and_fix = str(in_file.value).split("'relevance' was removed", 1)[1]
    why, fix = why_and_fix.split(" Fix: set promptTrimmer.historySelection to ")

    in_code = (
        f"^PriorityTrimmer: history_selection 'relevance' was removed{re.escape(why)} "
        f"Fix: set history_selection to {re.escape(fix)}$"
    )
    assert fix.startswith('"cache_first", the default')
    with pytest.raises(ValueError, match=in_code):
        PriorityTrimmer(1000, history_selection="relevance")  # type: ignore[arg-type]
    # Settings built in code reach the same check through from_settings.
    settings = Settings(prompt=PromptSettings(history_selection="relevance"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=in_code):
        PriorityTrimmer.from_settings(settings, token_counter=TokenCounter())


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"budget": True}, TypeError, "PriorityTrimmer: budget must be an integer, got True."),
        (
            {"keep_system": "yes"},
            TypeError,
            "PriorityTrimmer: keep_system must be True or False, got 'yes'.",
        ),
        (
            {"priority_order": "system"},
            TypeError,
            "PriorityTrimmer: priority_order must be a list, got",
        ),
        (
            {"priority_order": [1, 2, 3, 4]},
            ValueError,
            "PriorityTrimmer: priority_order must list each of",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_is_named_with_the_kind(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    """A value of the wrong type is a TypeError, a list of the wrong values a ValueError."""
    with pytest.raises(error, match=f"^{message}"):
        PriorityTrimmer(**options)  # type: ignore[arg-type]


def test_an_unknown_option_is_refused_up_front_with_the_closest_one() -> None:
    with pytest.raises(TypeError) as caught:
        PriorityTrimmer(1000, histroy_keep_head=2)  # type: ignore[call-arg]
    assert str(caught.value).startswith(
        "PriorityTrimmer: unknown option 'histroy_keep_head'. Fix: did you mean "
        "'history_keep_head'? The options: budget, priority_order, "
    )


def test_the_keyword_defaults_are_unchanged() -> None:
    """``PriorityTrimmer()`` has the options it had with an explicit signature."""
    options = PriorityTrimmer(token_counter=TokenCounter()).options
    assert dataclasses.replace(options, token_counter=None) == DEFAULTS
    assert (DEFAULTS.budget, DEFAULTS.priority_order, DEFAULTS.keep_system) == (
        6000,
        ("system", "latest_user", "tool_result", "history"),
        True,
    )
    assert (DEFAULTS.history_keep_head, DEFAULTS.history_keep_tail) == (1, 1)
    assert (DEFAULTS.history_selection, DEFAULTS.compact_tool_results) == ("cache_first", False)
    assert (DEFAULTS.tool_result_cap, DEFAULTS.prefix_stable, DEFAULTS.step_tokens) == (
        1500,
        True,
        1500,
    )
    assert (DEFAULTS.tools, DEFAULTS.tool_budget, DEFAULTS.pinned_tools) == ((), None, frozenset())


def test_a_declared_option_reaches_the_trimmer_through_settings(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"promptTrimmer": {"compactToolResults": true}}', encoding="utf-8")
    settings = load_settings(None, path)
    trimmer = PriorityTrimmer.from_settings(settings, token_counter=TokenCounter())
    assert trimmer.options.compact_tool_results is True
