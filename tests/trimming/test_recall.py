"""Nothing lost for good in agents: the elision marker and the recall tool."""

from __future__ import annotations

import itertools
import logging
import warnings
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from support.fakes import Recorder, ToolCallingFake
from support.simulators import settings_of

from agent_latency import build_chat_model
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import recall_tool
from agent_latency.trimming._middleware import LEFT_OUT_KEY, TrimmingMiddleware
from agent_latency.trimming._recall import (
    MARKER_TEXT,
    PLAIN_MARKER_TEXT,
    TOOL_DEFINITION,
    TOOL_NAME,
)
from agent_latency.trimming._trimmer import PriorityTrimmer

COUNTER = TokenCounter()
SYSTEM = "You are the operations assistant; answer from the conversation. " * 3
FACT = "The database port is 5432, on host db-7."


def conversation(rounds: int, *, fact_round: int = 1) -> list[BaseMessage]:
    """A long conversation with ids, as an agent's state holds it; one round holds the fact."""
    messages: list[BaseMessage] = []
    for r in range(rounds):
        said = FACT if r == fact_round else f"Note {r}: the shelves were restocked " + "ok " * 30
        messages += [HumanMessage(said, id=f"h{r}"), AIMessage(f"Noted {r}.", id=f"a{r}")]
    return messages


def is_marker(message: BaseMessage) -> bool:
    return isinstance(message, SystemMessage) and message.content == MARKER_TEXT


def sent_by(middleware: TrimmingMiddleware, messages: list[BaseMessage]) -> ModelRequest[Any]:
    """The request the model gets from the middleware (outside an agent run)."""
    received: list[ModelRequest[Any]] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        received.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    original = ModelRequest(
        model=ToolCallingFake(messages=iter([])),
        messages=messages,  # type: ignore[arg-type]
        system_message=SystemMessage(SYSTEM),
        tools=list(middleware.tools),
    )
    middleware.wrap_model_call(original, handler)
    return received[0]


def request_tokens(request: ModelRequest[Any]) -> int:
    system = [request.system_message] if request.system_message is not None else []
    return COUNTER.count_messages([*system, *request.messages]) + COUNTER.count_tools(request.tools)


# --- in a real agent: create_agent, the real ChatOpenAI, the simulator -------------------------


def test_a_real_agent_is_told_what_was_cut_and_reads_it_back_within_the_budget() -> None:
    budget = 700
    recorder = Recorder()
    fast = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=8
    )
    # The newest rounds first (age): the fact in round 1 is cut, and the question does not
    # bring it back, so only the recall tool can.
    question = HumanMessage('Please recall "database port" and tell me which port to open.')
    with running_simulator(fast) as sim:
        # The model's own tokens, as the server counts them.
        settings = settings_of(sim)
        trimmer = PriorityTrimmer.from_settings(settings, budget=budget, history_selection="age")
        model = build_chat_model(settings)
        agent = create_agent(
            model, tools=[], system_prompt=SYSTEM, middleware=[TrimmingMiddleware(trimmer)]
        )
        state = agent.invoke({"messages": [*conversation(20), question]}, {"callbacks": [recorder]})
    first, second = recorder.prompts
    # The first call: the marker was sent, the fact was not.
    assert sum(map(is_marker, first)) == 1 and is_marker(first[1])
    assert not any(FACT in m.text for m in first)
    # The model called the recall tool with words of the question; it returned the cut fact.
    call = state["messages"][-3]
    assert isinstance(call, AIMessage) and call.tool_calls[0]["name"] == TOOL_NAME
    assert call.tool_calls[0]["args"] == {"query": "database port"}
    answer = state["messages"][-2]
    assert isinstance(answer, ToolMessage) and FACT in answer.text
    assert call.response_metadata[LEFT_OUT_KEY]  # what the call left out travels with it
    # Both prompts fit the budget, by our count and by the server's.
    assert len(recorder.trims) == 2 and all(t.tokens_after <= budget for t in recorder.trims)
    assert all(tokens <= budget for tokens in recorder.server_tokens)
    assert recorder.trims[0].tokens_after == recorder.server_tokens[0]  # the marker counted
    assert len(recorder.trims[0].sent_message_tokens) == len(first)
    assert any(FACT in m.text for m in second)  # the recalled fact reached the model


def test_the_marker_stays_put_while_a_conversation_grows() -> None:
    trimmer = PriorityTrimmer(600, token_counter=COUNTER, history_selection="age")
    middleware = TrimmingMiddleware(trimmer)
    history = conversation(20)
    before = sent_by(middleware, [*history, HumanMessage("What now?", id="q1")])
    grown = [
        *history,
        HumanMessage("What now?", id="q1"),
        AIMessage("Restock.", id="r1"),
        HumanMessage("And then?", id="q2"),
    ]
    after = sent_by(middleware, grown)
    assert is_marker(before.messages[0]) and is_marker(after.messages[0])
    assert before.messages[0].content == after.messages[0].content  # the same text, same place
    # The prefix is unchanged up to the new messages: the next call appends.
    assert [m.content for m in after.messages[: len(before.messages)]] == [
        m.content for m in before.messages
    ]


@pytest.mark.parametrize("rounds", [3, 8, 9, 10, 11, 12, 20, 40])
@pytest.mark.parametrize("budget", [450, 500, 551, 800])
def test_with_the_marker_the_request_never_exceeds_the_budget(rounds: int, budget: int) -> None:
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER, prefix_stable=False)
    middleware = TrimmingMiddleware(trimmer)
    messages = [*conversation(rounds), HumanMessage("What now?", id="q")]
    sent = sent_by(middleware, messages)
    dropped = len(messages) > len([m for m in sent.messages if not is_marker(m)])
    assert request_tokens(sent) <= budget
    assert sum(map(is_marker, sent.messages)) == (1 if dropped else 0)
    assert [t["function"]["name"] for t in map(convert_to_openai_tool, sent.tools)] == [TOOL_NAME]


def test_a_request_that_fits_has_no_marker_and_is_passed_on_as_is() -> None:
    middleware = TrimmingMiddleware(PriorityTrimmer(4000, token_counter=COUNTER))
    messages = [*conversation(2), HumanMessage("What now?", id="q")]
    assert sent_by(middleware, messages).messages == messages


# --- the recall tool ---------------------------------------------------------------------------


def test_the_recall_tool_reads_by_words_and_by_id_best_first_within_a_quarter_budget() -> None:
    budget = 600
    middleware = TrimmingMiddleware(
        PriorityTrimmer(budget, token_counter=COUNTER, history_selection="age")
    )
    history = conversation(20)
    state = [*history, HumanMessage("Which port?", id="q")]
    answer = AIMessage("", tool_calls=[{"name": TOOL_NAME, "args": {}, "id": "c1"}])
    sent = sent_by(middleware, state)
    kept = {m.id for m in sent.messages}

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        return ModelResponse(result=[answer])

    response = middleware.wrap_model_call(
        ModelRequest(
            model=ToolCallingFake(messages=iter([])),
            messages=state,  # type: ignore[arg-type]
            system_message=SystemMessage(SYSTEM),
            tools=list(middleware.tools),
        ),
        handler,
    )
    assert isinstance(response, ModelResponse)
    with_runs = [*state, *response.result]
    assert answer.response_metadata == {}  # the model's message is not modified

    def recall(query: str) -> str:
        return str(middleware._read_back(with_runs, "c1", query))

    by_words = recall("database port")
    assert by_words.startswith("[id h1] human: " + FACT)
    assert "h1" not in kept
    by_id = recall("a3 h2")
    assert by_id.splitlines()[:2] == [
        "[id h2] human: " + history[4].text,
        "[id a3] ai: Noted 3.",
    ]
    everything = recall("shelves restocked")
    assert COUNTER.count_text(everything) <= budget // 4
    shown, note = everything.rsplit("\n", 1)
    assert "more matched: ask with more precise words or by id.) Their ids: " in note
    # The ids of the matches not shown, to ask for them by.
    assert {m.id for m in history if m.id in note.split("Their ids: ")[1].split(", ")}
    assert not any(f"[id {i}]" in shown for i in note.split("Their ids: ")[1].split(", "))
    assert "No left-out message matches" in recall("zebra")


def test_the_recall_tool_says_when_nothing_was_left_out() -> None:
    middleware = TrimmingMiddleware(PriorityTrimmer(4000, token_counter=COUNTER))
    call = AIMessage("", tool_calls=[{"name": TOOL_NAME, "args": {}, "id": "c1"}])
    answer = middleware._read_back([HumanMessage("hi", id="h"), call], "c1", "anything")
    assert answer == "Nothing was left out of this conversation's prompt."


def test_the_middleware_tool_is_the_definition_the_hook_counts() -> None:
    (tool,) = TrimmingMiddleware(PriorityTrimmer(4000)).tools
    assert convert_to_openai_tool(tool) == TOOL_DEFINITION


# --- turning it off, and where it is off -------------------------------------------------------


def test_recall_can_be_turned_off() -> None:
    middleware = TrimmingMiddleware(PriorityTrimmer(450, token_counter=COUNTER), recall=False)
    assert middleware.tools == []
    sent = sent_by(middleware, [*conversation(20), HumanMessage("What now?", id="q")])
    assert not any(map(is_marker, sent.messages))


def test_plain_chains_get_no_marker() -> None:
    trimmer = PriorityTrimmer(450, token_counter=COUNTER)
    trimmed = trimmer.invoke([SystemMessage(SYSTEM), *conversation(20), HumanMessage("Now?")])
    assert len(trimmed) < 42 and not any(map(is_marker, trimmed))


def test_recall_options_are_checked() -> None:
    with pytest.raises(TypeError, match="recall must be True or False"):
        TrimmingMiddleware(PriorityTrimmer(450), recall=1)  # type: ignore[arg-type]
    assert TrimmingMiddleware(PriorityTrimmer(450), recall=False).tools == []
    with pytest.raises(ValueError, match="made with recall=False"):
        recall_tool(PriorityTrimmer(450).as_pre_model_hook(recall=False))
    with pytest.raises(TypeError, match="hook must come from"):
        recall_tool(lambda state: state)  # type: ignore[arg-type]


# --- the LangGraph pre-model hook --------------------------------------------------------------


def test_the_pre_model_hook_marks_the_cut_and_its_tool_reads_it_back() -> None:
    from langgraph.prebuilt import create_react_agent

    budget = 600
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER, history_selection="age")
    hook = trimmer.as_pre_model_hook(prompt=SYSTEM)
    tool = recall_tool(hook)
    call = AIMessage(
        "", tool_calls=[{"name": TOOL_NAME, "args": {"query": "database port"}, "id": "c1"}]
    )
    model = ToolCallingFake(messages=itertools.cycle([call, AIMessage("Port 5432.")]))
    recorder = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated for create_agent
        graph = create_react_agent(model, [tool], prompt=SYSTEM, pre_model_hook=hook)
    state = graph.invoke(
        {"messages": [*conversation(20), HumanMessage("Which port?")]}, {"callbacks": [recorder]}
    )
    first, _ = recorder.prompts
    assert first[0].content == SYSTEM and is_marker(first[1])
    assert not any(FACT in m.text for m in first)
    tool_answer = state["messages"][-2]
    assert isinstance(tool_answer, ToolMessage) and FACT in tool_answer.text
    tools = COUNTER.count_tools([TOOL_DEFINITION])
    for prompt in recorder.prompts:
        assert COUNTER.count_messages(prompt) + tools <= budget


# --- over budget: the warning names the budget the user set ------------------------------------

LONG_PROMPT = "Answer in the house style, citing the runbook section by number. " * 150


def over_budget_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agent_latency.trimming" and "over budget" in r.getMessage()
    ]


def test_the_hooks_over_budget_warning_names_the_budget_set_not_the_one_less_the_marker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget = 1500
    hook = PriorityTrimmer(budget, token_counter=COUNTER).as_pre_model_hook(prompt=LONG_PROMPT)
    state = {"messages": [*conversation(10), HumanMessage("Which port?", id="q")]}
    with caplog.at_level(logging.WARNING, logger="agent_latency.trimming"):
        sent = hook(state)["llm_input_messages"]
        hook.read_back(state["messages"], None, "port")  # finding what was cut warns no more

    assert [m.id for m in sent] == ["q"]  # only the question fits beside the prompt, no marker
    (warning,) = over_budget_warnings(caplog)
    # The hook trims history to the budget less the (plain) marker's tokens: not what was set.
    reserve = COUNTER.count_message(SystemMessage(PLAIN_MARKER_TEXT))
    assert f"the budget is {budget} ({budget} by our count)" in warning
    assert str(budget - reserve) not in warning
    assert "system messages: " in warning and "Fix: shorten the system prompt" in warning


def test_the_middlewares_over_budget_warning_and_result_name_the_budget_set(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget = 1500
    recorder = Recorder()
    fast = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=8
    )
    with running_simulator(fast) as sim:
        settings = settings_of(sim)
        trimmer = PriorityTrimmer.from_settings(settings, budget=budget)
        agent = create_agent(
            build_chat_model(settings),
            tools=[],
            system_prompt=LONG_PROMPT,
            middleware=[TrimmingMiddleware(trimmer)],
        )
        with caplog.at_level(logging.WARNING, logger="agent_latency.trimming"):
            agent.invoke(
                {"messages": [*conversation(10), HumanMessage("Which port?")]},
                {"callbacks": [recorder]},
            )

    logged = over_budget_warnings(caplog)
    assert recorder.trims and len(logged) == len(recorder.trims)  # one per model call
    for trim, warning in zip(recorder.trims, logged, strict=True):
        assert trim.over_budget and trim.budget == budget
        assert warning.startswith(
            f"Prompt over budget after trimming: the request needs {trim.tokens_after} tokens, "
            f"the budget is {budget} ({trim.effective_budget} by our count). "
        )


def test_a_request_that_fits_the_budget_only_without_the_marker_is_sent_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The marker's reserve is taken off the budget history is cut to, not off the request: a
    prompt and question that fit the budget but not the budget less the reserve are sent, with
    no marker, and no warning (the trim within the reserve is over its own, smaller budget)."""
    question = HumanMessage("Which port?", id="q")
    unlimited = PriorityTrimmer(100_000, token_counter=COUNTER, tools=[TOOL_DEFINITION])
    fixed = unlimited.trim([SystemMessage(LONG_PROMPT), question]).tokens_after
    budget = fixed + 5  # the prompt and the question fit; with the marker they would not
    assert COUNTER.count_message(SystemMessage(PLAIN_MARKER_TEXT)) > 5
    hook = PriorityTrimmer(budget, token_counter=COUNTER).as_pre_model_hook(prompt=LONG_PROMPT)
    with caplog.at_level(logging.WARNING, logger="agent_latency.trimming"):
        sent = hook({"messages": [*conversation(10), question]})["llm_input_messages"]

    assert sent == [question]
    assert over_budget_warnings(caplog) == []


def test_a_question_that_fits_the_budget_only_without_the_marker_is_sent_whole() -> None:
    """Where the prompt and the question take the room the marker would need, the history is
    cut to the whole budget and the question is not shortened to make room for a marker that is
    not sent."""
    question = HumanMessage("Which port does the staging database listen on? " * 12, id="q")
    unlimited = PriorityTrimmer(100_000, token_counter=COUNTER, tools=[TOOL_DEFINITION])
    fixed = unlimited.trim([SystemMessage(LONG_PROMPT), question]).tokens_after
    budget = fixed + 5  # the prompt and the question fit; with the marker they would not
    hook = PriorityTrimmer(budget, token_counter=COUNTER).as_pre_model_hook(prompt=LONG_PROMPT)

    sent = hook({"messages": [*conversation(10), question]})["llm_input_messages"]

    assert sent == [question]
    assert sent[0] is question
