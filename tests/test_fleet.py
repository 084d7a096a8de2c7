"""The fleet deployment files (deploy/, otel-collector.yaml, docs/docker-compose.yaml) against a
real export: every metric and label the alert rules, the Grafana dashboard and Jaeger's Monitor
tab query must be one the collector serves for what agent-latency actually sends.

promtool itself runs in deploy/check.sh (rule syntax, unit tests, dashboard expressions).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fleet_export import (
    UNKNOWN_MODEL,
    FleetRun,
    Series,
    collector_config,
    llama_server_series,
    prometheus_name,
    prometheus_series,
    record_fleet_run,
    scaling_figures,
)

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "rules" / "agent-latency.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "agent-latency.test.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "agent-latency.json"
COMPOSE = ROOT / "docs" / "docker-compose.yaml"
JAEGER_CONFIG = DEPLOY / "jaeger" / "config.yaml"
WORKFLOW = ROOT / "examples" / "release-gate.yml"
SCALING_DOC = ROOT / "docs" / "scaling.md"

# The PromQL Jaeger 2.5's Monitor tab sends (internal/storage/metricstore/prometheus/metricstore/
# reader.go, normalize_calls and normalize_duration on, default namespace traces_span_metrics),
# for the chat spans: span kind "Client" in the tab.
JAEGER_SPM_QUERIES = (
    'sum(rate(traces_span_metrics_calls_total{service_name =~ "agent-latency", '
    'span_kind =~ "SPAN_KIND_CLIENT"}[10m])) by (service_name,span_name)',
    'sum(rate(traces_span_metrics_calls_total{service_name =~ "agent-latency", '
    'status_code = "STATUS_CODE_ERROR", span_kind =~ "SPAN_KIND_CLIENT"}[10m])) by (service_name) '
    '/ sum(rate(traces_span_metrics_calls_total{service_name =~ "agent-latency", '
    'span_kind =~ "SPAN_KIND_CLIENT"}[10m])) by (service_name)',
    "histogram_quantile(0.95, sum(rate(traces_span_metrics_duration_milliseconds_bucket"
    '{service_name =~ "agent-latency", span_kind =~ "SPAN_KIND_CLIENT"}[10m])) '
    "by (service_name,span_name,le))",
)

PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}


# --- PromQL: the metric names and label matchers an expression uses ------------------------


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def selectors(expr: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """Every ``metric{label op "value"}`` of ``expr``: the metric name and its matchers."""
    found: list[tuple[str, dict[str, tuple[str, str]]]] = []
    pattern = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{([^}]*)\})?")
    # Drop clauses whose parentheses hold label names, not metrics, and range durations.
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    position = 0
    while match := pattern.search(text, position):
        position = match.end()
        name, braces, body = match.group(1), match.group(2), match.group(3)
        before = text[: match.start()]
        if before.endswith(('"', "{")) or re.search(r"[A-Za-z0-9_.]$", before):
            continue
        after = text[match.end() :].lstrip()
        if not braces and after.startswith("("):
            continue  # a function or aggregation
        if name.lower() in PROMQL_KEYWORDS or re.fullmatch(r"\d.*", name):
            continue
        if name in ("sum", "avg", "min", "max", "count", "rate") and not braces:
            continue
        matchers: dict[str, tuple[str, str]] = {}
        for label, op, value in re.findall(
            r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', body or ""
        ):
            matchers[label] = (op, value)
        found.append((name, matchers))
    return found


def test_selector_parsing_finds_names_and_matchers() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (gen_ai_request_model, le) "
        '(rate(foo_bucket{a="x", b=~"y.*"}[5m]))) / ignoring (c) group_left '
        "sum without (d) (bar_total) > 1/60 and on (e) baz:recorded"
    )
    assert selectors(expr) == [
        ("foo_bucket", {"a": ("=", "x"), "b": ("=~", "y.*")}),
        ("bar_total", {}),
        ("baz:recorded", {}),
    ]


# --- The files under test ------------------------------------------------------------------


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def dashboard_exprs() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location(
        "dashboard_rules", DEPLOY / "grafana" / "dashboard_rules.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs: dict[str, str] = module.dashboard_exprs(dashboard)
    return exprs


def queried_exprs() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every expression the rules, the dashboard and Jaeger evaluate."""
    for rule in rules():
        yield f"rule {rule.get('record') or rule.get('alert')}", rule["expr"]
    for where, expr in dashboard_exprs().items():
        yield f"dashboard {where}", expr
    for n, expr in enumerate(JAEGER_SPM_QUERIES):
        yield f"jaeger monitor query {n}", expr


# --- A real export -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet_run() -> FleetRun:
    return record_fleet_run()


@pytest.fixture(scope="module")
def served(fleet_run: FleetRun) -> Series:
    """What Prometheus holds: the collector's series and llama-server's own."""
    return {**prometheus_series(fleet_run), **llama_server_series()}


def test_the_run_exports_every_kind_of_call(fleet_run: FleetRun) -> None:
    """The scenario really produced slow, stalled, over-budget, trimmed and failed calls."""
    chat = [span for span in fleet_run.spans if span.attributes.get("gen_ai.operation.name")]
    assert len(chat) == fleet_run.model_calls == 5
    levels = {span.attributes.get("agent_latency.ttft_level") for span in chat}
    assert {"warn", "error"} <= levels
    assert any(span.attributes.get("agent_latency.stalls", 0) >= 1 for span in chat)
    over_budget = [span.attributes.get("agent_latency.trim.over_budget") for span in chat]
    assert over_budget.count(True) == 1 and over_budget.count(False) == 2
    failed = [span for span in chat if span.attributes.get("agent_latency.outcome") == "error"]
    assert [span.attributes["gen_ai.request.model"] for span in failed] == [UNKNOWN_MODEL]
    assert all(span.status_code == 2 for span in failed)


def test_prometheus_names_follow_the_exporter_rules() -> None:
    """The translation used below, on the cases the collector documents."""
    assert prometheus_name("gen_ai.client.operation.duration", "s", "histogram") == (
        "gen_ai_client_operation_duration_seconds"
    )
    assert prometheus_name("gen_ai.client.token.usage", "{token}", "histogram") == (
        "gen_ai_client_token_usage"
    )
    assert prometheus_name("agent_latency.client.stalls", "{stall}", "counter") == (
        "agent_latency_client_stalls_total"
    )
    assert prometheus_name("traces.span.metrics.duration", "ms", "histogram") == (
        "traces_span_metrics_duration_milliseconds"
    )
    assert prometheus_name("traces.span.metrics.calls", "", "counter") == (
        "traces_span_metrics_calls_total"
    )


def test_the_export_has_the_metrics_docs_telemetry_lists(served: Series) -> None:
    for name in (
        "gen_ai_client_operation_duration_seconds_bucket",
        "gen_ai_client_operation_time_to_first_chunk_seconds_bucket",
        "gen_ai_client_token_usage_sum",
        "agent_latency_client_stalls_total",
        "agent_latency_client_ttft_breaches_total",
        "traces_span_metrics_calls_total",
        "traces_span_metrics_duration_milliseconds_bucket",
        "agent_latency_trim_tokens_before_total",
        "agent_latency_trim_tokens_after_total",
    ):
        assert name in served, name
    assert served["agent_latency_client_ttft_breaches_total"]["agent_latency_ttft_level"] >= {
        "warn",
        "error",
    }
    calls = served["traces_span_metrics_calls_total"]
    assert calls["agent_latency_trim_over_budget"] == {"true", "false"}
    assert "SPAN_KIND_CLIENT" in calls["span_kind"]
    assert "STATUS_CODE_ERROR" in calls["status_code"]


def _problems(expr: str, served: Series, recorded: set[str]) -> list[str]:
    problems: list[str] = []
    for name, matchers in selectors(expr):
        if name in recorded or name == "ALERTS":
            continue
        if name not in served:
            problems.append(f"metric {name} is not exported")
            continue
        labels = served[name]
        for label, (op, value) in matchers.items():
            if label not in labels:
                problems.append(f"{name} has no label {label}")
            elif op == "=" and value and value not in labels[label]:
                problems.append(f'{name}{{{label}="{value}"}} never appears')
    # Labels aggregated by must exist on one of the metrics of the expression.
    known = {label for name, _ in selectors(expr) for label in served.get(name, {})}
    known |= {"le", "service_name"} if "histogram_quantile" in expr else set()
    for clause in re.findall(r"\b(?:by|on|ignoring)\s*\(([^)]*)\)", expr):
        for label in filter(None, (part.strip() for part in clause.split(","))):
            uses_recorded = any(name in recorded for name, _ in selectors(expr))
            if label not in known and not uses_recorded:
                problems.append(f"no metric of the expression has the label {label}")
    return problems


@pytest.mark.parametrize("where", [where for where, _ in queried_exprs()])
def test_every_queried_metric_and_label_is_exported(where: str, served: Series) -> None:
    """Each expression of the rules, the dashboard and Jaeger's Monitor tab queries metric
    names, labels and label values the real export has (or recording rules defined here)."""
    expr = dict(queried_exprs())[where]
    assert selectors(expr), f"{where}: no metric found in {expr!r}"
    assert _problems(expr, served, recorded_names()) == []


def test_a_misspelt_name_or_label_is_caught(served: Series) -> None:
    recorded = recorded_names()
    assert _problems("rate(gen_ai_client_operation_ttft_seconds_bucket[5m])", served, recorded)
    assert _problems(
        'rate(gen_ai_client_token_usage_sum{gen_ai_token_typ="input"}[5m])', served, recorded
    )
    assert _problems(
        'rate(gen_ai_client_token_usage_sum{gen_ai_token_type="inputs"}[5m])', served, recorded
    )
    assert _problems(
        "sum by (model) (rate(gen_ai_client_operation_duration_seconds_count[5m]))",
        served,
        recorded,
    )


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert len(alerts) == 7
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    quiet = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if not case["exp_alerts"]
    }
    assert fired == alerts and quiet == alerts
    assert tests["rule_files"] == ["../rules/agent-latency.rules.yml"]


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    titles = " | ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for topic in ("ttft p50 / p95", "prompt tokens", "cached", "stalls", "trims", "over-budget"):
        assert topic in titles, topic
    assert "error" in titles
    exprs = " ".join(dashboard_exprs().values())
    assert "histogram_quantile(0.50" in exprs and "histogram_quantile(0.95" in exprs
    # The client's time to first token beside the server's prefill, and llama-server's
    # own cache hit ratio beside the clients'.
    [split] = [p for p in dashboard["panels"] if "server prefill" in p["title"].lower()]
    split_exprs = " ".join(target["expr"] for target in split["targets"])
    for metric in (
        "gen_ai_client_operation_time_to_first_chunk_seconds",
        "agent_latency_client_ttft_server_prefill_seconds",
        "agent_latency_client_ttft_remainder_seconds",
    ):
        assert metric in split_exprs, metric
    [ratio] = [p for p in dashboard["panels"] if "llama-server's counters" in p["title"]]
    ratio_exprs = " ".join(target["expr"] for target in ratio["targets"])
    assert "llamacpp:prompt_tokens_cached_total" in ratio_exprs
    assert 'agent_latency_token_cache="read"' in ratio_exprs
    datasources = {
        target["datasource"]["uid"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    }
    provisioned = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text(encoding="utf-8")
    )
    assert datasources == {source["uid"] for source in provisioned["datasources"]}


# --- docs/docker-compose.yaml and the configurations it mounts ------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return loaded


def test_compose_runs_the_four_services_with_pinned_images() -> None:
    services = compose()["services"]
    assert set(services) == {"otel-collector", "jaeger", "prometheus", "grafana"}
    for name, service in services.items():
        image, _, tag = service["image"].rpartition(":")
        assert image and tag and tag != "latest", f"{name}: unpinned image {service['image']}"
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {tag}"
        for dependency in service.get("depends_on", []):
            assert dependency in services


def test_compose_mounts_exist_and_ports_do_not_clash() -> None:
    published: list[str] = []
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert (COMPOSE.parent / source).resolve().exists(), f"{name}: {source}"
            assert target.startswith("/"), f"{name}: {target}"
        published += [port.split(":")[0] for port in service.get("ports", [])]
    assert len(published) == len(set(published))
    assert {"4317", "4318", "8889", "16686", "9090", "3000"} <= set(published)


def _mounted(service: str, target: str) -> Path:
    for volume in compose()["services"][service].get("volumes", []):
        source, mounted = volume.split(":")[:2]
        if mounted == target:
            return (COMPOSE.parent / source).resolve()
    raise AssertionError(f"{service} does not mount {target}")


def test_prometheus_scrapes_llama_server_beside_the_collector() -> None:
    prometheus = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text("utf-8"))
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    assert set(jobs) == {"otel-collector", "llama-server"}
    [static] = jobs["llama-server"]["static_configs"]
    assert static["targets"] == ["host.docker.internal:8080"]  # llama-server's default port
    # The model label joins the server's series to the agents' own on the dashboard.
    assert set(static["labels"]) == {"gen_ai_request_model"}
    host = compose()["services"]["prometheus"]["extra_hosts"]
    assert host == ["host.docker.internal:host-gateway"]
    served = llama_server_series()
    assert served["llamacpp:prompt_tokens_cached_total"]["job"] == {"llama-server"}
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:prompt_tokens_cached_total",
        "llamacpp:prompt_seconds_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
    ):
        assert name in served, name


def test_the_services_point_at_each_other() -> None:
    services = compose()["services"]
    # Prometheus scrapes the collector's exporter and loads the tested rules.
    prometheus_dir = _mounted("prometheus", "/etc/prometheus")
    prometheus = yaml.safe_load((prometheus_dir / "prometheus.yml").read_text(encoding="utf-8"))
    targets = [
        t
        for job in prometheus["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    ]
    exporter_port = collector_config()["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    assert f"otel-collector:{exporter_port}" in targets
    assert list(prometheus_dir.glob(prometheus["rule_files"][0])) == [RULES]
    # The collector sends traces to Jaeger's OTLP receiver.
    collector_jaeger = collector_config()["exporters"]["otlp/jaeger"]["endpoint"]
    jaeger = yaml.safe_load(_mounted("jaeger", "/etc/jaeger/config.yaml").read_text("utf-8"))
    jaeger_grpc = jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert collector_jaeger == "jaeger:" + jaeger_grpc.rsplit(":", 1)[1]
    assert services["jaeger"]["command"] == ["--config=/etc/jaeger/config.yaml"]
    # Grafana's data source is the Prometheus service; its dashboards directory is provisioned.
    datasources = yaml.safe_load(
        (_mounted("grafana", "/etc/grafana/provisioning") / "datasources/prometheus.yml").read_text(
            encoding="utf-8"
        )
    )
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load(
        (
            _mounted("grafana", "/etc/grafana/provisioning") / "dashboards/agent-latency.yml"
        ).read_text(encoding="utf-8")
    )
    dashboards_path = providers["providers"][0]["options"]["path"]
    assert _mounted("grafana", dashboards_path) == DASHBOARD.parent


def test_jaeger_monitor_tab_reads_the_collector_span_metrics() -> None:
    jaeger = yaml.safe_load(JAEGER_CONFIG.read_text(encoding="utf-8"))
    query = jaeger["extensions"]["jaeger_query"]
    storage = jaeger["extensions"]["jaeger_storage"]
    assert query["storage"]["traces"] in storage["backends"]
    backend = storage["metric_backends"][query["storage"]["metrics"]]["prometheus"]
    assert backend["endpoint"] == "http://prometheus:9090"
    assert backend["normalize_calls"] is True and backend["normalize_duration"] is True
    # Jaeger's defaults: namespace traces_span_metrics, latency unit ms; the collector must match.
    spanmetrics = collector_config()["connectors"]["spanmetrics"]
    assert spanmetrics["namespace"] == "traces.span.metrics"
    assert spanmetrics["histogram"]["unit"] == "ms"
    assert "status.code" not in spanmetrics.get("exclude_dimensions", [])
    ui = json.loads((DEPLOY / "jaeger/ui.json").read_text(encoding="utf-8"))
    assert ui["monitor"]["menuEnabled"] is True
    assert query["ui"]["config_file"] == "/etc/jaeger/ui.json"
    for pipeline in jaeger["service"]["pipelines"].values():
        for component in pipeline["receivers"] + pipeline["exporters"]:
            assert component in {**jaeger["receivers"], **jaeger["exporters"]}


# --- otel-collector.yaml -------------------------------------------------------------------


def test_collector_pipelines_reference_defined_components() -> None:
    config = collector_config()
    defined = {
        kind: set(config.get(kind) or {})
        for kind in ("receivers", "processors", "exporters", "connectors")
    }
    produced: set[str] = set()
    consumed: set[str] = set()
    for name, pipeline in config["service"]["pipelines"].items():
        for receiver in pipeline["receivers"]:
            assert receiver in defined["receivers"] | defined["connectors"], (name, receiver)
            if receiver in defined["connectors"]:
                consumed.add(receiver)
        for processor in pipeline.get("processors", []):
            assert processor in defined["processors"], (name, processor)
        for exporter in pipeline["exporters"]:
            assert exporter in defined["exporters"] | defined["connectors"], (name, exporter)
            if exporter in defined["connectors"]:
                produced.add(exporter)
    # A connector is an exporter in one pipeline and a receiver in another.
    assert produced == consumed == defined["connectors"]
    for processor in defined["processors"]:
        assert any(
            processor in pipeline.get("processors", [])
            for pipeline in config["service"]["pipelines"].values()
        )


def test_span_metrics_see_every_span_and_jaeger_only_sampled_ones() -> None:
    pipelines = collector_config()["service"]["pipelines"]
    for pipeline in pipelines.values():
        if "spanmetrics" in pipeline["exporters"] or "sum" in pipeline["exporters"]:
            assert "tail_sampling" not in pipeline.get("processors", [])
        if "otlp/jaeger" in pipeline["exporters"]:
            processors = pipeline["processors"]
            assert processors[0] == "memory_limiter" and processors[-1] == "batch"
            assert "tail_sampling" in processors


def test_tail_sampling_keeps_slow_stalled_over_budget_and_failed_traces(
    fleet_run: FleetRun,
) -> None:
    """Each keep-policy matches the real spans it is meant for, and only a few percent of the
    rest is kept."""
    policies = {
        policy["type"]: policy
        for policy in collector_config()["processors"]["tail_sampling"]["policies"]
    }
    chat = [span for span in fleet_run.spans if span.attributes.get("gen_ai.operation.name")]

    def kept(span: Any) -> set[str]:
        attributes = span.attributes
        reasons: set[str] = set()
        if (
            span.status_code == 2
            and "ERROR" in policies["status_code"]["status_code"]["status_codes"]
        ):
            reasons.add("failed")
        rule = policies["string_attribute"]["string_attribute"]
        if attributes.get(rule["key"]) in rule["values"]:
            reasons.add("slow")
        rule = policies["numeric_attribute"]["numeric_attribute"]
        value = attributes.get(rule["key"])
        if isinstance(value, int) and rule["min_value"] <= value <= rule["max_value"]:
            reasons.add("stalled")
        rule = policies["boolean_attribute"]["boolean_attribute"]
        if attributes.get(rule["key"]) is rule["value"]:
            reasons.add("over_budget")
        return reasons

    reasons = [kept(span) for span in chat]
    over_budget = [s for s in chat if s.attributes.get("agent_latency.trim.over_budget")]
    assert all("over_budget" in kept(span) for span in over_budget) and over_budget
    assert all(
        "failed" in kept(s) for s in chat if s.attributes["agent_latency.outcome"] == "error"
    )
    assert all(
        "slow" in r
        for s, r in zip(chat, reasons, strict=True)
        if s.attributes.get("agent_latency.ttft_level") in ("warn", "error")
    )
    assert all(
        "stalled" in r
        for s, r in zip(chat, reasons, strict=True)
        if s.attributes.get("agent_latency.stalls", 0) > 0
    )
    # A fast, smooth, successful call is kept only by the baseline percentage.
    assert not kept(_fast_call_like(chat[0]))
    assert 1 <= policies["probabilistic"]["probabilistic"]["sampling_percentage"] <= 10
    assert policies["latency"]["latency"]["threshold_ms"] >= 1000


def _fast_call_like(span: Any) -> Any:
    attributes = dict(span.attributes)
    attributes.update({"agent_latency.ttft_level": "ok", "agent_latency.stalls": 0})
    attributes.pop("agent_latency.trim.over_budget", None)
    return type(span)(**{**span.__dict__, "attributes": attributes, "status_code": 0})


def test_span_metric_dimensions_are_low_cardinality_attributes(fleet_run: FleetRun) -> None:
    dimensions = [d["name"] for d in collector_config()["connectors"]["spanmetrics"]["dimensions"]]
    assert "agent_latency.trim.over_budget" in dimensions
    seen: dict[str, set[Any]] = {}
    for span in fleet_run.spans:
        for dimension in dimensions:
            if dimension in span.attributes:
                seen.setdefault(dimension, set()).add(str(span.attributes[dimension]))
    assert set(seen) == set(dimensions)  # every dimension exists on real spans
    for dimension, values in seen.items():
        assert len(values) <= 4, (dimension, values)


# --- the release gate and docs/scaling.md --------------------------------------------------


def test_release_gate_workflow_runs_the_bench_gate() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    jobs = workflow["jobs"]
    steps = [step for job in jobs.values() for step in job["steps"]]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert re.search(r"agent-latency bench .*--baseline \S+ .*--max-regression \S+", runs)
    assert "--json" in runs
    uses = [step.get("uses", "") for step in steps]
    assert any(use.startswith("actions/upload-artifact@v") for use in uses)
    assert any("download-artifact@v" in use for use in uses)  # the previous run's JSON
    for use in uses:
        assert not use or re.search(r"@v\d+$", use), use
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload.get("if") == "always()"  # the figures are kept even when the gate fails


def test_scaling_doc_figures_match_a_measurement() -> None:
    """docs/scaling.md's bytes and spans per model call are the ones a run measures now."""
    text = SCALING_DOC.read_text(encoding="utf-8")
    match = re.search(r"model alone, streamed \| ([\d.]+) \| ([\d,]+) \|", text)
    assert match, "the measured table of docs/scaling.md"
    documented_spans, documented_bytes = float(match.group(1)), int(match.group(2).replace(",", ""))
    from support.fleet_export import FleetScenario

    run = record_fleet_run(
        FleetScenario(trimmed_calls=0, over_budget_calls=0, bare_calls=20, failed_calls=0)
    )
    figures = scaling_figures(run)
    assert figures["spans_per_call"] == documented_spans
    assert abs(figures["trace_bytes_per_call"] - documented_bytes) <= 0.15 * documented_bytes
