"""The simulator's prefix cache: whole blocks, a capacity in tokens shared by all conversations
(least recently used first, a prompt's tail before its head), and idle expiry.

The cache is driven directly with packed token sequences and a hand-moved clock; the tests over
HTTP are in ``test_sim_latency.py``.
"""

from __future__ import annotations

from array import array

from agent_latency.sim._cache import PrefixCache


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
