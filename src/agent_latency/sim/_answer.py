"""What the simulated model answers: deterministic filler text or a call to an offered tool.

The decision is the one an agent loop needs to make progress and stop: when tools are offered
and the conversation ends with a user message, the answer calls the first tool (or the one
``tool_choice`` names, or any time ``tool_choice`` is ``"required"``) with arguments built from
its JSON schema; otherwise, e.g. right after a tool result, it is text. Nothing is random, so the
same request always gets the same answer.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._protocol import ChatRequest

# Common words that are one token each in cl100k, so one streamed piece is one token.
_FILLER_WORDS = (
    "The",
    " agent",
    " waited",
    " for",
    " the",
    " first",
    " token",
    " of",
    " this",
    " answer",
    ",",
    " which",
    " the",
    " simulator",
    " sends",
    " one",
    " word",
    " at",
    " a",
    " time",
    ".",
)
_ARGUMENT_PIECE_CHARS = 4  # JSON arguments stream in pieces about the size of a token
_MAX_SCHEMA_DEPTH = 8


@dataclass(frozen=True)
class ToolCall:
    """A call the simulated model makes to one offered tool."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """One complete answer, ready to be sent whole or piece by piece.

    Attributes:
        pieces: Text pieces, or for a tool call the pieces of its JSON arguments; each counts
            as one output token and is one streamed chunk.
        tool_call: The tool call, when the answer is one.
        finish_reason: ``"stop"``, ``"length"`` or ``"tool_calls"``.
    """

    pieces: tuple[str, ...]
    tool_call: ToolCall | None
    finish_reason: str

    @property
    def completion_tokens(self) -> int:
        """Output tokens billed: one per piece, plus the tool name for a tool call."""
        return len(self.pieces) + (self.tool_call is not None)

    def message(self) -> dict[str, Any]:
        """Returns the assistant message of a blocking response."""
        if self.tool_call is None:
            return {"role": "assistant", "content": "".join(self.pieces), "refusal": None}
        return {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [_tool_call_json(self.tool_call, with_arguments=True)],
        }

    def deltas(self) -> list[dict[str, Any]]:
        """Returns the streamed deltas, one per output token, the role in the first."""
        if self.tool_call is None:
            deltas: list[dict[str, Any]] = [{"content": piece} for piece in self.pieces]
            deltas[0] = {"role": "assistant", **deltas[0]}
            return deltas
        head = _tool_call_json(self.tool_call, with_arguments=False)
        return [
            {"role": "assistant", "content": None, "tool_calls": [head]},
            *({"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in self.pieces),
        ]


def _tool_call_json(call: ToolCall, *, with_arguments: bool) -> dict[str, Any]:
    arguments = call.arguments if with_arguments else ""
    tool_call: dict[str, Any] = {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }
    return tool_call if with_arguments else {"index": 0, **tool_call}


def compose_answer(request: ChatRequest, prompt: bytes, *, answer_tokens: int) -> Answer:
    """Returns the deterministic answer to ``request``.

    Args:
        request: The validated request.
        prompt: Its prompt tokens; a digest of them makes tool-call ids unique per prompt.
        answer_tokens: Length of a text answer before ``max_tokens`` caps it.
    """
    tool = _tool_to_call(request)
    if tool is not None:
        arguments = json.dumps(example_value(tool.get("parameters"), depth=0), ensure_ascii=False)
        call_id = "call_" + hashlib.sha256(prompt).hexdigest()[:24]
        pieces = tuple(
            arguments[i : i + _ARGUMENT_PIECE_CHARS]
            for i in range(0, len(arguments), _ARGUMENT_PIECE_CHARS)
        )
        return Answer(pieces, ToolCall(call_id, tool["name"], arguments), "tool_calls")
    length = answer_tokens if request.max_tokens is None else min(answer_tokens, request.max_tokens)
    pieces = tuple(_FILLER_WORDS[i % len(_FILLER_WORDS)] for i in range(length))
    return Answer(pieces, None, "length" if length < answer_tokens else "stop")


def _tool_to_call(request: ChatRequest) -> Mapping[str, Any] | None:
    """Returns the ``function`` object of the tool the answer calls, if it calls one."""
    if not request.tools or request.tool_choice == "none":
        return None
    functions: list[Mapping[str, Any]] = [tool["function"] for tool in request.tools]
    if request.forced_tool is not None:
        return next(f for f in functions if f["name"] == request.forced_tool)
    if request.tool_choice == "required" or request.messages[-1]["role"] == "user":
        return functions[0]
    return None


def example_value(schema: object, *, depth: int) -> Any:
    """Returns a plausible value that fits a JSON schema (defaults and enums first).

    Args:
        schema: A JSON schema; anything else yields a string.
        depth: Nesting level, bounded so that recursive schemas terminate.
    """
    if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return "example"
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for combinator in ("anyOf", "oneOf", "allOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            concrete = [
                o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")
            ]
            return example_value((concrete or options)[0], depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return {}
        return {name: example_value(sub, depth=depth + 1) for name, sub in properties.items()}
    if kind == "array":
        return [example_value(schema.get("items"), depth=depth + 1)]
    return _scalar_example(kind, schema)


def _scalar_example(kind: object, schema: Mapping[str, Any]) -> Any:
    minimum = schema.get("minimum")
    if kind == "integer":
        return math.ceil(minimum) if isinstance(minimum, int | float) and minimum > 1 else 1
    if kind == "number":
        return float(minimum) if isinstance(minimum, int | float) and minimum > 1 else 1.0
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "example"
