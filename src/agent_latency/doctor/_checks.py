"""The checks of ``doctor`` that judge the endpoint's answers to the probes.

Every check is a plain function of a probe's observation (see :mod:`._probes`) and returns a
:class:`CheckResult` with a fix. Server error texts are quoted only when they cannot echo the
key, and never cut.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any, Final

from agent_latency._latency_model import fit_prefill
from agent_latency._redaction import display_url
from agent_latency._server_usage import MAX_REPORTED_TOKENS, ServerUsage
from agent_latency.config import Settings
from agent_latency.doctor._check_result import CheckResult, CheckStatus
from agent_latency.doctor._probes import (
    PREFILL_PROBE_TOKENS,
    HttpReply,
    LimitProbe,
    PrefillSample,
    ServerProps,
    StreamProbe,
    TokenizerProbe,
    listed_models,
)
from agent_latency.telemetry import TtftSplit, split_ttft

MIN_STREAM_CHUNKS: Final = 4
TOKENIZER_UNDERCOUNT: Final = 0.02
"""A tokenizer counting more than 2% below the server lets full prompts exceed the budget."""
TOKENIZER_OVERCOUNT: Final = 0.10
"""A tokenizer counting more than 10% above the server trims more than the budget asks."""

# Chunks closer together than this were read at once: released in one burst by a buffer, not
# decoded one by one (even 1,000 tokens/s leaves 1 ms between them).
_BURST_GAP_MS: Final = 0.25
# A prefix cache shows as a second identical prompt answered in at most half the time, and at
# least this much sooner (a smaller drop is within a fast server's noise).
_MIN_CACHE_GAIN_MS: Final = 20.0
_NO_ANSWER_FIX: Final = "check that llm.model is a chat model that answers; run doctor again"
_TOML_LIMIT_FIX = 'set llm.max_tokens_param = "{field}" in config.toml ([llm] table)'
_BUFFERING_FIX: Final = (
    "disable response buffering between client and server: nginx `proxy_buffering off;` "
    "(or the upstream header `X-Accel-Buffering: no`), no buffering middleware, and a client "
    "that reads the stream as it arrives"
)


def check_api_root(models: HttpReply, *, api_root: str | None = None) -> CheckResult:
    """Checks that ``GET {base_url}/models`` reached an API root.

    Args:
        models: The answer to ``GET {base_url}/models``.
        api_root: A URL found to answer as the API root, to suggest when base_url is not one.
    """
    if models.status is None:
        return CheckResult(
            "api root",
            CheckStatus.FAIL,
            f"cannot reach {display_url(models.url)}: {models.error}",
            "start the server, or correct llm.base_url (scheme, host, port); "
            "`agent-latency sim` serves http://127.0.0.1:8000/v1",
        )
    if models.status == 404 or models.is_html:
        answer = "an HTML page" if models.is_html else "404 Not Found"
        return CheckResult(
            "api root",
            CheckStatus.FAIL,
            f"GET {display_url(models.url)} answered {answer}: "
            "base_url points at the website, not the API root",
            f"set llm.base_url to {display_url(api_root)}"
            if api_root
            else "use the API root from the provider's docs, usually ending in /v1 "
            "(e.g. https://host/v1)",
        )
    if models.ok and models.body is None:
        return CheckResult(
            "api root",
            CheckStatus.FAIL,
            f"GET {display_url(models.url)} answered {models.status}, but not in JSON: "
            "base_url points at a server that does not speak the OpenAI API",
            "use the API root from the provider's docs, usually ending in /v1 "
            "(e.g. https://host/v1); `agent-latency sim` serves http://127.0.0.1:8000/v1",
        )
    if models.ok or models.status in (401, 403):
        return CheckResult(
            "api root",
            CheckStatus.PASS,
            f"GET {display_url(models.url)} answered {models.status} with an API answer",
        )
    return http_failure("api root", models)


def check_api_key(models: HttpReply, *, key_configured: bool) -> CheckResult:
    """Checks that the server accepted the key (or needs none), from an API answer."""
    if models.status == 401:
        found = (
            "the server refused the key (401 Unauthorized)"
            if key_configured
            else "the server wants an API key and none is configured (401 Unauthorized)"
        )
        return CheckResult(
            "api key",
            CheckStatus.FAIL,
            found,
            "set llm.api_key in config.toml or AGENT_LATENCY_API_KEY to a key issued for this "
            "base_url (one provider's keys do not work on another's URL)",
        )
    if models.status == 403:
        return CheckResult(
            "api key",
            CheckStatus.FAIL,
            "the server knows the key but refuses this request (403 Forbidden)",
            "check the key's project and permissions for this model, or use another key",
        )
    if models.ok:
        found = "accepted" if key_configured else "not needed by this server"
        return CheckResult("api key", CheckStatus.PASS, f"the key is {found}")
    return http_failure("api key", models)


def check_model(models: HttpReply, model: str) -> CheckResult:
    """Checks that the configured model is among those the server lists."""
    listed = listed_models(models.body)
    if model in listed:
        return CheckResult("model", CheckStatus.PASS, f"{model!r} is served")
    if not listed:
        return CheckResult(
            "model",
            CheckStatus.WARN,
            f"the server lists no models, so {model!r} cannot be checked",
            "make sure llm.model names a model this server runs",
        )
    shown = ", ".join(listed[:5]) + (", ..." if len(listed) > 5 else "")
    return CheckResult(
        "model",
        CheckStatus.WARN,
        f"{model!r} is not among the {len(listed)} models listed ({shown})",
        "set llm.model (or AGENT_LATENCY_MODEL) to one of them",
    )


def check_output_limit(probe: LimitProbe) -> CheckResult:
    """Checks that the server stops at the output limit it is sent."""
    if not probe.stream.reply.ok:
        return http_failure("output limit", probe.stream.reply, limit_field=probe.field)
    got = (
        f"still generating after {probe.received} (stopped reading)"
        if probe.cut_off
        else f"got {probe.received}"
    )
    found = f"asked for {probe.requested} tokens via {probe.field}, {got}"
    if probe.received == 0:
        return CheckResult(
            "output limit",
            CheckStatus.WARN,
            f"asked for {probe.requested} tokens via {probe.field}, got no answer, so whether "
            f"the server stops at {probe.field} cannot be told",
            _NO_ANSWER_FIX,
        )
    if probe.received <= probe.requested and not probe.cut_off:
        return CheckResult("output limit", CheckStatus.PASS, found)
    other = _other_limit_field(probe.field)
    return CheckResult(
        "output limit",
        CheckStatus.FAIL,
        f"{found}: the server ignores {probe.field}; such a server generates until its "
        "context is full and blocks for minutes",
        _TOML_LIMIT_FIX.format(field=other),
    )


def stream_bursts(chunk_ms: Sequence[float]) -> int:
    """Returns in how many separate bursts the chunks arrived (gaps under 0.25 ms join them)."""
    if not chunk_ms:
        return 0
    return 1 + sum(1 for before, after in pairwise(chunk_ms) if after - before >= _BURST_GAP_MS)


def check_streaming(probe: StreamProbe, *, enabled: bool = True) -> CheckResult:
    """Checks that a streamed answer's chunks arrive one by one, not in one burst at the end.

    Buffering is judged by the arrival pattern, not the time between first and last chunk: a
    fast server decodes 32 tokens in 30 ms, yet each chunk arrives on its own; a buffer releases
    them all within a fraction of a millisecond. Streaming passes when the chunks arrive in at
    least :data:`MIN_STREAM_CHUNKS` separate bursts.
    """
    if not probe.reply.ok:
        return http_failure("streaming", probe.reply)
    if not probe.is_event_stream:
        return CheckResult(
            "streaming",
            CheckStatus.FAIL,
            "a request with stream=true got one JSON body: the server or a proxy does not stream",
            _BUFFERING_FIX,
        )
    count = len(probe.chunk_ms)
    if count == 0:
        return CheckResult(
            "streaming",
            CheckStatus.WARN,
            "the model answered nothing to the streaming probe (an empty answer), so streaming "
            "could not be judged",
            _NO_ANSWER_FIX,
        )
    if count < MIN_STREAM_CHUNKS:
        return CheckResult(
            "streaming",
            CheckStatus.WARN,
            f"the model's answer came in only {count} content chunks ({probe.text!r}), too few "
            "to tell streaming from buffering",
            "run doctor again; if it persists, the server sends large chunks",
        )
    first, last = probe.chunk_ms[0], probe.chunk_ms[-1]
    bursts = stream_bursts(probe.chunk_ms)
    timing = f"first of {count} chunks after {first:.0f} ms, last after {last:.0f} ms"
    if bursts < MIN_STREAM_CHUNKS:
        return CheckResult(
            "streaming",
            CheckStatus.FAIL,
            f"{timing}, in {bursts} burst{'' if bursts == 1 else 's'}: the client or a proxy "
            "buffers the stream, so the first token arrives with the last",
            _BUFFERING_FIX,
        )
    if not enabled:
        return CheckResult(
            "streaming",
            CheckStatus.WARN,
            f"the endpoint streams ({timing}), but streaming is off in the settings",
            "set llm.streaming.enabled = true (or streaming.enabled in settings.json)",
        )
    return CheckResult("streaming", CheckStatus.PASS, f"{timing}, each on its own")


def check_streamed_usage(probe: StreamProbe) -> CheckResult:
    """Checks that a streamed answer ends with its usage when ``include_usage`` asks for it.

    The message says what the usage holds: the prompt tokens, the cached ones where the server
    reports its prefix cache.
    """
    usage = probe.usage
    if probe.completion_tokens is not None:
        held = [f"{usage.completion_tokens:,} completion tokens"]
        if usage.prompt_tokens is not None:
            held.insert(0, f"{usage.prompt_tokens:,} prompt tokens")
        if usage.cached_tokens is not None:
            held.append(f"{usage.cached_tokens:,} of them cached")
        return CheckResult(
            "streamed usage",
            CheckStatus.PASS,
            "a streamed answer reports its usage when stream_options.include_usage asks "
            f"({', '.join(held)})",
        )
    return CheckResult(
        "streamed usage",
        CheckStatus.WARN,
        "the server sends no usage when streaming, even with stream_options.include_usage: "
        "streamed calls carry no server token counts (spans, calibration and the bench fall "
        "back to the local count)",
        "nothing to change in the settings; a server version that honours "
        "stream_options.include_usage gives the server's counts",
    )


def check_prefill(
    samples: Sequence[PrefillSample], settings: Settings, *, caches: bool = False
) -> CheckResult:
    """Estimates the prefill cost and the budget that keeps TTFT under ``ttft_warn_ms``.

    The cost is the latency model fitted to the probes (:func:`fit_prefill`): the fit ``bench``
    prints and plots for its budget sweep.

    Args:
        samples: The prefill probes, nothing cached.
        settings: The settings checked.
        caches: Whether the server caches prompt prefixes: then a warm call of a conversation
            prefills only what is new, and the advice is to cut rarely, not to cut deeper.
    """
    fit = fit_prefill((sample.prompt_tokens, sample.ttft_ms) for sample in samples)
    if fit is None:
        return CheckResult(
            "prefill",
            CheckStatus.WARN,
            "the probes did not give two distinct prompt sizes; prefill cost not measured",
            "run doctor again; check that the server reports usage.prompt_tokens",
        )
    warn_ms = settings.metrics.ttft_warn_ms
    budget = settings.prompt.token_budget
    limit = fit.budget_under(warn_ms)
    if limit is None:
        return CheckResult(
            "prefill",
            CheckStatus.PASS,
            f"TTFT did not grow with prompt size (about {fit.coefficients.fixed_ms:.0f} ms): "
            f"prefill is too fast to limit token_budget {budget}",
        )
    cost = fit.describe()  # the latency model's fit, as bench --plot draws it
    if limit == 0:
        return CheckResult(
            "prefill",
            CheckStatus.WARN,
            f"{cost}: even a short prompt misses first_token_warn_ms {warn_ms} ms",
            "use a faster or less loaded server, or raise first_token_warn_ms",
        )
    found = f"{cost}; TTFT stays under {warn_ms} ms up to ≈ {limit:,} prompt tokens"
    largest = max(sample.prompt_tokens for sample in samples)
    if largest < PREFILL_PROBE_TOKENS[-1] / 2:
        found += (
            f" (the probes went up to {largest:,} tokens only: larger ones would not have been "
            "answered within the probe timeout)"
        )
    if limit >= budget:
        return CheckResult("prefill", CheckStatus.PASS, f"{found} (token_budget {budget:,})")
    if caches:
        window = settings.llm.context_window
        most = (
            "the context window less reserve_for_output"
            if window is None
            else f"{window - settings.prompt.reserve_for_output:,} (context_window - "
            "reserve_for_output)"
        )
        return CheckResult(
            "prefill",
            CheckStatus.WARN,
            f"{found}, below token_budget {budget:,}: full prompts will exceed "
            "first_token_warn_ms when nothing is cached; but this server caches prompt "
            "prefixes, so a warm call of a conversation prefills only what is new, and a lower "
            "budget would make the trimmer cut, and prefill again what it keeps, more often",
            f"keep token_budget near {most} so that cuts are rare (the cache-first default cuts "
            f"deep and appends in between); lower it toward {limit - limit % 100 or limit} only "
            "for requests that start cold, or accept a higher first_token_warn_ms",
        )
    return CheckResult(
        "prefill",
        CheckStatus.WARN,
        f"{found}, below token_budget {budget:,}: full prompts will exceed first_token_warn_ms",
        f"lower token_budget to about {limit - limit % 100 or limit}, or accept a higher "
        "first_token_warn_ms",
    )


def check_tokenizer(
    probe: TokenizerProbe,
    name: str,
    count: Callable[[str, Sequence[Mapping[str, Any]]], int],
    settings: Settings,
) -> CheckResult:
    """Compares the local count of known requests with the server's ``usage.prompt_tokens``.

    The probe's text mixes English and Chinese, and the same text is sent again with tool
    definitions: vocabularies differ most on Chinese, chat templates on tools, so a counter in
    another model's tokens or framing shows in one part or the other. Each part's error is
    judged by its share of the whole request (the tools' alone can be large and still small in
    tokens).

    Args:
        probe: The tokenizer probe's requests and the server's answers.
        name: The tokenizer in use, as shown.
        count: The local count of a request of one user message and tool definitions, framing
            included.
        settings: For the budget the error applies to.
    """
    if not probe.reply.ok:
        return http_failure("tokenizer", probe.reply)
    server_text = probe.usage.prompt_tokens
    if not server_text:
        return CheckResult(
            "tokenizer",
            CheckStatus.WARN,
            f"{name}: the server reports no usage.prompt_tokens, so its error is not measured",
            "compare the token counts in the server's own logs with ours, or set llm.tokenizer "
            "to the model's tokenizer",
        )
    ours_text = count(probe.prompt, ())
    ours, server = ours_text, server_text
    parts = [
        f"{name} counts {ours_text:,} tokens where the server counts {server_text:,} "
        f"({ours_text / server_text - 1:+.1%}) for English and Chinese text"
    ]
    server_with_tools = probe.tools_usage.prompt_tokens
    if probe.tools_reply is not None and not probe.tools_reply.ok:
        parts.append(
            f"the server refused tool definitions ({_refusal(probe.tools_reply)}), so they "
            "were not compared"
        )
    elif server_with_tools is not None:
        ours = count(probe.prompt, probe.tools)
        server = server_with_tools
        tools = f"{len(probe.tools)} tool definitions"
        ours_tools, server_tools = ours - ours_text, server - server_text
        parts.append(
            f"for {tools} {ours_tools:,} where it counts {server_tools:,}"
            + (" (its chat template renders no tools)" if server_tools == 0 else "")
        )
    text_error = (ours_text - server_text) / server
    tools_error = ((ours - ours_text) - (server - server_text)) / server
    found = "; ".join(parts)
    budget = settings.prompt.token_budget
    if text_error < -TOKENIZER_UNDERCOUNT:
        return CheckResult(
            "tokenizer",
            CheckStatus.WARN,
            f"{found}: a prompt of such text trimmed to token_budget {budget:,} may be about "
            f"{round(budget * server_text / ours_text):,} tokens to the server",
            "set llm.tokenizer to the model's own tokenizer (a known name, a tokenizer.json "
            'path, or "server"), or lower token_budget to about '
            f"{int(budget * ours_text / server_text):,}",
        )
    if tools_error < -TOKENIZER_UNDERCOUNT:
        return CheckResult(
            "tokenizer",
            CheckStatus.WARN,
            f"{found}: tool definitions count more to the server than to the trimmer, so "
            f"requests with tools may exceed token_budget {budget:,}",
            "set llm.tokenizer to the model's own tokenizer (a known name, a tokenizer.json "
            'path, or "server"), or set llm.model to the served model\'s name (its chat '
            "template frames the tools)",
        )
    if max(text_error, tools_error) > TOKENIZER_OVERCOUNT:
        return CheckResult(
            "tokenizer",
            CheckStatus.WARN,
            f"{found}: prompts are trimmed further than token_budget {budget:,} needs",
            "set llm.tokenizer to the model's own tokenizer (a known name, a tokenizer.json "
            'path, or "server")',
        )
    return CheckResult("tokenizer", CheckStatus.PASS, found)


def check_prefix_cache(first: PrefillSample, again: PrefillSample) -> CheckResult:
    """Tells from the same prompt sent twice whether the endpoint caches prompt prefixes.

    The second answer's reported cached tokens decide; a server that reports none caches when
    the second answer comes in at most half the time (and at least 20 ms sooner).
    """
    size = f"the same {first.prompt_tokens:,}-token prompt sent twice"
    timing = f"TTFT {first.ttft_ms:,.0f} ms, then {again.ttft_ms:,.0f} ms"
    if again.cached_tokens:
        return CheckResult(
            "prefix cache",
            CheckStatus.PASS,
            f"{size}: {again.cached_tokens:,} tokens reported cached the second time ({timing})",
        )
    gain = first.ttft_ms - again.ttft_ms
    if (
        again.cached_tokens is None
        and again.ttft_ms <= first.ttft_ms / 2
        and (gain >= _MIN_CACHE_GAIN_MS)
    ):
        return CheckResult(
            "prefix cache",
            CheckStatus.PASS,
            f"{size}: {timing}; the server caches prefixes but reports no cached tokens",
        )
    said = "0 tokens reported cached" if again.cached_tokens == 0 else "no cached tokens reported"
    return CheckResult(
        "prefix cache",
        CheckStatus.WARN,
        f"{size}: {said}, {timing}: no sign of a prefix cache, so every call prefills its whole "
        "prompt",
        "enable the server's prefix cache (vLLM: --enable-prefix-caching; llama.cpp and SGLang "
        "cache by default); multi-turn agents gain the most from it",
    )


def first_token_split(
    ttft_ms: float | None, usage: ServerUsage, *, streamed: bool
) -> TtftSplit | None:
    """The split of one probe's time to first token by what the server reported about it
    (telemetry's rule, :func:`agent_latency.telemetry.split_ttft`)."""
    return split_ttft(
        ttft_ms,
        prefill_ms=usage.prefill_ms,
        decode_ms=usage.decode_ms,
        prefilled_tokens=usage.prefilled_tokens,
        streamed=streamed,
    )


def check_first_token_split(
    cold: PrefillSample, warm: PrefillSample | None, stream: StreamProbe | None
) -> CheckResult | None:
    """Says where each probe's time to first token went, where the server says how long it
    prefilled (llama.cpp's ``timings``, vLLM's per-request metrics).

    The parts (the server's prefill, a blocking answer's decode, and the rest: client, network
    and queue) add up to the time the client waited; a server claiming more than that (beyond
    telemetry's tolerance) is not believed.

    Args:
        cold: The largest prefill probe, nothing cached.
        warm: The same prompt sent again, if it was.
        stream: The streaming probe, if it streamed.

    Returns:
        The split, or ``None`` when the server reports no prefill time.
    """
    probes: list[tuple[str, float | None, ServerUsage, bool]] = [
        (f"the {cold.prompt_tokens:,}-token probe", cold.ttft_ms, cold.usage, False)
    ]
    if warm is not None:
        cached = warm.cached_tokens
        again = "the same again" + (f" ({cached:,} cached)" if cached is not None else "")
        probes.append((again, warm.ttft_ms, warm.usage, False))
    if stream is not None:
        probes.append(("the streamed probe", stream.ttft_ms, stream.usage, True))
    found, doubted = [], []
    for label, ttft_ms, usage, streamed in probes:
        if usage.prefill_ms is None:
            continue
        split = first_token_split(ttft_ms, usage, streamed=streamed)
        if split is None:
            doubted.append(label)
        else:
            found.append(f"{label}: {split.describe()}")
    if doubted:
        return CheckResult(
            "first token",
            CheckStatus.WARN,
            f"the server reports more prefill time than the client waited for {', '.join(doubted)}"
            ": its timings are not believed, and spans carry no split for such calls",
            "check for a proxy that answers from its own cache or rewrites the answer's timings",
        )
    if not found:
        return None
    return CheckResult("first token", CheckStatus.PASS, "; ".join(found))


def check_server_slots(props: ServerProps, settings: Settings) -> CheckResult:
    """Checks what llama.cpp's server says of itself (``/props``) against the settings.

    One slot serves one request at a time and keeps one prompt's prefix cache, so concurrent
    conversations evict each other; a request longer than a slot's context is refused (HTTP 400
    "exceeds the available context size").
    """
    window = settings.llm.context_window
    n_ctx = props.slot_context
    per_slot = f" of {n_ctx:,} tokens" if n_ctx is not None else ""
    tools = {
        True: "",
        False: "; its chat template renders no tool definitions or tool calls (the model never "
        "sees them, and they cost no prompt tokens)",
        None: "",
    }[props.renders_tools]
    found = (
        f"llama.cpp server (build {props.build}): {props.slots} slot"
        f"{'' if props.slots == 1 else 's'}{per_slot}, each with its own prefix cache{tools}"
    )
    if n_ctx is not None and window is not None and window > n_ctx:
        return CheckResult(
            "server",
            CheckStatus.FAIL,
            f"{found}: llm.context_window {window:,} exceeds a slot's {n_ctx:,}, so prompts "
            f"above {n_ctx:,} tokens are refused",
            f"set llm.context_window = {n_ctx}, or start llama-server with --ctx-size "
            f"{props.slots * window} (--parallel {props.slots} slots × {window:,})",
        )
    if props.slots == 1:
        return CheckResult(
            "server",
            CheckStatus.WARN,
            f"{found}: one slot serves one request at a time, and concurrent conversations "
            "evict each other's prefix cache",
            "start llama-server with --parallel N (N = the conversations served at once) and "
            "--ctx-size N × the context each needs",
        )
    if n_ctx is not None and window is None:
        return CheckResult(
            "server",
            CheckStatus.WARN,
            f"{found}; llm.context_window is not set",
            f"set llm.context_window = {n_ctx} in config.toml",
        )
    return CheckResult("server", CheckStatus.PASS, found)


def check_server_usage(reports: Sequence[tuple[str, ServerUsage]]) -> CheckResult | None:
    """Fails when the server reported impossible counts (negative, fractional, above any
    context window, more cached than prompt tokens) in any probe's answer.

    Such fields are read as not reported (:attr:`ServerUsage.invalid`): the other checks fall
    back to local counts for them, and this one says so.

    Args:
        reports: Each probe's name and what its answer reported.

    Returns:
        The failure, or ``None`` when every report was possible.
    """
    bad = [(name, usage.invalid) for name, usage in reports if usage.invalid]
    if not bad:
        return None
    where = "; ".join(f"{', '.join(fields)} in its answer to the {name}" for name, fields in bad)
    return CheckResult(
        "server usage",
        CheckStatus.FAIL,
        f"the server reported impossible usage: {where} (negative, not a whole number, above "
        f"{MAX_REPORTED_TOKENS:,} tokens, or more cached than prompt tokens); doctor counted "
        "those prompts itself, and the callback handler, the calibration and the latency "
        "model ignore such fields",
        "the server or a proxy in front of it rewrites usage wrongly: upgrade or fix it; until "
        "then the token counts on spans come from the local tokenizer",
    )


# --- helpers --------------------------------------------------------------------------------


def _refusal(reply: HttpReply | None) -> str:
    if reply is None:
        return "no answer"
    said = _server_message(reply)
    return f"HTTP {reply.status}" + (f": {said}" if said else "")


def _other_limit_field(field: str) -> str:
    return "max_completion_tokens" if field == "max_tokens" else "max_tokens"


def _server_message(reply: HttpReply) -> str:
    """Returns the server's error message on one line; auth errors are never quoted (they may
    echo part of the key)."""
    if reply.status in (401, 403) or not isinstance(reply.body, dict):
        return ""
    error = reply.body.get("error")
    message = error.get("message") if isinstance(error, dict) else reply.body.get("detail")
    return " ".join(str(message).split()) if message else ""


def http_failure(name: str, reply: HttpReply, *, limit_field: str | None = None) -> CheckResult:
    """Explains a probe request that got no answer or an error status."""
    if reply.status is None:
        return CheckResult(
            name,
            CheckStatus.FAIL,
            f"{display_url(reply.url)}: {reply.error}",
            "check that the server is up and not overloaded; llm.base_url must be reachable",
        )
    if reply.status in (401, 403):
        return replace(check_api_key(reply, key_configured=True), name=name)
    said = _server_message(reply) or reply.error or ""
    found = f"{display_url(reply.url)} answered {reply.status}" + (f": {said}" if said else "")
    if reply.ok:  # an answer that is no chat completion
        fix = (
            "llm.base_url must be the API root of an OpenAI-compatible server (e.g. "
            "https://host/v1), not a website; `agent-latency sim` serves http://127.0.0.1:8000/v1"
        )
    elif reply.status == 404:
        fix = "set llm.model to a model the server runs (see the model check above)"
    elif reply.status in (400, 422) and limit_field is not None and limit_field in said:
        fix = _TOML_LIMIT_FIX.format(field=_other_limit_field(limit_field))
    elif reply.status in (400, 422):
        fix = "the server refused the request; see its message and the server's docs"
    elif reply.status == 429:
        fix = "the server is rate-limiting; wait and run doctor again, or raise the limit"
    else:
        fix = "the server failed; see its logs"
    return CheckResult(name, CheckStatus.FAIL, found, fix)
