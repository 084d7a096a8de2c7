"""Attacks, from the user's side, on two changes: a user message a tool added with its result is
a message of the tool's turn (4b58934, ``_rounds._Grouping._added_by_a_tool``), and a trim names
its calibration's model, else the agent's own, looked for through bindings (d180863,
``PromptCalibration(model=...)``, ``_cache_key.chat_model_of``, ``KeyedModels``). Real
``create_agent`` agents with ``ChatOpenAI`` over HTTP to the simulator, or over
``httpx.MockTransport`` where OpenAI's own API is needed.

Fixed, each a test here that failed before (xfail-strict, then passing): the recall tool read
the tool's image message back as the user's words, with no word of the image (now ``[id <id>]
added by a tool: [image] <text>``, through the hook and a real agent); an
``init_chat_model(..., configurable_fields=...)`` agent on OpenAI's API got no
``prompt_cache_key`` and its trims named no model (the key now goes in a copy of the
configurable model's default config, its name read per call from the model it builds for the
call's config: ``_cache_key._keyed_configurable``); an earlier tool call of
the turn and the image it added were weighed apart and the image could go without its call
(now dropped and kept as one step, ``_plan._tool_steps``); a calibration named for the settings'
model learnt nothing, and said nothing, when the agent called the same model under another name
(now a warning says so); a ``model.with_fallbacks([...])`` agent got no ``prompt_cache_key`` on
OpenAI's API (``chat_model_of`` looks through to the primary, keyed alone); a user's own
question holding an image, asked right after a ``return_direct`` tool's result, was taken for one
the tool added (the position is all there is to tell them apart, so it still is) and read as the
tool's only: never shortened to fit, the trim went over a budget the same question as text fits,
blaming the tool, and the history was chosen for the question before it, leaving out the round
the new one asks about (now what a turn asks is its question's text with that of the user
messages a tool added after it, ``MessageFacts.asking``: the cut, also once the turn is history,
recall, the relevance order and ``question_retention`` use it; their text is shortened like the
question's when the turn does not fit, before it, images kept; ``over_budget_cause`` names "user
messages with images"). Its first test's budget went from 300 to 400: at 300 not even the image
fits beside the call and result the position keeps it with (a position-based fix cannot send it
within 300 without dropping the newest tool call, which a tool's image needs); 300 now pins the
cause.

What held is pinned: edits in place that give a question an image or take it away trim as a
fresh trimmer does; both history selections, with and without ``compact_tool_results``, keep
each injected turn whole over a growing conversation and never send an image without its
question, call and result; a ``tool_budget`` keeps the question with the tool's image; a
checkpointed agent whose tool injects an image trims as a fresh trimmer does; a user's
``prompt_cache_key`` bound with ``model.bind`` (under ``with_retry``, with ``cache_key=True``)
is sent as given on every turn, on OpenAI's API or a gateway; ``bind_tools`` gets the
conversation's key; an unnamed calibration under ``with_fallbacks`` learns nothing from the
fallback's count (the failed primary call takes the trim).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from support.conversations import IMAGE, shelf_notes
from support.fakes import KeepsRequestBodies
from support.simulators import QUICK, chat_openai_of, settings_of
from support.wire import chat_completion

from agent_latency import LatencyCallbackHandler, PriorityTrimmer, build_chat_model
from agent_latency.sim import RunningSimulator, running_simulator
from agent_latency.tokens import PromptCalibration, TokenCounter
from agent_latency.trimming import TrimmingMiddleware, TrimResult

COUNTER = TokenCounter.for_model("gpt-4o")


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(QUICK) as running:
        yield running


def is_sent(message: BaseMessage, sent: list[BaseMessage]) -> bool:
    return any(m is message for m in sent)


# --- (A) the current turn ------------------------------------------------------------------------


@tool(return_direct=True)
def lookup_order(number: str) -> str:
    """Looks an order up in the shop's database."""
    return f"Order {number}: shipped on Monday from the north warehouse. " + "Tracking. " * 6


LONG_ASK = "What does this photo of my parcel show, is it damaged? " + "Details: dented box. " * 40


def test_a_users_image_question_after_a_return_direct_result_is_shortened_to_fit(
    sim: RunningSimulator,
) -> None:
    settings = settings_of(sim)
    agent = create_agent(build_chat_model(settings), tools=[lookup_order])
    first = [*shelf_notes(6), HumanMessage("Use lookup_order for order 1234.")]
    before = agent.invoke({"messages": first})["messages"]
    assert isinstance(before[-1], ToolMessage)  # the tool answered directly: the turn ended
    text_only = HumanMessage(LONG_ASK)
    with_image = HumanMessage([{"type": "text", "text": LONG_ASK}, IMAGE])
    # The question with its image is ~515 tokens, the image alone 255: beside the tool call and
    # result the position keeps it with (~65 tokens) it fits only with its text shortened.
    budget = 400

    as_text = PriorityTrimmer(budget, token_counter=COUNTER).trim([*before, text_only])
    result = PriorityTrimmer(budget, token_counter=COUNTER).trim([*before, with_image])

    assert not as_text.over_budget  # the text question is shortened to fit
    assert not result.over_budget, result.over_budget_cause
    assert "tool" not in (result.over_budget_cause or "")


def test_a_users_image_question_that_cannot_fit_is_named_for_what_it_is() -> None:
    # At 300 not even the image (255 tokens) fits beside the tool call and result the position
    # keeps it with: over budget, the question sent whole (shortening it would not make it fit),
    # and the cause names the message with the image, not the tool.
    asked = HumanMessage([{"type": "text", "text": LONG_ASK}, IMAGE])
    messages = [*shelf_notes(6), *looked_up(asked)]

    result = PriorityTrimmer(300, token_counter=COUNTER).trim(messages)

    assert result.over_budget
    assert result.messages[-1] is asked
    assert (result.over_budget_cause or "").startswith("user messages with images: ")
    assert "images" in (result.over_budget_hint or "")


ZEPHYR = HumanMessage("Note this: the Zephyr parcel insurance covers dents up to 200 euros.")
ASK = "How much does the Zephyr parcel insurance cover for this dent?"


def looked_up(asked: BaseMessage) -> list[BaseMessage]:
    """A turn a ``return_direct`` tool ended (the question, the call, its result), then
    ``asked``: the user's next question, or by position what the tool added."""
    call = {"name": "lookup_order", "args": {"number": "1234"}, "id": "c9", "type": "tool_call"}
    return [
        HumanMessage("Use lookup_order for order 1234."),
        AIMessage("", tool_calls=[call]),
        ToolMessage("Order 1234: shipped Monday. " + "Tracking. " * 6, tool_call_id="c9"),
        asked,
    ]


def with_image(text: str) -> HumanMessage:
    return HumanMessage([{"type": "text", "text": text}, IMAGE])


@pytest.mark.parametrize("budget", [600, 700, 800])
def test_the_history_is_chosen_for_a_users_image_question_after_a_return_direct_result(
    budget: int,
) -> None:
    notes = shelf_notes(19)
    messages = [*notes[:6], ZEPHYR, AIMessage("Noted."), *notes[6:]]
    as_text = PriorityTrimmer(budget, token_counter=COUNTER).trim(
        [*messages, *looked_up(HumanMessage(ASK))]
    )
    result = PriorityTrimmer(budget, token_counter=COUNTER).trim(
        [*messages, *looked_up(with_image(ASK))]
    )

    assert is_sent(ZEPHYR, as_text.messages)
    assert is_sent(ZEPHYR, result.messages)


def test_an_image_question_recalls_the_round_holding_a_term_only_it_asks() -> None:
    # A round sent speaks to more of the question than ZEPHYR's, which alone holds "Zephyr":
    # that word, asked by the image question only, is what brings it back. The question's own
    # messages hold its terms, not what answers it (the image question was counted as sent).
    notes = shelf_notes(19)
    messages = [
        *notes[:6],
        ZEPHYR,
        AIMessage("Noted."),
        *notes[6:],
        HumanMessage("How much does parcel insurance cover for a dent, in general?"),
        AIMessage("It depends on the policy: parcel insurance covers a dent up to a limit."),
    ]
    for budget in range(450, 1_450, 50):  # below, the image leaves the history too little
        as_text = PriorityTrimmer(budget, token_counter=COUNTER).trim(
            [*messages, *looked_up(HumanMessage(ASK))]
        )
        result = PriorityTrimmer(budget, token_counter=COUNTER).trim(
            [*messages, *looked_up(with_image(ASK))]
        )
        assert is_sent(ZEPHYR, result.messages) or not is_sent(ZEPHYR, as_text.messages), budget


def test_the_retention_of_an_image_question_counts_what_it_asks() -> None:
    # At 400 the image leaves the history no room for the round the question asks about: the
    # retention says so (it measured the question before it, whose words were all sent: 1.0).
    notes = shelf_notes(19)
    messages = [*notes[:6], ZEPHYR, AIMessage("Noted."), *notes[6:], *looked_up(with_image(ASK))]

    result = PriorityTrimmer(400, token_counter=COUNTER).trim(messages)

    assert not is_sent(ZEPHYR, result.messages)
    assert result.question_retention is not None and result.question_retention < 1


@pytest.mark.parametrize(("rounds", "budget"), [(6, 425), (10, 900), (13, 880)])
def test_the_cut_chosen_for_an_image_question_stays_once_its_turn_is_history(
    rounds: int, budget: int
) -> None:
    # At these budgets the history is a whole number of epochs when the image question comes:
    # the cut falls right before its turn, and its stable part is chosen for what the turn asks
    # (with the image question's text) both while the turn is current and once it is history,
    # so the next turn sends the same prefix (and the round the image question asked about).
    notes = shelf_notes(3 + rounds)
    current = [*notes[:6], ZEPHYR, AIMessage("Noted."), *notes[6:], *looked_up(with_image(ASK))]
    answered = [*current, AIMessage("Dents are covered up to a limit."), HumanMessage("Thanks.")]
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)

    before = [m for m in trimmer.trim(current).messages if is_sent(m, current[:-4])]
    after = [m for m in trimmer.trim(answered).messages if is_sent(m, current[:-4])]

    assert is_sent(ZEPHYR, before)
    assert after == before


@pytest.mark.parametrize("where", ["hook", "agent"])
def test_recall_reads_back_a_tools_image_as_an_image_the_tool_added(
    where: str, sim: RunningSimulator
) -> None:
    # Before: "[id chart-image] human: Chart of March sales." (the user's words, no image).
    call = {"name": "get_chart", "args": {"month": "March"}, "id": "c1", "type": "tool_call"}
    messages = [
        HumanMessage("Show me the March sales chart.", id="chart-ask"),
        AIMessage("", tool_calls=[call], id="chart-call"),
        ToolMessage("The chart is attached.", tool_call_id="c1", id="chart-result"),
        HumanMessage([{"type": "text", "text": "Chart of March sales."}, IMAGE], id="chart-image"),
        AIMessage("March sales doubled.", id="chart-answer"),
        *shelf_notes(30),  # ids h0, a0, ...: others here (the agent's state keeps one per id)
    ]
    if where == "hook":
        recall = {"name": "recall", "args": {"query": "x"}, "id": "r1", "type": "tool_call"}
        asked = [HumanMessage("What did the March chart show?"), AIMessage("", tool_calls=[recall])]
        hook = PriorityTrimmer(400, token_counter=COUNTER).as_pre_model_hook()
        answer = hook.read_back([*messages, *asked], "r1", "March sales chart")
    else:  # the simulator calls recall with the words the question quotes
        agent = create_agent(
            chat_openai_of(sim),
            middleware=[TrimmingMiddleware(PriorityTrimmer(400, token_counter=COUNTER))],
        )
        asked = [HumanMessage('Please recall "March sales chart" and tell me what it showed.')]
        state = agent.invoke({"messages": [*messages, *asked]})
        (reply,) = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name]
        answer = reply.text  # the recall tool's (the earlier result has no name)

    assert "[id chart-image] added by a tool: [image] Chart of March sales.\n" in answer + "\n"


@pytest.mark.parametrize("selection", ["cache_first", "age"])
@pytest.mark.parametrize("compact", [False, True])
def test_every_selection_keeps_each_injected_turn_whole_over_a_growing_chat(
    selection: str, compact: bool
) -> None:
    def turn(i: int) -> list[BaseMessage]:
        call = {"name": "get_chart", "args": {"m": str(i)}, "id": f"c{i}", "type": "tool_call"}
        return [
            HumanMessage(f"Show chart {i}. " + "why " * 10),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f"Chart {i} attached. " + "data " * 80, tool_call_id=f"c{i}"),
            HumanMessage([{"type": "text", "text": f"chart {i}"}, IMAGE]),
        ]

    def trimmer(budget: int) -> PriorityTrimmer:
        return PriorityTrimmer(
            budget,
            token_counter=COUNTER,
            history_selection=selection,  # type: ignore[arg-type]
            compact_tool_results=compact,
        )

    for budget in (400, 700, 1_200):
        reused = trimmer(budget)
        messages: list[BaseMessage] = [SystemMessage("You chart sales."), *shelf_notes(4)]
        turns: list[list[BaseMessage]] = []
        for i in range(5):
            turns.append(turn(i))
            messages = [*messages, *turns[-1]]
            for answered in (False, True):
                result = reused.trim(messages)
                assert result.messages == trimmer(budget).trim(messages).messages
                assert not result.over_budget, (budget, i)
                assert is_sent(turns[-1][0], result.messages)  # the question
                answered_calls = {  # the results sent (a shortened one is a copy)
                    m.tool_call_id for m in result.messages if isinstance(m, ToolMessage)
                }
                for question, call, _, image in turns:  # an image only with what it answers
                    if is_sent(image, result.messages):
                        assert is_sent(question, result.messages), (budget, i)
                        assert is_sent(call, result.messages), (budget, i)
                        assert call.tool_calls[0]["id"] in answered_calls, (budget, i)
                if not answered:
                    messages = [*messages, AIMessage(f"Answer {i}. " + "it " * 20)]


def test_an_earlier_calls_image_goes_with_its_call_and_the_newest_call_stays() -> None:
    def call(i: int) -> dict[str, Any]:
        return {"name": "get_chart", "args": {"m": str(i)}, "id": f"c{i}", "type": "tool_call"}

    question = HumanMessage("Compare the March and April charts.")
    earlier = [
        AIMessage("", tool_calls=[call(1)]),
        ToolMessage("March chart attached. " + "data " * 60, tool_call_id="c1"),
        HumanMessage([{"type": "text", "text": "March chart"}, IMAGE]),
    ]
    newest = [
        AIMessage("", tool_calls=[call(2)]),
        ToolMessage("April chart attached. " + "data " * 60, tool_call_id="c2"),
        HumanMessage([{"type": "text", "text": "April chart"}, IMAGE]),
    ]
    system = SystemMessage("You chart sales.")
    messages = [system, *shelf_notes(8), question, *earlier, *newest]
    needed = COUNTER.count_messages([system, question, *newest])

    for budget in range(needed, needed + 500, 25):
        result = PriorityTrimmer(budget, token_counter=COUNTER).trim(messages)
        assert not result.over_budget
        assert result.messages[-3:] == newest
        assert is_sent(question, result.messages)
        assert [is_sent(m, result.messages) for m in earlier] in ([True] * 3, [False] * 3)


@pytest.mark.parametrize("budget", [150, 250, 400, 900])
def test_edits_in_place_giving_a_question_an_image_or_taking_it_trim_as_a_fresh_trimmer(
    budget: int,
) -> None:
    call = {"name": "lookup", "args": {"q": "x"}, "id": "c9", "type": "tool_call"}
    question = HumanMessage("And when will it arrive? " + "please " * 5)
    messages = [
        *shelf_notes(6),
        HumanMessage("Look order 1234 up."),
        AIMessage("", tool_calls=[call]),
        ToolMessage("Order 1234: shipped. " + "x " * 40, tool_call_id="c9"),
        question,
    ]
    reused = PriorityTrimmer(budget, token_counter=COUNTER)
    contents: list[Any] = [
        question.content,
        [{"type": "text", "text": "And when will it arrive? Look."}, IMAGE],
        question.content,
    ]
    classes = []
    for content in contents:
        question.content = content  # a user's edit in place, between calls
        result = reused.trim(messages)
        fresh = PriorityTrimmer(budget, token_counter=COUNTER).trim(messages)
        assert result.messages == fresh.messages
        assert result.decisions == fresh.decisions
        classes.append(result.decisions[-1].priority_class)
    assert classes == ["latest_user", "tool_result", "latest_user"]


def chart_tool(fetched: list[str], *, every: int) -> BaseTool:
    """``get_chart``, which adds an image beside its result on its first call and, with
    ``every``, on every ``every``-th call after that (the model answers after a result alone);
    each month asked for goes to ``fetched``."""

    @tool
    def get_chart(month: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Fetches the sales chart of a month as an image."""
        fetched.append(month)
        result = ToolMessage(
            f"The chart of {month} is attached. " + "axis " * 30, tool_call_id=tool_call_id
        )
        if len(fetched) > 1 and (every == 0 or (len(fetched) - 1) % every):
            return Command(update={"messages": [result]})
        image = HumanMessage([{"type": "text", "text": f"Chart of {month}."}, IMAGE])
        return Command(update={"messages": [result, image]})

    return get_chart


def test_a_checkpointed_agent_whose_tool_injects_an_image_sends_what_a_fresh_trimmer_sends(
    sim: RunningSimulator,
) -> None:
    fetched: list[str] = []
    get_chart = chart_tool(fetched, every=2)

    budget = 700
    seen: list[tuple[Any, TrimResult]] = []

    class Watching(TrimmingMiddleware):
        """Keeps each request and its trim."""

        def _trim(self, request: Any) -> Any:
            trimmed, result, runs = super()._trim(request)
            assert result is not None
            seen.append((request, result))
            return trimmed, result, runs

    trimmer = PriorityTrimmer.from_settings(settings_of(sim), budget=budget)
    agent = create_agent(
        build_chat_model(settings_of(sim)),
        tools=[get_chart],
        middleware=[Watching(trimmer, recall=False)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    for turn in range(4):
        ask = f"Show me the chart of month {turn}. " + "context " * 40
        agent.invoke({"messages": [HumanMessage(ask)]}, config)

    assert len(seen) >= 8 and len(fetched) >= 4
    for request, result in seen:
        fresh = PriorityTrimmer.from_settings(settings_of(sim), budget=budget)
        again = fresh.trim(list(request.messages), tools=request.tools)
        assert result.messages == again.messages
        assert result.decisions == again.decisions


@pytest.mark.parametrize("budget", [600, 800])
def test_a_tool_budget_keeps_the_question_with_the_tools_image(
    sim: RunningSimulator, budget: int
) -> None:
    fetched: list[str] = []
    get_chart = chart_tool(fetched, every=0)

    others = [
        tool(f"widget_{i}", description=f"Tool {i} does things with widgets. " + "param " * 20)(
            lambda x: "ok"
        )
        for i in range(6)
    ]
    bodies = KeepsRequestBodies()
    model = chat_openai_of(sim, http_client=httpx.Client(transport=bodies))
    trimmer = PriorityTrimmer.from_settings(
        settings_of(sim), budget=budget, tool_budget=150, pinned_tools=("get_chart",)
    )
    agent = create_agent(
        model, tools=[get_chart, *others], middleware=[TrimmingMiddleware(trimmer)]
    )
    question = "What does the sales chart for March show? Use get_chart."
    agent.invoke({"messages": [*shelf_notes(12), HumanMessage(question)]}, {"recursion_limit": 12})

    assert len(bodies.sent) == 3
    sent_image = [
        any(isinstance(m.get("content"), list) for m in body["messages"]) for body in bodies.sent
    ]
    assert sent_image[:2] == [False, True]  # sent with the call that added it
    for body in bodies.sent:
        assert question in [m.get("content") for m in body["messages"]]
        assert [t["function"]["name"] for t in body["tools"]] == ["recall", "get_chart"]


# --- (B) the model a trim names, and the keyed model copies --------------------------------------


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + "record " * 60


QUESTION = {"messages": [HumanMessage('Use lookup for "k". ' + "pad " * 60)]}


def test_a_calibration_under_another_name_of_the_model_learns_or_says_why_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    aliased = dataclasses.replace(QUICK, model=("qwen-7b-chat", "qwen-chat"), tokenizer="llama3")
    with running_simulator(aliased) as server:
        settings = settings_of(server)  # names "qwen-7b-chat"
        trimmer = PriorityTrimmer.from_settings(settings, budget=1_500)
        calibration = trimmer.options.calibration
        assert calibration is not None and calibration.model == "qwen-7b-chat"
        agent = create_agent(
            build_chat_model(settings, model="qwen-chat"),  # the same model, its other name
            [lookup],
            middleware=[TrimmingMiddleware(trimmer)],
        )
        handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
        with caplog.at_level(logging.WARNING):
            agent.invoke(QUESTION, {"callbacks": [handler]})

    warned = [
        r for r in caplog.records if r.levelno >= logging.WARNING and "qwen-chat" in r.message
    ]
    assert calibration.observations > 0 or warned


def keeping(sent: list[dict[str, Any]]) -> httpx.Client:
    """A client answering every request "ok" and keeping its body in ``sent``."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.read()))
        return chat_completion("ok")

    return httpx.Client(transport=httpx.MockTransport(answer))


def openai_model(sent: list[dict[str, Any]], base_url: str | None = None) -> ChatOpenAI:
    """A ``ChatOpenAI`` (on OpenAI's API unless ``base_url``) keeping each body."""
    return ChatOpenAI(
        model="gpt-4o",
        api_key="sk-test",  # type: ignore[arg-type]
        base_url=base_url,
        max_retries=0,
        http_client=keeping(sent),
    )


def run_once(model: Any) -> None:
    middleware = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)
    create_agent(model, middleware=[middleware]).invoke(
        {"messages": [HumanMessage("Plan my trip to Porto.")]}
    )


def configurable(sent: list[dict[str, Any]]) -> Any:
    """``init_chat_model`` with a configurable field: a ``_ConfigurableModel`` around a
    ``ChatOpenAI`` on OpenAI's API."""
    return init_chat_model(
        "openai:gpt-4o",
        api_key="sk-test",
        max_retries=0,
        http_client=keeping(sent),
        configurable_fields=("temperature",),
    )


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(
            lambda sent: openai_model(sent).with_fallbacks([openai_model([])]),
            id="with_fallbacks",
        ),
        pytest.param(configurable, id="configurable"),
    ],
)
def test_a_wrapped_chatopenai_on_openais_api_sends_the_conversations_key(wrap: Any) -> None:
    sent: list[dict[str, Any]] = []
    run_once(wrap(sent))

    (body,) = sent
    assert str(body.get("prompt_cache_key")).startswith("agent-latency-")


@pytest.mark.parametrize("base_url", [None, "http://gw.test/v1"], ids=["openai", "gateway"])
def test_a_users_key_bound_with_bind_is_sent_as_given_on_every_turn(base_url: str | None) -> None:
    sent: list[dict[str, Any]] = []
    bound = (
        openai_model(sent, base_url)
        .bind(prompt_cache_key="tenant-7")
        .with_retry(stop_after_attempt=1)
    )
    middleware = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False, cache_key=True)
    agent = create_agent(bound, middleware=[middleware])  # type: ignore[arg-type]
    messages: list[Any] = []
    for question in ("Plan my trip.", "And the hotel?"):
        messages = agent.invoke({"messages": [*messages, HumanMessage(question)]})["messages"]

    assert [body.get("prompt_cache_key") for body in sent] == ["tenant-7", "tenant-7"]


def test_bind_tools_gets_the_conversations_key_and_keeps_its_tools() -> None:
    sent: list[dict[str, Any]] = []
    run_once(openai_model(sent).bind_tools([lookup]))

    (body,) = sent
    assert str(body.get("prompt_cache_key")).startswith("agent-latency-")
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup"]


def test_an_unnamed_calibration_learns_nothing_from_a_with_fallbacks_fallback() -> None:
    llama = dataclasses.replace(QUICK, model="llama-3.1-8b", tokenizer="llama3")
    down = dataclasses.replace(QUICK, error_rate=1.0)
    with running_simulator(llama) as fallback, running_simulator(down) as primary:
        calibration = PromptCalibration()  # names no model: the trim names none either
        trimmer = PriorityTrimmer(1_500, calibration=calibration)
        model = build_chat_model(settings_of(primary), max_retries=0).with_fallbacks(
            [build_chat_model(settings_of(fallback), max_retries=0)]
        )
        agent = create_agent(model, [lookup], middleware=[TrimmingMiddleware(trimmer)])
        handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
        result = agent.invoke(QUESTION, {"callbacks": [handler]})

    assert isinstance(result["messages"][-1], AIMessage)  # the fallback answered
    assert calibration.observations == 0
