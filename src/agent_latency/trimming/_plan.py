"""Deciding a trim: which messages are kept, dropped or shortened, planned at their sent size.

The steps, in order (the module docstring of ``_trimmer`` and docs/trimming.md explain the
rules): :func:`classify` ranks every message and drops orphans, and when the request does not fit,
:func:`mark_kept` marks the must-keep units, :func:`cap_tool_results` shortens large tool results,
:func:`drop_by_priority` drops units lowest priority first and :func:`shorten_must_keep` shortens
the must-keep messages as a last resort. Every shortening is planned with the size of the copy
that will be sent (images and a long ``tool_call_id`` included), never with its target.
"""

from __future__ import annotations

import bisect
import functools
import math
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress
from typing import NamedTuple

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage

from agent_latency._chat_format import role_of
from agent_latency.config import PRIORITY_CLASSES, PriorityClass
from agent_latency.trimming._compaction import Compactor
from agent_latency.trimming._decisions import GAP_RULES, Action, MessageDecision, Rule
from agent_latency.trimming._options import TrimOptions
from agent_latency.trimming._relevance import Occurrences, TermCache, bm25_scores, text_of
from agent_latency.trimming._rounds import MessageFacts, Unit, first_index
from agent_latency.trimming._shortening import MIN_SHORTENED_TOKENS, MessageShortener

_MUST_KEEP_RULES: frozenset[Rule] = frozenset({"must_keep", "latest_tool_call"})
_SENT_AS_GIVEN: frozenset[Rule] = frozenset({"fits", "within_budget"})
"""The rules of a kept message that say no more than that it fits: a late tool result's says it
is sent right after its call instead (``late_tool_result``)."""
_NOT = bytes.maketrans(b"\x00\x01", b"\x01\x00")

Copy = Callable[[], BaseMessage]
"""What makes the copy sent in place of a message: called by :meth:`Plan.output` for the messages
sent only (most of a long history's shortened results are then dropped), it returns the same copy
while the shortener or compactor remembers it."""


class HistoryRounds(NamedTuple):
    """The history rounds of a plan (:meth:`Plan.history_rounds`; shared: do not modify).

    Attributes:
        indices: Each round's message positions, in unit order.
        sizes: Each round's tokens as planned.
        starts: The tokens before each round, and the total last.
        owner: Per message position, its round (``-1``: no history round).
    """

    indices: list[list[int]]
    sizes: list[int]
    starts: list[int]
    owner: list[int]


class Plan:
    """The per-message state of one trim while it is decided, and the record of it afterwards.

    Attributes:
        messages: The input messages.
        facts: What the analysis of the conversation found (shared with later trims: not to
            be modified, like ``counts`` and ``texts``, which are its own).
        counts: Their tokens as given.
        texts: Their texts.
        sizes: Their tokens as they will be sent (shortened copies' own counts).
        budget: The most tokens the request may have.
        tokens: Tokens of the request as planned: the kept messages, ``overhead`` and the
            framing of what is sent.
        framing: The per-request framing of what is sent: it depends on the first message
            sent (Qwen's and Llama 3.1's templates add a default system turn when that is not
            a system message), so dropping the first message can cost more than it saves.
        shortened: What makes the copies to send in place of shortened messages, by index
            (:data:`Copy`: made for the messages sent only).
        latest: The index of the latest user message, if any (a unit of its own: one message).
        asked: The latest user message and the user messages a tool added after it (an image,
            read both ways: see ``MessageFacts.asking``), by index; empty without the former.
        query: Their text: what the history is chosen for.
        worked_on: The questions the agent was still working on when the latest user message
            came (written while a tool ran: see :func:`mark_kept`), by index; must-keep with
            it, and shortened as the user messages of ``asked`` are.
        moved: Kept messages sent right before the latest user message rather than in their
            place (recalled history, which must not move the cached prefix), ascending.
    """

    __slots__ = (
        "as_analysed",
        "asked",
        "budget",
        "classes",
        "counts",
        "dropped",
        "facts",
        "first",
        "frame",
        "framing",
        "latest",
        "messages",
        "moved",
        "must_keep",
        "must_keep_at",
        "query",
        "rules",
        "shortened",
        "shortener",
        "sizes",
        "texts",
        "tokens",
        "worked_on",
    )

    def __init__(
        self,
        messages: list[BaseMessage],
        facts: MessageFacts,
        *,
        overhead: int,
        framing: Callable[[BaseMessage | None], int],
        budget: int,
        shortener: MessageShortener,
    ) -> None:
        """Plans ``messages`` all kept, within budget.

        Args:
            messages: The input messages.
            facts: Their analysis.
            overhead: The tokens of what the request sends besides its messages and framing.
            framing: The per-request framing of a request whose first message is the one given
                (``None``: no message).
            budget: The most tokens the request may have.
            shortener: Makes the shortened copies.
        """
        self.messages = messages
        self.facts = facts
        self.counts = counts = facts.counts
        self.texts = facts.texts
        self.sizes = list(counts)
        self.budget = budget
        self.frame = framing
        self.first: int | None = 0 if messages else None
        self.framing = framing(messages[0] if messages else None)
        self.tokens = sum(counts) + overhead + self.framing
        self.shortener = shortener
        self.classes: list[PriorityClass] = list(facts.classes)  # classify() finishes them
        # Every message kept within budget until a step says otherwise (mark_kept, drops).
        self.rules: list[Rule] = ["within_budget"] * len(messages)
        # One byte a message (0 or 1): set by slices and read in C (compress, translate).
        self.dropped = bytearray(len(messages))
        self.must_keep = [False] * len(messages)
        self.must_keep_at: set[int] = set()  # the same, as positions (a few of hundreds)
        self.shortened: dict[int, Copy] = {}
        self.moved: list[int] = []
        self.latest = latest = facts.units[facts.users[-1]].indices[0] if facts.users else None
        self.asked = [] if latest is None else facts.asking(latest)
        self.query = "" if latest is None else facts.query(latest)
        self.worked_on: list[int] = []
        # Whether no message was dropped but orphans, none brought back and none of the
        # history made must-keep: then the history rounds are the analysis' (history_rounds).
        self.as_analysed = True

    def keep(self, indices: Sequence[int], rule: Rule) -> None:
        """Marks messages kept by ``rule``; one shortened already keeps its shortening's rule."""
        must_keep = rule in _MUST_KEEP_RULES
        if must_keep and self.as_analysed:
            self.as_analysed = all(self.classes[index] != "history" for index in indices)
        for index in indices:
            if index not in self.shortened:
                self.rules[index] = rule
            self.must_keep[index] = must_keep
        if must_keep:
            self.must_keep_at.update(indices)
        else:
            self.must_keep_at.difference_update(indices)

    def rule_kept(self, rule: Rule) -> None:
        """Gives every message neither dropped nor shortened ``rule`` (``"fits"``: the request
        fits as it is)."""
        rules = self.rules
        self.rules = [rule] * len(rules)
        for index in compress(range(len(rules)), self.dropped):
            self.rules[index] = rules[index]
        for index in self.shortened:
            self.rules[index] = rules[index]

    def drop(self, indices: Sequence[int], rule: Rule) -> None:
        """Plans ``indices`` dropped by ``rule`` (a ``range`` of them in C, when none of them
        was dropped: the cut drops hundreds of messages in a few runs)."""
        self.as_analysed = self.as_analysed and rule == "orphan_tool_result"
        dropped, rules, sizes = self.dropped, self.rules, self.sizes
        if type(indices) is range and indices.step == 1 and not _any_true(dropped, indices):
            run = slice(indices.start, indices.stop)
            self.tokens -= sum(sizes[run])
            dropped[run] = b"\1" * len(indices)
            rules[run] = [rule] * len(indices)
        else:
            saved = 0  # summed here, not per message
            for index in indices:
                if not dropped[index]:
                    dropped[index] = True
                    saved += sizes[index]
                rules[index] = rule
            self.tokens -= saved
        if self.first is not None and dropped[self.first]:
            self._start_at(self._first_kept(()))

    def restore(self, indices: Sequence[int], rules: Sequence[Rule]) -> None:
        """Undoes :meth:`drop` of ``indices``, which get ``rules`` back (the framing too)."""
        self.as_analysed = False
        for index, rule in zip(indices, rules, strict=True):
            if self.dropped[index]:
                self.dropped[index] = False
                self.tokens += self.sizes[index]
            self.rules[index] = rule
        self._start_at(self._first_kept((), start=0))

    def _start_at(self, first: int | None) -> None:
        """Plans ``first`` as the first message sent, and the framing that goes with it."""
        if first != self.first:
            framing = self._framing_of(first)
            self.tokens += framing - self.framing
            self.first, self.framing = first, framing

    def saving(self, indices: Sequence[int]) -> int:
        """The tokens dropping ``indices`` would save, the change of framing included."""
        saved = sum(self.sizes[i] for i in indices if not self.dropped[i])
        if self.first is None or self.first not in indices:
            return saved
        return saved + self.framing - self._framing_of(self._first_kept(frozenset(indices)))

    def leaves_nothing(self, indices: Sequence[int]) -> bool:
        """Whether dropping ``indices`` would leave no message to send."""
        return self.first is not None and self._first_kept(frozenset(indices)) is None

    def _first_kept(self, also_dropped: Collection[int], start: int | None = None) -> int | None:
        """The first message from ``start`` (default: the first kept) neither dropped nor in
        ``also_dropped``."""
        dropped = self.dropped
        start = (self.first or 0) if start is None else start
        return next(
            (i for i in range(start, len(dropped)) if not dropped[i] and i not in also_dropped),
            None,
        )

    def _framing_of(self, first: int | None) -> int:
        return self.frame(None if first is None else self.messages[first])

    def shorten(self, index: int, target: int, rule: Rule) -> int:
        """Plans the message at ``index`` shortened toward ``target``; returns the tokens saved.

        The plan takes the copy's own count, which can exceed ``target`` (large non-text parts),
        and keeps the message as it is when no copy would be smaller.
        """
        message, shortener = self.messages[index], self.shortener
        size = shortener.size(message, target)
        return self.substitute(
            index, functools.partial(shortener.copy, message, target), size, rule
        )

    def substitute(
        self, index: int, copy: Copy, size: int, rule: Rule, *, smaller_only: bool = True
    ) -> int:
        """Plans the copy ``copy`` makes (of ``size`` tokens) in place of a message; returns
        the tokens saved.

        Nothing changes when the copy would not be smaller than what is planned now, unless
        ``smaller_only`` is false (a copy that must be sent instead).
        """
        saved = self.sizes[index] - size
        if saved <= 0 and smaller_only:
            return 0
        self.tokens -= saved
        self.sizes[index] = size
        self.shortened[index] = copy
        self.rules[index] = rule
        return saved

    def output(self) -> tuple[list[BaseMessage], tuple[int, ...]]:
        """The messages to send (the kept ones as given, shortened ones as their copies, made
        here) and each one's tokens as sent.

        In input order, but for the recalled rounds (:attr:`moved`) and the tool results that
        came apart from their call (``facts.late``), sent right after it with the other results
        of its call (an endpoint rejects a call whose results do not follow it right away).
        """
        # compress() walks the list in C: an agent's history runs to hundreds of messages (and
        # the flags, bytes, inverted in C, are the quickest selectors).
        sent = self.dropped.translate(_NOT)
        late = self.facts.late
        if not self.moved and not self.shortened and not late:
            return list(compress(self.messages, sent)), tuple(compress(self.sizes, sent))
        order = list(compress(range(len(self.messages)), sent))
        key = self._sent_order(late)
        recalled = self.moved
        if late:
            order.sort(key=key)
            recalled = sorted(recalled, key=key)
        if recalled and self.latest is not None:  # sent right before the latest user message
            moved = set(recalled)
            # A moved round's tool results can come after the latest user message (a late
            # result): sent once, with their call.
            rest = [i for i in order if i not in moved]
            at = bisect.bisect_left(rest, key(self.latest), key=key)
            order = [*rest[:at], *recalled, *rest[at:]]
        sizes = tuple(map(self.sizes.__getitem__, order))
        shortened, messages = self.shortened, self.messages
        if not shortened:
            return list(map(messages.__getitem__, order)), sizes
        made = {i: shortened[i]() for i in order if i in shortened}
        # The copies sent stand for their messages from now on: question_retention, read later,
        # reads what was sent, whatever is done to the messages meanwhile.
        shortened.update((i, _made(copy)) for i, copy in made.items())
        return [made.get(i, messages[i]) for i in order], sizes

    def _sent_order(self, late: Mapping[int, int]) -> Callable[[int], tuple[int, int]]:
        """What sorts message positions in the order they are sent (recalled rounds apart): by
        their call's position for the messages of a tool call with a late result, by their own
        for the others."""
        units = self.facts.units
        calls: dict[int, int] = {}
        for call in set(late.values()):
            unit = units[bisect.bisect_left(units, call, key=first_index)]
            calls.update(dict.fromkeys(unit.indices, call))
        return lambda index: (calls.get(index, index), index)

    def must_keep_by_class(self) -> dict[PriorityClass, int]:
        """Tokens of the must-keep messages as sent, per class."""
        totals: dict[PriorityClass, int] = dict.fromkeys(PRIORITY_CLASSES, 0)
        for index in self.must_keep_at:
            if not self.dropped[index]:
                totals[self.classes[index]] += self.sizes[index]
        return totals

    def must_keep_added(self) -> int:
        """Tokens as sent of the must-keep user messages of :attr:`asked` but the latest (those a
        tool added: the tool's own, or the user's next question)."""
        asked, sizes = self.asked[1:], self.sizes
        return sum(sizes[i] for i in asked if self.must_keep[i] and not self.dropped[i])

    def history_rounds(self) -> HistoryRounds | None:
        """The history rounds as planned now: the messages of class ``"history"`` that are
        neither dropped nor must-keep, by round, oldest first (``None``: there are none).

        Read from the analysis (in time linear in the messages after the latest user message)
        while nothing but orphans was dropped, nothing brought back and nothing of the history
        made must-keep; walked from the units otherwise. Either way the same rounds: a round's
        messages are listed in unit order (a tool call's results right after it).
        """
        if not self.as_analysed:
            return self._walked_history_rounds()
        facts = self.facts
        if not facts.users:
            return None
        latest = facts.units[facts.users[-1]]
        question = latest.indices[0]
        count = facts.owner[question]  # the rounds before the latest user message's
        if count == 0:
            return None
        owner = facts.owner[:question]
        owner += [round_ if round_ < count else -1 for round_ in facts.owner[question:]]
        sizes = facts.round_tokens[:count]
        for index in self.shortened:  # planned at their copy's size
            if owner[index] >= 0:
                sizes[owner[index]] += self.sizes[index] - self.counts[index]
        return HistoryRounds(facts.rounds[:count], sizes, [0, *accumulate(sizes)], owner)

    def _walked_history_rounds(self) -> HistoryRounds | None:
        by_round: dict[int, list[int]] = {}
        classes, dropped, must_keep = self.classes, self.dropped, self.must_keep
        for unit in self.facts.units:
            first = unit.indices[0]
            if classes[first] == "history" and not dropped[first] and not must_keep[first]:
                by_round.setdefault(unit.round, []).extend(unit.indices)
        if not by_round:
            return None
        indices = list(by_round.values())
        owner = [-1] * len(self.messages)
        for round_, members in enumerate(indices):
            for index in members:
                owner[index] = round_
        sizes = [sum(self.sizes[index] for index in members) for members in indices]
        return HistoryRounds(indices, sizes, [0, *accumulate(sizes)], owner)

    def left_out(self) -> tuple[int, ...]:
        """The positions of the messages dropped or shortened, ascending (see
        :meth:`decisions`), found in C."""
        dropped = compress(range(len(self.dropped)), self.dropped)
        if not self.shortened:
            return tuple(dropped)
        return tuple(sorted({*dropped, *self.shortened}))

    def cut_for_budget(self) -> bool:
        """Whether a message was dropped by another rule than :data:`GAP_RULES`."""
        rules = compress(self.rules, self.dropped)
        return not all(map(GAP_RULES.__contains__, rules))

    def decisions(self) -> tuple[MessageDecision, ...]:
        """One decision per input message, in input order."""
        return tuple(self._decision(index) for index in range(len(self.messages)))

    def _decision(self, index: int) -> MessageDecision:
        action: Action = "kept"
        tokens_after = self.sizes[index]
        rule = self.rules[index]
        if self.dropped[index]:
            action, tokens_after = "dropped", 0
        elif index in self.shortened:
            action = "shortened"
        elif rule in _SENT_AS_GIVEN and index in self.facts.late:
            rule = "late_tool_result"  # kept as it is, but sent elsewhere
        return MessageDecision(
            index,
            role_of(self.messages[index]),
            self.classes[index],
            action,
            rule,
            self.counts[index],
            tokens_after,
        )


@dataclass(slots=True)
class _Block:
    """Units dropped together: one unit, or one history round."""

    priority_class: PriorityClass
    indices: list[int]


def classify(plan: Plan) -> None:
    """Assigns every message its class, drops orphan tool results and leaves out unanswered
    tool calls (the analysis warns of those, once per call: ``AnalysisMemo``).

    The analysis classes every message ``"system"`` or ``"history"``: only the latest user
    message's unit and the units after it (the current turn) are read here.
    """
    facts, classes = plan.facts, plan.classes
    latest = facts.users[-1] if facts.users else -1  # its position among the units
    if plan.latest is not None:
        classes[plan.latest] = "latest_user"
    for unit in facts.units[latest + 1 :]:
        if unit.kind != "system":
            for index in unit.indices:
                classes[index] = "tool_result"
    if facts.unanswered:
        _leave_out_unanswered_calls(plan, facts.unanswered)
    if facts.orphans:
        # An endpoint rejects the whole request over one of these (HTTP 400), so they go.
        plan.drop(facts.orphans, "orphan_tool_result")


def _leave_out_unanswered_calls(plan: Plan, unanswered: Mapping[int, tuple[str, ...]]) -> None:
    """Sends each ``AIMessage`` of ``unanswered`` (by position) without the calls whose ids it
    names, or drops it when nothing else is left: an endpoint rejects a request with a tool
    call whose result is missing (HTTP 400), as after a ``RemoveMessage`` of it."""
    gone = []
    for index, ids in unanswered.items():
        message = plan.messages[index]
        copy = _without_calls(message, frozenset(ids))
        if copy is None:
            gone.append(index)
        else:
            size = plan.shortener.count(copy)
            plan.substitute(index, _made(copy), size, "unanswered_tool_call", smaller_only=False)
    if gone:
        plan.drop(gone, "unanswered_tool_call")


def _made(copy: BaseMessage) -> Copy:
    """What returns ``copy``, made already."""
    return lambda: copy


def _without_calls(message: BaseMessage, ids: frozenset[str]) -> AIMessage | None:
    """A copy of ``message`` (an ``AIMessage``) without its tool calls of ``ids``, and with no
    raw call in ``additional_kwargs`` but those of the calls it keeps (ChatOpenAI sends the raw
    ones when it keeps none, and a round trip would parse them back); ``None`` when it would
    send nothing (no call and no content)."""
    assert isinstance(message, AIMessage)  # only an AIMessage makes tool calls
    calls = [call for call in message.tool_calls if call.get("id") not in ids]
    invalid = [call for call in message.invalid_tool_calls if call.get("id") not in ids]
    if not calls and not invalid and not message.content:
        return None
    extra = dict(message.additional_kwargs)
    raw = extra.pop("tool_calls", None)
    kept_ids = {call.get("id") for call in (*calls, *invalid)}
    if kept_ids and isinstance(raw, list):
        kept = [c for c in raw if isinstance(c, Mapping) and c.get("id") in kept_ids]
        if kept:
            extra["tool_calls"] = kept
    update = {"tool_calls": calls, "invalid_tool_calls": invalid, "additional_kwargs": extra}
    if isinstance(message, AIMessageChunk):  # its calls are read back from these when parsed
        chunks = message.tool_call_chunks
        update["tool_call_chunks"] = [c for c in chunks if c.get("id") not in ids]
    return message.model_copy(update=update)


def mark_kept(plan: Plan, options: TrimOptions) -> None:
    """Marks the must-keep units (every other surviving unit is planned kept within budget
    from the start).

    Right after :func:`classify`: only orphans and unanswered tool calls are dropped or
    shortened.
    """
    facts, classes = plan.facts, plan.classes
    latest = facts.users[-1] if facts.users else -1
    must_keep: list[int] = []
    if options.keep_system:
        must_keep += _positions(classes, "system")
    steps = _tool_steps(plan, facts.units[latest + 1 :])
    if latest >= 0 and options.keep_latest_user:
        must_keep += facts.units[latest].indices
        # A user message after a call no result answers (a tool that crashed or was
        # interrupted: the call is left out) was no tool's: the user's own next question.
        must_keep += [
            index
            for step in steps
            if len(step) > 1 and step[0].kind == "tool_call" and _unanswered_alone(step[0], facts)
            for unit in step[1:]
            for index in unit.indices
        ]
        if facts.late:
            calls, plan.worked_on = _worked_on(facts, latest)
            must_keep += [*calls, *plan.worked_on]
    plan.keep(must_keep, "must_keep")
    # The newest tool call with what its tool added as user messages (an image: _tool_steps).
    call = next((step for step in reversed(steps) if step[0].kind == "tool_call"), None)
    if call is not None and not plan.dropped[call[0].indices[0]]:
        plan.keep([index for unit in call for index in unit.indices], "latest_tool_call")


def _worked_on(facts: MessageFacts, latest: int) -> tuple[list[int], list[int]]:
    """What the agent was working on when the user wrote the user message of the unit at
    ``latest`` while a tool ran (its result came after it): each such tool call with its
    results, and the user messages they were made for."""
    asked = facts.units[latest].indices[0]
    calls = {call for result, call in facts.late.items() if call < asked < result}
    found: list[int] = []
    questions: list[int] = []
    for position in range(latest - 1, -1, -1):  # the calls are recent
        if not calls:
            break
        unit = facts.units[position]
        if unit.indices[0] in calls:
            calls.discard(unit.indices[0])
            found += unit.indices
            user = bisect.bisect_left(facts.users, position) - 1
            question = facts.units[facts.users[user]].indices[0] if user >= 0 else None
            if question is not None and question not in questions:
                questions.append(question)
    return found, questions


def _unanswered_alone(call: Unit, facts: MessageFacts) -> bool:
    """Whether no result answers any call of ``call`` (a tool-call unit)."""
    return len(call.indices) == 1 and call.indices[0] in facts.unanswered


def _any_true(flags: bytearray, run: range) -> bool:
    """Whether any of ``flags`` in ``run`` is true (found in C, without a copy)."""
    try:
        flags.index(True, run.start, run.stop)
    except ValueError:
        return False
    return True


def _positions(values: list[PriorityClass], value: PriorityClass) -> list[int]:
    """The positions of ``value`` in ``values``, each found by ``list.index`` (in C: few)."""
    found = [-1]
    for _ in range(values.count(value)):
        found.append(values.index(value, found[-1] + 1))
    return found[1:]


def cap_tool_results(plan: Plan, cap: int) -> None:
    """Shortens every kept tool result above ``cap`` tokens toward it."""
    if not plan.facts.issuers or max(plan.sizes, default=0) <= cap:  # most calls: no result
        return
    large = [index for index, size in enumerate(plan.sizes) if size > cap]
    for index in large:
        if isinstance(plan.messages[index], ToolMessage) and not plan.dropped[index]:
            plan.shorten(index, cap, "tool_result_cap")


def compact_history(plan: Plan, options: TrimOptions, compactor: Compactor) -> None:
    """Replaces history tool results with stubs, oldest first, until the rest fits.

    Oldest first, and the saving rounded up to the step like a cut: the compacted part grows
    from the start of the conversation in steps, and every stub is the same on every call, so
    the prompt up to the newest stub stays identical for the server's prefix cache.
    """
    excess = plan.tokens - plan.budget
    if excess <= 0:
        return
    goal = _rounded_up(excess, options)
    saved = 0
    stub_of, size_of = compactor.stub, compactor.size
    for index, message in enumerate(plan.messages):
        if saved >= goal:
            break
        if (
            isinstance(message, ToolMessage)
            and plan.classes[index] == "history"
            and not plan.dropped[index]
            and not plan.must_keep[index]
        ):
            stub = functools.partial(stub_of, message)
            saved += plan.substitute(index, stub, size_of(message), "compacted")


def drop_by_priority(plan: Plan, units: list[Unit], options: TrimOptions, terms: TermCache) -> None:
    """Drops blocks, lowest priority first, until the rest fits (rounded up to the step), then
    brings back the dropped blocks that fit in what the last drop freed beyond that.

    The last block dropped is often larger than what was still missing (a long first round):
    without the second pass, smaller blocks dropped before it stayed out of a request with room
    for them (seen: 627 of a 1,500 budget sent, two whole rounds that fit dropped). Blocks come
    back highest priority first while a whole step stays free with prefix-stable cuts (up to the
    budget with moving cuts), so that the conversation can grow by a step before a round
    brought back has to go again. Only history rounds come back, after a history round was the
    last to go: the priority classes stay strict.

    Never the last block left: with nothing must-keep (``keep_system=False``,
    ``keep_latest_user=False``) and a budget below every message, it is kept and marked
    must-keep, so the request is valid and its overrun reported.
    """
    excess = plan.tokens - plan.budget
    if excess <= 0:
        return
    goal = _rounded_up(excess, options)
    dropped = 0
    previous_class: PriorityClass | None = None
    taken: list[tuple[_Block, list[Rule]]] = []
    for block in _drop_order(plan, units, options, terms, goal):
        # Rounding up to the step never reaches into a class that the exact excess spares.
        if dropped >= goal or (dropped >= excess and block.priority_class != previous_class):
            break
        if plan.leaves_nothing(block.indices):
            # A request needs a message (OpenAI answers an empty list with 400): the unit ranked
            # highest stays, as if it were must-keep, and the request is over budget.
            plan.keep(block.indices, "must_keep")
            break
        saved = plan.saving(block.indices)
        if saved <= 0:  # the first message, whose drop adds a default system turn as large
            continue
        taken.append((block, [plan.rules[i] for i in block.indices]))
        plan.drop(block.indices, "dropped_for_budget")
        dropped += saved
        previous_class = block.priority_class
    # With prefix-stable cuts a whole step stays free, so the conversation can grow by a step
    # before a round brought back has to go again (it would break the prefix the server holds).
    limit = plan.budget - (options.step_tokens if options.prefix_stable else 0)
    # The last block dropped made the rest fit: with it back, the rest would not. Only history
    # rounds come back, and only while the last block dropped was one: a class dropped from
    # keeps nothing of a lower one, and the current turn's tool steps go oldest first.
    if not taken or taken[-1][0].priority_class != "history":
        return
    for block, rules in reversed(taken[:-1]):
        if block.priority_class != "history":
            break
        plan.restore(block.indices, rules)
        if plan.tokens > limit:
            plan.drop(block.indices, "dropped_for_budget")


def _rounded_up(excess: int, options: TrimOptions) -> int:
    """The tokens to take off: ``excess``, rounded up to the step with ``prefix_stable``."""
    return math.ceil(excess / options.cut_step) * options.cut_step


def _drop_order(
    plan: Plan, units: list[Unit], options: TrimOptions, terms: TermCache, goal: int
) -> list[_Block]:
    """The droppable units in drop order, ``goal`` tokens to be taken off."""
    droppable: dict[PriorityClass, list[Unit]] = {c: [] for c in options.priority_order}
    for unit in units:
        first = unit.indices[0]
        if not plan.dropped[first] and not plan.must_keep[first]:
            droppable[plan.classes[first]].append(unit)

    def block(priority_class: PriorityClass, members: list[Unit]) -> _Block:
        indices = [index for unit in members for index in unit.indices]
        return _Block(priority_class, indices)

    order: list[_Block] = []
    before = 0  # the tokens of the classes dropped before the history
    for priority_class in reversed(options.priority_order):
        members = droppable[priority_class]
        if priority_class == "history":
            history = sum(_size(plan, unit) for unit in members)
            room = history - max(goal - before, 0)  # what the budget leaves for the history
            rounds = _history_drop_order(plan, members, options, terms, room)
            order.extend(block("history", r) for r in rounds)
        elif priority_class == "system":
            # The first system message usually holds the main instructions: it goes last.
            order.extend(block("system", [unit]) for unit in reversed(members))
        else:
            order.extend(block(priority_class, step) for step in _tool_steps(plan, members))
        before += sum(_size(plan, unit) for unit in members)
    return order


def _tool_steps(plan: Plan, members: list[Unit]) -> list[list[Unit]]:
    """``members`` (units of one class, in order) a step each, but a user message a tool added
    (an image: see ``_rounds``, "added by a tool") with the step before it, its call's: the
    image goes with the call that fetched it, never without it."""
    steps: list[list[Unit]] = []
    facts = plan.facts
    for unit in members:
        if steps and facts.added_by_a_tool(unit.indices[0]):
            steps[-1].append(unit)
        else:
            steps.append([unit])
    return steps


def _size(plan: Plan, unit: Unit) -> int:
    """The tokens of a unit as planned now."""
    return sum(plan.sizes[index] for index in unit.indices)


def _history_drop_order(
    plan: Plan, units: list[Unit], options: TrimOptions, terms: TermCache, room: int
) -> list[list[Unit]]:
    """Returns history rounds in drop order: middle and tail oldest first, head last first.

    With ``history_selection="cache_first"`` (on every call with moving cuts, and after a
    cache-first cut that still leaves the request over budget) the middle rounds go least
    relevant to the question (:attr:`Plan.query`, BM25; oldest first among equally relevant
    ones) first, and the round that matches it best goes last, after the head and the tail. There
    the head and tail rounds are a preference, not a wall: when they alone take more than
    ``room`` (what the budget leaves for the history), every round is ranked by relevance, so
    the round the question needs is not the one dropped (equally relevant rounds in the age
    order). By age, nothing tells which round the question needs: the history keeps eroding
    from its middle, the head before the tail (the first rounds often hold the task's rules;
    measured with ``agent-latency bench --runs 0 --quality``, ranking all rounds newest first
    kept 39% of the needed facts at budget 3,000 where this order keeps 50%).
    """
    rounds: dict[int, list[Unit]] = {}
    for unit in units:
        rounds.setdefault(unit.round, []).append(unit)
    ordered = [rounds[r] for r in sorted(rounds)]
    # With fewer rounds than head and tail together, the tail (the most recent) gets them.
    tail_start = max(len(ordered) - options.history_keep_tail, 0)
    head_end = min(options.history_keep_head, tail_start)
    head, middle, tail = ordered[:head_end], ordered[head_end:tail_start], ordered[tail_start:]
    by_age = middle + head[::-1] + tail  # the history erodes outwards from its middle
    if options.history_selection == "age" or not ordered:
        return by_age
    texts = [[plan.texts[i] for u in r for i in u.indices] for r in ordered]
    scores = dict(zip(map(id, ordered), bm25_scores(plan.query, texts, terms), strict=True))

    def least_relevant_first(rounds: list[list[Unit]]) -> list[list[Unit]]:
        return sorted(rounds, key=lambda r: scores[id(r)])  # stable: the order given among equals

    if sum(_size(plan, unit) for r in (*head, *tail) for unit in r) > room:
        # Among equally relevant rounds (all of them, for a question no round shares a term
        # with) the age order stands: the head and tail yield to relevance only.
        return least_relevant_first(by_age)
    # The round that matches the question best is the last to go, after the head and tail.
    best = max(ordered, key=lambda r: scores[id(r)])
    if scores[id(best)] <= 0:
        return least_relevant_first(middle) + head[::-1] + tail
    rest = [[r for r in part if r is not best] for part in (middle, head, tail)]
    return least_relevant_first(rest[0]) + rest[1][::-1] + rest[2] + [best]


def shorten_must_keep(plan: Plan) -> None:
    """Shortens the largest must-keep tool results, then what the turn asks if that fits.

    What the turn asks (:attr:`Plan.asked`) is the latest user message, the question being
    answered, and the user messages a tool added after it: the tool's caption of an image, or,
    after a ``return_direct`` tool's result when the trim is not told the tools, the user's own
    next question (by position the same).
    Those are shortened only when that makes the request fit, the latter first (largest first,
    each toward what is left to take off), their images kept, none below
    :data:`MIN_SHORTENED_TOKENS`. When even that would not fit, what no trim removes overflows
    the budget already, and they are sent whole (the result says ``over_budget`` and what
    overflows).
    """
    excess = plan.tokens - plan.budget
    if excess <= 0:
        return
    kept = [i for i in range(len(plan.messages)) if plan.must_keep[i] and not plan.dropped[i]]
    tool_results = [i for i in kept if isinstance(plan.messages[i], ToolMessage)]
    tool_results.sort(key=lambda i: (-plan.sizes[i], i))
    for index in tool_results:
        target = max(MIN_SHORTENED_TOKENS, plan.sizes[index] - excess)
        if target < plan.sizes[index]:
            excess -= plan.shorten(index, target, "shortened_to_fit")
        if excess <= 0:
            return
    shortener = plan.shortener
    added = [
        i for i in (*plan.asked[1:], *plan.worked_on) if plan.must_keep[i] and not plan.dropped[i]
    ]
    planned: list[tuple[int, int, int]] = []  # (index, target, size): made if they fit
    for index in sorted(added, key=lambda i: (-plan.sizes[i], i)):
        target = max(MIN_SHORTENED_TOKENS, plan.sizes[index] - excess)
        size = shortener.size(plan.messages[index], target)
        if size < plan.sizes[index]:
            planned.append((index, target, size))
            excess -= plan.sizes[index] - size
        if excess <= 0:
            break
    question = plan.latest
    if excess > 0 and question is not None and plan.must_keep[question]:
        target = plan.sizes[question] - excess
        if target >= MIN_SHORTENED_TOKENS:
            size = shortener.size(plan.messages[question], target)
            if size <= target:
                planned.append((question, target, size))
                excess = 0
    if excess > 0:
        return
    for index, target, size in planned:
        copy = functools.partial(shortener.copy, plan.messages[index], target)
        plan.substitute(index, copy, size, "shortened_to_fit")


def question_retention(
    plan: Plan, terms: TermCache, occurrences: Callable[[], Occurrences]
) -> float | None:
    """Of the question's terms found elsewhere in the input, the share still sent.

    The question is what the turn asks (:attr:`Plan.asked`: the latest user message, with the
    user messages a tool added after it). A term counts as still sent when another message sent
    holds it and one of the question's messages sent still asks it: the terms their shortening
    (or the drop of one a tool added with an earlier call) removed count as lost (and among those
    wanted). 1.0 when nothing was dropped or shortened; ``None`` when there is no such term.

    Args:
        plan: The decided plan.
        terms: Where term counts are remembered between calls.
        occurrences: Where each term occurs in the input (asked for only when something was
            dropped or shortened).
    """
    question = plan.latest
    if question is None or plan.dropped[question]:
        return None
    asked = terms.counts(plan.query)
    if not plan.shortened and not any(plan.dropped):
        return 1.0 if asked else None
    still: set[str] = set()  # what the question's messages ask as sent
    for index in plan.asked:
        if not plan.dropped[index]:
            copy = plan.shortened.get(index)
            still.update(terms.counts(text_of(copy()) if copy else plan.texts[index]))
    lost = asked.keys() - still
    positions = occurrences().positions
    # Sent whole, other than the question (read in C); a shortened copy sends what it holds.
    whole = list(map(operator.not_, plan.dropped))
    for index in plan.asked:
        whole[index] = False
    copies = {i: terms.counts(text_of(c())) for i, c in plan.shortened.items() if whole[i]}
    for index in copies:
        whole[index] = False
    own = set(plan.asked)
    wanted, kept = len(lost), 0
    for term in asked.keys() - lost:
        found = positions(term)
        if not own.issuperset(found):  # found elsewhere
            wanted += 1
            # Newest first: the recent messages are the ones a trim sends.
            kept += any(map(whole.__getitem__, reversed(found))) or any(
                term in bag for index, bag in copies.items() if index in found
            )
    return round(kept / wanted, 4) if wanted else None
