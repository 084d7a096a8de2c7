"""Conversations and simulator settings several test modules send."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from agent_latency.sim import SimulatorConfig

INSTANT = SimulatorConfig(
    overhead_ms=0,
    prefill_ms_per_token=0,
    attention_ms_per_1k_context=0,
    decode_tokens_per_s=100_000,
    answer_tokens=2,
    cache_block_tokens=1,  # any shared prefix is reused: the strategies' own difference shows
)


def agent_conversation(rounds: int = 6, result_lines: int = 12) -> list[dict[str, Any]]:
    """A small agent history: each round a question, a tool call, its result and an answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent. Use the tools; be brief."}
    ]
    for n in range(rounds):
        call_id = f"call_{n}"
        lines = "\n".join(
            f"order NW-{n}{i:03d}: shipped from hub {i % 4}, {i * 7} km, status ok"
            for i in range(result_lines)
        )
        messages += [
            {"role": "user", "content": f"Question {n}: where is order NW-{n}000?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "get_order", "arguments": f'{{"n": {n}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": lines},
            {"role": "assistant", "content": f"Order NW-{n}000 is on its way."},
        ]
    messages.append({"role": "user", "content": "Summarise every order above."})
    return messages


def filler(n: int, topic: str = "shelves") -> str:
    """A user turn of about 50 tokens that says nothing a question asks about."""
    return f"Note {n} on the {topic} (code-{n}x): " + "restocked and dusted " * 12


def call_ids(message: BaseMessage) -> list[str]:
    """The ids of the calls an assistant message makes, the invalid ones too (ChatOpenAI sends
    both as ``tool_calls``)."""
    if not isinstance(message, AIMessage):
        return []
    return [c["id"] for c in [*message.tool_calls, *message.invalid_tool_calls] if c.get("id")]


def assert_openai_order(sent: Sequence[BaseMessage]) -> None:
    """What OpenAI's API requires of the messages: each call's results right after it, none
    without a call, none missing."""
    open_calls: set[str] = set()
    for message in sent:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"a result out of place: {message!r}"
            open_calls.discard(message.tool_call_id)
            continue
        assert not open_calls, f"calls left unanswered before {message!r}: {open_calls}"
        open_calls = set(call_ids(message))
    assert not open_calls, f"calls left unanswered at the end: {open_calls}"
