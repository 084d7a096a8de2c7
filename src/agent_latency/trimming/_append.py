"""The append-only prompt: the previous prompt as sent, then the messages added since.

It never sends less context than a fresh trim to the budget the previous prompt was cut to (the
cut's, or a deep cut's): where the previous prompt left out a message that trim sends now, or
sent a shorter copy of it (a history round relevance now ranks higher), there is no append.
It is a trim of this call's input like any other, recounted and checked as the plain trimmer
would: it is made only when the input extends the previous call's input unchanged (every
earlier message digested alike, so an edit in place, such as a tool result the application
redacted, rules it out: the content sent is always the message's current one); every message
is counted by the trimmer's counter, the framing by the first message sent, and the tools and
response format as the cut counted them; a new tool result that no preceding tool call asked
for is dropped by the plain trimmer's rule (``orphan_tool_result``), and one whose call the
previous prompt left out rules the append out (sent alone it would be an orphan: HTTP 400).
Its ``over_budget`` says whether it exceeds the budget (appends may go up to the hard limit on
a warm cache unless the trimmer forbids it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from agent_latency._wire import tool_calls_of
from agent_latency.tokens import TokenCounting
from agent_latency.trimming._decisions import MessageDecision
from agent_latency.trimming._fingerprints import MessageDigests
from agent_latency.trimming._latest_call import LatestCall
from agent_latency.trimming._result import TrimResult


def appended(
    previous: LatestCall,
    inputs: Sequence[BaseMessage],
    before: list[BaseMessage],
    cut: TrimResult,
    counter: TokenCounting,
    *,
    at_least: TrimResult,
    hard_limit: int,
) -> TrimResult | None:
    """The previous prompt as sent plus the new messages, as a trim of ``inputs``.

    Args:
        previous: The conversation's latest call; ``inputs`` extends its input unchanged.
        inputs: This call's input messages.
        before: The previous prompt, made of ``inputs`` (:meth:`LatestCall.sent_prompt`).
        cut: The plain trim of ``inputs``: the classes, counts, orphans, tools and budget.
        counter: The trimmer's counter.
        at_least: A trim of ``inputs`` the append must send no less of, message for message.
        hard_limit: The hard limit, by our count (for ``over_budget_cause``).

    Returns:
        The trim, or ``None`` when the previous prompt left out something ``at_least`` sends
        (the append would send less context than it), or when a new message cannot follow it.
    """
    planned = cut.decisions  # the plain trim's, for each message's role, class and count
    floor = at_least.decisions
    decisions = []
    for index, (action, rule) in enumerate(previous.actions):
        plain = planned[index]
        if action == "dropped":
            size = 0
        elif action == "shortened":
            size = counter.count_message(previous.shortened[index])
        else:
            size = plain.tokens
        if size < floor[index].tokens_after:
            return None  # the previous prompt left out (some of) what the floor sends
        decisions.append(
            MessageDecision(
                index, plain.role, plain.priority_class, action, rule, plain.tokens, size
            )
        )
    asked = {call["id"] for i, m in enumerate(before) for call in _calls(m, i)}  # tool calls sent
    new = []
    for index in range(previous.inputs, len(inputs)):
        message, plain = inputs[index], planned[index]
        if plain.rule == "orphan_tool_result":
            decisions.append(plain)
            continue
        if isinstance(message, ToolMessage) and message.tool_call_id not in asked:
            return None
        asked.update(call["id"] for call in _calls(message, index))
        new.append(message)
        decisions.append(
            MessageDecision(
                index,
                plain.role,
                plain.priority_class,
                "kept",
                "within_budget",
                plain.tokens,
                plain.tokens,
            )
        )
    messages = before + new
    tokens = sum(d.tokens_after for d in decisions)
    tokens += cut.tool_tokens + cut.response_format_tokens + counter.count_framing(messages)
    over_budget = tokens > cut.effective_budget
    return TrimResult.from_decisions(
        cut,
        decisions,
        messages=messages,
        tokens_after=tokens,
        over_budget=over_budget,
        over_budget_cause=(
            f"an append on a warm cache: {tokens:,} tokens, over the budget "
            f"({cut.effective_budget:,} by our count), within the hard limit ({hard_limit:,})"
            if over_budget
            else None
        ),
        over_budget_hint="allow_over_budget_on_warm_cache=False keeps appends within the budget",
    )


def cached_prefix(result: TrimResult, held: Sequence[BaseMessage], digests: MessageDigests) -> int:
    """Tokens at the start of ``result``'s prompt that a cache of the prompt ``held`` holds.

    ``held`` went with the same tools and response format: the tool definitions, then each
    leading message sent alike in both. Nothing when ``held`` is empty.
    """
    if not held:
        return 0
    tokens = result.tool_tokens
    for sent, cached, size in zip(result.messages, held, result.sent_message_tokens, strict=False):
        if not digests.same(sent, cached):
            break
        tokens += size
    return tokens


def _calls(message: BaseMessage, index: int) -> tuple[Mapping[str, Any], ...]:
    return tool_calls_of(message, index) if isinstance(message, AIMessage) else ()
