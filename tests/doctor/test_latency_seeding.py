"""Doctor's prefill probes feed the endpoint's latency model (real probes on the simulator; a
website's pages, which must teach it nothing, from a mock transport)."""

import uuid

import httpx
from support.simulators import settings_of

from agent_latency import LLMSettings, Settings
from agent_latency.doctor._check_result import CheckStatus
from agent_latency.doctor._checks import http_failure
from agent_latency.doctor._latency import (
    LatencyModel,
    check_latency_model,
    endpoint_latency_model,
    learn_from_probes,
    seed_latency_model,
)
from agent_latency.doctor._probes import Endpoint, HttpReply, PrefillSample
from agent_latency.sim import SimulatorConfig, running_simulator


def _fresh_model() -> LatencyModel:
    """A latency model that has seen nothing: the registry's for an endpoint never used."""
    return endpoint_latency_model(Settings(llm=LLMSettings(model=f"unseen-{uuid.uuid4().hex}")))


SIM = SimulatorConfig(
    overhead_ms=20,
    prefill_ms_per_token=0.1,
    attention_ms_per_1k_context=0,
    decode_tokens_per_s=5000,
)


def test_probes_teach_the_endpoint_model_its_prefill_cost() -> None:
    with running_simulator(SIM) as sim:
        settings = settings_of(sim)
        model = endpoint_latency_model(settings)
        before = model.observations
        samples = seed_latency_model(settings)
    assert isinstance(samples, list)
    assert len(samples) == 4  # three sizes, then the largest again
    assert samples[-1].cached_tokens  # the simulator caches the repeat and says so
    assert model.observations > before + 3.5
    # The simulator answers a 2,000-token prompt in about 20 + 2,000 × 0.1 = 220 ms; the
    # priors (the simulator's defaults) said 640.
    assert 150 < model.predict(2000, 2000) < 400


def test_an_unreported_repeat_is_not_taken_for_a_free_prefill() -> None:
    cold = PrefillSample(prompt_tokens=2000, ttft_ms=400.0, prompt="p")
    repeat = PrefillSample(prompt_tokens=2000, ttft_ms=50.0, prompt="p")
    model = _fresh_model()
    assert learn_from_probes(model, [cold, repeat]) == 1
    assert model.predict(2000, 2000) > 300


def test_the_check_says_what_a_budget_size_prompt_costs_cold_and_warm() -> None:
    samples = [
        PrefillSample(prompt_tokens=size, ttft_ms=50 + size * 0.2, prompt=str(size))
        for size in (200, 1000, 2000)
    ]
    result = check_latency_model(samples, Settings(), _fresh_model())
    assert result.status is CheckStatus.PASS
    assert "after 3 probes" in result.message
    assert "with nothing cached" in result.message
    assert check_latency_model([], Settings(), _fresh_model()).status is CheckStatus.WARN


def _website(request: httpx.Request) -> httpx.Response:
    """A web server's answer to anything: the page base_url names when it is no API root."""
    return httpx.Response(200, html="<html><body>Welcome</body></html>")


def test_a_website_at_base_url_seeds_nothing() -> None:
    # Its pages were taken for one-token answers: the endpoint's model learned the page's
    # serving time as the prefill of 200 to 2,000 tokens, and the seeding returned them as probes.
    settings = Settings(llm=LLMSettings(base_url="http://www.example.test/", model="m"))
    model = _fresh_model()
    with Endpoint(settings, transport=httpx.MockTransport(_website)) as endpoint:
        reply = seed_latency_model(settings, endpoint=endpoint, model=model)

    assert isinstance(reply, HttpReply)
    assert reply.url == "http://www.example.test/chat/completions"
    assert model.observations == 0
    result = http_failure("prefill", reply)
    assert result.status is CheckStatus.FAIL
    assert result.message == (
        "http://www.example.test/chat/completions answered 200: a web page, no chat completion"
    )
