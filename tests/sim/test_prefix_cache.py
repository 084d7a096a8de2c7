"""The simulator's prefix caches: whole blocks, a minimum cached prefix, a capacity in tokens
shared by all conversations (least recently used first, a prompt's tail before its head), idle
expiry; and llama.cpp's per-slot caches, where more conversations than slots evict each other.

The cache is driven directly with packed token sequences and a hand-moved clock; the tests over
HTTP are in ``test_sim_latency.py``.
"""

from __future__ import annotations

from array import array

from agent_latency.sim import SimulatorConfig
from agent_latency.sim._cache import PrefixCache, SlotCache, prefix_cache_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tokens(*runs: tuple[int, int]) -> bytes:
    """A packed prompt: for each (first id, count), ``count`` consecutive token ids."""
    ids = array("I")
    for first, count in runs:
        ids.extend(range(first, first + count))
    return ids.tobytes()


def cache(capacity: int = 10_000, block: int = 16, lifetime: float | None = None) -> PrefixCache:
    return PrefixCache(capacity_tokens=capacity, block_tokens=block, lifetime_s=lifetime)


def test_only_whole_blocks_are_reused_and_never_the_last_token() -> None:
    blocks = cache(block=16)
    blocks.remember(tokens((0, 40)))

    assert blocks.reusable_tokens(tokens((0, 40))) == 32  # 2 whole blocks of 39 usable tokens
    assert blocks.reusable_tokens(tokens((0, 20), (500, 30))) == 16  # shares 20: one block
    assert blocks.reusable_tokens(tokens((0, 32))) == 16  # its last token must be prefilled
    assert blocks.reusable_tokens(tokens((0, 15), (500, 30))) == 0
    assert blocks.reusable_tokens(tokens((1, 40))) == 0  # a block is known by its whole prefix


def test_a_partial_last_block_is_not_cached() -> None:
    blocks = cache(block=16)
    blocks.remember(tokens((0, 40)))  # blocks [0, 16) and [16, 32); the 8 tokens after are lost

    assert blocks.reusable_tokens(tokens((0, 60))) == 32
    assert len(blocks) == 32


def test_block_size_one_reuses_any_shared_prefix() -> None:
    blocks = cache(block=1)
    blocks.remember(tokens((0, 40)))

    assert blocks.reusable_tokens(tokens((0, 23), (900, 5))) == 23
    assert blocks.reusable_tokens(tokens((0, 40))) == 39


def test_capacity_evicts_the_least_recently_used_tail_first() -> None:
    blocks = cache(capacity=64, block=16)  # room for 4 blocks
    first, second = tokens((0, 48)), tokens((1000, 48))  # 3 blocks each

    blocks.remember(first)
    blocks.remember(second)

    assert len(blocks) == 64
    assert blocks.reusable_tokens(second) == 32  # all it may reuse (47 usable tokens)
    assert blocks.reusable_tokens(first) == 16  # lost its last two blocks, kept its head


def test_using_a_prompt_again_protects_it_from_eviction() -> None:
    blocks = cache(capacity=64, block=16)  # room for 4 blocks: two of these prompts
    first, second, third = tokens((0, 33)), tokens((1000, 33)), tokens((2000, 33))  # 2 blocks

    blocks.remember(first)
    blocks.remember(second)
    blocks.remember(first)  # the first conversation comes back: now the most recent
    blocks.remember(third)

    assert blocks.reusable_tokens(first) == 32
    assert blocks.reusable_tokens(third) == 32
    assert blocks.reusable_tokens(second) == 0


def test_a_prompt_larger_than_the_cache_keeps_its_head() -> None:
    blocks = cache(capacity=32, block=16)
    blocks.remember(tokens((0, 100)))

    assert len(blocks) == 32
    assert blocks.reusable_tokens(tokens((0, 100))) == 32


def test_blocks_expire_after_their_idle_lifetime_unless_used_again() -> None:
    clock = Clock()
    blocks = PrefixCache(capacity_tokens=10_000, block_tokens=16, lifetime_s=300, clock=clock)
    kept, dropped = tokens((0, 33)), tokens((1000, 33))
    blocks.remember(kept)
    blocks.remember(dropped)

    clock.now += 200
    blocks.remember(kept)  # used again: idle time starts over
    clock.now += 200  # 400 s after `dropped` was last used, 200 s after `kept`

    assert blocks.reusable_tokens(kept) == 32
    assert blocks.reusable_tokens(dropped) == 0
    assert len(blocks) == 32


def test_without_a_lifetime_blocks_never_expire() -> None:
    clock = Clock()
    blocks = PrefixCache(capacity_tokens=10_000, block_tokens=16, lifetime_s=None, clock=clock)
    blocks.remember(tokens((0, 33)))
    clock.now += 10**9

    assert blocks.reusable_tokens(tokens((0, 33))) == 32


def test_an_empty_or_one_token_prompt_reuses_nothing() -> None:
    blocks = cache(block=1)
    blocks.remember(tokens((0, 1)))
    blocks.remember(b"")

    assert blocks.reusable_tokens(tokens((0, 1))) == 0
    assert blocks.reusable_tokens(b"") == 0


def test_a_minimum_reuses_nothing_below_it_then_whole_blocks_as_openai_does() -> None:
    openai = PrefixCache(capacity_tokens=100_000, block_tokens=128, min_tokens=1024, lifetime_s=300)
    openai.remember(tokens((0, 3000)))

    assert openai.reusable_tokens(tokens((0, 1000), (9000, 50))) == 0  # 7 blocks: under 1,024
    assert openai.reusable_tokens(tokens((0, 1100), (9000, 50))) == 1024  # 8 blocks
    assert openai.reusable_tokens(tokens((0, 2006))) == 1920  # OpenAI's own example: 15 × 128


def slots(count: int = 2, **options: object) -> SlotCache:
    return SlotCache(slots=count, **options)  # type: ignore[arg-type]


def test_a_slot_reuses_the_prefix_it_shares_token_by_token_never_the_last_token() -> None:
    cache = slots()
    cache.remember(tokens((0, 40)))

    assert cache.reusable_tokens(tokens((0, 23), (900, 5))) == 23
    assert cache.reusable_tokens(tokens((0, 40))) == 39
    assert cache.reusable_tokens(tokens((0, 60))) == 40  # grown: all of the slot's prompt


def test_more_conversations_than_slots_evict_each_other() -> None:
    clock = Clock()
    cache = slots(2, clock=clock)
    first, second, third = (tokens((base, 200)) for base in (0, 1000, 2000))
    for prompt in (first, second):
        clock.now += 1
        cache.remember(prompt)
    assert cache.reusable_tokens(first) == 199 and cache.reusable_tokens(second) == 199

    clock.now += 1
    assert cache.reusable_tokens(third) == 0  # shares nothing: it takes the least recent slot
    cache.remember(third)

    assert cache.reusable_tokens(first) == 0  # evicted by the third conversation
    assert cache.reusable_tokens(second) == 199
    assert cache.reusable_tokens(third) == 199


def test_a_prompt_goes_to_the_slot_sharing_most_of_it_not_the_least_recent() -> None:
    clock = Clock()
    cache = slots(2, clock=clock)
    shared, other = tokens((0, 100)), tokens((5000, 100))
    cache.remember(shared)  # slot 0, least recently used below
    clock.now += 1
    cache.remember(other)  # slot 1
    grown = tokens((0, 100), (700, 100))  # shares half of itself with slot 0

    clock.now += 1
    cache.remember(grown)

    assert cache.reusable_tokens(other) == 99  # slot 1 kept its prompt
    assert cache.reusable_tokens(grown) == 199


def test_a_prompt_sharing_too_little_takes_the_least_recent_slot() -> None:
    clock = Clock()
    cache = slots(2, clock=clock)
    cache.remember(tokens((5000, 100)))  # slot 0, the least recently used below
    clock.now += 1
    cache.remember(tokens((0, 1000)))  # slot 1
    barely = tokens((0, 50), (9000, 950))  # shares 5% of itself with slot 1: under the 10%

    assert cache.reusable_tokens(barely) == 0  # it goes to slot 0, the least recent ...
    clock.now += 1
    cache.remember(barely)
    assert cache.reusable_tokens(tokens((5000, 100))) == 0  # ... and replaces its prompt
    assert cache.reusable_tokens(tokens((0, 1000))) == 999  # slot 1 kept its own


def test_the_configuration_chooses_the_cache() -> None:
    per_slot = prefix_cache_for(SimulatorConfig(cache_slots=3))
    assert isinstance(per_slot, SlotCache)
    blocks = prefix_cache_for(SimulatorConfig(cache_block_tokens=128, cache_min_tokens=1024))
    assert isinstance(blocks, PrefixCache)
    blocks.remember(tokens((0, 2000)))
    assert blocks.reusable_tokens(tokens((0, 1000), (9000, 10))) == 0
