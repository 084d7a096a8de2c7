"""The priority trimmer: fits each model call's whole request into a token budget before it is sent.

The budget covers everything sent: messages, tool definitions, the response format schema and
the chat template's framing, counted in the model's own tokens and corrected by the server's
counts (calibration). :class:`PriorityTrimmer` is a LangChain ``Runnable`` (use it in a chain
before the model, :meth:`PriorityTrimmer.for_model` to count the model's bound tools), a plain
callable (:meth:`PriorityTrimmer.trim`) and a LangGraph pre-model hook
(:meth:`PriorityTrimmer.as_pre_model_hook`); :class:`TrimmingMiddleware` wraps it for
``langchain.agents.create_agent`` and needs the ``agents`` extra (it is imported on first use).
Every trim returns a :class:`TrimResult` that says, message by message, what was kept, dropped
or shortened and by which :data:`Rule`. The rules are in docs/trimming.md.

:class:`CostAwareTrimmer` wraps a trimmer for multi-turn conversations: per conversation it sends
the previous prompt plus the new messages while the server's prefix cache is warm, and cuts when
the latency model of the endpoint predicts an earlier first token from it (docs/trimming.md).

Exports: ``Action``, ``ClassFigures``, ``CostAwareChoice``, ``CostAwareTrimmer``,
``MessageDecision``, ``PriorityClass``, ``PriorityTrimmer``, ``Rule``, ``TrimResult``,
``TrimmingMiddleware``.
"""

from typing import TYPE_CHECKING, Any

from agent_latency.config import PriorityClass
from agent_latency.trimming._cost_aware import CostAwareTrimmer
from agent_latency.trimming._forecast import CostAwareChoice
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
    "CostAwareChoice",
    "CostAwareTrimmer",
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
