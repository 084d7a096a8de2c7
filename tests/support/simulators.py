"""The embedded simulator as the agent and trimming attacks run it: answering at once."""

from __future__ import annotations

from typing import Final

from agent_latency import LLMSettings, Settings
from agent_latency.sim import RunningSimulator, SimulatorConfig

QUICK: Final = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=50_000, answer_tokens=8
)
"""No overhead or prefill wait and eight tokens decoded at once: an agent's many calls, or a
growing conversation's, take no time, while the requests are still real HTTP."""


def settings_of(sim: RunningSimulator) -> Settings:
    """Settings for the simulator's endpoint and its first model."""
    return Settings(llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]))
