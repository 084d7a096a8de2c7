"""The simulator's options and its schema-driven tool arguments, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from agent_latency.sim import DEFAULT_MODEL, SimulatorConfig
from agent_latency.sim._answer import example_value


def test_defaults_give_an_agent_prompt_about_three_and_a_half_seconds_to_first_token() -> None:
    config = SimulatorConfig()

    assert 3300 <= config.ttft_ms(8200, 8200) <= 3700
    assert config.decode_tokens_per_s == 50
    assert config.models == (DEFAULT_MODEL,)


def test_prefill_per_token_grows_with_the_context_as_measured_on_llama_cpp() -> None:
    # On llama.cpp, no trimming prefilled at 174 tok/s, prefix-stable at 272 tok/s; the cold
    # prefills of docs/real-model.md put their mean contexts near 5,800 and 1,800 tokens.
    config = SimulatorConfig()
    long_context = config.prefill_ms(1, 5800)
    short_context = config.prefill_ms(1, 1800)

    assert long_context / short_context == pytest.approx(272 / 174, rel=0.02)
    assert config.prefill_ms(100, 4000) == pytest.approx(100 * (0.16 + 0.03 * 4))


def test_time_to_first_token_is_the_overhead_then_the_uncached_tokens_prefill() -> None:
    config = SimulatorConfig(
        overhead_ms=120, prefill_ms_per_token=0.5, attention_ms_per_1k_context=0.1
    )

    # 1,000 uncached tokens of a 4,000-token prompt, each attending over all 4,000.
    assert config.ttft_ms(1000, 4000) == pytest.approx(120 + 1000 * (0.5 + 0.1 * 4))
    assert config.ttft_ms(0, 4000) == pytest.approx(120)  # a fully cached prompt pays the overhead


def test_the_context_term_can_be_switched_off() -> None:
    flat = SimulatorConfig(prefill_ms_per_token=0.4, attention_ms_per_1k_context=0)

    assert flat.prefill_ms(1000, 8000) == pytest.approx(400)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("overhead_ms", -1),
        ("overhead_ms", float("nan")),
        ("decode_tokens_per_s", 0),
        ("answer_tokens", 0),
        ("attention_ms_per_1k_context", -0.1),
        ("attention_ms_per_1k_context", float("inf")),
        ("context_window", 0),
        ("tokenizer", ""),
        ("tokenizer", 5),
        ("cache_tokens", 0),
        ("cache_tokens", 15),  # less than one 16-token block
        ("cache_block_tokens", 0),
        ("cache_lifetime_s", 0),
        ("cache_lifetime_s", float("nan")),
        ("cache_min_tokens", -1),
        ("cache_slots", 0),
        ("usage_format", "anthropic"),
        ("header_timeout_s", 0),
        ("error_rate", 1.5),
        ("rate_limit_rate", -0.1),
        ("retry_after_s", float("inf")),
        ("stall_after_chunks", 0),
        ("stall_ms", -5),
        ("reset_after_chunks", 0),
        ("max_body_bytes", 0),
        ("model", ""),
        ("model", ()),
        ("model", ("ok", 3)),
        ("api_key", ""),
    ],
)
def test_invalid_options_are_refused_naming_the_option(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        SimulatorConfig(**{option: value})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("overhead_ms", "200"),
        ("prefill_ms_per_token", True),
        ("answer_tokens", 2.5),
        ("context_window", 1.5),
        ("cache_min_tokens", 1.5),
        ("cache_slots", True),
        ("timings", "no"),
        ("seed", "x"),
        ("prefix_cache", "yes"),
        ("buffered", 1),
    ],
)
def test_options_of_the_wrong_type_are_type_errors_naming_the_option(
    option: str, value: object
) -> None:
    with pytest.raises(TypeError, match=option):
        SimulatorConfig(**{option: value})


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        SimulatorConfig(200)  # type: ignore[misc]


def test_the_api_key_is_masked_in_the_repr() -> None:
    config = SimulatorConfig(api_key="sk-secret-value")

    assert "sk-secret-value" not in repr(config)
    assert "api_key='***'" in repr(config)
    assert "api_key=None" in repr(SimulatorConfig())


def test_a_list_of_model_names_becomes_a_tuple() -> None:
    config = SimulatorConfig(model=["a", "b"])  # type: ignore[arg-type]

    assert config.models == ("a", "b")
    assert hash(config)  # still a frozen, hashable value


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "example"),
        ({"type": "string", "enum": ["b", "a"]}, "b"),
        ({"type": "integer", "default": 7}, 7),
        ({"type": "integer", "minimum": 3.5}, 4),
        ({"type": "number"}, 1.0),
        ({"type": "boolean"}, True),
        ({"type": ["null", "integer"]}, 1),
        ({"anyOf": [{"type": "null"}, {"type": "boolean"}]}, True),
        ({"const": "fixed"}, "fixed"),
        ({"type": "array", "items": {"type": "integer"}}, [1]),
        (
            {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}},
            {"q": "example", "n": 1},
        ),
        (
            {"properties": {"inner": {"properties": {"x": {"type": "null"}}}}},
            {"inner": {"x": None}},
        ),
        ({"type": "object"}, {}),
        (None, "example"),
    ],
)
def test_tool_arguments_fit_their_schema(schema: object, expected: Any) -> None:
    assert example_value(schema, depth=0) == expected


def test_recursive_schemas_terminate() -> None:
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["child"] = node

    value = example_value(node, depth=0)

    depth = 0
    while isinstance(value, dict):
        value, depth = value["child"], depth + 1
    assert value == "example" and depth > 1


def test_the_tokenizer_is_the_served_models_own_unless_one_is_named() -> None:
    assert SimulatorConfig(tokenizer=None, model="gemma-3-270m").prompt_tokenizer == "gemma-3-270m"
    assert SimulatorConfig(tokenizer=None, model=("a", "b")).prompt_tokenizer == "a"
    assert SimulatorConfig(tokenizer="o200k", model="gemma-3-270m").prompt_tokenizer == "o200k"


def test_the_simulator_counts_in_the_served_models_own_tokens_by_default() -> None:
    # Counting cl100k with OpenAI's framing whatever the model made a Chinese
    # conversation 2,004 tokens by the simulator, 1,355 by the trimmer (Qwen, the default model).
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI

    from agent_latency import Settings, TokenCounter
    from agent_latency.sim import running_simulator

    messages = [
        SystemMessage("你是一个物流公司的客服助手，回答要简洁。"),
        HumanMessage(
            "关于区域仓库的发货延迟以及承运商调整后的取件时间表，第12项记录显示处理时间为30分钟。"
        ),
    ]
    model = Settings().llm.model
    with running_simulator(SimulatorConfig(overhead_ms=1, decode_tokens_per_s=5000)) as sim:
        chat = ChatOpenAI(model=model, base_url=sim.base_url, api_key="none", max_tokens=2)
        answer = chat.invoke(messages)
    counted = answer.usage_metadata["input_tokens"]  # type: ignore[index]
    assert counted == TokenCounter.for_model(model).count_messages(messages)
    assert counted != TokenCounter().count_messages(messages)  # not cl100k's count
