"""The learned latency model: priors before data, the fit, the registry."""

import math
import threading

import pytest

from agent_latency._latency_model import (
    DEFAULT_PRIORS,
    LatencyCoefficients,
    LatencyModel,
    LatencyModels,
)


def test_predicts_from_the_priors_before_any_call() -> None:
    model = LatencyModel()
    expected = 200.0 + 2000 * (0.16 + 0.03 * 4000 / 1000)
    assert model.predict(2000, 4000) == pytest.approx(expected)
    assert model.coefficients == DEFAULT_PRIORS
    assert model.observations == 0


def test_recovers_known_coefficients_from_observations() -> None:
    truth = LatencyCoefficients(
        fixed_ms=35.0, ms_per_token=0.9, ms_per_token_per_ktoken=0.12, ms_per_context_token=0.01
    )
    model = LatencyModel(forgetting=1.0)
    grid = [(u, c) for u in (50, 400, 1500, 3000) for c in (3000, 6000, 9000) if u <= c]
    grid += [(u, u) for u in (100, 500, 1000)]  # cold calls: short prompts, nothing cached
    for uncached, context in grid * 20:
        ttft = (
            truth.fixed_ms
            + uncached * (truth.ms_per_token + truth.ms_per_token_per_ktoken * context / 1000)
            + truth.ms_per_context_token * context
        )
        model.observe(ttft, context, context - uncached)
    fitted = model.coefficients
    assert fitted.fixed_ms == pytest.approx(truth.fixed_ms, rel=0.05)
    assert fitted.ms_per_token == pytest.approx(truth.ms_per_token, rel=0.05)
    assert fitted.ms_per_token_per_ktoken == pytest.approx(truth.ms_per_token_per_ktoken, rel=0.05)
    assert fitted.ms_per_context_token == pytest.approx(truth.ms_per_context_token, rel=0.1)


def test_forgetting_follows_an_endpoint_that_slows_down() -> None:
    model = LatencyModel(forgetting=0.9)
    for ttft in [100.0] * 50 + [300.0] * 50:
        model.observe(ttft, 1000, 1000)  # all cached: only the fixed cost shows
    assert model.predict(0, 1000) == pytest.approx(300.0, rel=0.02)
    assert model.observations < 11  # the memory is bounded: 1 / (1 - 0.9)


def test_missing_cache_report_counts_as_nothing_cached() -> None:
    model, same = LatencyModel(), LatencyModel()
    model.observe(500.0, 2000, None)
    same.observe(500.0, 2000, 0)
    assert model.coefficients == same.coefficients


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((-1.0, 10, 0), "ttft_ms"),
        ((math.nan, 10, 0), "ttft_ms"),
        ((10.0, -5, 0), "prompt_tokens"),
        ((10.0, 10, 11), "cached_tokens"),
    ],
)
def test_bad_observations_name_the_value(args: tuple[object, ...], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LatencyModel().observe(*args)  # type: ignore[arg-type]


def test_an_observation_of_the_wrong_type_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="prompt_tokens"):
        LatencyModel().observe(10.0, "10", 0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "named"), [({"forgetting": 1.5}, "forgetting"), ({"prior_weight": 0}, "prior")]
)
def test_bad_options_name_the_option(options: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LatencyModel(**options)  # type: ignore[arg-type]


def test_registry_keeps_one_model_per_endpoint_and_forgets_the_oldest() -> None:
    models = LatencyModels(max_endpoints=2)
    a = models.model_for(("a", 443), "m")
    assert models.model_for(("a", 443), "m") is a
    b = models.model_for(("b", 80), "m")
    models.model_for(("a", 443), "m")  # a is now the most recently used
    models.model_for(None, "m")  # evicts b
    assert len(models) == 2
    assert models.model_for(("a", 443), "m") is a
    assert models.model_for(("b", 80), "m") is not b
    per_model = LatencyModels()
    assert per_model.model_for(("a", 443), "x") is not per_model.model_for(("a", 443), "y")


def test_concurrent_observations_are_all_counted() -> None:
    model = LatencyModel(forgetting=1.0)

    def feed() -> None:
        for _ in range(200):
            model.observe(100.0, 1000, 500)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert model.observations == pytest.approx(800)


def test_no_coefficient_goes_negative_so_a_longer_prompt_is_never_predicted_faster() -> None:
    # One cold call cannot tell the per-token terms apart; an unconstrained fit made the
    # context term negative and predicted a cached long prompt faster than a short one.
    model = LatencyModel()
    model.observe(250.0, 1375, 0)
    fitted = model.coefficients
    assert min(fitted.fixed_ms, fitted.ms_per_token, fitted.ms_per_token_per_ktoken) >= 0
    assert fitted.ms_per_context_token >= 0
    assert model.predict(1849, 1849) > model.predict(1365, 1365)
    assert model.predict(100, 4000) >= model.predict(100, 1000)
    assert model.predict(1375, 1375) == pytest.approx(250.0, rel=0.1)


def test_registry_keys_a_base_url_as_the_handler_keys_the_server() -> None:
    registry = LatencyModels()
    by_url = registry.model_for_base_url("http://127.0.0.1:8000/v1", "m")
    assert by_url is registry.model_for(("127.0.0.1", 8000), "m")
    assert registry.model_for_base_url(None, "m") is registry.model_for(None, "m")


@pytest.mark.parametrize(
    ("ttft_ms", "prompt_tokens", "cached_tokens", "named"),
    [
        (1000.0, 1e12, 0, "prompt_tokens"),  # raised ZeroDivisionError, then on every call
        (1000.0, -5, 0, "prompt_tokens"),
        (1000.0, 2000, 3000, "cached_tokens"),
        (1e12, 2000, 0, "ttft_ms"),
        (math.inf, 2000, 0, "ttft_ms"),
    ],
)
def test_impossible_usage_is_refused_where_it_enters_and_the_model_is_unchanged(
    ttft_ms: float, prompt_tokens: float, cached_tokens: int, named: str
) -> None:
    model = LatencyModel()
    for tokens, ttft in ((200, 60.0), (1000, 220.0), (2000, 420.0)):
        model.observe(ttft, tokens, 0)
    before = (model.coefficients, model.observations)

    with pytest.raises(ValueError, match=named):
        model.observe(ttft_ms, prompt_tokens, cached_tokens)  # type: ignore[arg-type]

    assert (model.coefficients, model.observations) == before
    model.observe(320.0, 1500, 0)  # later observations are learned as before
    assert model.observations > before[1]
    assert 300 < model.predict(1500, 1500) < 400
