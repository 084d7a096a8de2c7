#!/usr/bin/env bash
# The test suite against the lowest versions pyproject.toml allows: every direct dependency (the
# library's, and those of the dev and agents extras) at its floor, their own dependencies at the
# newest versions those floors accept (uv's --resolution lowest-direct). A floor that no longer
# works fails here instead of on a user's machine.
#
# Usage: bash .ci/lowest-versions.sh [PYTEST ARGS...]   (default: the whole suite)
# The environment is made anew in build/venv-lowest on every run, so nothing newer lingers.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=build/venv-lowest

python3 -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" \
    --resolution lowest-direct -e '.[dev,agents]'
"$VENV/bin/uv" pip list --python "$VENV/bin/python" 2>/dev/null |
    grep -E '^(langchain|langgraph|openai|httpx|pydantic|opentelemetry|tiktoken|qwen|quicktok|typer|rich|starlette|uvicorn|pytest|hypothesis)[-a-z0-9]* ' |
    awk '{printf "%s==%s  ", $1, $2} END {print ""}'
"$VENV/bin/python" -m pytest "$@"
