"""Settings from the two files users already keep: ``config.toml`` and ``settings.json``.

``config.toml`` holds the channel (``[llm]``), streaming switches and the prompt budget;
``settings.json`` holds the trimmer, streaming and metrics options in camelCase. Both are
optional. Where both set the same thing and disagree, loading fails and names both places, so a
stale copy never wins silently. Environment variables override the channel fields.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit

from pydantic import SecretStr

logger = logging.getLogger("agent_latency")

PriorityClass = Literal["system", "latest_user", "tool_result", "history"]
"""The message classes ``prompt.priority_order`` ranks (docs/trimming.md)."""
PRIORITY_CLASSES: Final[tuple[PriorityClass, ...]] = get_args(PriorityClass)
"""Every priority class, in the default order: the first gets the budget first."""
MAX_TOKENS_PARAMS: Final = ("auto", "max_tokens", "max_completion_tokens")
DEFAULT_CONFIG_FILE: Final = "config.toml"
DEFAULT_SETTINGS_FILE: Final = "settings.json"
ENV_BASE_URL: Final = "AGENT_LATENCY_BASE_URL"
ENV_API_KEY: Final = "AGENT_LATENCY_API_KEY"
ENV_MODEL: Final = "AGENT_LATENCY_MODEL"
ENV_OPENAI_API_KEY: Final = "OPENAI_API_KEY"


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class LLMSettings:
    """The model channel: one OpenAI-compatible endpoint and key for many models.

    Attributes:
        base_url: The API root, e.g. ``https://api.example.com/v1``; ``None`` uses OpenAI's.
        api_key: The key, masked in every repr.
        model: The model name sent with each request.
        timeout_seconds: The request timeout.
        context_window: The model's context limit in tokens, when known.
        max_tokens_param: Which request field carries the output limit: ``"max_tokens"``,
            ``"max_completion_tokens"``, or ``"auto"`` (the latter for OpenAI itself, the former
            for every other server).
    """

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "qwen-7b-chat"
    timeout_seconds: float = 60.0
    context_window: int | None = None
    max_tokens_param: str = "auto"


@dataclass(frozen=True)
class StreamingSettings:
    """Streaming and generation options.

    Attributes:
        enabled: Whether model calls stream.
        chunk_timeout_ms: A gap between chunks longer than this is a stall.
        temperature: Sampling temperature.
        max_tokens: The output limit sent with each request.
        record_ttft: Whether time to first token is measured.
    """

    enabled: bool = True
    chunk_timeout_ms: int = 800
    temperature: float = 0.1
    max_tokens: int = 2048
    record_ttft: bool = True


@dataclass(frozen=True)
class PromptSettings:
    """Prompt trimming options.

    Attributes:
        token_budget: The most prompt tokens sent per model call.
        reserve_for_output: Tokens kept free in the context window for the answer.
        keep_system: Never drop system messages.
        keep_latest_user: Never drop the latest user message.
        trim_strategy: Only ``"priority"`` exists.
        priority_order: Which message class gets the budget first.
        history_keep_head: Oldest history rounds kept before the middle is trimmed.
        history_keep_tail: Newest history rounds kept before the middle is trimmed.
    """

    token_budget: int = 6000
    reserve_for_output: int = 2000
    keep_system: bool = True
    keep_latest_user: bool = True
    trim_strategy: str = "priority"
    priority_order: tuple[PriorityClass, ...] = PRIORITY_CLASSES
    history_keep_head: int = 2
    history_keep_tail: int = 4


@dataclass(frozen=True)
class MetricsSettings:
    """Latency thresholds and logging.

    Attributes:
        ttft_warn_ms: Time to first token above this logs a warning.
        ttft_error_ms: Time to first token above this logs an error.
        log_every_request: Log one INFO line per model call.
    """

    ttft_warn_ms: int = 1200
    ttft_error_ms: int = 2500
    log_every_request: bool = True


@dataclass(frozen=True)
class Settings:
    """Everything agent-latency reads from ``config.toml``, ``settings.json`` and the environment.

    Attributes:
        llm: The model channel.
        streaming: Streaming and generation options.
        prompt: Prompt trimming options.
        metrics: Latency thresholds and logging.
        sources: The files the values came from.
        warnings: Suspicious but legal values (e.g. a base_url that looks like a website).
    """

    llm: LLMSettings = field(default_factory=LLMSettings)
    streaming: StreamingSettings = field(default_factory=StreamingSettings)
    prompt: PromptSettings = field(default_factory=PromptSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    sources: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Key:
    """One leaf key of a file: where its value goes in Settings and what type it must have."""

    target: str  # "section.field" in Settings
    kind: str  # "int", "number", "bool", "str", "list"


_TOML_SCHEMA: Final[Mapping[str, Any]] = {
    "llm": {
        "base_url": _Key("llm.base_url", "str"),
        "api_key": _Key("llm.api_key", "str"),
        "model": _Key("llm.model", "str"),
        "timeout_seconds": _Key("llm.timeout_seconds", "number"),
        "context_window": _Key("llm.context_window", "int"),
        "max_tokens_param": _Key("llm.max_tokens_param", "str"),
        "streaming": {
            "enabled": _Key("streaming.enabled", "bool"),
            "chunk_timeout_ms": _Key("streaming.chunk_timeout_ms", "int"),
            "first_token_warn_ms": _Key("metrics.ttft_warn_ms", "int"),
        },
        "prompt": {
            "token_budget": _Key("prompt.token_budget", "int"),
            "reserve_for_output": _Key("prompt.reserve_for_output", "int"),
            "keep_system": _Key("prompt.keep_system", "bool"),
            "keep_latest_user": _Key("prompt.keep_latest_user", "bool"),
            "trim_strategy": _Key("prompt.trim_strategy", "str"),
        },
    }
}

_JSON_SCHEMA: Final[Mapping[str, Any]] = {
    "promptTrimmer": {
        "defaultBudget": _Key("prompt.token_budget", "int"),
        "reserveForOutput": _Key("prompt.reserve_for_output", "int"),
        "priorityOrder": _Key("prompt.priority_order", "list"),
        "historyKeepHead": _Key("prompt.history_keep_head", "int"),
        "historyKeepTail": _Key("prompt.history_keep_tail", "int"),
    },
    "streaming": {
        "enabled": _Key("streaming.enabled", "bool"),
        "temperature": _Key("streaming.temperature", "number"),
        "maxTokens": _Key("streaming.max_tokens", "int"),
        "recordTtft": _Key("streaming.record_ttft", "bool"),
    },
    "metrics": {
        "ttftWarnMs": _Key("metrics.ttft_warn_ms", "int"),
        "ttftErrorMs": _Key("metrics.ttft_error_ms", "int"),
        "logEveryRequest": _Key("metrics.log_every_request", "bool"),
    },
}

_KIND_NAMES: Final = {
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
}

# A value and the place it came from, e.g. "settings.json: promptTrimmer.defaultBudget".
_Found = dict[str, tuple[Any, str]]


def load_settings(
    config_path: str | os.PathLike[str] | None = None,
    settings_path: str | os.PathLike[str] | None = None,
) -> Settings:
    """Reads ``config.toml`` and ``settings.json`` into validated, immutable :class:`Settings`.

    Args:
        config_path: The TOML file. ``None`` reads ``config.toml`` in the working directory if it
            exists.
        settings_path: The JSON file. ``None`` reads ``settings.json`` in the working directory if
            it exists.

    Returns:
        The settings: defaults, then both files, then ``AGENT_LATENCY_BASE_URL``,
        ``AGENT_LATENCY_API_KEY`` and ``AGENT_LATENCY_MODEL``; ``OPENAI_API_KEY`` is the key
        only when no other key is set.

    Raises:
        ConfigError: Naming the file, key, bad value and fix, for a missing explicit file,
            malformed TOML/JSON, an unknown key, a wrong type, a value out of range, or the two
            files disagreeing.
    """
    found: _Found = {}
    sources: list[str] = []
    for path, default_name, parse, schema in (
        (config_path, DEFAULT_CONFIG_FILE, _parse_toml, _TOML_SCHEMA),
        (settings_path, DEFAULT_SETTINGS_FILE, _parse_json, _JSON_SCHEMA),
    ):
        resolved = _resolve(path, default_name)
        if resolved is None:
            continue
        sources.append(str(resolved))
        tree = parse(resolved)
        _merge(found, _collect(tree, schema, str(resolved), ()))
    _apply_environment(found)
    settings = _build(found)
    _validate(settings, found)
    warnings = base_url_warnings(settings.llm.base_url, _place(found, "llm.base_url"))
    for warning in warnings:
        logger.warning(warning)
    return replace(settings, sources=tuple(sources), warnings=tuple(warnings))


def with_channel_overrides(
    settings: Settings,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
) -> Settings:
    """Returns ``settings`` with the channel given on a command line, validated like the files.

    Args:
        settings: The loaded settings.
        base_url: ``--base-url``; replaces ``llm.base_url`` and its website warning.
        model: ``--model``.
        api_key: ``--api-key``.

    Raises:
        ConfigError: Naming the option, for a non-http(s) URL or an empty model or key.
    """
    llm, warnings = settings.llm, settings.warnings
    if base_url is not None:
        _check_base_url(base_url, "--base-url")
        llm = replace(llm, base_url=base_url)
        warnings = tuple(base_url_warnings(base_url, "--base-url"))
    if model is not None:
        if not model.strip():
            raise ConfigError("--model: must not be empty. Fix: write the model name.")
        llm = replace(llm, model=model)
    if api_key is not None:
        if not api_key.strip():
            raise ConfigError("--api-key: must not be empty. Fix: pass the key or leave it out.")
        llm = replace(llm, api_key=SecretStr(api_key))
    return replace(settings, llm=llm, warnings=warnings)


def _resolve(path: str | os.PathLike[str] | None, default_name: str) -> Path | None:
    if path is None:
        candidate = Path.cwd() / default_name
        return candidate if candidate.is_file() else None
    resolved = Path(path)
    if not resolved.is_file():
        raise ConfigError(
            f"{resolved}: file not found. Fix: check the path, or leave it out to use the "
            f"defaults (and {default_name} in the working directory if present)."
        )
    return resolved


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: editors on Windows often save UTF-8 with a byte-order mark.
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}). Fix: save the file as UTF-8."
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror}). Fix: check the file's permissions."
        ) from None


def _parse_toml(path: Path) -> Any:
    text = _read_text(path)  # outside the try: its ConfigError is a ValueError too
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ConfigError(
            f"{path}: malformed TOML: {exc}. Fix: correct the syntax there."
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{path}: TOML nested too deeply to read. Fix: flatten the nested arrays/tables."
        ) from None


def _parse_json(path: Path) -> Any:
    text = _read_text(path)  # outside the try: its ConfigError is a ValueError too
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}. "
            "Fix: correct the syntax there (JSON allows no comments or trailing commas)."
        ) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise ConfigError(f"{path}: unreadable JSON number: {exc}. Fix: shorten it.") from None
    except RecursionError:
        raise ConfigError(
            f"{path}: JSON nested too deeply to read. Fix: flatten the nested lists/objects."
        ) from None


def _collect(tree: Any, schema: Mapping[str, Any], file: str, prefix: tuple[str, ...]) -> _Found:
    """Walks a parsed file along its schema, checking keys and types."""
    where = ".".join(prefix) or "the top level"
    if not isinstance(tree, dict):
        raise ConfigError(
            f"{file}: {where} must be a table/object, got {_type_name(tree)}. "
            "Fix: see examples/ for the expected layout."
        )
    found: _Found = {}
    for key, value in tree.items():
        path = (*prefix, key)
        place = f"{file}: {'.'.join(path)}"
        spec = schema.get(key)
        if spec is None:
            # repr() keeps a key holding a newline or control character on the message's line.
            shown = key if key.isprintable() else repr(key)
            raise ConfigError(
                f"{file}: {'.'.join((*prefix, shown))}: unknown key. Fix: {_suggest(key, schema)}"
            )
        if isinstance(spec, _Key):
            found[spec.target] = (_checked(value, spec, place), place)
        else:
            found.update(_collect(value, spec, file, path))
    return found


def _suggest(key: str, schema: Mapping[str, Any]) -> str:
    known = sorted(schema)
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}? Known keys here: {', '.join(known)}."
    return f"remove it; known keys here: {', '.join(known)}."


def _type_name(value: Any) -> str:
    return {dict: "a table/object", list: "a list", bool: "a boolean", str: "a string"}.get(
        type(value), type(value).__name__
    )


def _checked(value: Any, spec: _Key, place: str) -> Any:
    is_bool = isinstance(value, bool)
    ok = {
        "int": isinstance(value, int) and not is_bool,
        "number": isinstance(value, int | float) and not is_bool,
        "bool": is_bool,
        "str": isinstance(value, str),
        "list": isinstance(value, list),
    }[spec.kind]
    if not ok:
        shown = "the value" if spec.target == "llm.api_key" else repr(value)
        raise ConfigError(
            f"{place}: expected {_KIND_NAMES[spec.kind]}, got {_type_name(value)} ({shown}). "
            f"Fix: write {_KIND_NAMES[spec.kind]} there."
        )
    # Only floats can be inf/nan; math.isfinite overflows on integers beyond float range.
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{place}: {value!r} is not a finite number. Fix: write a number.")
    if spec.kind == "list":
        return tuple(value)
    return value


def _merge(found: _Found, new: _Found) -> None:
    """Adds one file's values, refusing a value the other file sets differently."""
    for target, (value, place) in new.items():
        if target in found and found[target][0] != value:
            first_value, first_place = found[target]
            raise ConfigError(
                f"{first_place} = {first_value!r} disagrees with {place} = {value!r}. "
                "Fix: set it in one file only, or make both equal."
            )
        found[target] = (value, place)


def _apply_environment(found: _Found) -> None:
    for variable, target in (
        (ENV_BASE_URL, "llm.base_url"),
        (ENV_MODEL, "llm.model"),
        (ENV_API_KEY, "llm.api_key"),
    ):
        value = os.environ.get(variable)
        if value:
            found[target] = (value, f"environment {variable}")
    # OPENAI_API_KEY only fills a gap: it must not replace a key configured for another endpoint
    # (that would send the OpenAI key to a third party and fail authentication there).
    openai_key = os.environ.get(ENV_OPENAI_API_KEY)
    if openai_key and "llm.api_key" not in found:
        found["llm.api_key"] = (openai_key, f"environment {ENV_OPENAI_API_KEY}")


def _build(found: _Found) -> Settings:
    sections: dict[str, dict[str, Any]] = {}
    for target, (value, _) in found.items():
        section, name = target.split(".")
        if target == "llm.api_key":
            value = SecretStr(value)
        sections.setdefault(section, {})[name] = value
    defaults = Settings()
    return Settings(
        **{
            name: replace(getattr(defaults, name), **sections.get(name, {}))
            for name in ("llm", "streaming", "prompt", "metrics")
        }
    )


def _place(found: _Found, target: str) -> str:
    return found[target][1] if target in found else f"default {target}"


_Check = tuple[str, Callable[[Any], bool], str]

_FIELD_CHECKS: Final[tuple[_Check, ...]] = (
    ("llm.model", lambda v: bool(v.strip()), "must not be empty; write the model name"),
    ("llm.timeout_seconds", lambda v: v > 0, "must be > 0; e.g. 60"),
    (
        "llm.context_window",
        lambda v: v is None or v > 0,
        "must be > 0; write the model's context limit in tokens",
    ),
    (
        "llm.max_tokens_param",
        lambda v: v in MAX_TOKENS_PARAMS,
        f"must be one of {', '.join(MAX_TOKENS_PARAMS)}",
    ),
    ("streaming.chunk_timeout_ms", lambda v: v > 0, "must be > 0; e.g. 800"),
    ("streaming.temperature", lambda v: 0 <= v <= 2, "must be within [0, 2]; 0.1-0.3 for agents"),
    ("streaming.max_tokens", lambda v: v > 0, "must be > 0; e.g. 2048"),
    ("prompt.token_budget", lambda v: v > 0, "must be > 0; e.g. 6000"),
    ("prompt.reserve_for_output", lambda v: v >= 0, "must be >= 0; e.g. 2000"),
    ("prompt.trim_strategy", lambda v: v == "priority", "must be 'priority' (the only strategy)"),
    (
        "prompt.priority_order",
        lambda v: all(isinstance(c, str) for c in v) and sorted(v) == sorted(PRIORITY_CLASSES),
        f"must list each of {', '.join(PRIORITY_CLASSES)} exactly once",
    ),
    ("prompt.history_keep_head", lambda v: v >= 0, "must be >= 0; e.g. 2"),
    ("prompt.history_keep_tail", lambda v: v >= 0, "must be >= 0; e.g. 4"),
    ("metrics.ttft_warn_ms", lambda v: v > 0, "must be > 0; e.g. 1200"),
    ("metrics.ttft_error_ms", lambda v: v > 0, "must be > 0; e.g. 2500"),
)


def _validate(settings: Settings, found: _Found) -> None:
    for target, check, fix in _FIELD_CHECKS:
        section, name = target.split(".")
        value = getattr(getattr(settings, section), name)
        if not check(value):
            raise ConfigError(f"{_place(found, target)}: {value!r} is invalid. Fix: it {fix}.")
    metrics = settings.metrics
    if metrics.ttft_warn_ms > metrics.ttft_error_ms:
        raise ConfigError(
            f"{_place(found, 'metrics.ttft_warn_ms')} = {metrics.ttft_warn_ms} is above "
            f"{_place(found, 'metrics.ttft_error_ms')} = {metrics.ttft_error_ms}. "
            "Fix: the warning threshold must not exceed the error threshold."
        )
    prompt, window = settings.prompt, settings.llm.context_window
    if window is not None and prompt.token_budget + prompt.reserve_for_output > window:
        raise ConfigError(
            f"{_place(found, 'prompt.token_budget')} = {prompt.token_budget} plus "
            f"{_place(found, 'prompt.reserve_for_output')} = {prompt.reserve_for_output} exceeds "
            f"{_place(found, 'llm.context_window')} = {window}. A budget equal to the model limit "
            "leaves no room for the answer. Fix: lower token_budget to at most "
            f"{window - prompt.reserve_for_output}."
        )
    if settings.llm.base_url is not None:
        _check_base_url(settings.llm.base_url, _place(found, "llm.base_url"))


def is_http_url(url: object) -> bool:
    """Whether ``url`` is an absolute http(s) URL with a host."""
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False


def _check_base_url(base_url: str, place: str) -> None:
    if not is_http_url(base_url):
        raise ConfigError(
            f"{place}: {base_url!r} is not an http(s) URL. "
            "Fix: write the API root, e.g. https://api.example.com/v1."
        )


_API_SEGMENTS: Final = frozenset({"api", "openai", "compatible-mode", "inference", "llm"})


def base_url_warnings(base_url: str | None, place: str) -> list[str]:
    """Flags a base_url that looks like a website home page rather than an API root."""
    if base_url is None:
        return []
    last = urlsplit(base_url).path.rstrip("/").rsplit("/", 1)[-1].lower()
    is_version = last[:1] == "v" and last[1:2].isdigit()
    if is_version or last in _API_SEGMENTS:
        return []
    return [
        f"{place}: {base_url!r} looks like a website rather than an API root (its path does not "
        "end in an API segment such as /v1 or /api). Requests will likely get 404 or an HTML "
        "page. Fix: use the API base URL from the provider's docs, e.g. https://host/v1."
    ]
