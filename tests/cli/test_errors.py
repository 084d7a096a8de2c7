"""The command line given bad files or flags: one line on stderr, exit status 2, no traceback.

Every case fails before any request is sent or any server is started.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_latency import cli as _cli

FILES = {
    "ok.json": '[{"role": "user", "content": "hi"}]',
    "broken.json": "{not json",
    "empty.json": "",
    "wizard.json": '[{"role": "wizard", "content": "x"}]',
    "numbers.json": "[1, 2]",
    "no_messages.json": '{"input": []}',
    "bad_content.json": '[{"role": "user", "content": {"text": "x"}}]',
    "broken.toml": "[llm\nmodel =",
    "wrong_type.toml": '[llm]\ntimeout_seconds = "soon"\n',
    "unknown_key.toml": '[llm]\nmodle = "x"\n',
    "list.json": "[]",
    "broken_settings.json": "{",
    "big.json": "[" + "1" * 5000 + "]",
}


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding the files above, a folder, and a file that is not UTF-8."""
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00[")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    for variable in ("AGENT_LATENCY_BASE_URL", "AGENT_LATENCY_API_KEY", "AGENT_LATENCY_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


CASES = [
    # flags
    (["frobnicate"], "No such command 'frobnicate'"),
    (["--verbose"], "No such option: --verbose"),
    (["trim"], "Missing argument"),
    (["trim", "big.json"], "big.json: a number has more than 4300 digits"),
    (["trim", "ok.json", "--budget", "0"], "--budget"),
    (["trim", "ok.json", "--budget", "many"], "--budget"),
    (["trim", "ok.json", "--colour"], "No such option: --colour"),
    (["bench", "--runs", "0"], "--runs"),
    (["bench", "--turns", "-3"], "--turns"),
    (["bench", "--max-regression", "5"], "--baseline"),
    (["bench", "--base-url", "ftp://example.com"], "--base-url"),
    (["bench", "--model", " "], "--model"),
    (["doctor", "--base-url", "localhost:8000"], "--base-url"),
    (["doctor", "--base-url", "http://[::1"], ""),  # the line says "Invalid IPv6 URL"
    (["doctor", "--api-key", ""], "--api-key"),
    (["sim", "--port", "70000"], "--port"),
    (["sim", "--error-rate", "2"], "error_rate"),
    (["sim", "--decode-tokens-per-s", "nan"], "decode_tokens_per_s"),
    # conversation files
    (["trim", "missing.json"], "missing.json: file not found"),
    (["trim", "broken.json"], "broken.json: not valid JSON at line 1"),
    (["trim", "empty.json"], "empty.json: not valid JSON"),
    (["trim", "binary.json"], "binary.json: the file is UTF-16 text. Fix: save it as UTF-8"),
    (["trim", "folder"], "folder: is a folder, not a file"),
    (["trim", "wizard.json"], "wizard.json: Message 0: unknown role 'wizard'"),
    (["trim", "numbers.json"], "numbers.json: Message 0"),
    (["trim", "no_messages.json"], "'messages' key"),
    (["trim", "bad_content.json"], "bad_content.json: Message 0 (user): content"),
    (["bench", "--messages", "broken.json"], "broken.json"),
    (["bench", "--messages", "ok.json", "--json", "nowhere/out.json"], "nowhere"),
    (["bench", "--baseline", "broken.json"], "broken.json"),
    (["trim", "ok.json", "--output", "nowhere/out.json"], "nowhere/out.json"),
    # configuration files
    (["doctor", "--config", "missing.toml"], "missing.toml: file not found"),
    (["doctor", "--config", "broken.toml"], "broken.toml: malformed TOML"),
    (["doctor", "--config", "wrong_type.toml"], "llm.timeout_seconds: expected a number"),
    (["doctor", "--config", "unknown_key.toml"], "did you mean 'model'?"),
    (["doctor", "--settings", "list.json"], "list.json: the top level must be a table"),
    (["bench", "--settings", "broken_settings.json"], "broken_settings.json: malformed JSON"),
    (["trim", "ok.json", "--config", "folder"], "folder: is a folder, not a file"),
    (["trim", "ok.json", "--settings", "binary.json"], "binary.json: not UTF-8"),
]


@pytest.mark.parametrize(
    ("argv", "named"), [pytest.param(argv, named, id=" ".join(argv)) for argv, named in CASES]
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(
    argv: list[str], named: str, files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _cli.main(argv)
    err = capsys.readouterr().err

    assert status == 2
    (line,) = err.splitlines()
    assert line.startswith("agent-latency: error: ")
    assert named in line
    assert "Traceback" not in err


def test_the_installed_command_reports_a_bad_file_in_one_line(files: Path) -> None:
    command = Path(sys.executable).with_name("agent-latency")
    assert command.is_file(), "the project is not installed in this environment"

    completed = subprocess.run(
        [str(command), "trim", "broken.json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=files,
        check=False,
    )

    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [
        "agent-latency: error: broken.json: not valid JSON at line 1, column 2: Expecting "
        "property name enclosed in double quotes."
    ]
    assert completed.stdout == ""
