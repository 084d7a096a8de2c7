"""Named server profiles: the simulator set up to behave like a kind of server people run.

Each profile is a :class:`SimulatorConfig` (latency model and prefix-cache rules) with the
sources its figures come from; a figure that is our own arithmetic from a source says
"derived". docs/benchmarks.md ("Server profiles") has the table and the links. What no profile
models: request queueing under load, a hosted API's latency jitter and its routing of one prefix
to several machines (OpenAI: about 15 requests a minute per prefix), DeepSeek's rule that a
prefix is cached only at the end of a request or at a prefix two requests shared, and
llama-server's host-memory prompt cache (``--cache-ram``) that can restore an evicted slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ._config import SimulatorConfig


@dataclass(frozen=True)
class ServerProfile:
    """A kind of server, as the simulator mimics it.

    Attributes:
        name: The profile's name (``--workload-profile NAME``).
        summary: What it mimics, in one line.
        config: The simulator's configuration.
        sources: Where each figure comes from, one line each.
    """

    name: str
    summary: str
    config: SimulatorConfig
    sources: tuple[str, ...]


_PROFILES: Final = (
    ServerProfile(
        "openai-hosted",
        "a hosted API with OpenAI's prompt caching: 250 ms fixed, ~33k tokens/s prefill, cache "
        "from 1,024 tokens in 128-token steps, 5 minutes idle lifetime",
        SimulatorConfig(
            overhead_ms=250.0,
            prefill_ms_per_token=0.03,
            attention_ms_per_1k_context=0.0,
            decode_tokens_per_s=60.0,
            cache_tokens=10_000_000,
            cache_block_tokens=128,
            cache_min_tokens=1024,
            cache_lifetime_s=300.0,
            timings=False,
        ),
        (
            "caching from 1,024 tokens, hits in increments of 128 tokens, 5 to 10 minutes of "
            "inactivity (in-memory retention): OpenAI's prompt caching guide, "
            "https://developers.openai.com/api/docs/guides/prompt-caching",
            "250 ms fixed: GPT-4o's TTFT p50 for a 500-token input (deploybase.ai, LLM API "
            "latency comparison, March 2026; GPT-4o-mini 150 ms, GPT-5 300 ms)",
            "0.03 ms per prompt token (derived): the cookbook's 7% sooner first token with a "
            "cached 1,024-token prompt gives ~0.02 ms per token over a 250 ms fixed part; "
            "nirmalya.net measured slopes of 0.04-0.24 ms per token (openai-cookbook "
            "Prompt_Caching_201, section 2.3; nirmalya.net, 2026-02)",
        ),
    ),
    ServerProfile(
        "deepseek",
        "DeepSeek's API: 350 ms fixed, ~10k tokens/s prefill, a disk cache from token 0 in "
        "64-token units that keeps prefixes for hours",
        SimulatorConfig(
            overhead_ms=350.0,
            prefill_ms_per_token=0.1,
            attention_ms_per_1k_context=0.0,
            decode_tokens_per_s=30.0,
            cache_tokens=10_000_000,
            cache_block_tokens=64,
            cache_lifetime_s=None,
            timings=False,
            usage_format="deepseek",
        ),
        (
            "a prefix from the 0th token, 64-token storage units, nothing under 64 cached; "
            "usage.prompt_cache_hit_tokens / prompt_cache_miss_tokens: DeepSeek's context caching "
            "announcement, https://api-docs.deepseek.com/news/news0802",
            "kept for a few hours to a few days once unused: "
            "https://api-docs.deepseek.com/guides/kv_cache",
            "0.1 ms per prompt token (derived): a 128K-token prompt's first token went from 13 s "
            "uncached to 0.5 s cached (news0802): 12.5 s for ~128k tokens",
            "350 ms fixed (derived): DeepSeek V3's TTFT p50 of 400 ms for a 500-token input "
            "(deploybase.ai, March 2026) less 500 tokens of prefill",
        ),
    ),
    ServerProfile(
        "vllm-h100-7b",
        "vLLM serving a 7B model on one H100: 20 ms fixed, ~29k tokens/s prefill falling with "
        "context, automatic prefix caching in 16-token blocks, 100k tokens of KV cache",
        SimulatorConfig(
            overhead_ms=20.0,
            prefill_ms_per_token=0.035,
            attention_ms_per_1k_context=0.0015,
            decode_tokens_per_s=120.0,
            cache_tokens=100_000,
            cache_block_tokens=16,
            cache_lifetime_s=None,
            timings=False,
        ),
        (
            "16-token blocks, prefix caching on, whole blocks only, the last token always "
            "recomputed: vllm/config/cache.py (DEFAULT_BLOCK_SIZE = 16), "
            "vllm/v1/core/kv_cache_manager.py, https://docs.vllm.ai/en/latest/design/prefix_caching/",
            "0.035 ms per prompt token, ~29k tokens/s (derived): no published pure-prefill rate "
            "for a 7B model on one H100 was found; the BF16 roofline (989 TFLOPS, 14 GFLOP per "
            "token) at 40-50% utilisation gives 28-35k tokens/s, consistent with TensorRT-LLM's "
            "Llama-3.1-8B FP8 figures (NVIDIA/TensorRT-LLM "
            "docs/source/performance/perf-overview.md)",
            "+0.0015 ms per token per 1k tokens of context (derived): the same figures fall to "
            "13.5-18k tokens/s at 20k-token inputs",
            "20 ms fixed (derived): NVIDIA NIM's Llama-3.1-8B TTFT at concurrency 1 is 10 ms, "
            "plus the API server's own time per request",
            "100,000 tokens of prefix cache: a 7B model with full multi-head attention keeps 512 "
            "KiB of KV cache per token in fp16, about 60 GB free on an 80 GB GPU (derived)",
        ),
    ),
    ServerProfile(
        "llama-cpu",
        "llama.cpp's llama-server on a CPU: 2 slots, each caching its last prompt token by "
        "token; 2.74 ms per prompt token + 0.52 ms per 1k of context (~300 tokens/s), 30 ms fixed",
        SimulatorConfig(
            overhead_ms=30.0,
            prefill_ms_per_token=2.74,
            attention_ms_per_1k_context=0.52,
            decode_tokens_per_s=41.0,
            cache_block_tokens=1,
            cache_slots=2,
            cache_lifetime_s=None,
            timings=True,
            window_holds_max_tokens=False,
        ),
        (
            "per-slot prompt cache, slot chosen by the longest shared prefix (at least 10% of "
            "the prompt, --slot-prompt-similarity) else the least recently used: llama.cpp "
            "tools/server/server-context.cpp, get_available_slot",
            "2 slots: the real-server bench's --parallel 2",
            "2.74 ms per token + 0.52 ms per 1k tokens of context, decode 41 tokens/s, 30 ms "
            "to the first token of a fully cached prompt: our own measurement of Gemma 3 270M "
            "on one CPU thread (docs/real-model.md, 'Prefill rate and time to first token')",
        ),
    ),
)

_BY_NAME: Final[Mapping[str, ServerProfile]] = {p.name: p for p in _PROFILES}


def server_profiles() -> tuple[ServerProfile, ...]:
    """Returns every named profile, in a fixed order."""
    return _PROFILES


def server_profile(name: str) -> ServerProfile:
    """Returns the profile called ``name``.

    Raises:
        ValueError: Naming the known profiles, for an unknown name.
    """
    found = _BY_NAME.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown server profile {name!r}; choose from {', '.join(_BY_NAME)}.")
    return found
