"""The priority trimmer: fits each model call's whole request into a token budget before it is sent.

The budget covers everything sent: messages, tool definitions, the response format schema and the
chat template's framing, counted in the model's own tokens and corrected by the server's counts
(calibration). :class:`PriorityTrimmer` is a LangChain ``Runnable`` (use it in a chain before the
model, :meth:`PriorityTrimmer.for_model` to count the model's bound tools), a plain callable
(:meth:`PriorityTrimmer.trim`) and a LangGraph pre-model hook
(:meth:`PriorityTrimmer.as_pre_model_hook`); its options are one frozen :class:`TrimOptions`
(``trimmer.options``), its keywords typed by :class:`TrimmerOptions`. :class:`TrimmingMiddleware`
wraps it for ``langchain.agents.create_agent`` and needs the ``agents`` extra (it is imported on
first use). Every trim returns a :class:`TrimResult` that says, message by message
(:class:`MessageDecision`), what was kept, dropped or shortened (:data:`Action`) and by which
:data:`Rule` (:data:`RULE_EXPLANATIONS` says what each means). The rules are in docs/trimming.md.

:func:`trimmer_from_settings` builds the trimmer of the mode the settings name (``prompt.mode``).

Exports: ``Action``, ``ClassFigures``, ``MessageDecision``, ``PriorityClass``,
``PriorityTrimmer``, ``RULE_EXPLANATIONS``, ``Rule``, ``TrimOptions``, ``TrimResult``,
``TrimmerOptions``, ``TrimmingMiddleware``, ``recall_tool``, ``trimmer_from_settings``.

In agents, what a trim cuts stays readable (docs/trimming.md, "Nothing lost for good"):
``TrimmingMiddleware`` and the pre-model hook send an elision marker where history was cut and
offer the ``recall`` tool; for ``create_react_agent``, :func:`recall_tool` gives a hook's tool.
"""

from typing import TYPE_CHECKING, Any

from agent_latency.config import PriorityClass
from agent_latency.trimming._decisions import RULE_EXPLANATIONS, Action, MessageDecision, Rule
from agent_latency.trimming._from_settings import trimmer_from_settings
from agent_latency.trimming._options import TrimmerOptions, TrimOptions
from agent_latency.trimming._result import ClassFigures, TrimResult
from agent_latency.trimming._trimmer import PriorityTrimmer

if TYPE_CHECKING:
    from agent_latency.trimming._middleware import TrimmingMiddleware, recall_tool

# In sorted() order, as tests/test_public_api.py checks (ruff's RUF022 sorts constants first).
__all__ = [
    "RULE_EXPLANATIONS",
    "Action",
    "ClassFigures",
    "MessageDecision",
    "PriorityClass",
    "PriorityTrimmer",
    "Rule",
    "TrimOptions",
    "TrimResult",
    "TrimmerOptions",
    "TrimmingMiddleware",
    "recall_tool",
    "trimmer_from_settings",
]


def __getattr__(name: str) -> Any:
    # TrimmingMiddleware and recall_tool need the optional `agents` extra (langchain): import
    # them on first use.
    if name in {"TrimmingMiddleware", "recall_tool"}:
        from agent_latency.trimming import _middleware

        return getattr(_middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
