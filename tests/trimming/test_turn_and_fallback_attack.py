"""Attacks, from the user's side, on two changes: a user message a tool added belongs to the
turn it came in, and the fallback work merged in c7fddc6 (``prompt_cache_key`` on a per-call copy
of the model, ``TrimResult.model``). Real ``create_agent`` / ``create_react_agent`` agents with
the real ``ChatOpenAI``, over HTTP to the simulator, or ``ChatOpenAI`` over
``httpx.MockTransport`` where OpenAI's own API is needed.

The first form of the turn rule (8cbe19c, ``_plan.turn_start``: the turn began at the user
message before the tool call a user message followed) had six defects, each a test here that
failed on it: a ``return_direct`` agent became one endless turn (every question follows a tool
result) and went over its budget from the 14th turn; recall and relevance still searched with
the image's message; once answered, the question and the image were two rounds and a cut kept
the image alone; a tool adding two images, or listing its image before its result, lost the
question; a long question before the image was no longer shortened. The rule now lives in the
analysis (``_rounds._Grouping._added_by_a_tool``): a user message with other parts than text
right after a tool result, a tool call or another such message is a message of the tool's turn,
not a question: the question stays the latest user message (the query, the one shortened), the
round holds the whole turn, and the image is kept with the newest tool call. A text a user
writes while a tool runs is a question of its own; it lost the question, the call and the late
result the agent was working on (an ``xfail`` here until db7506a: now kept with it,
``_plan._worked_on``).

Defects of the fallback work, each a test here that failed on it: a primary bound with
``bind``/``with_retry`` named no model on its trims, so a fallback's count taught the primary's
calibration again (the defect 891409a fixed), got no ``prompt_cache_key`` on OpenAI's API, and with
``cache_key=True`` sent its key to a fallback after ours (the defect 89c5133 fixed): the model is
now looked for through bindings (``_cache_key.chat_model_of``) and a binding is copied around a
keyed copy of its chat model. One middleware shared by two agents named the first model it saw
on every trim, so the settings' calibration learnt from the other agent's model: a calibration
now names its model (``calibration_for``), which the trim names.

What held is pinned: ``ChatMessage`` roles and OpenAI dicts follow the rule, an orphan result
does not make a message the tool's, ``keep_latest_user=False`` lets the question go (the newest
tool call stays, with its image), every priority order with either history selection sends the
whole turn within the budget, parallel tool calls each adding an image keep the question with
valid pairing, the pre-model hook, ``abatch`` and ``astream_events`` keep the question with the
image (each lost it before 8cbe19c), the prompt within an injected turn grows by appending, and
the keyed model copies: a user's own key is kept, the callbacks see the model's own
serialisation and name, threads sharing one middleware each send their conversation's key.

Not a defect: when the injected turn ends, the next question's prompt shares less than the last
one sent, as it does after a turn with a text result of the same size (the turn grows the
history past an epoch, and the cache-first cut moves).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelFallbackMiddleware
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.load import dumpd
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import InjectedState
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from support.conversations import IMAGE
from support.fakes import Recorder
from support.simulators import QUICK, settings_of
from support.wire import chat_completion

from agent_latency import LatencyCallbackHandler, PriorityTrimmer, build_chat_model
from agent_latency.sim import RunningSimulator, running_simulator
from agent_latency.tokens import PromptCalibration, TokenCounter
from agent_latency.trimming import TrimmingMiddleware, recall_tool
from agent_latency.trimming._cache_key import conversation_cache_key

FACT = "the Zephyr project budget is 4.2 million euros"
QUESTION = "What was the Zephyr project budget? Show me its chart."


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(QUICK) as running:
        yield running


@pytest.fixture(scope="module")
def llama() -> Iterator[RunningSimulator]:
    """Another server, counting in Llama 3's tokens."""
    config = dataclasses.replace(QUICK, model="llama-3.1-8b", tokenizer="llama3")
    with running_simulator(config) as running:
        yield running


def history(rounds: int = 30) -> list[BaseMessage]:
    """Earlier rounds of ~70 tokens, the fourth stating :data:`FACT`."""
    messages: list[BaseMessage] = []
    for r in range(rounds):
        if r == 3:
            messages += [HumanMessage(f"Note this: {FACT}."), AIMessage("Noted.")]
        else:
            messages += [
                HumanMessage(f"Tell me about topic {r}. " + "more words here " * 8),
                AIMessage(f"Topic {r} is about things. " + "filler text " * 12),
            ]
    return messages


def image(text: str = "Here is the chart image.") -> HumanMessage:
    return HumanMessage([{"type": "text", "text": text}, IMAGE])


def has_image(message: BaseMessage) -> bool:
    content = message.content
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "image_url" for part in content
    )


def asked(prompt: list[BaseMessage]) -> bool:
    """Whether ``prompt`` sends :data:`QUESTION`."""
    return any(message.text == QUESTION for message in prompt)


def chart_tool(
    *images: HumanMessage, image_first: bool = False, said: str = "The chart is attached."
) -> BaseTool:
    """``get_chart``, which adds ``images`` beside its result ``said`` (before it with
    ``image_first``) the first time a conversation calls it, and returns the result alone after
    that (the simulator calls a tool again after a user message)."""

    @tool
    def get_chart(
        project: str,
        state: Annotated[dict[str, Any], InjectedState],
        tool_call_id: Annotated[str, InjectedToolCallId],
    ) -> Command[Any]:
        """Fetches the budget chart of a project as an image."""
        result = ToolMessage(said, tool_call_id=tool_call_id)
        if any(has_image(message) for message in state["messages"]):
            return Command(update={"messages": [result]})
        added = [*images, result] if image_first else [result, *images]
        return Command(update={"messages": added})

    return get_chart


def run_agent(
    sim: RunningSimulator,
    budget: int,
    tools: list[BaseTool],
    messages: list[BaseMessage],
) -> Recorder:
    """One invocation of a ``create_agent`` with ``TrimmingMiddleware``; what each call sent."""
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=budget)
    agent = create_agent(
        build_chat_model(settings), tools=tools, middleware=[TrimmingMiddleware(trimmer)]
    )
    calls = Recorder()
    agent.invoke({"messages": messages}, {"callbacks": [calls], "recursion_limit": 12})
    return calls


# --- (A) defects: the current turn -------------------------------------------------------------


@tool(return_direct=True)
def lookup_order(number: str) -> str:
    """Looks an order up in the shop's database."""
    return f"Order {number}: shipped on Monday from the north warehouse. " + "Tracking. " * 6


def test_a_return_direct_agent_over_many_turns_stays_within_the_budget(
    sim: RunningSimulator,
) -> None:
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=600)
    agent = create_agent(
        build_chat_model(settings),
        tools=[lookup_order],
        middleware=[TrimmingMiddleware(trimmer)],
        checkpointer=InMemorySaver(),
    )
    calls = Recorder()
    config: Any = {"configurable": {"thread_id": "orders"}, "callbacks": [calls]}
    for turn in range(20):
        question = f'Look order "{turn}" up, please: where is it now and when does it arrive?'
        agent.invoke({"messages": [HumanMessage(question)]}, config)

    assert len(calls.trims) == 20  # one model call a turn: the tool's result ends it
    assert [trim.over_budget for trim in calls.trims] == [False] * 20


@pytest.mark.parametrize("integration", ["middleware", "pre_model_hook"])
def test_the_calls_after_an_injected_image_keep_what_the_question_recalled(
    sim: RunningSimulator, integration: str
) -> None:
    messages = [*history(), HumanMessage(QUESTION)]
    budget = 1_100
    if integration == "middleware":
        calls = run_agent(sim, budget, [chart_tool(image())], messages)
    else:
        calls = run_hook_agent(sim, budget, chart_tool(image()), messages)

    assert len(calls.prompts) == 3  # the question, after the image, after the chart again
    assert [any(FACT in m.text for m in prompt) for prompt in calls.prompts] == [True] * 3


@pytest.mark.parametrize("prefix_stable", [True, False], ids=["recall", "moving cut"])
def test_after_an_injected_image_the_history_is_chosen_for_the_question(
    prefix_stable: bool,
) -> None:
    counter = TokenCounter.for_model("gpt-4o")
    before_tool = [SystemMessage("Be brief."), *history(), HumanMessage(QUESTION)]
    turn = [AIMessage("", tool_calls=[_call("get_chart", "c1")])]
    turn += [ToolMessage("The chart is attached.", tool_call_id="c1"), image()]

    lost = []
    for budget in range(450, 1_600, 50):  # at 400 the turn, its image kept, leaves no room
        trimmer = PriorityTrimmer(budget, token_counter=counter, prefix_stable=prefix_stable)
        first = trimmer.trim(before_tool).messages
        after = trimmer.trim([*before_tool, *turn]).messages
        if any(FACT in m.text for m in first) and not any(FACT in m.text for m in after):
            lost.append(budget)
    assert lost == []


def run_hook_agent(
    sim: RunningSimulator, budget: int, chart: BaseTool, messages: list[BaseMessage]
) -> Recorder:
    """One invocation of a ``create_react_agent`` with the pre-model hook and its recall tool."""
    import warnings

    from langgraph.prebuilt import create_react_agent

    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=budget)
    hook = trimmer.as_pre_model_hook(prompt="Be brief.", tools=[chart])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated for create_agent
        graph = create_react_agent(
            build_chat_model(settings),
            [chart, recall_tool(hook)],
            prompt="Be brief.",
            pre_model_hook=hook,
        )
    calls = Recorder()
    graph.invoke({"messages": messages}, {"callbacks": [calls], "recursion_limit": 12})
    return calls


@pytest.mark.parametrize(("selection", "budget"), [("cache_first", 1_100), ("age", 800)])
def test_after_the_turn_an_image_is_never_sent_without_its_question(
    sim: RunningSimulator, selection: str, budget: int
) -> None:
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=budget, history_selection=selection)
    agent = create_agent(
        build_chat_model(settings),
        tools=[chart_tool(image())],
        middleware=[TrimmingMiddleware(trimmer)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "charts"}}
    agent.invoke({"messages": [*history(), HumanMessage(QUESTION)]}, config)
    calls = Recorder()
    next_question = HumanMessage("Thanks. Now tell me about topic 7.")
    agent.invoke({"messages": [next_question]}, {**config, "callbacks": [calls]})

    assert calls.prompts  # the next turn's calls
    for prompt in calls.prompts:
        assert asked(prompt) or not any(has_image(m) for m in prompt)


def test_a_tool_adding_two_user_messages_keeps_the_question(sim: RunningSimulator) -> None:
    charts = chart_tool(image("Chart 1."), image("Chart 2."))
    calls = run_agent(sim, 1_100, [charts], [*history(), HumanMessage(QUESTION)])

    after = [prompt for prompt in calls.prompts if any(has_image(m) for m in prompt)]
    assert len(after) == 2
    assert [asked(prompt) for prompt in after] == [True, True]


def test_an_image_listed_before_its_tool_result_keeps_the_question(
    sim: RunningSimulator,
) -> None:
    get_chart = chart_tool(image(), image_first=True, said="The chart is attached above.")
    calls = run_agent(sim, 1_100, [get_chart], [*history(), HumanMessage(QUESTION)])

    after = [prompt for prompt in calls.prompts if any(has_image(m) for m in prompt)]
    assert len(after) == 2
    for prompt in after:
        assert asked(prompt)
        assert any(isinstance(m, ToolMessage) for m in prompt)


@pytest.mark.parametrize(
    "between",
    [
        "image",
        "user writing",
    ],
)
def test_a_user_message_between_a_call_and_its_result_keeps_the_question_and_the_result(
    between: str,
) -> None:
    counter = TokenCounter.for_model("gpt-4o")
    question = HumanMessage(QUESTION)
    call = AIMessage("", tool_calls=[_call("get_chart", "c1")])
    result = ToolMessage("The chart shows a rise in March.", tool_call_id="c1")
    middle = image() if between == "image" else HumanMessage("Hurry up please.")
    turn = [question, call, middle, result]
    messages = [SystemMessage("Be brief."), *history(), *turn]
    needed = counter.count_messages([messages[0], *turn])

    lost = []
    for budget in range(needed + 20, 1_500, 20):
        sent = PriorityTrimmer(budget, token_counter=counter).trim(messages).messages
        if question not in sent or result not in sent:
            lost.append(budget)
    assert lost == []


def test_a_long_question_before_an_injected_image_is_still_shortened_to_fit(
    sim: RunningSimulator,
) -> None:
    report = "The quarterly numbers rose in several regions while costs fell. " * 120
    long_question = HumanMessage(f"Here is the report: {report} {QUESTION}")
    calls = run_agent(sim, 1_000, [chart_tool(image())], [*history(), long_question])

    (before, *after) = calls.trims
    assert any(d.rule == "shortened_to_fit" for d in before.decisions)
    assert not before.over_budget
    assert after
    assert [trim.over_budget for trim in after] == [False] * len(after)


# --- (A) what held -----------------------------------------------------------------------------


def _call(name: str, call_id: str) -> dict[str, Any]:
    return {"name": name, "args": {}, "id": call_id, "type": "tool_call"}


def _dict_turn() -> list[Any]:
    return [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "The chart is attached."},
        {"role": "user", "content": [{"type": "text", "text": "Here is the chart."}, IMAGE]},
    ]


TURNS: dict[str, Callable[[], list[Any]]] = {
    "ChatMessage user": lambda: [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[_call("g", "c1")]),
        ToolMessage("The chart is attached.", tool_call_id="c1"),
        ChatMessage(role="user", content=[{"type": "text", "text": "Here it is."}, IMAGE]),
    ],
    "ChatMessage tool": lambda: [
        ChatMessage(role="user", content=QUESTION),
        AIMessage("", tool_calls=[_call("g", "c1")]),
        ChatMessage(role="tool", content="Attached.", additional_kwargs={"tool_call_id": "c1"}),
        image(),
    ],
    "OpenAI dicts": _dict_turn,
    "an answer, then tool calls after the image": lambda: [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[_call("g", "c1")]),
        ToolMessage("The chart is attached.", tool_call_id="c1"),
        image(),
        AIMessage("", tool_calls=[_call("h", "c2")]),
        ToolMessage("The legend: blue is 2025.", tool_call_id="c2"),
    ],
}


@pytest.mark.parametrize("shape", list(TURNS))
def test_every_message_shape_keeps_the_question_with_the_tools_image(shape: str) -> None:
    counter = TokenCounter.for_model("gpt-4o")
    messages: list[Any] = [SystemMessage("Be brief."), *history(), *TURNS[shape]()]
    whole = PriorityTrimmer(100_000, token_counter=counter).trim(messages)
    turn = whole.decisions[61:]
    assert "history" not in {d.priority_class for d in turn}  # all of it the current turn's
    needed = whole.decisions[0].tokens + sum(d.tokens for d in turn) + whole.framing_tokens

    for budget in (needed, needed + 150, needed + 400):
        result = PriorityTrimmer(budget, token_counter=counter).trim(messages)
        assert QUESTION in [message.text for message in result.messages], budget
        assert not result.over_budget


def test_an_orphan_result_before_a_user_message_does_not_extend_the_turn() -> None:
    counter = TokenCounter.for_model("gpt-4o")
    messages = [
        *history(4),
        HumanMessage("An earlier question."),
        ToolMessage("A result no call asked for.", tool_call_id="nobody"),
        HumanMessage("The question."),
    ]
    result = PriorityTrimmer(10_000, token_counter=counter).trim(messages)
    classes = [d.priority_class for d in result.decisions]
    assert classes[-3:] == ["history", "history", "latest_user"]
    assert [d.rule for d in result.decisions][-2] == "orphan_tool_result"


def test_without_keep_latest_user_the_question_may_go_and_the_tools_image_stays() -> None:
    counter = TokenCounter.for_model("gpt-4o")
    turn = [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[_call("g", "c1")]),
        ToolMessage("The chart is attached.", tool_call_id="c1"),
        image(),
    ]
    messages = [SystemMessage("Be brief."), *history(), *turn]
    trimmer = PriorityTrimmer(120, token_counter=counter, keep_latest_user=False)

    result = trimmer.trim(messages)

    decisions = result.decisions[-4:]
    assert [d.priority_class for d in decisions] == [
        "latest_user",
        "tool_result",
        "tool_result",
        "tool_result",
    ]
    assert [d.rule for d in decisions][1:] == ["latest_tool_call"] * 3
    assert not any(d.rule == "must_keep" for d in decisions)


def test_every_priority_order_and_selection_sends_the_whole_injected_turn() -> None:
    counter = TokenCounter.for_model("gpt-4o")
    system = SystemMessage("Be brief.")
    turn = [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[_call("g", "c1")]),
        ToolMessage("The chart is attached.", tool_call_id="c1"),
        image(),
    ]
    messages = [system, *history(), *turn]
    needed = counter.count_messages([system, *turn])

    for order in itertools.permutations(["system", "latest_user", "tool_result", "history"]):
        for selection in ("cache_first", "age"):
            for budget in range(needed, 1_500, 200):
                result = PriorityTrimmer(
                    budget, token_counter=counter, priority_order=order, history_selection=selection
                ).trim(messages)
                assert result.messages[-4:] == turn, (order, selection, budget)
                assert not result.over_budget


@pytest.mark.parametrize("budget", [800, 1_000])
def test_parallel_calls_each_adding_an_image_keep_the_question_and_valid_pairing(
    sim: RunningSimulator, budget: int
) -> None:
    question = "Show me the budget chart and the team photo of the Zephyr project."
    fetched: list[str] = []

    def picture(name: str) -> BaseTool:
        def fetch(project: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
            fetched.append(name)
            result = ToolMessage(f"The {name} is attached.", tool_call_id=tool_call_id)
            if len(fetched) > 2:
                return Command(update={"messages": [result]})
            return Command(update={"messages": [result, image(f"The {name}.")]})

        return tool(name, description="Fetches a picture of a project.")(fetch)

    tools = [picture("budget_chart"), picture("team_photo")]
    # The simulator refuses, as OpenAI does, a tool result that does not follow its call: the
    # late results (each image came between the call and the other result) are sent with it.
    calls = run_agent(sim, budget, tools, [*history(), HumanMessage(question)])

    assert sorted(fetched[:2]) == ["budget_chart", "team_photo"]  # in parallel, with an image
    after = calls.prompts[1:]
    assert len(after) == 2
    assert sum(map(has_image, after[0])) == 2  # sent with the calls that added them
    for prompt in after:
        assert any(m.text == question for m in prompt)
        called = {c["id"] for m in prompt if isinstance(m, AIMessage) for c in m.tool_calls}
        assert called == {m.tool_call_id for m in prompt if isinstance(m, ToolMessage)}


def test_the_pre_model_hook_keeps_the_question_with_the_image(sim: RunningSimulator) -> None:
    calls = run_hook_agent(sim, 600, chart_tool(image()), [*history(), HumanMessage(QUESTION)])
    after = calls.prompts[1:]
    assert len(after) == 2
    assert any(has_image(m) for m in after[0])  # sent with the call that added it
    assert [asked(prompt) for prompt in after] == [True, True]


@pytest.mark.parametrize(
    "budget",
    [1_100, 1_300, 1_800],
)
def test_within_an_injected_turn_each_prompt_begins_with_the_one_before(
    sim: RunningSimulator, budget: int
) -> None:
    calls = run_agent(sim, budget, [chart_tool(image())], [*history(), HumanMessage(QUESTION)])
    texts = [[(m.type, m.text) for m in prompt] for prompt in calls.prompts]
    assert len(texts) == 3
    for before, after in itertools.pairwise(texts):
        assert after[: len(before)] == before


async def test_abatch_and_astream_events_keep_the_question_with_the_image(
    sim: RunningSimulator,
) -> None:
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=600)
    middleware = TrimmingMiddleware(trimmer)

    def agent() -> Any:
        return create_agent(
            build_chat_model(settings), tools=[chart_tool(image())], middleware=[middleware]
        )

    calls = [Recorder(), Recorder()]
    inputs = [{"messages": [*history(), HumanMessage(QUESTION)]}] * 2
    await agent().abatch(
        inputs, [{"callbacks": [calls[0]]}, {"callbacks": [calls[1]]}], max_concurrency=2
    )
    streamed = Recorder()
    async for _ in agent().astream_events(inputs[0], {"callbacks": [streamed]}, version="v2"):
        pass

    for recorder in (*calls, streamed):
        after = recorder.prompts[1:]
        assert len(after) == 2
        assert any(has_image(m) for m in after[0])  # sent with the call that added it
        assert [asked(prompt) for prompt in after] == [True, True]


# --- (B) defects: the model a trim names, and the keyed model copies ---------------------------


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + "record " * 60


WRAPS: dict[str, Callable[[BaseChatModel], Runnable[Any, Any]]] = {
    "bind": lambda model: model.bind(temperature=0.0),
    "with_retry": lambda model: model.with_retry(stop_after_attempt=1),
}


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_a_bound_primarys_fallback_teaches_its_calibration_nothing(
    llama: RunningSimulator, wrap: str
) -> None:
    down = dataclasses.replace(QUICK, error_rate=1.0)
    with running_simulator(down) as primary_server:
        settings = settings_of(primary_server)
        calibration = PromptCalibration()
        trimmer = PriorityTrimmer.from_settings(settings, budget=1_500, calibration=calibration)
        fallback = ModelFallbackMiddleware(build_chat_model(settings_of(llama), max_retries=0))
        primary = WRAPS[wrap](build_chat_model(settings, max_retries=0))
        agent = create_agent(
            primary,  # type: ignore[arg-type]  # create_agent runs bound models too
            tools=[lookup],
            middleware=[fallback, TrimmingMiddleware(trimmer)],
        )
        handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
        calls = Recorder()
        messages: list[Any] = []
        for turn in range(3):
            messages = [*messages, HumanMessage(f'Use lookup for "k{turn}". ' + "pad " * 60)]
            config: Any = {"callbacks": [handler, calls]}
            messages = agent.invoke({"messages": messages}, config)["messages"]

    assert len(calls.server_tokens) == 6  # every call answered by the fallback
    assert calibration.observations == 0
    assert calibration.factor == 1.0


def openai_model(
    sent: list[dict[str, Any]], *, up: bool = True, base_url: str | None = None
) -> ChatOpenAI:
    """A ``ChatOpenAI`` (on OpenAI's API unless ``base_url``) keeping each body; down: 503."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.read()))
        if not up:
            return httpx.Response(503, json={"error": {"message": "down"}})
        return chat_completion("ok")

    return ChatOpenAI(
        model="gpt-4o",
        api_key="sk-test",  # type: ignore[arg-type]
        base_url=base_url,
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
    )


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_a_bound_chatopenai_on_openais_api_sends_the_conversations_key(wrap: str) -> None:
    sent: list[dict[str, Any]] = []
    middleware = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)
    agent = create_agent(WRAPS[wrap](openai_model(sent)), middleware=[middleware])  # type: ignore[arg-type]
    agent.invoke({"messages": [HumanMessage("Plan my trip to Porto.")]})

    (body,) = sent
    assert str(body.get("prompt_cache_key")).startswith("agent-latency-")


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_a_bound_primarys_key_does_not_reach_the_fallback(wrap: str) -> None:
    primary_sent: list[dict[str, Any]] = []
    fallback_sent: list[dict[str, Any]] = []
    primary = WRAPS[wrap](openai_model(primary_sent, up=False, base_url="http://gw.test/v1"))
    fallback = openai_model(fallback_sent, base_url="http://other.test/v1")
    ours = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False, cache_key=True)
    agent = create_agent(primary, middleware=[ours, ModelFallbackMiddleware(fallback)])  # type: ignore[arg-type]
    agent.invoke({"messages": [HumanMessage("hello")]})

    (primary_body,) = primary_sent
    (fallback_body,) = fallback_sent
    assert str(primary_body.get("prompt_cache_key")).startswith("agent-latency-")
    assert "prompt_cache_key" not in fallback_body


def test_a_shared_middleware_teaches_the_settings_models_calibration_from_its_calls_only(
    sim: RunningSimulator, llama: RunningSimulator
) -> None:
    settings = settings_of(sim)  # the trimmer and its calibration are this model's
    trimmer = PriorityTrimmer.from_settings(settings, budget=1_500)
    calibration = trimmer.options.calibration
    assert calibration is not None and calibration.model == settings.llm.model
    shared = TrimmingMiddleware(trimmer)
    worker = create_agent(build_chat_model(settings_of(llama)), [lookup], middleware=[shared])
    main = create_agent(build_chat_model(settings), [lookup], middleware=[shared])
    handler = LatencyCallbackHandler(tracer_provider=TracerProvider(), log_every_request=False)
    question = {"messages": [HumanMessage('Use lookup for "k". ' + "pad " * 60)]}
    for agent in (worker, worker, main, main):
        agent.invoke(question, {"callbacks": [handler]})

    # The main agent's server counts in its tokens, as the trimmer does: nothing to correct.
    assert calibration.observations == 4  # its own four calls
    assert calibration.factor == 1.0


# --- (B) what held -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        {"model_kwargs": {"prompt_cache_key": "tenant-7"}},
        {"extra_body": {"prompt_cache_key": "tenant-7"}},
    ],
    ids=["model_kwargs", "extra_body"],
)
def test_a_users_own_key_is_sent_and_the_model_left_as_it_was(given: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []
    model = openai_model(sent).model_copy(update=given)
    middleware = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)
    agent = create_agent(model, middleware=[middleware])
    messages: list[Any] = []
    for question in ("Plan my trip.", "And the hotel?"):
        messages = agent.invoke({"messages": [*messages, HumanMessage(question)]})["messages"]

    assert [body["prompt_cache_key"] for body in sent] == ["tenant-7", "tenant-7"]
    assert model.model_kwargs == given.get("model_kwargs", {})


class Starts(BaseCallbackHandler):
    """Keeps what each chat model call's start tells the callbacks."""

    def __init__(self) -> None:
        self.starts: list[tuple[Any, Any, Any]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.starts.append((serialized, kwargs.get("metadata"), kwargs.get("invocation_params")))


def test_the_callbacks_see_the_models_own_serialisation_name_and_the_key() -> None:
    sent: list[dict[str, Any]] = []
    model = openai_model(sent)
    agent = create_agent(
        model, middleware=[TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)]
    )
    starts = Starts()
    agent.invoke({"messages": [HumanMessage("Plan my trip.")]}, {"callbacks": [starts]})

    ((serialized, metadata, params),) = starts.starts
    assert serialized == dumpd(model)
    assert metadata["ls_model_name"] == "gpt-4o"
    assert params["prompt_cache_key"] == sent[0]["prompt_cache_key"]


def test_threads_sharing_one_middleware_each_send_their_conversations_key() -> None:
    sent: list[dict[str, Any]] = []
    model = openai_model(sent)
    agent = create_agent(
        model, middleware=[TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)]
    )

    def converse(city: str) -> None:
        messages: list[Any] = []
        for question in (f"Plan my trip to {city}.", "And the hotel?", "And the train?"):
            messages = agent.invoke({"messages": [*messages, HumanMessage(question)]})["messages"]

    threads = [threading.Thread(target=converse, args=(c,)) for c in ("Porto", "Oslo", "Riga")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(sent) == 9
    for body in sent:
        first = HumanMessage(body["messages"][0]["content"])
        assert body["prompt_cache_key"] == conversation_cache_key([first])
    assert len({body["prompt_cache_key"] for body in sent}) == 3
    assert model.model_kwargs == {}


def test_a_model_without_model_kwargs_gets_the_key_as_a_call_keyword() -> None:
    """``KeyedModels`` has nothing to copy the key into: it goes with the call, as before."""
    model = GenericFakeChatModel(messages=iter([AIMessage("ok")]))
    middleware = TrimmingMiddleware(PriorityTrimmer(2_000), recall=False, cache_key=True)
    starts, calls = Starts(), Recorder()
    agent = create_agent(model, middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Plan my trip.")]}, {"callbacks": [starts, calls]})

    ((_, _, params),) = starts.starts
    assert params["prompt_cache_key"] == conversation_cache_key([HumanMessage("Plan my trip.")])
    (trim,) = calls.trims
    assert trim.model is None  # it reports no model name: any call's count teaches, as before
