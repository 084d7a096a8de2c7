"""Runs started and ended across asyncio tasks, on the wire.

A real ``ChatOpenAI`` against the embedded simulator, the real OTLP exporter to a receiver the
test starts: LangChain's ``abatch`` starts each input's root run in a short-lived ``gather``
task, and ``astream_events`` runs the runnable in a task of its own, which it cancels when the
stream ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from opentelemetry.semconv.attributes import error_attributes
from support.otlp_receiver import OTLPReceiver, ReceivedSpan
from support.simulators import chat_openai_of

from agent_latency import PriorityTrimmer, Telemetry, configure_telemetry, semconv
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import PromptCalibration

FAST = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=5000)
SLOW_ANSWER = SimulatorConfig(
    overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=50, answer_tokens=300
)
INPUTS = 20
STATUS_UNSET, STATUS_ERROR = 0, 2


@pytest.fixture
def telemetry(otlp_receiver: OTLPReceiver) -> Iterator[Telemetry]:
    telemetry = configure_telemetry(
        exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
    )
    yield telemetry
    telemetry.shutdown()


def trimmed_chain(model: ChatOpenAI, calibration: PromptCalibration) -> Runnable[Any, Any]:
    """The README's ``prompt | trimmer | model``, with a history the budget cuts."""
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You answer questions about invoices."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    return prompt | PriorityTrimmer(budget=120, calibration=calibration) | model


def question(index: int) -> dict[str, Any]:
    history = [
        message
        for turn in range(8)
        for message in (HumanMessage(f"old question {turn} " * 12), AIMessage("an old answer"))
    ]
    return {"history": history, "question": f"What is credit note {index}?"}


def traces(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    grouped: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        grouped.setdefault(span.trace_id, []).append(span)
    return grouped


@pytest.mark.parametrize("way", ["abatch", "batch", "gather of ainvoke"])
def test_each_input_of_a_batch_is_one_trace_with_its_trim_on_the_chat_span(
    way: str, telemetry: Telemetry, otlp_receiver: OTLPReceiver
) -> None:
    # abatch gave 4 traces an input: the sequence's root ended 'abandoned' with the short-lived
    # gather task that started it, and prompt, trimmer and chat each became a root; no chat
    # span had the trim, and the calibration learnt nothing.
    handler = telemetry.handler()
    calibration = PromptCalibration()
    config: Any = {"callbacks": [handler]}
    inputs = [question(index) for index in range(INPUTS)]
    with running_simulator(FAST) as sim:
        chain = trimmed_chain(chat_openai_of(sim, max_retries=0), calibration)

        async def run() -> list[Any]:
            if way == "abatch":
                return await chain.abatch(inputs, config=config)
            return list(await asyncio.gather(*(chain.ainvoke(i, config=config) for i in inputs)))

        answers = chain.batch(inputs, config=config) if way == "batch" else asyncio.run(run())
        assert handler.open_runs == 0
        telemetry.shutdown()

    assert len(answers) == INPUTS
    grouped = traces(otlp_receiver.spans())
    assert len(grouped) == INPUTS
    for spans in grouped.values():
        by_id = {span.span_id: span for span in spans}
        (root,) = [span for span in spans if not span.parent_span_id]
        assert root.name == "chain RunnableSequence"
        assert root.attributes[semconv.OUTCOME] == "ok"
        (chat,) = [span for span in spans if span.name.startswith("chat ")]
        (trim,) = [span for span in spans if span.name == semconv.TRIM_SPAN_NAME]
        steps = {by_id[span.parent_span_id].name for span in (chat, trim)}
        assert steps == {"chain RunnableSequence", "chain PriorityTrimmer"}
        assert by_id[chat.parent_span_id] is root
        assert {span.name for span in spans if span.parent_span_id == root.span_id} == {
            "chain ChatPromptTemplate",
            "chain PriorityTrimmer",
            chat.name,
        }
        assert chat.attributes[semconv.TRIM_BUDGET] == 120
        assert (
            chat.attributes[semconv.TRIM_TOKENS_AFTER] == trim.attributes[semconv.TRIM_TOKENS_AFTER]
        )
    assert calibration.observations == INPUTS  # each call's server count reached the trim


def test_each_input_of_a_create_agent_abatch_is_one_trace(
    telemetry: Telemetry, otlp_receiver: OTLPReceiver
) -> None:
    from langchain.agents import create_agent

    handler = telemetry.handler()
    with running_simulator(FAST) as sim:
        agent = create_agent(chat_openai_of(sim, max_retries=0), name="clerk")
        inputs = [{"messages": [HumanMessage(f"question {index}")]} for index in range(5)]
        asyncio.run(agent.abatch(inputs, config={"callbacks": [handler]}))
        assert handler.open_runs == 0
        telemetry.shutdown()

    grouped = traces(otlp_receiver.spans())
    assert len(grouped) == 5
    for spans in grouped.values():
        (root,) = [span for span in spans if not span.parent_span_id]
        assert root.name == "invoke_agent clerk"
        assert len([span for span in spans if span.name.startswith("chat ")]) == 1


async def walk_away(events: Any) -> None:
    async for event in events:
        if event["event"] == "on_chat_model_stream":
            break
    await events.aclose()


async def cancel_while_reading(events: Any) -> None:
    reading = asyncio.Event()

    async def consume() -> None:
        async for event in events:
            if event["event"] == "on_chat_model_stream":
                reading.set()

    task = asyncio.create_task(consume())
    await reading.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("leave", "expected"),
    [(walk_away, "abandoned"), (cancel_while_reading, "cancelled")],
    ids=["walk away", "cancel the reader"],
)
def test_leaving_astream_events_is_recorded_as_leaving_astream(
    leave: Any, expected: str, telemetry: Telemetry, otlp_receiver: OTLPReceiver
) -> None:
    # Walking away was 'cancelled', status ERROR, error.type CancelledError on the duration
    # metric: astream_events cancels the task it runs the chain in when its consumer leaves.
    handler = telemetry.handler()
    with running_simulator(SLOW_ANSWER) as sim:
        prompt = ChatPromptTemplate.from_messages([("human", "{question}")])
        chain = prompt | chat_openai_of(sim, max_retries=0, streaming=True)

        async def run() -> None:
            config: Any = {"callbacks": [handler]}
            await leave(chain.astream_events({"question": "hi"}, config=config, version="v2"))
            await asyncio.sleep(0)  # done-callbacks run on the next loop iteration

        asyncio.run(run())
        assert handler.open_runs == 0
        telemetry.shutdown()

    spans = {span.name: span for span in otlp_receiver.spans()}
    assert spans["chain RunnableSequence"].attributes[semconv.OUTCOME] == expected
    chat = spans[f"chat {sim.config.models[0]}"]
    assert chat.attributes[semconv.OUTCOME] == expected
    (duration,) = otlp_receiver.points("gen_ai.client.operation.duration")
    if expected == "abandoned":
        assert chat.status_code == STATUS_UNSET
        assert error_attributes.ERROR_TYPE not in chat.attributes
        assert error_attributes.ERROR_TYPE not in duration.attributes
    else:
        assert chat.status_code == STATUS_ERROR
        cancelled = "asyncio.exceptions.CancelledError"
        assert chat.attributes[error_attributes.ERROR_TYPE] == cancelled
        assert duration.attributes[error_attributes.ERROR_TYPE] == cancelled
