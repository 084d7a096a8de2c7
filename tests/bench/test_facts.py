"""The facts the mixed workload plants and asks about, and the one rule for whether a prompt
still holds one: its value in what is sent, a shortened text counting only where it survived."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.bench._facts import Fact, answer_gives, fact_kept, plant_facts
from agent_latency.bench._scenario import call_points, load_scenario
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer


def text(message: object) -> str:
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else str(content)


def test_each_conversation_states_six_facts_once_and_asks_about_each_after_it() -> None:
    scenario = load_scenario()
    for conversation in range(3):
        planted = plant_facts(scenario, conversation)
        messages = planted.messages
        assert len(messages) == len(scenario) + 2 * 6  # a question and its answer per fact
        facts = list(planted.needs.values())
        assert len({fact.value for fact in facts}) == 6
        assert {fact.where for fact in facts} == {"user", "tool_result"}
        assert sum(fact.where == "tool_result" for fact in facts) == 3
        assert {fact.language for fact in facts} == {"en", "zh"}
        assert {fact.same_words for fact in facts} == {True, False}
        points = call_points(messages)
        for end, fact in planted.needs.items():
            assert end in points  # a model call whose prompt ends with the question
            question = messages[end - 1]
            assert isinstance(question, HumanMessage) and question.content == fact.question
            assert fact.value not in fact.question
            stated = [i for i, m in enumerate(messages[:end]) if fact.value in text(m)]
            assert len(stated) == 1, (fact, stated)  # stated once, before its question
            kind = ToolMessage if fact.where == "tool_result" else HumanMessage
            assert isinstance(messages[stated[0]], kind)
            # The answer (the next message) states it again, for the calls after.
            assert isinstance(messages[end], AIMessage) and fact.value in text(messages[end])
    # The values differ between conversations.
    values = [{f.value for f in plant_facts(scenario, c).needs.values()} for c in range(2)]
    assert values[0].isdisjoint(values[1])


def test_facts_in_tool_results_go_to_the_longest_ones_in_the_middle_of_the_text() -> None:
    scenario = load_scenario()
    planted = plant_facts(scenario, 0)
    for fact in planted.needs.values():
        if fact.where != "tool_result":
            continue
        (holder,) = [m for m in planted.messages if fact.value in text(m)][:1]
        body = text(holder)
        position = body.index(fact.value) / len(body)
        assert 0.2 < position < 0.8  # inside the result, not at an edge a cut keeps
        assert len(body) > 1000  # a long tool result
    # The input is not modified.
    assert [text(m) for m in scenario] == [text(m) for m in load_scenario()]


def test_a_conversation_too_short_for_facts_gets_none() -> None:
    messages = [SystemMessage("s"), HumanMessage("hi")]
    planted = plant_facts(messages, 0)
    assert planted.messages == tuple(messages) and planted.needs == {}


def fact(value: str) -> Fact:
    return Fact(value, f"The code is {value}.", "What is the code?", value, "en", "user", True)


def test_a_shortened_text_counts_only_where_the_fact_survived() -> None:
    counter = TokenCounter()
    filler = " ".join(f"record {n} shows a handling time of {n % 50} minutes." for n in range(400))
    middle = f"{filler[: len(filler) // 2]} The door code is 4417-KX. {filler[len(filler) // 2 :]}"
    start = f"The door code is 8812-QW. {filler}"
    messages = [
        SystemMessage("You are a support assistant."),
        HumanMessage("Look up the door codes."),
        AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "c1"}]),
        ToolMessage(middle, tool_call_id="c1"),
        AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "c2"}]),
        ToolMessage(start, tool_call_id="c2"),
    ]
    sent = PriorityTrimmer(1200, token_counter=counter).trim(messages)
    shortened = [d for d in sent.decisions if d.action == "shortened"]
    assert len(shortened) == 2  # both results were cut to fit
    assert not fact_kept(fact("4417-KX"), sent.messages)  # its middle was removed
    assert fact_kept(fact("8812-QW"), sent.messages)  # the kept head holds it
    assert fact_kept(fact("4417-KX"), messages)  # untrimmed, both are there


def test_an_answer_gives_the_fact_whatever_its_case_and_digit_grouping() -> None:
    port = fact("24117")
    assert answer_gives(port, "The staging proxy listens on port 24,117.")
    assert answer_gives(fact("Ljubljana"), "退货仓库设在 ljubljana。")
    assert answer_gives(fact("RX-50731"), "It is order rx-50731.")
    assert not answer_gives(port, "Port 2411.")
    assert not answer_gives(fact("QC-1234"), "I don't know.")
