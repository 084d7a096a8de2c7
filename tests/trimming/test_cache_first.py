"""Cache-first cuts: the prefix stays while the conversation grows, a correction beats what it
corrects, a question about the past gets its round back after the cached prefix, and two
trimmers (replicas) send the same request."""

from __future__ import annotations

import random
import statistics

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_latency.tokens import PromptCalibration, TokenCounter
from agent_latency.trimming import PriorityTrimmer

COUNTER = TokenCounter()
SYSTEM = SystemMessage("You are a helpful assistant. Answer briefly.")


def _chat(turns: int, seed: int = 1) -> list[BaseMessage]:
    """A chat of ``turns`` messages, user and assistant in turn, of Zipf-distributed words."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(3000)]
    weights = [1 / (i + 1) for i in range(3000)]
    messages: list[BaseMessage] = []
    for n in range(turns):
        text = " ".join(rng.choices(vocabulary, weights, k=rng.randint(10, 60)))
        messages.append(HumanMessage(text) if n % 2 == 0 else AIMessage(text))
    return messages


def _uncached_per_call(trimmer: PriorityTrimmer, chat: list[BaseMessage]) -> float:
    """Mean tokens per call after the longest run of messages the previous request began with
    (a one-slot prefix cache, at message granularity), the chat growing one round a call."""
    previous: list[BaseMessage] = []
    uncached = []
    for end in range(1, len(chat) + 1, 2):
        sent = trimmer.trim([SYSTEM, *chat[:end]]).messages
        shared = 0
        for now, then in zip(sent, previous, strict=False):
            if now is not then:
                break
            shared += 1
        uncached.append(sum(map(COUNTER.count_message, sent[shared:])))
        previous = sent
    return statistics.mean(uncached)


@pytest.mark.parametrize("budget", [2000, 4000])
def test_a_growing_chat_reprefills_less_than_the_age_cut(budget: int) -> None:
    chat = _chat(400)
    cache_first = _uncached_per_call(PriorityTrimmer(budget, token_counter=COUNTER), chat)
    age = _uncached_per_call(
        PriorityTrimmer(budget, token_counter=COUNTER, history_selection="age"), chat
    )
    moving = _uncached_per_call(
        PriorityTrimmer(budget, token_counter=COUNTER, prefix_stable=False), chat
    )
    # Words drawn at random: nearly every turn shares a rare word with a left-out one, so
    # recall runs far more often than in a real chat; still well under both the age cut and
    # moving cuts that rank the history by relevance on every call (what the removed
    # history_selection="relevance" did too): about 8x and 15x the default's uncached tokens.
    assert cache_first <= 0.9 * age
    assert cache_first <= 0.4 * moving


def test_the_cut_stays_put_between_deep_cuts() -> None:
    """Between two cuts each request is the previous one plus the new messages."""
    chat = _chat(300)
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    previous: list[BaseMessage] = []
    calls = cuts = 0
    for end in range(1, len(chat) + 1, 2):
        result = trimmer.trim([SYSTEM, *chat[:end]])
        assert result.tokens_after <= 2000
        sent = result.messages
        shared = next(
            (i for i, (a, b) in enumerate(zip(sent, previous, strict=False)) if a is not b),
            min(len(sent), len(previous)),
        )
        calls += 1
        # The chat's turns ask nothing (no question mark), so nothing is recalled: a request
        # that does not begin with the whole previous one is a cut, which keeps only the system
        # message, the head round and the small stable part of it.
        if shared < len(previous):
            assert shared <= len(previous) / 2
            cuts += 1
        previous = sent
    assert cuts >= 3  # the chat grew far past the budget
    # An epoch is a fifth of the room, three to four rounds of this chat: a cut every third
    # call at most; every other call sends the previous request and what is new.
    assert cuts <= calls / 2.5


def test_two_trimmers_send_the_same_request() -> None:
    """Derived from the messages alone: a second replica with no shared state agrees."""
    chat = _chat(200, seed=7)
    first = PriorityTrimmer(1500, token_counter=COUNTER)
    for end in range(1, len(chat) + 1, 2):
        first.trim([SYSTEM, *chat[:end]])  # the first replica saw the whole conversation
    second = PriorityTrimmer(1500, token_counter=TokenCounter())
    conversation = [SYSTEM, *chat]
    conversation.append(HumanMessage("and then?"))
    assert [m.content for m in first.trim(conversation).messages] == [
        m.content for m in second.trim(conversation).messages
    ]


def _corrected_port_chat() -> list[BaseMessage]:
    messages: list[BaseMessage] = [SYSTEM]
    for n in range(20):
        if n == 4:
            user = "The database port is 5432."
        elif n == 15:
            user = "Correction: the database port is now 6543, we moved it."
        else:
            user = f"Round {n}: please tidy the changelog entry number {n} for the release notes."
        messages += [HumanMessage(user), AIMessage(f"Done with item {n}; noted.")]
    messages.append(HumanMessage("What is the database port?"))
    return messages


@pytest.mark.parametrize("budget", range(200, 560, 10))
def test_a_correction_is_never_sent_without_what_it_corrects_being_newer(budget: int) -> None:
    """The old port is never sent without the correction, at any budget."""
    result = PriorityTrimmer(budget, token_counter=COUNTER).trim(_corrected_port_chat())
    sent = " ".join(str(m.content) for m in result.messages)
    assert "6543" in sent or "5432" not in sent
    assert result.tokens_after <= budget


def test_a_question_about_the_past_recalls_its_round_after_the_cached_prefix() -> None:
    chat = _chat(300, seed=3)
    fact = HumanMessage("Remember: the vault combination for the Zanzibar office is 7-19-44.")
    answer = AIMessage("Noted, the Zanzibar vault combination is stored.")
    conversation: list[BaseMessage] = [SYSTEM, *chat[:20], fact, answer, *chat[20:]]
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    before = trimmer.trim([*conversation, HumanMessage("ok, thanks")])
    assert fact not in before.messages  # the fact's round was left out at the cut
    question = HumanMessage("What is the Zanzibar vault combination again?")
    result = trimmer.trim([*conversation, question])
    sent = result.messages
    assert result.tokens_after <= 2000
    assert sent[-1] is question and fact in sent and answer in sent
    # The recalled rounds come last, after every message the previous request sent, which
    # stay where they were: the cached prefix does not move.
    asked = [*conversation, question]
    recalled = [asked[d.index] for d in result.decisions if d.rule == "recalled"]
    assert fact in recalled and answer in recalled
    first = sent.index(recalled[0])
    assert sent[first:-1] == recalled
    assert sent[:first] == before.messages[:first]


def test_a_statement_recalls_only_what_it_plainly_speaks_of() -> None:
    """Turns that ask nothing (no question mark) go on with the conversation: a few words in
    common with a left-out round bring nothing back, while the same words asked do."""
    chat = _chat(300, seed=3)
    fact = HumanMessage("Remember: the vault combination for the Zanzibar office is 7-19-44.")
    answer = AIMessage("Noted, the Zanzibar vault combination is stored.")
    conversation: list[BaseMessage] = [SYSTEM, *chat[:20], fact, answer, *chat[20:]]
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)

    def recalled(text: str) -> bool:
        result = trimmer.trim([*conversation, HumanMessage(text)])
        return any(d.rule == "recalled" for d in result.decisions)

    talk = "I walked past the Zanzibar office garden yesterday evening"
    assert not recalled(talk)
    assert recalled(talk + "?")
    assert recalled(talk + "\uff1f")  # the full-width question mark of Chinese and Japanese
    assert recalled("Read me the Zanzibar vault combination.")  # speaks plainly of it


def test_small_talk_recalls_nothing() -> None:
    chat = _chat(300, seed=3)
    trimmer = PriorityTrimmer(2000, token_counter=COUNTER)
    result = trimmer.trim([SYSTEM, *chat, HumanMessage("ok, thanks, sounds good")])
    assert all(d.rule != "recalled" for d in result.decisions)


def test_a_tool_result_shortened_then_dropped_is_not_counted_as_shortened() -> None:
    from langchain_core.messages import ToolMessage

    big = "row " * 800
    messages: list[BaseMessage] = [SYSTEM]
    for n in range(6):
        call = AIMessage("", tool_calls=[{"name": "query", "args": {"n": n}, "id": f"c{n}"}])
        messages += [
            HumanMessage(f"Query {n}, please."),
            call,
            ToolMessage(big, tool_call_id=f"c{n}"),
        ]
        messages.append(AIMessage(f"Result {n} has many rows."))
    messages.append(HumanMessage("Thanks, that is all."))
    result = PriorityTrimmer(1500, token_counter=COUNTER).trim(messages)
    sent_shortened = [d for d in result.decisions if d.action == "shortened"]
    assert result.shortened_messages == len(sent_shortened)
    assert any(
        d.action == "dropped" and isinstance(messages[d.index], ToolMessage)
        for d in result.decisions
    )


def test_every_round_a_question_needs_comes_before_the_long_turns_around_them() -> None:
    """Where turns are long, the neighbours of one relevant round would fill the room: every
    relevant round is sent first, and the dear neighbours only with the room left."""
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(3000)]
    facts = {
        6: "My sister Alba moved to Zanzibar last spring.",
        20: "My cousin Bruno now lives in Reykjavik.",
        34: "My uncle Carlo settled in Valparaiso.",
    }
    conversation: list[BaseMessage] = [SYSTEM]
    for r in range(40):
        said = facts.get(r, " ".join(rng.choices(vocabulary, k=40)))
        conversation += [HumanMessage(said), AIMessage(" ".join(rng.choices(vocabulary, k=220)))]
    question = HumanMessage("Where do my sister Alba, my cousin Bruno and my uncle Carlo live?")
    result = PriorityTrimmer(2000, token_counter=COUNTER).trim([*conversation, question])
    sent = " ".join(str(m.content) for m in result.messages)
    assert all(fact in sent for fact in facts.values())
    assert result.tokens_after <= 2000


def _calibrated(factor: float) -> PromptCalibration:
    calibration = PromptCalibration()
    for _ in range(64):
        calibration.observe(1000, round(1000 * factor))
    return calibration


def test_replicas_that_learnt_other_calibrations_send_the_same_cut() -> None:
    """The epochs are drawn on the budget as configured, not on each replica's calibrated one
    (nor on what the recall marker's reserve leaves): replicas cut at the same rounds."""
    chat = _chat(240, seed=7)  # statements: nothing is recalled
    hooks = [
        PriorityTrimmer(2000, token_counter=COUNTER, calibration=_calibrated(f)).as_pre_model_hook()
        for f in (1.0, 1.15)
    ]
    assert hooks[1].trimmer.options.calibration.factor > 1.1
    cuts = 0
    for end in range(1, len(chat) + 1, 2):
        sent = [hook({"messages": [SYSTEM, *chat[:end]]})["llm_input_messages"] for hook in hooks]
        if len(sent[0]) < end + 1:  # a cut (the plain one sends everything while it fits)
            cuts += 1
            assert sent[0] == sent[1], end
    assert cuts > 50


def test_a_cut_at_the_current_turn_is_decided_as_the_next_call_decides_it() -> None:
    """When the history ends exactly on an epoch, the cut falls at the current turn: its stable
    part is scored by the messages before that turn, as the next call (a replica that did not
    see this one) scores it, not by the current turn too."""
    words = [
        "shelf",
        "paint",
        "river",
        "stone",
        "cloud",
        "maple",
        "cedar",
        "lamp",
        "chair",
        "quartz",
    ]

    def filler(n: int, k: int = 0) -> str:
        return " ".join(words[(i + k) % len(words)] for i in range(n))

    chat: list[BaseMessage] = [SystemMessage("You are helpful.")]
    chat += [HumanMessage("violin " + filler(148)), AIMessage("noted " + filler(60, 1))]
    chat += [HumanMessage("garden " + filler(100, 2)), AIMessage("noted " + filler(60, 3))]
    chat += [HumanMessage("garden party " + filler(30, 4)), AIMessage("ok " + filler(30, 5))]
    for i in range(8):
        chat += [HumanMessage(f"t{i} " + filler(120, i)), AIMessage("ok " + filler(100, i + 1))]
    chat += [HumanMessage("pad " + filler(663)), AIMessage("ok"), HumanMessage("violin garden?")]
    options = {"history_keep_head": 0, "history_keep_tail": 0}
    warm = PriorityTrimmer(3000, token_counter=COUNTER, **options)
    warm.trim(chat)
    following = [*chat, AIMessage("sure"), HumanMessage("thanks")]
    fresh = PriorityTrimmer(3000, token_counter=COUNTER, **options).trim(following)
    assert warm.trim(following).messages == fresh.messages
