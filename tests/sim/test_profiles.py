"""The named server profiles: each mimics what it is named after, with its sources."""

from __future__ import annotations

from dataclasses import replace

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from agent_latency.sim import SimulatorConfig, running_simulator, server_profile, server_profiles


def test_the_profiles_are_the_servers_people_run_each_with_sources() -> None:
    names = [profile.name for profile in server_profiles()]
    assert names == ["openai-hosted", "deepseek", "vllm-h100-7b", "llama-cpu"]
    for profile in server_profiles():
        assert profile.summary and len(profile.sources) >= 2, profile.name
        assert all(source.strip() for source in profile.sources)
        assert server_profile(profile.name) is profile


def test_each_profile_has_its_servers_cache_rules() -> None:
    hosted = server_profile("openai-hosted").config
    assert (hosted.cache_block_tokens, hosted.cache_min_tokens) == (128, 1024)
    assert hosted.cache_lifetime_s is not None and 300 <= hosted.cache_lifetime_s <= 600
    assert not hosted.timings

    deepseek = server_profile("deepseek").config
    assert (deepseek.cache_block_tokens, deepseek.cache_min_tokens) == (64, 0)
    assert deepseek.usage_format == "deepseek" and not deepseek.timings

    vllm = server_profile("vllm-h100-7b").config
    assert vllm.cache_block_tokens == 16 and vllm.cache_slots is None
    # 23-35k tokens per second of prefill for a short prompt.
    assert 23_000 <= 1000 / vllm.prefill_ms(1, 1000) <= 35_000

    llama = server_profile("llama-cpu").config
    assert llama.cache_slots == 2 and llama.cache_block_tokens == 1 and llama.timings
    # Our own measurement: 2.74 ms + 0.52 ms per 1k tokens of context (docs/real-model.md).
    assert llama.prefill_ms(1000, 1000) == pytest.approx(3260)


def test_an_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown server profile 'h100'; choose from openai"):
        server_profile("h100")


def fast(name: str) -> SimulatorConfig:
    """The profile's cache rules and usage, with near-instant latency for the test."""
    return replace(
        server_profile(name).config,
        overhead_ms=1,
        prefill_ms_per_token=0.0001,
        attention_ms_per_1k_context=0,
        decode_tokens_per_s=5000,
    )


def cached_tokens(model: ChatOpenAI, prompt: list[BaseMessage]) -> int | None:
    usage = model.invoke(prompt).usage_metadata or {}
    return (usage.get("input_token_details") or {}).get("cache_read")


def conversation(name: str, words: int) -> list[BaseMessage]:
    return [SystemMessage(f"Conversation {name}. " + "policy rule " * words), HumanMessage("Hi?")]


def test_over_http_the_hosted_profile_caches_from_1024_tokens_in_128_token_steps() -> None:
    with running_simulator(fast("openai-hosted")) as sim:
        model = ChatOpenAI(model=sim.config.models[0], base_url=sim.base_url, api_key="-")
        short, long = conversation("a", 300), conversation("b", 1500)
        for prompt in (short, long):
            assert cached_tokens(model, prompt) == 0  # cold
        assert cached_tokens(model, short) == 0  # under 1,024 tokens: never cached
        again = cached_tokens(model, long)
        assert again is not None and again >= 1024 and again % 128 == 0


def test_over_http_more_conversations_than_llama_cpp_slots_evict_each_other() -> None:
    with running_simulator(fast("llama-cpu")) as sim:
        model = ChatOpenAI(model=sim.config.models[0], base_url=sim.base_url, api_key="-")
        first, second, third = (conversation(name, 200) for name in ("one", "two", "three"))
        for prompt in (first, second):
            cached_tokens(model, prompt)
        warm = cached_tokens(model, first)  # two conversations, two slots: both stay warm
        assert warm is not None and warm > 400
        assert (cached_tokens(model, second) or 0) > 400
        cached_tokens(model, third)  # a third takes the least recently used slot (the first's)
        evicted = cached_tokens(model, first)
        assert evicted is not None and evicted < 10  # only the template's first tokens
