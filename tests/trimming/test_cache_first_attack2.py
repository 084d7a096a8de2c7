"""A second attack on the cache-first default (``PriorityTrimmer()``), from the user's side.

The quick check before recall (``_History.may_reach``) against full scoring on inputs the first
comparison did not draw, and conversations as users run them: prefixes of one conversation
trimmed at once, conversations sharing their first message objects, forks, removals. The
oracle of every trim is what a fresh trimmer (nothing remembered) returns for the same input.
The two defects it found (a trim of a shorter prefix reading postings a concurrent trim
extended; conversations sharing their opening analysed anew on every call) are fixed.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimResult
from agent_latency.trimming._cache_first import _History

COUNTER = TokenCounter()
SYSTEM = SystemMessage("You are a helpful assistant. Answer briefly.", id="system")
VOCABULARY = [f"w{i}" for i in range(400)]
ZIPF = [1 / (i + 1) for i in range(400)]


def zipf_text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(VOCABULARY, ZIPF, k=rng.randint(low, high)))


def wire(result: TrimResult) -> list[tuple[str, str | None, str]]:
    return [(type(m).__name__, m.id, json.dumps(m.content)) for m in result.messages]


def fresh(messages: list[BaseMessage], budget: int) -> list[tuple[str, str | None, str]]:
    return wire(PriorityTrimmer(budget, token_counter=COUNTER).trim(messages))


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch every microsecond (CPython's default is 5 ms): what a loaded server, or
    a build without the GIL, does now and then shows on every run."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def questions_about_the_past(rounds: int, seed: int = 1) -> list[BaseMessage]:
    """A chat whose every user turn asks about terms said in earlier rounds (so recall scores
    the history on every call)."""
    rng = random.Random(seed)
    messages: list[BaseMessage] = [SYSTEM]
    for n in range(rounds):
        question = f"{zipf_text(rng, 20, 60)} zeta{n % 7} kappa?"
        messages.append(HumanMessage(question, id=f"u{n}"))
        messages.append(AIMessage(f"{zipf_text(rng, 20, 60)} zeta{n % 5}", id=f"a{n}"))
    return messages


@pytest.mark.usefixtures("busy_switching")
def test_batch_over_the_prefixes_of_one_conversation_returns_what_fresh_trimmers_return() -> None:
    """``trimmer.batch`` over a conversation's last prefixes (an evaluation replaying each step
    of a chat, or two requests of one thread in flight): the calls share their first message
    objects, so a longer prefix extends the term index the shorter one is reading."""
    budget = 1500
    chat = questions_about_the_past(200)
    prefixes = [chat[:end] for end in range(len(chat) - 40, len(chat) + 1, 2)]
    expected = [fresh(messages, budget) for messages in prefixes]
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    for _ in range(5):
        got: list[Any] = trimmer.batch(
            prefixes, config={"max_concurrency": 4}, return_exceptions=True
        )
        failed = [repr(out) for out in got if isinstance(out, Exception)]
        assert failed == []
        sent = [[(type(m).__name__, m.id, json.dumps(m.content)) for m in out] for out in got]
        assert sent == expected


# --- the quick check before recall, on the texts users write ----------------------------------

HAN_KANA_HANGUL = (
    "我们之前说的是什么东西时间地点人物事情问题回答数据系统服务器缓存日本語のテキスト한국어문장"
)
ARABIC = [
    "كتاب",
    "مدرسة",
    "بيت",
    "سيارة",
    "قلم",
    "باب",
    "شمس",
    "قمر",
    "ماء",
    "نار",
    "طريق",
    "مدينة",
]
STOP_WORDS = ["the", "a", "is", "what", "when", "it", "of", "to", "and", "you"]
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBOR" * 50}}
MARKS = ["?", "", ".", "\uff1f", "\u061f"]


def script_text(rng: random.Random, kind: str) -> str:
    """A turn of one kind of text: CJK (character pairs), Arabic, scripts mixed in one word,
    one word many times, almost nothing, only stop words, or Zipf words."""
    if kind == "cjk":
        return "".join(rng.choices(HAN_KANA_HANGUL, k=rng.randint(2, 40)))
    if kind == "arabic":
        return " ".join(rng.choices(ARABIC, [1 / (i + 1) for i in range(12)], k=rng.randint(2, 30)))
    if kind == "mixed":
        han = "".join(rng.choices(HAN_KANA_HANGUL, k=3))
        return f"{han}abc{han} {rng.choice(ARABIC)} {zipf_text(rng, 3, 6)} 東京w7"
    if kind == "repeated":
        return " ".join([rng.choice(VOCABULARY[:50])] * rng.randint(50, 2000))
    if kind == "tiny":
        return rng.choice(["", "x", "ok", "?", "7", "a b", "w1"])
    if kind == "stop_words":
        return " ".join(rng.choices(STOP_WORDS, k=rng.randint(1, 20)))
    return zipf_text(rng, 3, 60)


KINDS = ["cjk", "arabic", "mixed", "repeated", "tiny", "stop_words", "zipf", "zipf", "zipf"]


def latest_turn(rng: random.Random, said: list[str]) -> str:
    """A user turn: an earlier turn word for word (with or without a question mark), a part
    of one, a question of the commonest terms or of stop words only, or a new turn."""
    draw = rng.random()
    if draw < 0.15 and said:
        return rng.choice(said) + rng.choice(["", "?"])
    if draw < 0.3 and said:
        earlier = rng.choice(said)
        part = " ".join(earlier.split()[: rng.randint(1, 8)]) if earlier.isascii() else earlier[:9]
        return part + rng.choice(MARKS)
    if draw < 0.4:
        return "w0 w1 w2?"  # terms in over half the messages: none ranks a round
    if draw < 0.5:
        return " ".join(rng.choices(STOP_WORDS, k=4)) + "?"  # no term at all
    return script_text(rng, rng.choice(KINDS)) + rng.choice(MARKS)


def scripts_chat(seed: int, rounds: int) -> Iterator[list[BaseMessage]]:
    """The calls of a growing chat of :data:`KINDS` texts: user turns as strings,
    ``ChatMessage(role="user")`` or text parts around an image, some rounds with a tool call."""
    rng = random.Random(seed)
    messages: list[BaseMessage] = [SYSTEM]
    said: list[str] = []
    for n in range(rounds):
        text = latest_turn(rng, said)
        shape = rng.random()
        if shape < 0.1:
            messages.append(ChatMessage(role="user", content=text, id=f"u{n}"))
        elif shape < 0.2:
            parts = [{"type": "text", "text": text}, IMAGE, {"type": "text", "text": "w9 w12"}]
            messages.append(HumanMessage(parts, id=f"u{n}"))  # type: ignore[arg-type]
        else:
            messages.append(HumanMessage(text, id=f"u{n}"))
        said.append(text)
        if rng.random() < 0.2:
            call = {"name": "search", "args": {"q": zipf_text(rng, 1, 4)}, "id": f"c{n}"}
            messages.append(AIMessage(script_text(rng, "tiny"), tool_calls=[call], id=f"t{n}"))
            result = script_text(rng, rng.choice(KINDS))
            messages.append(ToolMessage(result, tool_call_id=f"c{n}", id=f"r{n}"))
        yield list(messages)
        answer = script_text(rng, rng.choice(KINDS))
        messages.append(AIMessage(answer, id=f"a{n}"))
        said.append(answer)


def repeating_chat(seed: int, turns: int) -> Iterator[list[BaseMessage]]:
    """A Zipf chat whose user turns often ask about, or repeat part of, an earlier turn (at both
    of recall's gates: a question's and a statement's), each request as it grows."""
    rng = random.Random(seed)
    chat: list[BaseMessage] = [SYSTEM]
    for n in range(turns):
        text = zipf_text(rng, 10, 60)
        if n % 2 == 0 and n > 40 and rng.random() < 0.5:
            earlier = str(chat[1 + rng.randrange(0, n - 20, 2)].content).split()
            text = " ".join(earlier[: rng.randint(2, 12)]) + rng.choice(["?", ".", ""])
        chat.append(HumanMessage(text) if n % 2 == 0 else AIMessage(text))
        if n % 2 == 0:
            yield list(chat)


def compare_with_full_scoring(
    calls: Iterable[list[BaseMessage]], budget: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int]:
    """Trims each request of ``calls`` (a growing chat's, in order) with one trimmer as shipped
    and with another whose quick check says yes every time, and asserts the two trims are the
    same; returns how often the check said no (scoring skipped) and how many calls recalled."""
    said: list[bool] = []
    may_reach = _History.may_reach

    def recorded(history: _History, query: Any, share: float) -> bool:
        said.append(may_reach(history, query, share))
        return said[-1]

    checked = PriorityTrimmer(budget, token_counter=COUNTER)
    scored = PriorityTrimmer(budget, token_counter=COUNTER)
    recalled = 0
    for messages in calls:
        with monkeypatch.context() as patch:
            patch.setattr(_History, "may_reach", recorded)
            quick = checked.trim(messages)
        with monkeypatch.context() as patch:
            patch.setattr(_History, "may_reach", lambda *_: True)
            full = scored.trim(messages)
        assert wire(quick) == wire(full)
        assert [d.rule for d in quick.decisions] == [d.rule for d in full.decisions]
        recalled += any(d.rule == "recalled" for d in full.decisions)
    return said.count(False), recalled


@pytest.mark.parametrize(
    ("chat", "seed"),
    [("repeating", 1), ("repeating", 2), ("repeating", 3)]
    + [("scripts", seed) for seed in (4, 5, 6, 7)],
)
def test_the_quick_check_before_recall_never_skips_a_recall(
    chat: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick check before recall scores the history (``_History.may_reach``) never says no
    where scoring would recall: every trim of a growing chat is the one scored in full. The
    chats: Zipf words with turns about earlier ones, and the texts users write: CJK pairs,
    Arabic, mixed scripts, a word thousands of times in one turn, empty and stop-word turns,
    questions with no terms or only common ones, turns repeated word for word (the statement
    gate), user turns as ``ChatMessage`` and as text parts around an image, tool-call rounds."""
    if chat == "repeating":
        calls, budget = repeating_chat(seed, 240), 1500
    else:
        calls, budget = scripts_chat(seed, 120), [300, 600, 1000, 1500][seed % 4]
    skipped, recalled = compare_with_full_scoring(calls, budget, monkeypatch)
    # Both ways were taken: calls skipped scoring, and others recalled.
    assert skipped >= 10
    assert recalled >= 10


# --- conversations that share their first message objects -------------------------------------


class CallCounting(TokenCounter):
    """A token counter that counts the messages it is asked about (a trim asks about the
    messages it analyses: a warm trim of a grown conversation, only the new ones)."""

    asked = 0

    def count_message(self, message: BaseMessage) -> int:
        self.asked += 1
        return super().count_message(message)


EXAMPLE = [HumanMessage("Example: what is w1?", id="ex_q"), AIMessage("w1 is w2.", id="ex_a")]


def branches(shared: str) -> list[list[BaseMessage]]:
    """Three conversations of 60 rounds: each opens with the system prompt and a few-shot example
    (the same objects in all three, or copies), or all three are forks of one conversation after
    its 30th round (the prefix the same objects)."""
    rng = random.Random(3)
    if shared == "fork":
        trunk: list[BaseMessage] = [SYSTEM, *EXAMPLE]
        grow(rng, trunk, 30)
        conversations = [list(trunk) for _ in range(3)]
        for messages in conversations:
            grow(rng, messages, 30)
        return conversations
    conversations = []
    for _ in range(3):
        opening = EXAMPLE if shared == "few_shot" else [m.model_copy() for m in EXAMPLE]
        messages = [SYSTEM, *opening]
        grow(rng, messages, 60)
        conversations.append(messages)
    return conversations


def grow(rng: random.Random, messages: list[BaseMessage], rounds: int) -> None:
    start = len(messages)
    for n in range(start, start + rounds):
        question = zipf_text(rng, 10, 60) + rng.choice(["?", ""])  # some ask about the past
        messages.append(HumanMessage(question, id=f"u{n}_{rng.random()}"))
        messages.append(AIMessage(zipf_text(rng, 10, 60), id=f"a{n}_{rng.random()}"))


def messages_analysed(shared: str) -> tuple[int, int]:
    """The messages a trimmer analyses while the conversations grow by a round each in turn,
    and the messages added."""
    counter = CallCounting()
    trimmer = PriorityTrimmer(2000, token_counter=counter)
    conversations = branches(shared)
    for messages in conversations:
        trimmer.trim(messages)
    counter.asked = added = 0
    rng = random.Random(4)
    for _ in range(4):
        for messages in conversations:
            grow(rng, messages, 1)
            added += 2
            result = trimmer.trim(messages)
            assert wire(result) == fresh(messages, 2000)
    return counter.asked, added


def test_conversations_with_their_own_first_messages_are_analysed_once_per_message() -> None:
    analysed, added = messages_analysed("own_objects")
    assert analysed <= 2 * added


@pytest.mark.parametrize("shared", ["few_shot", "fork"])
def test_conversations_sharing_their_first_message_objects_are_analysed_once_per_message(
    shared: str,
) -> None:
    """Three conversations opening with the same system prompt and few-shot example objects
    (module constants), or three forks of one conversation, trimmed in turn by one trimmer:
    each trim should analyse only what its conversation added since its last trim, as with
    conversations that open with their own objects (the test above)."""
    analysed, added = messages_analysed(shared)
    assert analysed <= 2 * added


@pytest.mark.parametrize("shared", ["few_shot", "fork"])
def test_shared_openings_and_forks_edited_between_calls_are_trimmed_as_fresh_trimmers_trim(
    shared: str,
) -> None:
    """The conversations above, trimmed in turn by one trimmer while they grow, now and then
    with a message removed from the middle (LangGraph's ``RemoveMessage``) or replaced by an
    equal copy: every trim is a fresh trimmer's, fits or says it does not, sends no message
    twice and leaves the input as it was."""
    rng = random.Random(5)
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    conversations = branches(shared)
    rules: set[str] = set()
    for step in range(12):
        messages = conversations[step % 3]
        grow(rng, messages, 1)
        if step % 4 == 1:
            del messages[rng.randrange(5, len(messages) - 4)]
        elif step % 4 == 2:
            at = rng.randrange(3, len(messages))
            messages[at] = messages[at].model_copy()
        before = [m.model_dump() for m in messages]
        result = trimmer.trim(messages)
        assert wire(result) == fresh(messages, 2000)
        assert result.over_budget == (result.tokens_after > result.effective_budget)
        assert not result.over_budget
        sent = [m.id for m in result.messages]
        assert len(set(sent)) == len(sent)
        assert [m.model_dump() for m in messages] == before
        rules.update(d.rule for d in result.decisions)
    assert {"dropped_at_cut", "recalled"} <= rules


def test_many_conversations_sharing_their_opening_are_analysed_once_per_message() -> None:
    """Eight users of an agent whose system prompt and few-shot example are constants, trimmed
    in turn by one trimmer: each call analyses what its conversation added only."""
    counter = CallCounting()
    trimmer = PriorityTrimmer(2000, token_counter=counter)
    rng = random.Random(6)
    conversations: list[list[BaseMessage]] = []
    for _ in range(8):
        conversations.append([SYSTEM, *EXAMPLE])
        grow(rng, conversations[-1], 20)
        trimmer.trim(conversations[-1])
    counter.asked = added = 0
    for _ in range(3):
        for messages in conversations:
            grow(rng, messages, 1)
            added += 2
            assert wire(trimmer.trim(messages)) == fresh(messages, 2000)
    assert counter.asked <= 2 * added


def test_a_conversation_edited_in_place_on_every_call_leaves_the_others_remembered() -> None:
    """Sixteen conversations (as many as a trimmer remembers) in turn; one has a message edited
    in place before each of its calls. That one is analysed again from the edit; the others
    only for what they added (an edit is not a fork: it is not remembered as another
    conversation, which would push the others out)."""
    counter = CallCounting()
    trimmer = PriorityTrimmer(2000, token_counter=counter)
    rng = random.Random(7)
    conversations: list[list[BaseMessage]] = []
    for n in range(16):
        conversations.append([SystemMessage(f"You are assistant {n}."), HumanMessage(f"hi {n}")])
        grow(rng, conversations[-1], 20)
        trimmer.trim(conversations[-1])
    others = added = 0
    for step in range(4):
        for n, messages in enumerate(conversations):
            grow(rng, messages, 1)
            if n == 0:
                messages[6].content = f"edited {step}"
            before = counter.asked
            assert wire(trimmer.trim(messages)) == fresh(messages, 2000)
            if n:
                others += counter.asked - before
                added += 2
    assert others <= 2 * added


class _Attachment:
    """Something a user keeps in a content part (weak-referenceable, unlike str or dict; equal
    to its copies, so that the message reads as unchanged from call to call)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Attachment)

    __hash__ = object.__hash__


def test_a_fork_keeps_nothing_of_a_shared_message_that_is_gone() -> None:
    """Two forks of a conversation trimmed by one trimmer, then a shared message removed from
    both and gone: neither fork's memory holds its content after the next call."""
    trimmer = PriorityTrimmer(3000, token_counter=COUNTER)
    attachment = _Attachment()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    shared = HumanMessage([{"type": "text", "text": "look"}, {**image, "meta": attachment}])
    trunk: list[BaseMessage] = [SYSTEM, HumanMessage("first"), AIMessage("ok"), shared]
    forks = [[*trunk, AIMessage("seen"), HumanMessage(f"branch {n}?")] for n in range(2)]
    for messages in forks:
        trimmer.trim(messages)
    gone = weakref.ref(attachment)

    for messages in forks:
        del messages[3]
    del trunk, shared, attachment, image
    gc.collect()
    trimmer.trim([SystemMessage("another conversation"), HumanMessage("hi")])

    assert gone() is None


def test_the_quick_check_bounds_a_term_a_short_message_holds_many_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A term held ten times by a short message adds more to its score than one held once can
    (BM25 saturates the count, but not at once): the quick check bounds each term by the most
    times a message holds it, or it would leave out a message that reaches the statement's
    share (three of seven terms, each ten times, in a message far shorter than the others)."""
    rare = [f"zq{i}" for i in range(7)]
    filler = iter(f"f{i}" for i in range(100_000))
    chat: list[BaseMessage] = [SYSTEM]
    for r in range(60):
        said = " ".join(next(filler) for _ in range(100))
        if r == 2:
            said = " ".join(word for word in rare[:3] for _ in range(10))
        elif 3 <= r < 7:
            said = f"{said} {rare[r]}"
        chat += [HumanMessage(said), AIMessage(" ".join(next(filler) for _ in range(100)))]
    calls = [[*chat, HumanMessage(" ".join(rare))]]  # a statement: no question mark

    _, recalled = compare_with_full_scoring(calls, 1_500, monkeypatch)

    assert recalled == 1  # the message of three terms is recalled, with or without the check
