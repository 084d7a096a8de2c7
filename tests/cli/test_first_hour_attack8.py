"""A new user's first hour with the command line and the files they already keep.

Each test runs the real command (``agent_latency.cli.main``, or the installed ``agent-latency``
in a subprocess) on the mistakes of that first hour: the article's settings files and their
near-misses, endpoints that are down or answer something else, odd terminals. Bad input gets one
line on stderr naming the file, key or option and the fix, with exit status 2; no traceback; the
API key appears nowhere.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.ports import refused_port

from agent_latency.cli import main
from agent_latency.sim import RunningSimulator, SimulatorConfig, running_simulator

pytestmark = pytest.mark.usefixtures("clean_environment")

KEY = "sk-attack8-secret-0123456789"
CONVERSATION = '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]'
ARTICLE_CONFIG = """\
# config.toml —— 统一通道与推理参数
[llm]
base_url = "https://taotoken.net/api"
api_key = "{key}"
model = "qwen-7b-chat"
timeout_seconds = 60

[llm.streaming]
enabled = true
chunk_timeout_ms = 800
first_token_warn_ms = 1200

[llm.prompt]
token_budget = 6000
reserve_for_output = 2000
keep_system = true
keep_latest_user = true
"""
"""The article's config.toml (less ``trim_strategy``, which has its own test), with a key."""


FAST = SimulatorConfig(
    overhead_ms=5, prefill_ms_per_token=0.01, decode_tokens_per_s=2000, answer_tokens=8
)
COMMAND = Path(sys.executable).with_name("agent-latency")


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with running_simulator(FAST) as running:
        yield running


def run_installed(
    argv: list[str], cwd: Path, **environment: str
) -> subprocess.CompletedProcess[str]:
    """Runs the installed ``agent-latency`` command in ``cwd`` with ``environment`` added."""
    return subprocess.run(
        [str(COMMAND), *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=120,
        cwd=cwd,
        env={**os.environ, **environment},
        check=False,
    )


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Runs the command line as the console script does: (status, stdout, stderr)."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Runs a command that must refuse its input: exit 2, one line, no traceback, no key."""
    status, out, err = run(argv, capsys)
    assert status == 2, (out, err)
    (line,) = err.splitlines()
    assert line.startswith("agent-latency: error: ")
    assert KEY not in out + err
    return line


def article_config(path: Path, **changes: str) -> Path:
    """Writes the article's config.toml with ``changes`` (TOML value text) to its [llm] keys."""
    text = ARTICLE_CONFIG.format(key=KEY)
    for key, value in changes.items():
        old = next(line for line in text.splitlines() if line.startswith(f"{key} = "))
        text = text.replace(old, f"{key} = {value}")
    path.write_text(text, encoding="utf-8")
    return path


class Answering:
    """A server on a free port of 127.0.0.1 answering every request with one status and body,
    as a website, a proxy or a rate limiter in front of the API would; its body may quote the
    request's Authorization header, as debugging proxies do. Stops when the block ends."""

    def __init__(self, status: int, body: str, content_type: str, *, delay_s: float = 0) -> None:
        answer = (status, body, content_type, delay_s)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                """Quiet."""

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self) -> None:
                code, text, kind, delay = answer
                stopped.wait(delay)
                data = text.replace("{authorization}", self.headers.get("Authorization", ""))
                payload = data.encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up waiting

        stopped = threading.Event()
        self._stopped = stopped
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> Answering:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def conversation(clean_environment: Path) -> Path:
    path = clean_environment / "conversation.json"
    path.write_text(CONVERSATION, encoding="utf-8")
    return path


# --- the channel: base_url and api_key -----------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "named"),
    [
        pytest.param('"https://taotoken.net/api\\r"', "'\\r' (at an end)", id="CR of a CRLF file"),
        pytest.param('"https://taotoken.net/api\\n"', "'\\n' (at an end)", id="final newline"),
        pytest.param('" https://taotoken.net/api"', "' ' (at an end)", id="leading space"),
        pytest.param('"https://taotoken.net/ api"', "' ' (inside)", id="inner space"),
    ],
)
def test_a_base_url_with_whitespace_is_refused_naming_the_character(
    base_url: str, named: str, clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: accepted; httpx refused the newline deep in the first request (a traceback from
    # bench and doctor), and a space sent every request to a wrong URL.
    config = article_config(clean_environment / "config.toml", base_url=base_url)

    line = refused(["doctor", "--config", str(config)], capsys)

    assert "config.toml: llm.base_url: 'https://taotoken.net/" in line
    assert named in line
    assert "Fix: remove it" in line


def test_a_base_url_from_a_crlf_env_file_fails_bench_in_one_line(
    conversation: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: a traceback ending in httpx.InvalidURL, from deep inside ChatOpenAI.
    monkeypatch.setenv("AGENT_LATENCY_BASE_URL", "http://127.0.0.1:9/v1\r")

    line = refused(["bench", "--runs", "1", "--messages", str(conversation)], capsys)

    assert "environment AGENT_LATENCY_BASE_URL: 'http://127.0.0.1:9/v1' holds '\\r'" in line


@pytest.mark.parametrize("option", ["doctor", "bench"])
def test_a_key_in_the_base_url_s_query_is_refused_without_showing_it(
    option: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: accepted; the client appended each path after the query ("/v1?key=.../models"),
    # so every request went to /v1 and doctor's fix said to set base_url to what it showed.
    argv = [option, "--base-url", f"http://127.0.0.1:9/v1?api-key={KEY}#{KEY}"]
    if option == "bench":
        argv += ["--runs", "1", "--messages", str(conversation)]

    line = refused(argv, capsys)

    assert "--base-url: 'http://127.0.0.1:9/v1' goes on with a query string or fragment" in line
    assert "set the key in llm.api_key or AGENT_LATENCY_API_KEY" in line


def test_the_key_pasted_as_base_url_is_not_shown(
    clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "llm.base_url: 'sk-attack8-secret-...' is not an http(s) URL".
    config = article_config(clean_environment / "config.toml", base_url=f'"{KEY}"')

    line = refused(["doctor", "--config", str(config)], capsys)

    assert "llm.base_url: the value (not shown: it may be a key) is not an http(s) URL" in line


def test_base_url_and_api_key_swapped_are_called_swapped(
    clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = article_config(
        clean_environment / "config.toml",
        base_url=f'"{KEY}"',
        api_key='"https://taotoken.net/api"',
    )

    line = refused(["doctor", "--config", str(config)], capsys)

    assert "llm.api_key: holds a URL, not a key: llm.api_key and llm.base_url look swapped" in line


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "Basic"])
def test_a_key_copied_with_its_auth_scheme_is_refused(
    scheme: str, clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: accepted; the server got "Bearer Bearer sk-..." and answered 401.
    config = article_config(clean_environment / "config.toml", api_key=f'"{scheme} {KEY}"')

    line = refused(["doctor", "--config", str(config)], capsys)

    assert f"config.toml: llm.api_key: the API key starts with '{scheme} '" in line
    assert f"Fix: write the key alone, without '{scheme} '." in line


# --- endpoints that answer something else -------------------------------------------------

ECHOING_ERROR = '{"error": {"message": "slow down, {authorization}", "type": "rate_limit"}}'


@pytest.mark.parametrize("status", [429, 500])
@pytest.mark.parametrize("key", [KEY, "attack8plainkey0123456789"])
def test_doctor_never_prints_a_key_the_server_echoes(
    status: int, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "FAIL  api root: http://.../models answered 429: slow down, Bearer sk-..." (bench
    # masked the same message; doctor quoted it whole).
    with Answering(status, ECHOING_ERROR, "application/json") as server:
        status_, out, err = run(["doctor", "--base-url", server.base_url, "--api-key", key], capsys)

    assert status_ == 1
    assert f"answered {status}: slow down" in out
    assert key not in out + err


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("<html><body>Welcome to TaoToken</body></html>", "text/html"),
        ("{}", "application/json"),
    ],
    ids=["website", "empty JSON"],
)
def test_bench_on_an_endpoint_that_answers_no_chat_completion_names_it_and_the_fix(
    body: str, content_type: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "agent-latency: error: No generation chunks were returned", naming neither the
    # endpoint nor a fix.
    with Answering(200, body, content_type) as server:
        argv = ["bench", "--runs", "1", "--messages", str(conversation)]
        line = refused([*argv, "--base-url", server.base_url, "--api-key", KEY], capsys)

    assert (
        f"{server.base_url} (model 'qwen-7b-chat') answered something other than an OpenAI " in line
    )
    assert "Fix: base_url must be the API root" in line


def test_bench_on_a_server_slower_than_the_timeout_says_so(
    conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "could not be reached (OpenAITimeoutError) ... check that the server is running".
    config = conversation.with_name("config.toml")
    config.write_text("[llm]\ntimeout_seconds = 0.5\n", encoding="utf-8")
    with Answering(200, "{}", "application/json", delay_s=30) as server:
        argv = ["bench", "--runs", "1", "--messages", str(conversation)]
        line = refused([*argv, "--base-url", server.base_url], capsys)

    assert "did not answer within llm.timeout_seconds = 0.5 s" in line
    assert "raise llm.timeout_seconds in config.toml" in line


# --- terminals -----------------------------------------------------------------------------


def test_bench_on_an_ascii_terminal_prints_its_table_and_writes_its_json(
    sim: RunningSimulator, conversation: Path
) -> None:
    # Before: the title's '·' failed to encode once every call was made: exit 2 ("'ascii' codec
    # can't encode character"), no table, and no --json file.
    argv = ["bench", "--runs", "1", "--messages", str(conversation), "--json", "out.json"]
    completed = run_installed(
        [*argv, "--base-url", sim.base_url], conversation.parent, PYTHONIOENCODING="ascii"
    )

    assert completed.returncode == 0, completed.stderr
    assert "agent-latency bench ? http://127.0.0.1:" in completed.stdout
    assert "trimmed + streaming" in completed.stdout
    assert json.loads((conversation.parent / "out.json").read_text(encoding="utf-8"))["modes"]
    assert "Traceback" not in completed.stderr


def test_doctor_on_an_ascii_terminal_prints_every_check(
    sim: RunningSimulator, clean_environment: Path
) -> None:
    # Before: the latency model's '≈' ended the run with exit 2 before its line and the summary.
    completed = run_installed(
        ["doctor", "--base-url", sim.base_url], clean_environment, PYTHONIOENCODING="ascii"
    )

    assert "latency model: TTFT ? " in completed.stdout
    assert " passed, " in completed.stdout.splitlines()[-1]
    assert completed.stderr == ""


def test_bench_piped_into_a_reader_that_left_still_writes_its_json(
    sim: RunningSimulator, conversation: Path
) -> None:
    # `agent-latency bench --json out.json | head -1`, the reader gone before the results come.
    # Before: the results were printed first, the broken pipe ended the run, no out.json.
    reader, writer = os.pipe()
    os.close(reader)
    argv = ["bench", "--runs", "1", "--messages", str(conversation), "--json", "out.json"]
    try:
        subprocess.run(
            [str(COMMAND), *argv, "--base-url", sim.base_url],
            cwd=conversation.parent,
            stdout=writer,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
    finally:
        os.close(writer)

    assert json.loads((conversation.parent / "out.json").read_text(encoding="utf-8"))["modes"]


def test_a_40_column_terminal_gets_every_figure_of_the_bench_whole(
    sim: RunningSimulator,
    conversation: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: every figure column was cut to '…' (" untrimmed + stre…  28      …  12    -… ").
    monkeypatch.setenv("COLUMNS", "40")
    argv = ["bench", "--runs", "1", "--turns", "1", "--messages", str(conversation)]

    status, out, _ = run([*argv, "--base-url", sim.base_url], capsys)

    assert status == 0
    assert "…" not in out
    assert "TTFT  TTFT  total  total" in out
    assert "prefilled" in out  # the replay table's last column


def test_a_40_column_terminal_gets_every_reason_of_the_trim_whole(
    conversation: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "│ 1 │ us… │   6 │   6 │ ke… │ la… │ a… │", the reason a word per line, cut.
    monkeypatch.setenv("COLUMNS", "40")

    status, out, _ = run(["trim", str(conversation)], capsys)

    assert status == 0
    assert "…" not in out
    assert "│ latest_user │" in out
    assert "all fits the budget" in out


# --- the simulator's address ---------------------------------------------------------------


def test_sim_on_a_port_in_use_names_the_port_and_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: "agent-latency: error: [Errno 98] Address already in use", naming no option.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        line = refused(["sim", "--port", str(port)], capsys)

    assert f"--host 127.0.0.1 --port {port}: cannot listen there (Address already in use)" in line
    assert "Fix: give a free --port (0 picks one)" in line


def test_sim_on_an_address_of_another_machine_names_the_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 192.0.2.1 is TEST-NET-1: no machine's own address, refused at once, without DNS.
    line = refused(["sim", "--host", "192.0.2.1", "--port", "0"], capsys)

    assert (
        "--host 192.0.2.1 --port 0: cannot listen there (Cannot assign requested address)" in line
    )


# --- the files of the working directory ----------------------------------------------------


@pytest.mark.parametrize("name", ["config.toml", "settings.json"])
@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_default_file_that_is_no_file_is_named_not_skipped(
    name: str,
    kind: str,
    conversation: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `docker run -v ./settings.json:/app/settings.json` with no such file on the host mounts a
    # folder. Before: skipped in silence; the run used the defaults instead of the user's file.
    place = conversation.parent / name
    if kind == "folder":
        place.mkdir()
    else:
        place.symlink_to(conversation.parent / "moved" / name)

    line = refused(["trim", str(conversation), "--budget", "100"], capsys)

    shown = "is a folder, not a file" if kind == "folder" else "a link to a file that does not"
    assert f"{place}: {shown}" in line
    assert f"it is read as the {name} of the working directory. Fix: put your {name} there" in line


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["trim", "bench"])
def test_a_budget_above_the_bound_names_the_option(
    command: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "PriorityTrimmer: budget must be > 0 and at most 100,000,000; ...", a class the
    # user never named, and (for bench) only once the simulator had started.
    argv = [command, "--budget", "1000000000"]
    argv += [str(conversation)] if command == "trim" else ["--messages", str(conversation)]

    line = refused(argv, capsys)

    assert "Invalid value for '--budget': Input should be less than or equal to 100000000" in line


@pytest.mark.parametrize(
    ("outputs", "named"),
    [
        (["--json", "conversation.json"], "--json conversation.json: is also the --messages file"),
        (["--json", "out", "--plot", "out"], "--plot out: is also the --json file"),
        (["--plot", "bench.txt"], "--plot bench.txt: .txt is not an image format"),
        (["--plot", "bench"], "--plot bench: no extension names an image format"),
    ],
)
def test_outputs_that_would_overwrite_an_input_or_fail_at_the_end_are_refused_first(
    outputs: list[str],
    named: str,
    conversation: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: --json overwrote the conversation with the results; a .txt plot failed after the
    # whole run (matplotlib: "Format 'txt' is not supported"), and one without an extension was
    # written as bench.png while the bench said "Wrote bench". The port refuses connections: a
    # check made after a call would report that instead.
    argv = ["bench", "--runs", "1", "--messages", "conversation.json", *outputs]

    line = refused([*argv, "--base-url", f"http://127.0.0.1:{refused_port()}/v1"], capsys)

    assert named in line
    assert conversation.read_text(encoding="utf-8") == CONVERSATION


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a full disk)")
def test_a_json_file_that_fails_to_write_names_the_option_and_the_table_is_still_shown(
    sim: RunningSimulator, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /dev/full passes every check made up front and fails the write as a full disk does.
    # Before: "agent-latency: error: [Errno 28] No space left on device", naming no option.
    argv = ["bench", "--runs", "1", "--messages", str(conversation), "--json", "/dev/full"]

    status, out, err = run([*argv, "--base-url", sim.base_url], capsys)

    assert status == 2
    assert err.splitlines()[-1] == (
        "agent-latency: error: --json /dev/full: cannot be written (No space left on device). "
        "Fix: give a file path on a disk with room, that you may write to."
    )
    assert "trimmed + streaming" in out
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("where", "model"),
    [("environment", "qwen-7b-chat\r"), ("--model", "qwen-7b-chat "), ("config.toml", "\tqwen")],
)
def test_a_model_name_with_a_line_end_or_spaces_is_refused(
    where: str,
    model: str,
    conversation: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A .env file saved on Windows gives AGENT_LATENCY_MODEL a final '\r'. Before: accepted,
    # sent as the model's name, and answered 404 (model not found) by every server.
    argv = ["bench", "--runs", "1", "--messages", str(conversation)]
    argv += ["--base-url", f"http://127.0.0.1:{refused_port()}/v1"]
    if where == "environment":
        monkeypatch.setenv("AGENT_LATENCY_MODEL", model)
    elif where == "--model":
        argv += ["--model", model]
    else:
        conversation.with_name("config.toml").write_text(
            f"[llm]\nmodel = {json.dumps(model)}\n", encoding="utf-8"
        )

    line = refused(argv, capsys)

    assert f"{model!r} is invalid. Fix: it must be the model name alone" in line


@pytest.mark.parametrize("option", ["FILE", "--settings"])
def test_trim_does_not_overwrite_a_file_it_reads(
    option: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: `trim conversation.json --output conversation.json` replaced the conversation by
    # its trimmed copy, and the dropped messages were gone.
    settings = conversation.with_name("settings.json")
    settings.write_text('{"promptTrimmer": {"defaultBudget": 100}}', encoding="utf-8")
    target = conversation if option == "FILE" else settings
    kept = {path: path.read_text(encoding="utf-8") for path in (conversation, settings)}

    line = refused(
        ["trim", "conversation.json", "--settings", "settings.json", "--output", target.name],
        capsys,
    )

    assert f"--output {target.name}: is also the {option} file" in line
    assert {path: path.read_text(encoding="utf-8") for path in kept} == kept


@pytest.mark.parametrize("text", ["", "\n", "\ufeff", "  \r\n"])
def test_an_empty_settings_json_is_called_empty(
    text: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `touch settings.json`, or an editor's empty buffer saved with a BOM. Before: "malformed
    # JSON at line 1, column 1: Expecting value. Fix: correct the syntax there".
    conversation.with_name("settings.json").write_text(text, encoding="utf-8")

    line = refused(["trim", str(conversation)], capsys)

    assert "settings.json: the file is empty, which is no JSON. Fix: write {} to keep" in line


def test_an_empty_config_toml_is_a_valid_empty_one(
    conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation.with_name("config.toml").write_text("\ufeff\r\n", encoding="utf-8")

    status, out, err = run(["trim", str(conversation)], capsys)

    assert (status, err) == (0, "")
    assert "Trim to 6000 tokens" in out


@pytest.mark.parametrize(
    ("file", "text", "fix"),
    [
        # Before: "did you mean 'max_tokens_param'?", a different setting.
        (
            "config.toml",
            "[llm]\nmax_tokens = 2048\n",
            "'max_tokens' is a key of settings.json (streaming.maxTokens); move it there.",
        ),
        # Before: "remove it", the user's key.
        ("config.toml", f'[llm]\nAPI_KEY = "{KEY}"\n', "did you mean 'api_key'?"),
        (
            "settings.json",
            '{"streaming": {"chunkTimeoutMs": 800}}',
            "'chunkTimeoutMs' is a key of config.toml (llm.streaming.chunk_timeout_ms); move it",
        ),
        (
            "settings.json",
            f'{{"apiKey": "{KEY}"}}',
            "'apiKey' is a key of config.toml (llm.api_key); move it there.",
        ),
    ],
    ids=["max_tokens in config.toml", "API_KEY", "chunkTimeoutMs in settings.json", "apiKey"],
)
def test_a_key_in_the_other_file_s_spelling_is_told_where_it_belongs(
    file: str, text: str, fix: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation.with_name(file).write_text(text, encoding="utf-8")

    line = refused(["trim", str(conversation)], capsys)

    assert f"{file}: " in line
    assert f"unknown key. Fix: {fix}" in line


def test_workload_endpoint_without_an_endpoint_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: it ran on the simulator ("on the simulator at 0.5x its default latency") though
    # the user asked for their endpoint.
    argv = ["bench", "--runs", "0", "--workload", "mixed", "--workload-endpoint"]

    line = refused([*argv, "--workload-calls", "1", "--workload-conversations", "1"], capsys)

    assert "--workload-endpoint runs the workload on the bench's endpoint, but none is set" in line
    assert "Fix: give --base-url, or set llm.base_url or AGENT_LATENCY_BASE_URL." in line


@pytest.mark.parametrize(
    ("tokenizer", "named"),
    [
        # Before: "tokenizer '...': not a readable tokenizer.json (Exception)", no file or key.
        ("models/qwen/tokenizer.json", "names no tokenizer.json to read (file not found)"),
        # Before: "TokenCounter.for_model: unknown tokenizer 'qwen2'", a class the user never met.
        ("qwen2", "is no known tokenizer. Fix: use one of cl100k"),
    ],
)
def test_a_tokenizer_that_cannot_be_used_names_the_file_and_the_key(
    tokenizer: str, named: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation.with_name("config.toml").write_text(
        f'[llm]\ntokenizer = "{tokenizer}"\n', encoding="utf-8"
    )

    line = refused(["trim", str(conversation)], capsys)

    assert f"config.toml: llm.tokenizer: '{tokenizer}' {named}" in line


def test_a_known_tokenizer_in_another_case_still_loads(
    conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation.with_name("config.toml").write_text('[llm]\ntokenizer = "O200K"\n', "utf-8")

    status, out, err = run(["trim", str(conversation)], capsys)

    assert (status, err) == (0, "")
    assert "o200k" in out


def test_doctor_on_a_server_answering_plain_text_fails_the_api_root(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Another program on the port, answering text. Before: "PASS api root: ... answered 200
    # with an API answer", then a streaming failure whose fix was nginx's buffering.
    with Answering(200, "OK", "text/plain") as server:
        status, out, _ = run(["doctor", "--base-url", server.base_url], capsys)

    assert status == 1
    assert "answered 200, but not in JSON: base_url points at a server that does not speak" in out
    assert "streaming" not in out


def test_the_workload_on_an_endpoint_that_answers_a_web_page_names_it_and_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: "agent-latency: error: No generation chunks were returned".
    argv = ["bench", "--runs", "0", "--workload", "mixed", "--workload-endpoint"]
    argv += ["--workload-calls", "1", "--workload-conversations", "1"]
    argv += ["--workload-strategies", "none"]
    with Answering(200, "<html><body>Welcome</body></html>", "text/html") as server:
        status, _, err = run([*argv, "--base-url", server.base_url], capsys)

    assert status == 2
    assert err.splitlines()[-1].startswith(
        f"agent-latency: error: {server.base_url} (model 'qwen-7b-chat') answered something "
        "other than an OpenAI chat completion"
    )


@pytest.mark.parametrize(
    ("key", "placeholder", "variable"),
    [
        # Before: "'${AGENT_LATENCY_BASE_URL}' is not an http(s) URL", no word of why.
        ("base_url", "${AGENT_LATENCY_BASE_URL}", "AGENT_LATENCY_BASE_URL"),
        # Before: accepted, and sent as the model's name: 404 from every server.
        ("model", "${MODEL}", "AGENT_LATENCY_MODEL"),
    ],
)
def test_a_placeholder_in_the_channel_names_the_variable_that_sets_it(
    key: str,
    placeholder: str,
    variable: str,
    clean_environment: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = article_config(clean_environment / "config.toml", **{key: f'"{placeholder}"'})

    line = refused(["doctor", "--config", str(config)], capsys)

    assert f"config.toml: llm.{key}: holds the placeholder '{placeholder}', which nothing" in line
    assert f"Fix: write the value itself, or set {variable} in the environment" in line


@pytest.mark.parametrize("path", ["C:\\models\\qwen\\tokenizer.json", "C:\\Users\\me\\tok.json"])
def test_a_windows_path_in_double_quotes_gets_the_single_quote_fix(
    path: str, conversation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "malformed TOML: Invalid hex value (at line 2, column 18). Fix: correct the syntax
    # there." ('\U' starts a unicode escape), no word of the backslashes.
    conversation.with_name("config.toml").write_text(
        f'[llm]\ntokenizer = "{path}"\n', encoding="utf-8"
    )

    line = refused(["trim", str(conversation)], capsys)

    assert "config.toml: malformed TOML: " in line
    assert "write a Windows path in single quotes, 'C:\\models\\tokenizer.json'" in line


def test_doctor_with_no_base_url_checks_where_the_chat_model_would_go(
    sim: RunningSimulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # With OPENAI_BASE_URL exported (for the openai SDK) and no llm.base_url, build_chat_model
    # sends every call there. Before: doctor probed https://api.openai.com/v1 instead.
    monkeypatch.setenv("OPENAI_BASE_URL", sim.base_url)

    _, out, _ = run(["doctor"], capsys)

    assert out.splitlines()[0] == f"agent-latency doctor: {sim.base_url}, model qwen-7b-chat"
    assert f"PASS  api root: GET {sim.base_url}/models answered 200" in out
