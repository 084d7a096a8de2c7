"""Facts a conversation states once and asks about later: what retention and answers are scored on.

One rule decides whether a prompt still holds a fact (:func:`value_kept`: its value occurs in
what is sent, a shortened text counting only where the value survived), one whether an answer
gives it (:func:`answer_gives`); the retention benchmark (``--quality``) and the mixed workload
both use them.

:func:`plant_facts` turns a conversation into one of the mixed workload's: in its first half it
states six facts, one per history round — three in a user message, three inside the round's
longest tool result (the rounds with the longest results get those), in English and in Chinese —
and after each round of its second half it inserts a *question round*, a user question about one
of the facts and the assistant's answer. Half the questions use the words the fact was stated
in, half other words (so a lexical relevance ranking cannot find them). The values are simple
(a port number, an order id, a city), as a small instruction-tuned model can repeat them, and
differ per conversation; which fact each question round asks rotates with the conversation, so
the distance between a fact and its question varies.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

Language = Literal["en", "zh"]
Where = Literal["user", "tool_result"]

_CITIES: Final = (
    "Ljubljana",
    "Tallinn",
    "Porto",
    "Bergen",
    "Tampere",
    "Brno",
    "Turin",
    "Seville",
    "Krakow",
    "Malmo",
)


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact a conversation states, and the question that needs it.

    Attributes:
        value: What the answer must contain (a port, an order id, a city).
        statement: The sentence that states it.
        question: The user question that needs it.
        answer: The assistant's answer in the question round (states the value).
        language: ``en`` or ``zh``.
        where: Where the statement is: in a ``user`` message or inside a ``tool_result``.
        same_words: Whether the question uses the statement's words.
    """

    value: str
    statement: str
    question: str
    answer: str
    language: Language
    where: Where
    same_words: bool


Kind = Literal["port", "order", "city", "inspection", "account"]


def _fact(kind: Kind, pattern: Fact, rng: random.Random, cities: list[str]) -> Fact:
    """A fact like ``pattern`` (``{value}`` in its statement and answer) with a fresh value of
    its kind (a city taken off ``cities``)."""
    if kind == "city":
        value = cities.pop()
    else:
        low, high, form = _VALUES[kind]
        value = form.format(rng.randint(low, high))
    return replace(
        pattern,
        value=value,
        statement=pattern.statement.format(value=value),
        answer=pattern.answer.format(value=value),
    )


_VALUES: Final = {
    "port": (20_000, 29_999, "{}"),
    "order": (10_000, 99_999, "RX-{}"),
    "inspection": (1000, 9999, "QC-{}"),
    "account": (3_000_000, 3_999_999, "{}"),
}
"""The other kinds' values: a number drawn between two bounds, in a form."""

_TEMPLATES: Final[tuple[tuple[Kind, Fact], ...]] = (
    (
        "port",
        Fact(
            "",
            "For later: the staging proxy listens on port {value}.",
            "Which port does the staging proxy listen on?",
            "The staging proxy listens on port {value}.",
            "en",
            "user",
            same_words=True,
        ),
    ),
    (
        "order",
        Fact(
            "",
            "Replacement shipment booked under order id {value}.",
            "What reference did we get for the new parcel we sent out?",
            "It is order {value}.",
            "en",
            "tool_result",
            same_words=False,
        ),
    ),
    (
        "city",
        Fact(
            "",
            "另外请记住：退货仓库设在 {value}。",
            "退货仓库设在哪个城市？",
            "退货仓库设在 {value}。",
            "zh",
            "user",
            same_words=True,
        ),
    ),
    (
        "inspection",
        Fact(
            "",
            "备注：本批货物的质检单号为 {value}。",
            "那批货的检验编号是多少？",
            "检验编号是 {value}。",
            "zh",
            "tool_result",
            same_words=False,
        ),
    ),
    (
        "account",
        Fact(
            "",
            "The fallback courier account number is {value}.",
            "What is the fallback courier account number?",
            "The fallback courier account number is {value}.",
            "en",
            "tool_result",
            same_words=True,
        ),
    ),
    (
        "city",
        Fact(
            "",
            "By the way, our returns desk is now in {value}.",
            "Where did you say the returns counter moved to?",
            "It moved to {value}.",
            "en",
            "user",
            same_words=False,
        ),
    ),
)


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)


def value_kept(value: str, sent: Sequence[BaseMessage]) -> bool:
    """Whether what is sent still holds a fact: its value occurs in a message's text.

    A shortened message counts only where the value survived the cut. The question that needs
    the fact never states its value, so it needs no exception.
    """
    return any(value in _text(message) for message in sent)


def fact_kept(fact: Fact, sent: Sequence[BaseMessage]) -> bool:
    """Whether what is sent still holds ``fact`` (:func:`value_kept`)."""
    return value_kept(fact.value, sent)


_SEPARATORS: Final = re.compile(r"[\s,\u202f\u00a0]")


def answer_gives(fact: Fact, answer: str) -> bool:
    """Whether ``answer`` contains the fact's value (case and digit grouping ignored)."""
    return _SEPARATORS.sub("", fact.value).casefold() in _SEPARATORS.sub("", answer).casefold()


@dataclass(frozen=True)
class PlantedConversation:
    """A conversation with its facts planted and its question rounds inserted.

    Attributes:
        messages: The conversation.
        needs: For each call point (prompt length) whose question needs a fact: that fact.
    """

    messages: tuple[BaseMessage, ...]
    needs: dict[int, Fact]


def _rounds(messages: Sequence[BaseMessage]) -> list[range]:
    """The history rounds: from each user message to the next (the last user turn excluded)."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    return [range(start, end) for start, end in itertools.pairwise(starts)]


def _with_note(content: str, statement: str) -> str:
    """``content`` with ``statement`` on a line of its own in the middle (a JSON field when the
    content is indented JSON)."""
    lines = content.split("\n")
    middle = len(lines) // 2
    if content.lstrip().startswith("{") and len(lines) > 2:
        indent = re.match(r"\s*", lines[middle]).group(0)  # type: ignore[union-attr]
        note = f'{indent}"note": "{statement}",'
    else:
        note = statement
    return "\n".join([*lines[:middle], note, *lines[middle:]])


def plant_facts(messages: Sequence[BaseMessage], conversation: int) -> PlantedConversation:
    """Plants facts and question rounds into ``messages`` (a new list; the input is unchanged).

    With ``n`` history rounds it plants ``min(6, n // 2)`` facts; a conversation of fewer than
    two history rounds gets none.

    Args:
        messages: The conversation (system prompt, rounds, the latest user turn).
        conversation: Its index in the workload: seeds the values and rotates the questions.
    """
    rounds = _rounds(messages)
    count = min(len(_TEMPLATES), len(rounds) // 2)
    if count == 0:
        return PlantedConversation(tuple(messages), {})
    rng = random.Random(f"facts-{conversation}")
    text = "\n".join(_text(m) for m in messages)
    cities = [city for city in _CITIES if city not in text]
    rng.shuffle(cities)
    facts = []
    for kind, pattern in _TEMPLATES[:count]:
        fact = _fact(kind, pattern, rng, cities)
        while fact.value in text:  # a value must occur only where it is planted
            fact = _fact(kind, pattern, rng, cities)
        facts.append(fact)
    stated = rounds[:count]
    # The rounds with the longest tool results hold the facts stated in a tool result.
    by_result = sorted(
        range(count),
        key=lambda r: (
            -max(
                (
                    len(_text(messages[i]))
                    for i in stated[r]
                    if isinstance(messages[i], ToolMessage)
                ),
                default=-1,
            )
        ),
    )
    in_results = [f for f in facts if f.where == "tool_result"]
    in_users = [f for f in facts if f.where == "user"]
    planted: dict[int, Fact] = {}
    for r in sorted(by_result[: len(in_results)]):
        planted[r] = in_results.pop(0)
    for r in range(count):
        if r not in planted:
            planted[r] = in_users.pop(0) if in_users else in_results.pop(0)
    result = list(messages)
    for r, fact in planted.items():
        results = [i for i in stated[r] if isinstance(messages[i], ToolMessage)]
        if fact.where == "tool_result" and results:
            index = max(results, key=lambda i: len(_text(messages[i])))
            content = messages[index].content
            if isinstance(content, str):
                result[index] = messages[index].model_copy(
                    update={"content": _with_note(content, fact.statement)}
                )
                continue
        user = messages[stated[r].start]
        result[stated[r].start] = user.model_copy(
            update={"content": f"{_text(user)} {fact.statement}"}
        )
    # Question rounds after each of the last `count` history rounds, the latest last.
    ordered = [planted[r] for r in range(count)]
    out: list[BaseMessage] = []
    needs: dict[int, Fact] = {}
    ends = {rounds[len(rounds) - count + j].stop: j for j in range(count)}
    for index, message in enumerate(result):
        if index in ends:
            fact = ordered[(ends[index] + conversation) % count]
            out.append(HumanMessage(fact.question))
            needs[len(out)] = fact
            out.append(AIMessage(fact.answer))
        out.append(message)
    return PlantedConversation(tuple(out), needs)
