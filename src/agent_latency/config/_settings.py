"""Settings from ``config.toml`` (the channel, streaming switches, the prompt budget) and
``settings.json`` (trimmer, streaming and metrics options in camelCase), both optional.

Where both set the same thing and disagree, loading fails and names both places; environment
variables override the channel. Schemas and checks come from the declarations (:data:`SETTINGS`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal, cast, get_args

from pydantic import SecretStr

from agent_latency._redaction import display_url
from agent_latency._server_usage import MAX_REPORTED_TOKENS
from agent_latency._validation import file_problem
from agent_latency.config._channel import (
    base_url_warnings,
    check_base_url,
    checked_key,
    output_limit_field,
    refuse_placeholder,
)
from agent_latency.config._declared import Setting, declarations, documented, setting
from agent_latency.config._sources import (
    ENV_MODEL,
    FileSchema,
    Found,
    Key,
    apply_environment,
    collect,
    merge,
    parse_json,
    parse_toml,
    resolve,
)
from agent_latency.config._sources import ConfigError as ConfigError
from agent_latency.tokens import TOKENIZER_CHOICES, VOCABULARY_NAMES

logger = logging.getLogger("agent_latency.config")

PriorityClass = Literal["system", "latest_user", "tool_result", "history"]
"""The message classes ``prompt.priority_order`` ranks (docs/trimming.md)."""
PRIORITY_CLASSES: Final[tuple[PriorityClass, ...]] = get_args(PriorityClass)
"""Every priority class, in the default order: the first gets the budget first."""
MaxTokensParam = Literal["auto", "max_tokens", "max_completion_tokens"]
"""Which request field carries the output limit (``llm.max_tokens_param``)."""
MAX_TOKENS_PARAMS: Final[tuple[MaxTokensParam, ...]] = get_args(MaxTokensParam)
HistorySelection = Literal["cache_first", "age"]
"""How the trimmer picks which middle history rounds to keep (docs/configuration.md)."""
HISTORY_SELECTIONS: Final[tuple[HistorySelection, ...]] = get_args(HistorySelection)
TrimMode = Literal["prefix_stable", "moving_cut"]
"""How cuts are placed: where the server's prefix cache keeps hitting (``"prefix_stable"``) or
the newest that fit (``"moving_cut"``); docs/trimming.md says which wins where."""
TRIM_MODES: Final[tuple[TrimMode, ...]] = get_args(TrimMode)
_REMOVED_VALUES: Final = {
    "prompt.mode": (
        "cost_aware",
        "never 10% sooner than prefix_stable, docs/trimming.md",
        '"prefix_stable", the default, which now cuts cache-first',
    ),
    "prompt.history_selection": (
        "relevance",
        "cache_first re-prefills far less and keeps more evidence, docs/benchmarks.md",
        '"cache_first", the default (to rank the history by relevance on every call, set mode '
        '"moving_cut", or prefix_stable=False in code)',
    ),
}
"""Values removed in favour of the cache-first default, by setting: (value, why, what to set)."""
DEFAULT_CONFIG_FILE: Final = "config.toml"
DEFAULT_SETTINGS_FILE: Final = "settings.json"
MAX_SECONDS: Final = 86_400
"""The longest duration a setting takes: longer timeouts overflow the clocks beneath httpx."""
MAX_MILLISECONDS: Final = MAX_SECONDS * 1000
"""The longest duration a setting in milliseconds takes (a day)."""
MAX_ROUNDS: Final = 1_000_000
"""The most history rounds a setting counts: more than any context window holds."""
_MILLISECONDS: Final[dict[str, Any]] = {
    "minimum": 0,
    "above": True,
    "maximum": MAX_MILLISECONDS,
    "note": " (a day)",
}
_ROUNDS: Final[dict[str, Any]] = {"minimum": 0, "maximum": MAX_ROUNDS}
_TOKENS: Final[dict[str, Any]] = {"minimum": 0, "above": True, "maximum": MAX_REPORTED_TOKENS}


@documented
@dataclass(frozen=True)
class LLMSettings:
    """The model channel: one OpenAI-compatible endpoint and key for many models.

    The repr shows ``base_url`` without user info, query or fragment and masks the key."""

    base_url: str | None = setting(
        None,
        "the API root of the OpenAI-compatible endpoint, e.g. `https://api.example.com/v1`; "
        "unset: OpenAI's",
        toml="llm.base_url",
        accepts=(
            "string, http(s) URL, port 0–65535, no `user:password@`, query, fragment, space or "
            "control character"
        ),
    )
    api_key: SecretStr | None = setting(
        None,
        "the key; never logged, traced or printed; surrounding whitespace is removed",
        toml="llm.api_key",
        accepts="string of printable ASCII",
    )
    model: str = setting(
        "qwen-7b-chat",
        "the model name; switching models is this one field",
        toml="llm.model",
        rule=(
            lambda v: bool(v.strip()) and v == v.strip(),
            "must be the model name alone: not empty, no space, tab or line end at either end "
            "(a '\\r' often comes from a .env file saved on Windows)",
        ),
    )
    timeout_seconds: float = setting(
        60.0,
        "request timeout (at most a day: longer ones overflow the clocks beneath httpx)",
        toml="llm.timeout_seconds",
        minimum=0,
        above=True,
        maximum=MAX_SECONDS,
        note=" (a day)",
    )
    context_window: int | None = setting(
        None,
        "the model's context limit in tokens; enables the check that `token_budget` plus "
        "`reserve_for_output` fits it",
        toml="llm.context_window",
        **_TOKENS,
        example="write the model's context limit in tokens",
    )
    max_tokens_param: MaxTokensParam = setting(
        "auto",
        "which request field carries the output limit: `auto` sends `max_completion_tokens` to "
        "OpenAI and `max_tokens` to every other server (llama.cpp's Python server ignores "
        "`max_completion_tokens` and generates until its context is full)",
        toml="llm.max_tokens_param",
    )
    tokenizer: str | None = setting(
        None,
        "which tokenizer counts prompt tokens: a known name (`cl100k`, `o200k`, `qwen`, "
        "`llama3`, `server` — the endpoint's own tokenize route) or the path of a Hugging Face "
        "`tokenizer.json` on this machine (nothing is downloaded); unset: chosen from `model`",
        toml="llm.tokenizer",
        rule=(
            lambda v: v is None or bool(v.strip()),
            "must not be empty; write a tokenizer name or a tokenizer.json path, or leave it out",
        ),
    )

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


@documented
@dataclass(frozen=True)
class StreamingSettings:
    """Streaming and generation options."""

    enabled: bool = setting(
        True, "stream model calls", toml="llm.streaming.enabled", json="streaming.enabled"
    )
    chunk_timeout_ms: int = setting(
        800,
        "a gap between chunks longer than this is a stall",
        toml="llm.streaming.chunk_timeout_ms",
        **_MILLISECONDS,
    )
    temperature: float = setting(
        0.1,
        "sampling temperature; 0.1–0.3 keeps streamed agent answers short and stable",
        json="streaming.temperature",
        minimum=0,
        maximum=2,
        example="0.1-0.3 for agents",
    )
    max_tokens: int = setting(
        2000,
        "the output limit sent with each request; the default equals `reserveForOutput`, so a "
        "full prompt leaves room for a whole answer",
        json="streaming.maxTokens",
        **_TOKENS,
    )
    record_ttft: bool = setting(True, "measure time to first token", json="streaming.recordTtft")


@documented
@dataclass(frozen=True)
class PromptSettings:
    """Prompt trimming options; those naming a ``trimmer`` option set that
    ``PriorityTrimmer`` option in ``PriorityTrimmer.from_settings``."""

    token_budget: int = setting(
        6000,
        "the most prompt tokens per model call",
        toml="llm.prompt.token_budget",
        json="promptTrimmer.defaultBudget",
        **_TOKENS,
        trimmer="budget",
    )
    reserve_for_output: int = setting(
        2000,
        "tokens kept free in the context window for the answer",
        toml="llm.prompt.reserve_for_output",
        json="promptTrimmer.reserveForOutput",
        minimum=0,
        maximum=MAX_REPORTED_TOKENS,
    )
    keep_system: bool = setting(
        True, "never drop system messages", toml="llm.prompt.keep_system", trimmer="keep_system"
    )
    keep_latest_user: bool = setting(
        True,
        "never drop the latest user message (its middle may be shortened)",
        toml="llm.prompt.keep_latest_user",
        trimmer="keep_latest_user",
    )
    priority_order: tuple[PriorityClass, ...] = setting(
        PRIORITY_CLASSES,
        "which message class gets the budget first; a permutation of "
        + ", ".join(f"`{each}`" for each in PRIORITY_CLASSES),
        json="promptTrimmer.priorityOrder",
        rule=(
            lambda v: all(isinstance(c, str) for c in v) and sorted(v) == sorted(PRIORITY_CLASSES),
            f"must list each of {', '.join(PRIORITY_CLASSES)} exactly once",
        ),
        trimmer="priority_order",
    )
    # Chosen from the latency-quality frontier (docs/benchmarks.md): one head and one tail round
    # kept the needed facts best at every budget, on every server profile, for the prompt size.
    history_keep_head: int = setting(
        1,
        "oldest history rounds kept before the middle is trimmed, or at a cache-first cut "
        "(when the history is ranked by relevance, a preference that yields when they fill the "
        "budget)",
        json="promptTrimmer.historyKeepHead",
        **_ROUNDS,
        trimmer="history_keep_head",
    )
    history_keep_tail: int = setting(
        1,
        "newest history rounds kept before the middle is trimmed, or at a cache-first cut",
        json="promptTrimmer.historyKeepTail",
        **_ROUNDS,
        trimmer="history_keep_tail",
    )
    history_selection: HistorySelection = setting(
        "cache_first",
        "how history is cut: rarely and deep, appending in between, recalling what a question "
        "needs (`cache_first`: the server's prefix cache keeps hitting, "
        "[trimming.md](trimming.md#cache-first-cuts); with mode `moving_cut`, on every call, "
        "the rounds most relevant to the latest user message first), or the newest on every "
        "call (`age`); `relevance` was removed (a file naming it gets the fix: use "
        "`cache_first`)",
        json="promptTrimmer.historySelection",
        trimmer="history_selection",
    )
    compact_tool_results: bool = setting(
        False,
        "before whole history rounds are dropped, replace their tool results with a one-line "
        "stub that keeps the call and the result's first line (stable from call to call, so "
        "the prefix cache keeps matching)",
        json="promptTrimmer.compactToolResults",
        trimmer="compact_tool_results",
    )
    mode: TrimMode = setting(
        "prefix_stable",
        "how cuts are placed; `trimmer_from_settings(settings)` and "
        "`TrimmingMiddleware.from_settings(settings)` build the trimmer of this mode "
        "([trimming.md](trimming.md#which-mode-wins-where)); `cost_aware` was removed (a file "
        "naming it gets the fix: use `prefix_stable`), and with it "
        "`allow_over_budget_on_warm_cache`",
        toml="llm.prompt.mode",
        json="promptTrimmer.mode",
    )


@documented
@dataclass(frozen=True)
class MetricsSettings:
    """Latency thresholds and logging."""

    ttft_warn_ms: int = setting(
        1200,
        "time to first token above this logs a WARNING",
        toml="llm.streaming.first_token_warn_ms",
        json="metrics.ttftWarnMs",
        **_MILLISECONDS,
    )
    ttft_error_ms: int = setting(
        2500,
        "time to first token above this logs an ERROR",
        json="metrics.ttftErrorMs",
        **_MILLISECONDS,
    )
    log_every_request: bool = setting(
        True, "one INFO line per model call", json="metrics.logEveryRequest"
    )


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
    for path, parse, schema, other in (
        (config_path, parse_toml, TOML, JSON),
        (settings_path, parse_json, JSON, TOML),
    ):
        resolved = resolve(path, schema.name)
        if resolved is None:
            continue
        sources.append(str(resolved))
        merge(found, collect(parse(resolved), schema, other, str(resolved)))
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
        problem = _BY_TARGET["llm.model"].problem(model)
        if problem is not None:
            raise ConfigError(f"--model: {model!r} is invalid. Fix: it {problem}.")
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


SETTINGS: Final[tuple[Setting, ...]] = tuple(
    declarations(LLMSettings, StreamingSettings, PromptSettings, MetricsSettings)
)
"""Every setting, as declared."""
_BY_TARGET: Final = {each.target: each for each in SETTINGS}
TOML: Final = FileSchema(
    DEFAULT_CONFIG_FILE,
    {each.declared.toml: Key(each.target, each.kind) for each in SETTINGS if each.declared.toml},
)
"""The keys of ``config.toml``."""
JSON: Final = FileSchema(
    DEFAULT_SETTINGS_FILE,
    {each.declared.json: Key(each.target, each.kind) for each in SETTINGS if each.declared.json},
)
"""The keys of ``settings.json``."""


def _place(found: Found, target: str) -> str:
    return found[target][1] if target in found else f"default {target}"


def _key(found: Found, target: str) -> str:
    """The key the user set for ``target`` (``"promptTrimmer.defaultBudget"``), as a fix names it.

    A value left at its default is named by its ``config.toml`` key (``llm.prompt.token_budget``).
    """
    if target in found:
        return found[target][1].split(": ", 1)[-1]
    return cast(str, _BY_TARGET[target].declared.toml)


def removed_value(target: str, value: object, key: str) -> str | None:
    """Why ``value`` of the setting ``target`` was removed and the fix, or ``None`` when it was not.

    Where the value is set, a file or a keyword option, names it ``key``; e.g. for
    ``("prompt.history_selection", "relevance", "history_selection")``: ``'relevance' was removed
    (cache_first re-prefills far less ...). Fix: set history_selection to "cache_first", ...``.
    """
    removal = _REMOVED_VALUES.get(target)
    if removal is None or value != removal[0]:
        return None
    removed, why, fix = removal
    return f"{removed!r} was removed ({why}). Fix: set {key} to {fix}."


def _validate(settings: Settings, found: Found) -> None:
    refuse_placeholder(settings.llm.model, _place(found, "llm.model"), ENV_MODEL)
    # A loaded file's choice is any string until checked: a removed one gets its own fix.
    for target in _REMOVED_VALUES:
        if target in found:
            removal = removed_value(target, found[target][0], _key(found, target))
            if removal is not None:
                raise ConfigError(f"{_place(found, target)}: {removal}")
    for each in SETTINGS:
        section, name = each.target.split(".")
        value = getattr(getattr(settings, section), name)
        if each.violated(value):
            raise ConfigError(
                f"{_place(found, each.target)}: {value!r} is invalid. Fix: it {each.requirement}."
            )
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
    tokenizer = settings.llm.tokenizer
    problem = None if tokenizer is None else _tokenizer_problem(tokenizer)
    if problem is not None:
        raise ConfigError(f"{_place(found, 'llm.tokenizer')}: {tokenizer!r} {problem}")


def _tokenizer_problem(tokenizer: str) -> str | None:
    """What is wrong with an ``llm.tokenizer`` (a known name, ``server`` or a file), found
    without reading it: the counter would say so only when first built, naming neither the
    file nor the key."""
    if tokenizer.strip().lower() in (*VOCABULARY_NAMES, "server"):
        return None
    problem = file_problem(tokenizer)
    if problem is None:
        return None
    if tokenizer.endswith(".json") or "/" in tokenizer or os.sep in tokenizer:
        return (
            f"names no tokenizer.json to read ({problem}). Fix: give the path of the model's "
            "tokenizer.json on this machine (nothing is downloaded), or a known name."
        )
    return f"is no known tokenizer. Fix: use one of {', '.join(TOKENIZER_CHOICES)}."
