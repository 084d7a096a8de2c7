"""PromptCalibration: the correction from our token count to the server's, learned per endpoint."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from langchain_core.messages import AIMessage, HumanMessage

from agent_latency.tokens import PromptCalibration, TokenCounter, calibration_for
from agent_latency.tokens._calibration import MIN_OBSERVATIONS, WINDOW
from agent_latency.trimming import PriorityTrimmer


def test_the_factor_is_one_until_enough_observations() -> None:
    calibration = PromptCalibration()
    for _ in range(MIN_OBSERVATIONS - 1):
        calibration.observe(1000, 1200)
        assert calibration.factor == 1.0
    calibration.observe(1000, 1200)
    assert calibration.factor == 1.2


def test_the_factor_errs_toward_the_larger_ratios() -> None:
    calibration = PromptCalibration()
    for actual in (1100, 1080, 1120, 1090, 1110, 1100, 1095, 1105, 1115, 1085):
        calibration.observe(1000, actual)
    assert calibration.factor >= 1.11  # a high quantile, not the mean (1.1)


def test_outliers_and_impossible_pairs_are_left_out() -> None:
    calibration = PromptCalibration()
    for _ in range(5):
        calibration.observe(1000, 1100)
    calibration.observe(1000, 1900)  # e.g. usage of another prompt: far from the others
    calibration.observe(1000, 50_000)  # not a count of this prompt at all
    for estimated, actual in ((0, 100), (100, 0), (-5, 10), (True, 10)):  # type: ignore[misc]
        calibration.observe(estimated, actual)
    assert calibration.factor == 1.1
    assert calibration.observations == 6


def test_memory_is_bounded_and_a_changed_server_is_followed() -> None:
    calibration = PromptCalibration()
    for _ in range(WINDOW):
        calibration.observe(1000, 1300)
    for _ in range(WINDOW):
        calibration.observe(1000, 1000)
    assert calibration.factor == 1.0
    assert len(calibration._ratios) == WINDOW


def test_observations_from_many_threads_are_all_counted() -> None:
    calibration = PromptCalibration()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: calibration.observe(1000, 1050), range(2000)))
    assert calibration.observations == 2000 and calibration.factor == 1.05


def test_the_registry_shares_one_calibration_per_endpoint_and_model() -> None:
    a = calibration_for("http://127.0.0.1:9/v1/", "model-a")
    assert calibration_for("http://127.0.0.1:9/v1", "model-a") is a
    assert calibration_for("http://127.0.0.1:9/v1", "model-b") is not a
    assert calibration_for(None, "model-a") is not a


def test_the_trimmer_divides_its_budget_by_the_factor() -> None:
    counter = TokenCounter()
    calibration = PromptCalibration()
    # Cut to the budget on every call (a cache-first cut keeps less than the budget).
    trimmer = PriorityTrimmer(
        1000, token_counter=counter, calibration=calibration, history_selection="age"
    )
    messages = [
        *[HumanMessage("q " + "data " * 100), AIMessage("a " + "data " * 100)] * 10,
        HumanMessage("latest"),
    ]
    before = trimmer.trim(messages)
    assert before.effective_budget == 1000 and before.calibration is calibration
    for _ in range(MIN_OBSERVATIONS):
        calibration.observe(1000, 1250)
    after = trimmer.trim(messages)
    assert after.effective_budget == 800 and after.calibration_factor == 1.25
    assert after.tokens_after <= 800 < before.tokens_after
