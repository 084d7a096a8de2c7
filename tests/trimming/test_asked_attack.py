"""Attacks, from the user's side, on the changes of fac30e7..868d977: what the turn asks
(``Plan.asked``: the latest user question with the user messages a tool added after it in its
round, ``MessageFacts.asking``), the configurable model the middleware built for the call's
config (868d977, since reverted), the recall tool reading back parts other than text
and a tool's user messages (``RecallingTrimmer.read(..., conversation=...)``). Real
``create_agent`` agents with ``ChatOpenAI`` over HTTP to the simulator, or over
``httpx.MockTransport`` where OpenAI's own API is needed.

Fixed, each failing on 868d977: a user's own photo question, asked after a ``return_direct``
tool's result, was kept only while its tool call was the newest: once the agent called a tool
for it, the question went with the earlier step, which may be dropped (the model got the call
and result made for the question without it). Position alone cannot tell it from a tool's
screenshot, which must stay droppable: the trim now reads the tools' ``return_direct`` flags
(``test_return_direct.py``). A user's photo question after an unanswered tool call (a tool
that crashed or was interrupted) was taken for one the tool added and left out with the call,
the request ending with the question before it (5209765: such messages are must-keep with the
question); handing ``create_agent`` the model built for the call's config (868d977, reverted in
5209765) changed its structured-output mode from a tool to ``json_schema``, named the first
call's model on every call and missed wrapped models; the recall tool's passage of a long
message cut off the part names written after its text (d706333: named before it); a
configurable model got no ``prompt_cache_key`` and named no model, alone or wrapped in
``with_retry``, ``bind`` or ``with_fallbacks``, nor the model each call's config picks (now a
keyed copy of the configurable model, its name read from the model built for each call).

What held is pinned: a reused trimmer trims as a fresh one (a replica) on every call of growing
conversations with tool-added images (``HumanMessage`` and ``ChatMessage(role="user")``, OpenAI
and LangChain standard image parts, parallel calls each adding images, ``return_direct``
turns, both history selections, ``compact_tool_results``), also with images given to or taken
from earlier user messages in place between calls; parallel calls' long captions are shortened
to fit with their images kept, and when even that does not fit the cause names "user messages
with images"; a configurable model's call config reaches the body through ``ainvoke`` and
``abatch`` (each input its own), and a configured switch to another server sends no
``prompt_cache_key``; the recall tool reads a tool's ``ChatMessage`` file and a standard audio
block back as "added by a tool" with ``[file]``/``[audio]`` through a real agent.

Probed, no defect found: a tool's caption adding words the question lacks (which now join the
cut's query) did not move the history sent before the turn between the turn's first call and
the one after the image came (recall brings the round the caption names after the prefix),
over 4-23 rounds and budgets 500-1,800.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    ToolMessage,
)
from pydantic import BaseModel
from support.conversations import IMAGE, shelf_notes
from support.fakes import KeepsRequestBodies
from support.shop import PHOTO_ASK, check_warranty, lookup_order
from support.simulators import chat_openai_of
from support.wire import chat_completion

from agent_latency import PriorityTrimmer
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import TrimmingMiddleware, TrimResult

STANDARD_IMAGE = {"type": "image", "source_type": "url", "url": "https://example.com/chart.png"}
COUNTER = TokenCounter.for_model("gpt-4o")


def texts_of(body: dict[str, Any]) -> list[str]:
    """The text of each message of a request body, its parts' texts joined."""
    found = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
        found.append(content or "")
    return found


def with_photo(text: str) -> HumanMessage:
    return HumanMessage([{"type": "text", "text": text}, IMAGE])


# --- the question a turn asks, with images -------------------------------------------------------


def test_a_photo_question_after_a_return_direct_result_stays_while_the_agent_works_on_it(
    sim: RunningSimulator,
) -> None:
    def second_turn(asked: BaseMessage) -> list[dict[str, Any]]:
        bodies = KeepsRequestBodies()
        model = chat_openai_of(sim, http_client=httpx.Client(transport=bodies))
        agent = create_agent(
            model,
            tools=[lookup_order, check_warranty],
            middleware=[TrimmingMiddleware(PriorityTrimmer(600, token_counter=COUNTER))],
        )
        first = [*shelf_notes(4), HumanMessage("Use lookup_order for order 1234.")]
        before = agent.invoke({"messages": first})["messages"]
        assert isinstance(before[-1], ToolMessage)  # the tool answered directly: the turn ended
        sent = len(bodies.sent)
        agent.invoke({"messages": [*before, asked]})
        return bodies.sent[sent:]

    as_text = second_turn(HumanMessage(PHOTO_ASK))
    as_photo = second_turn(with_photo(PHOTO_ASK))

    assert len(as_text) == len(as_photo) == 2  # the call to check_warranty, then the answer
    for body in as_text:
        assert PHOTO_ASK in texts_of(body)
    for body in as_photo:
        assert PHOTO_ASK in texts_of(body)


# Failed before 5209765 (the photo question was glued to the unanswered call and left out).
def test_a_photo_question_after_a_dangling_tool_call_is_the_question(
    sim: RunningSimulator,
) -> None:
    call = {"name": "lookup_order", "args": {"number": "1234"}, "id": "c9", "type": "tool_call"}
    ask = "Forget the order. Is the parcel in this photo damaged? " + "It looks dented. " * 30

    def sent_for(asked: BaseMessage) -> tuple[TrimResult, dict[str, Any]]:
        history = [
            *shelf_notes(6),
            HumanMessage("Use lookup_order for order 1234."),
            AIMessage("", tool_calls=[call]),  # the tool crashed: no result was ever stored
            asked,
        ]
        bodies = KeepsRequestBodies()
        trims: list[TrimResult] = []
        model = chat_openai_of(sim, http_client=httpx.Client(transport=bodies))
        trimmer = PriorityTrimmer(400, token_counter=COUNTER)
        agent = create_agent(model, middleware=[TrimmingMiddleware(trimmer, recall=False)])
        agent.invoke({"messages": history}, {"callbacks": [Trims(trims)]})
        (trim,), (body,) = trims, bodies.sent
        return trim, body

    for asked in (HumanMessage(ask), with_photo(ask)):  # as text, then with its photo
        trim, body = sent_for(asked)
        assert not trim.over_budget
        assert texts_of(body)[-1].startswith("Forget the order. Is the parcel")  # maybe shortened


def test_parallel_calls_long_captions_are_shortened_to_fit_their_images_kept() -> None:
    def caption(month: str) -> str:
        return f"Chart of {month} sales by region. " + "North up, south flat. " * 40

    calls = [
        {"name": "get_chart", "args": {"m": m}, "id": f"c{m}", "type": "tool_call"}
        for m in ("March", "April")
    ]
    march = ChatMessage(role="user", content=[{"type": "text", "text": caption("March")}, IMAGE])
    april = HumanMessage([{"type": "text", "text": caption("April")}, IMAGE])
    messages = [
        *shelf_notes(4),
        HumanMessage("Compare the March and April sales charts?"),
        AIMessage("", tool_calls=calls),
        ToolMessage("Chart attached.", tool_call_id="cMarch"),
        march,
        ToolMessage("Chart attached.", tool_call_id="cApril"),
        april,
    ]

    fits = PriorityTrimmer(600, token_counter=COUNTER).trim(messages)
    too_small = PriorityTrimmer(500, token_counter=COUNTER).trim(messages)

    assert not fits.over_budget
    sent_results = [m for m in fits.messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in sent_results] == ["cMarch", "cApril"]
    sent_captions = fits.messages[-2:]
    for sent, given in zip(sent_captions, (march, april), strict=True):
        assert isinstance(sent.content, list) and isinstance(given.content, list)
        assert sent.content[-1] == given.content[-1]  # the image
        assert len(sent.text) < len(given.text)  # the caption shortened
    assert too_small.over_budget
    assert (too_small.over_budget_cause or "").startswith("user messages with images: ")


# --- a reused trimmer trims as a fresh one --------------------------------------------------------


WORDS = (
    "zephyr",
    "parcel",
    "insurance",
    "dent",
    "chart",
    "march",
    "sales",
    "tram",
    "quokka",
    "orbit",
)


def growing_conversation(rng: random.Random) -> list[BaseMessage]:
    """Turns of text and photo questions, tool calls (some parallel, some ``return_direct``)
    whose results come with 0-2 user messages with images, in the kinds a user's app sends."""

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    def with_image(text: str) -> BaseMessage:
        content = [{"type": "text", "text": text}, rng.choice([IMAGE, STANDARD_IMAGE])]
        if rng.random() < 0.3:
            return ChatMessage(role="user", content=content)
        return HumanMessage(content)

    messages: list[BaseMessage] = []
    calls = 0
    for _ in range(rng.randint(3, 9)):
        kind = rng.choice(["text", "photo", "tool", "tool", "parallel", "direct"])
        question = words(rng.randint(3, 60)) + rng.choice("?.")
        messages.append(with_image(question) if kind == "photo" else HumanMessage(question))
        if kind in ("tool", "parallel", "direct"):
            ids = [f"c{calls + i}" for i in range(2 if kind == "parallel" else 1)]
            calls += len(ids)
            messages.append(
                AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": i} for i in ids])
            )
            for i in ids:
                messages.append(ToolMessage(words(rng.randint(5, 200)), tool_call_id=i))
                for _ in range(rng.choice([0, 1, 1, 2])):
                    messages.append(with_image("Chart: " + words(rng.randint(2, 80))))
            if kind == "direct":
                continue
        messages.append(AIMessage(words(rng.randint(3, 40))))
    return messages


@pytest.mark.parametrize("edits", [False, True], ids=["growing", "edited"])
def test_a_reused_trimmer_trims_growing_conversations_with_images_as_a_fresh_one(
    edits: bool,
) -> None:
    for seed in range(60):
        rng = random.Random(seed)
        messages = growing_conversation(rng)
        options: dict[str, Any] = {
            "history_selection": rng.choice(["cache_first", "age"]),
            "compact_tool_results": rng.random() < 0.3,
        }
        budget = rng.choice([150, 300, 450, 600, 900, 1300])
        reused = PriorityTrimmer(budget, token_counter=COUNTER, **options)
        for end in range(1, len(messages) + 1):
            if edits and rng.random() < 0.4:  # a user's edit in place, between calls
                users = [m for m in messages[:end] if isinstance(m, HumanMessage | ChatMessage)]
                edited = rng.choice(users) if users else None
                if edited is not None and isinstance(edited.content, list):
                    edited.content = edited.text or "x"  # the image taken away
                elif edited is not None:
                    edited.content = [{"type": "text", "text": edited.content}, IMAGE]
            result = reused.trim(messages[:end])
            fresh = PriorityTrimmer(budget, token_counter=COUNTER, **options).trim(messages[:end])
            assert result.messages == fresh.messages, (seed, end)
            assert result.decisions == fresh.decisions, (seed, end)


# --- the configurable model ----------------------------------------------------------------------


class Trims(BaseCallbackHandler):
    """Keeps the trims the middleware reports in ``results``."""

    def __init__(self, results: list[TrimResult]) -> None:
        self.results = results

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if isinstance(data, TrimResult):
            self.results.append(data)


def answering(sent: list[tuple[str, dict[str, Any]]]) -> httpx.MockTransport:
    """Answers every request "ok", keeping its URL and body in ``sent``."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append((str(request.url), json.loads(request.read())))
        return chat_completion("ok")

    return httpx.MockTransport(answer)


def configurable(sent: list[tuple[str, dict[str, Any]]], fields: Any) -> Any:
    """``init_chat_model`` on OpenAI's API with configurable ``fields``, keeping each request."""
    return init_chat_model(
        "openai:gpt-4o",
        api_key="sk-test",
        max_retries=0,
        http_client=httpx.Client(transport=answering(sent)),
        http_async_client=httpx.AsyncClient(transport=answering(sent)),
        configurable_fields=fields,
    )


def middleware() -> TrimmingMiddleware:
    return TrimmingMiddleware(PriorityTrimmer(2_000), recall=False)


TRIP = {"messages": [HumanMessage("Plan my trip to Porto.")]}


def test_a_configurable_models_trims_name_the_model_each_call_picks() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    results: list[TrimResult] = []
    agent = create_agent(configurable(sent, ("model",)), middleware=[middleware()])
    for model in ("gpt-4o", "gpt-4o-mini"):
        agent.invoke(TRIP, {"configurable": {"model": model}, "callbacks": [Trims(results)]})

    assert [body["model"] for _, body in sent] == ["gpt-4o", "gpt-4o-mini"]
    assert [result.model for result in results] == ["gpt-4o", "gpt-4o-mini"]


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda model: model.with_retry(stop_after_attempt=1), id="with_retry"),
        pytest.param(lambda model: model.bind(temperature=0.4), id="bind"),
        pytest.param(lambda model: model.with_fallbacks([model]), id="with_fallbacks"),
    ],
)
def test_a_wrapped_configurable_model_on_openais_api_is_keyed_and_named(wrap: Any) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    results: list[TrimResult] = []
    model = wrap(configurable(sent, ("temperature",)))
    create_agent(model, middleware=[middleware()]).invoke(
        TRIP, {"configurable": {"temperature": 0.3}, "callbacks": [Trims(results)]}
    )

    ((_, body),) = sent
    assert str(body.get("prompt_cache_key")).startswith("agent-latency-")
    assert [result.model for result in results] == ["gpt-4o"]


class Trip(BaseModel):
    """A trip."""

    city: str


# Failed on 868d977, which handed create_agent the model built for the call (reverted).
def test_adding_the_middleware_keeps_a_configurable_models_structured_output_mode() -> None:
    def sent_with(middlewares: list[Any]) -> dict[str, Any]:
        bodies: list[dict[str, Any]] = []

        def answer(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.read())
            bodies.append(body)
            if "response_format" in body:  # the JSON asked for, as the server would answer
                return chat_completion('{"city": "Porto"}')
            arguments = {"name": "Trip", "arguments": '{"city": "Porto"}'}
            call = {"id": "t1", "type": "function", "function": arguments}
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            completion = {"id": "1", "object": "chat.completion", "created": 0, "model": "m"}
            return httpx.Response(200, json={**completion, "choices": [choice]})

        model = init_chat_model(
            "openai:gpt-4o",
            api_key="sk-test",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(answer)),
            configurable_fields=("temperature",),
        )
        agent = create_agent(model, response_format=Trip, middleware=middlewares)
        state = agent.invoke(TRIP, {"recursion_limit": 4})
        assert state["structured_response"] == Trip(city="Porto")
        return bodies[0]

    plain, trimmed = sent_with([]), sent_with([middleware()])

    assert [t["function"]["name"] for t in plain["tools"]] == ["Trip"]
    assert "response_format" not in plain
    assert [t["function"]["name"] for t in trimmed.get("tools", [])] == ["Trip"]
    assert "response_format" not in trimmed


def test_a_configurable_model_that_cannot_be_built_fails_with_its_own_error() -> None:
    model = init_chat_model(configurable_fields=("model",), api_key="sk-test")
    errors = []
    for middlewares in ([], [middleware()]):
        with pytest.raises(ValueError) as raised:
            create_agent(model, middleware=middlewares).invoke(
                TRIP, {"configurable": {"model": "no-such-provider:x"}}
            )
        errors.append(str(raised.value))
    assert errors[0] == errors[1]


def test_a_configurable_models_async_calls_get_their_config_and_a_gateway_no_key() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    agent = create_agent(configurable(sent, ("temperature", "base_url")), middleware=[middleware()])

    async def run() -> None:
        await agent.ainvoke(TRIP, {"configurable": {"temperature": 0.3}})
        await agent.abatch(
            [{"messages": [HumanMessage(f"Plan my trip to {city}.")]} for city in ("Rome", "Oslo")],
            [{"configurable": {"temperature": t}} for t in (0.1, 0.9)],
        )
        await agent.ainvoke(TRIP, {"configurable": {"base_url": "http://gw.test/v1"}})

    asyncio.run(run())

    by_question = {texts_of(body)[-1]: (url, body) for url, body in sent}
    assert len(sent) == len(by_question) + 1  # the trip to Porto twice
    for question, temperature in (("Rome", 0.1), ("Oslo", 0.9)):
        _, body = by_question[f"Plan my trip to {question}."]
        assert body["temperature"] == temperature
    (openai, gateway) = [(url, body) for url, body in sent if "Porto" in texts_of(body)[-1]]
    assert openai[1]["temperature"] == 0.3
    assert gateway[0].startswith("http://gw.test/v1/")
    assert "prompt_cache_key" not in gateway[1]


# --- recall ---------------------------------------------------------------------------------------

AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
STANDARD_AUDIO = {
    "type": "audio",
    "source_type": "base64",
    "data": "UklGRg==",
    "mime_type": "audio/wav",
}
FILE = {
    "type": "file",
    "file": {"filename": "invoice.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
}


def fetched(*added: BaseMessage) -> list[BaseMessage]:
    """A turn whose tool added ``added`` with its result, answered, then 30 rounds of notes."""
    call = {"name": "get_records", "args": {"q": "March"}, "id": "c1", "type": "tool_call"}
    return [
        HumanMessage("Fetch the March records.", id="ask"),
        AIMessage("", tool_calls=[call], id="call"),
        ToolMessage("Records attached.", tool_call_id="c1", id="result"),
        *added,
        AIMessage("Got them.", id="answer"),
        *shelf_notes(30),
    ]


def test_recall_reads_a_tools_file_and_audio_back_through_an_agent(sim: RunningSimulator) -> None:
    invoice = ChatMessage(
        role="user", content=[{"type": "text", "text": "The walrus invoice."}, FILE], id="file"
    )
    clip = HumanMessage([{"type": "text", "text": "The walrus call."}, STANDARD_AUDIO], id="clip")
    agent = create_agent(
        chat_openai_of(sim),
        middleware=[TrimmingMiddleware(PriorityTrimmer(400, token_counter=COUNTER))],
    )
    asked = HumanMessage('Please recall "walrus" and tell me what it was.')
    state = agent.invoke({"messages": [*fetched(invoice, clip), asked]})
    (reply,) = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name]
    answer = reply.text + "\n"

    assert "[id file] added by a tool: [file] The walrus invoice.\n" in answer + "\n"
    assert "[id clip] added by a tool: [audio] The walrus call.\n" in answer + "\n"


# Failed before d706333 (the part names came after the text, past the passage).
def test_recall_names_the_recording_of_a_long_transcript_it_reads_a_passage_of() -> None:
    transcript = (
        "Transcript of the call. "
        + "Nothing of note was said here. " * 150
        + "The walrus invoice number is WX-7741. "
        + "More chatter follows. " * 150
    )
    recording = HumanMessage([{"type": "text", "text": transcript}, AUDIO], id="recording")
    recall = {"name": "recall", "args": {"query": "x"}, "id": "r1", "type": "tool_call"}
    asked = [
        HumanMessage("What was the walrus invoice number?"),
        AIMessage("", tool_calls=[recall]),
    ]
    hook = PriorityTrimmer(400, token_counter=COUNTER).as_pre_model_hook()

    answer = hook.read_back([*fetched(recording), *asked], "r1", "walrus invoice number")

    assert answer.startswith("[id recording] added by a tool: ")
    assert "WX-7741" in answer  # the stretch that matches
    assert "[audio]" in answer
