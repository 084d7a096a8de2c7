"""Attack on 5ee8dec (helper attack19b): ``session_header`` reads the headers the model already
sends through its bindings and sends them beside the key (``_cache_key.with_session_header``).

The merged headers go in the call's ``extra_headers`` (the request's model settings), and a
model made with ``with_fallbacks`` hands its call's keywords to every model it tries. So the
primary's own headers, read from the primary alone, reach the fallback's server: here an
Azure-style ``api-key`` header, the primary's credential, is sent to the fallback's host (another
provider) once the primary fails. Without ``session_header`` (or before 5ee8dec, which read no
headers through ``with_fallbacks``) the fallback gets only its own headers.

Fixed: behind ``with_fallbacks``, a primary with ``extra_headers`` of its own gets no session
header (the call's ``extra_headers`` would replace its own, or take them to the fallbacks), and
the middleware says once to give the primary those headers as ``default_headers``.
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
    elif own == "binding":
        primary = chat("primary.example").bind(extra_headers=SECRET)
    else:
        primary = chat("primary.example")
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


# Failed before: the primary's api-key reached the fallback's host.
@OWN
def test_attack19b_the_primarys_headers_do_not_reach_the_fallback(
    own: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="agent_latency"):
        seen = headers_by_host(own=own, session_header="X-Session-Id")
    assert seen["primary.example"].get("api-key") == "primary-secret"
    assert "api-key" not in seen["fallback.example"]
    # The header cannot go to the fallbacks without the primary's own headers (the call's
    # extra_headers replace them): it is not sent, and the fix is said once.
    assert "x-session-id" not in seen["fallback.example"]
    assert any("default_headers" in r.getMessage() for r in caplog.records)


def test_a_primary_without_headers_of_its_own_sends_the_key_to_its_fallbacks() -> None:
    seen = headers_by_host(own="none", session_header="X-Session-Id")
    assert seen["primary.example"]["x-session-id"] == seen["fallback.example"]["x-session-id"]
