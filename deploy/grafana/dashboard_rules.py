#!/usr/bin/env python3
"""Turns every PromQL expression of a Grafana dashboard into a Prometheus rules file.

``promtool check rules`` then parses each one exactly as Prometheus would (deploy/check.sh), and
tests/test_fleet.py checks the metric names in them against a real export. Grafana's variables
are replaced by values Prometheus accepts: ``$__rate_interval`` by ``5m``, ``$model`` by ``.*``.
A template variable's ``label_values(metric, label)`` becomes ``count by (label) (metric)``.

Usage: python3 deploy/grafana/dashboard_rules.py DASHBOARD.json > dashboard.rules.yml
(the output is JSON, which is YAML too). Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

SUBSTITUTIONS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "$model": ".*",
}


def promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced."""
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    if "$" in expr:
        raise ValueError(f"unknown Grafana variable in {expr!r}")
    return expr


def _label_values(query: str) -> str:
    match = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", query)
    if not match:
        raise ValueError(f"unsupported variable query {query!r}")
    return f"count by ({match.group(2)}) ({match.group(1)})"


def dashboard_exprs(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every PromQL expression of the dashboard, keyed by where it is (``panel_3_B``)."""
    exprs: dict[str, str] = {}
    panels: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # panels inside collapsed rows
    for panel in panels:
        for target in panel.get("targets", []):
            exprs[f"panel_{panel['id']}_{target['refId']}"] = promql(target["expr"])
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            query = query["query"] if isinstance(query, dict) else query
            exprs[f"variable_{variable['name']}"] = _label_values(promql(query))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            exprs[f"annotation_{annotation['name']}"] = promql(annotation["expr"])
    return exprs


def rules_file(dashboard: dict[str, Any]) -> dict[str, Any]:
    """A rules file with one recording rule per expression."""
    rules = [
        {"record": f"dashboard:{key}", "expr": expr}
        for key, expr in dashboard_exprs(dashboard).items()
    ]
    return {"groups": [{"name": f"dashboard {dashboard.get('uid', '')}", "rules": rules}]}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dashboard = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    json.dump(rules_file(dashboard), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
