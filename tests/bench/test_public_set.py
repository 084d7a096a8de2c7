"""The public long-conversation QA set: the shipped LongMemEval subset and LoCoMo's format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_latency.bench import load_public_set

SHIPPED = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "longmemeval_s_20k.json.gz"

LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_2_date_time": "9:00 am on 2 May, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "The port is now 6543."},
                {"speaker": "Ana", "dia_id": "D2:2", "text": "Noted.", "blip_caption": "a cat"},
            ],
            "session_1_date_time": "1:56 pm on 1 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben!"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "The port is 5432."},
            ],
        },
        "qa": [
            {"question": "What is the port?", "answer": 6543, "evidence": ["D1:2; D2:1"]},
            {"question": "Unknown turn?", "answer": "x", "evidence": ["D9:9"]},
            {"question": "Adversarial?", "adversarial_answer": "y", "evidence": ["D1:1"]},
        ],
    }
]


def test_the_shipped_set_is_sixty_conversations_with_their_evidence_turns() -> None:
    conversations = load_public_set(SHIPPED)

    assert len(conversations) == 60
    assert len({c.id for c in conversations}) == 60
    categories = {q.category for c in conversations for q in c.questions}
    assert len(categories) == 6  # ten questions of each of LongMemEval's six types
    for conversation in conversations:
        ids = [m.id for m in conversation.messages]
        assert len(ids) == len(set(ids)) > 50
        assert {type(m) for m in conversation.messages} == {HumanMessage, AIMessage}
        (question,) = conversation.questions
        assert question.evidence and set(question.evidence) <= conversation.turn_ids()
        assert question.answer and question.text.startswith("[20")
        # Each session opens with its date, as a chat app shows a day separator.
        for message in conversation.messages:
            opens_session = str(message.id).endswith(":1")
            assert str(message.content).startswith("[20") == opens_session, message.id


def test_the_shipped_file_stays_small_and_the_folder_names_its_license() -> None:
    assert SHIPPED.stat().st_size < 3 * 1024 * 1024
    readme = (SHIPPED.parent / "README.md").read_text(encoding="utf-8")
    assert "MIT" in readme and "Di Wu" in readme and "LongMemEval" in readme


def test_locomo_turns_become_named_messages_with_their_dia_ids(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")

    (conversation,) = load_public_set(path)

    assert [m.id for m in conversation.messages] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert [type(m) for m in conversation.messages] == [
        HumanMessage,  # speaker_a is the user
        AIMessage,
        AIMessage,
        HumanMessage,
    ]
    assert conversation.messages[0].content == "[1:56 pm on 1 May, 2023]\nAna: Hi Ben!"
    assert (
        conversation.messages[2].content == "[9:00 am on 2 May, 2023]\nBen: The port is now 6543."
    )
    assert conversation.messages[3].content == "Ana: Noted. [shares a photo: a cat]"
    # "D1:2; D2:1" is two turns; an unknown turn or a missing answer leaves the question out.
    (question,) = conversation.questions
    assert (question.id, question.evidence, question.answer) == (
        "conv-x#0",
        ("D1:2", "D2:1"),
        "6543",
    )


def test_gzipped_and_plain_json_read_alike(tmp_path: Path) -> None:
    plain, packed = tmp_path / "a.json", tmp_path / "a.json.gz"
    plain.write_text(json.dumps(LOCOMO), encoding="utf-8")
    packed.write_bytes(gzip.compress(plain.read_bytes()))

    assert load_public_set(plain) == load_public_set(packed)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "not a JSON"),
        ("{}", "expected a list"),
        ('[{"question": "q"}]', "neither 'haystack_sessions'"),
        ('[{"conversation": {}, "qa": []}]', "lacks or misshapes the field"),
    ],
)
def test_a_bad_file_is_refused_naming_it(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ValueError, match=says) as error:
        load_public_set(path)
    assert str(path) in str(error.value)
