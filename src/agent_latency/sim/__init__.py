"""An embedded OpenAI-compatible model server whose latency follows a stated model.

It lets the benchmark and the tests measure time to first token (TTFT) without a real model or
a key, and it injects the faults real servers show. It speaks ``POST /v1/chat/completions``
(blocking and streaming, usage, tool calls), ``GET /v1/models`` and ``GET /v1/models/{id}``, and
answers errors with OpenAI's JSON body: 400 malformed request, 401 missing or wrong key, 404
unknown path or model, 405, 413 body too large, 415 not JSON, 429 rate limited (with
``Retry-After``), 500 server error.

Latency model:
    A request's prompt is tokenised with the project's :class:`~agent_latency._tokens.TokenCounter`
    over a chat-template rendering (tool definitions first, then the messages, then the reply
    priming), so ``usage.prompt_tokens`` matches ``TokenCounter.count_messages`` plus the tools.

    * time to first token = ``overhead_ms`` + ``prefill_ms_per_token`` × prompt tokens not
      already cached;
    * then the remaining output tokens at ``decode_tokens_per_s``, one token per streamed chunk;
      a blocking request gets its whole answer when the last token is due.

    Prefix caching works like vLLM's and llama.cpp's: the longest token prefix the prompt shares
    with one of the last ``cache_entries`` prefilled prompts is not prefilled again (all tokens
    but the last at most); ``usage.prompt_tokens_details.cached_tokens`` reports it. Requests
    are served concurrently without contention: the model is one of an unloaded server.

    The defaults (200 ms + 0.4 ms per token, 50 tokens/s, 64-token answers) give an 8,200-token
    agent prompt about 3.5 s to its first token, as users of hosted 7B chat models report.

Answers are deterministic: filler words, or a call to the first offered tool when the
conversation ends with a user message (see :mod:`agent_latency.sim._answer`).

Example:
    >>> from agent_latency.sim import SimulatorConfig, running_simulator
    >>> with running_simulator(SimulatorConfig(overhead_ms=50)) as sim:  # doctest: +SKIP
    ...     print(sim.base_url, sim.stats.requests)
"""

from ._app import SimulatorStats, create_app
from ._config import DEFAULT_MODEL, SimulatorConfig
from ._server import RunningSimulator, run_simulator, running_simulator

__all__ = [
    "DEFAULT_MODEL",
    "RunningSimulator",
    "SimulatorConfig",
    "SimulatorStats",
    "create_app",
    "run_simulator",
    "running_simulator",
]
