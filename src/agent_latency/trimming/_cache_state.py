"""What the server still holds of a conversation's previous prompt, and the evidence that says so.

The states, for the next call (:func:`cache_state`):

- ``cold``: nothing of the prompt is known cached: the conversation's first call (or it was
  forgotten), or the tool definitions or response format sent changed since its previous call
  (they come before the messages in the prompt, so nothing after them is reused);
- ``expired``: the previous call is older than the cache lifetime;
- ``evicted``: within the lifetime, but the latest evidence said the server did not hold what
  it had been sent (other traffic evicted it, or it has no prefix cache), until a call shows it
  does again;
- ``warm``: otherwise, the previous prompt as sent is cached.

The evidence (:func:`held`) is a call sent while part of its prompt was expected
cached (``warm`` or ``evicted``: ``expected`` tokens at its start, the tool definitions
included, are the previous prompt's). With the server's reported cached tokens: the cache held
it when the server reported at least half of ``expected``, however short; it did not when the
server reported less and ``expected`` is at least :data:`MIN_EVIDENCE_TOKENS` (OpenAI caches no
shorter prompt, so a miss on a shorter one says nothing). A server that reports no cached tokens
(llama-cpp-python when streaming) is judged by the call's time to first token instead: later
than the geometric mean of the predicted hit and miss says it did not hold it, when those are
at least :data:`TIMING_EVIDENCE_RATIO` apart. With neither (no handler, a blocking call), the
state is judged by the clock alone. A call that says nothing leaves the state as it was.

Other traffic evicts what one conversation cannot see (a llama.cpp server with fewer slots than
conversations: nearly every time), so what a warm cache holds is predicted at the share of the
conversation's calls whose prefix the server held (:data:`Hits`).
"""

from __future__ import annotations

from typing import Final, Literal

CacheState = Literal["cold", "warm", "expired", "evicted"]
"""What the trimmer assumes the server still caches of a conversation's previous prompt."""

MIN_EVIDENCE_TOKENS: Final = 1024
"""A shorter expected prefix that the server did not report cached says nothing: OpenAI caches
only prompts of 1,024 tokens or more."""
HIT_RATE_DECAY: Final = 0.9
"""The weight of a call in :data:`Hits` against the one after it (about the last 10 count)."""
TIMING_EVIDENCE_RATIO: Final = 1.5
"""A call's time to first token tells a cache hit from a miss only when the miss is predicted to
take at least this many times as long: closer predictions drown in the endpoint's noise."""


def held(
    *, state: CacheState, expected: int, reported_cached: int | None, timed_miss: bool | None
) -> bool | None:
    """What one call says of the cache: it held the expected prefix (``True``), it did not
    (``False``), or nothing (``None``).

    Args:
        state: The state the call was sent assuming.
        expected: Tokens at the start of its prompt that the previous prompt began with.
        reported_cached: The cached prompt tokens the server reported; ``None``: no report.
        timed_miss: Whether its first token came later than a hit's would; ``None``: untimed.
    """
    if state not in ("warm", "evicted") or expected <= 0:
        return None  # nothing was expected cached
    if reported_cached is not None:
        if reported_cached * 2 >= expected:
            return True  # evidence however short the prefix
        return False if expected >= MIN_EVIDENCE_TOKENS else None
    return None if timed_miss is None else not timed_miss


Hits = tuple[float, float]
"""How often the server held a conversation's prompt when part of it was expected cached:
(held, calls), each call weighing :data:`HIT_RATE_DECAY` times the one after it."""

NO_HITS: Final[Hits] = (0.0, 1.0)
"""The first guess: none held. Until the server has held one of its prompts, a conversation
sends no prompt larger than the cut on the bet that the server will."""


def hits_after(hits: Hits, held: bool | None) -> Hits:
    """``hits`` with what one more call said (:func:`held`); unchanged when it said nothing."""
    if held is None:
        return hits
    return hits[0] * HIT_RATE_DECAY + held, hits[1] * HIT_RATE_DECAY + 1


def cache_state(
    *, at: float | None, missed: bool, same_request: bool, now: float, lifetime_s: float
) -> CacheState:
    """The state of the prompt a conversation sends at ``now``.

    Args:
        at: When its previous call was made; ``None``: no previous call is known.
        missed: Whether, as of that call, the server did not hold what it had been sent.
        same_request: Whether this request sends the same tools and response format.
        now: This call's time.
        lifetime_s: How long the server keeps an idle prefix.
    """
    if at is None or not same_request:
        return "cold"
    if now - at > lifetime_s:
        return "expired"
    return "evicted" if missed else "warm"
