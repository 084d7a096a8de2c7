"""The LangGraph ``pre_model_hook`` of a trimmer, for ``create_react_agent``.

LangGraph runs the hook as its own node, then, in the model node, prepends its ``prompt=`` to the
messages the hook returned and sends the agent's tools. The hook therefore trims with the prompt
in front (counted, always kept) and returns the messages without it.

With recall (the default), the hook trims through a
:class:`~agent_latency.trimming._recall.RecallingTrimmer`: an elision marker goes where history
was cut, and :meth:`PreModelHook.read_back` answers the ``recall`` tool the user passes to
``create_react_agent`` (``agent_latency.trimming.recall_tool(hook)``). The hook cannot see the
agent's tools, so the marker names the tool only once that tool was made for the hook
(:meth:`PreModelHook.offer_tool`); until then it only says that messages were left out, so a
model without the tool is never told to call it. The hook counts the tool's definition with
the agent's tools either way (a request without it is smaller, so it still fits). What a call
left out is found again by trimming the state's messages before the calling answer the same
way: the hook's prompt and tools are fixed, so the trim is the one that call was sent (unless
the calibration moved in between).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import Runnable

from agent_latency.trimming._recall import RecallingTrimmer, Trimming, calling_message


def system_prompt(prompt: object) -> SystemMessage | None:
    """Returns the ``prompt=`` of ``create_react_agent`` as the message LangGraph sends.

    Raises:
        TypeError: When ``prompt`` is neither ``None``, a string nor a ``SystemMessage`` (a
            callable prompt builds its own messages: the trimmer belongs inside it).
    """
    if prompt is None or isinstance(prompt, SystemMessage):
        return prompt
    if isinstance(prompt, str):
        return SystemMessage(prompt)
    raise TypeError(
        "as_pre_model_hook: prompt must be the str or SystemMessage given to "
        f"create_react_agent, got {type(prompt).__name__}; with a callable prompt, "
        "call trimmer.invoke(messages) inside it instead."
    )


NO_RECALL = (
    "recall_tool: this pre-model hook was made with recall=False; make it with "
    "trimmer.as_pre_model_hook() (recall is on by default)."
)


class PreModelHook:
    """A ``pre_model_hook``: trims the state's messages into ``llm_input_messages``.

    Args:
        trimmer: The trimmer, counting the agent's tools (and the recall tool with recall).
        prompt: The system prompt LangGraph prepends after the hook, or ``None``.
        recall: Mark the cut, and answer the ``recall`` tool once it is made for the hook (see
            the module docstring).
    """

    def __init__(self, trimmer: Trimming, prompt: SystemMessage | None, *, recall: bool) -> None:
        self.prompt = prompt
        self.trimmer = trimmer
        self.recalling = RecallingTrimmer(trimmer, offers_tool=False) if recall else None

    def __call__(self, state: Any) -> dict[str, list[BaseMessage]]:
        """Returns the state update with the trimmed messages in ``llm_input_messages``."""
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        # Its invoke reports the trim to the run's handlers.
        trims: Runnable[Any, list[BaseMessage]] = (
            self.recalling if self.recalling is not None else self.trimmer  # type: ignore[assignment]
        )
        if self.prompt is None:
            return {"llm_input_messages": trims.invoke(messages)}
        trimmed = trims.invoke([self.prompt, *messages])
        return {"llm_input_messages": [m for m in trimmed if m is not self.prompt]}

    def offer_tool(self) -> None:
        """Notes that the agent has the ``recall`` tool: from now on the marker invites it.

        Raises:
            ValueError: When the hook was made with ``recall=False``.
        """
        if self.recalling is None:
            raise ValueError(NO_RECALL)
        if not self.recalling.offers_tool:
            self.recalling = RecallingTrimmer(self.trimmer)

    def read_back(self, messages: Sequence[BaseMessage], call_id: str | None, query: str) -> str:
        """The recall tool's answer: what the model call that called it left out, as asked.

        Raises:
            ValueError: When the hook was made with ``recall=False``.
        """
        if self.recalling is None:
            raise ValueError(NO_RECALL)
        calling = calling_message(messages, call_id)
        before = list(messages[:calling]) if calling is not None else []
        inputs = before if self.prompt is None else [self.prompt, *before]
        cut = self.recalling.left_out(inputs) if before else []
        left_out = [m for m in cut if m is not self.prompt]
        return self.recalling.read(left_out, query, conversation=before, call_id=call_id)
