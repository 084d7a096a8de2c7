"""Cache-first cuts: cut rarely and deep, append in between, recall what a question needs.

On a server that caches prompt prefixes (llama-server per slot, vLLM and SGLang by block,
OpenAI, DeepSeek) the first token waits for the *uncached* tokens. A cut that moves on every
call re-prefills everything after it; this one moves rarely:

* **Where the cut falls** is derived from the history's size alone: the history (every round
  before the current turn) is read in epochs of :data:`APPEND_SHARE` of the room the budget
  leaves for it, and the cut sits at the start of the round the current epoch began in. The
  cut therefore stays put while the conversation grows by an epoch, on every replica, with no
  state kept anywhere.
* **The stable part** is what the rounds before the cut keep, decided from them alone: the
  head rounds, the rounds the question asked at the cut needs (turn-level BM25, with each
  hit's neighbouring rounds; of equally relevant rounds the newer, so a correction beats what
  it corrects), then the most recent, up to :data:`STABLE_SHARE` of the room. The rounds since
  the cut are appended after it whole, so the prompt up to the new messages is the previous
  call's, byte for byte.
* **Recall**: when the latest user message names something no kept message mentions but a
  dropped round does, the best such rounds (with neighbours) come back right before the current
  turn, after the stable part and the appended rounds, so the cached prefix is not moved. Most
  turns of a conversation are not questions about its past; they recall nothing.

What is left of the room after the stable part and an epoch of appended rounds is the room
for the current turn and for recall. Whatever still does not fit is dropped by the general
priority rules (``_plan.drop_by_priority``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import accumulate
from typing import Final

from agent_latency.trimming._options import TrimOptions
from agent_latency.trimming._plan import Plan
from agent_latency.trimming._relevance import TermCache, bm25_scores
from agent_latency.trimming._rounds import Unit

STABLE_SHARE: Final = 0.4
"""What a deep cut keeps of the history's room: the stable part."""
APPEND_SHARE: Final = 0.35
"""How far the history grows between two cuts, as a share of its room (an epoch)."""
RECALL_SHARE: Final = 0.25
"""The most a recall brings back, as a share of the history's room."""
RECALL_MARGIN: Final = 1.2
"""How much better than every round still sent a left-out round must match the question."""
RECALL_MATCH: Final = 0.3
"""How much of the question a left-out round must match (of the question's own score)."""
_NEIGHBOURS: Final = 1
"""Rounds on each side of a relevant round that come with it (the question and its answer
often sit in adjacent rounds)."""
_RECENCY: Final = 1e-6
"""Breaks ties between equally relevant rounds toward the newer one."""

Round = list[Unit]


def cache_first_cut(
    plan: Plan, units: Sequence[Unit], options: TrimOptions, terms: TermCache
) -> None:
    """Drops the history rounds a cache-first cut leaves out and recalls what the question needs.

    Args:
        plan: The plan, over budget (large tool results already shortened).
        units: The conversation's units.
        options: The trimmer's options (``history_keep_head`` and ``history_keep_tail`` rounds
            are kept first in the stable part).
        terms: Where term counts are remembered between calls.
    """
    rounds = _history_rounds(plan, units)
    if not rounds:
        return
    sizes = [_size(plan, r) for r in rounds]
    history = sum(sizes)
    current = sum(
        plan.sizes[i]
        for i, c in enumerate(plan.classes)
        if c in ("latest_user", "tool_result") and not plan.dropped[i]
    )
    room = plan.budget - (plan.tokens - history - current)  # what the history and turn share
    if room <= 0:
        return
    starts = [0, *accumulate(sizes)]
    epoch = max(math.floor(APPEND_SHARE * room), 1)
    cut = bisect.bisect_right(starts, (history // epoch) * epoch) - 1
    stable_target = math.floor(STABLE_SHARE * room)
    if starts[cut] > stable_target:
        keep = _stable_part(plan, rounds, sizes, cut, stable_target, options, terms)
        left_out = [i for r in range(cut) if r not in keep for i in _indices(rounds[r])]
        plan.drop(left_out, "dropped_at_cut")
    recall_room = min(math.floor(RECALL_SHARE * room), plan.budget - plan.tokens)
    _recall(plan, rounds, sizes, recall_room, terms)


def _history_rounds(plan: Plan, units: Sequence[Unit]) -> list[Round]:
    """The droppable history units, grouped by round, oldest first."""
    rounds: dict[int, Round] = {}
    classes, dropped, must_keep = plan.classes, plan.dropped, plan.must_keep
    for unit in units:
        first = unit.indices[0]
        if classes[first] == "history" and not dropped[first] and not must_keep[first]:
            rounds.setdefault(unit.round, []).append(unit)
    return list(rounds.values())


def _size(plan: Plan, round_: Round) -> int:
    sizes = plan.sizes
    return sum(sizes[i] for unit in round_ for i in unit.indices)


def _indices(round_: Round) -> list[int]:
    return [i for unit in round_ for i in unit.indices]


def _round_scores(
    plan: Plan, query: str, rounds: Sequence[Round], terms: TermCache
) -> tuple[list[float], float]:
    """Each round's relevance to ``query`` (its best message's BM25 score: turn level, with a
    tie broken toward the newer round), and the query's score against itself: what a round
    that said all the question says would score."""
    texts = plan.texts
    members = [[texts[i] for i in _indices(r)] for r in rounds]
    flat = [[text] for texts_ in members for text in texts_]
    scores = bm25_scores(query, [*flat, [query]], terms)
    result: list[float] = []
    position = 0
    for order, texts_ in enumerate(members):
        best = max(scores[position : position + len(texts_)], default=0.0)
        position += len(texts_)
        result.append(best + _RECENCY * order if best > 0 else 0.0)
    return result, scores[-1]


def _stable_part(
    plan: Plan,
    rounds: Sequence[Round],
    sizes: Sequence[int],
    cut: int,
    target: int,
    options: TrimOptions,
    terms: TermCache,
) -> set[int]:
    """The rounds before the cut that stay, within ``target`` tokens: the head rounds, the
    tail rounds, the rounds the cut's question needs with their neighbours, the most recent."""
    before = rounds[:cut]
    keep: set[int] = set()
    used = 0

    def take(index: int) -> None:
        nonlocal used
        if index not in keep and 0 <= index < len(before) and used + sizes[index] <= target:
            keep.add(index)
            used += sizes[index]

    for index in range(min(options.history_keep_head, len(before))):
        take(index)
    for index in range(len(before) - 1, max(len(before) - options.history_keep_tail, 0) - 1, -1):
        take(index)
    query = _cut_query(plan, rounds, cut)
    if query:
        scores, _ = _round_scores(plan, query, before, terms)
        for index in sorted(range(len(before)), key=scores.__getitem__, reverse=True):
            if scores[index] <= 0:
                break
            for neighbour in _with_neighbours(index):
                take(neighbour)
    for index in range(len(before) - 1, -1, -1):
        take(index)
    return keep


def _with_neighbours(index: int) -> list[int]:
    """A round and the rounds around it, nearest first."""
    around = [index + side * step for step in range(1, _NEIGHBOURS + 1) for side in (1, -1)]
    return [index, *around]


def _cut_query(plan: Plan, rounds: Sequence[Round], cut: int) -> str:
    """The question asked where the cut falls: the first user message at or after it."""
    for round_ in rounds[cut:]:
        for unit in round_:
            if unit.kind == "user":
                return plan.texts[unit.indices[0]]
    question = plan.question()
    return "" if question is None else plan.texts[question]


def _recall(
    plan: Plan, rounds: Sequence[Round], sizes: Sequence[int], room: int, terms: TermCache
) -> None:
    """Brings back the dropped rounds the latest user message needs, before the current turn.

    Only when the question needs them: the round that matches it best was left out, matches it
    clearly better than any round still sent (:data:`RECALL_MARGIN`), and matches a good part
    of what it asks (:data:`RECALL_MATCH`). Then the left-out rounds that match it at least
    half as well come back, best first, each with its neighbours, within ``room``.
    """
    question = plan.question()
    if question is None or room <= 0:
        return
    scores, ideal = _round_scores(plan, plan.texts[question], rounds, terms)
    dropped = plan.dropped
    out = [dropped[r[0].indices[0]] for r in rounds]
    best_out = max((s for s, o in zip(scores, out, strict=True) if o), default=0.0)
    best_in = max((s for s, o in zip(scores, out, strict=True) if not o), default=0.0)
    if best_out <= 0 or best_out < RECALL_MARGIN * best_in or best_out < RECALL_MATCH * ideal:
        return
    chosen: list[int] = []
    used = 0
    for r in sorted(range(len(rounds)), key=scores.__getitem__, reverse=True):
        if scores[r] < best_out / 2:
            break
        if not out[r]:
            continue
        for candidate in _with_neighbours(r):
            if (
                0 <= candidate < len(rounds)
                and out[candidate]
                and candidate not in chosen
                and used + sizes[candidate] <= room
            ):
                chosen.append(candidate)
                used += sizes[candidate]
    if not chosen:
        return
    indices = [i for r in sorted(chosen) for i in _indices(rounds[r])]
    plan.restore(indices, ["recalled"] * len(indices))
    plan.moved = indices
