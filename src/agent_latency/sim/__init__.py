"""An embedded OpenAI-compatible model server whose latency follows a stated model.

It lets the benchmark and the tests measure time to first token (TTFT) without a real model or
a key, and it injects the faults real servers show. It speaks ``POST /v1/chat/completions``
(blocking and streaming, usage, tool calls), ``GET /v1/models`` and ``GET /v1/models/{id}``, and
answers errors with OpenAI's JSON body: 400 malformed request, 401 missing or wrong key, 404
unknown path or model, 405, 413 body too large, 415 not JSON, 429 rate limited (with
``Retry-After``), 500 server error.

Latency model:
    A request's prompt is tokenised as the configured model's server would (``tokenizer``: a
    name such as ``"cl100k"`` or ``"qwen"``, or a model name; see
    :mod:`agent_latency.sim._prompt`), tool definitions included, so ``usage.prompt_tokens`` is
    what that server would count.

    * time to first token = ``overhead_ms`` + uncached × (``prefill_ms_per_token`` +
      ``attention_ms_per_1k_context`` × prompt / 1000), where *uncached* is the prompt tokens
      the prefix cache does not hold and *prompt* all of them: each new token attends over the
      whole context, so prefill per token grows with the context
      (:meth:`SimulatorConfig.prefill_ms`);
    * then the remaining output tokens at ``decode_tokens_per_s``, one token per streamed chunk;
      a blocking request gets its whole answer when the last token is due.

    The context term is fitted to llama.cpp serving Gemma 3 270M on one CPU thread
    (docs/real-model.md and issue 12): cold prefills of 1,070 and 3,576 tokens ran at 304 and
    218 tokens/s, i.e. 3.29 and 4.59 ms per token, a line of 2.74 ms + 0.52 ms per 1k tokens of
    context, so each 1k tokens of context adds 19% to a token's cost. The same line agrees with
    the 25-call replay of issue 12, which prefilled 6,544 tokens at 272 tokens/s when trimmed
    prefix-stable to budget 1,500 (about 1,800 Gemma tokens of context) and 6,630 at 174 tokens/s
    untrimmed: the line gives 272 tokens/s at 1,800 tokens of context, and 174 tokens/s at 5,800,
    a likely mean context of the growing untrimmed conversation (its contexts were not logged).
    The defaults keep that 19% per 1k and scale it to a hosted 7B chat model: 0.16 ms + 0.03 ms
    per 1k tokens of context, plus 200 ms of overhead, give an 8,200-token agent prompt about
    3.5 s to its first token (as users of such models report) and a 1,700-token one 0.56 s;
    appending to a 5,800-token conversation costs 0.33 ms per new token, to a 1,800-token one
    0.21 ms.

    The prefix cache works like vLLM's automatic prefix caching serving a 7B model (full
    multi-head attention, 512 KiB of KV cache per token in fp16) on one 80 GB GPU: 16-token
    blocks, only whole blocks reused, never a prompt's last token; 100,000 tokens shared by all
    conversations, least recently used evicted first (a prompt's tail before its head); no idle
    expiry (``cache_lifetime_s`` sets one, e.g. 300 for OpenAI's 5 to 10 minutes).
    ``usage.prompt_tokens_details.cached_tokens`` reports the reuse. A request may opt out with
    ``"cache_prompt": false`` (llama.cpp's field). Requests are served concurrently without
    contention: the model is one of an unloaded server. Other cache rules: a minimum cached
    prefix (``cache_min_tokens``, OpenAI's 1,024 tokens) and llama.cpp's per-slot caches
    (``cache_slots``); see :mod:`agent_latency.sim._cache`.

    Every answer also carries llama.cpp's ``timings`` object (``cache_n``, ``prompt_n``,
    ``prompt_ms``, ``predicted_n``, ``predicted_ms`` and their per-token and per-second rates;
    ``cache_n + prompt_n`` is ``usage.prompt_tokens``): ``prompt_ms`` is the prefill above
    without ``overhead_ms``, ``predicted_ms`` runs from the first output token to the last. A
    blocking answer has it at the top level, a stream in its last chunk (the usage chunk with
    ``stream_options.include_usage``, else the chunk with the finish reason), as llama-server
    sends it.

Server profiles:
    :func:`server_profiles` lists configurations that mimic the servers people run
    (``openai-hosted``, ``deepseek``, ``vllm-h100-7b``, ``llama-cpu``), each with the sources of
    its figures; :func:`server_profile` finds one by name (docs/benchmarks.md).

Answers are deterministic: filler words, or tool calls when tools are offered and the
conversation ends with a user message (or ``tool_choice`` requires one): the tools the latest
user message names, in parallel unless ``parallel_tool_calls`` is false, else the one its
description fits best, else the next in turn (see :mod:`agent_latency.sim._answer`). After a
tool result the answer is text. Like OpenAI, the server refuses tool results that answer no call
and JSON with ``NaN`` or ``Infinity`` (400).

Serving: ``Ctrl-C`` stops at once: requests in progress end (a blocking one with a 503, a stream
with an error event), a request whose client is gone is dropped as soon as it goes, and a client
that has not sent a whole request (headers and body) within ``header_timeout_s`` gets a 408; a
request whose body is still arriving when the server stops gets a 503.

Exports: ``DEFAULT_MODEL``, ``RunningSimulator``, ``ServerProfile``, ``SimulatorConfig``,
``SimulatorStats``, ``create_app``, ``run_simulator``, ``running_simulator``,
``server_profile``, ``server_profiles``.

Example:
    >>> from agent_latency.sim import SimulatorConfig, running_simulator
    >>> with running_simulator(SimulatorConfig(overhead_ms=50)) as sim:  # doctest: +SKIP
    ...     print(sim.base_url, sim.stats.requests)
"""

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ModuleNotFoundError as exc:  # the server stack is the `sim` extra
    # Still a ModuleNotFoundError naming the missing module: the CLI names its own extra.
    raise ModuleNotFoundError(
        f"agent_latency.sim needs the sim extra ({exc.name} is not installed): "
        "pip install 'agent-latency[sim]'",
        name=exc.name,
    ) from exc

from ._app import SimulatorStats, create_app
from ._config import DEFAULT_MODEL, SimulatorConfig
from ._profiles import ServerProfile, server_profile, server_profiles
from ._server import RunningSimulator, run_simulator, running_simulator

__all__ = [
    "DEFAULT_MODEL",
    "RunningSimulator",
    "ServerProfile",
    "SimulatorConfig",
    "SimulatorStats",
    "create_app",
    "run_simulator",
    "running_simulator",
    "server_profile",
    "server_profiles",
]
