"""agent-latency: priority prompt trimming and time-to-first-token telemetry for LangChain agents.

Shorter prompts mean less prefill and a sooner first token; streaming makes that token visible at
once; the callback handler measures both as OpenTelemetry spans and metrics.
"""

from agent_latency._channel import build_chat_model
from agent_latency._config import (
    ConfigError,
    LLMSettings,
    MetricsSettings,
    PromptSettings,
    Settings,
    StreamingSettings,
    load_settings,
)
from agent_latency._tokens import TokenCounter

__all__ = [
    "ConfigError",
    "LLMSettings",
    "MetricsSettings",
    "PromptSettings",
    "Settings",
    "StreamingSettings",
    "TokenCounter",
    "build_chat_model",
    "load_settings",
]
