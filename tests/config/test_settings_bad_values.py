"""load_settings against keys, URLs, durations, ports and numbers that look valid and are not.

Keys with surrounding whitespace or characters no header can carry, credentials in base_url,
durations that overflow the clocks, keys repeated in settings.json, ports out of range and
numbers too long to read: each is stripped with a log line or refused with one line that names
the place and the fix, and never shows the secret.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from agent_latency import ConfigError, LLMSettings, Settings, build_chat_model, load_settings
from agent_latency.config import with_channel_overrides
from agent_latency.config._channel import base_url_warnings

KEY = "plainkey4c1d9e7b"  # not sk-shaped: only the exact-secret masking can hide it
PASSWORD = "hunter2-pw-77a1"

pytestmark = pytest.mark.usefixtures("clean_environment")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def config_error(config: Path | None = None, settings: Path | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(config, settings)
    message = str(caught.value)
    assert "Fix" in message
    assert "\n" not in message
    return message


# --- the settings other parts code against ---------------------------------------------------


def test_tokenizer_and_history_selection_load(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", '[llm]\ntokenizer = "o200k"\n')
    settings = write(tmp_path / "settings.json", '{"promptTrimmer": {"historySelection": "age"}}')

    loaded = load_settings(config, settings)

    assert loaded.llm.tokenizer == "o200k"
    assert loaded.prompt.history_selection == "age"


def test_the_new_settings_default_to_unset_and_cache_first() -> None:
    defaults = load_settings()

    assert defaults.llm.tokenizer is None
    assert defaults.prompt.history_selection == "cache_first"
    assert (defaults.prompt.history_keep_head, defaults.prompt.history_keep_tail) == (1, 1)


@pytest.mark.parametrize(
    ("toml", "json_text", "named"),
    [
        ("[llm]\ntokenizer = 5\n", None, "config.toml: llm.tokenizer: expected a string"),
        ('[llm]\ntokenizer = " "\n', None, "config.toml: llm.tokenizer: ' ' is invalid"),
        (
            "[llm]\ncache_lifetime_seconds = 300\n",
            None,
            "llm.cache_lifetime_seconds: unknown key. Fix: delete it: nothing read it",
        ),
        ("[llm]\ntimeout_seconds = 1e10\n", None, "llm.timeout_seconds: 10000000000.0 is invalid"),
        (
            None,
            '{"promptTrimmer": {"historySelection": "newest"}}',
            "must be one of cache_first, age",
        ),
        (None, '{"promptTrimmer": {"historySelection": 1}}', "expected a string"),
    ],
)
def test_the_new_settings_are_validated(
    tmp_path: Path, toml: str | None, json_text: str | None, named: str
) -> None:
    config = write(tmp_path / "config.toml", toml) if toml is not None else None
    settings = write(tmp_path / "settings.json", json_text) if json_text is not None else None

    assert named in config_error(config, settings)


def test_the_removed_relevance_selection_gets_one_line_naming_the_key_and_the_fix(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "settings.json", '{"promptTrimmer": {"historySelection": "relevance"}}')

    message = config_error(settings=path)

    assert message.startswith(f"{path}: promptTrimmer.historySelection: 'relevance' was removed")
    assert 'Fix: set promptTrimmer.historySelection to "cache_first", the default' in message


# --- whitespace around the key --------------------------------------------------------------------


def test_a_key_with_a_final_newline_is_stripped_and_the_log_says_so_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = write(tmp_path / "config.toml", f'[llm]\napi_key = "  {KEY}\\n"\n')

    with caplog.at_level(logging.DEBUG, logger="agent_latency"):
        loaded = load_settings(config)

    assert loaded.llm.api_key is not None
    assert loaded.llm.api_key.get_secret_value() == KEY
    (record,) = [r for r in caplog.records if r.name == "agent_latency.config"]
    assert "config.toml: llm.api_key" in record.getMessage()
    assert "whitespace" in record.getMessage()
    assert KEY not in caplog.text


@pytest.mark.parametrize("variable", ["AGENT_LATENCY_API_KEY", "OPENAI_API_KEY"])
def test_a_key_from_the_environment_is_stripped_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, variable: str
) -> None:
    monkeypatch.setenv(variable, f"{KEY}\r\n")

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        loaded = load_settings()

    assert loaded.llm.api_key == SecretStr(KEY)
    assert f"environment {variable}" in caplog.text and KEY not in caplog.text


def test_a_key_of_whitespace_only_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", '[llm]\napi_key = " \\n"\n')

    assert "config.toml: llm.api_key: must not be empty" in config_error(config)


def test_a_command_line_key_is_stripped() -> None:
    settings = with_channel_overrides(Settings(), api_key=f"{KEY}\n")

    assert settings.llm.api_key == SecretStr(KEY)


# --- a key no header can carry --------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["é", "\u200b", "\x00", "\t"])
def test_a_non_ascii_or_control_character_key_is_refused_naming_its_file(
    tmp_path: Path, bad: str
) -> None:
    escaped = f"\\u{ord(bad):04x}"  # TOML's escape: the file itself stays ASCII
    config = write(tmp_path / "config.toml", f'[llm]\napi_key = "{KEY}{escaped}x"\n')

    message = config_error(config)

    assert "config.toml: llm.api_key" in message and "ASCII" in message
    assert KEY not in message


def test_a_non_ascii_key_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", f"{KEY}ü")

    message = config_error()

    assert "environment AGENT_LATENCY_API_KEY" in message and KEY not in message


def test_a_non_ascii_command_line_key_names_the_option() -> None:
    with pytest.raises(ConfigError, match=re.escape("--api-key: the API key holds")) as caught:
        with_channel_overrides(Settings(), api_key=f"{KEY}ü")

    assert KEY not in str(caught.value)


# --- credentials in base_url ----------------------------------------------------------------------


URL_WITH_PASSWORD = f"https://user:{PASSWORD}@api.example.com/v1"


def test_a_base_url_with_user_info_is_refused_without_showing_it(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", f'[llm]\nbase_url = "{URL_WITH_PASSWORD}"\n')

    message = config_error(config)

    assert "config.toml: llm.base_url: 'https://api.example.com/v1'" in message
    assert "user name or password" in message and "Basic auth" in message
    assert PASSWORD not in message and "user:hunter" not in message


@pytest.mark.parametrize("base_url", [f"ftp://user:{PASSWORD}@host/v1", f"user:{PASSWORD}@host/v1"])
def test_the_not_an_http_url_error_hides_user_info(tmp_path: Path, base_url: str) -> None:
    config = write(tmp_path / "config.toml", f'[llm]\nbase_url = "{base_url}"\n')

    message = config_error(config)

    assert "is not an http(s) URL" in message and PASSWORD not in message


def test_user_info_from_the_environment_or_the_command_line_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_LATENCY_BASE_URL", URL_WITH_PASSWORD)
    assert "environment AGENT_LATENCY_BASE_URL" in config_error()

    with pytest.raises(ConfigError, match="--base-url") as caught:
        with_channel_overrides(Settings(), base_url=URL_WITH_PASSWORD)
    assert PASSWORD not in str(caught.value)


def test_settings_built_in_code_hide_user_info_in_repr_and_refuse_to_build_a_model() -> None:
    settings = Settings(llm=LLMSettings(base_url=URL_WITH_PASSWORD, api_key=SecretStr(KEY)))

    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings)
    assert "base_url='https://api.example.com/v1'" in repr(settings)
    with pytest.raises(ValueError, match="user name or password") as caught:
        build_chat_model(settings)
    assert PASSWORD not in str(caught.value)


def test_the_website_warning_hides_user_info() -> None:
    (warning,) = base_url_warnings(f"https://user:{PASSWORD}@example.com/", "--base-url")

    assert "looks like a website" in warning and PASSWORD not in warning


# --- values that pass the type check but break later ----------------------------------------------


@pytest.mark.parametrize("timeout", ["1e10", "86401", str(10**30)])
def test_a_timeout_beyond_a_day_is_refused(tmp_path: Path, timeout: str) -> None:
    config = write(tmp_path / "config.toml", f"[llm]\ntimeout_seconds = {timeout}\n")

    message = config_error(config)

    assert "config.toml: llm.timeout_seconds" in message and "at most 86,400 (a day)" in message


def test_a_timeout_of_a_day_is_accepted(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", "[llm]\ntimeout_seconds = 86400\n")
    settings = load_settings(config)
    settings = with_channel_overrides(settings, base_url="http://127.0.0.1:9/v1")

    assert build_chat_model(settings).request_timeout == 86_400


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"streaming": {"maxTokens": 100, "maxTokens": 200}}', "maxTokens"),
        ('{"metrics": {}, "metrics": {"ttftWarnMs": 1}}', "metrics"),
    ],
)
def test_a_key_repeated_in_settings_json_is_refused(tmp_path: Path, text: str, key: str) -> None:
    settings = write(tmp_path / "settings.json", text)

    message = config_error(settings=settings)

    assert message.startswith(f"{settings}: key '{key}' appears twice")


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:99999/v1", "http://127.0.0.1:-1/v1", "http://host:port/v1"]
)
def test_a_port_out_of_range_is_refused(tmp_path: Path, base_url: str) -> None:
    config = write(tmp_path / "config.toml", f'[llm]\nbase_url = "{base_url}"\n')

    message = config_error(config)

    assert "config.toml: llm.base_url: the URL's port is not a number from 0 to 65535" in message


@pytest.mark.parametrize(("name", "text"), [("settings.json", "[1%s]"), ("config.toml", "x = 1%s")])
def test_a_number_too_long_to_read_names_the_file_and_no_python_internals(
    tmp_path: Path, name: str, text: str
) -> None:
    path = write(tmp_path / name, text % ("0" * 5000))

    message = config_error(*((path, None) if name == "config.toml" else (None, path)))

    assert message.startswith(f"{path}: a number has more than 4300 digits")
    assert "sys." not in message and "set_int_max_str_digits" not in message
