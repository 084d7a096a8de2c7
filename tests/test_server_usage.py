"""ServerUsage: what a server reported about one call (usage, prefix cache, its own timings), read
from every provider's shape, with impossible counts named and dropped."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from agent_latency._server_usage import ServerUsage, usage_of_body, usage_of_message


def test_openai_usage_with_cached_tokens() -> None:
    body = {
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1920},
        }
    }
    usage = usage_of_body(body)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (2006, 300, 1920)
    assert usage.prefilled_tokens == 86 and usage.invalid == ()


def test_deepseek_cache_hits_count_as_cached() -> None:
    body = {"usage": {"prompt_tokens": 900, "prompt_cache_hit_tokens": 640}}
    assert usage_of_body(body).cached_tokens == 640


def test_llama_cpp_timings_give_the_prefill() -> None:
    body = {
        "usage": {"prompt_tokens": 1845, "completion_tokens": 30},
        "timings": {"cache_n": 1800, "prompt_n": 45, "prompt_ms": 310.5, "predicted_n": 30},
    }
    usage = usage_of_body(body)
    assert usage.cached_tokens == 1800  # usage said nothing of the cache: timings do
    assert (usage.prefill_ms, usage.prefill_tokens, usage.prefilled_tokens) == (310.5, 45, 45)


def test_usage_beats_timings_for_the_cached_count() -> None:
    body = {
        "usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}},
        "timings": {"cache_n": 99},
    }
    assert usage_of_body(body).cached_tokens == 64


@pytest.mark.parametrize(
    ("usage", "invalid"),
    [
        ({"prompt_tokens": 10**12}, ("prompt_tokens",)),
        ({"prompt_tokens": -5}, ("prompt_tokens",)),
        ({"prompt_tokens": True}, ("prompt_tokens",)),
        ({"prompt_tokens": float("nan")}, ("prompt_tokens",)),
        ({"prompt_tokens": 12.5}, ("prompt_tokens",)),
        ({"prompt_tokens": "12"}, ("prompt_tokens",)),
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}, ("cached_tokens",)),
    ],
)
def test_impossible_counts_are_named_and_dropped(
    usage: dict[str, object], invalid: tuple[str, ...]
) -> None:
    read = usage_of_body({"usage": usage})
    assert read.invalid == invalid
    assert getattr(read, invalid[0]) is None


def test_whole_float_counts_are_read() -> None:
    assert usage_of_body({"usage": {"prompt_tokens": 12.0}}).prompt_tokens == 12


def test_impossible_prefill_time_is_named() -> None:
    read = usage_of_body({"timings": {"prompt_ms": -1}})
    assert read.prefill_ms is None and read.invalid == ("prefill_ms",)


@pytest.mark.parametrize("body", [None, [], "x", {"usage": "x"}, {"usage": None}, {}])
def test_bodies_without_usage_say_nothing(body: object) -> None:
    assert usage_of_body(body) == ServerUsage()


def test_a_langchain_message_with_usage_metadata_and_timings() -> None:
    message = AIMessage(
        "hi",
        usage_metadata={
            "input_tokens": 500,
            "output_tokens": 7,
            "total_tokens": 507,
            "input_token_details": {"cache_read": 448, "priority_cache_read": 16},
        },
        response_metadata={"timings": {"prompt_ms": 12.0, "prompt_n": 36}},
    )
    usage = usage_of_message(message)
    assert (usage.prompt_tokens, usage.completion_tokens) == (500, 7)
    assert usage.cached_tokens == 464  # service-tier variants are summed
    assert (usage.prefill_ms, usage.prefill_tokens) == (12.0, 36)


def test_a_blocking_deepseek_message_keeps_its_raw_cache_hits() -> None:
    message = AIMessage(
        "hi",
        usage_metadata={"input_tokens": 900, "output_tokens": 1, "total_tokens": 901},
        response_metadata={"token_usage": {"prompt_tokens": 900, "prompt_cache_hit_tokens": 832}},
    )
    assert usage_of_message(message).cached_tokens == 832


def test_a_message_without_usage_metadata_reads_the_raw_usage() -> None:
    message = AIMessage("hi", response_metadata={"token_usage": {"prompt_tokens": 42}})
    assert usage_of_message(message).prompt_tokens == 42
    assert usage_of_message(AIMessage("hi")) == ServerUsage()


def test_llama_cpp_decode_time_is_read() -> None:
    body = {"timings": {"prompt_ms": 40.0, "prompt_n": 8, "predicted_ms": 610.5}}
    assert usage_of_body(body).decode_ms == 610.5


def test_vllm_per_request_metrics_split_the_call_where_timings_are_absent() -> None:
    body = {
        "usage": {"prompt_tokens": 3000, "prompt_tokens_details": {"cached_tokens": 2048}},
        "metrics": {"time_to_first_token_ms": 95.0, "generation_time_ms": 800.0},
    }
    usage = usage_of_body(body)
    assert (usage.prefill_ms, usage.decode_ms, usage.prefilled_tokens) == (95.0, 800.0, 952)
    both = {**body, "timings": {"prompt_ms": 60.0, "predicted_ms": 700.0}}
    assert (usage_of_body(both).prefill_ms, usage_of_body(both).decode_ms) == (60.0, 700.0)
    message = AIMessage("hi", response_metadata={"metrics": body["metrics"]})
    assert usage_of_message(message).prefill_ms == 95.0


def test_impossible_vllm_metrics_are_named() -> None:
    read = usage_of_body({"metrics": {"time_to_first_token_ms": "fast", "generation_time_ms": -3}})
    assert (read.prefill_ms, read.decode_ms) == (None, None)
    assert set(read.invalid) == {"prefill_ms", "decode_ms"}
