"""The embedded simulator as the agent and trimming attacks run it: answering at once; the
settings and the plain ChatOpenAI that call it."""

from __future__ import annotations

from typing import Any, Final

from langchain_openai import ChatOpenAI
from pydantic import SecretStr

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


def chat_openai_of(sim: RunningSimulator, *, api_key: str = "unused", **options: Any) -> ChatOpenAI:
    """LangChain's own ChatOpenAI (not the project's model class) on the simulator's endpoint and
    first model; ``options`` go to ChatOpenAI."""
    return ChatOpenAI(
        base_url=sim.base_url, api_key=SecretStr(api_key), model=sim.config.models[0], **options
    )
