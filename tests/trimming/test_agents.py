"""Trimming inside agents: TrimmingMiddleware for create_agent, and the LangGraph pre-model hook."""

from __future__ import annotations

import itertools
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.fakes import Recorder, ToolCallingFake
from support.source_imports import imported_top_level_modules

import agent_latency
from agent_latency import (
    LatencyCallbackHandler,
    LLMSettings,
    PromptSettings,
    Settings,
    build_chat_model,
    semconv,
)
from agent_latency.doctor import seed_latency_model
from agent_latency.semconv import TRIM_BUDGET, TRIM_SPAN_NAME, TRIM_TOKENS_AFTER
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import CostAwareTrimmer
from agent_latency.trimming._middleware import STATE_KEY, TrimmingMiddleware
from agent_latency.trimming._recall import TOOL_DEFINITION
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
BUDGET = 400
SYSTEM_PROMPT = "You answer from the lookup tool. " * 10


def scripted_model() -> ToolCallingFake:
    """Asks for one lookup, then answers; again and again."""
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "x"}, "id": "call_1"}])
    return ToolCallingFake(messages=itertools.cycle([call, AIMessage("done")]))


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}: " + "record " * 2000


def long_history() -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(10):
        messages += [HumanMessage(f"question {r} " + "data " * 40), AIMessage(f"answer {r}")]
    return [*messages, HumanMessage("latest question")]


def agent(trimmer: PriorityTrimmer) -> Any:
    return create_agent(
        scripted_model(),
        tools=[lookup],
        system_prompt=SYSTEM_PROMPT,
        middleware=[TrimmingMiddleware(trimmer)],
    )


def check_run(recorder: Recorder, state: dict[str, Any], history: list[BaseMessage]) -> None:
    """The model saw trimmed prompts within budget; the state kept everything untouched."""
    assert len(recorder.prompts) == 2 and len(recorder.trims) == 2
    for prompt, trim in zip(recorder.prompts, recorder.trims, strict=True):
        # The whole request counts: the messages and the recall and lookup tools' definitions.
        assert trim.tool_tokens == COUNTER.count_tools([TOOL_DEFINITION, lookup]) > 0
        assert COUNTER.count_messages(prompt) + trim.tool_tokens == trim.tokens_after <= BUDGET
        assert prompt[0].content == SYSTEM_PROMPT  # the system prompt is counted and kept
        assert prompt[0].type == "system" and trim.changed
    assert recorder.prompts[0][-1].content == "latest question"
    assert recorder.prompts[1][-1].type == "tool"  # the lookup result, shortened
    assert "tokens removed" in recorder.prompts[1][-1].text
    messages = state["messages"]
    assert messages[: len(history)] == history
    assert [m.type for m in messages[len(history) :]] == ["ai", "tool", "ai"]
    assert "tokens removed" not in messages[-2].text  # the stored result is whole


def test_create_agent_sends_trimmed_requests_and_keeps_the_full_history() -> None:
    recorder = Recorder()
    history = long_history()
    state = agent(PriorityTrimmer(BUDGET, token_counter=COUNTER)).invoke(
        {"messages": history}, {"callbacks": [recorder]}
    )
    check_run(recorder, state, history)


async def test_create_agent_async_sends_trimmed_requests_and_keeps_the_full_history() -> None:
    recorder = Recorder()
    history = long_history()
    state = await agent(PriorityTrimmer(BUDGET, token_counter=COUNTER)).ainvoke(
        {"messages": history}, {"callbacks": [recorder]}
    )
    check_run(recorder, state, history)


def test_in_an_agent_run_the_trim_span_and_the_chat_span_share_the_trace(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    agent(trimmer).invoke({"messages": long_history()}, {"callbacks": [handler]})
    spans = span_exporter.get_finished_spans()
    trims = [s for s in spans if s.name == TRIM_SPAN_NAME]
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(trims) == len(chats) == 2
    assert len({s.context.trace_id for s in spans}) == 1
    for trim_span, chat_span in zip(trims, chats, strict=True):
        assert trim_span.parent is not None and trim_span.parent == chat_span.parent
        assert chat_span.attributes is not None and trim_span.attributes is not None
        assert chat_span.attributes[TRIM_TOKENS_AFTER] == trim_span.attributes[TRIM_TOKENS_AFTER]
        assert chat_span.attributes[TRIM_BUDGET] == BUDGET
    assert handler.open_runs == 0


def request(messages: list[BaseMessage], system: str | None = "rules") -> ModelRequest[Any]:
    return ModelRequest(
        model=scripted_model(),
        messages=messages,  # type: ignore[arg-type]
        system_message=SystemMessage(system) if system is not None else None,
    )


def sent_by(middleware: TrimmingMiddleware, original: ModelRequest[Any]) -> ModelRequest[Any]:
    """Calls the middleware outside any agent run and returns the request the model got."""
    received: list[ModelRequest[Any]] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        received.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    middleware.wrap_model_call(original, handler)
    return received[0]


def test_a_request_that_fits_is_passed_on_as_is() -> None:
    original = request([HumanMessage("hi")])
    assert sent_by(TrimmingMiddleware(PriorityTrimmer(BUDGET)), original) is original


def test_outside_an_agent_run_the_middleware_still_trims() -> None:
    original = request(long_history())
    sent = sent_by(TrimmingMiddleware(PriorityTrimmer(BUDGET, token_counter=COUNTER)), original)
    assert sent.system_message is original.system_message
    assert COUNTER.count_messages([sent.system_message, *sent.messages]) <= BUDGET  # type: ignore[list-item]
    assert len(original.messages) == 21  # the original request is untouched


def test_a_system_message_the_trimmer_may_drop_can_leave_the_request() -> None:
    trimmer = PriorityTrimmer(
        60,
        token_counter=COUNTER,
        keep_system=False,
        priority_order=("latest_user", "history", "tool_result", "system"),
    )
    sent = sent_by(TrimmingMiddleware(trimmer), request(long_history(), system="rule " * 100))
    assert sent.system_message is None
    assert sent.messages[-1].content == "latest question"


def test_a_trimmer_failure_sends_the_request_untrimmed_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BrokenTrimmer(PriorityTrimmer):
        def trim(self, messages: object, **kwargs: Any) -> TrimResult:
            raise RuntimeError("bug")

    original = request(long_history())
    with caplog.at_level(logging.ERROR, logger="agent_latency"):
        assert sent_by(TrimmingMiddleware(BrokenTrimmer(BUDGET)), original) is original
    assert "sent untrimmed" in caplog.text


def test_the_middleware_needs_a_priority_trimmer() -> None:
    with pytest.raises(TypeError, match="trimmer must be a PriorityTrimmer"):
        TrimmingMiddleware(6000)  # type: ignore[arg-type]


def test_the_langgraph_pre_model_hook_trims_llm_input_and_keeps_the_state() -> None:
    from langgraph.prebuilt import create_react_agent

    recorder = Recorder()
    history = long_history()
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # create_react_agent is deprecated in favour of create_agent
        graph = create_react_agent(
            scripted_model(), [lookup], pre_model_hook=trimmer.as_pre_model_hook()
        )
    state = graph.invoke({"messages": history}, {"callbacks": [recorder]})
    assert len(recorder.prompts) == 2
    assert all(COUNTER.count_messages(p) <= BUDGET for p in recorder.prompts)
    assert recorder.prompts[0][-1].content == "latest question"
    assert len(state["messages"]) == len(history) + 3
    assert len(recorder.trims) == 2


def test_the_pre_model_hook_reads_attribute_states_too() -> None:
    class State:
        def __init__(self, messages: list[BaseMessage]) -> None:
            self.messages = messages

    state = State(long_history())
    hook = PriorityTrimmer(BUDGET, token_counter=COUNTER).as_pre_model_hook()
    trimmed = hook(state)["llm_input_messages"]
    assert COUNTER.count_messages(trimmed) <= BUDGET


def test_the_trimmer_modules_do_not_import_the_optional_agent_frameworks() -> None:
    # Importing agent_latency itself is checked in test_public_api; this covers the trimmer's
    # own modules statically (all but the middleware), without a fresh interpreter's seconds.
    package = Path(agent_latency.__file__).parent
    modules = [p for p in (package / "trimming").glob("*.py") if p.name != "_middleware.py"]
    assert len(modules) > 10
    for path in (*modules, package / "_trace_link.py"):
        imported = imported_top_level_modules(path)
        assert imported.isdisjoint({"langchain", "langgraph"}), path.name


# --- cost-aware in a real agent: create_agent, the real ChatOpenAI, the simulator -------------

SHOP_AREAS = """orders shipments refunds exchanges inventory payments invoices customers suppliers
warehouses returns coupons reviews carriers tickets accounts subscriptions catalogue pricing taxes
currencies loyalty giftcards wishlists bundles preorders backorders alerts reports audits"""
SUBJECTS = SHOP_AREAS.split()  # 30, one lookup tool each
ASKED_ABOUT = "orders orders refunds refunds inventory inventory payments payments orders taxes"
QUESTIONS = [
    f"Tell me about the {subject} of account 42, please." for subject in ASKED_ABOUT.split()
]
SHOP_PROMPT = "You are the assistant of an outdoor shop; answer from the lookup tools. " * 12


def shop_tool(subject: str) -> BaseTool:
    def lookup(query: str) -> str:
        return "\n".join(
            f"{subject} record {i}: {query}, status ok, value {i * 37} units, updated at 10:{i:02d}"
            for i in range(25)
        )

    return StructuredTool.from_function(
        lookup,
        name=f"lookup_{subject}",
        description=f"Looks up the shop's {subject}: every record that matches the query, with "
        f"its status and value. Use it for questions about {subject}.",
    )


SHOP_TOOLS = [shop_tool(subject) for subject in SUBJECTS]


def shop_agent(settings: Settings, trimmer: CostAwareTrimmer, saver: InMemorySaver) -> Any:
    return create_agent(
        build_chat_model(settings),
        tools=SHOP_TOOLS,
        system_prompt=SHOP_PROMPT,
        middleware=[TrimmingMiddleware(trimmer)],
        checkpointer=saver,
    )


def trim_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == TRIM_SPAN_NAME]


def test_a_new_users_cost_aware_agent_keeps_its_limits_and_reads_its_cache_truly(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    # As a new user tried it (issue 22): create_agent, 30 tools, a tool budget, InMemorySaver,
    # one thread_id, budget 2,500, the callback handler. Appends reached 3,201-3,503 server
    # tokens with over_budget=False; it appended right after its own tool list changed; then
    # the thread stayed evicted while the server kept reporting cached prefixes.
    recorder = Recorder()
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, log_every_request=False)
    fast = SimulatorConfig(
        overhead_ms=5, prefill_ms_per_token=0.05, decode_tokens_per_s=20_000, answer_tokens=8
    )
    with running_simulator(fast) as sim:
        settings = Settings(
            llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]),
            prompt=PromptSettings(token_budget=2500),
        )
        trimmer = CostAwareTrimmer.from_settings(
            settings, tool_budget=600, tracer_provider=tracer_provider
        )
        agent = shop_agent(settings, trimmer, InMemorySaver())
        config: Any = {"configurable": {"thread_id": "user-1"}, "callbacks": [handler, recorder]}
        for question in QUESTIONS:
            agent.invoke({"messages": [HumanMessage(question)]}, config)
    trims = [span.attributes or {} for span in trim_spans(span_exporter)]
    assert len(trims) == len(recorder.server_tokens) == 2 * len(QUESTIONS)
    tools_before = None
    for trim, server_tokens in zip(trims, recorder.server_tokens, strict=True):
        tokens, hard_limit = trim[TRIM_TOKENS_AFTER], trim[semconv.TRIM_HARD_LIMIT]
        assert tokens <= hard_limit and server_tokens <= hard_limit
        assert trim[semconv.TRIM_OVER_BUDGET] is (tokens > trim[semconv.TRIM_EFFECTIVE_BUDGET])
        tools = trim[semconv.TRIM_DROPPED_TOOLS]
        if tools_before is not None and tools != tools_before:  # its own tool list changed
            assert trim[semconv.TRIM_CACHE_STATE] == "cold"  # the tools open the prompt
        tools_before = tools
    states = [trim[semconv.TRIM_CACHE_STATE] for trim in trims]
    assert "evicted" not in states  # the simulator's cache held every prefix it was sent
    assert states.count("cold") >= 2 and "append" in {t[semconv.TRIM_OPTION] for t in trims}


def test_replicas_sharing_a_checkpointer_decide_as_one_process_does(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    # Two trimmers (two replicas, or one restarted) behind one model server: the record travels
    # in the agent's state, which the checkpointer keeps; no key is passed, the thread_id does.
    fast = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0.01, decode_tokens_per_s=20_000)
    with running_simulator(fast) as sim:
        settings = Settings(
            llm=LLMSettings(base_url=sim.base_url, model=sim.config.models[0]),
            prompt=PromptSettings(token_budget=2500),
        )
        assert isinstance(seed_latency_model(settings), list)  # it predicts from the first call

        def run(replicas: int) -> list[tuple[Any, ...]]:
            span_exporter.clear()
            saver, times = InMemorySaver(), itertools.count(1_000.0, 10.0)
            agents = [
                shop_agent(
                    settings,
                    CostAwareTrimmer.from_settings(
                        settings,
                        tool_budget=600,
                        clock=lambda: next(times),
                        tracer_provider=tracer_provider,
                    ),
                    saver,
                )
                for _ in range(replicas)
            ]
            config: Any = {"configurable": {"thread_id": "shared"}}
            for turn, question in enumerate(QUESTIONS[:8]):
                agents[turn % replicas].invoke({"messages": [HumanMessage(question)]}, config)
            assert agents[0].get_state(config).values[STATE_KEY]["format"] == 1
            return [
                tuple(
                    (span.attributes or {})[name]
                    for name in (
                        semconv.TRIM_CACHE_STATE,
                        semconv.TRIM_OPTION,
                        TRIM_TOKENS_AFTER,
                        semconv.TRIM_DROPPED_MESSAGES,
                    )
                )
                for span in trim_spans(span_exporter)
            ]

        alone, shared = run(1), run(2)
    assert shared == alone
    # The second replica's calls (turns 1, 3, ...: calls 2-3, 6-7, ...) found the first's record.
    assert {shared[2][0], shared[6][0]} <= {"warm", "evicted", "expired"}
    assert "append" in {decision[1] for decision in shared}


def test_an_unreadable_record_in_the_agent_state_starts_the_conversation_anew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langchain.agents.middleware import ExtendedModelResponse

    trimmer = CostAwareTrimmer(
        PriorityTrimmer(BUDGET, token_counter=COUNTER), context_window=8192, reserve_for_output=0
    )
    tampered = {"messages": [], STATE_KEY: {"format": 1, "inputs": "two"}}
    original = ModelRequest(
        model=scripted_model(),
        messages=long_history(),  # type: ignore[arg-type]
        system_message=SystemMessage("rules"),
        state=tampered,  # type: ignore[arg-type]
    )
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        answer = TrimmingMiddleware(trimmer).wrap_model_call(
            original, lambda request: ModelResponse(result=[AIMessage("ok")])
        )
    assert "taken as its first" in caplog.text
    assert isinstance(answer, ExtendedModelResponse) and answer.command is not None
    assert answer.command.update[STATE_KEY]["state"] == "cold"  # type: ignore[index]


@pytest.mark.parametrize("cost_aware", [False, True])
def test_in_an_agent_the_trim_span_goes_where_the_handler_records(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, cost_aware: bool
) -> None:
    # The trimmer has no tracer provider of its own (the global one records nothing here):
    # the handler's tracer records the trim beside its chat span (issue 23, item 9).
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    plain = PriorityTrimmer(BUDGET, token_counter=COUNTER)
    trimmer: Any = (
        CostAwareTrimmer(plain, context_window=8192, reserve_for_output=1000)
        if cost_aware
        else plain
    )
    graph = create_agent(
        scripted_model(),
        tools=[lookup],
        system_prompt=SYSTEM_PROMPT,
        middleware=[TrimmingMiddleware(trimmer)],
    )
    graph.invoke({"messages": long_history()}, {"callbacks": [handler]})
    spans = span_exporter.get_finished_spans()
    trims = [s for s in spans if s.name == TRIM_SPAN_NAME]
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(trims) == len(chats) == 2
    assert all(
        t.parent is not None and t.parent == c.parent for t, c in zip(trims, chats, strict=True)
    )
