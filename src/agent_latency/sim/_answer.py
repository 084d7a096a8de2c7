"""What the simulated model answers: deterministic filler text or calls to offered tools.

The decision is the one an agent loop needs to make progress and stop. When tools are offered
and the conversation ends with a user message (or ``tool_choice`` is ``"required"``), the answer
calls tools, with arguments built from their JSON schemas; otherwise, e.g. right after a tool
result, it is text. Which tools:

* the one ``tool_choice`` names;
* else every tool the latest user message names: its whole name, or a word of it (split at
  ``_``, ``-``, ``.`` and case changes; 3 letters or more, generic verbs such as "get" or
  "search" left out). Several named tools are called in parallel, in the order offered, unless
  the request sets ``parallel_tool_calls`` to false (then the first of them);
* else the tool whose description shares the most words of 4 letters or more with that message;
* else the next tool in turn: the number of tool calls already in the conversation, modulo the
  number of tools, so a loop with ``tool_choice="required"`` goes through all of them.

A string argument without a default is the first phrase the latest user message puts in double
quotes (``recall "the database port"`` gives ``"the database port"``), as a model would copy the
words a user asked it to use; else ``"example"``.

Nothing is random, so the same request always gets the same answer.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
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
# Words of tool names that say what a tool does in general, not what it is about.
_GENERIC_NAME_WORDS = frozenset(
    {"get", "set", "add", "put", "list", "search", "find", "fetch", "lookup", "look", "query"}
    | {"run", "call", "tool", "make", "create", "update", "delete", "remove", "read", "write"}
    | {"check", "load", "save", "send", "the", "and", "for", "with", "from"}
)
_NAME_WORD_LETTERS = 3
_DESCRIPTION_WORD_LETTERS = 4
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_WORDS = re.compile(r"\w+")
_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class ToolCall:
    """A call the simulated model makes to one offered tool."""

    call_id: str
    name: str
    arguments: str

    @property
    def pieces(self) -> tuple[str, ...]:
        """The arguments in token-sized pieces, as they are streamed."""
        step = _ARGUMENT_PIECE_CHARS
        return tuple(self.arguments[i : i + step] for i in range(0, len(self.arguments), step))


@dataclass(frozen=True)
class Answer:
    """One complete answer, ready to be sent whole or piece by piece.

    Attributes:
        pieces: Text pieces of a text answer, each one output token and one streamed chunk.
        tool_calls: The tool calls of an answer that calls tools (then ``pieces`` is empty).
        finish_reason: ``"stop"``, ``"length"`` or ``"tool_calls"``.
    """

    pieces: tuple[str, ...]
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str

    @property
    def completion_tokens(self) -> int:
        """Output tokens billed: one per piece; per tool call, its name plus its arguments."""
        return len(self.pieces) + sum(1 + len(call.pieces) for call in self.tool_calls)

    def message(self) -> dict[str, Any]:
        """Returns the assistant message of a blocking response."""
        if not self.tool_calls:
            return {"role": "assistant", "content": "".join(self.pieces), "refusal": None}
        return {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [_tool_call_json(call) for call in self.tool_calls],
        }

    def deltas(self) -> list[dict[str, Any]]:
        """Returns the streamed deltas, one per output token, the role in the first."""
        if not self.tool_calls:
            deltas: list[dict[str, Any]] = [{"content": piece} for piece in self.pieces]
            deltas[0] = {"role": "assistant", **deltas[0]}
            return deltas
        deltas = []
        for index, call in enumerate(self.tool_calls):
            head = {"index": index, **_tool_call_json(call, arguments="")}
            deltas.append({"tool_calls": [head]})
            deltas.extend(
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                for piece in call.pieces
            )
        deltas[0] = {"role": "assistant", "content": None, **deltas[0]}
        return deltas


def _tool_call_json(call: ToolCall, *, arguments: str | None = None) -> dict[str, Any]:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": call.arguments if arguments is None else arguments,
        },
    }


def compose_answer(request: ChatRequest, prompt: bytes, *, answer_tokens: int) -> Answer:
    """Returns the deterministic answer to ``request``.

    Args:
        request: The validated request.
        prompt: Its prompt tokens; a digest of them makes tool-call ids unique per prompt.
        answer_tokens: Length of a text answer before ``max_tokens`` caps it.
    """
    tools = _tools_to_call(request)
    if tools:
        quoted = _QUOTED.search(_latest_user_text(request.messages))
        text = quoted.group(1) if quoted else "example"
        calls = tuple(
            ToolCall(
                "call_" + hashlib.sha256(prompt + index.to_bytes(4, "big")).hexdigest()[:24],
                tool["name"],
                json.dumps(
                    example_value(tool.get("parameters"), depth=0, text=text), ensure_ascii=False
                ),
            )
            for index, tool in enumerate(tools)
        )
        return Answer((), calls, "tool_calls")
    length = answer_tokens if request.max_tokens is None else min(answer_tokens, request.max_tokens)
    pieces = tuple(_FILLER_WORDS[i % len(_FILLER_WORDS)] for i in range(length))
    return Answer(pieces, (), "length" if length < answer_tokens else "stop")


def _tools_to_call(request: ChatRequest) -> list[Mapping[str, Any]]:
    """Returns the ``function`` objects of the tools the answer calls (none: a text answer)."""
    if not request.tools or request.tool_choice == "none":
        return []
    functions: list[Mapping[str, Any]] = [tool["function"] for tool in request.tools]
    if request.forced_tool is not None:
        return [next(f for f in functions if f["name"] == request.forced_tool)]
    if request.tool_choice != "required" and request.messages[-1]["role"] != "user":
        return []
    words = _words(_latest_user_text(request.messages), _NAME_WORD_LETTERS)
    named = [f for f in functions if _is_named(f["name"], words)]
    if named:
        return named if request.parallel_tool_calls else named[:1]
    overlaps = [len(_words(f.get("description")) & words) for f in functions]
    if max(overlaps) > 0:
        return [functions[overlaps.index(max(overlaps))]]
    calls_so_far = sum(len(m.get("tool_calls") or ()) for m in request.messages)
    return [functions[calls_so_far % len(functions)]]


def _words(text: object, letters: int = _DESCRIPTION_WORD_LETTERS) -> set[str]:
    """Returns the lower-case words of ``text`` with at least ``letters`` characters."""
    if not isinstance(text, str):
        return set()
    return {_singular(w) for w in _WORDS.findall(text.lower()) if len(w) >= letters}


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and len(word) > _DESCRIPTION_WORD_LETTERS else word


def _is_named(name: str, words: set[str]) -> bool:
    """Whether a message with these words names the tool ``name``."""
    if _singular(name.lower()) in words:
        return True
    parts = {_singular(part.lower()) for part in _NAME_PARTS.findall(name)}
    return any(
        part in words
        for part in parts
        if len(part) >= _NAME_WORD_LETTERS and part not in _GENERIC_NAME_WORDS
    )


def _latest_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    latest = next((m for m in reversed(messages) if m["role"] == "user"), None)
    content = latest.get("content") if latest is not None else None
    if isinstance(content, list):
        return " ".join(p["text"] for p in content if isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def example_value(schema: object, *, depth: int, text: str = "example") -> Any:
    """Returns a plausible value that fits a JSON schema (defaults and enums first).

    Args:
        schema: A JSON schema; anything else yields a string.
        depth: Nesting level, bounded so that recursive schemas terminate.
        text: The value of a string without a default.
    """
    if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return text
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
            return example_value((concrete or options)[0], depth=depth + 1, text=text)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return {}
        return {
            name: example_value(sub, depth=depth + 1, text=text) for name, sub in properties.items()
        }
    if kind == "array":
        return [example_value(schema.get("items"), depth=depth + 1, text=text)]
    return _scalar_example(kind, schema, text)


def _scalar_example(kind: object, schema: Mapping[str, Any], text: str) -> Any:
    minimum = schema.get("minimum")
    if kind == "integer":
        return math.ceil(minimum) if isinstance(minimum, int | float) and minimum > 1 else 1
    if kind == "number":
        return float(minimum) if isinstance(minimum, int | float) and minimum > 1 else 1.0
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return text
