VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The suite runs on parallel workers (pytest-xdist), one more than the cores: many tests wait on
# a simulated server or a subprocess, so a core would otherwise idle (on 2 cores: 5 min 26 s with
# 2 workers, 4 min 20 s with 3). `make test WORKERS=0` runs it in one process. Each test file runs
# whole on one worker, so a module's fixture (the examples' runs, a bench script's simulator)
# starts once.
WORKERS ?= $(shell python3 -c "import os; print((os.cpu_count() or 1) + 1)")
PYTEST := $(VENV)/bin/pytest -n $(WORKERS) --dist loadfile

.PHONY: test test-fast demo bench-real lint install clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,agents]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples scripts
	$(VENV)/bin/ruff format --check src tests examples scripts
	$(VENV)/bin/mypy src

test: lint
	$(PYTEST)

# The edit-test loop: every test but those marked slow (load, docs, examples; see pyproject.toml).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

# The four-mode table on the embedded simulator; no endpoint or key needed (about 50 s). Run
# from an empty folder without the variables naming an endpoint, model or key, so that a
# config.toml here or an exported AGENT_LATENCY_BASE_URL does not send it to a real endpoint.
demo: $(STAMP)
	d=$$(mktemp -d) && cd "$$d" && env -u AGENT_LATENCY_BASE_URL -u AGENT_LATENCY_API_KEY \
		-u AGENT_LATENCY_MODEL -u OPENAI_API_KEY "$(abspath $(VENV))/bin/agent-latency" bench \
		--runs 3 --budget 2500; status=$$?; rmdir "$$d"; exit $$status

# The bench against a real small model (SmolLM2-135M-Instruct) on llama.cpp's llama-server: builds the
# server once (~10 min on 2 cores), then about an hour of bench, needles and mixed workload.
bench-real: $(STAMP)
	bash scripts/bench_real.sh

clean:
	rm -rf $(VENV)
