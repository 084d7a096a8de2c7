"""A trim run under the handler records its span into the handler's tracer provider: beside
its parent, whoever owns the global provider."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from opentelemetry import trace
from support.otlp_receiver import OTLPReceiver
from support.simulators import chat_openai_of

from agent_latency import PriorityTrimmer, configure_telemetry, semconv
from agent_latency.sim import SimulatorConfig, running_simulator

FAST = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=5000)


def test_a_chain_trim_span_reaches_the_telemetrys_provider_as_a_child_of_its_chain(
    otlp_receiver: OTLPReceiver,
) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You answer questions about invoices."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    history = [
        message
        for turn in range(8)
        for message in (HumanMessage(f"old question {turn} " * 12), AIMessage("an old answer"))
    ]
    with running_simulator(FAST) as sim:
        telemetry = configure_telemetry(
            exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
        )
        handler = telemetry.handler()
        model = chat_openai_of(sim, max_retries=0)
        chain = prompt | PriorityTrimmer(budget=120) | model
        chain.invoke(
            {"history": history, "question": "What is a credit note?"},
            config={"callbacks": [handler]},
        )
        telemetry.shutdown()

    spans = otlp_receiver.spans()
    by_id = {span.span_id: span for span in spans}
    (trim,) = [span for span in spans if span.name == semconv.TRIM_SPAN_NAME]
    (chat,) = [span for span in spans if span.name.startswith("chat ")]
    parent = by_id[trim.parent_span_id]  # in the telemetry's provider, like the trim span
    assert parent.name == "chain PriorityTrimmer"
    assert by_id[parent.parent_span_id].name == "chain RunnableSequence"
    assert trim.trace_id == chat.trace_id == parent.trace_id
    assert trim.attributes[semconv.TRIM_BUDGET] == 120
    assert chat.attributes[semconv.TRIM_TOKENS_AFTER] == trim.attributes[semconv.TRIM_TOKENS_AFTER]
    # Nothing orphaned: every parent is among the spans received.
    assert all(span.parent_span_id in by_id for span in spans if span.parent_span_id)
    assert trace.get_tracer_provider() is not telemetry.tracer_provider


def test_an_application_owned_global_provider_gets_no_trim_span() -> None:
    # In a fresh interpreter: the application sets its global provider first, so
    # configure_telemetry's (set_global=True, the default) cannot replace it.
    program = textwrap.dedent(
        """
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from agent_latency import PriorityTrimmer, configure_telemetry

        application = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(application))
        trace.set_tracer_provider(provider)

        ours = InMemorySpanExporter()
        with configure_telemetry(exporter="none") as telemetry:
            telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(ours))
            model = GenericFakeChatModel(messages=iter([AIMessage("done")]))
            chain = PriorityTrimmer(budget=60) | model
            history = [HumanMessage(f"old question {turn} " * 10) for turn in range(6)]
            chain.invoke(history, config={"callbacks": [telemetry.handler()]})

        assert trace.get_tracer_provider() is provider
        assert application.get_finished_spans() == ()
        spans = {span.context.span_id: span for span in ours.get_finished_spans()}
        (trim,) = [span for span in spans.values() if span.name == "agent_latency.trim"]
        assert spans[trim.parent.span_id].name == "chain PriorityTrimmer"
        """
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=120)


def test_a_handler_without_telemetry_listed_first_leaves_the_trim_span_to_the_one_with_it(
    otlp_receiver: OTLPReceiver,
) -> None:
    # A handler kept for on_record or its log lines, whose spans go nowhere (a no-op provider),
    # listed before the telemetry's: the trim span followed it into nowhere, or (its run's
    # context holding an invalid span) started a trace of its own.
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from agent_latency import LatencyCallbackHandler

    records: list[object] = []
    silent = LatencyCallbackHandler(
        tracer_provider=trace.NoOpTracerProvider(), on_record=records.append
    )
    telemetry = configure_telemetry(
        exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
    )
    model = GenericFakeChatModel(messages=iter([AIMessage("done")]))
    chain = PriorityTrimmer(budget=60) | model
    history = [HumanMessage(f"old question {turn} " * 10) for turn in range(6)]
    chain.invoke(history, config={"callbacks": [silent, telemetry.handler()]})
    telemetry.shutdown()

    assert len(records) == 1  # the silent handler still measured the call
    spans = otlp_receiver.spans()
    by_id = {span.span_id: span for span in spans}
    (trim,) = [span for span in spans if span.name == semconv.TRIM_SPAN_NAME]
    assert by_id[trim.parent_span_id].name == "chain PriorityTrimmer"
    assert len({span.trace_id for span in spans}) == 1


def test_a_handler_on_an_unset_global_provider_leaves_the_trim_span_to_the_one_with_telemetry() -> (
    None
):
    # In a fresh interpreter, so that no global provider is set: a handler made without
    # providers records into the global one, which records nothing yet.
    program = textwrap.dedent(
        """
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from agent_latency import LatencyCallbackHandler, PriorityTrimmer, configure_telemetry

        ours = InMemorySpanExporter()
        with configure_telemetry(exporter="none", set_global=False) as telemetry:
            telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(ours))
            model = GenericFakeChatModel(messages=iter([AIMessage("done")]))
            chain = PriorityTrimmer(budget=60) | model
            history = [HumanMessage(f"old question {turn} " * 10) for turn in range(6)]
            handlers = [LatencyCallbackHandler(), telemetry.handler()]
            chain.invoke(history, config={"callbacks": handlers})

        spans = {span.context.span_id: span for span in ours.get_finished_spans()}
        (trim,) = [span for span in spans.values() if span.name == "agent_latency.trim"]
        assert spans[trim.parent.span_id].name == "chain PriorityTrimmer"
        """
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=120)
