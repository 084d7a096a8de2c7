"""Fuzzing load_settings: whatever the two files hold, the only exception is ConfigError.

Trees mix the documented keys with misspelt and random ones, and valid values with every other
JSON/TOML type; whole files are also random bytes, random text, or the shipped examples with a
random edit. A loaded Settings must satisfy the documented rules, an error must be one line that
names the file and the fix, and neither may show the API key.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_latency.config import ConfigError, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("system", "latest_user", "tool_result", "history")
SECRET = "sk-fuzz-7c41e9"

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values near the rules' boundaries, so that generated trees pass some checks and fail others.
interesting = st.sampled_from(
    [
        0, -1, 1, 2, 512, 2000, 2048, 2500, 6000, 8192, 10**30, 2**63, 10**400,
        0.0, -0.0, 0.1, 2.0, 2.01, 1e308, math.inf, -math.inf, math.nan,
        True, False, "", " ", "priority", "fifo", "auto", "max_tokens",
        "max_completion_tokens", "qwen-7b-chat", "https://api.example.com/v1",
        "https://example.com", "http://127.0.0.1:8000/v1", "http://[", "https://",
        "ftp://x/v1", "api.example.com", *CLASSES,
        "https://user:pw@api.example.com/v1", "http://127.0.0.1:99999/v1", 1e10, 86400,
        "age", "relevance", "cache_first", "o200k",
    ]
)  # fmt: skip
priority_lists = st.permutations(CLASSES).map(list) | st.lists(st.sampled_from(CLASSES), max_size=5)
scalars = st.one_of(
    interesting,
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    priority_lists,
)
random_keys = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(["token_budgte", "defaultBudgt", "temprature", "apiKey", "streamin", "llm"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(random_keys, inner, max_size=4),
    max_leaves=10,
)

# Values of the documented type, in and out of range, to reach the range and cross-file checks.
small_ints = st.integers(-2, 10_000) | st.sampled_from([0, 2000, 2048, 2500, 6000, 8192])
TYPED: dict[str, st.SearchStrategy[Any]] = {
    "int": small_ints,
    "number": small_ints | st.floats(-1, 3) | st.sampled_from([math.nan, math.inf, 0.1]),
    "bool": st.booleans(),
    "str": interesting.filter(lambda v: isinstance(v, str)) | st.text(max_size=10),
    "classes": priority_lists,
    # The key, also as a value of the wrong type: no message may show it.
    "secret": st.sampled_from(
        [SECRET, f" {SECRET}\n", f"{SECRET}é", f"{SECRET}\x00", " ", [SECRET], {"key": SECRET}, 7]
    ),
}

# The documented layout of both files: leaf keys map to their kind in TYPED.
TOML_KEYS: dict[str, Any] = {
    "llm": {
        "base_url": "str",
        "api_key": "secret",
        "model": "str",
        "timeout_seconds": "number",
        "context_window": "int",
        "max_tokens_param": "str",
        "tokenizer": "str",
        "streaming": {"enabled": "bool", "chunk_timeout_ms": "int", "first_token_warn_ms": "int"},
        "prompt": {
            "token_budget": "int",
            "reserve_for_output": "int",
            "keep_system": "bool",
            "keep_latest_user": "bool",
        },
    }
}
JSON_KEYS: dict[str, Any] = {
    "promptTrimmer": {
        "defaultBudget": "int",
        "reserveForOutput": "int",
        "priorityOrder": "classes",
        "historyKeepHead": "int",
        "historyKeepTail": "int",
        "historySelection": "str",
    },
    "streaming": {
        "enabled": "bool",
        "temperature": "number",
        "maxTokens": "int",
        "recordTtft": "bool",
    },
    "metrics": {"ttftWarnMs": "int", "ttftErrorMs": "int", "logEveryRequest": "bool"},
}


def _tree(layout: dict[str, Any], *, typed: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Any subset of the layout's keys.

    Typed trees hold only documented keys with values of the documented type; untyped ones hold
    values of any type and sometimes extra random keys.
    """

    def strategy(sub: dict[str, Any] | str) -> st.SearchStrategy[Any]:
        if isinstance(sub, dict):
            branch = _tree(sub, typed=typed)
            return branch if typed else branch | values
        return TYPED[sub] if typed or sub == "secret" else TYPED[sub] | values

    known = st.fixed_dictionaries({}, optional={k: strategy(v) for k, v in layout.items()})
    if typed:
        return known
    extra: st.SearchStrategy[dict[str, Any]] = st.just({}) | st.dictionaries(
        random_keys, values, max_size=2
    )
    return st.builds(lambda k, e: {**e, **k}, known, extra)


def _any_tree(layout: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return _tree(layout, typed=True) | _tree(layout, typed=False)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # mostly a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    pairs = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
    return "{" + ", ".join(pairs) + "}"


def _to_toml(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """Writes non-empty tables as [section] headers, everything else as key = value lines."""
    lines: list[str] = []
    tables: list[str] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            path = (*prefix, key)
            header = f"[{'.'.join(map(_toml_key, path))}]\n"
            tables.append(header + _to_toml(value, path))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}\n")
    return "".join(lines) + "".join(tables)


@pytest.fixture(scope="module", autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No channel variables from the shell; an empty working directory."""
    with pytest.MonkeyPatch.context() as patch:
        for variable in (
            "AGENT_LATENCY_BASE_URL",
            "AGENT_LATENCY_API_KEY",
            "AGENT_LATENCY_MODEL",
            "OPENAI_API_KEY",
        ):
            patch.delenv(variable, raising=False)
        patch.chdir(tmp_path_factory.mktemp("cwd"))
        yield


def _check_load(config: str | bytes | None, settings_json: str | bytes | None) -> None:
    """Loads the two contents; asserts the outcome is valid Settings or a proper ConfigError."""
    with tempfile.TemporaryDirectory() as directory:
        paths: list[Path | None] = []
        for name, content in (("config.toml", config), ("settings.json", settings_json)):
            path = Path(directory, name)
            if content is None:
                paths.append(None)
                continue
            if isinstance(content, str):
                path.write_text(content, encoding="utf-8")
            else:
                path.write_bytes(content)
            paths.append(path)
        try:
            loaded = load_settings(*paths)
        except ConfigError as exc:
            message = str(exc)
            assert "Fix" in message
            assert "\n" not in message
            assert any(str(path) in message for path in paths if path is not None)
            assert SECRET not in message
        else:
            _assert_valid(loaded)


def _assert_valid(loaded: Settings) -> None:
    assert isinstance(loaded, Settings)
    assert SECRET not in repr(loaded)
    prompt, streaming, metrics, llm = loaded.prompt, loaded.streaming, loaded.metrics, loaded.llm
    assert prompt.token_budget > 0
    assert sorted(prompt.priority_order) == sorted(CLASSES)
    assert 0 <= streaming.temperature <= 2
    assert metrics.ttft_warn_ms <= metrics.ttft_error_ms
    if llm.context_window is not None:
        assert prompt.token_budget + prompt.reserve_for_output <= llm.context_window
    assert llm.base_url is None or llm.base_url.startswith(("http://", "https://"))
    if llm.base_url is not None:
        parts = urlsplit(llm.base_url)
        assert parts.username is None and parts.password is None
        assert parts.port is None or 0 <= parts.port <= 65535
    assert 0 < llm.timeout_seconds <= 86_400
    if llm.api_key is not None:
        key = llm.api_key.get_secret_value()
        assert key == key.strip() and key.isascii() and key.isprintable() and key
    assert prompt.history_selection in ("cache_first", "age")  # "relevance" was removed
    for value in (prompt.token_budget, streaming.max_tokens, metrics.ttft_warn_ms):
        assert type(value) is int


@FUZZ
@given(toml_tree=st.none() | _any_tree(TOML_KEYS), json_tree=st.none() | _any_tree(JSON_KEYS))
def test_random_trees_load_or_raise_config_error(
    toml_tree: dict[str, Any] | None, json_tree: dict[str, Any] | None
) -> None:
    _check_load(
        None if toml_tree is None else _to_toml(toml_tree),
        None if json_tree is None else json.dumps(json_tree),
    )


@FUZZ
@given(top=values, toml_tree=_any_tree(TOML_KEYS))
def test_random_top_levels_load_or_raise_config_error(top: Any, toml_tree: dict[str, Any]) -> None:
    # Any JSON document at the top level (lists, numbers, strings...), and TOML's own tree.
    _check_load(_to_toml(toml_tree), json.dumps(top))


@FUZZ
@given(content=st.binary(max_size=300) | st.text(max_size=300), as_toml=st.booleans())
def test_random_files_load_or_raise_config_error(content: bytes | str, as_toml: bool) -> None:
    if as_toml:
        _check_load(content, None)
    else:
        _check_load(None, content)


def _random_edit(text: str) -> st.SearchStrategy[str]:
    def edit(start: int, length: int, insert: str) -> str:
        return text[:start] + insert + text[start + length :]

    return st.builds(
        edit,
        st.integers(0, len(text)),
        st.integers(0, 20),
        st.text(alphabet=st.sampled_from('[]{}"=,.:\n #0123456789-truefalsn'), max_size=8),
    )


EXAMPLE_TOML = (ROOT / "examples" / "config.toml").read_text(encoding="utf-8")
EXAMPLE_JSON = (ROOT / "examples" / "settings.json").read_text(encoding="utf-8")


@FUZZ
@given(data=st.data(), edit_toml=st.booleans())
def test_edited_examples_load_or_raise_config_error(data: st.DataObject, edit_toml: bool) -> None:
    toml, json_text = EXAMPLE_TOML, EXAMPLE_JSON
    draw: Callable[[st.SearchStrategy[str]], str] = data.draw
    if edit_toml:
        toml = draw(_random_edit(toml))
    else:
        json_text = draw(_random_edit(json_text))
    # The example's key stays as it is: an edit may merge it into another value's text.
    _check_load(toml, json_text)


def test_fuzz_helpers_write_what_the_loader_reads() -> None:
    # Guards the fuzz itself: the TOML writer must produce files the loader accepts.
    tree = {
        "llm": {
            "model": "m",
            "timeout_seconds": 1.5,
            "streaming": {"enabled": False},
            "prompt": {"token_budget": 100},
        }
    }
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "config.toml")
        path.write_text(_to_toml(tree), encoding="utf-8")
        loaded = load_settings(path)
    assert (loaded.llm.model, loaded.llm.timeout_seconds) == ("m", 1.5)
    assert (loaded.streaming.enabled, loaded.prompt.token_budget) == (False, 100)
