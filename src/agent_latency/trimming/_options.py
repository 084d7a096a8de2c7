"""The trimmer's options: one frozen value, checked once, when it is made.

:class:`TrimOptions` is the table of ``PriorityTrimmer``'s options; :class:`TrimmerOptions` types
its keywords (a test keeps the two the same). An option a setting also sets (its declaration
names it: ``trimmer="budget"``) takes its default, its check and its meaning from that
declaration, so the settings, this check and ``from_settings`` cannot disagree.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from opentelemetry.trace import TracerProvider

from agent_latency._validation import checked_bool, checked_int
from agent_latency.config import (
    SETTINGS,
    HistorySelection,
    PriorityClass,
    PromptSettings,
    Setting,
    removed_value,
)
from agent_latency.tokens import PromptCalibration, TokenCounting
from agent_latency.trimming._request import extras
from agent_latency.trimming._shortening import MIN_SHORTENED_TOKENS

DEFAULT_BUDGET_FRACTION = 4
"""``max_tool_result_tokens`` and ``prefix_step_tokens`` default to a quarter of the budget."""

_OWNER = "PriorityTrimmer"

_SETTINGS = PromptSettings()
"""The trimmer's defaults are the settings' defaults: one source for both."""

FROM_SETTINGS: Final[Mapping[str, Setting]] = {
    each.declared.trimmer: each for each in SETTINGS if each.declared.trimmer is not None
}
"""The options a setting sets, by option name (``"budget"``), each with its declaration."""


class TrimmerOptions(TypedDict, total=False):
    """``PriorityTrimmer``'s keyword options after ``budget``; the default of each is its
    :class:`TrimOptions` field's.

    ``priority_order``, ``keep_system``, ``keep_latest_user``, ``history_keep_head``,
    ``history_keep_tail``, ``history_selection`` and ``compact_tool_results`` mean what the
    setting of that name says (:class:`~agent_latency.config.PromptSettings`, the tables of
    docs/configuration.md). The others:

    Attributes:
        max_tool_result_tokens: A tool result above this many tokens is shortened to it when
            the input does not fit. Default: a quarter of the budget (at least 32).
        prefix_stable: Move the cut point in steps so the prompt prefix stays identical
            across calls of a growing conversation (see ``docs/trimming.md``).
        prefix_step_tokens: The step. Default: a quarter of the budget. A larger step keeps the
            prefix stable for more calls but sends up to that many tokens less context.
        tools: The tools sent with every request (as given to ``bind_tools``); see also
            ``PriorityTrimmer.for_model``. A request's own tools given to ``trim`` replace them.
        response_format: The ``response_format`` sent with every request, if any.
        tool_budget: Makes tool definitions trimmable (opt-in; only ``TrimmingMiddleware``
            can send fewer tools): the most tokens they may take. The tools the conversation
            called, ``pinned_tools`` and the provider's built-in tools (a dict whose ``type``
            is not ``function``) are kept, then the others by relevance to the latest user
            message while they fit. Default: ``None``, every tool is sent.
        pinned_tools: Names of tools a ``tool_budget`` never drops.
        token_counter: The counter to use (its vocabulary and chat template); pass one to share
            its cache. Default: a new ``TokenCounter()`` (cl100k, OpenAI's framing).
        calibration: Corrects our count toward the server's (see ``from_settings``); the
            budget is divided by its factor. Default: none.
        tracer_provider: Where trim spans go. Default: the global tracer provider.
    """

    priority_order: Sequence[str]
    keep_system: bool
    keep_latest_user: bool
    history_keep_head: int
    history_keep_tail: int
    history_selection: HistorySelection
    compact_tool_results: bool
    max_tool_result_tokens: int | None
    prefix_stable: bool
    prefix_step_tokens: int | None
    tools: Sequence[object] | None
    response_format: object | None
    tool_budget: int | None
    pinned_tools: Sequence[str]
    token_counter: TokenCounting | None
    calibration: PromptCalibration | None
    tracer_provider: TracerProvider | None


@dataclass(frozen=True, kw_only=True, slots=True)
class TrimOptions:
    """Everything a :class:`~agent_latency.trimming.PriorityTrimmer` is told, checked.

    The fields are :class:`~agent_latency.trimming.PriorityTrimmer`'s options
    (:class:`TrimmerOptions` and ``budget``, the most prompt tokens to send, tools and framing
    included) as given, ``None`` standing for a default that depends on the budget
    (:attr:`tool_result_cap`, :attr:`step_tokens` resolve it), so that
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
        for name, declared in FROM_SETTINGS.items():
            value = getattr(self, name)
            removal = removed_value(declared.target, value, name)
            if removal is not None:
                raise ValueError(f"{_OWNER}: {name} {removal}")
            problem = declared.problem(value)
            if problem is not None:
                error = ValueError if declared.of_kind(value) else TypeError
                raise error(f"PriorityTrimmer: {name} {problem}, got {value!r}.")
        self._set("priority_order", tuple(self.priority_order))
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


def _tool_names(value: object) -> frozenset[str]:
    if not isinstance(value, str) and isinstance(value, Iterable):
        names = tuple(value)
        if all(isinstance(name, str) for name in names):
            return frozenset(names)
    raise ValueError(f"PriorityTrimmer: pinned_tools must be a list of tool names, got {value!r}.")


DEFAULTS: Final = TrimOptions()
"""The options a trimmer given none has (``PriorityTrimmer()``'s keyword defaults)."""


def given_options(budget: int, options: Mapping[str, Any]) -> TrimOptions:
    """The checked options of ``PriorityTrimmer(budget, **options)``.

    Raises:
        TypeError: For an option the trimmer does not have, naming the closest one.
        ValueError: For an invalid value (see :class:`TrimOptions`).
    """
    unknown = sorted(set(options) - set(TrimmerOptions.__annotations__))
    if unknown:
        close = difflib.get_close_matches(unknown[0], TrimmerOptions.__annotations__, n=1)
        fix = f"did you mean {close[0]!r}?" if close else "remove it."
        raise TypeError(
            f"PriorityTrimmer: unknown option {unknown[0]!r}. Fix: {fix} The options: budget, "
            f"{', '.join(TrimmerOptions.__annotations__)}."
        )
    return TrimOptions(budget=budget, **options)


def settings_options(prompt: PromptSettings) -> dict[str, Any]:
    """The options ``prompt`` sets: those its declarations name, and ``prefix_stable`` of its
    ``mode``."""
    return {name: getattr(prompt, declared.name) for name, declared in FROM_SETTINGS.items()} | {
        "prefix_stable": prompt.mode != "moving_cut"
    }
