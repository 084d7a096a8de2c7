"""Tool definitions as a trimmable class (opt-in, ``tool_budget``): which tools a request keeps.

Tool definitions open most chat templates, so a tool list that changes re-prefills the whole
prompt. The choice is therefore sticky: it is replayed over the conversation's user turns in
order, and a new question changes it only when the tools kept do not hold the tools it *needs*
(its best match by lexical relevance, BM25 over name and description, and any scoring at least
80% of that, at most three). A change keeps, within the budget and in this order:

1. the tools the user pins, and a provider's built-in tools (a dict whose ``type`` is not
   ``function``, e.g. ``web_search_preview``: nothing says what they are for), always, even
   over the budget;
2. the tools called in the current turn, after its user message (always: their results are
   in the prompt and refer to them);
3. the tools the question needs;
4. the tools kept so far, then the others called or needed before, most recently called or
   needed first;
5. the others, by relevance to the question.

A tool called in a turn is kept from then on unless a later change evicts it (the least recently
called or needed go first). Only the pinned and built-in tools and those called in the current
turn may take the tools past the budget (with a warning): a call to a tool that was not sent
forces it in for the rest of its turn, and the next question chooses again within the budget.
The choice is a pure function of the messages (the same messages always give the same tools, in
any process); it changes at most at a new user question, or within a turn when the model called
a tool that was not sent. The kept tools are sent in their original order. Replays are
remembered per conversation prefix, so an agent's next call costs a pass over the messages and a
look-up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from agent_latency._caches import LRUCache
from agent_latency._chat_format import role_of
from agent_latency.trimming._relevance import TermCache, bm25_scores, text_bytes, text_of
from agent_latency.trimming._request import DescribedTool, ExtrasCounter, RequestExtras

logger = logging.getLogger(__name__)

_NEEDED_SHARE: Final = 0.8  # of the best match's score: a question needs the tools this close
_MAX_NEEDED: Final = 3
_CHOICES: Final = LRUCache(256, 4 * 1024 * 1024)
"""Choices by (tools, budget, pins, turns): 256 of them and 4 MiB of the questions they hold."""
# Neither user nor assistant messages: a warm call reads every message, and a type look-up is
# cheaper than isinstance on message classes.
_OTHER_KINDS: Final = frozenset({SystemMessage, ToolMessage})

# A user turn: its question (None before the first user message) and the tools called after it.
_Turn = tuple[str | None, tuple[str, ...]]


@dataclass(frozen=True)
class _Choice:
    """The tools kept after a turn, and per tool the last turn that called or needed it (-1)."""

    kept: frozenset[int]
    last_used: tuple[int, ...]


@dataclass(frozen=True)
class _Catalogue:
    """What the replay needs to know of the selectable tools."""

    names: dict[str, int]
    texts: list[list[str]]
    tokens: list[int]
    budget: int
    pinned: frozenset[int]
    terms: TermCache

    def indices(self, names: Sequence[str]) -> tuple[int, ...]:
        """The indices of the tools named, once each; unknown names left out."""
        found = (self.names.get(name) for name in names)
        return tuple(dict.fromkeys(i for i in found if i is not None))


def select_tools(
    request: RequestExtras,
    messages: Sequence[BaseMessage],
    *,
    budget: int,
    pinned: frozenset[str],
    counter: ExtrasCounter,
    terms: TermCache,
) -> tuple[RequestExtras, tuple[str, ...]]:
    """Returns the request with only the tools kept, and the names of the tools dropped.

    Args:
        request: The tools (selectable) and output tools (always kept) of the request.
        messages: The conversation: its user questions and the tools called after each.
        budget: The most tokens the selectable tools may take together (counted one by one);
            exceeded only when the pinned and built-in tools and those called in the current
            turn take more (then a warning names them).
        pinned: Names of tools always kept (the built-in tools are kept too).
        counter: Counts each tool's definition.
        terms: Term counts for the relevance ranking.
    """
    described = counter.describe(request)
    turns = _turns(messages)
    key = (id(described), budget, pinned, turns)
    cached = _CHOICES.get(key)
    # The entry holds ``described`` itself, so its id is not reused while the entry lives.
    if cached is not None and cached[0] is described:
        choice: _Choice = cached[1]
    else:
        catalogue = _Catalogue(
            names=_names(described),
            texts=[[tool.text] for tool in described],
            tokens=[tool.tokens for tool in described],
            budget=budget,
            pinned=frozenset(
                i for i, tool in enumerate(described) if tool.builtin or tool.name in pinned
            ),
            terms=terms,
        )
        # The choice before the latest turn: remembered by the agent's previous calls.
        before_key = (*key[:3], turns[:-1])
        before = _CHOICES.get(before_key)
        if before is not None and before[0] is described:
            choice = before[1]
        else:
            choice = _Choice(frozenset(), (-1,) * len(described))
            for number, turn in enumerate(turns[:-1]):
                choice = _step(catalogue, choice, number, turn, first=number == 0)
            _CHOICES.put(before_key, (described, choice), _weight(turns[:-1]))
        choice = _step(catalogue, choice, len(turns) - 1, turns[-1], first=len(turns) == 1)
        _CHOICES.put(key, (described, choice), _weight(turns))
        _warn_if_forced_over(catalogue, turns[-1][1])
    if len(choice.kept) == len(described):
        return request, ()
    kept = tuple(tool for i, tool in enumerate(request.tools) if i in choice.kept)
    dropped = tuple(tool.name for i, tool in enumerate(described) if i not in choice.kept)
    return replace(request, tools=kept), dropped


def _weight(turns: tuple[_Turn, ...]) -> int:
    """The bytes a choice's key holds: its questions and the names of the tools they called."""
    return text_bytes(q for q, _ in turns if q) + text_bytes(n for _, c in turns for n in c)


def _turns(messages: Sequence[BaseMessage]) -> tuple[_Turn, ...]:
    """Splits the conversation into user turns: (question, names of the tools called after it)."""
    turns: list[_Turn] = []
    question: str | None = None
    calls: list[str] = []
    for message in messages:
        if type(message) in _OTHER_KINDS:  # by type first: most of an agent's messages
            continue
        if isinstance(message, AIMessage):
            for call in (*message.tool_calls, *message.invalid_tool_calls):
                if call["name"]:
                    calls.append(call["name"])
        elif role_of(message) == "user":
            if question is not None or calls:
                turns.append((question, tuple(calls)))
            question, calls = text_of(message), []
    turns.append((question, tuple(calls)))
    return tuple(turns)


def _step(
    catalogue: _Catalogue, choice: _Choice, number: int, turn: _Turn, *, first: bool = False
) -> _Choice:
    """The choice after turn ``number``: at its question, then with the tools it called."""
    question, calls = turn
    scores = bm25_scores(question or "", catalogue.texts, catalogue.terms)
    room = catalogue.budget - sum(catalogue.tokens[i] for i in catalogue.pinned)
    # A needed tool that cannot fit at all must not make every question a change.
    needed = tuple(i for i in _needed(scores) if catalogue.tokens[i] <= room)
    kept = choice.kept
    if first or not kept.issuperset(needed) or _over_budget(catalogue, kept):
        kept = _choose(catalogue, choice, scores, needed, forced=())
    last_used = list(choice.last_used)
    for i in needed:
        last_used[i] = number
    called = catalogue.indices(calls)
    if not kept.issuperset(called):  # the model called a tool that was not sent
        kept = _choose(catalogue, _Choice(kept, tuple(last_used)), scores, needed, forced=called)
    for i in called:
        last_used[i] = number
    return _Choice(kept, tuple(last_used))


def _over_budget(catalogue: _Catalogue, kept: frozenset[int]) -> bool:
    """Whether ``kept`` exceeds the budget by more than the pinned tools force."""
    tokens = catalogue.tokens
    pinned = sum(tokens[i] for i in catalogue.pinned)
    return sum(tokens[i] for i in kept) > max(catalogue.budget, pinned)


def _needed(scores: list[float]) -> tuple[int, ...]:
    """The tools a question needs: its best match and those nearly as good, best first."""
    best = max(scores, default=0.0)
    if best <= 0:
        return ()
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return tuple(i for i in ranked[:_MAX_NEEDED] if scores[i] >= _NEEDED_SHARE * best)


def _choose(
    catalogue: _Catalogue,
    before: _Choice,
    scores: list[float],
    needed: tuple[int, ...],
    *,
    forced: tuple[int, ...],
) -> frozenset[int]:
    """Picks the tools in the module docstring's order while they fit the budget."""
    last = before.last_used
    rest = sorted(
        range(len(scores)),
        key=lambda i: (i not in before.kept, -last[i], -scores[i], i),
    )
    kept = {*catalogue.pinned, *forced}
    used = sum(catalogue.tokens[i] for i in kept)
    for i in (*needed, *rest):
        if i not in kept and used + catalogue.tokens[i] <= catalogue.budget:
            kept.add(i)
            used += catalogue.tokens[i]
    return frozenset(kept)


def _names(described: Sequence[DescribedTool]) -> dict[str, int]:
    """Each tool's index by its name, the first of a name kept. A built-in tool's type stands
    for its name, but a call names a function: a function of the same name takes it."""
    order = sorted(enumerate(described), key=lambda item: (not item[1].builtin, -item[0]))
    return {tool.name: i for i, tool in order}


def _warn_if_forced_over(catalogue: _Catalogue, calls: tuple[str, ...]) -> None:
    forced = catalogue.pinned.union(catalogue.indices(calls))
    tokens = sum(catalogue.tokens[i] for i in forced)
    if tokens > catalogue.budget:
        names = sorted(name for name, i in catalogue.names.items() if i in forced)
        logger.warning(
            "Tool budget exceeded: the pinned and built-in tools and those called in this turn "
            "alone take %d tokens, the tool_budget is %d (%s). Fix: raise tool_budget or pin "
            "fewer tools.",
            tokens,
            catalogue.budget,
            ", ".join(names),
        )
