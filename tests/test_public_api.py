"""The public surface is explicit: one sorted ``__all__``, every name importable."""

import importlib
import subprocess
import sys

import agent_latency

EXPECTED_PUBLIC_NAMES = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert agent_latency.__all__ == EXPECTED_PUBLIC_NAMES
    assert agent_latency.__all__ == sorted(agent_latency.__all__)


def test_every_public_name_resolves_and_lives_in_a_private_module() -> None:
    for name in agent_latency.__all__:
        value = getattr(agent_latency, name)
        module = importlib.import_module(value.__module__)
        assert module.__name__.split(".")[-1].startswith("_"), (name, module.__name__)


def test_importing_the_package_does_not_import_the_optional_agent_frameworks() -> None:
    code = (
        "import sys, agent_latency; print('langchain' in sys.modules, 'langgraph' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
