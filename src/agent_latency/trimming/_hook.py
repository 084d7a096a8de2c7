"""The LangGraph ``pre_model_hook`` of a trimmer, for ``create_react_agent``.

LangGraph runs the hook as its own node, then, in the model node, prepends its ``prompt=`` to the
messages the hook returned and sends the agent's tools. The hook therefore trims with the prompt
in front (counted, always kept) and returns the messages without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import Runnable


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


def pre_model_hook(
    trimmer: Runnable[Any, list[BaseMessage]], prompt: SystemMessage | None
) -> Callable[[Any], dict[str, list[BaseMessage]]]:
    """Returns a hook that trims the state's messages into ``llm_input_messages``.

    Args:
        trimmer: The trimmer (its ``invoke`` reports the trim to the run's handlers).
        prompt: The system prompt LangGraph prepends after the hook, or ``None``.
    """

    def trim_before_model(state: Any) -> dict[str, list[BaseMessage]]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        if prompt is None:
            return {"llm_input_messages": trimmer.invoke(messages)}
        trimmed = trimmer.invoke([prompt, *messages])
        return {"llm_input_messages": [m for m in trimmed if m is not prompt]}

    return trim_before_model
