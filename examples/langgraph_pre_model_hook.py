"""Code not yet on ``create_agent``: LangGraph's ``create_react_agent`` with the trimmer's hook.

New agents use ``langchain.agents.create_agent`` with ``TrimmingMiddleware``
(``agent_with_middleware.py``). ``trimmer.as_pre_model_hook()`` fits ``pre_model_hook``, which
came with langgraph-prebuilt 0.1.8 (LangGraph 0.3); LangGraph 1.0 deprecates
``create_react_agent`` (``LangGraphDeprecatedSinceV10``, to be removed in 2.0), and this example
keeps working until then. The hook returns ``{"llm_input_messages": trimmed}``: the model sees
the trimmed list, the graph's state keeps every message. Where the hook cuts history it sends a
marker that invites the model to call the ``recall`` tool, which reads the cut messages back:
``recall_tool(hook)`` is that tool, given to the agent with its own.
Run: ``python examples/langgraph_pre_model_hook.py [--otlp]``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from _common import TrimReport, example_setup, parse_args
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10

from agent_latency import PriorityTrimmer, build_chat_model
from agent_latency.trimming import recall_tool


@tool
def lookup_invoice(invoice_id: str) -> str:
    """Returns an invoice's amount and status."""
    return f"Invoice {invoice_id}: 1,250 EUR, paid on 2026-11-02."


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__ or "", argv)
    with example_setup(args) as (settings, telemetry):
        tools = [lookup_invoice]
        hook = PriorityTrimmer(budget=600).as_pre_model_hook(tools=tools)
        with warnings.catch_warnings():
            # LangGraph 1.x points to langchain.agents.create_agent; this agent still works.
            warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
            agent = create_react_agent(
                build_chat_model(settings),
                tools=[*tools, recall_tool(hook)],
                pre_model_hook=hook,
            )
        history = []
        for n in range(15):
            history += [HumanMessage(f"Note {n}: " + "context " * 40), AIMessage("Understood.")]
        history.append(HumanMessage("Was invoice INV-7 paid?"))
        report = TrimReport()
        state = agent.invoke(
            {"messages": history}, config={"callbacks": [telemetry.handler(), report]}
        )
        kept = report.results[0]  # the hook's trim before the first model call
        print(
            f"state keeps {len(state['messages'])} messages; the model saw "
            f"{len(kept.messages)} of the first {len(history)} ({kept.tokens_after} tokens)."
        )
        print(f"answer: {state['messages'][-1].text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
