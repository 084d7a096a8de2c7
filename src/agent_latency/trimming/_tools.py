"""Tool definitions as a trimmable class (opt-in, ``tool_budget``): which tools a request keeps.

Kept first: the tools this conversation has called (the model may call them again, and their
results in the history refer to them) and the tools the user pins; then the others by lexical
relevance (BM25 over name and description) to the latest user message, while they fit the tool
budget. The kept tools are sent in their original order. The choice depends only on the
conversation's calls and its latest user message, so it stays the same from call to call of an
agent's turn and the tool definitions (at the start of most chat templates) stay a cacheable
prefix; it changes at most when the user asks something new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from langchain_core.messages import AIMessage, BaseMessage

from agent_latency._tokens import role_of
from agent_latency.trimming._relevance import TermCache, bm25_scores, text_of
from agent_latency.trimming._request import ExtrasCounter, RequestExtras


def select_tools(
    request: RequestExtras,
    messages: Sequence[BaseMessage],
    *,
    budget: int,
    pinned: frozenset[str],
    counter: ExtrasCounter,
    terms: TermCache,
) -> tuple[RequestExtras, tuple[str, ...]]:
    """Returns the request with only the tools kept, and the names of the tools dropped.

    Args:
        request: The tools (selectable) and output tools (always kept) of the request.
        messages: The conversation, for the tools it called and its latest user message.
        budget: The most tokens the selectable tools may take together (counted one by one).
        pinned: Names of tools always kept.
        counter: Counts each tool's definition.
        terms: Term counts for the relevance ranking.
    """
    described = counter.describe(request)
    called = {
        call["name"]
        for message in messages
        if isinstance(message, AIMessage)
        for call in (*message.tool_calls, *message.invalid_tool_calls)
    }
    keep = {i for i, (name, _, _) in enumerate(described) if name in called or name in pinned}
    used = sum(described[i][2] for i in keep)
    others = [i for i in range(len(described)) if i not in keep]
    question = next((text_of(m) for m in reversed(messages) if role_of(m) == "user"), "")
    scores = bm25_scores(question, [[described[i][1]] for i in others], terms)
    for _, i in sorted(zip((-score for score in scores), others, strict=True)):
        if used + described[i][2] <= budget:
            keep.add(i)
            used += described[i][2]
    if len(keep) == len(described):
        return request, ()
    kept = tuple(tool for i, tool in enumerate(request.tools) if i in keep)
    dropped = tuple(name for i, (name, _, _) in enumerate(described) if i not in keep)
    return replace(request, tools=kept), dropped
