"""How each model family's chat template frames a request, as pieces a vocabulary counts.

We render a request as a list of pieces per message, so each message is tokenised once and its
count cached: text, a :class:`Special` (one special token) or an ``int`` (that many opaque
tokens: an image, audio or a file, as :mod:`._media` estimates them). Counting pieces apart can
differ from the rendered string by a token where BPE would merge across a boundary (well under
1% of a prompt). Families (:data:`FRAMINGS`):

- ``openai``: OpenAI's published rule: 3 tokens per message plus its fields, 1 more for a
  ``name``, 3 of reply priming. Tools (rendered unpublished, as TypeScript): each function's
  compact JSON plus 3, plus 12 per request (the OpenAI cookbook's ``num_tokens_for_tools``),
  erring high; a ``json_schema`` ``response_format`` counts its JSON plus 3.
- ``qwen``, ``qwen2.5``, ``qwen3``, ``chatml``: ChatML with Qwen's tool block, ``<tool_call>``
  and ``<tool_response>``, and the template's default system prompt when the first message is
  not a system one. We frame each tool result in its own user turn (5 tokens more per extra one
  than the template, erring toward under-budget).
- ``llama3``, ``llama3.1``: header turns; 3.1+ always opens with a dated system turn and puts
  the tool JSON (indented by 4) in the first user message.
- ``gemma``: turns; a system message is folded into the first user turn.
- ``mistral``: ``[INST] ... [/INST]`` turns (Mistral, Mixtral, Ministral, Devstral and the
  other Mistral instruct models, and Llama 2's chat template, which has the same form); a
  system message is folded into a user turn, and tool calls and results are
  ``[TOOL_CALLS]`` and ``[TOOL_RESULTS]`` blocks.
- ``smollm2``: plain ChatML with a default system turn and no tool calls or definitions at all.

Only OpenAI puts ``response_format`` in the prompt: other servers enforce it by constrained
decoding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agent_latency.tokens._media import IMAGE_PART_TYPES, media_tokens

# Blocks ChatOpenAI leaves out of the request.
_UNSENT_PART_TYPES: Final = frozenset({"tool_use", "thinking", "reasoning_content"})


class Special(str):
    """One special token of a template, counted as exactly one token."""

    __slots__ = ()


Piece = str | int
"""Text, a :class:`Special`, or a number of opaque tokens."""


def content_pieces(content: object) -> list[Piece]:
    """Returns the pieces of a message's content as it is sent.

    Text parts count their text, image, audio and file parts what :func:`media_tokens`
    estimates, Anthropic-style ``tool_result`` blocks (ChatOpenAI passes them through) their
    nested content; blocks ChatOpenAI drops and other parts without text count nothing.
    """
    if isinstance(content, str):
        return [content] if content else []
    pieces: list[Piece] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, str):
            pieces.append(part)
            continue
        if not isinstance(part, Mapping) or part.get("type") in _UNSENT_PART_TYPES:
            continue
        kind = part.get("type")
        if kind == "tool_result":
            pieces.extend(content_pieces(part.get("content")))
        elif kind not in IMAGE_PART_TYPES and isinstance(part.get("text"), str):
            pieces.append(part["text"])  # text even in a file block, as the shortener reads it
        elif (tokens := media_tokens(part)) is not None:
            pieces.append(tokens)
    return pieces


def _calls(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Returns ``(name, JSON arguments)`` of each tool call of a wire message."""
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        calls.append((str(function.get("name", "")), str(function.get("arguments", ""))))
    return calls


def _json(value: object, **options: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, **options)


class Framing:
    """OpenAI's framing; the base of the template families.

    Attributes:
        name: The family name, as accepted by ``TokenCounter(framing=...)``.
        folds_system: Whether the template folds the system message into the first user turn:
            it then takes one system message, then user and assistant turns alternating from a
            user one, and refuses any other order.
    """

    name = "openai"
    folds_system = False
    _START, _SEP, _END, _NAME = (Special(f"<|{n}|>") for n in ("start", "sep", "end", "name"))

    def message(self, message: Mapping[str, Any]) -> list[Piece]:
        """Returns the pieces of one wire-format message, framing included."""
        pieces: list[Piece] = [self._START, str(message["role"])]
        if isinstance(message.get("name"), str):
            pieces += [message["name"], self._NAME]
        pieces.append(self._SEP)
        pieces += content_pieces(message.get("content"))
        if isinstance(message.get("tool_call_id"), str):
            pieces.append(message["tool_call_id"])
        for name, arguments in _calls(message):
            pieces += [self._START, name, self._SEP, arguments, self._END]
        pieces.append(self._END)
        return pieces

    def request(self, first_role: str | None) -> tuple[list[Piece], list[Piece]]:
        """Returns what a request adds before its first message and after its last one.

        Args:
            first_role: The wire role of the first message (``None`` for no messages): a
                template adds its default system prompt when it is not ``"system"``.
        """
        return [], [self._START, "assistant", self._SEP]

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> list[Piece]:
        """Returns the pieces of the tool definitions (OpenAI wire dicts) of a request."""
        if not tools:
            return []
        pieces: list[Piece] = [Special("<|tools|>")] * 12
        for tool in tools:
            function = tool.get("function", tool)
            pieces += [self._START, _json(function, separators=(",", ":")), self._SEP, self._END]
        return pieces

    def response_format(self, response_format: Mapping[str, Any]) -> list[Piece]:
        """Returns the prompt pieces of a ``response_format`` (or a bare JSON schema)."""
        kind = response_format.get("type")
        if kind in ("text", "json_object"):
            return []
        schema = response_format.get("json_schema", response_format)
        return [self._START, _json(schema, separators=(",", ":")), self._SEP, self._END]


_IM_START, _IM_END = Special("<|im_start|>"), Special("<|im_end|>")
_QWEN_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_QWEN_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


class ChatMLFraming(Framing):
    """A ChatML template: Qwen's, with its tool block, or a plain one that renders no tools.

    Args:
        name: The family name.
        default_system: The system prompt the template adds when none is given, if any.
        renders_tools: Whether the template renders tool definitions, tool calls and tool
            results as Qwen's does. A plain ChatML template (SmolLM2's) renders only each
            message's role and text: a ``tool`` message is a turn of role ``tool``, and tool
            calls and definitions are not in the prompt at all (llama.cpp's server, with
            ``--jinja``, sends the same prompt with or without them).
    """

    def __init__(
        self, name: str, default_system: str | None, *, renders_tools: bool = True
    ) -> None:
        self.name = name
        self._default_system = default_system
        self._renders_tools = renders_tools

    def message(self, message: Mapping[str, Any]) -> list[Piece]:
        role = str(message["role"])
        content = content_pieces(message.get("content"))
        if role == "tool" and self._renders_tools:
            body = ["user\n<tool_response>\n", *content, "\n</tool_response>"]
            return [_IM_START, *body, _IM_END, "\n"]
        calls = _calls(message) if self._renders_tools else []
        if not calls:
            return [_IM_START, role + "\n", *content, _IM_END, "\n"]
        pieces: list[Piece] = [_IM_START, role]
        if content:
            pieces += ["\n", *content]
        for name, arguments in calls:
            pieces.append(f'\n<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}')
            pieces.append("\n</tool_call>")
        return [*pieces, _IM_END, "\n"]

    def request(self, first_role: str | None) -> tuple[list[Piece], list[Piece]]:
        head: list[Piece] = []
        if first_role != "system" and self._default_system is not None:
            head = [_IM_START, "system\n" + self._default_system, _IM_END, "\n"]
        return head, [_IM_START, "assistant\n"]

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> list[Piece]:
        if not tools or not self._renders_tools:
            return []
        lines = "".join("\n" + _json(tool) for tool in tools)
        pieces: list[Piece] = [_QWEN_TOOLS_HEAD, lines, _QWEN_TOOLS_TAIL]
        if self._default_system is None:  # the block opens a system turn of its own
            return [_IM_START, "system\n", *pieces, _IM_END, "\n"]
        return pieces

    def response_format(self, response_format: Mapping[str, Any]) -> list[Piece]:
        return []


_SH, _EH, _EOT = Special("<|start_header_id|>"), Special("<|end_header_id|>"), Special("<|eot_id|>")
_LLAMA_DATES = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
_LLAMA_TOOLS_HEAD = (
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    '{"name": function name, "parameters": dictionary of argument name and its value}.'
    "Do not use variables.\n\n"
)


class Llama3Framing(Framing):
    """Llama 3's header template; 3.1 and later add the dated system turn.

    Args:
        name: The family name.
        dated: Whether the template always opens with the knowledge cut-off and date.
    """

    def __init__(self, name: str, *, dated: bool) -> None:
        self.name = name
        self._dated = dated

    def message(self, message: Mapping[str, Any]) -> list[Piece]:
        role = "ipython" if message["role"] == "tool" else str(message["role"])
        content = content_pieces(message.get("content"))
        for name, arguments in _calls(message):
            content.append(f'{{"name": "{name}", "parameters": {arguments}}}')
        return [_SH, role, _EH, "\n\n", *content, _EOT]

    def request(self, first_role: str | None) -> tuple[list[Piece], list[Piece]]:
        head: list[Piece] = [Special("<|begin_of_text|>")]
        if self._dated:
            dates: list[Piece] = [_LLAMA_DATES]
            head += dates if first_role == "system" else [_SH, "system", _EH, "\n\n", *dates, _EOT]
        return head, [_SH, "assistant", _EH, "\n\n"]

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> list[Piece]:
        if not tools:
            return []
        return [
            "Environment: ipython\n",
            _LLAMA_TOOLS_HEAD,
            *(_json(t, indent=4) + "\n\n" for t in tools),
        ]

    def response_format(self, response_format: Mapping[str, Any]) -> list[Piece]:
        return []


_SOT, _EOT_GEMMA = Special("<start_of_turn>"), Special("<end_of_turn>")


class GemmaFraming(Framing):
    """Gemma's turn template; its system message is folded into the first user turn."""

    name = "gemma"
    folds_system = True

    def message(self, message: Mapping[str, Any]) -> list[Piece]:
        role = str(message["role"])
        content = content_pieces(message.get("content"))
        for name, arguments in _calls(message):
            content.append(_json({"name": name, "arguments": arguments}))
        if role in ("system", "developer"):
            return [*content, "\n\n"]
        turn = "model\n" if role == "assistant" else "user\n"
        return [_SOT, turn, *content, _EOT_GEMMA, "\n"]

    def request(self, first_role: str | None) -> tuple[list[Piece], list[Piece]]:
        return [Special("<bos>")], [_SOT, "model\n"]

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> list[Piece]:
        return ["".join(_json(tool) + "\n" for tool in tools)] if tools else []

    def response_format(self, response_format: Mapping[str, Any]) -> list[Piece]:
        return []


_INST, _INST_END, _EOS = Special("[INST]"), Special("[/INST]"), Special("</s>")


class MistralFraming(Framing):
    """Mistral's instruct template (and Llama 2's, of the same form): ``[INST]`` user turns,
    assistant turns closed by ``</s>``; its system message is folded into a user turn."""

    name = "mistral"
    folds_system = True

    def message(self, message: Mapping[str, Any]) -> list[Piece]:
        role = str(message["role"])
        content = content_pieces(message.get("content"))
        if role in ("system", "developer"):
            return [*content, "\n\n"]
        if role == "assistant":
            calls = [{"name": name, "arguments": arguments} for name, arguments in _calls(message)]
            called: list[Piece] = [Special("[TOOL_CALLS]"), _json(calls)] if calls else []
            return [*_spaced(content), *called, _EOS]
        if role == "tool":
            call_id = message.get("tool_call_id")
            named = [_json({"call_id": call_id})] if isinstance(call_id, str) else []
            return [Special("[TOOL_RESULTS]"), *content, *named, Special("[/TOOL_RESULTS]")]
        return [_INST, *_spaced(content), _INST_END]

    def request(self, first_role: str | None) -> tuple[list[Piece], list[Piece]]:
        return [Special("<s>")], []

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> list[Piece]:
        if not tools:
            return []
        return [Special("[AVAILABLE_TOOLS]"), _json(list(tools)), Special("[/AVAILABLE_TOOLS]")]

    def response_format(self, response_format: Mapping[str, Any]) -> list[Piece]:
        return []


def _spaced(content: list[Piece]) -> list[Piece]:
    """``content`` after the space the template puts before it, joined to its first text (as
    the template's string is tokenised)."""
    if content and isinstance(content[0], str) and not isinstance(content[0], Special):
        return [" " + content[0], *content[1:]]
    return [" ", *content]


_SMOLLM2_SYSTEM: Final = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system turn SmolLM2-Instruct's template adds when the first message is not a system one
(its GGUF's ``tokenizer.chat_template``, as llama.cpp's ``/props`` shows it)."""

FRAMINGS: Final[Mapping[str, Framing]] = {
    framing.name: framing
    for framing in (
        Framing(),
        ChatMLFraming("qwen", "You are a helpful assistant."),
        ChatMLFraming(
            "qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        ),
        ChatMLFraming("qwen3", None),
        ChatMLFraming("chatml", None),
        ChatMLFraming("smollm2", _SMOLLM2_SYSTEM, renders_tools=False),
        Llama3Framing("llama3", dated=False),
        Llama3Framing("llama3.1", dated=True),
        GemmaFraming(),
        MistralFraming(),
    )
}
"""The framings by name."""


def framing_named(name: str) -> Framing:
    """Returns the framing called ``name``.

    Raises:
        ValueError: Naming the value and the choices, for an unknown name.
    """
    found = FRAMINGS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(
            f"TokenCounter: framing must be one of {', '.join(FRAMINGS)}, got {name!r}."
        )
    return found


# (pattern searched in the lower-cased model name after its last "/", vocabulary, framing, the
# vocabulary is the model's own); the first match wins.
_FAMILIES: Final = (
    (r"qwen3\.[56]", "qwen3.6", "qwen3", True),
    (r"qwen3", "qwen", "qwen3", True),
    (r"qwen2\.5|qwen-(plus|turbo|max)|qwq", "qwen", "qwen2.5", True),
    (r"qwen", "qwen", "qwen", True),
    (r"^(gpt-4o|gpt-4\.[15]|gpt-5|chatgpt-4o|gpt-oss|o[134])(\b|$)", "o200k_base", "openai", True),
    (r"^gpt-(4|3\.5)", "cl100k_base", "openai", True),
    (r"llama-?v?3[.p][1-9]", "llama3", "llama3.1", True),  # llama-3.1, llama3.2, llama-v3p1
    (r"llama-?v?3", "llama3", "llama3", True),
    (r"gemma", "cl100k_base", "gemma", False),
    (
        r"mistral|mixtral|ministral|devstral|codestral|magistral|pixtral",
        "cl100k_base",
        "mistral",
        False,
    ),
    (r"llama-?2(\b|[^.\d])", "cl100k_base", "mistral", False),  # llama-2-7b-chat, llama2
    (r"smollm2", "cl100k_base", "smollm2", False),
)


def model_family(model: str) -> tuple[str, str, bool] | None:
    """Returns ``(vocabulary, framing, own vocabulary)`` for a model name, or ``None``.

    Gemma's and SmolLM2's vocabularies ship in no PyPI package: their families count in
    ``cl100k_base`` with their own framing (an estimate; ``tokenizer = "server"`` is exact).
    """
    name = model.strip().lower().rsplit("/", 1)[-1]
    for pattern, vocabulary, framing, own in _FAMILIES:
        if re.search(pattern, name):
            return vocabulary, framing, own
    return None
