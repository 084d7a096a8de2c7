"""Attack on 5ee8dec (helper attack19b): ``session_header`` reads the headers the model already
sends through its bindings and sends them beside the key (``_cache_key.with_session_header``).

The merged headers go in the call's ``extra_headers`` (the request's model settings), and a
model made with ``with_fallbacks`` hands its call's keywords to every model it tries. So the
primary's own headers, read from the primary alone, reach the fallback's server: here an
Azure-style ``api-key`` header, the primary's credential, is sent to the fallback's host (another
provider) once the primary fails. Without ``session_header`` (or before 5ee8dec, which read no
headers through ``with_fallbacks``) the fallback gets only its own headers.

Likely cause: ``with_session_header`` copies the headers of the chat model it finds through
``RunnableWithFallbacks`` (its ``runnable``: the primary) into settings sent to all of them;
only the session header itself belongs to every model tried.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from support.wire import chat_completion

from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware

SECRET = {"api-key": "primary-secret"}


def headers_by_host(*, own: str, session_header: str | None) -> dict[str, httpx.Headers]:
    """The headers each host got when the primary (its credential in ``own``: its
    ``model_kwargs``' ``extra_headers`` or a binding's) failed and the fallback answered."""
    seen: dict[str, httpx.Headers] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        seen[request.url.host] = request.headers
        if request.url.host == "primary.example":
            return httpx.Response(500, json={"error": {"message": "down"}})
        return chat_completion("ok")

    def chat(host: str, **options: Any) -> ChatOpenAI:
        return ChatOpenAI(
            model="gpt-4o-mini",
            api_key="sk-test",  # type: ignore[arg-type]
            base_url=f"https://{host}/v1",
            http_client=httpx.Client(transport=httpx.MockTransport(answer)),
            max_retries=0,
            **options,
        )

    if own == "model_kwargs":
        primary: Any = chat("primary.example", model_kwargs={"extra_headers": SECRET})
    else:
        primary = chat("primary.example").bind(extra_headers=SECRET)
    model = primary.with_fallbacks([chat("fallback.example")])
    middleware = TrimmingMiddleware(
        PriorityTrimmer(2000), recall=False, session_header=session_header
    )
    agent = create_agent(model, [], middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Plan my trip to Porto.")]})
    return seen


OWN = pytest.mark.parametrize("own", ["model_kwargs", "binding"])


@OWN
def test_without_a_session_header_the_fallback_gets_its_own_headers(own: str) -> None:
    seen = headers_by_host(own=own, session_header=None)
    assert seen["primary.example"].get("api-key") == "primary-secret"
    assert "api-key" not in seen["fallback.example"]


@pytest.mark.xfail(
    strict=True,
    reason="with session_header, the primary's own extra_headers (its api-key) are sent to the "
    "fallback model's server",
)
@OWN
def test_attack19b_the_primarys_headers_do_not_reach_the_fallback(own: str) -> None:
    seen = headers_by_host(own=own, session_header="X-Session-Id")
    assert seen["primary.example"].get("api-key") == "primary-secret"
    assert "x-session-id" in seen["fallback.example"]  # the conversation's key goes to both
    assert "api-key" not in seen["fallback.example"]
