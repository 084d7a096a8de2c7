"""Names of the telemetry agent-latency emits beyond the OpenTelemetry GenAI conventions.

This is the public list of what to query in Jaeger and Prometheus: every span name, event,
attribute and metric of ours, as a constant. The ``gen_ai.*``, ``server.*`` and ``error.*``
names come from ``opentelemetry-semantic-conventions``; this module holds only what those
conventions do not define: our ``agent_latency.*`` attributes, events and metrics, the
``gen_ai.first_chunk`` event named by the GenAI streaming proposal, and the histogram bucket
boundaries the conventions recommend (the spec lists them, the Python package does not).

Example:
    >>> from agent_latency import semconv
    >>> semconv.TTFT_MS
    'agent_latency.ttft_ms'
"""

from __future__ import annotations

from typing import Final

# Chat-model span attributes.
TTFT_MS: Final = "agent_latency.ttft_ms"
"""Milliseconds from the call's start to its first content chunk (the total for blocking calls)."""
TOTAL_MS: Final = "agent_latency.total_ms"
"""Milliseconds from the call's start to its end."""
CHUNKS: Final = "agent_latency.chunks"
"""Streamed chunks that carried content (text or a tool-call fragment)."""
MAX_CHUNK_GAP_MS: Final = "agent_latency.max_chunk_gap_ms"
"""Longest wait between content chunks, or from the last one to the end of the call."""
STALLS: Final = "agent_latency.stalls"
"""How many of those waits exceeded ``chunk_timeout_ms``."""
TTFT_LEVEL: Final = "agent_latency.ttft_level"
"""``ok``, ``warn`` or ``error``: the TTFT against the warn and error thresholds."""
ESTIMATED_INPUT_TOKENS: Final = "agent_latency.estimated_input_tokens"
"""Our count of the request: the trim's count of the whole request when a trim prepared the
call, else the messages counted locally (cl100k); beside the server's ``gen_ai.usage``."""
OUTCOME: Final = "agent_latency.outcome"
"""How a run ended: ``ok``, ``error``, ``cancelled`` or ``abandoned``."""

# The trim span (made by the trimmer), whose figures the chat-model span it prepared repeats.
TRIM_SPAN_NAME: Final = "agent_latency.trim"
"""Name of the span that covers one trim (and of the LangChain custom event that reports it)."""
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
"""Whether the request sent exceeds the budget: its fixed part alone does not fit."""
TRIM_TOOL_TOKENS: Final = "agent_latency.trim.tool_tokens"
"""Tokens of the tool definitions sent with the request (structured-output tools included)."""
TRIM_RESPONSE_FORMAT_TOKENS: Final = "agent_latency.trim.response_format_tokens"
"""Tokens of the ``response_format`` schema sent with the request."""
TRIM_FRAMING_TOKENS: Final = "agent_latency.trim.framing_tokens"
"""Tokens of the per-request framing (the reply priming)."""
TRIM_MUST_KEEP_TOKENS: Final = "agent_latency.trim.must_keep_tokens"
"""Tokens of the messages no trim drops: system, latest user message, current tool call."""
TRIM_FIXED_TOKENS: Final = "agent_latency.trim.fixed_tokens"
"""Tokens no trim removes: tools, response format, framing and must-keep messages."""
TRIM_EFFECTIVE_BUDGET: Final = "agent_latency.trim.effective_budget"
"""The budget in the counter's own tokens: the budget divided by the calibration factor."""
TRIM_CALIBRATION_FACTOR: Final = "agent_latency.trim.calibration_factor"
"""The server's prompt tokens per token of our count, learned from earlier calls (1.0 at first)."""
TRIM_OVER_BUDGET_CAUSE: Final = "agent_latency.trim.over_budget_cause"
"""When over budget: what the fixed part is made of, e.g. ``tool definitions: 9,091 of 9,521``."""
TRIM_DROPPED_TOOLS: Final = "agent_latency.trim.dropped_tools"
"""With a tool budget: the names of the tool definitions left out of the request."""
TRIM_QUESTION_RETENTION: Final = "agent_latency.trim.question_retention"
"""Of the latest user message's terms that occur elsewhere in the input, the share still sent
(1.0 when nothing was left out): a proxy for what the trim cost the answer."""

# Chain spans (LangChain runnables that are neither agents, models nor tools).
RUN_NAME: Final = "agent_latency.run.name"
"""The LangChain run name of a chain span."""

# Events.
FIRST_CHUNK_EVENT: Final = "gen_ai.first_chunk"
"""Added when the first content chunk of a streamed call arrives."""
STALL_EVENT: Final = "agent_latency.stall"
"""Added for each wait between chunks longer than ``chunk_timeout_ms``."""
STALL_GAP_MS: Final = "agent_latency.stall.gap_ms"
"""Attribute of a stall event: the length of the wait."""
STALL_AFTER_CHUNKS: Final = "agent_latency.stall.after_chunks"
"""Attribute of a stall event: content chunks received before the wait."""

# Metrics of our own (counters; the GenAI histograms are the conventions').
STALLS_METRIC: Final = "agent_latency.client.stalls"
"""Counter of stalls, with the low-cardinality attributes of the model call."""
QUESTION_RETENTION_METRIC: Final = "agent_latency.client.question_retention"
"""Histogram of ``agent_latency.trim.question_retention`` over the calls a trim prepared."""
TTFT_BREACHES_METRIC: Final = "agent_latency.client.ttft_breaches"
"""Counter of calls whose TTFT crossed a threshold, with ``agent_latency.ttft_level``."""

# Bucket boundaries recommended by the GenAI metric conventions.
DURATION_BUCKETS_S: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""For ``gen_ai.client.operation.duration``, ``time_to_first_chunk``, ``time_per_output_chunk``."""
TOKEN_USAGE_BUCKETS: Final = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""For ``gen_ai.client.token.usage``."""

# Chat spans: prompt cache and our count against the server's.
PREFILLED_INPUT_TOKENS: Final = "agent_latency.prefilled_input_tokens"
"""Prompt tokens the server prefilled: ``gen_ai.usage.input_tokens`` less the cache reads
(``gen_ai.usage.cache_read.input_tokens``); only when the server reports its cache reads."""
INPUT_TOKENS_RATIO: Final = "agent_latency.input_tokens_ratio"
"""The server's prompt tokens over ours (``agent_latency.estimated_input_tokens``): 1.1 means
our count was 10% short."""
TOKEN_TYPE_CACHE_READ: Final = "cache_read"
"""``gen_ai.token.type`` of the ``gen_ai.client.token.usage`` records of cache reads."""
TOKEN_TYPE_CACHE_CREATION: Final = "cache_creation"
"""``gen_ai.token.type`` of the ``gen_ai.client.token.usage`` records of cache writes."""

# Trim: the cost-aware mode.
TRIM_CACHE_STATE: Final = "agent_latency.trim.cache_state"
"""The server cache state the cost-aware trimmer assumed: ``cold`` (first call of the
conversation), ``warm`` (previous call within the cache lifetime), ``expired`` (idle longer) or
``evicted`` (within the lifetime, but the server reported fewer cached tokens than it should
have held: other traffic pushed the conversation out)."""
TRIM_OPTION: Final = "agent_latency.trim.option"
"""The prompt the cost-aware trimmer sent: ``append`` (the previous prompt plus the new
messages), ``cut`` (trimmed to the budget) or ``deep_cut`` (trimmed below it)."""
TRIM_PREDICTED_TTFT_PREFIX: Final = "agent_latency.trim.predicted_ttft_ms."
"""Followed by an option's name: its predicted mean time to first token over the next calls."""
TRIM_HARD_LIMIT: Final = "agent_latency.trim.hard_limit"
"""The prompt tokens never exceeded: the context window less the output reserve."""
