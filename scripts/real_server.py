"""Starts llama-cpp-python's OpenAI-compatible server with Gemma chat turns that keep tool turns.

The server's built-in ``gemma`` format drops system and ``tool`` messages, and its ``chatml``
format drops tool messages and tool calls, so an agent transcript shrinks to a fraction of its
size and trimming it changes little. This launcher registers ``gemma-turns``: Gemma's own turns
(``<start_of_turn>user|model ... <end_of_turn>``, real special tokens) with every message kept,
laid out as agent-latency's ``gemma`` framing counts it (``GemmaFraming``):

- the system message (and the tool definitions, if the request has any) opens the first user
  turn, followed by a blank line, as in Gemma's template;
- a ``tool`` result is a user turn; an assistant's tool calls follow its text as
  ``{"name": ..., "arguments": ...}`` JSON inside its model turn;
- the prompt ends with ``<start_of_turn>model``; llama.cpp adds ``<bos>`` when tokenizing.

So ``llm.tokenizer = "server"`` (the server's ``/extras/tokenize`` with that framing) counts what
the server prefills. For every chat request the launcher prints one line,
``real_server: prompt_tokens=N stream=true|false``: llama-cpp-python reports no usage on streamed
calls, and this line is where their prompt size can be read.

It also takes ``--extra_bufts auto|on|off``: whether llama.cpp may repack the weights into its
extra CPU buffer types. On Intel CPUs with AMX, the AMX buffer type crashes the server on the
first decode of a Q4_K_M model (ggml-org/llama.cpp#20824), so ``auto`` (the default) turns them
off when ``/proc/cpuinfo`` lists an ``amx`` flag. The first line of the output says which.

Run it with the interpreter of the environment that has ``llama-cpp-python[server]``::

    .venv-real/bin/python scripts/real_server.py --model FILE --chat_format gemma-turns ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama_lib
from llama_cpp.llama_chat_format import (
    ChatFormatterResponse,
    LlamaChatCompletionHandlerRegistry,
    chat_formatter_to_chat_completion_handler,
)
from llama_cpp.server.__main__ import main

CHAT_FORMAT = "gemma-turns"
_START, _END = "<start_of_turn>", "<end_of_turn>"
_CPUINFO = Path("/proc/cpuinfo")


def amx_flags() -> list[str]:
    """Returns the CPU's AMX feature flags (``amx_tile``, ``amx_int8``...), empty if none."""
    try:
        text = _CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            return sorted(flag for flag in line.partition(":")[2].split() if "amx" in flag)
    return []


def disable_extra_buffer_types() -> None:
    """Makes every model load with ``use_extra_bufts = False`` (no weight repacking).

    ``Llama`` has no option for it, but it reads its defaults from
    ``llama_model_default_params()`` at load time.
    """
    defaults = llama_lib.llama_model_default_params

    def without_extra_bufts() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama_lib.llama_model_default_params = without_extra_bufts


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _body(message: dict[str, Any]) -> str:
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        text += _json({"name": function.get("name", ""), "arguments": function.get("arguments")})
    return text


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """Renders a chat request as Gemma turns, every message kept (``<bos>`` left to llama.cpp).

    The system text (tool definitions first) opens the next user or tool turn; with no such turn
    right after it, it stands before the next turn on its own, still counted as GemmaFraming does.
    """
    prompt = ""
    preamble = "".join(_json(tool) + "\n" for tool in tools or ())
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            preamble += _text(message.get("content")) + "\n\n"
            continue
        if role == "assistant":
            prompt += preamble + f"{_START}model\n"
        else:
            prompt += f"{_START}user\n" + preamble
        preamble = ""
        prompt += f"{_body(message)}{_END}\n"
    return prompt + preamble + f"{_START}model\n"


def format_gemma_turns(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **_: Any
) -> ChatFormatterResponse:
    """The ``gemma-turns`` chat formatter."""
    return ChatFormatterResponse(prompt=render(messages, tools), stop=_END)


_complete = chat_formatter_to_chat_completion_handler(format_gemma_turns)


def gemma_turns_handler(*, llama: Any, messages: list[dict[str, Any]], **options: Any) -> Any:
    """Serves a chat request in ``gemma-turns`` and prints its prompt size (streamed too)."""
    prompt = render(messages, options.get("tools"))
    tokens = len(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
    stream = "true" if options.get("stream") else "false"
    print(f"real_server: prompt_tokens={tokens} stream={stream}", file=sys.stderr, flush=True)
    return _complete(llama=llama, messages=messages, **options)


LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
    CHAT_FORMAT, gemma_turns_handler
)


def _choose_extra_bufts() -> None:
    """Consumes ``--extra_bufts`` from the command line and applies it."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--extra_bufts", choices=("auto", "on", "off"), default="auto")
    options, sys.argv[1:] = parser.parse_known_args(sys.argv[1:])
    flags = amx_flags()
    if options.extra_bufts == "off" or (options.extra_bufts == "auto" and flags):
        disable_extra_buffer_types()
        why = f"the CPU has {', '.join(flags)}" if flags else "--extra_bufts off"
        print(f"real_server: extra buffer types off ({why})", file=sys.stderr, flush=True)
    else:
        print("real_server: extra buffer types on (weight repacking)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    _choose_extra_bufts()
    main()
