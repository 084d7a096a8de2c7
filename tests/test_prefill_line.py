"""The prefill line shared by ``bench`` and ``doctor``."""

import pytest

from agent_latency._latency_model import fit_prefill


def test_fit_recovers_a_line() -> None:
    fit = fit_prefill([(tokens, 200 + 0.4 * tokens) for tokens in (1000, 3000, 8000)])
    assert fit is not None
    assert fit.ms_per_1k_tokens == pytest.approx(400)
    assert fit.intercept_ms == pytest.approx(200)
    assert fit.ttft_ms(5000) == pytest.approx(2200)


def test_fit_is_least_squares_over_noisy_points() -> None:
    fit = fit_prefill([(200, 110), (1000, 510), (2000, 1010)])
    assert fit is not None
    assert fit.ms_per_1k_tokens == pytest.approx(500)
    assert fit.intercept_ms == pytest.approx(10)


def test_no_fit_without_two_distinct_prompt_sizes() -> None:
    assert fit_prefill([]) is None
    assert fit_prefill([(1000, 600)]) is None
    assert fit_prefill([(200, 100), (200, 120)]) is None


def test_budget_under_a_ttft_target() -> None:
    fit = fit_prefill([(200, 110), (2000, 1010)])
    assert fit is not None
    assert fit.budget_under(1200) == 2380
    assert fit.budget_under(5) == 0  # even an empty prompt is slower
    flat = fit_prefill([(200, 50), (2000, 49)])
    assert flat is not None and flat.budget_under(1200) is None


def test_a_line_bent_by_attention_gets_no_negative_fixed_part() -> None:
    # llama-server on a CPU: the rate falls as the context grows, and the unconstrained line
    # read "-397 ms fixed" in doctor; the best line without a negative fixed part is through 0.
    samples = [(24, 139), (984, 6447), (2000, 15000), (3000, 24000)]
    fit = fit_prefill(samples)
    assert fit is not None
    assert fit.intercept_ms == 0.0
    expected = sum(x * y for x, y in samples) / sum(x * x for x, _ in samples)
    assert fit.ms_per_1k_tokens == pytest.approx(expected * 1000)
    assert fit.ttft_ms(0) == 0.0 and fit.ttft_ms(984) > 0
