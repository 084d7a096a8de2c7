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
from agent_latency.trimming._relevance import TermCache, text_bytes
from agent_latency.trimming._rounds import Unit

STABLE_SHARE: Final = 0.4
"""What a deep cut keeps of the history's room: the stable part."""
APPEND_SHARE: Final = 0.35
"""How far the history grows between two cuts, as a share of its room (an epoch)."""
RECALL_SHARE: Final = 0.25
"""The most a recall brings back, as a share of the history's room."""
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
) -> tuple[list[float], float, list[frozenset[str]]]:
    """How well each round answers ``query``, turn by turn.

    A message's score is the summed inverse document frequency of the query's terms it holds
    (each term once: how much of the question it speaks to, not how often or how briefly), a
    round's the best of its messages', plus a tie-break toward the newer round, so that of two
    rounds saying the same thing the later one (a correction) ranks first.

    Returns:
        The rounds' scores, the score of a message holding every term of the query, and each
        round's query terms.
    """
    wanted = tuple(terms.counts(query))
    if not wanted:
        return [0.0] * len(rounds), 0.0, [frozenset()] * len(rounds)
    texts = plan.texts
    members = tuple(tuple(texts[i] for i in _indices(r)) for r in rounds)
    # The rounds before a cut and the question asked there stay the same for a whole epoch.
    key = ("coverage", query, members)
    remembered: tuple[list[float], float, list[frozenset[str]]] | None = terms.scores.get(key)
    if remembered is not None:
        return remembered
    held: list[list[frozenset[str]]] = []
    frequency = dict.fromkeys(wanted, 0)
    messages = 0
    for round_texts in members:
        found = []
        for text in round_texts:
            bag = terms.counts(text)
            matched = frozenset(t for t in wanted if t in bag)
            for term in matched:
                frequency[term] += 1
            found.append(matched)
            messages += 1
        held.append(found)
    idf = {t: math.log(1 + (messages - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}
    scores: list[float] = []
    round_terms: list[frozenset[str]] = []
    for order, found in enumerate(held):
        best = max((sum(idf[t] for t in matched) for matched in found), default=0.0)
        scores.append(best + _RECENCY * order if best > 0 else 0.0)
        round_terms.append(frozenset().union(*found))
    result = (scores, sum(idf.values()), round_terms)
    terms.scores.put(key, result, text_bytes([query, *(t for m in members for t in m)]))
    return result


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
        scores, _, _ = _round_scores(plan, query, before, terms)
        for index in sorted(range(len(before)), key=scores.__getitem__, reverse=True):
            if scores[index] <= 0:
                break
            for neighbour in _with_neighbours(index):
                take(neighbour)
    # Then the most recent rounds, while they fit: no older round fills a gap, where it
    # could say what a newer round left out corrects.
    for index in range(len(before) - 1, -1, -1):
        if index not in keep and used + sizes[index] > target:
            break
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
    """Brings back the left-out rounds the latest user message needs, before the current turn.

    Only when the question needs them: a left-out round holds a term of the question that no
    message still sent holds, and speaks to a good part of the question
    (:data:`RECALL_MATCH`). Then the left-out rounds holding such a term that score at least
    half as well come back, best (and, among equals, newest) first, each with its neighbours,
    within ``room``; they are sent in their own order.
    """
    question = plan.question()
    if question is None or room <= 0:
        return
    query = plan.texts[question]
    scores, ideal, round_terms = _round_scores(plan, query, rounds, terms)
    dropped = plan.dropped
    out = [dropped[r[0].indices[0]] for r in rounds]
    sent_terms = frozenset().union(*(t for t, o in zip(round_terms, out, strict=True) if not o))
    # The system messages and the current turn's tool steps (few) speak to the question too.
    others = [
        plan.texts[i]
        for i, c in enumerate(plan.classes)
        if c != "history" and not dropped[i] and i != question
    ]
    sent_terms |= terms.found(query, others, "others")
    # What the question asks that nothing sent holds; or a newer round than the best one sent
    # that says as much (a correction of what is sent).
    sent_rounds = [r for r in range(len(rounds)) if not out[r] and scores[r] > 0]
    latest_said = max(sent_rounds, key=scores.__getitem__, default=-1)
    said = scores[latest_said] - _RECENCY * latest_said if sent_rounds else math.inf
    candidates = [
        r
        for r in range(len(rounds))
        if out[r]
        and scores[r] > 0
        and (round_terms[r] - sent_terms or (r > latest_said and scores[r] >= said))
    ]
    best = max((scores[r] for r in candidates), default=0.0)
    if best <= 0 or best < RECALL_MATCH * ideal:
        return
    chosen: list[int] = []
    used = 0
    for r in sorted(candidates, key=scores.__getitem__, reverse=True):
        if scores[r] < best / 2:
            break
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
