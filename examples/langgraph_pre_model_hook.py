"""LangGraph's ``create_react_agent`` with ``trimmer.as_pre_model_hook()``.

The hook returns ``{"llm_input_messages": trimmed}``: the model sees the trimmed list, the graph's
state keeps every message. Run: ``python examples/langgraph_pre_model_hook.py [--otlp]``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from _common import TrimReport, example_setup, parse_args
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

from agent_latency import PriorityTrimmer, build_chat_model


@tool
def lookup_invoice(invoice_id: str) -> str:
    """Returns an invoice's amount and status."""
    return f"Invoice {invoice_id}: 1,250 EUR, paid on 2026-11-02."


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__ or "", argv)
    with example_setup(args) as (settings, telemetry):
        trimmer = PriorityTrimmer(budget=600)
        with warnings.catch_warnings():
            # LangGraph 1.x points to langchain.agents.create_agent; this agent still works.
            warnings.simplefilter("ignore")
            agent = create_react_agent(
                build_chat_model(settings),
                tools=[lookup_invoice],
                pre_model_hook=trimmer.as_pre_model_hook(),
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
