"""agent-latency: priority prompt trimming and time-to-first-token telemetry for LangChain agents.

Shorter prompts mean less prefill and a sooner first token; streaming makes that token visible at
once; the callback handler measures both as OpenTelemetry spans and metrics. The subpackages
(trimming, telemetry, tokens, config, bench, doctor, sim) and :mod:`agent_latency.semconv` are
drawn in docs/architecture.md; the names below are the ones most programs need.

``TrimmingMiddleware`` needs the ``agents`` extra (``pip install 'agent-latency[agents]'``); it is
imported on first use, so everything else works without langchain and langgraph.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final

from agent_latency._latency_model import LatencyCoefficients, LatencyModel
from agent_latency._trace_link import RunContextProvider
from agent_latency.config import (
    ConfigError,
    LLMSettings,
    MetricsSettings,
    PriorityClass,
    PromptSettings,
    Settings,
    StreamingSettings,
    load_settings,
)
from agent_latency.telemetry import (
    LatencyCallbackHandler,
    LatencyRecord,
    Telemetry,
    configure_telemetry,
)
from agent_latency.tokens import TokenCounter, TokenCounting
from agent_latency.trimming import (
    Action,
    ClassFigures,
    MessageDecision,
    PriorityTrimmer,
    Rule,
    TrimResult,
    trimmer_from_settings,
)

if TYPE_CHECKING:
    from agent_latency.config import build_chat_model
    from agent_latency.trimming import TrimmingMiddleware

try:
    __version__ = version("agent-latency")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Action",
    "ClassFigures",
    "ConfigError",
    "LLMSettings",
    "LatencyCallbackHandler",
    "LatencyCoefficients",
    "LatencyModel",
    "LatencyRecord",
    "MessageDecision",
    "MetricsSettings",
    "PriorityClass",
    "PriorityTrimmer",
    "PromptSettings",
    "Rule",
    "RunContextProvider",
    "Settings",
    "StreamingSettings",
    "Telemetry",
    "TokenCounter",
    "TokenCounting",
    "TrimResult",
    "TrimmingMiddleware",
    "__version__",
    "build_chat_model",
    "configure_telemetry",
    "load_settings",
    "trimmer_from_settings",
]


_IMPORTED_ON_FIRST_USE: Final = {
    # langchain_openai and openai: about half a second, for programs that build their own model.
    "build_chat_model": "agent_latency.config",
    # The optional `agents` extra (langchain).
    "TrimmingMiddleware": "agent_latency.trimming",
}


def __getattr__(name: str) -> Any:
    if name in _IMPORTED_ON_FIRST_USE:
        return getattr(importlib.import_module(_IMPORTED_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'agent_latency' has no attribute {name!r}")
