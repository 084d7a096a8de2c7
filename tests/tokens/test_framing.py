"""Framings render what the server's chat template renders: SmolLM2's plain ChatML; and which
template takes one system message."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.tokens._framing import FRAMINGS, framing_named, model_family

# The request and what llama.cpp's llama-server (build 11434, --jinja) rendered for it with
# SmolLM2-135M-Instruct's own template (POST /apply-template): the default system turn, the tool
# message as a turn of role "tool", the tool calls and the tool definitions left out.
CALL = {"id": "c1", "type": "function", "function": {"name": "track", "arguments": '{"id": "S1"}'}}
WIRE: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is my parcel?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "Held at Poznan."},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c2"}]},
    {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    {"role": "user", "content": "Thanks"},
]
RENDERED = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhere is my parcel?<|im_end|>\n<|im_start|>assistant\n"
    "Checking.<|im_end|>\n<|im_start|>tool\nHeld at Poznan.<|im_end|>\n<|im_start|>assistant\n"
    "<|im_end|>\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"
    "<|im_start|>assistant\n"
)
TOOL = {
    "type": "function",
    "function": {
        "name": "track",
        "description": "Track a parcel",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}


def _render(name: str, wire: list[dict[str, Any]]) -> str:
    framing = framing_named(name)
    head, tail = framing.request(wire[0]["role"] if wire else None)
    pieces = [*head, *(p for m in wire for p in framing.message(m)), *tail]
    assert all(isinstance(p, str) for p in pieces)
    return "".join(map(str, pieces))


def test_smollm2_framing_renders_what_llama_server_renders() -> None:
    assert _render("smollm2", WIRE) == RENDERED


def test_smollm2_adds_its_default_system_turn_only_when_none_is_sent() -> None:
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    # llama-server: '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n'
    # '<|im_start|>assistant\n'
    assert _render("smollm2", system) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert "SmolLM" in _render("smollm2", system[1:])


def test_smollm2_tool_definitions_cost_no_prompt_tokens() -> None:
    # llama-server reported prompt_tokens 74 for WIRE with and without the tool definition.
    assert framing_named("smollm2").tools([TOOL]) == []
    assert framing_named("qwen").tools([TOOL])  # Qwen's template does render them


def test_a_smollm2_model_name_counts_with_the_smollm2_framing() -> None:
    assert model_family("HuggingFaceTB/SmolLM2-135M-Instruct") == (
        "cl100k_base",
        "smollm2",
        False,
    )
    counter = TokenCounter.for_model("smollm2-135m-instruct")
    assert "smollm2 framing" in counter.name
    messages = [
        SystemMessage("Be brief."),
        HumanMessage("Where is my parcel?"),
        AIMessage("", tool_calls=[{"name": "track", "args": {"id": "S1"}, "id": "c1"}]),
        ToolMessage("Held at Poznan.", tool_call_id="c1"),
    ]
    without = counter.count_request(messages)
    assert counter.count_request(messages, [TOOL]) == without
    # The tool call is not rendered: the empty assistant turn costs its framing only.
    assert counter.count_message(messages[2]) == counter.count_message(AIMessage(""))


def test_only_gemmas_and_mistrals_templates_fold_the_system_message_into_a_user_turn() -> None:
    """The recall marker goes into the first user message where the counter says so."""
    folding = [name for name in FRAMINGS if TokenCounter(framing=name).folds_system]
    assert folding == ["gemma", "mistral"]
    assert TokenCounter.for_model("gemma-3-4b-it").folds_system


ONE_SYSTEM_MESSAGE_MODELS = [
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Ministral-8B-Instruct-2410",
    "mistralai/Devstral-Small-2505",
    "mistral-small-latest",
    "meta-llama/Llama-2-7b-chat-hf",
    "llama2",
]


@pytest.mark.parametrize("model", ONE_SYSTEM_MESSAGE_MODELS)
def test_mistral_and_llama_2_names_get_the_inst_framing(model: str) -> None:
    # Their templates refuse a second system message, as Gemma's does (vLLM issue 6862).
    counter = TokenCounter.for_model(model)
    assert counter.folds_system
    assert counter.name == "cl100k_base + mistral framing"


@pytest.mark.parametrize(
    "model", ["meta-llama/Llama-3.2-1B-Instruct", "Llama-3.1-8B", "qwen2.5-7b"]
)
def test_later_llamas_and_others_keep_their_own_framing(model: str) -> None:
    assert not TokenCounter.for_model(model).folds_system


def test_the_mistral_framing_counts_the_inst_rendering() -> None:
    """Mistral v0.3's template: ``<s>[INST] user[/INST] assistant</s>[INST] system\n\nuser
    [/INST]`` and its tool blocks, each control token one token (cl100k for the text)."""
    counter = TokenCounter(framing="mistral")
    call = {"name": "lookup", "args": {"q": "port"}, "id": "c1", "type": "tool_call"}
    messages = [
        SystemMessage("Answer briefly."),
        HumanMessage("Which port?"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("5432", tool_call_id="c1"),
        AIMessage("Port 5432."),
        HumanMessage("Thanks."),
    ]
    texts = [
        "Answer briefly.",
        "\n\n",  # the system message, folded into a user turn
        " Which port?",
        " ",  # the tool call's empty text
        '[{"name": "lookup", "arguments": "{\\"q\\": \\"port\\"}"}]',
        "5432",
        '{"call_id": "c1"}',
        " Port 5432.",
        " Thanks.",
    ]
    # <s>; [INST] [/INST] twice; [TOOL_CALLS] </s>; [TOOL_RESULTS] [/TOOL_RESULTS]; </s>
    specials = 1 + 2 * 2 + 2 + 2 + 1
    expected = sum(len(counter.encode(text)) for text in texts) + specials
    assert counter.count_request(messages) == expected
