"""The checks of ``doctor`` that read the settings alone: sizes, keep rules, temperature."""

from __future__ import annotations

from typing import Final

from agent_latency.config import Settings
from agent_latency.doctor._check_result import CheckResult, CheckStatus

RECOMMENDED_TEMPERATURE: Final = (0.1, 0.3)
_KEEP_RULES: Final = (
    ("keep_latest_user", "the latest user message (the question being answered)"),
    ("keep_system", "the system messages (the agent's instructions)"),
)


def check_configuration(settings: Settings) -> list[CheckResult]:
    """Reports where the configuration came from and each of its warnings."""
    origin = ", ".join(settings.sources) or "defaults (no config.toml or settings.json found)"
    results = [CheckResult("configuration", CheckStatus.PASS, f"valid: {origin}")]
    for warning in settings.warnings:
        message, _, fix = warning.partition(" Fix: ")
        results.append(CheckResult("configuration", CheckStatus.WARN, message, fix))
    return results


def check_context_budget(settings: Settings) -> CheckResult:
    """Checks that ``token_budget + reserve_for_output`` fits the context window with a reserve.

    A budget equal to the window with no reserve (the classic mistake) fits on paper and leaves
    no room for the answer: the server refuses the request or cuts the reply. A reserve below
    ``max_tokens`` is :func:`check_output_room`'s to judge.
    """
    prompt, window = settings.prompt, settings.llm.context_window
    reserve, max_tokens = prompt.reserve_for_output, settings.streaming.max_tokens
    total = prompt.token_budget + reserve
    summary = f"token_budget {prompt.token_budget} + reserve_for_output {reserve}"
    if window is None:
        return CheckResult(
            "context window",
            CheckStatus.WARN,
            f"the model's context window is unknown, so {summary} = {total} cannot be checked",
            "set llm.context_window in config.toml to the model's limit in tokens",
        )
    if total > window:
        return CheckResult(
            "context window",
            CheckStatus.FAIL,
            f"{summary} = {total} exceeds context_window {window}: no room for the answer",
            f"lower token_budget to at most {window - reserve}",
        )
    if reserve == 0:
        return CheckResult(
            "context window",
            CheckStatus.FAIL,
            f"{summary} = {total} fits context_window {window} only on paper: with no reserve, "
            f"a full prompt leaves {window - prompt.token_budget} tokens for an answer of up to "
            f"max_tokens {max_tokens}, and the hard limit is the whole window; the output needs "
            f"a reserve of {max_tokens} tokens",
            _reserve_fix(settings),
        )
    return CheckResult(
        "context window", CheckStatus.PASS, f"{summary} = {total} fits context_window {window}"
    )


def _reserve_fix(settings: Settings) -> str:
    """The fix that gives the answer its room: a reserve of ``max_tokens``, and the budget that
    leaves it (when the window is known)."""
    max_tokens, window = settings.streaming.max_tokens, settings.llm.context_window
    fix = f"set llm.prompt.reserve_for_output = {max_tokens} (streaming.maxTokens)"
    if window is None:
        return f"{fix}, and llm.context_window to the model's limit"
    most = window - max_tokens
    if most < 1:
        return (
            f"lower streaming.maxTokens below context_window {window} and set "
            "llm.prompt.reserve_for_output to it"
        )
    if settings.prompt.token_budget > most:
        fix += f" and lower token_budget to at most {most} (context_window − the reserve)"
    return fix


def check_output_room(settings: Settings) -> CheckResult:
    """Checks that a full prompt plus ``max_tokens`` of answer fits the context window.

    With the window unknown, the reserve stands in for it: the answer fits the room the trimmer
    keeps free when ``max_tokens <= reserve_for_output``. A fix never asks for an output limit
    of 0 or less: where the prompt leaves no room, the output needs a reserve.
    """
    budget = settings.prompt.token_budget
    reserve = settings.prompt.reserve_for_output
    max_tokens = settings.streaming.max_tokens
    window = settings.llm.context_window
    if window is None:
        if max_tokens <= reserve:
            return CheckResult(
                "max tokens",
                CheckStatus.PASS,
                f"max_tokens {max_tokens} fits reserve_for_output {reserve}",
            )
        fix = (
            f"set streaming.maxTokens to at most {reserve}, or {_reserve_fix(settings)}"
            if reserve > 0
            else _reserve_fix(settings)
        )
        return CheckResult(
            "max tokens",
            CheckStatus.WARN,
            f"max_tokens {max_tokens} exceeds reserve_for_output {reserve}: a full prompt may "
            "leave too little room for the answer, and the window is unknown",
            fix,
        )
    if budget + max_tokens > window:
        room = window - budget
        fix = (
            f"set streaming.maxTokens to at most {room}, or {_reserve_fix(settings)}"
            if room > 0
            else _reserve_fix(settings)
        )
        return CheckResult(
            "max tokens",
            CheckStatus.FAIL,
            f"token_budget {budget} + max_tokens {max_tokens} = {budget + max_tokens} exceeds "
            f"context_window {window}: a full prompt leaves no room for the answer (the server "
            "rejects the request or truncates the reply)",
            fix,
        )
    return CheckResult(
        "max tokens",
        CheckStatus.PASS,
        f"token_budget {budget} + max_tokens {max_tokens} = {budget + max_tokens} fits "
        f"context_window {window}",
    )


def check_keep_rules(settings: Settings) -> CheckResult:
    """Checks that trimming can never drop the system messages or the latest user message."""
    dropped = [(key, what) for key, what in _KEEP_RULES if not getattr(settings.prompt, key)]
    if not dropped:
        return CheckResult(
            "keep rules",
            CheckStatus.PASS,
            "trimming never drops the system messages or the latest user message",
        )
    keys = " and ".join(f"llm.prompt.{key} = true" for key, _ in dropped)
    return CheckResult(
        "keep rules",
        CheckStatus.WARN,
        f"trimming may drop {' and '.join(what for _, what in dropped)}: "
        "answers go off-topic when it does",
        f"set {keys} in config.toml",
    )


def check_temperature(settings: Settings) -> CheckResult:
    """Checks that the temperature keeps streamed agent answers short and stable."""
    temperature = settings.streaming.temperature
    low, high = RECOMMENDED_TEMPERATURE
    if low <= temperature <= high:
        return CheckResult("temperature", CheckStatus.PASS, f"{temperature} is within {low}-{high}")
    effect = (
        "outputs grow longer and vary more, and so does the total time"
        if temperature > high
        else "greedy decoding can repeat itself in loops on some models"
    )
    return CheckResult(
        "temperature",
        CheckStatus.WARN,
        f"{temperature} is outside the recommended {low}-{high} for streamed agents: {effect}",
        f"set streaming.temperature in settings.json to {low}-{high}",
    )
