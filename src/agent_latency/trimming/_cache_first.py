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
  head rounds, the tail rounds, the rounds the question asked at the cut needs (turn level:
  a round scores as its best message by BM25, with each hit's neighbouring rounds; a round
  saying the same of the question as an older one ranks first, so a correction beats what it
  corrects), then the most recent without gaps, up to :data:`STABLE_SHARE` of
  the room. The rounds since the cut are appended after it whole, so the prompt up to the new
  messages is the previous call's, byte for byte.
* **Recall**: when the latest user message names something no message sent holds, or a
  left-out round speaks to more of it than any round sent (or as much and is newer), the
  rounds that speak to it (with neighbours) come back right before the current turn, after the
  stable part and the appended rounds, so the cached prefix is not moved; when they do not fit,
  the call is refocused (:func:`_refocus`). Most turns of a conversation are not questions
  about its past: a turn that asks nothing (no question mark) recalls only what it plainly
  speaks of (:data:`STATEMENT_MATCH`).

The stable part and an epoch of appended rounds take at most :data:`STABLE_SHARE` +
:data:`APPEND_SHARE` of the room (under a third): the rest is for the current turn and for
recall, which is where the evidence a question needs comes from on a long conversation
(docs/benchmarks.md, LoCoMo). Whatever still does not fit is dropped by the general priority
rules (``_plan.drop_by_priority``).
"""

from __future__ import annotations

import bisect
import math
import operator
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, takewhile
from typing import Final, NamedTuple

from agent_latency._chat_format import role_of
from agent_latency.trimming._options import TrimOptions
from agent_latency.trimming._plan import Plan
from agent_latency.trimming._relevance import BM25_B, BM25_K1, Occurrences, TermCache

STABLE_SHARE: Final = 0.1
"""What a deep cut keeps of the history's room: the stable part."""
APPEND_SHARE: Final = 0.2
"""How far the history grows between two cuts, as a share of its room (an epoch)."""
RECALL_MATCH: Final = 0.25
"""How much of the question a left-out round must match (of the question's own score)."""
STATEMENT_MATCH: Final = 0.8
"""How much of a latest user message that asks nothing (no question mark) a left-out round must
match: most such turns go on with the conversation rather than ask about its past."""
RECALL_OF_BEST: Final = 0.25
"""How well, against the best, a left-out round must match to come back with it."""
_QUESTION_MARKS: Final = frozenset(
    "?\uff1f\ufe56\u061f\u2e2e\u037e\u055e\u1367\u00bf\u203d\u2047\u2048\u2049\u2753\u2754"
)
"""What makes a turn a question: the ASCII mark, the full-width and small ones (Chinese,
Japanese), the Arabic one (Arabic, Persian, Urdu) and its reversed form, the Greek, Armenian and
Ethiopic ones, the Spanish opening one (often typed without the closing one), and those chat
users type: the interrobang, ``⁇ ⁈ ⁉`` and the emoji ``❓ ❔``."""
_QUESTION_ENDINGS: Final = re.compile(r"(?:か|かな|っけ|吗|嗎|么|麼)(?=[\s。．.！!…]|$)")
"""What makes a turn a question without a mark: a sentence ending in a Japanese question
particle (``何番でしたか。``, as written Japanese asks; ``だっけ``) or a Chinese one (``吗``)."""
REFOCUS_MATCH: Final = 0.3
"""How much of the question the best left-out round must match for a call to be refocused
when recall does not fit (of the question's own score)."""
_SAME: Final = 1e-9
"""Scores closer than this are equal (sums of floats in another order)."""
_NEIGHBOURS: Final = 1
"""Rounds on each side of a relevant round that come with it (the question and its answer
often sit in adjacent rounds)."""
_AROUND: Final = tuple(side * step for step in range(1, _NEIGHBOURS + 1) for side in (1, -1))
"""The offsets of a relevant round's neighbours, nearest first."""
NEIGHBOUR_SHARE: Final = 0.1
"""A neighbour costing at most this share of the room being filled comes right with its relevant
round; a dearer one waits until every relevant round was offered (where turns are long, the
room holds more of what the question needs: LongMemEval, docs/benchmarks.md)."""
_RECENCY: Final = 1e-6
"""Breaks ties between equally relevant rounds toward the newer one."""
_COMMON: Final = 0.5
"""A term in more than this share of the messages does not rank rounds."""
_GAIN: Final = BM25_K1 + 1
_FLOOR: Final = BM25_K1 * (1 - BM25_B)
"""BM25's count gain and the length discount of an empty message."""


def cache_first_cut(
    plan: Plan,
    options: TrimOptions,
    terms: TermCache,
    occurrences: Occurrences,
    *,
    grid_budget: int,
) -> None:
    """Drops the history rounds a cache-first cut leaves out and recalls what the question needs.

    Args:
        plan: The plan, over budget (large tool results already shortened).
        options: The trimmer's options (``history_keep_head`` and ``history_keep_tail`` rounds
            are kept first in the stable part).
        terms: Where term counts are remembered between calls.
        occurrences: Where each term occurs in the conversation.
        grid_budget: What the cuts are drawn on (see :func:`_room`): the budget as configured,
            in the server's tokens and before any reserve, less the tool definitions and
            response format as given.
    """
    history = _History.of(plan, terms, occurrences)
    if history is None:
        return
    total = history.starts[-1]
    room = _room(plan, grid_budget, history.indices[0][0])
    if room <= 0:
        return
    epoch = max(math.floor(APPEND_SHARE * room), 1)
    cut = bisect.bisect_right(history.starts, (total // epoch) * epoch) - 1
    stable_target = math.floor(STABLE_SHARE * room)
    if history.starts[cut] > stable_target:
        for run in _left_out(history, cut, stable_target, options):
            plan.drop(run, "dropped_at_cut")
    _recall(history, plan.budget - plan.tokens, cut)


def _room(plan: Plan, grid_budget: int, first: int) -> int:
    """What the history and the current turn share of the budget, as the cuts reckon it.

    Only what every call of the conversation sends the same is taken off ``grid_budget``: the
    chat template's framing and the leading system messages (before the ``first`` history
    message). A per-call part (a system message sent with each question, reminders kept in the
    history, the current turn's tool call) is not: the epochs would move with it, and the cut
    back and forth. The budget is the configured one, not the calibrated one, so that every
    replica, whatever it has learnt of the server's counts, draws the same epochs; the rest of
    the trim keeps to the calibrated budget.

    Returns:
        The room in tokens (``<= 0``: nothing to cut on).
    """
    sizes, classes = plan.sizes, plan.classes
    leading = sum(sizes[i] for i in range(first) if classes[i] == "system" and not plan.dropped[i])
    return grid_budget - plan.framing - leading


@dataclass(slots=True)
class _History:
    """The history rounds of a plan (the droppable ones, oldest first) and how to score them.

    Attributes:
        plan: The plan.
        indices: Each round's message positions.
        sizes: Each round's tokens as planned.
        starts: The tokens before each round, and the total last.
        owner: Per message position, its round (``-1``: no history round).
        terms: Term counts.
        occurrences: Where each term occurs.
    """

    plan: Plan
    indices: list[list[int]]
    sizes: list[int]
    starts: list[int]
    owner: list[int]
    terms: TermCache
    occurrences: Occurrences

    @classmethod
    def of(cls, plan: Plan, terms: TermCache, occurrences: Occurrences) -> _History | None:
        rounds = plan.history_rounds()
        if rounds is None:
            return None
        indices, sizes, starts, owner = rounds
        return cls(plan, indices, sizes, starts, owner, terms, occurrences)

    def before(self, upto: int) -> int:
        """How many messages come before round ``upto``; past the last history round, before the
        current turn (its latest user message), which a later call finds as round ``upto``."""
        if upto < len(self.indices):
            return self.indices[upto][0]
        latest = self.plan.latest
        return self.occurrences.length if latest is None else latest

    def weigh(self, query: str, length: int) -> _Query:
        """The terms of ``query`` as the first ``length`` messages weigh them (for a cut, those
        before it: :meth:`before`, so that later messages change nothing)."""
        occurrences, totals = self.occurrences, self.occurrences.totals
        peaks = occurrences.peaks
        if length != occurrences.length:
            occurrences = occurrences._replace(length=length)
        weighed = []
        ideal = 0.0
        for bit, term in enumerate(self.terms.counts(query)):
            postings, held = occurrences.held(term)
            idf = math.log(1 + (length - held + 0.5) / (held + 0.5))
            ideal += idf
            if held <= length * _COMMON:  # else says little about which round
                peak = peaks.get(term, 1)
                bound = idf * _GAIN * peak / (peak + _FLOOR)
                # tuple.__new__ makes the same tuple in C (a NamedTuple's own is Python code)
                weighed.append(tuple.__new__(_Term, (1 << bit, term, postings, held, idf, bound)))
        slope = BM25_K1 * length / (totals[length] or 1) * BM25_B
        return _Query(length, weighed, ideal, slope)

    def scores(self, query: _Query, upto: int) -> tuple[list[float], list[int]]:
        """How well each of the first ``upto`` rounds answers ``query``, turn by turn.

        A message scores by BM25 against the query (a term's weight is its rarity, its count
        saturates, a long message is discounted), a round as its best message; a round holding
        the same query terms as an older round scores at least as well, plus a tie-break
        toward the newer round, so that of two rounds saying the same thing the later one (a
        correction) ranks first. Only the messages holding a term of the query are read.

        Returns:
            The rounds' scores and per round the query terms it holds, as a bit mask (bit
            ``k``: the query's ``k``-th term).
        """
        owner, bags, totals = self.owner, self.occurrences.bags, self.occurrences.totals
        length = query.length
        # Per message (by position): its length discount, its score summed over the terms and
        # which terms it holds.
        lengths = map(operator.sub, islice(totals, 1, length + 1), totals)
        discount = [_FLOOR + query.slope * size for size in lengths]
        per_message = [0.0] * length
        holds = [0] * length
        for flag, term, postings, held_by, idf, _ in query.terms:
            for position in islice(postings, held_by):
                tf = bags[position][term]
                per_message[position] += idf * tf * _GAIN / (tf + discount[position])
                holds[position] |= flag
        best = [0.0] * upto
        held = [0] * upto
        for position in compress(range(length), holds):
            r = owner[position]  # a round below ``upto``, or -1: no history round
            if 0 <= r < upto:
                held[r] |= holds[position]
                if per_message[position] > best[r]:
                    best[r] = per_message[position]
        # A round holding the same terms of the query as an older one ranks at least as high
        # (and, by the tie-break, first): the newer of two statements of a thing is the one
        # that stands, whichever is the shorter.
        by_terms: dict[int, float] = {}
        for r in compress(range(upto), held):
            said = held[r]
            if by_terms.get(said, 0.0) > best[r]:
                best[r] = by_terms[said]
            by_terms[said] = best[r]
            best[r] += _RECENCY * r
        return best, held

    def may_reach(self, query: _Query, share: float) -> bool:
        """Whether a history message may score at least ``share`` of the score of an
        average-length message holding every term of the query once (and more than nothing).

        Quick where few messages could: a message scores below the sum of the bounds of the
        query terms it holds (:class:`_Term`). So a message holding only the commoner terms,
        whose bounds add up to too little, cannot; of the others (found through the rarer terms'
        postings, which are short), the commoner terms are looked up heaviest first only while
        the weight the message may still hold could be enough, and only those whose terms weigh
        enough are scored. Never says no where :meth:`scores` would say yes.
        """
        floor = share * query.ideal - _SAME  # the rounds' scores carry a tie-break
        rarer = sorted(query.terms, key=operator.attrgetter("bound"))
        common: list[_Term] = []
        commoner = 0.0
        while rarer and commoner + rarer[0].bound <= floor:
            common.append(rarer.pop(0))
            commoner += common[-1].bound
        # A message holding less weight than this cannot reach the floor (a margin of _SAME).
        least = floor - _SAME
        # The commoner terms heaviest first (a message's bound falls fastest), each with the
        # weight a message must already hold for the terms from it on to lift it over ``least``.
        steps: list[tuple[str, float, float]] = []
        for term in reversed(common):
            steps.append((term.term, term.bound, least - commoner))
            commoner -= term.bound
        held_rarer: dict[int, float] = {}
        for term in rarer:
            for position in islice(term.postings, term.held):
                held_rarer[position] = held_rarer.get(position, 0.0) + term.bound
        weights = {term.term: term.idf for term in query.terms}
        owner, bags, totals = self.owner, self.occurrences.bags, self.occurrences.totals
        for position, weight in held_rarer.items():
            if owner[position] < 0:
                continue
            bag = bags[position]
            # What it may still hold bounds it: given up once even that is too little (and not
            # asked when its rarer terms alone are enough).
            for word, bound, needed in steps if weight <= least else ():
                if weight <= needed:
                    break
                if word in bag:
                    weight += bound
            else:
                if weight > least:
                    held = bag.keys() & weights.keys()
                    discount = _FLOOR + query.slope * (totals[position + 1] - totals[position])
                    score = sum(weights[t] * bag[t] * _GAIN / (bag[t] + discount) for t in held)
                    if score > 0 and score >= floor:  # summed in another order: within _SAME
                        return True
        return False


class _Term(NamedTuple):
    """A term of a query that ranks rounds: its bit in the rounds' masks, the positions of
    the messages holding it (the first ``held`` of ``postings``), its BM25 weight, and the most
    it adds to a message's score (a message holds it at most its ``peaks`` times, and even the
    shortest is discounted by more than :data:`_FLOOR`)."""

    flag: int
    term: str
    postings: Sequence[int]
    held: int
    idf: float
    bound: float


class _Query(NamedTuple):
    """A query as the first ``length`` messages weigh it (:meth:`_History.weigh`).

    Attributes:
        length: How many messages it is weighed by.
        terms: Its terms that rank rounds (those in at most :data:`_COMMON` of the messages).
        ideal: The score of an average-length message holding every term of it once.
        slope: How much a message's length discount grows per term it holds.
    """

    length: int
    terms: list[_Term]
    ideal: float
    slope: float


def _left_out(history: _History, cut: int, target: int, options: TrimOptions) -> list[range]:
    """The messages before the cut that :func:`_stable_part` leaves out, as runs of positions
    (a few: dropped a run at a time), decided once per epoch:
    every call until the next cut asks the same of the same rounds (an edit of a text before the
    cut re-indexes the conversation, a new ``postings`` object, and one of a size, such as a
    tool call's arguments, changes the rounds' sizes: either asks anew). The runs are positions:
    the key holds the analysis' generation, new after any edit, which can move a tool result to
    another round (a late result renamed in place) with no size changed."""
    postings = history.occurrences.postings
    key = (
        "left_out",
        id(postings),
        cut,
        history.plan.facts.generation,  # rounds keep their messages while it is the same
        history.indices[0][0],
        history.indices[cut - 1][-1],
        tuple(history.sizes[:cut]),
        target,
        options.history_keep_head,
        options.history_keep_tail,
        _cut_query(history, cut),
    )
    remembered: tuple[dict[str, list[int]], list[range]] | None = history.terms.scores.get(key)
    if remembered is not None and remembered[0] is postings:
        return remembered[1]
    keep = _stable_part(history, cut, target, options)
    left_out = _runs(i for r in range(cut) if r not in keep for i in history.indices[r])
    history.terms.scores.put(key, (postings, left_out), 48 * len(left_out) + 8 * cut + 64)
    return left_out


def _runs(positions: Iterable[int]) -> list[range]:
    """``positions`` as runs of consecutive ones, in their order."""
    runs: list[range] = []
    start = stop = -1
    for position in positions:
        if position != stop:  # a run ends
            if stop > start:
                runs.append(range(start, stop))
            start = position
        stop = position + 1
    if stop > start:
        runs.append(range(start, stop))
    return runs


def _stable_part(history: _History, cut: int, target: int, options: TrimOptions) -> set[int]:
    """The rounds before the cut that stay, within ``target`` tokens: the head rounds, the
    tail rounds, the rounds the cut's question needs with their neighbours, the most recent."""
    filling = _Filling(history.sizes, target, range(cut))
    for index in range(min(options.history_keep_head, cut)):
        filling.take(index)
    for index in range(cut - 1, max(cut - options.history_keep_tail, 0) - 1, -1):
        filling.take(index)
    query = _cut_query(history, cut)
    if query and not filling.full():  # else no round could be taken: not scored
        filling.best_first(history.scores(history.weigh(query, history.before(cut)), cut)[0])
    # Then the most recent rounds, while they fit: no older round fills a gap, where it
    # could say what a newer round left out corrects.
    for index in range(cut - 1, -1, -1):
        if index not in filling.taken and not filling.fits(index):
            break
        filling.take(index)
    return filling.taken


@dataclass(slots=True)
class _Filling:
    """Rounds taken into a room, each whole, while they fit.

    Attributes:
        sizes: Every history round's tokens.
        room: The tokens the rounds may take.
        allowed: The rounds that may be taken.
        taken: Those taken.
        used: Their tokens.
        smallest: The size of the smallest round allowed: with less room left, none fits.
    """

    sizes: list[int]
    room: int
    allowed: range | set[int]
    taken: set[int] = field(default_factory=set)
    used: int = 0
    smallest: int = 0

    def __post_init__(self) -> None:
        self.smallest = min(map(self.sizes.__getitem__, self.allowed), default=0)

    def fits(self, index: int) -> bool:
        return self.used + self.sizes[index] <= self.room

    def full(self) -> bool:
        return self.used + self.smallest > self.room

    def take(self, index: int) -> None:
        if index in self.allowed and index not in self.taken and self.fits(index):
            self.taken.add(index)
            self.used += self.sizes[index]

    def offer(self, hits: list[int], *, cheap: float) -> None:
        """Takes ``hits`` in their order, each with its neighbours of at most ``cheap`` tokens,
        then their other neighbours, while they fit."""
        # take() and full() over the room left, in locals: a question offers every round
        # that scores, most of which no longer fit.
        sizes, allowed, taken, smallest = self.sizes, self.allowed, self.taken, self.smallest
        left = self.room - self.used
        for index in _offered(hits, sizes, cheap=cheap):
            if left < smallest:
                break
            if index in allowed and index not in taken and sizes[index] <= left:
                taken.add(index)
                left -= sizes[index]
        self.used = self.room - left

    def best_first(self, scores: list[float]) -> None:
        """Takes the allowed rounds that score, best first, with their neighbours (those of at
        most :data:`NEIGHBOUR_SHARE` of the room at once), while they fit."""
        self.offer(_relevant(scores, self.allowed), cheap=NEIGHBOUR_SHARE * self.room)


def _relevant(scores: list[float], rounds: Iterable[int]) -> list[int]:
    """Those of ``rounds`` that score, best first (the scores' recency tie-break puts the newer
    of two equally relevant rounds first)."""
    ranked = sorted(rounds, key=scores.__getitem__, reverse=True)
    return list(takewhile(lambda index: scores[index] > 0, ranked))


def _offered(hits: list[int], sizes: list[int], *, cheap: float) -> Iterator[int]:
    """The rounds to offer, in order: each of ``hits`` with its neighbours of at most ``cheap``
    tokens, then, hit by hit, their other neighbours (out of range ones included: the taker
    checks)."""
    later = []
    for hit in hits:
        yield hit
        for index in map(hit.__add__, _AROUND):
            if 0 <= index < len(sizes) and sizes[index] <= cheap:
                yield index
            else:
                later.append(index)
    yield from later


def _cut_query(history: _History, cut: int) -> str:
    """The question asked where the cut falls: what the turn of the first user message at or
    after it asks (``MessageFacts.query``: with the user messages a tool added after it), the
    same while that turn is the current one (``Plan.query``) and once it is history."""
    plan = history.plan
    for members in history.indices[cut:]:
        for index in members:
            if plan.classes[index] == "history" and role_of(plan.messages[index]) == "user":
                return plan.facts.query(index)
    return plan.query


def _recall(history: _History, room: int, cut: int) -> None:
    """Brings back the left-out rounds the question needs (what the current turn asks:
    ``Plan.query``), before the current turn.

    Only when the question needs them: a left-out round holds a term of the question that no
    message still sent holds, or speaks to more of the question than any round sent, or as
    much and is newer (a correction of it), and speaks to a good part of the question
    (:data:`RECALL_MATCH`, or :data:`STATEMENT_MATCH` for a turn that asks nothing). Then the
    left-out rounds that qualify and score at least :data:`RECALL_OF_BEST` of the best come
    back, best (and, among equals, newest) first, then the rounds around them, within ``room``;
    they are sent in their own order. When they do not fit and the question asks
    plainly about the past (:data:`REFOCUS_MATCH`), this call is refocused instead
    (:func:`_refocus`).
    """
    plan = history.plan
    if not plan.asked or room <= 0:
        return
    query = plan.query
    weighed = history.weigh(query, history.occurrences.length)
    asks = _asks(query)
    if not history.may_reach(weighed, RECALL_MATCH if asks else STATEMENT_MATCH):
        return  # no round could pass the gate below: nothing to score
    count = len(history.indices)
    scores, round_terms = history.scores(weighed, count)
    ideal = weighed.ideal
    base = [score - _RECENCY * r if score else 0.0 for r, score in enumerate(scores)]
    dropped = plan.dropped
    out = [dropped[members[0]] for members in history.indices]
    bags = history.occurrences.bags
    asked = set(plan.asked)  # the query's own messages hold its terms: not what answers it
    sent_bags = [
        bags[p]
        for p in compress(range(len(dropped)), map(operator.not_, dropped))
        if p not in asked
    ]
    sent_terms = sum(
        1 << bit
        for bit, term in enumerate(history.terms.counts(query))
        if any(term in bag for bag in sent_bags)
    )
    sent = [r for r in range(count) if not out[r] and scores[r] > 0]
    latest_said = max(sent, key=scores.__getitem__, default=-1)
    said = base[latest_said] if sent else 0.0
    candidates = [
        r
        for r in range(count)
        if out[r]
        and scores[r] > 0
        and (
            round_terms[r] & ~sent_terms
            or base[r] > said + _SAME
            or (r > latest_said and base[r] >= said - _SAME)
        )
    ]
    best = max((base[r] for r in candidates), default=0.0)
    if best <= 0 or best < (RECALL_MATCH if asks else STATEMENT_MATCH) * ideal:
        return
    hits = [r for r in _relevant(scores, candidates) if base[r] >= RECALL_OF_BEST * best]
    filling = _Filling(history.sizes, room, set(compress(range(count), out)))
    # Every round that qualifies before any neighbour: what is left of the room is small. A
    # round that did not fit when offered never fits later (the room only fills).
    filling.offer(hits, cheap=0)
    if not filling.taken.issuperset(hits) and best >= REFOCUS_MATCH * ideal:
        _refocus(history, scores, cut)
        return
    chosen = filling.taken
    if not chosen:
        return
    # In input order: a round's units list a tool call's results with the call, while another
    # message can sit between them.
    indices = sorted(i for r in chosen for i in history.indices[r])
    plan.restore(indices, ["recalled"] * len(indices))
    plan.moved = indices


def _asks(text: str) -> bool:
    """Whether ``text`` asks something: it holds a question mark, or a sentence of it ends in a
    question particle (:data:`_QUESTION_MARKS`, :data:`_QUESTION_ENDINGS`; both all past ASCII
    but the ASCII mark, so most texts are told by one search in C)."""
    if "?" in text:
        return True
    if text.isascii():
        return False
    return not _QUESTION_MARKS.isdisjoint(text) or _QUESTION_ENDINGS.search(text) is not None


def _refocus(history: _History, scores: list[float], cut: int) -> None:
    """Gives this call's room after the stable part to the rounds the question needs.

    The stable part stays (the server still holds it); the rest of the history is chosen
    again, best first (:meth:`_Filling.best_first`), the rounds since the cut among it, then the
    most recent: this call and the next one (back to the appended rounds) prefill only what
    follows the stable part.
    """
    plan = history.plan
    count = len(history.indices)
    movable = [r for r in range(cut, count)] + [
        r for r in range(cut) if plan.dropped[history.indices[r][0]]
    ]
    indices = [i for r in movable for i in history.indices[r]]
    plan.drop(indices, "dropped_at_cut")
    filling = _Filling(history.sizes, plan.budget - plan.tokens, set(movable))
    filling.best_first(scores)
    for r in range(count - 1, cut - 1, -1):
        filling.take(r)
    chosen = filling.taken
    if not chosen:
        return
    back = sorted(chosen)
    kept = [i for r in back for i in history.indices[r]]
    plan.restore(
        kept, ["recalled" if r < cut else "within_budget" for r in back for _ in history.indices[r]]
    )
    plan.moved = sorted(i for r in back if r < cut for i in history.indices[r])
