"""Names of the trim span and of its ``agent_latency.trim.*`` attributes.

The trimmer sets these on its own span; the callback handler copies the same figures onto the
chat-model span the trim prepared, so both import them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

TRIM_SPAN_NAME: Final = "agent_latency.trim"
"""Name of the span that covers one trim."""

TRIM_TOKENS_BEFORE: Final = "agent_latency.trim.tokens_before"
"""Prompt tokens of the input, reply priming included."""
TRIM_TOKENS_AFTER: Final = "agent_latency.trim.tokens_after"
"""Prompt tokens of the messages sent, reply priming included."""
TRIM_BUDGET: Final = "agent_latency.trim.budget"
"""The prompt token budget of the trim."""
TRIM_DROPPED_MESSAGES: Final = "agent_latency.trim.dropped_messages"
"""How many input messages were left out."""
TRIM_SHORTENED_MESSAGES: Final = "agent_latency.trim.shortened_messages"
"""How many messages were sent with the middle of their text cut out."""
TRIM_OVER_BUDGET: Final = "agent_latency.trim.over_budget"
"""Whether even the messages that must be kept exceed the budget."""

TRIM_FIELDS: Final[Mapping[str, str]] = {
    "tokens_before": TRIM_TOKENS_BEFORE,
    "tokens_after": TRIM_TOKENS_AFTER,
    "budget": TRIM_BUDGET,
    "dropped_messages": TRIM_DROPPED_MESSAGES,
    "shortened_messages": TRIM_SHORTENED_MESSAGES,
    "over_budget": TRIM_OVER_BUDGET,
}
"""The ``TrimResult`` fields that describe a trim, each with the attribute it becomes.

``over_budget`` is a flag; every other field is a count of tokens or messages.
"""
