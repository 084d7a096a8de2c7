"""The latency fit shared by ``bench`` and ``doctor``: the latency model fitted to cold calls."""

import pytest

from agent_latency._latency_model import LatencyCoefficients, PrefillFit, fit_prefill


def _curve(tokens: float) -> float:
    return 200 + 0.16 * tokens + 0.03 * tokens * tokens / 1000


def test_fit_recovers_a_curved_prefill() -> None:
    # The embedded simulator's default model: each token dearer in a longer prompt.
    fit = fit_prefill([(tokens, _curve(tokens)) for tokens in (500, 1000, 2000, 4000, 8000)])
    assert fit is not None
    for tokens in (500, 3000, 8000):
        assert fit.ttft_ms(tokens) == pytest.approx(_curve(tokens), rel=0.02)
    assert fit.describe().startswith("TTFT ≈ 2")


def test_fit_recovers_a_line() -> None:
    fit = fit_prefill([(tokens, 200 + 0.4 * tokens) for tokens in (1000, 3000, 8000)])
    assert fit is not None
    assert fit.ttft_ms(5000) == pytest.approx(2200, rel=0.02)


def test_no_fit_without_two_distinct_prompt_sizes() -> None:
    assert fit_prefill([]) is None
    assert fit_prefill([(1000, 600)]) is None
    assert fit_prefill([(200, 100), (200, 120)]) is None
    assert fit_prefill([(200, 100), (1e12, 120)]) is None  # an impossible count is left out


def test_budget_under_a_ttft_target() -> None:
    line = PrefillFit(LatencyCoefficients(fixed_ms=10, ms_per_token=0.5, ms_per_token_per_ktoken=0))
    assert line.budget_under(1200) == 2380
    assert line.budget_under(5) == 0  # even an empty prompt is slower
    curve = PrefillFit(LatencyCoefficients(200, 0.16, 0.03))
    limit = curve.budget_under(1200)
    assert limit is not None
    assert curve.ttft_ms(limit) <= 1200 < curve.ttft_ms(limit + 1)
    flat = PrefillFit(LatencyCoefficients(50, 0, 0))
    assert flat.budget_under(1200) is None


def test_a_curve_gets_no_negative_fixed_part() -> None:
    # llama-server on a CPU: the rate falls as the context grows; a straight line read
    # "-397 ms fixed" in doctor, or, held at 0, a cost per token too high for short prompts.
    samples = [(24, 139), (984, 6447), (2000, 15000), (3000, 24000)]
    fit = fit_prefill(samples)
    assert fit is not None
    assert fit.coefficients.fixed_ms >= 0
    for tokens, ttft in samples[1:]:
        assert fit.ttft_ms(tokens) == pytest.approx(ttft, rel=0.1)
