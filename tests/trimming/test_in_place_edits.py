"""A reused trimmer decides exactly as a new one, whatever its users do between two calls.

Each test trims with one trimmer, does what a LangChain or LangGraph user does between model
calls (edits a message in place, sends another conversation, shrinks it, trims from threads),
and compares the reused trimmer's result with a new trimmer and counter that remember nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool

from agent_latency.tokens import TokenCounter
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

Messages = list[BaseMessage]


def wire(message: BaseMessage) -> tuple[object, ...]:
    """What is sent of a message (a shortened copy included)."""
    return (
        type(message).__name__,
        message.content,
        message.name,
        getattr(message, "tool_call_id", None),
        getattr(message, "tool_calls", None),
        getattr(message, "role", None),
    )


def figures(trim: TrimResult, inputs: Messages) -> dict[str, Any]:
    """Everything a trim decided; kept messages by input position, copies by what they send."""
    position = {id(m): i for i, m in enumerate(inputs)}
    return {
        "messages": [position.get(id(m), wire(m)) for m in trim.messages],
        "sent": [wire(m) for m in trim.messages],
        "decisions": trim.decisions,
        "tokens_before": trim.tokens_before,
        "tokens_after": trim.tokens_after,
        "over_budget": trim.over_budget,
        "dropped": trim.dropped_messages,
        "shortened": trim.shortened_messages,
        "framing": trim.framing_tokens,
        "must_keep": trim.must_keep_tokens,
        "tool_tokens": trim.tool_tokens,
        "dropped_tools": trim.dropped_tools,
        "question_retention": trim.question_retention,
    }


def fresh(messages: Messages, budget: int, **options: Any) -> dict[str, Any]:
    trimmer = PriorityTrimmer(budget, token_counter=TokenCounter(), **options)
    return figures(trimmer.trim(messages), messages)


def reused_then_fresh(
    make: Callable[[], Messages],
    edit: Callable[[Messages], Messages | None],
    budget: int,
    **options: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trims, edits, trims again with the same trimmer; returns that and a new trimmer's trim."""
    messages = make()
    trimmer = PriorityTrimmer(budget, **options)
    trimmer.trim(messages)
    messages = edit(messages) or messages
    return figures(trimmer.trim(messages), messages), fresh(messages, budget, **options)


def calls(*ids: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "search", "args": dict(args), "id": i} for i in ids])


def agent_turns(list_results: bool = False, rounds: int = 5) -> Messages:
    """A system prompt and rounds of question, tool call, large result and answer."""
    messages: Messages = [SystemMessage("You answer questions about the Lyra warehouse.")]
    for n in range(rounds):
        text = f"result {n} " + "door billing " * 100
        content: Any = [{"type": "text", "text": text}] if list_results else text
        messages += [
            HumanMessage(f"Question {n} about the door code and billing."),
            calls(f"c{n}", q=f"door {n}"),
            ToolMessage(content, tool_call_id=f"c{n}"),
            AIMessage(f"Answer {n}: the code is {n}{n}{n}."),
        ]
    return messages


def latest_result_turn(list_result: bool = False) -> Messages:
    """A finished round, then a question whose tool result is far above the budget."""
    text = "door " * 400
    content: Any = [{"type": "text", "text": text}] if list_result else text
    return [
        SystemMessage("sys"),
        HumanMessage("first question about the door"),
        AIMessage("first answer"),
        HumanMessage("next question about the door"),
        calls("a"),
        ToolMessage(content, tool_call_id="a"),
    ]


# --- Edits each cache once missed (the shortener's and the compactor's copies, the tools'
# counts), and input an edit in place can spoil. ---------------------------------------------


def _rename_call(messages: Messages) -> None:
    messages[4].tool_calls[0]["id"] = "b"  # type: ignore[attr-defined]
    messages[5].tool_call_id = "b"  # type: ignore[attr-defined]


def _rename_tool(messages: Messages) -> None:
    messages[5].name = "search_v2"


def _edit_text_part(messages: Messages) -> None:
    messages[5].content[0]["text"] = "window " * 400  # type: ignore[index]


SHORTENER_EDITS = {
    "tool_call_id of call and result edited in place": (_rename_call, False),
    "name edited in place": (_rename_tool, False),
    "text part edited in place": (_edit_text_part, True),
}


@pytest.mark.parametrize(("edit", "list_result"), SHORTENER_EDITS.values(), ids=SHORTENER_EDITS)
def test_a_capped_tool_result_is_shortened_from_the_message_as_it_is_now(
    edit: Callable[[Messages], None], list_result: bool
) -> None:
    # MessageShortener remembers copies by (id, target) and checks only that the content is the
    # same object: a copy of the message as it was is sent (an old tool_call_id: HTTP 400).
    reused, new = reused_then_fresh(
        lambda: latest_result_turn(list_result), edit, 300, max_tool_result_tokens=50
    )
    assert reused["sent"] == new["sent"]
    assert reused == new


def test_a_must_keep_question_is_shortened_from_the_message_as_it_is_now() -> None:
    def make() -> Messages:
        return [SystemMessage("sys"), HumanMessage([{"type": "text", "text": "door " * 600}])]

    def edit(messages: Messages) -> None:
        messages[1].content[0]["text"] = "window " * 600  # type: ignore[index]

    reused, new = reused_then_fresh(make, edit, 200)
    assert reused["sent"] == new["sent"]


def _rename_first_call(messages: Messages) -> None:
    messages[2].tool_calls[0]["id"] = "renamed"  # type: ignore[attr-defined]
    messages[3].tool_call_id = "renamed"  # type: ignore[attr-defined]


def _edit_first_result(messages: Messages) -> None:
    messages[3].content[0]["text"] = "completely different words here " * 50  # type: ignore[index]


COMPACTOR_EDITS = {
    "tool_call_id of call and result edited in place": _rename_first_call,
    "text part edited in place": _edit_first_result,
}


@pytest.mark.parametrize("edit", COMPACTOR_EDITS.values(), ids=COMPACTOR_EDITS)
def test_a_compacted_tool_result_is_stubbed_from_the_message_as_it_is_now(
    edit: Callable[[Messages], None],
) -> None:
    # Compactor remembers stubs by id(message) and checks only the content object's identity.
    reused, new = reused_then_fresh(
        lambda: agent_turns(list_results=True, rounds=6), edit, 900, compact_tool_results=True
    )
    assert reused["sent"] == new["sent"]
    assert reused == new


RETYPED = {
    "int argument becomes float": ("limit", 1, 1.0),
    "int argument becomes bool": ("limit", 0, False),
}


@pytest.mark.parametrize(("key", "before", "after"), RETYPED.values(), ids=RETYPED)
def test_a_tool_call_argument_retyped_in_place_is_off_by_the_documented_tokens(
    key: str, before: object, after: object
) -> None:
    # A known limit (docs/reliability.md, agent_latency._caches.stamp): 1 == 1.0 and 0 == False,
    # so the deep copy compares equal while the JSON sent differs ("1.0", "false"). Telling them
    # apart (a repr per message with tool calls) costs more than the whole warm trim's margin.
    # The count stays at most two tokens per retyped value off, and a new message object (what
    # LangGraph's reducers make) is counted exactly.
    def make() -> Messages:
        return [HumanMessage("how many?"), calls("a", **{key: before, "flag": before})]

    def edit(messages: Messages) -> None:
        messages[1].tool_calls[0]["args"].update({key: after, "flag": after})  # type: ignore[attr-defined]

    messages = make()
    trimmer = PriorityTrimmer(3000)
    trimmer.trim(messages)
    edit(messages)
    reused, new = figures(trimmer.trim(messages), messages), fresh(messages, 3000)
    assert abs(reused["tokens_before"] - new["tokens_before"]) <= 2 * 2
    assert reused["messages"] == new["messages"]

    messages[1] = messages[1].model_copy()
    assert figures(trimmer.trim(messages), messages) == fresh(messages, 3000)


class _Attachment:
    """Something a user keeps in a content part (weak-referenceable, unlike str or dict)."""


@pytest.mark.parametrize("words", [200, 4000], ids=["kept whole", "shortened"])
def test_the_trimmer_keeps_nothing_of_a_conversation_whose_messages_are_gone(words: int) -> None:
    # The conversation cache held each message's content object and deep copies of list
    # content (base64 images) strongly, for up to 16 conversations after the messages died; the
    # shortener's copies keep the image parts. A weakref callback can run while a lock is held:
    # it only notes what died, which the trimmer's next call lets go of.
    trimmer = PriorityTrimmer(3000)
    attachment = _Attachment()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    result = [{"type": "text", "text": "door " * words}, {**image, "meta": attachment}]
    messages: Messages = [
        SystemMessage("sys"),
        HumanMessage([{"type": "text", "text": "what is this?"}, {**image, "meta": attachment}]),
        calls("a"),
        ToolMessage(result, tool_call_id="a"),
    ]
    assert trimmer.trim(messages).shortened_messages == (words > 1000)
    gone = weakref.ref(attachment)

    del messages, attachment, image, result
    gc.collect()
    trimmer.trim([SystemMessage("another conversation"), HumanMessage("hi")])

    assert gone() is None


def test_content_set_to_null_in_place_is_trimmed_or_named() -> None:
    # coerce_messages accepts null content on a message; the conversation cache now takes every
    # message's text, and LangChain's .text raises TypeError on None (a trim of this worked
    # before the cache).
    silent = HumanMessage("earlier question")
    silent.content = None  # type: ignore[assignment]
    messages: Messages = [SystemMessage("sys"), silent, AIMessage("ok"), HumanMessage("now?")]
    try:
        PriorityTrimmer(3000).trim(messages)
    except (TypeError, ValueError) as exc:
        assert "Message 1" in str(exc)


@pytest.mark.parametrize("warm", [False, True], ids=["new trimmer", "after a trim"])
def test_an_answer_whose_additional_kwargs_were_deleted_is_trimmed(warm: bool) -> None:
    # The edit check holds an answer's empty additional_kwargs with its empty calls: a message
    # whose __dict__ lost the field (deleted in place) made the analysis raise KeyError.
    answer = AIMessage("ok")
    messages: Messages = [
        SystemMessage("sys"),
        HumanMessage("question?"),
        answer,
        HumanMessage("now?"),
    ]
    trimmer = PriorityTrimmer(3000)
    if warm:
        trimmer.trim(messages)
    del answer.__dict__["additional_kwargs"]

    assert (
        trimmer.trim(messages).messages == PriorityTrimmer(3000).trim(messages).messages == messages
    )


def _calls_set_to_none(message: AIMessage) -> None:
    message.tool_calls = None  # type: ignore[assignment]


def _call_without_id(message: AIMessage) -> None:
    message.tool_calls = [{"name": "search", "args": {}}]  # type: ignore[typeddict-item]


def _invalid_calls_set_to_none(message: AIMessage) -> None:
    message.invalid_tool_calls = None  # type: ignore[assignment]


def _call_not_a_dict(message: AIMessage) -> None:
    message.tool_calls.append("search")  # type: ignore[arg-type]


def _calls_deleted(message: AIMessage) -> None:
    del message.__dict__["tool_calls"]


def _invalid_calls_deleted(message: AIMessage) -> None:
    del message.__dict__["invalid_tool_calls"]


ODD_CALLS = {
    "tool_calls set to None": _calls_set_to_none,
    "a call without id": _call_without_id,
    "invalid_tool_calls set to None": _invalid_calls_set_to_none,
    "a call that is not a dict": _call_not_a_dict,
    "tool_calls deleted": _calls_deleted,
    "invalid_tool_calls deleted": _invalid_calls_deleted,
}


@pytest.mark.parametrize("warm", [False, True], ids=["new trimmer", "after a trim"])
@pytest.mark.parametrize("spoil", ODD_CALLS.values(), ids=ODD_CALLS)
def test_tool_calls_spoiled_in_place_give_an_error_naming_the_message(
    spoil: Callable[[AIMessage], None], warm: bool
) -> None:
    call = calls("a")
    trimmer = PriorityTrimmer(3000)
    if warm:  # the message is remembered as it was: the edit must still be found
        trimmer.trim([HumanMessage("q"), call])
    spoil(call)
    with pytest.raises(ValueError, match=r"Message 1 \(ai\).*Fix: "):
        trimmer.trim([HumanMessage("q"), call])


@tool
def lookup(query: str) -> str:
    """Look something up in the warehouse."""
    return query


def test_tools_edited_in_place_are_counted_and_selected_as_they_are_now() -> None:
    # ExtrasCounter remembers tool counts by the tools' identity: a description edited in place
    # (a wire dict's or a LangChain tool's) keeps the old count and the old selection.
    door = {
        "type": "function",
        "function": {"name": "door", "description": "Open the door.", "parameters": {}},
    }
    messages: Messages = [SystemMessage("s"), HumanMessage("door billing question")]
    original = lookup.description
    try:
        for budget in (None, 40):
            options: dict[str, Any] = {"tools": [lookup, door], "tool_budget": budget}
            trimmer = PriorityTrimmer(3000, **options)
            trimmer.trim(messages)
            door["function"]["description"] = "Opens it " * 20  # type: ignore[index]
            lookup.description = "Search the warehouse for anything, by long query " * 10

            assert figures(trimmer.trim(messages), messages) == fresh(messages, 3000, **options)
            door["function"]["description"] = "Open the door."  # type: ignore[index]
            lookup.description = original
    finally:
        lookup.description = original


def test_a_response_format_edited_in_place_is_counted_as_it_is_now() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    messages: Messages = [SystemMessage("s"), HumanMessage("door billing question")]
    trimmer = PriorityTrimmer(3000, response_format=response_format)
    before = trimmer.trim(messages).tokens_before
    schema["properties"]["reason"] = {"type": "string", "description": "Why, in a sentence."}

    again = figures(trimmer.trim(messages), messages)
    assert again == fresh(messages, 3000, response_format=response_format)
    assert again["tokens_before"] > before


# --- What held: these pass now and lock the behaviour in. ------------------------------------


def _chat_role(messages: Messages) -> None:
    messages[-1].role = "assistant"  # type: ignore[attr-defined]


def _invalid_call_id(messages: Messages) -> None:
    messages[2].invalid_tool_calls[0]["id"] = "nothing"  # type: ignore[attr-defined]


def _invalid_call_args(messages: Messages) -> None:
    messages[2].invalid_tool_calls[0]["args"] = "{broken " * 40  # type: ignore[attr-defined]


def _image_part(messages: Messages) -> None:
    messages[1].content[1]["image_url"]["detail"] = "high"  # type: ignore[index]


def _tool_use_input(messages: Messages) -> None:
    messages[4].content[1]["input"]["q"] = "door " * 40  # type: ignore[index]


def _metadata(messages: Messages) -> None:
    messages[4].response_metadata["model_name"] = "other"
    messages[4].additional_kwargs["tool_calls"] = [{"id": "zz", "function": {"arguments": "{}"}}]


def _call_name(messages: Messages) -> None:
    messages[4].tool_calls[0]["name"] = "a_much_longer_tool_name_" * 4  # type: ignore[attr-defined]


def _append_part(messages: Messages) -> None:
    messages[1].content.append({"type": "text", "text": "door " * 50})  # type: ignore[union-attr]


def _name(messages: Messages) -> None:
    messages[3].name = "alice"


def _swap(messages: Messages) -> Messages:
    return [*messages[:3], messages[4], messages[3], *messages[5:]]


def _remove_message(messages: Messages) -> Messages:
    # What LangGraph's add_messages leaves after a RemoveMessage of the answer.
    return messages[:3] + messages[4:]


def _summarize(messages: Messages) -> Messages:
    return [SystemMessage("Summary: questions about the door."), *messages[-3:]]


def kinds_of_messages() -> Messages:
    return [
        SystemMessage("You answer questions about the Lyra warehouse."),
        HumanMessage(
            [
                {"type": "text", "text": "What is on this door?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
            name="bob",
        ),
        AIMessage(
            "",
            invalid_tool_calls=[
                {
                    "name": "search",
                    "args": "{bad",
                    "id": "bad",
                    "error": None,
                    "type": "invalid_tool_call",
                }
            ],
        ),
        ChatMessage(role="user", content="Please look it up again."),
        AIMessage(
            [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "tu", "name": "search", "input": {"q": "door"}},
            ],
            tool_calls=[{"name": "search", "args": {"q": "door"}, "id": "tu"}],
        ),
        ToolMessage(
            [{"type": "tool_result", "tool_use_id": "tu", "content": "door " * 80}],
            tool_call_id="tu",
        ),
        AIMessage("The door code is 123."),
        ChatMessage(role="user", content="And billing?"),
    ]


HELD: dict[str, Callable[[Messages], Messages | None]] = {
    "ChatMessage role edited in place": _chat_role,
    "invalid tool call id edited in place": _invalid_call_id,
    "invalid tool call args edited in place": _invalid_call_args,
    "image part edited in place": _image_part,
    "Anthropic tool_use input edited in place": _tool_use_input,
    "response_metadata and additional_kwargs edited in place": _metadata,
    "tool call name edited in place": _call_name,
    "content part appended in place": _append_part,
    "name set": _name,
    "same messages in another order": _swap,
    "a message removed (RemoveMessage)": _remove_message,
    "history summarized": _summarize,
}


@pytest.mark.parametrize("budget", [120, 3000])
@pytest.mark.parametrize("edit", HELD.values(), ids=HELD)
def test_a_reused_trimmer_follows_edits_of_every_kind_of_message(
    edit: Callable[[Messages], Messages | None], budget: int
) -> None:
    reused, new = reused_then_fresh(kinds_of_messages, edit, budget, history_keep_head=0)
    assert reused == new


def test_openai_dicts_converted_anew_on_every_call_are_trimmed_alike() -> None:
    # New message objects on every call: their ids may be those of the last call's, now gone.
    dicts = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "door question", "name": "bob"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{bad"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "door " * 200},
        {"role": "user", "content": "and now?"},
    ]
    trimmer = PriorityTrimmer(150)
    for step in range(4):
        dicts[3]["content"] = "door " * (200 + 50 * step)
        result = trimmer.trim(dicts)
        expected = PriorityTrimmer(150, token_counter=TokenCounter()).trim(dicts)
        assert result.decisions == expected.decisions
        assert [wire(m) for m in result.messages] == [wire(m) for m in expected.messages]


def test_a_message_shared_by_two_conversations_is_judged_in_each() -> None:
    # The same ToolMessage answers a call in one conversation and is an orphan in the other.
    system, result = SystemMessage("sys"), ToolMessage("door " * 50, tool_call_id="c")
    first: Messages = [system, HumanMessage("q1"), calls("c"), result]
    second: Messages = [system, HumanMessage("q2"), AIMessage("no calls"), result]
    trimmer = PriorityTrimmer(3000)
    for messages in (first, second, first, second):
        assert figures(trimmer.trim(messages), messages) == fresh(messages, 3000)


def test_conversations_sharing_their_first_messages_are_told_apart() -> None:
    system, greeting = SystemMessage("sys"), HumanMessage("hello door")
    conversations = [[system, greeting, AIMessage(f"answer {n} " * (n + 1))] for n in range(3)]
    trimmer = PriorityTrimmer(40)
    for _ in range(3):
        for messages in conversations:
            messages.append(HumanMessage("billing " * len(messages)))
            assert figures(trimmer.trim(messages), messages) == fresh(messages, 40)


def test_more_conversations_than_remembered_interleave_correctly() -> None:
    rng = random.Random(3)
    conversations = [agent_turns(rounds=1) for _ in range(20)]
    # Moving cuts: the history is ranked by relevance on every call.
    trimmer = PriorityTrimmer(500, prefix_stable=False, history_keep_head=0)
    for _ in range(50):
        messages = rng.choice(conversations)
        messages.append(rng.choice([HumanMessage("door " * rng.randrange(1, 30)), AIMessage("ok")]))
        if rng.random() < 0.3:
            messages.pop(rng.randrange(1, len(messages)))
        expected = fresh(messages, 500, prefix_stable=False, history_keep_head=0)
        assert figures(trimmer.trim(messages), messages) == expected


OPTIONS = {
    "cache_first": {},
    "age": {"history_selection": "age"},
    "ranked by relevance": {"prefix_stable": False, "history_keep_head": 0},
    "compaction": {"compact_tool_results": True},
    "tool result cap": {"max_tool_result_tokens": 60},
    "tool budget": {"tools": [lookup], "tool_budget": 20},
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS)
def test_a_growing_shrinking_agent_loop_is_trimmed_alike_with_each_option(
    options: dict[str, Any],
) -> None:
    rng = random.Random(7)
    messages = agent_turns(rounds=2)
    trimmer = PriorityTrimmer(700, **options)
    for n in range(12):
        messages += [
            HumanMessage(f"Question {n} about billing"),
            calls(f"x{n}"),
            ToolMessage("door " * 60, tool_call_id=f"x{n}"),
        ]
        if rng.random() < 0.3:
            del messages[1 : 1 + 4]  # the oldest round leaves (LangGraph RemoveMessage)
        assert figures(trimmer.trim(messages), messages) == fresh(messages, 700, **options)


def test_a_conversation_shrinking_to_nothing_and_growing_again() -> None:
    messages = agent_turns(rounds=2)
    trimmer = PriorityTrimmer(200)
    for cut in (len(messages), 5, 1, 0, 3, len(messages)):
        part = messages[:cut]
        assert figures(trimmer.trim(part), part) == fresh(part, 200)


def test_threads_trimming_conversations_with_shared_first_messages_decide_alike() -> None:
    system, greeting = SystemMessage("You are the Lyra agent."), HumanMessage("hello door billing")
    # Moving cuts: every call ranks the history by relevance, through the shared score cache.
    options: dict[str, Any] = {"prefix_stable": False, "max_tool_result_tokens": 60}
    trimmer = PriorityTrimmer(300, **options)
    failures: list[str] = []

    def agent(seed: int) -> None:
        rng = random.Random(seed)
        tail: Messages = []
        for step in range(25):
            call_id = f"t{seed}_{step}"
            tail += [HumanMessage("door " * rng.randrange(1, 20)), calls(call_id)]
            tail.append(ToolMessage("billing " * rng.randrange(1, 120), tool_call_id=call_id))
            if rng.random() < 0.2:
                del tail[: rng.randrange(len(tail))]
            messages = [system, greeting, *tail]
            if figures(trimmer.trim(messages), messages) != fresh(messages, 300, **options):
                failures.append(f"agent {seed}, step {step}")

    threads = [threading.Thread(target=agent, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


async def test_ainvoke_of_a_reused_trimmer_returns_what_a_new_one_returns() -> None:
    trimmer = PriorityTrimmer(400)
    conversations = [agent_turns(rounds=r) for r in (2, 3)]
    for _ in range(2):
        results = await asyncio.gather(*(trimmer.ainvoke(m) for m in conversations))
        for messages, got in zip(conversations, results, strict=True):
            expected = PriorityTrimmer(400, token_counter=TokenCounter()).trim(messages).messages
            assert [wire(m) for m in got] == [wire(m) for m in expected]
            messages.append(HumanMessage("door " * 30))


def test_the_trimmer_keeps_no_message_alive() -> None:
    trimmer = PriorityTrimmer(300, compact_tool_results=True)
    messages = agent_turns(list_results=True)
    trimmer.trim(messages)
    trimmer.trim(messages[:7])
    gone = [weakref.ref(m) for m in messages]

    del messages
    gc.collect()

    assert [ref() for ref in gone] == [None] * len(gone)


def test_content_that_cannot_be_copied_is_still_followed_when_edited() -> None:
    # A lock in a part cannot be deep-copied: nothing is remembered, and edits are still seen.
    def make() -> Messages:
        part = {"type": "text", "text": "door " * 100, "lock": threading.Lock()}
        return [SystemMessage("sys"), HumanMessage([part]), AIMessage("ok"), HumanMessage("q")]

    def edit(messages: Messages) -> None:
        messages[1].content[0]["text"] = "door " * 10  # type: ignore[index]

    reused, new = reused_then_fresh(make, edit, 60)
    assert reused == new


ODD = {
    # ("user", "hi") is a message, as LangChain's chat models read it; a one-item tuple is not.
    "a tuple that is no (role, content) pair": [SystemMessage("s"), ("user",)],
    "None": [HumanMessage("a"), None],
    "an int as content": [HumanMessage("a"), HumanMessage("b").model_copy(update={"content": 5})],
}


@pytest.mark.parametrize("messages", ODD.values(), ids=ODD)
def test_odd_items_get_an_error_naming_them_from_a_warm_trimmer(messages: list[Any]) -> None:
    trimmer = PriorityTrimmer(3000)
    trimmer.trim([SystemMessage("s"), HumanMessage("a")])
    with pytest.raises((TypeError, ValueError), match="Message 1"):
        trimmer.trim(messages)


def test_a_role_content_pair_is_read_alike_by_a_warm_and_a_fresh_trimmer() -> None:
    warm = PriorityTrimmer(3000)
    warm.trim([SystemMessage("s"), HumanMessage("a")])
    messages: list[Any] = [SystemMessage("s"), ("user", "hi")]
    sent = warm.trim(messages).messages
    assert sent == PriorityTrimmer(3000).trim(messages).messages
    assert [(m.type, m.content) for m in sent] == [("system", "s"), ("human", "hi")]


def test_a_remove_message_passed_to_the_trimmer_is_judged_alike() -> None:
    messages: Messages = [HumanMessage("q"), RemoveMessage(id="x"), AIMessage("a")]
    reused, new = reused_then_fresh(lambda: messages, lambda m: m[:2], 3000)
    assert reused == new


def dict_turns(rounds: int = 5) -> list[dict[str, Any]]:
    """The article's setup: OpenAI-format dicts, rounds of question, call, result and answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer questions about the Lyra warehouse."}
    ]
    for n in range(rounds):
        call = {"name": "search", "arguments": json.dumps({"q": f"door {n}"})}
        messages += [
            {"role": "user", "content": f"Question {n} about the door code and billing."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"c{n}", "type": "function", "function": call}],
            },
            {
                "role": "tool",
                "tool_call_id": f"c{n}",
                "content": [{"type": "text", "text": f"result {n} " + "door billing " * 100}],
            },
            {"role": "assistant", "content": f"Answer {n}: the code is {n}{n}{n}."},
        ]
    messages.append({"role": "user", "content": "What was the door code of question 2?"})
    return messages


def _dict_content(messages: list[dict[str, Any]]) -> None:
    messages[5]["content"] = "Question 1 about the office rent and the billing."


def _dict_arguments(messages: list[dict[str, Any]]) -> None:
    messages[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"q": "door " * 60})


def _dict_part(messages: list[dict[str, Any]]) -> None:
    messages[3]["content"].append({"type": "text", "text": "billing " * 80})


def _dict_call_id(messages: list[dict[str, Any]]) -> None:
    messages[7]["tool_call_id"] = "c0"  # now answers the first round's call a second time


def _dict_name(messages: list[dict[str, Any]]) -> None:
    messages[1]["name"] = "alice"


@pytest.mark.parametrize(
    "edit", [_dict_content, _dict_arguments, _dict_part, _dict_call_id, _dict_name]
)
def test_openai_dicts_edited_in_place_are_trimmed_as_they_are_now(
    edit: Callable[[list[dict[str, Any]]], None],
) -> None:
    # Dicts met again give the messages made of them before (ConvertedDicts): an edit in place,
    # however deep, must still be seen.
    messages = dict_turns()
    trimmer = PriorityTrimmer(900, token_counter=TokenCounter())
    trimmer.trim(messages)
    edit(messages)
    assert figures(trimmer.trim(messages), []) == fresh(messages, 900)  # type: ignore[arg-type]


def test_dicts_met_again_are_the_messages_made_of_them_then() -> None:
    # The article's users append dicts to one list: converted once, each is the same message
    # on every call, so the analysis finds the history unchanged (14 ms a trim at 650 dicts
    # before, 1.7 ms now: docs/benchmarks.md).
    messages = dict_turns()
    trimmer = PriorityTrimmer(100_000)  # all fits: the messages sent are the coerced ones
    first = trimmer.trim(messages).messages
    messages += [{"role": "assistant", "content": "It was 222."}, {"role": "user", "content": "Ok"}]
    second = trimmer.trim(messages).messages
    assert len(second) == len(first) + 2
    assert all(then is now for then, now in zip(first, second, strict=False))
    messages[1]["content"] = "Question 0 about the rent."
    messages.append(messages[1])  # the same dict twice: two messages
    third = trimmer.trim(messages).messages
    assert third[1] is not second[1] and third[1].content == "Question 0 about the rent."
    assert third[-1] is not third[1] and third[-1].content == third[1].content
    assert [m is n for m, n in zip(second, third, strict=False)] == [
        index != 1 for index in range(len(second))
    ]


class _Incomparable:
    """A value a user's dict may carry whose comparison raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("not comparable")

    __hash__ = object.__hash__


@pytest.mark.parametrize("extra", [threading.Lock(), _Incomparable()], ids=["lock", "raises"])
def test_a_dict_that_cannot_be_copied_or_compared_is_converted_on_every_call(extra: object) -> None:
    messages = dict_turns()
    messages[1]["metadata"] = extra  # no deep copy of a lock; no comparison of the other
    trimmer = PriorityTrimmer(100_000)
    first = trimmer.trim(messages).messages
    second = trimmer.trim(messages).messages
    assert first[1] is not second[1] and first[1].content == second[1].content
    assert first[2] is second[2]  # the others are remembered as ever


def test_question_retention_reads_the_copies_sent_after_an_edit_in_place() -> None:
    # Copies are made for the messages sent only, while the result is made: retention, read
    # later, reads those (an edit in place after the trim does not make it read another).
    messages = [*latest_result_turn()[:3], HumanMessage("which shelf holds the zebra?")]
    messages += [calls("a"), ToolMessage("zebra " + "shelf " * 600, tool_call_id="a")]
    result = PriorityTrimmer(300, max_tool_result_tokens=50).trim(messages)
    expected = fresh(messages, 300, max_tool_result_tokens=50)
    assert result.shortened_messages == 1 and expected["question_retention"] == 1.0

    messages[-1].content = "window " * 600

    assert result.question_retention == expected["question_retention"]
