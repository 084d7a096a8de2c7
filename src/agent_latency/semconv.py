"""Names of the telemetry agent-latency emits beyond the OpenTelemetry GenAI conventions.

The public list of what to query in Jaeger and Prometheus: what ``opentelemetry-semantic-
conventions`` does not define: our ``agent_latency.*`` names, the newer GenAI names the package
lacks (used on ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``), the recommended
histogram buckets and the :data:`SCHEMA_URL` followed.

Example:
    >>> from agent_latency import semconv
    >>> semconv.TTFT_MS
    'agent_latency.ttft_ms'
"""

from __future__ import annotations

from typing import Final

INSTRUMENTATION_SCOPE: Final = "agent_latency"
"""The instrumentation scope of every tracer and meter of ours: the handler's and the trimmers'."""
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.41.0"
"""The semantic conventions version the names follow: 1.41.0, the last in which the GenAI
conventions are not deprecated (1.42 moved them to semantic-conventions-genai, whose v0.1.0
renamed some: those names are emitted only on opt-in)."""

# GenAI names of open-telemetry/semantic-conventions-genai v0.1.0 (status Development) that the
# installed opentelemetry-semantic-conventions (0.66b2, core conventions 1.41) does not define.
GEN_AI_CONVERSATION_COMPACTED: Final = "gen_ai.conversation.compacted"
"""``true`` on the chat span (and the trim span) of a call whose request a trim cut or
shortened (``agent_latency.trim.dropped_messages`` or ``shortened_messages`` above 0); absent
otherwise, as the conventions ask. Emitted whatever the opt-in: it is new, not renamed."""
GEN_AI_CLIENT_INFERENCE_DURATION: Final = "gen_ai.client.inference.duration"
"""With the opt-in: the name of ``gen_ai.client.operation.duration`` for inference calls."""
GEN_AI_CLIENT_INFERENCE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.inference.time_to_first_chunk"
"""With the opt-in: the name of ``gen_ai.client.operation.time_to_first_chunk``."""
GEN_AI_CLIENT_INFERENCE_TIME_PER_OUTPUT_CHUNK: Final = (
    "gen_ai.client.inference.time_per_output_chunk"
)
"""With the opt-in: the name of ``gen_ai.client.operation.time_per_output_chunk``."""
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
"""With the opt-in: the name of ``gen_ai.usage.cache_creation.input_tokens``."""

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
call, else the messages and the tools sent with them counted locally (cl100k); beside the
server's ``gen_ai.usage``."""
OUTCOME: Final = "agent_latency.outcome"
"""How a run ended: ``ok``, ``error``, ``cancelled``, ``abandoned`` or ``interrupted`` (a
LangGraph ``interrupt()``, waiting for a human to resume it)."""

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
"""Whether the request sent exceeds the budget; :data:`TRIM_OVER_BUDGET_REASON` says why."""
TRIM_OVER_BUDGET_REASON: Final = "agent_latency.trim.over_budget_reason"
"""When over budget, why, in one word (a metric dimension): :data:`OVER_BUDGET_FIXED_PART`."""
OVER_BUDGET_FIXED_PART: Final = "fixed_part"
"""What no trim removes (tools, framing, system prompt, the question) alone exceeds the budget."""
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
FIRST_CHUNK_EVENT: Final = "agent_latency.first_chunk"
"""Added when the first content chunk of a streamed call arrives (the GenAI conventions define
no such event; their ``gen_ai.response.time_to_first_chunk`` attribute holds the same time)."""
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
CACHE_TOKENS_METRIC: Final = "agent_latency.client.cache_tokens"
"""Histogram of the prompt tokens a call's server read from its prefix cache or wrote to it,
with :data:`TOKEN_CACHE`. Not in ``gen_ai.client.token.usage``: its ``gen_ai.token.type`` is
``input`` or ``output`` only, and cache reads are part of ``input`` (summing types would count
them twice)."""
TOKEN_CACHE: Final = "agent_latency.token.cache"
"""Attribute of :data:`CACHE_TOKENS_METRIC`: :data:`TOKEN_CACHE_READ` or
:data:`TOKEN_CACHE_CREATION` (the unreleased GenAI conventions spell it ``gen_ai.token.cache``)."""
TOKEN_CACHE_READ: Final = "read"
"""Tokens read from the cache (``gen_ai.usage.cache_read.input_tokens``)."""
TOKEN_CACHE_CREATION: Final = "creation"
"""Tokens written to the cache (``gen_ai.usage.cache_creation.input_tokens``)."""
TTFT_SERVER_PREFILL_METRIC: Final = "agent_latency.client.ttft.server_prefill"
"""Histogram (s) of :data:`TTFT_SERVER_PREFILL_MS`: the server's prefill part of the TTFT."""
TTFT_REMAINDER_METRIC: Final = "agent_latency.client.ttft.remainder"
"""Histogram (s) of :data:`TTFT_REMAINDER_MS`: the client, network and queue part of the TTFT."""

# Bucket boundaries recommended by the GenAI metric conventions.
DURATION_BUCKETS_S: Final = tuple(0.01 * 2**i for i in range(14))  # 0.01, 0.02, ... 81.92 s
"""For ``gen_ai.client.operation.duration``, ``time_to_first_chunk``, ``time_per_output_chunk``."""
TOKEN_USAGE_BUCKETS: Final = tuple(4**i for i in range(14))  # 1, 4, 16, ... 67,108,864
"""For ``gen_ai.client.token.usage``."""

# Chat spans: prompt cache and our count against the server's.
PREFILLED_INPUT_TOKENS: Final = "agent_latency.prefilled_input_tokens"
"""Prompt tokens the server prefilled: as it reports them (llama.cpp's ``timings.prompt_n``),
else ``gen_ai.usage.input_tokens`` less the cache reads (``gen_ai.usage.cache_read.input_tokens``);
only when the server reports one or the other."""
INPUT_TOKENS_RATIO: Final = "agent_latency.input_tokens_ratio"
"""The server's prompt tokens over ours (``agent_latency.estimated_input_tokens``): 1.1 means
our count was 10% short."""
INVALID_USAGE: Final = "agent_latency.usage.invalid"
"""The usage fields the server reported that were impossible (negative, fractional, larger than
any context, more cached than prompt tokens), e.g. ``["prompt_tokens"]``; they are left out of
the span, the metrics and everything that learns from the call."""

# Chat spans: where the first token's time went, when the server says how long it prefilled.
TTFT_SERVER_PREFILL_MS: Final = "agent_latency.ttft.server_prefill_ms"
"""The server's prefill time as it reports it (llama.cpp's ``timings.prompt_ms``) of the
``agent_latency.prefilled_input_tokens`` it prefilled."""
TTFT_SERVER_DECODE_MS: Final = "agent_latency.ttft.server_decode_ms"
"""Blocking calls only: the server's time generating the answer (``timings.predicted_ms``),
which a blocking call's first text waits for."""
TTFT_REMAINDER_MS: Final = "agent_latency.ttft.remainder_ms"
"""The rest of the time to first token: client, network and the server's queue. The server's
prefill (and a blocking call's decode) and this add up to ``agent_latency.ttft_ms``."""
