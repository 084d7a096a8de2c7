"""Attach agent-latency to an agent built without any knowledge of it, without editing its code.

``build_support_agent`` stands for code you do not own. From the outside, the callback handler is
attached with ``with_config`` and the trimmer is put in front of the agent, trimming the
conversation the caller hands in.
Run: ``python examples/attach_to_existing_agent.py [--base-url URL --model M] [--otlp]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from _common import example_setup, parse_args
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableParallel
from langchain_core.tools import tool

from agent_latency import PriorityTrimmer, build_chat_model


# --- code you do not own: it knows nothing about agent-latency --------------------------------
@tool
def weather(city: str) -> str:
    """Returns the weather of a city."""
    return f"{city}: 21 °C, light wind."


def build_support_agent(model: BaseChatModel) -> Runnable[Any, Any]:
    return create_agent(model, tools=[weather], system_prompt="You answer travel questions.")


# -----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__ or "", argv)
    with example_setup(args) as (settings, telemetry):
        existing = build_support_agent(build_chat_model(settings))

        # From the outside: trim what goes in, trace everything that runs inside.
        trimmer = PriorityTrimmer.from_settings(settings, budget=800)
        handler = telemetry.handler()
        agent = (RunnableParallel(messages=trimmer) | existing).with_config(callbacks=[handler])

        history = []
        for n in range(20):
            history += [HumanMessage(f"Trip {n}: " + "plans " * 40), AIMessage("Noted. " * 30)]
        history.append(HumanMessage("What is the weather in Lisbon today?"))
        state = agent.invoke({"messages": history})
        print(f"sent {len(state['messages'])} messages; answer: {state['messages'][-1].text!r}")
        print(f"open runs after the call: {handler.open_runs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
