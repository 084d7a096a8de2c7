"""load_settings against a new user's first mistakes.

Every integer setting has an upper bound (``10**20`` overflowed the exporter's 64-bit integers on
every span), and the errors a new user meets first say what actually happened: a key in the
wrong section, the two files swapped, an unexpanded ``${VARIABLE}`` as the API key, and the key
the user set when the budget and the reserve pass the context window.
"""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from agent_latency import ConfigError, load_settings
from agent_latency.cli import main
from agent_latency.config._settings import JSON, TOML
from agent_latency.config._sources import FileSchema

pytestmark = pytest.mark.usefixtures("clean_environment")

SECRET = "sk-env-secret-8d2f0b"


def _int_keys(schema: FileSchema) -> list[tuple[str, ...]]:
    return [tuple(dotted.split(".")) for dotted, key in schema.keys.items() if key.kind == "int"]


def _toml(path: tuple[str, ...], value: object) -> str:
    return f"[{'.'.join(path[:-1])}]\n{path[-1]} = {value}\n"


def _json(path: tuple[str, ...], value: object) -> str:
    tree: Any = value
    for key in reversed(path):
        tree = {key: tree}
    return json.dumps(tree)


def config_error(config: str | None = None, settings: str | None = None) -> str:
    paths = []
    for name, text in (("config.toml", config), ("settings.json", settings)):
        paths.append(None if text is None else Path(name))
        if text is not None:
            Path(name).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(*paths)
    message = str(caught.value)
    assert "Fix" in message
    assert "\n" not in message
    return message


# --- every integer setting is bounded --------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "path"),
    [("config.toml", path) for path in _int_keys(TOML)]
    + [("settings.json", path) for path in _int_keys(JSON)],
    ids=lambda each: ".".join(each) if isinstance(each, tuple) else each,
)
def test_every_integer_setting_refuses_a_value_no_64_bit_integer_holds(
    file: str, path: tuple[str, ...]
) -> None:
    if file == "config.toml":
        message = config_error(config=_toml(path, 10**20))
    else:
        message = config_error(settings=_json(path, 10**20))

    assert message.startswith(f"{file}: {'.'.join(path)}: ")
    assert "at most" in message


def test_the_issue_values_are_refused_by_doctor_with_the_key_named() -> None:
    Path("big.toml").write_text("[llm]\ncontext_window = " + str(10**23) + "\n")
    Path("big.json").write_text('{"streaming": {"maxTokens": ' + str(10**20) + "}}")
    for option, key in (
        ("--config", "big.toml: llm.context_window"),
        ("--settings", "big.json: streaming.maxTokens"),
    ):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["doctor", option, key.split(":")[0]])

        assert code == 2
        assert out.getvalue() == ""  # no "PASS configuration: valid"
        [line] = err.getvalue().splitlines()
        assert line.startswith(f"agent-latency: error: {key}: ")


def test_values_at_the_bounds_still_load() -> None:
    Path("config.toml").write_text("[llm]\ncontext_window = 100_000_000\n")
    Path("settings.json").write_text(
        '{"metrics": {"ttftWarnMs": 86400000, "ttftErrorMs": 86400000}}'
    )

    loaded = load_settings(Path("config.toml"), Path("settings.json"))

    assert loaded.llm.context_window == 100_000_000
    assert loaded.metrics.ttft_error_ms == 86_400_000


# --- the messages say what happened ---------------------------------------------------------


def test_a_prompt_key_under_llm_is_told_where_it_belongs() -> None:
    message = config_error(config="[llm]\ntoken_budget = 4000\n")

    assert message.startswith("config.toml: llm.token_budget: unknown key.")
    assert "'token_budget' belongs in [llm.prompt]" in message
    assert "tokenizer" not in message


def test_a_key_of_the_other_file_is_told_its_name_here() -> None:
    message = config_error(settings='{"promptTrimmer": {"token_budget": 4000}}')

    assert "'token_budget' is a key of config.toml" in message
    assert "write promptTrimmer.defaultBudget here instead" in message


@pytest.mark.parametrize("swapped", ["settings_as_config", "config_as_settings"])
def test_the_two_files_swapped_are_called_swapped(swapped: str) -> None:
    Path("a.toml").write_text('[llm]\nmodel = "m"\n')
    Path("a.json").write_text('{"promptTrimmer": {"defaultBudget": 4000}}')
    given = ("a.json", None) if swapped == "settings_as_config" else (None, "a.toml")

    with pytest.raises(ConfigError) as caught:
        load_settings(*given)

    message = str(caught.value)
    assert "look swapped" in message
    assert "malformed" not in message
    if swapped == "settings_as_config":
        assert message.startswith("a.json: JSON, not TOML")
        assert "settings.json (--settings)" in message
    else:
        assert message.startswith("a.toml: TOML, not JSON")
        assert "config.toml (--config)" in message


def test_malformed_files_are_still_called_malformed() -> None:
    assert "malformed TOML" in config_error(config="[llm\n")
    Path("config.toml").unlink()
    assert "malformed JSON" in config_error(settings='{"metrics": }')


@pytest.mark.parametrize("placeholder", ["${OPENAI_API_KEY}", "$OPENAI_API_KEY"])
def test_an_unexpanded_key_placeholder_is_named_with_the_way_to_pass_the_key(
    placeholder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # fills no gap: the file sets a key

    message = config_error(config=f'[llm]\napi_key = "{placeholder}"\n')

    assert message.startswith("config.toml: llm.api_key: holds the placeholder ${OPENAI_API_KEY}")
    assert "do not expand environment variables" in message
    assert "OPENAI_API_KEY" in message and "AGENT_LATENCY_API_KEY" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("variable", "placeholder"),
    [
        ("AGENT_LATENCY_BASE_URL", "${OPENAI_BASE_URL}"),
        ("AGENT_LATENCY_MODEL", "$MODEL"),
        ("AGENT_LATENCY_API_KEY", "${OPENAI_API_KEY}"),
        ("OPENAI_API_KEY", "${OPENAI_API_KEY}"),
    ],
)
def test_a_placeholder_in_the_environment_is_not_blamed_on_a_file(
    variable: str, placeholder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An env file given to `docker run --env-file` or systemd is taken as written. The message
    # said TOML and JSON expand nothing, and its fix was to set the very variable that held it.
    monkeypatch.setenv(variable, placeholder)

    message = config_error()

    assert message.startswith(f"environment {variable}: holds the placeholder")
    assert "TOML" not in message and "file sets a key" not in message
    assert "(it wins over the files)" not in message
    assert "was not expanded where the environment was set" in message
    assert message.endswith("Fix: write the value itself where the variable is set.")


@pytest.mark.xfail(
    strict=True,
    reason="Found by tele19, not fixed: llm.tokenizer naming a file that exists but is no "
    "tokenizer.json (empty, not JSON, another JSON) loads; the first count then fails with "
    "\"tokenizer 'tok.json': not a readable tokenizer.json (Exception)\", naming neither "
    "config.toml nor llm.tokenizer. Loading checks only that the file can be read, by design "
    "without parsing it (a tokenizer.json is megabytes); a cheap check of its shape would do.",
)
def test_a_tokenizer_file_that_is_no_tokenizer_is_named_at_load() -> None:
    Path("tok.json").write_text('{"not": "a tokenizer"}', encoding="utf-8")

    message = config_error(config='[llm]\ntokenizer = "tok.json"\n')

    assert message.startswith("config.toml: llm.tokenizer: 'tok.json'")


def test_a_placeholder_the_environment_overrides_is_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", SECRET)
    Path("config.toml").write_text('[llm]\napi_key = "${OPENAI_API_KEY}"\n')

    loaded = load_settings(Path("config.toml"))

    assert loaded.llm.api_key is not None
    assert loaded.llm.api_key.get_secret_value() == SECRET


def test_a_key_holding_a_dollar_sign_is_a_key() -> None:
    Path("config.toml").write_text('[llm]\napi_key = "sk-a$b"\n')

    loaded = load_settings(Path("config.toml"))

    assert loaded.llm.api_key is not None
    assert loaded.llm.api_key.get_secret_value() == "sk-a$b"


def test_budget_and_reserve_over_the_window_name_the_key_the_user_set() -> None:
    message = config_error(
        config="[llm]\ncontext_window = 8192\n",
        settings='{"promptTrimmer": {"defaultBudget": 8000}}',
    )

    assert message.startswith("settings.json: promptTrimmer.defaultBudget = 8000 plus")
    assert message.endswith("Fix: lower promptTrimmer.defaultBudget to at most 6192.")
    assert "token_budget" not in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_config_files_share_the_regular_file_rule_of_trim() -> None:
    os.mkfifo("pipe.toml")  # reading it would wait for a writer forever

    with pytest.raises(ConfigError, match=r"^pipe\.toml: not a regular file"):
        load_settings("pipe.toml")
