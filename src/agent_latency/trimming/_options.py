"""The trimmer's options: one frozen value, checked once, when it is made."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, cast

from opentelemetry.trace import TracerProvider

from agent_latency._server_usage import MAX_REPORTED_TOKENS
from agent_latency._validation import checked_bool, checked_int
from agent_latency.config import (
    HISTORY_SELECTIONS,
    PRIORITY_CLASSES,
    HistorySelection,
    PriorityClass,
    PromptSettings,
)
from agent_latency.tokens import PromptCalibration, TokenCounting
from agent_latency.trimming._request import extras
from agent_latency.trimming._shortening import MIN_SHORTENED_TOKENS

DEFAULT_BUDGET_FRACTION = 4
"""``max_tool_result_tokens`` and ``prefix_step_tokens`` default to a quarter of the budget."""

_OWNER = "PriorityTrimmer"

_SETTINGS = PromptSettings()
"""The trimmer's defaults are the settings' defaults: one source for both."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrimOptions:
    """Everything a :class:`~agent_latency.trimming.PriorityTrimmer` is told, checked.

    The fields are :class:`~agent_latency.trimming.PriorityTrimmer`'s keyword options (its
    docstring says what each means) as given, ``None`` standing for a default that depends on
    the budget (:attr:`tool_result_cap`, :attr:`step_tokens` resolve it), so that
    ``dataclasses.replace(options, budget=...)`` moves those defaults with the budget.
    Sequences are stored as tuples, ``pinned_tools`` as a frozenset.

    Raises:
        ValueError: When an option is invalid: ``"PriorityTrimmer: <name> must be ..."``, naming
            what it accepts.
    """

    budget: int = _SETTINGS.token_budget
    priority_order: tuple[PriorityClass, ...] = _SETTINGS.priority_order
    keep_system: bool = _SETTINGS.keep_system
    keep_latest_user: bool = _SETTINGS.keep_latest_user
    history_keep_head: int = _SETTINGS.history_keep_head
    history_keep_tail: int = _SETTINGS.history_keep_tail
    history_selection: HistorySelection = _SETTINGS.history_selection
    compact_tool_results: bool = _SETTINGS.compact_tool_results
    max_tool_result_tokens: int | None = None
    prefix_stable: bool = True
    prefix_step_tokens: int | None = None
    tools: tuple[object, ...] = ()
    response_format: object | None = None
    tool_budget: int | None = None
    pinned_tools: frozenset[str] = frozenset()
    token_counter: TokenCounting | None = None
    calibration: PromptCalibration | None = None
    tracer_provider: TracerProvider | None = None

    def __post_init__(self) -> None:
        checked_int(_OWNER, "budget", self.budget, minimum=1, hint="prompt tokens per model call")
        if self.budget > MAX_REPORTED_TOKENS:
            raise ValueError(
                f"PriorityTrimmer: budget must be at most {MAX_REPORTED_TOKENS:,} (more prompt "
                f"tokens than any context window holds), got {self.budget!r}."
            )
        self._set("priority_order", _validated_order(self.priority_order))
        checked_bool(_OWNER, "keep_system", self.keep_system)
        checked_bool(_OWNER, "keep_latest_user", self.keep_latest_user)
        checked_int(
            _OWNER, "history_keep_head", self.history_keep_head, minimum=0, hint="rounds; e.g. 2"
        )
        checked_int(
            _OWNER, "history_keep_tail", self.history_keep_tail, minimum=0, hint="rounds; e.g. 4"
        )
        if self.history_selection not in HISTORY_SELECTIONS:
            raise ValueError(
                f"PriorityTrimmer: history_selection must be one of "
                f"{', '.join(HISTORY_SELECTIONS)}, got {self.history_selection!r}."
            )
        checked_bool(_OWNER, "compact_tool_results", self.compact_tool_results)
        checked_int(
            _OWNER,
            "max_tool_result_tokens",
            self.tool_result_cap,
            minimum=MIN_SHORTENED_TOKENS,
            hint="a shortened result keeps framing, a marker and some text; or None for budget/4",
        )
        checked_bool(_OWNER, "prefix_stable", self.prefix_stable)
        step = checked_int(
            _OWNER, "prefix_step_tokens", self.step_tokens, minimum=1, hint="or None for budget/4"
        )
        if step > self.budget:
            raise ValueError(
                f"PriorityTrimmer: prefix_step_tokens must not exceed the budget ({self.budget}), "
                f"got {step}; use e.g. {self._default_share} (budget/4)."
            )
        if self.token_counter is not None and not isinstance(self.token_counter, TokenCounting):
            raise ValueError(
                "PriorityTrimmer: token_counter must be an agent_latency.TokenCounter (or another "
                f"TokenCounting) or None, got {type(self.token_counter).__name__}."
            )
        if self.calibration is not None and not isinstance(self.calibration, PromptCalibration):
            raise ValueError(
                "PriorityTrimmer: calibration must be a PromptCalibration or None, got "
                f"{type(self.calibration).__name__}; PriorityTrimmer.from_settings makes one."
            )
        self._set("tools", extras(self.tools).tools)
        if self.tool_budget is not None:
            checked_int(
                _OWNER,
                "tool_budget",
                self.tool_budget,
                minimum=1,
                hint="tokens of tool definitions",
            )
        self._set("pinned_tools", _tool_names(self.pinned_tools))

    @property
    def tool_result_cap(self) -> int:
        """``max_tool_result_tokens``, or its default: a quarter of the budget, at least 32."""
        if self.max_tool_result_tokens is None:
            return max(self._default_share, MIN_SHORTENED_TOKENS)
        return self.max_tool_result_tokens

    @property
    def step_tokens(self) -> int:
        """``prefix_step_tokens``, or its default: a quarter of the budget, at least 1."""
        if self.prefix_step_tokens is None:
            return max(self._default_share, 1)
        return self.prefix_step_tokens

    @property
    def cut_step(self) -> int:
        """What a cut is rounded up to: :attr:`step_tokens` with ``prefix_stable``, else 1."""
        return self.step_tokens if self.prefix_stable else 1

    @property
    def _default_share(self) -> int:
        return self.budget // DEFAULT_BUDGET_FRACTION

    def _set(self, name: str, value: object) -> None:
        # The one place a frozen value is written: its own normalisation, while it is made.
        object.__setattr__(self, name, value)


def _validated_order(value: object) -> tuple[PriorityClass, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or sorted(map(str, value)) != sorted(PRIORITY_CLASSES)
        or len(value) != len(PRIORITY_CLASSES)
    ):
        raise ValueError(
            f"PriorityTrimmer: priority_order must list each of {', '.join(PRIORITY_CLASSES)} "
            f"exactly once, highest priority first; got {value!r}."
        )
    return cast(tuple[PriorityClass, ...], tuple(value))


def _tool_names(value: object) -> frozenset[str]:
    if not isinstance(value, str) and isinstance(value, Iterable):
        names = tuple(value)
        if all(isinstance(name, str) for name in names):
            return frozenset(names)
    raise ValueError(f"PriorityTrimmer: pinned_tools must be a list of tool names, got {value!r}.")


DEFAULTS: Final = TrimOptions()
"""The options a trimmer given none has (``PriorityTrimmer()``'s keyword defaults)."""
