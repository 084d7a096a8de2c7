"""A provider's built-in tools (``{"type": "web_search_preview"}``, ``{"type": "local_shell"}``):
sent whole as given, counted as the JSON sent, never left out by a tool budget, and named once in
a warning that holds their type alone.

The tools reach the trimmer as an agent gives them: bound to a real ``ChatOpenAI`` with
``bind_tools`` (or ``bind``, for a type ``bind_tools`` refuses), or in ``create_agent``'s tools.
The warning is said once per type per process, so each test warns of types no other test sends.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import Field
from support.fakes import Recorder, ToolCallingFake
from support.wire import chat_completion

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware

COUNTER = TokenCounter()
QUESTION = [HumanMessage("What will the weather be in Paris tomorrow?")]
MCP_SECRET = "sk-mcp-secret-0123456789"
MCP = {
    "type": "mcp",
    "server_label": "deepwiki",
    "server_url": "https://mcp.example.com/sse",
    "headers": {"Authorization": f"Bearer {MCP_SECRET}"},
    "require_approval": "never",
}


@tool
def get_weather(city: str) -> str:
    """Gets the weather forecast of a city."""
    return "sunny"


def chat_model(**options: Any) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4.1", api_key="sk-test", **options)  # type: ignore[arg-type]


def json_tokens(builtin: dict[str, Any]) -> int:
    """The tokens of the JSON text of a built-in tool, as the template lays it out."""
    return COUNTER.count_text(json.dumps(builtin, separators=(",", ":")))


def framing_of_a_tool() -> int:
    """What a function tool's definition costs beyond its JSON: the template's per-tool tokens."""
    with_it = COUNTER.count_tools([get_weather, get_weather])
    function = chat_model().bind_tools([get_weather]).kwargs["tools"][0]["function"]  # type: ignore[attr-defined]
    return with_it - COUNTER.count_tools([get_weather]) - json_tokens(function)


def warnings_of(caplog: pytest.LogCaptureFixture, kind: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and f"Tool type {kind!r}" in record.getMessage()
    ]


def test_builtin_tools_bound_with_bind_tools_are_counted_as_their_json_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    search = {"type": "web_search_preview_2025_03_11", "search_context_size": "high"}
    bound = chat_model().bind_tools([get_weather, search, MCP])

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        # Two trimmers, as two agents of one service, two calls each.
        trimmers = [PriorityTrimmer(4000, token_counter=COUNTER).for_model(bound) for _ in "ab"]
        results = [trimmer.trim(QUESTION) for trimmer in trimmers for _ in "ab"]

    alone = COUNTER.count_tools([get_weather])
    each = [json_tokens(builtin) + framing_of_a_tool() for builtin in (search, MCP)]
    assert all(result.tool_tokens == alone + sum(each) for result in results)
    for kind in ("web_search_preview_2025_03_11", "mcp"):
        (warning,) = warnings_of(caplog, kind)  # once, for every trimmer and call
        assert "it is sent whole as given (a tool_budget never leaves it out)" in warning
        assert "counted as the JSON sent" in warning
    # The type alone: an MCP tool's settings hold its server and, here, a key.
    assert MCP_SECRET not in caplog.text and "mcp.example.com" not in caplog.text
    assert "deepwiki" not in caplog.text


def test_a_builtin_tool_langchain_cannot_convert_is_counted_not_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # ChatOpenAI's bind_tools refuses {"type": "local_shell"} (convert_to_openai_tool knows no
    # such type); bind(tools=...) sends it as given. Before: every trimmer given it raised
    # "tool 0 (dict) cannot be converted to an OpenAI tool definition".
    local_shell = {"type": "local_shell"}
    weather = chat_model().bind_tools([get_weather]).kwargs["tools"][0]  # type: ignore[attr-defined]
    bound = chat_model().bind(tools=[weather, local_shell])

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for_model = PriorityTrimmer(4000, token_counter=COUNTER).for_model(bound).trim(QUESTION)
        given = PriorityTrimmer(4000, token_counter=COUNTER, tools=[get_weather, local_shell])

    sent = COUNTER.count_tools([get_weather]) + json_tokens(local_shell) + framing_of_a_tool()
    assert for_model.tool_tokens == given.trim(QUESTION).tool_tokens == sent
    assert len(warnings_of(caplog, "local_shell")) == 1
    # What is no tool at all is still refused, naming it.
    for junk in ({"name_only": "x"}, 42):
        with pytest.raises(ValueError, match=r"tool 0 \((dict|int)\) cannot be converted"):
            PriorityTrimmer(4000, tools=[junk])


def test_a_tool_budget_never_leaves_a_builtin_tool_out() -> None:
    # Before: a built-in tool was ranked like a function by its type's words, and dropped when
    # the budget was spent (or too small for it): the agent lost its code interpreter silently.
    builtins = [
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation"},
    ]
    tools = [get_weather, *builtins]
    trimmer = PriorityTrimmer(4000, token_counter=COUNTER, tool_budget=5, tools=tools)

    for question in ("What will the weather be in Paris tomorrow?", "Thanks!"):
        result = trimmer.trim([HumanMessage(question)])

        assert list(result.tools or ()) == builtins  # the objects given, whole
        assert result.dropped_tools == ("get_weather",)
        assert result.tool_tokens == COUNTER.count_tools(builtins)


def test_a_function_named_like_a_builtin_tools_type_is_found_by_its_calls() -> None:
    # A built-in tool has no name: its type stands for it. Before: the type took the name of
    # the user's own web_search function, so a call to that function was taken for the
    # built-in tool's and the function, whose result is in the prompt, was dropped.
    @tool
    def web_search(query: str) -> str:
        """Searches the shop's intranet and returns the titles of the matching pages."""
        return "pages"

    tools = [{"type": "web_search"}, web_search, get_weather]
    trimmer = PriorityTrimmer(4000, token_counter=COUNTER, tool_budget=5, tools=tools)
    call = AIMessage("", tool_calls=[{"name": "web_search", "args": {"query": "x"}, "id": "c1"}])
    messages = [HumanMessage("Find the returns policy."), call, ToolMessage("p", tool_call_id="c1")]

    result = trimmer.trim(messages)

    assert list(result.tools or ()) == tools[:2]
    assert result.dropped_tools == ("get_weather",)


class OpenAIServer:
    """OpenAI's API as ChatOpenAI calls it: the Responses API when built-in tools are sent, chat
    completions otherwise. Records each body and answers one text message."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        if request.url.path.endswith("/chat/completions"):
            return chat_completion("Sunny.")
        text = {"type": "output_text", "text": "Sunny.", "annotations": []}
        output = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [text],
        }
        return httpx.Response(
            200,
            json={
                "id": "resp_1",
                "object": "response",
                "created_at": 0,
                "model": "gpt-4.1",
                "status": "completed",
                "output": [output],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            },
        )


def test_create_agent_sends_its_builtin_tool_whole_under_a_tool_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: a tool_budget of 5 left the web search out, and the request went without tools.
    server = OpenAIServer()
    model = chat_model(
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(server)),
        max_retries=0,
    )
    search = {"type": "web_search_preview", "search_context_size": "low"}
    trimmer = PriorityTrimmer(4000, token_counter=COUNTER, tool_budget=5)
    agent = create_agent(
        model, tools=[get_weather, search], middleware=[TrimmingMiddleware(trimmer)]
    )

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        agent.invoke({"messages": QUESTION})

    (body,) = server.bodies
    tools = body.get("tools", [])
    assert [t for t in tools if t["type"] != "function"] == [search]  # the search whole
    # get_weather left out by the budget; the middleware's recall tool is never left out.
    assert [t["name"] for t in tools if t["type"] == "function"] == ["recall"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class BindingRecorder(ToolCallingFake):
    """A scripted model that records the tools ``create_agent`` binds to it."""

    bound: list[list[Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.bound.append(list(tools))
        return self


def test_create_agent_trims_a_request_holding_a_tool_langchain_cannot_convert(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: "Trimming failed; the model call is sent untrimmed" (an ERROR with a traceback) on
    # every call: the whole history went to the model.
    shell = {"type": "shell"}
    model = BindingRecorder(messages=itertools.cycle([AIMessage("done")]))
    agent = create_agent(
        model,
        tools=[get_weather, shell],
        middleware=[TrimmingMiddleware(PriorityTrimmer(300, token_counter=COUNTER))],
    )
    history: list[BaseMessage] = []
    for n in range(20):
        history += [HumanMessage(f"Question {n}: " + "details " * 30), AIMessage(f"Answer {n}.")]

    recorder = Recorder()

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        state = agent.invoke({"messages": [*history, *QUESTION]}, {"callbacks": [recorder]})

    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert model.bound and all(shell in tools for tools in model.bound)
    (trim,) = recorder.trims
    assert trim.tool_tokens == COUNTER.count_tools(model.bound[0]) and trim.tokens_after <= 300
    assert len(recorder.prompts[0]) < len(history)  # the model saw the trimmed prompt
    assert state["messages"][: len(history)] == history  # the state keeps everything
