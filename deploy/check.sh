#!/usr/bin/env bash
# Checks the Prometheus and Grafana files of deploy/ with promtool (Debian's `prometheus` package):
# the rules parse, prometheus.yml loads them, the rules' unit tests pass, and every PromQL
# expression of the Grafana dashboard parses. Installs promtool when it is missing and we are
# root (CI); otherwise says how. Run from anywhere: bash deploy/check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deploy/check.sh: installing promtool (Debian package prometheus)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
  else
    echo "deploy/check.sh: promtool not found; install it (apt-get install prometheus)" >&2
    exit 1
  fi
fi
promtool --version | head -n 1

promtool check rules deploy/prometheus/rules/*.yml
promtool check config deploy/prometheus/prometheus.yml
promtool test rules deploy/prometheus/tests/*.yml

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for dashboard in deploy/grafana/dashboards/*.json; do
  rules="$work/$(basename "$dashboard" .json).rules.yml"
  python3 deploy/grafana/dashboard_rules.py "$dashboard" > "$rules"
  echo "Dashboard $dashboard:"
  promtool check rules "$rules"
done
