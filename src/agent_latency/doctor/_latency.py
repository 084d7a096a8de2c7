"""Doctor's prefill probes as evidence for the endpoint's latency model.

The probes time one-token answers to prompts of known sizes, each with a fresh tag at the start
(nothing cached), then the largest again (cached, where the server caches). They are the first
calls the process-wide latency model of the endpoint (the one the callback handler feeds) learns
from, so it describes this endpoint's own speed rather than the priors.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_latency._latency_model import LATENCY_MODELS, LatencyModel, describe_coefficients
from agent_latency.config import Settings
from agent_latency.doctor._check_result import CheckResult, CheckStatus
from agent_latency.doctor._probes import Endpoint, HttpReply, PrefillSample

_APPENDED_TOKENS = 200
"""The new tokens of a warm call in the check's example: a user turn or a short tool result."""


def learn_from_probes(model: LatencyModel, samples: Sequence[PrefillSample]) -> int:
    """Feeds the probes' times into ``model``; returns how many it learned from.

    A probe whose cached tokens the server did not report is used only when nothing of it can
    have been cached (its prompt starts with a fresh tag, the first time it is sent): taken as
    uncached, a cached repeat would teach the model that prefill is free.

    Args:
        model: The latency model to feed.
        samples: The probes, in the order they were sent.

    Raises:
        ValueError: From :meth:`LatencyModel.observe`, for an impossible probe (the model keeps
            what it learned from the probes before it).
    """
    used = 0
    seen: set[str] = set()
    for sample in samples:
        repeat = sample.prompt in seen
        seen.add(sample.prompt)
        if repeat and sample.cached_tokens is None:
            continue
        cached = min(sample.cached_tokens or 0, sample.prompt_tokens)
        model.observe(sample.ttft_ms, sample.prompt_tokens, cached)
        used += 1
    return used


def endpoint_latency_model(settings: Settings) -> LatencyModel:
    """The process-wide latency model of the endpoint and model ``settings`` name."""
    return LATENCY_MODELS.model_for_base_url(settings.llm.base_url, settings.llm.model)


def seed_latency_model(
    settings: Settings, *, endpoint: Endpoint | None = None, model: LatencyModel | None = None
) -> list[PrefillSample] | HttpReply:
    """Probes the endpoint's prefill (and prefix cache) and feeds the endpoint's latency model.

    Call it at startup to let the endpoint's latency model describe the endpoint's own speed
    before the first calls (about 5 short requests; a few seconds on a slow server).

    Args:
        settings: The endpoint and model.
        endpoint: The probe client. Default: one for ``settings`` (closed at the end).
        model: The model to feed. Default: the endpoint's process-wide one.

    Returns:
        The probes, or the reply of the first one that failed (the model is then unchanged).
    """
    owned = endpoint is None
    probes = endpoint or Endpoint(settings)
    try:
        samples = probes.probe_prefill()
        if isinstance(samples, HttpReply):
            return samples
        again = probes.time_prompt(samples[-1].prompt)
        if isinstance(again, PrefillSample):
            samples.append(again)
    finally:
        if owned:
            probes.close()
    learn_from_probes(model or endpoint_latency_model(settings), samples)
    return samples


def check_latency_model(
    samples: Sequence[PrefillSample], settings: Settings, model: LatencyModel
) -> CheckResult:
    """Feeds the probes into ``model`` and says what it predicts for a budget-size prompt.

    Args:
        samples: The prefill probes and the repeated one, in the order sent.
        settings: For the budget.
        model: The endpoint's latency model.
    """
    try:
        used = learn_from_probes(model, samples)
    except (TypeError, ValueError) as exc:
        return CheckResult(
            "latency model",
            CheckStatus.FAIL,
            f"the probes cannot teach the endpoint's latency model: {exc}",
            "check the server's reported usage (see the server usage check) and the clock of "
            "this machine; the latency model keeps its priors meanwhile",
        )
    if not used:
        return CheckResult(
            "latency model",
            CheckStatus.WARN,
            "no probe could be used to learn the endpoint's latency; the latency model keeps "
            "its priors until the callback handler has seen streamed calls",
            "check that the server reports usage.prompt_tokens",
        )
    budget = settings.prompt.token_budget
    cold = model.predict(budget, budget)
    warm = model.predict(_APPENDED_TOKENS, budget + _APPENDED_TOKENS)
    return CheckResult(
        "latency model",
        CheckStatus.PASS,
        f"{describe_coefficients(model.coefficients)} after {used} probes: a {budget:,}-token "
        f"prompt ≈ {cold:,.0f} ms with nothing cached, ≈ {warm:,.0f} ms appending "
        f"{_APPENDED_TOKENS} tokens to it cached",
    )
