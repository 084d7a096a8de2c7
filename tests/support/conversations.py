"""Conversations and simulator settings several test modules send."""

from __future__ import annotations

import pickle
import random
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from agent_latency.sim import SimulatorConfig
from agent_latency.trimming import TrimResult

# A 1x1 PNG as an OpenAI image part: OpenAI's rule counts it as one tile.
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhg"
    "GAWjR9awAAAABJRU5ErkJggg=="
)
IMAGE: dict[str, Any] = {"type": "image_url", "image_url": {"url": PNG}}

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


def shelf_notes(rounds: int) -> list[BaseMessage]:
    """A history with ids, as an agent's state holds it: every round a note on the shelves
    (about 40 tokens) and its acknowledgement."""
    messages: list[BaseMessage] = []
    for r in range(rounds):
        said = f"Note {r}: the shelves were restocked " + "ok " * 30
        messages += [HumanMessage(said, id=f"h{r}"), AIMessage(f"Noted {r}.", id=f"a{r}")]
    return messages


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


WORDS = ["door", "code", "lyra", "billing", "batch", "harbour", "invoice", "lamp", "seven", "blue"]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


class GrowingConversation:
    """A conversation that grows by random turns, with tool results sometimes arriving late,
    and is edited in place now and then."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.messages: list[BaseMessage] = [SystemMessage("You answer from the records.")]
        self.pending: list[str] = []
        self.calls = 0

    def grow(self) -> None:
        rng = self.rng
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if self.pending and roll < 0.3:
                call = self.pending.pop(rng.randrange(len(self.pending)))
                self.messages.append(
                    ToolMessage(_text(rng, rng.randint(5, 120)), tool_call_id=call)
                )
            elif roll < 0.5:
                ids = [f"c{self.calls + i}" for i in range(rng.randint(1, 2))]
                self.calls += len(ids)
                tool_calls = [
                    {"name": "search", "args": {"q": _text(rng, 2)}, "id": i} for i in ids
                ]
                self.messages.append(AIMessage("", tool_calls=tool_calls))
                self.pending += ids
            elif roll < 0.55:
                self.messages.append(ToolMessage("stray", tool_call_id="nobody"))
            elif roll < 0.6:
                self.messages.append(SystemMessage(_text(rng, 4)))
            elif roll < 0.65:
                self.messages.append(ChatMessage(_text(rng, 6), role="user"))
            elif roll < 0.8:
                self.messages.append(AIMessage(_text(rng, rng.randint(3, 40))))
            else:
                content: Any = _text(rng, rng.randint(3, 20))
                if rng.random() < 0.2:
                    content = [{"type": "text", "text": content}]
                self.messages.append(HumanMessage(content))

    def edit(self) -> None:
        """Edits an earlier message in place, or cuts the conversation short."""
        rng, messages = self.rng, self.messages
        message = messages[rng.randrange(len(messages))]
        roll = rng.random()
        if roll < 0.15 and len(messages) > 3:
            del messages[rng.randrange(2, len(messages)) :]
            self.pending = []
        elif isinstance(message, AIMessage) and message.tool_calls and roll < 0.5:
            message.tool_calls[0]["args"]["q"] = _text(rng, 30)
        elif isinstance(message, ToolMessage) and roll < 0.5:
            message.tool_call_id = rng.choice(["nobody", f"c{rng.randrange(self.calls + 1)}"])
        elif isinstance(message.content, list):
            message.content[0]["text"] = _text(rng, 50)  # type: ignore[index]
        else:
            message.content = _text(rng, rng.randint(1, 80))


def same_facts(remembered: Any, fresh: Any) -> bool:
    """Whether the memo's facts are a fresh analysis's (``MessageFacts``, internal to the
    trimming package): the same in all but which grouping they are (a fresh analysis is always
    a grouping of its own)."""
    return bool(remembered._replace(generation=0) == fresh._replace(generation=0))


def figures(trim: TrimResult, inputs: list[BaseMessage]) -> dict[str, Any]:
    """What a trim of ``inputs`` decided, its messages by their position in ``inputs``."""
    position = {id(m): i for i, m in enumerate(inputs)}
    return {
        "messages": [position.get(id(m), m.content) for m in trim.messages],
        "decisions": trim.decisions,
        "tokens": (trim.tokens_before, trim.tokens_after),
        "question_retention": trim.question_retention,
    }


def read_back(messages: list[BaseMessage]) -> list[BaseMessage]:
    """``messages`` as a checkpointer gives them back at a new turn: new objects, equal."""
    copies: list[BaseMessage] = pickle.loads(pickle.dumps(messages))
    return copies
