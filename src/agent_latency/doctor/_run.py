"""``run_checks``: every check of ``doctor``, in an order where a failure stops what it voids.

A failure that makes later probes meaningless (no server, a website instead of the API, a
refused key) stops the endpoint checks; the prefill probes are skipped when the server ignores
the output limit (each would block on a full-length answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.messages import HumanMessage

from agent_latency._redaction import redact
from agent_latency._server_usage import ServerUsage
from agent_latency.config import Settings
from agent_latency.doctor._check_result import CheckResult, CheckStatus
from agent_latency.doctor._checks import (
    check_api_key,
    check_api_root,
    check_first_token_split,
    check_model,
    check_output_limit,
    check_prefill,
    check_prefix_cache,
    check_server_slots,
    check_server_usage,
    check_streamed_usage,
    check_streaming,
    check_tokenizer,
    http_failure,
)
from agent_latency.doctor._latency import check_latency_model, endpoint_latency_model
from agent_latency.doctor._probes import Endpoint, HttpReply, PrefillSample, TokenizerProbe
from agent_latency.doctor._settings_checks import (
    check_configuration,
    check_context_budget,
    check_keep_rules,
    check_output_room,
    check_temperature,
)
from agent_latency.trimming import PriorityTrimmer


def run_checks(settings: Settings, *, endpoint: Endpoint | None = None) -> Iterator[CheckResult]:
    """Runs every check, yielding each result as soon as it is known.

    Args:
        settings: The loaded settings.
        endpoint: The probe client; by default one for ``settings`` (closed at the end).
    """
    yield from check_configuration(settings)
    yield check_context_budget(settings)
    yield check_output_room(settings)
    yield check_keep_rules(settings)
    yield check_temperature(settings)
    owned = endpoint is None
    probes = endpoint or Endpoint(settings)
    key = settings.llm.api_key
    secret = key.get_secret_value() if key is not None else None
    try:
        for result in _endpoint_checks(probes, settings):
            # A server's error message may echo the key, or the whole Authorization header.
            yield replace(result, message=redact(result.message, secret))
    finally:
        if owned:
            probes.close()


def tokenizer_in_use(
    settings: Settings,
) -> tuple[str, Callable[[str, Sequence[Mapping[str, Any]]], int]]:
    """Returns the name of the tokenizer the trimmer counts with, and a count of one request.

    The counter is the one ``PriorityTrimmer.from_settings(settings)`` uses (from ``llm.model``
    and ``llm.tokenizer``); the count is of a request of one user message holding the prompt
    and the tool definitions given, framing included, as the trimmer counts it.

    Raises:
        ValueError: When ``llm.tokenizer`` names no usable tokenizer.
    """
    # Every mode counts with this counter.
    counter = PriorityTrimmer.from_settings(settings, prefix_stable=True).token_counter

    def count(prompt: str, tools: Sequence[Mapping[str, Any]]) -> int:
        return counter.count_request([HumanMessage(prompt)], tools)

    exact = "" if counter.exact else " (an estimate: not the model's own vocabulary)"
    return f"{counter.name}{exact}", count


def _endpoint_checks(endpoint: Endpoint, settings: Settings) -> Iterator[CheckResult]:
    models = endpoint.get_models()
    api_root = None
    if models.status == 404 or models.is_html:
        api_root = endpoint.find_api_root()
    root = check_api_root(models, api_root=api_root)
    yield root
    if root.status is CheckStatus.FAIL:
        return
    key = check_api_key(models, key_configured=settings.llm.api_key is not None)
    yield key
    if key.status is CheckStatus.FAIL:
        return
    yield check_model(models, settings.llm.model)
    props = endpoint.get_props()
    if props is not None:
        yield check_server_slots(props, settings)
    limit_probe = endpoint.probe_limit()
    limit = check_output_limit(limit_probe)
    yield limit
    if not limit_probe.stream.reply.ok:
        return  # the request itself failed; the other probes would fail alike
    reports = [("output-limit probe", limit_probe.stream.usage)]
    streaming = endpoint.probe_streaming()
    reports.append(("streaming probe", streaming.usage))
    yield check_streaming(streaming, enabled=settings.streaming.enabled)
    if streaming.reply.ok and streaming.is_event_stream and streaming.chunk_ms:
        yield check_streamed_usage(streaming)
    if not streaming.reply.ok or limit.status is CheckStatus.FAIL:
        yield from _usage_check(reports)
        return  # a server ignoring the limit would answer each prefill probe at full length
    samples = endpoint.probe_prefill()
    if isinstance(samples, HttpReply):
        yield from _usage_check(reports)
        yield http_failure("prefill", samples)
        return
    reports += [(f"{s.prompt_tokens:,}-token prefill probe", s.usage) for s in samples]
    # The largest probe again: whether the server caches decides the prefill check's advice.
    again = endpoint.time_prompt(samples[-1].prompt)
    cold, warm = samples[-1], again if isinstance(again, PrefillSample) else None
    cache = check_prefix_cache(cold, warm) if warm is not None else None
    caches = cache is not None and cache.status is CheckStatus.PASS
    yield check_prefill(samples, settings, caches=caches)
    tokenizer = endpoint.probe_tokenizer()
    reports += [("tokenizer probe", tokenizer.usage), ("tool probe", tokenizer.tools_usage)]
    yield _tokenizer_check(tokenizer, settings)
    if warm is not None and cache is not None:
        reports.append(("repeated prefill probe", warm.usage))
        yield cache
        samples = [*samples, warm]
    elif not isinstance(again, PrefillSample):
        yield http_failure("prefix cache", again)
    split = check_first_token_split(cold, warm, streaming if streaming.chunk_ms else None)
    if split is not None:
        yield split
    yield from _usage_check(reports)
    yield check_latency_model(samples, settings, endpoint_latency_model(settings))


def _usage_check(reports: list[tuple[str, ServerUsage]]) -> Iterator[CheckResult]:
    found = check_server_usage(reports)
    if found is not None:
        yield found


def _tokenizer_check(probe: TokenizerProbe, settings: Settings) -> CheckResult:
    try:
        name, count = tokenizer_in_use(settings)
    except ValueError as exc:
        return CheckResult("tokenizer", CheckStatus.FAIL, str(exc), "correct llm.tokenizer")
    return check_tokenizer(probe, name, count, settings)
