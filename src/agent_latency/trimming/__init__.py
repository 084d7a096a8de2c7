"""The priority trimmer: fits each model call's prompt into a token budget before it is sent.

:class:`PriorityTrimmer` is a LangChain ``Runnable`` (use it in a chain before the model), a
plain callable (:meth:`PriorityTrimmer.trim`) and a LangGraph pre-model hook
(:meth:`PriorityTrimmer.as_pre_model_hook`); :class:`TrimmingMiddleware` wraps it for
``langchain.agents.create_agent`` and needs the ``agents`` extra (it is imported on first use).
Every trim returns a :class:`TrimResult` that says, message by message, what was kept, dropped
or shortened and by which :data:`Rule`. The rules are in docs/trimming.md.

Exports: ``Action``, ``ClassFigures``, ``MessageDecision``, ``PriorityClass``,
``PriorityTrimmer``, ``Rule``, ``TrimResult``, ``TrimmingMiddleware``.
"""

from typing import TYPE_CHECKING, Any

from agent_latency._config import PriorityClass
from agent_latency.trimming._trimmer import (
    Action,
    ClassFigures,
    MessageDecision,
    PriorityTrimmer,
    Rule,
    TrimResult,
)

if TYPE_CHECKING:
    from agent_latency.trimming._middleware import TrimmingMiddleware

__all__ = [
    "Action",
    "ClassFigures",
    "MessageDecision",
    "PriorityClass",
    "PriorityTrimmer",
    "Rule",
    "TrimResult",
    "TrimmingMiddleware",
]


def __getattr__(name: str) -> Any:
    # TrimmingMiddleware needs the optional `agents` extra (langchain): import it on first use.
    if name == "TrimmingMiddleware":
        from agent_latency.trimming._middleware import TrimmingMiddleware

        return TrimmingMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
