"""The callback handler teaches each endpoint's latency model from the calls it observes."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from support.simulators import settings_of

from agent_latency import LatencyCallbackHandler, build_chat_model
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.telemetry._feedback import LATENCY_MODELS

FAST = SimulatorConfig(overhead_ms=5, prefill_ms_per_token=0.01, decode_tokens_per_s=5000)


def test_streamed_calls_feed_the_endpoint_latency_model_and_blocking_calls_do_not(
    tracer_provider: Any, meter_provider: Any
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        # The process-wide latency model of this endpoint, which doctor reads: the handler's.
        learned = LATENCY_MODELS.model_for_base_url(settings.llm.base_url, settings.llm.model)
        before = learned.observations
        config: Any = {"callbacks": [handler]}
        build_chat_model(settings, streaming=False).invoke([HumanMessage("hello")], config=config)
        assert learned.observations == before  # a blocking call's TTFT includes the decode
        for question in ("one", "two", "three"):
            list(build_chat_model(settings).stream([HumanMessage(question)], config=config))
    assert learned.observations > before + 2.5  # three calls, discounted by the forgetting
