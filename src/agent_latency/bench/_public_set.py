"""A public long-conversation QA set with labelled evidence turns, as LangChain messages.

:func:`load_public_set` reads one of two formats, plain or gzipped JSON, and returns its
:class:`Conversation` objects:

- **LongMemEval** (Wu et al., ICLR 2025; MIT): a list of instances, each one question asked
  after its own chat history (``haystack_sessions``, the turns that hold the answer labelled
  ``has_answer``). The shipped ``benchmarks/data/longmemeval_s_20k.json.gz`` is in this format.
- **LoCoMo** (Maharana et al., ACL 2024; CC BY-NC 4.0, so not shipped here): a list of
  conversations between two people (``conversation`` with ``session_N`` lists of turns), each
  with its questions (``qa``: ``evidence`` turn ids). Questions without an ``answer`` field
  (LoCoMo's adversarial category 5) or without a known evidence turn are left out.

One message per turn. Roles: LongMemEval's ``user``/``assistant`` turns become
``HumanMessage``/``AIMessage``; in LoCoMo the first speaker (``speaker_a``) is the user and
the second the assistant, and each turn is prefixed with its speaker's name (``"Caroline: …"``,
as a group chat shows it) since both are people. Each session's date is the first line of the
session's first message, in brackets (``"[2023/05/20 (Sat) 02:21]"``), as a chat app shows
a day separator. Each message's ``id`` is its turn id (``"D3:7"``: session 3, turn 7, LoCoMo's
own ``dia_id``), so whether a strategy kept a turn can be read off what it sends: the trimmer's
shortened copies keep the ids.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

_GZIP_MAGIC = b"\x1f\x8b"
_LOCOMO_SESSION = re.compile(r"session_(\d+)")
_TURN_ID = re.compile(r"D\d+:\d+")


@dataclass(frozen=True)
class Question:
    """One question about a conversation.

    Attributes:
        id: The question's id (LongMemEval's ``question_id``, or ``"<conversation>#<n>"``).
        text: The question as the user asks it (with its date as the first line, if it has one).
        answer: The expected answer.
        evidence: The ids of the turns that hold the answer.
        category: The set's question type or category.
    """

    id: str
    text: str
    answer: str
    evidence: tuple[str, ...]
    category: str


@dataclass(frozen=True)
class Conversation:
    """One conversation, a message per turn, and the questions asked after it.

    Attributes:
        id: The conversation's id.
        messages: The turns in order, each message's ``id`` its turn id.
        questions: The questions asked after the whole conversation.
    """

    id: str
    messages: tuple[BaseMessage, ...]
    questions: tuple[Question, ...]

    def turn_ids(self) -> frozenset[str]:
        """The ids of the conversation's turns."""
        return frozenset(str(m.id) for m in self.messages)


def load_public_set(path: str | Path) -> list[Conversation]:
    """Reads a LongMemEval or LoCoMo file (JSON, gzipped or not) into conversations.

    Raises:
        ValueError: When the file is not JSON, or is neither format (naming the file and
            the item).
    """
    path = Path(path)
    raw = path.read_bytes()
    try:
        data = json.loads(gzip.decompress(raw) if raw[:2] == _GZIP_MAGIC else raw)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a JSON (or gzipped JSON) file: {error}") from None
    if not isinstance(data, list) or not data or not isinstance(data[0], Mapping):
        raise ValueError(
            f"{path}: expected a list of LongMemEval instances or LoCoMo conversations. "
            "Fix: pass longmemeval_s_20k.json.gz from benchmarks/data/ or LoCoMo's locomo10.json."
        )
    try:
        if "haystack_sessions" in data[0]:
            return [_longmemeval(item) for item in data]
        if "conversation" in data[0] and "qa" in data[0]:
            return [_locomo(item, index) for index, item in enumerate(data)]
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: an item lacks or misshapes the field {error}") from None
    raise ValueError(
        f"{path}: item 0 has neither 'haystack_sessions' (LongMemEval) nor 'conversation' and "
        "'qa' (LoCoMo). Fix: pass a file in one of these formats."
    )


def _dated(date: str | None, text: str) -> str:
    return f"[{date}]\n{text}" if date else text


def _longmemeval(item: Mapping[str, Any]) -> Conversation:
    messages: list[BaseMessage] = []
    evidence: list[str] = []
    for s, (date, session) in enumerate(
        zip(item["haystack_dates"], item["haystack_sessions"], strict=True), start=1
    ):
        for t, turn in enumerate(session, start=1):
            turn_id = f"D{s}:{t}"
            text = _dated(date if t == 1 else None, str(turn["content"]))
            kind = HumanMessage if turn["role"] == "user" else AIMessage
            messages.append(kind(content=text, id=turn_id))
            if turn.get("has_answer"):
                evidence.append(turn_id)
    question = Question(
        id=str(item["question_id"]),
        text=_dated(item.get("question_date"), str(item["question"])),
        answer=str(item["answer"]),
        evidence=tuple(evidence),
        category=str(item["question_type"]),
    )
    return Conversation(str(item["question_id"]), tuple(messages), (question,) if evidence else ())


def _locomo(item: Mapping[str, Any], index: int) -> Conversation:
    conversation = item["conversation"]
    user = conversation["speaker_a"]
    sessions = sorted(
        (int(match.group(1)), key)
        for key in conversation
        if (match := _LOCOMO_SESSION.fullmatch(key))
    )
    messages: list[BaseMessage] = []
    for number, key in sessions:
        date = conversation.get(f"{key}_date_time")
        for t, turn in enumerate(conversation[key]):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            kind = HumanMessage if turn["speaker"] == user else AIMessage
            turn_id = str(turn.get("dia_id") or f"D{number}:{t + 1}")
            messages.append(kind(content=_dated(date if t == 0 else None, text), id=turn_id))
    conversation_id = str(item.get("sample_id", f"conversation-{index}"))
    known = frozenset(str(m.id) for m in messages)
    questions = []
    for n, qa in enumerate(item["qa"]):
        evidence = _evidence_ids(qa.get("evidence", ()), known)
        if "answer" in qa and evidence:
            questions.append(
                Question(
                    id=f"{conversation_id}#{n}",
                    text=str(qa["question"]),
                    answer=str(qa["answer"]),
                    evidence=evidence,
                    category=str(qa.get("category", "")),
                )
            )
    return Conversation(conversation_id, tuple(messages), tuple(questions))


def _evidence_ids(evidence: Sequence[object], known: frozenset[str]) -> tuple[str, ...]:
    # LoCoMo writes a few as "D8:6; D9:17" or with stray characters: read every id in them.
    found = [turn for entry in evidence for turn in _TURN_ID.findall(str(entry))]
    return tuple(dict.fromkeys(t for t in found if t in known))
