"""agent-latency: priority prompt trimming and time-to-first-token telemetry for LangChain agents.

Shorter prompts mean less prefill and a sooner first token; streaming makes that token visible at
once; the callback handler measures both as OpenTelemetry spans and metrics.

``TrimmingMiddleware`` needs the ``agents`` extra (``pip install 'agent-latency[agents]'``); it is
imported on first use, so everything else works without langchain and langgraph.
"""

from typing import TYPE_CHECKING, Any

from agent_latency._callbacks import LatencyCallbackHandler, LatencyRecord
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
from agent_latency._telemetry import Telemetry, configure_telemetry
from agent_latency._tokens import TokenCounter
from agent_latency._trimming import ClassFigures, MessageDecision, PriorityTrimmer, TrimResult

if TYPE_CHECKING:
    from agent_latency._middleware import TrimmingMiddleware

__all__ = [
    "ClassFigures",
    "ConfigError",
    "LLMSettings",
    "LatencyCallbackHandler",
    "LatencyRecord",
    "MessageDecision",
    "MetricsSettings",
    "PriorityTrimmer",
    "PromptSettings",
    "Settings",
    "StreamingSettings",
    "Telemetry",
    "TokenCounter",
    "TrimResult",
    "TrimmingMiddleware",
    "build_chat_model",
    "configure_telemetry",
    "load_settings",
]


def __getattr__(name: str) -> Any:
    # TrimmingMiddleware needs the optional `agents` extra (langchain): import it on first use.
    if name == "TrimmingMiddleware":
        from agent_latency._middleware import TrimmingMiddleware

        return TrimmingMiddleware
    raise AttributeError(f"module 'agent_latency' has no attribute {name!r}")
