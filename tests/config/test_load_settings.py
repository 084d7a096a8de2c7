"""Tests for load_settings: the two files, the defaults, the environment and every ConfigError."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from agent_latency.config import (
    ConfigError,
    LLMSettings,
    MetricsSettings,
    PromptSettings,
    Settings,
    StreamingSettings,
    load_settings,
    with_channel_overrides,
)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-test-8d1f0c2e-do-not-print"

# The values examples/config.toml and examples/settings.json hold.
EXAMPLE_SETTINGS = Settings(
    llm=LLMSettings(
        base_url="https://api.example.com/v1",
        api_key=SecretStr("sk-your-key"),
        model="qwen-7b-chat",
        timeout_seconds=60,
        context_window=None,
        max_tokens_param="auto",
    ),
    streaming=StreamingSettings(
        enabled=True, chunk_timeout_ms=800, temperature=0.1, max_tokens=2048, record_ttft=True
    ),
    prompt=PromptSettings(
        token_budget=6000,
        reserve_for_output=2000,
        keep_system=True,
        keep_latest_user=True,
        priority_order=("system", "latest_user", "tool_result", "history"),
        history_keep_head=2,
        history_keep_tail=4,
    ),
    metrics=MetricsSettings(ttft_warn_ms=1200, ttft_error_ms=2500, log_every_request=True),
)


pytestmark = pytest.mark.usefixtures("clean_environment")


def _load(
    tmp_path: Path, toml: str | None = None, json_text: str | None = None
) -> tuple[Settings, Path, Path]:
    """Writes the given files under tmp_path and loads them explicitly."""
    config, settings = tmp_path / "cfg" / "config.toml", tmp_path / "cfg" / "settings.json"
    config.parent.mkdir(exist_ok=True)
    if toml is not None:
        config.write_text(toml, encoding="utf-8")
    if json_text is not None:
        settings.write_text(json_text, encoding="utf-8")
    loaded = load_settings(
        config if toml is not None else None, settings if json_text is not None else None
    )
    return loaded, config, settings


def _config_error(tmp_path: Path, toml: str | None = None, json_text: str | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, toml, json_text)
    message = str(caught.value)
    assert "Fix" in message
    assert "\n" not in message  # one line, as the CLI prints it
    return message


# --- Round trip, defaults and files from the working directory -------------------------------


def test_examples_round_trip_to_the_values_of_the_issue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)

    settings = load_settings("examples/config.toml", "examples/settings.json")

    assert dataclasses.replace(settings, sources=(), warnings=()) == EXAMPLE_SETTINGS
    assert settings.llm.api_key is not None
    assert settings.llm.api_key.get_secret_value() == "sk-your-key"
    assert settings.sources == ("examples/config.toml", "examples/settings.json")
    assert settings.warnings == ()
    assert "sk-your-key" not in repr(settings)
    assert "sk-your-key" not in str(settings)


def test_defaults_are_the_values_of_the_issue_without_channel() -> None:
    no_channel = dataclasses.replace(EXAMPLE_SETTINGS.llm, base_url=None, api_key=None)
    # The defaults that differ from the issue's files: 2048 would not fit the reserve, and the
    # history is cut cache-first, keeping one head and one tail round at a cut.
    answer_fits = dataclasses.replace(EXAMPLE_SETTINGS.streaming, max_tokens=2000)
    frontier = dataclasses.replace(
        EXAMPLE_SETTINGS.prompt,
        history_keep_head=1,
        history_keep_tail=1,
        history_selection="cache_first",
    )

    assert Settings() == dataclasses.replace(
        EXAMPLE_SETTINGS, llm=no_channel, streaming=answer_fits, prompt=frontier
    )


def test_the_default_answer_fits_the_default_reserve() -> None:
    defaults = Settings()

    assert defaults.streaming.max_tokens <= defaults.prompt.reserve_for_output


def test_no_path_and_no_files_gives_the_defaults() -> None:
    assert load_settings() == Settings()


def test_no_path_reads_both_files_from_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[llm]\nmodel = "from-cwd"\n', encoding="utf-8")
    (tmp_path / "settings.json").write_text('{"metrics": {"ttftWarnMs": 900}}', encoding="utf-8")

    settings = load_settings()

    assert settings.llm.model == "from-cwd"
    assert settings.metrics.ttft_warn_ms == 900
    assert [Path(source).name for source in settings.sources] == ["config.toml", "settings.json"]


def test_no_path_reads_the_one_file_present(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"streaming": {"maxTokens": 77}}', encoding="utf-8")

    settings = load_settings()

    assert settings.streaming.max_tokens == 77
    assert settings.llm == LLMSettings()


def test_settings_are_immutable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    settings = load_settings("examples/config.toml", "examples/settings.json")

    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.llm.model = "other"
    assert isinstance(settings.prompt.priority_order, tuple)


def test_files_that_agree_on_shared_values_load(tmp_path: Path) -> None:
    settings, _, _ = _load(
        tmp_path,
        "[llm.prompt]\ntoken_budget = 5000\n[llm.streaming]\nenabled = false\n"
        "first_token_warn_ms = 1000\n",
        '{"promptTrimmer": {"defaultBudget": 5000}, "streaming": {"enabled": false},'
        ' "metrics": {"ttftWarnMs": 1000}}',
    )

    assert settings.prompt.token_budget == 5000
    assert settings.streaming.enabled is False
    assert settings.metrics.ttft_warn_ms == 1000


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    settings, _, _ = _load(
        tmp_path, '\ufeff[llm]\nmodel = "bom"\n', '\ufeff{"streaming": {"maxTokens": 5}}'
    )

    assert (settings.llm.model, settings.streaming.max_tokens) == ("bom", 5)


# --- Environment -----------------------------------------------------------------------------

FILE_WITH_CHANNEL = (
    '[llm]\nbase_url = "https://file.example.com/v1"\n'
    'api_key = "sk-from-file"\nmodel = "file-model"\n'
)


def test_environment_overrides_base_url_key_and_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_LATENCY_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", SECRET)
    monkeypatch.setenv("AGENT_LATENCY_MODEL", "env-model")

    settings, _, _ = _load(tmp_path, FILE_WITH_CHANNEL)

    assert settings.llm.base_url == "http://127.0.0.1:8000/v1"
    assert settings.llm.api_key == SecretStr(SECRET)
    assert settings.llm.model == "env-model"
    assert SECRET not in repr(settings)


def test_file_values_stay_without_environment(tmp_path: Path) -> None:
    settings, _, _ = _load(tmp_path, FILE_WITH_CHANNEL)

    assert settings.llm.base_url == "https://file.example.com/v1"
    assert settings.llm.api_key == SecretStr("sk-from-file")
    assert settings.llm.model == "file-model"


def test_openai_api_key_is_the_fallback_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    assert load_settings().llm.api_key == SecretStr(SECRET)


def test_agent_latency_api_key_wins_over_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", SECRET)

    assert load_settings().llm.api_key == SecretStr(SECRET)


def test_empty_agent_latency_api_key_falls_back_to_openai_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", "")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    assert load_settings().llm.api_key == SecretStr(SECRET)


def test_openai_api_key_does_not_replace_a_configured_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The OpenAI key must not be sent to the third-party endpoint the file configures.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")

    settings, _, _ = _load(tmp_path, FILE_WITH_CHANNEL)

    assert settings.llm.api_key == SecretStr("sk-from-file")


def test_no_key_anywhere_gives_none() -> None:
    assert load_settings().llm.api_key is None


def test_environment_base_url_is_validated_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_LATENCY_BASE_URL", "ftp://files.example.com/v1")

    with pytest.raises(ConfigError, match="AGENT_LATENCY_BASE_URL"):
        load_settings()


# --- ConfigError cases -----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["config", "settings"])
def test_missing_explicit_file(tmp_path: Path, which: str) -> None:
    missing = tmp_path / f"absent-{which}"
    arguments = {f"{which}_path": missing}

    with pytest.raises(ConfigError) as caught:
        load_settings(**arguments)

    assert str(missing) in str(caught.value)
    assert "Fix" in str(caught.value)


def test_malformed_toml_names_file_and_line(tmp_path: Path) -> None:
    message = _config_error(tmp_path, '[llm]\nmodel = "m"\ntimeout_seconds = = 5\n')

    assert "config.toml" in message
    assert "line 3" in message


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    message = _config_error(tmp_path, json_text='{\n  "streaming": {\n    "enabled": true,\n  }\n}')

    assert "settings.json" in message
    assert "line 4" in message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(b'{"streaming": "\xff\xfe"}')

    with pytest.raises(ConfigError, match=r"settings\.json.*UTF-8.*Fix"):
        load_settings(settings_path=path)


@pytest.mark.parametrize(
    ("toml", "json_text", "place", "suggestion"),
    [
        ("[llm]\ntimeout_secs = 5\n", None, "config.toml: llm.timeout_secs", "'timeout_seconds'"),
        ("[llm.streamin]\nenabled = true\n", None, "config.toml: llm.streamin", "'streaming'"),
        (
            "[llm.prompt]\ntoken_budgte = 5\n",
            None,
            "config.toml: llm.prompt.token_budgte",
            "'token_budget'",
        ),
        (
            None,
            '{"promptTrimmer": {"defaultBudgt": 5}}',
            "settings.json: promptTrimmer.defaultBudgt",
            "'defaultBudget'",
        ),
        (None, '{"metric": {}}', "settings.json: metric", "'metrics'"),
    ],
)
def test_unknown_key_suggests_the_closest_known_key(
    tmp_path: Path, toml: str | None, json_text: str | None, place: str, suggestion: str
) -> None:
    message = _config_error(tmp_path, toml, json_text)

    assert place in message
    assert "unknown key" in message
    assert f"did you mean {suggestion}" in message


@pytest.mark.parametrize(
    ("toml", "json_text", "place"),
    [
        ("[llm.prompt]\ntoken_budget = true\n", None, "llm.prompt.token_budget"),
        (None, '{"promptTrimmer": {"defaultBudget": true}}', "promptTrimmer.defaultBudget"),
        (None, '{"promptTrimmer": {"defaultBudget": 6000.0}}', "promptTrimmer.defaultBudget"),
        (None, '{"streaming": {"maxTokens": "2048"}}', "streaming.maxTokens"),
        (None, '{"streaming": {"temperature": false}}', "streaming.temperature"),
        ('[llm]\ntimeout_seconds = "60"\n', None, "llm.timeout_seconds"),
        ("[llm.streaming]\nenabled = 1\n", None, "llm.streaming.enabled"),
        ("[llm]\nmodel = 7\n", None, "llm.model"),
        (None, '{"promptTrimmer": {"priorityOrder": "system"}}', "promptTrimmer.priorityOrder"),
        ("llm = 5\n", None, "llm"),
        (None, "[1, 2]", "the top level"),
    ],
)
def test_wrong_type(tmp_path: Path, toml: str | None, json_text: str | None, place: str) -> None:
    message = _config_error(tmp_path, toml, json_text)

    assert ("config.toml" if toml is not None else "settings.json") in message
    assert place in message
    assert "expected" in message or "must be" in message


@pytest.mark.parametrize(
    ("toml", "json_text"),
    [(None, '{"promptTrimmer": {"a\\nb": 1}}'), ('[llm]\n"x\\u0007\\ny" = 1\n', None)],
)
def test_unknown_key_with_control_characters_stays_on_one_line(
    tmp_path: Path, toml: str | None, json_text: str | None
) -> None:
    message = _config_error(tmp_path, toml, json_text)  # asserts one line

    assert "unknown key" in message
    assert "\\n" in message  # shown escaped


def test_wrong_type_of_api_key_does_not_print_it(tmp_path: Path) -> None:
    message = _config_error(tmp_path, "[llm]\napi_key = 123456789\n")

    assert "llm.api_key" in message
    assert "123456789" not in message


@pytest.mark.parametrize("budget", [0, -1])
@pytest.mark.parametrize("in_toml", [True, False])
def test_budget_must_be_positive(tmp_path: Path, budget: int, in_toml: bool) -> None:
    if in_toml:
        message = _config_error(tmp_path, f"[llm.prompt]\ntoken_budget = {budget}\n")
        assert "config.toml: llm.prompt.token_budget" in message
    else:
        message = _config_error(
            tmp_path, json_text=f'{{"promptTrimmer": {{"defaultBudget": {budget}}}}}'
        )
        assert "settings.json: promptTrimmer.defaultBudget" in message
    assert f"{budget} is invalid" in message


def test_budget_plus_reserve_above_context_window(tmp_path: Path) -> None:
    message = _config_error(
        tmp_path,
        "[llm]\ncontext_window = 8192\n"
        "[llm.prompt]\ntoken_budget = 8192\nreserve_for_output = 2000\n",
    )

    assert "config.toml: llm.prompt.token_budget = 8192" in message
    assert "config.toml: llm.prompt.reserve_for_output = 2000" in message
    assert "config.toml: llm.context_window = 8192" in message
    assert "at most 6192" in message


def test_budget_plus_reserve_equal_to_context_window_is_fine(tmp_path: Path) -> None:
    settings, _, _ = _load(
        tmp_path,
        "[llm]\ncontext_window = 8192\n"
        "[llm.prompt]\ntoken_budget = 6192\nreserve_for_output = 2000\n",
    )

    assert settings.llm.context_window == 8192


def test_budget_from_json_checked_against_window_from_toml(tmp_path: Path) -> None:
    message = _config_error(
        tmp_path,
        "[llm]\ncontext_window = 4096\n",
        '{"promptTrimmer": {"defaultBudget": 4096, "reserveForOutput": 512}}',
    )

    assert "settings.json: promptTrimmer.defaultBudget = 4096" in message
    assert "config.toml: llm.context_window = 4096" in message


@pytest.mark.parametrize(
    "order",
    [
        ["system", "latest_user", "tool_result"],
        ["system", "latest_user", "tool_result", "history", "history"],
        ["system", "latest_user", "tool_result", "tool_result"],
        ["system", "latest_user", "tool_result", "histroy"],
        ["system", "latest_user", "tool_result", 4],
        [],
    ],
)
def test_priority_order_must_be_a_permutation(tmp_path: Path, order: list[object]) -> None:
    message = _config_error(
        tmp_path, json_text=json.dumps({"promptTrimmer": {"priorityOrder": order}})
    )

    assert "settings.json: promptTrimmer.priorityOrder" in message
    assert "exactly once" in message


def test_priority_order_in_another_order_is_kept(tmp_path: Path) -> None:
    order = '["history", "tool_result", "latest_user", "system"]'

    settings, _, _ = _load(tmp_path, json_text=f'{{"promptTrimmer": {{"priorityOrder": {order}}}}}')

    assert settings.prompt.priority_order == ("history", "tool_result", "latest_user", "system")


def test_ttft_warn_above_error(tmp_path: Path) -> None:
    message = _config_error(
        tmp_path, json_text='{"metrics": {"ttftWarnMs": 3000, "ttftErrorMs": 2500}}'
    )

    assert "settings.json: metrics.ttftWarnMs = 3000" in message
    assert "settings.json: metrics.ttftErrorMs = 2500" in message


def test_ttft_warn_from_toml_above_default_error(tmp_path: Path) -> None:
    message = _config_error(tmp_path, "[llm.streaming]\nfirst_token_warn_ms = 3000\n")

    assert "config.toml: llm.streaming.first_token_warn_ms = 3000" in message
    assert "metrics.ttft_error_ms = 2500" in message


def test_ttft_warn_equal_to_error_is_fine(tmp_path: Path) -> None:
    settings, _, _ = _load(
        tmp_path, json_text='{"metrics": {"ttftWarnMs": 2000, "ttftErrorMs": 2000}}'
    )

    assert settings.metrics.ttft_warn_ms == settings.metrics.ttft_error_ms == 2000


@pytest.mark.parametrize("temperature", ["-0.1", "2.01", "100", "NaN", "Infinity"])
def test_temperature_outside_0_to_2(tmp_path: Path, temperature: str) -> None:
    message = _config_error(
        tmp_path, json_text=f'{{"streaming": {{"temperature": {temperature}}}}}'
    )

    assert "settings.json: streaming.temperature" in message


@pytest.mark.parametrize("temperature", [0, 2, 0.7])
def test_temperature_bounds_are_inclusive(tmp_path: Path, temperature: float) -> None:
    settings, _, _ = _load(tmp_path, json_text=f'{{"streaming": {{"temperature": {temperature}}}}}')

    assert settings.streaming.temperature == temperature


@pytest.mark.parametrize("value", ['"priority"', '"fifo"'])
def test_the_removed_trim_strategy_is_named_with_its_fix(tmp_path: Path, value: str) -> None:
    """``priority`` was its only value: a file still setting it is told to delete the key."""
    message = _config_error(tmp_path, f"[llm.prompt]\ntrim_strategy = {value}\n")

    assert message.endswith(
        "config.toml: llm.prompt.trim_strategy: unknown key. Fix: delete it: priority, its only "
        "value, is how the trimmer always works."
    )


@pytest.mark.parametrize(
    "base_url",
    ["ftp://api.example.com/v1", "api.example.com/v1", "https://", "http://[::1/v1", "file:///v1"],
)
def test_base_url_must_be_http(tmp_path: Path, base_url: str) -> None:
    message = _config_error(tmp_path, f'[llm]\nbase_url = "{base_url}"\n')

    assert "config.toml: llm.base_url" in message
    assert "http(s)" in message


@pytest.mark.parametrize(
    ("toml", "json_text", "toml_place", "json_place"),
    [
        (
            "[llm.prompt]\ntoken_budget = 6000\n",
            '{"promptTrimmer": {"defaultBudget": 5000}}',
            "config.toml: llm.prompt.token_budget = 6000",
            "settings.json: promptTrimmer.defaultBudget = 5000",
        ),
        (
            "[llm.prompt]\nreserve_for_output = 2000\n",
            '{"promptTrimmer": {"reserveForOutput": 1000}}',
            "config.toml: llm.prompt.reserve_for_output = 2000",
            "settings.json: promptTrimmer.reserveForOutput = 1000",
        ),
        (
            "[llm.streaming]\nenabled = true\n",
            '{"streaming": {"enabled": false}}',
            "config.toml: llm.streaming.enabled = True",
            "settings.json: streaming.enabled = False",
        ),
        (
            "[llm.streaming]\nfirst_token_warn_ms = 1200\n",
            '{"metrics": {"ttftWarnMs": 1000}}',
            "config.toml: llm.streaming.first_token_warn_ms = 1200",
            "settings.json: metrics.ttftWarnMs = 1000",
        ),
    ],
)
def test_files_that_disagree_name_both_places(
    tmp_path: Path, toml: str, json_text: str, toml_place: str, json_place: str
) -> None:
    message = _config_error(tmp_path, toml, json_text)

    assert toml_place in message
    assert json_place in message
    assert "disagrees" in message


@pytest.mark.parametrize(
    ("toml", "json_text"),
    [
        ("[llm]\ntimeout_seconds = 0\n", None),
        ("[llm]\ncontext_window = 0\n", None),
        ('[llm]\nmax_tokens_param = "max_output"\n', None),
        ('[llm]\nmodel = "  "\n', None),
        ("[llm.streaming]\nchunk_timeout_ms = -5\n", None),
        (None, '{"streaming": {"maxTokens": 0}}'),
        (None, '{"promptTrimmer": {"reserveForOutput": -1}}'),
        (None, '{"promptTrimmer": {"historyKeepTail": -1}}'),
        (None, '{"metrics": {"ttftErrorMs": 0}}'),
    ],
)
def test_other_out_of_range_values(tmp_path: Path, toml: str | None, json_text: str | None) -> None:
    message = _config_error(tmp_path, toml, json_text)

    assert "is invalid" in message


@pytest.mark.parametrize(
    ("toml", "json_text"),
    [
        # Integers beyond float range, beyond Python's digit limit, and nesting beyond recursion.
        (None, '{"streaming": {"temperature": ' + "9" * 400 + "}}"),
        (None, '{"streaming": {"maxTokens": ' + "9" * 5000 + "}}"),
        ("[llm]\ncontext_window = " + "9" * 5000 + "\n", None),
        ("x = " + "[" * 3000 + "]" * 3000 + "\n", None),
        (None, "[" * 100_000 + "]" * 100_000),
    ],
)
def test_pathological_values_are_config_errors(
    tmp_path: Path, toml: str | None, json_text: str | None
) -> None:
    message = _config_error(tmp_path, toml, json_text)

    assert ("config.toml" if toml is not None else "settings.json") in message


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# --- base_url warnings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url", ["https://www.example.com", "https://example.com/", "https://example.com/docs"]
)
def test_website_base_url_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, base_url: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        settings, _, _ = _load(tmp_path, f'[llm]\nbase_url = "{base_url}"\n')

    assert settings.llm.base_url == base_url
    assert len(settings.warnings) == 1
    assert "config.toml: llm.base_url" in settings.warnings[0]
    assert "Fix" in settings.warnings[0]
    logged = [r for r in caplog.records if r.name == "agent_latency.config"]
    assert [r.getMessage() for r in logged] == list(settings.warnings)
    assert logged[0].levelno == logging.WARNING


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.example.com/v1",
        "https://taotoken.net/api",
        "http://127.0.0.1:8000/v1/",
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
        "https://api.openai.com/v1",
    ],
)
def test_api_root_base_url_does_not_warn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, base_url: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        settings, _, _ = _load(tmp_path, f'[llm]\nbase_url = "{base_url}"\n')

    assert settings.warnings == ()
    assert [r for r in caplog.records if r.name == "agent_latency.config"] == []


# --- command-line overrides (bench, doctor) -----------------------------------------------------


def test_channel_overrides_replace_the_channel_and_its_warnings() -> None:
    settings = with_channel_overrides(
        Settings(), base_url="https://example.com", model="m2", api_key="sk-override"
    )
    assert settings.llm.base_url == "https://example.com"
    assert settings.llm.model == "m2"
    assert settings.llm.api_key is not None
    assert settings.llm.api_key.get_secret_value() == "sk-override"
    assert len(settings.warnings) == 1 and "--base-url" in settings.warnings[0]
    assert with_channel_overrides(settings, base_url="https://example.com/v1").warnings == ()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("base_url", "localhost:8000", "--base-url: 'localhost:8000' is not an http(s) URL"),
        ("model", " ", "--model: must not be empty"),
        ("api_key", "", "--api-key: must not be empty"),
    ],
)
def test_bad_channel_overrides_are_config_errors(option: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        with_channel_overrides(Settings(), **{option: value})
