"""The named server profiles: each mimics what it is named after, with its sources."""

from __future__ import annotations

import pytest

from agent_latency.sim import server_profile, server_profiles


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
