"""prompt.mode in the settings files chooses the trimmer: trimmer_from_settings and
TrimmingMiddleware.from_settings build it; a bad mode is refused naming the key, and the removed
cost_aware mode and its setting get their fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.tools import tool

from agent_latency import ConfigError, PromptSettings, Settings, load_settings
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware, trimmer_from_settings

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
    settings.write_text('{"promptTrimmer": {"mode": "moving_cut"}}', encoding="utf-8")
    assert load_settings().prompt.mode == "prefix_stable"
    assert load_settings(config).prompt.mode == "moving_cut"
    assert load_settings(None, settings).prompt.mode == "moving_cut"


@pytest.mark.parametrize(
    ("mode", "prefix_stable"), [("prefix_stable", True), ("moving_cut", False)]
)
def test_the_factory_builds_the_trimmer_of_the_mode(mode: str, prefix_stable: bool) -> None:
    settings = Settings(prompt=PromptSettings(mode=mode, token_budget=1200))  # type: ignore[arg-type]
    trimmer = trimmer_from_settings(settings)
    assert type(trimmer) is PriorityTrimmer
    assert trimmer.options.prefix_stable is prefix_stable and trimmer.options.budget == 1200
    # Options win over the settings.
    assert trimmer_from_settings(settings, budget=900).options.budget == 900


@pytest.mark.parametrize(
    ("file", "text", "key"),
    [
        ("config.toml", '[llm.prompt]\nmode = "cost_aware"\n', "llm.prompt.mode"),
        ("settings.json", '{"promptTrimmer": {"mode": "cost_aware"}}', "promptTrimmer.mode"),
    ],
)
def test_the_removed_cost_aware_mode_gets_one_line_naming_the_key_and_the_fix(
    tmp_path: Path, file: str, text: str, key: str
) -> None:
    path = tmp_path / file
    line = _the_one_error_line(path, text)
    assert line.startswith(f"{path}: {key}: 'cost_aware' was removed"), line
    assert f'Fix: set {key} to "prefix_stable", the default, which now cuts cache-first' in line


@pytest.mark.parametrize(
    ("file", "text", "key"),
    [
        (
            "config.toml",
            "[llm.prompt]\nallow_over_budget_on_warm_cache = false\n",
            "llm.prompt.allow_over_budget_on_warm_cache",
        ),
        (
            "settings.json",
            '{"promptTrimmer": {"allowOverBudgetOnWarmCache": false}}',
            "promptTrimmer.allowOverBudgetOnWarmCache",
        ),
    ],
)
def test_the_removed_modes_setting_is_an_unknown_key_to_delete(
    tmp_path: Path, file: str, text: str, key: str
) -> None:
    path = tmp_path / file
    line = _the_one_error_line(path, text)
    assert f"{key}: unknown key. Fix: delete it: it went with the removed cost_aware" in line


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"promptTrimmer": {"mode": "fastest"}}', "promptTrimmer.mode"),
        ('{"promptTrimmer": {"mode": 1}}', "promptTrimmer.mode"),
        ('{"promptTrimmer": {"defaultBudget": 1000000000}}', "promptTrimmer.defaultBudget"),
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


def test_the_middleware_from_default_settings_trims_prefix_stable() -> None:
    plain = TrimmingMiddleware.from_settings(Settings())
    assert isinstance(plain.trimmer, PriorityTrimmer) and plain.trimmer.options.prefix_stable


def _the_one_error_line(path: Path, text: str) -> str:
    """The error loading ``text`` as ``path`` (a config.toml or a settings.json) raises, which
    must be one line."""
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path) if path.name == "config.toml" else load_settings(None, path)
    (line,) = str(caught.value).splitlines()
    return line
