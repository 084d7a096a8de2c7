"""Starts llama-cpp-python's OpenAI-compatible server with a ChatML format that keeps tool turns.

The server's built-in ``chatml`` format keeps only system, user and assistant text: ``tool``
messages and the tool calls of assistant messages vanish from the prompt, so an agent transcript
shrinks to a fraction of its size and trimming it changes little. This launcher registers
``chatml-tools`` (ChatML with every message kept and tool calls written as JSON, as Qwen-style
templates do) and then runs the stock server with the command-line arguments it was given.

It also takes ``--extra_bufts auto|on|off``: whether llama.cpp may repack the weights into its
extra CPU buffer types. On Intel CPUs with AMX, the AMX buffer type crashes the server on the
first decode of a Q4_K_M model (ggml-org/llama.cpp#20824), so ``auto`` (the default) turns them
off when ``/proc/cpuinfo`` lists an ``amx`` flag. The first line of the output says which.

Run it with the interpreter of the environment that has ``llama-cpp-python[server]``::

    .venv-real/bin/python benchmarks/real_server.py --model FILE --chat_format chatml-tools ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama_lib
from llama_cpp.llama_chat_format import ChatFormatterResponse, register_chat_format
from llama_cpp.server.__main__ import main

CHAT_FORMAT = "chatml-tools"
_END = "<|im_end|>"
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


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _render(message: dict[str, Any]) -> str:
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call["function"]
        text += (
            f'\n<tool_call>\n{{"name": {json.dumps(function["name"])}, '
            f'"arguments": {function["arguments"]}}}\n</tool_call>'
        )
    return f"<|im_start|>{message['role']}\n{text}{_END}\n"


@register_chat_format(CHAT_FORMAT)
def format_chatml_tools(messages: list[dict[str, Any]], **_: Any) -> ChatFormatterResponse:
    """Renders every message, tool results and tool calls included, as ChatML."""
    prompt = "".join(_render(message) for message in messages) + "<|im_start|>assistant\n"
    return ChatFormatterResponse(prompt=prompt, stop=_END)


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
