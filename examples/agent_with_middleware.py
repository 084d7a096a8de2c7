"""A ``create_agent`` agent with two tools, trimmed by ``TrimmingMiddleware`` and traced.

The middleware trims what each model call sends; the agent's stored history keeps everything.
Run: ``python examples/agent_with_middleware.py [--base-url URL --model M] [--otlp]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from _common import example_setup, parse_args
from langchain.agents import create_agent
from langchain_core.tools import tool

from agent_latency import PriorityTrimmer, TrimmingMiddleware, build_chat_model


@tool
def search_orders(customer: str) -> str:
    """Looks up the recent orders of a customer."""
    return f"{customer}: order 1042 (shipped), order 1043 (delayed at customs). " + "log " * 400


@tool
def shipping_status(order_id: str) -> str:
    """Returns the carrier status of an order."""
    return f"Order {order_id}: held at customs since Monday, release expected Thursday."


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__ or "", argv)
    with example_setup(args) as (settings, telemetry):
        agent = create_agent(
            build_chat_model(settings),
            tools=[search_orders, shipping_status],
            system_prompt="You are a support agent. Use the tools, then answer briefly.",
            middleware=[TrimmingMiddleware(PriorityTrimmer.from_settings(settings))],
        )
        handler = telemetry.handler()
        state = agent.invoke(
            {"messages": [("user", "Which of ACME's orders is late, and when will it arrive?")]},
            config={"callbacks": [handler]},
        )
        for message in state["messages"]:
            calls = [call["name"] for call in getattr(message, "tool_calls", [])]
            line = f"{message.type:>6}: {str(message.text)[:70]!r}"
            print(line + (f" -> tools {calls}" if calls else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
