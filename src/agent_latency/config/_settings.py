"""Settings from the two files users already keep: ``config.toml`` and ``settings.json``.

``config.toml`` holds the channel (``[llm]``), streaming switches and the prompt budget;
``settings.json`` holds the trimmer, streaming and metrics options in camelCase. Both are
optional. Where both set the same thing and disagree, loading fails and names both places, so a
stale copy never wins silently. Environment variables override the channel fields.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal, cast, get_args

from pydantic import SecretStr

from agent_latency._redaction import display_url
from agent_latency._server_usage import MAX_REPORTED_TOKENS
from agent_latency.config._channel import (
    base_url_warnings,
    check_base_url,
    checked_key,
    output_limit_field,
)
from agent_latency.config._sources import (
    JSON_SCHEMA,
    TOML_KEYS,
    TOML_SCHEMA,
    Found,
    apply_environment,
    collect,
    merge,
    parse_json,
    parse_toml,
    resolve,
)
from agent_latency.config._sources import ConfigError as ConfigError

logger = logging.getLogger("agent_latency.config")

PriorityClass = Literal["system", "latest_user", "tool_result", "history"]
"""The message classes ``prompt.priority_order`` ranks (docs/trimming.md)."""
PRIORITY_CLASSES: Final[tuple[PriorityClass, ...]] = get_args(PriorityClass)
"""Every priority class, in the default order: the first gets the budget first."""
MAX_TOKENS_PARAMS: Final = ("auto", "max_tokens", "max_completion_tokens")
HistorySelection = Literal["cache_first", "relevance", "age"]
"""How the trimmer picks which middle history rounds to keep (docs/configuration.md)."""
HISTORY_SELECTIONS: Final[tuple[HistorySelection, ...]] = get_args(HistorySelection)
TrimMode = Literal["prefix_stable", "moving_cut"]
"""How cuts are placed: where the server's prefix cache keeps hitting (``"prefix_stable"``) or
the newest that fit (``"moving_cut"``); docs/trimming.md says which wins where."""
TRIM_MODES: Final[tuple[TrimMode, ...]] = get_args(TrimMode)
REMOVED_MODE: Final = "cost_aware"
"""The mode removed in favour of the cache-first default: a file that names it gets its fix."""
DEFAULT_CONFIG_FILE: Final = "config.toml"
DEFAULT_SETTINGS_FILE: Final = "settings.json"
MAX_SECONDS: Final = 86_400
"""The longest duration a setting takes: longer timeouts overflow the clocks beneath httpx."""
MAX_MILLISECONDS: Final = MAX_SECONDS * 1000
"""The longest duration a setting in milliseconds takes (a day)."""
MAX_ROUNDS: Final = 1_000_000
"""The most history rounds a setting counts: more than any context window holds."""


@dataclass(frozen=True)
class LLMSettings:
    """The model channel: one OpenAI-compatible endpoint and key for many models.

    Attributes:
        base_url: The API root, e.g. ``https://api.example.com/v1``; ``None`` uses OpenAI's.
            The repr shows it without user info, query or fragment.
        api_key: The key, masked in every repr.
        model: The model name sent with each request.
        timeout_seconds: The request timeout.
        context_window: The model's context limit in tokens, when known.
        max_tokens_param: Which request field carries the output limit: ``"max_tokens"``,
            ``"max_completion_tokens"``, or ``"auto"`` (the latter for OpenAI itself, the former
            for every other server).
        tokenizer: Which tokenizer counts prompt tokens: a known name (e.g. ``"cl100k"``,
            ``"o200k"``, ``"qwen"``, ``"llama3"``, ``"server"``) or the path of a
            ``tokenizer.json``; ``None`` chooses from ``model``.
        cache_lifetime_seconds: How long the endpoint keeps an idle prompt prefix cached;
            ``None`` uses the provider's documented default.
    """

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "qwen-7b-chat"
    timeout_seconds: float = 60.0
    context_window: int | None = None
    max_tokens_param: str = "auto"
    tokenizer: str | None = None
    cache_lifetime_seconds: float | None = None

    @property
    def output_limit_field(self) -> str:
        """The request field that carries the output limit at this endpoint (see
        ``max_tokens_param``): ``"max_completion_tokens"`` for OpenAI, ``"max_tokens"`` else."""
        return output_limit_field(self.max_tokens_param, self.base_url)

    def __repr__(self) -> str:
        # The URL without user info or query: credentials there must not reach logs.
        shown = {each.name: getattr(self, each.name) for each in fields(self)}
        if self.base_url is not None:
            shown["base_url"] = display_url(self.base_url)
        return f"LLMSettings({', '.join(f'{name}={value!r}' for name, value in shown.items())})"


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
    max_tokens: int = 2000  # = prompt.reserve_for_output: the answer fits the room kept free
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
        history_selection: Which middle history rounds are kept first: the newest (``"age"``)
            or those most relevant to the latest user message (``"relevance"``).
        compact_tool_results: Before whole history rounds are dropped, replace their tool
            results with a one-line stub (the call stays).
        mode: How cuts are placed (:data:`TrimMode`); ``trimmer_from_settings`` builds the
            trimmer of that mode.
    """

    token_budget: int = 6000
    reserve_for_output: int = 2000
    keep_system: bool = True
    keep_latest_user: bool = True
    trim_strategy: str = "priority"
    priority_order: tuple[PriorityClass, ...] = PRIORITY_CLASSES
    # Chosen from the latency-quality frontier (docs/benchmarks.md): ranking the history by
    # relevance with one head and one tail round kept the needed facts best at every budget, on
    # every server profile, for the same prompt size.
    history_keep_head: int = 1
    history_keep_tail: int = 1
    history_selection: HistorySelection = "cache_first"
    compact_tool_results: bool = False
    mode: TrimMode = "prefix_stable"


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
    found: Found = {}
    sources: list[str] = []
    for path, default_name, parse, schema in (
        (config_path, DEFAULT_CONFIG_FILE, parse_toml, TOML_SCHEMA),
        (settings_path, DEFAULT_SETTINGS_FILE, parse_json, JSON_SCHEMA),
    ):
        resolved = resolve(path, default_name)
        if resolved is None:
            continue
        sources.append(str(resolved))
        merge(found, collect(parse(resolved), schema, str(resolved)))
    apply_environment(found)
    if "llm.api_key" in found:
        key, place = found["llm.api_key"]
        found["llm.api_key"] = (checked_key(key, place), place)
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
        ConfigError: Naming the option, for a bad URL (see :func:`check_base_url`), an empty
            model, or an empty or non-ASCII key.
    """
    llm, warnings = settings.llm, settings.warnings
    if base_url is not None:
        check_base_url(base_url, "--base-url")
        llm = replace(llm, base_url=base_url)
        warnings = tuple(base_url_warnings(base_url, "--base-url"))
    if model is not None:
        if not model.strip():
            raise ConfigError("--model: must not be empty. Fix: write the model name.")
        llm = replace(llm, model=model)
    if api_key is not None:
        llm = replace(llm, api_key=SecretStr(checked_key(api_key, "--api-key")))
    return replace(settings, llm=llm, warnings=warnings)


def _build(found: Found) -> Settings:
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


def _place(found: Found, target: str) -> str:
    return found[target][1] if target in found else f"default {target}"


def _key(found: Found, target: str) -> str:
    """The key the user set for ``target`` (``"promptTrimmer.defaultBudget"``), as a fix names it.

    A value left at its default is named by its ``config.toml`` key (``llm.prompt.token_budget``).
    """
    if target in found:
        return found[target][1].split(": ", 1)[-1]
    return next(key for key, target_of in TOML_KEYS.items() if target_of == target)


_Check = tuple[str, Callable[[Any], bool], str]

_FIELD_CHECKS: Final[tuple[_Check, ...]] = (
    ("llm.model", lambda v: bool(v.strip()), "must not be empty; write the model name"),
    (
        "llm.timeout_seconds",
        lambda v: 0 < v <= MAX_SECONDS,
        f"must be > 0 and at most {MAX_SECONDS} (a day); e.g. 60",
    ),
    (
        "llm.tokenizer",
        lambda v: v is None or bool(v.strip()),
        "must not be empty; write a tokenizer name or a tokenizer.json path, or leave it out",
    ),
    (
        "llm.cache_lifetime_seconds",
        lambda v: v is None or 0 <= v <= MAX_SECONDS,
        f"must be >= 0 and at most {MAX_SECONDS} (a day); e.g. 300",
    ),
    (
        "llm.context_window",
        lambda v: v is None or 0 < v <= MAX_REPORTED_TOKENS,
        f"must be > 0 and at most {MAX_REPORTED_TOKENS:,}; write the model's context limit in "
        "tokens",
    ),
    (
        "llm.max_tokens_param",
        lambda v: v in MAX_TOKENS_PARAMS,
        f"must be one of {', '.join(MAX_TOKENS_PARAMS)}",
    ),
    (
        "streaming.chunk_timeout_ms",
        lambda v: 0 < v <= MAX_MILLISECONDS,
        f"must be > 0 and at most {MAX_MILLISECONDS:,} (a day); e.g. 800",
    ),
    ("streaming.temperature", lambda v: 0 <= v <= 2, "must be within [0, 2]; 0.1-0.3 for agents"),
    (
        "streaming.max_tokens",
        lambda v: 0 < v <= MAX_REPORTED_TOKENS,
        f"must be > 0 and at most {MAX_REPORTED_TOKENS:,}; e.g. 2000",
    ),
    (
        "prompt.token_budget",
        lambda v: 0 < v <= MAX_REPORTED_TOKENS,
        f"must be > 0 and at most {MAX_REPORTED_TOKENS:,}; e.g. 6000",
    ),
    (
        "prompt.reserve_for_output",
        lambda v: 0 <= v <= MAX_REPORTED_TOKENS,
        f"must be >= 0 and at most {MAX_REPORTED_TOKENS:,}; e.g. 2000",
    ),
    ("prompt.trim_strategy", lambda v: v == "priority", "must be 'priority' (the only strategy)"),
    (
        "prompt.priority_order",
        lambda v: all(isinstance(c, str) for c in v) and sorted(v) == sorted(PRIORITY_CLASSES),
        f"must list each of {', '.join(PRIORITY_CLASSES)} exactly once",
    ),
    (
        "prompt.history_keep_head",
        lambda v: 0 <= v <= MAX_ROUNDS,
        f"must be >= 0 and at most {MAX_ROUNDS:,}; e.g. 1",
    ),
    (
        "prompt.history_keep_tail",
        lambda v: 0 <= v <= MAX_ROUNDS,
        f"must be >= 0 and at most {MAX_ROUNDS:,}; e.g. 1",
    ),
    (
        "prompt.history_selection",
        lambda v: v in HISTORY_SELECTIONS,
        f"must be one of {', '.join(HISTORY_SELECTIONS)}",
    ),
    ("prompt.mode", lambda v: v in TRIM_MODES, f"must be one of {', '.join(TRIM_MODES)}"),
    (
        "metrics.ttft_warn_ms",
        lambda v: 0 < v <= MAX_MILLISECONDS,
        f"must be > 0 and at most {MAX_MILLISECONDS:,} (a day); e.g. 1200",
    ),
    (
        "metrics.ttft_error_ms",
        lambda v: 0 < v <= MAX_MILLISECONDS,
        f"must be > 0 and at most {MAX_MILLISECONDS:,} (a day); e.g. 2500",
    ),
)


def _validate(settings: Settings, found: Found) -> None:
    # A loaded file's mode is any string until checked: the removed one gets its own fix.
    if cast("str", settings.prompt.mode) == REMOVED_MODE:
        raise ConfigError(
            f"{_place(found, 'prompt.mode')}: {REMOVED_MODE!r} was removed (never 10% sooner "
            f"than prefix_stable, docs/trimming.md). Fix: set {_key(found, 'prompt.mode')} to "
            '"prefix_stable", the default, which now cuts cache-first.'
        )
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
            f"leaves no room for the answer. Fix: lower {_key(found, 'prompt.token_budget')} to "
            f"at most {window - prompt.reserve_for_output}."
        )
    if settings.llm.base_url is not None:
        check_base_url(settings.llm.base_url, _place(found, "llm.base_url"))
