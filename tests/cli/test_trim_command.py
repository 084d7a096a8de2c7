"""``agent-latency trim``: one row per message with what happened and why; the output file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import convert_to_messages, messages_to_dict

from agent_latency.cli._app import main
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import RULE_EXPLANATIONS

LIMIT = 64 * 1024 * 1024  # the largest file read whole
SCENARIO = Path(__file__).resolve().parents[2] / "src/agent_latency/scenarios/agent_8k.json"


def _conversation(tmp_path: Path) -> Path:
    messages = [
        {"role": "system", "content": "You are terse."},
        *[
            item
            for n in range(12)
            for item in (
                {"role": "user", "content": f"question {n} " + "words " * 80},
                {"role": "assistant", "content": f"answer {n} " + "words " * 80},
            )
        ],
        {"role": "user", "content": "The question that matters now."},
    ]
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    return path


def test_prints_a_row_per_message_with_action_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.chdir(tmp_path)  # no config.toml / settings.json of the developer's
    path = _conversation(tmp_path)

    assert main(["trim", str(path), "--budget", "600"]) == 0

    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 26  # one per input message
    assert "always kept" in rows[0] and "system" in rows[0]
    assert "always kept" in rows[-1] and "latest_user" in rows[-1]
    reason = RULE_EXPLANATIONS["dropped_at_cut"][0]
    assert any("dropped" in row and reason in row for row in rows)
    # What is sent below the budget is said, and why: the room the conversation grows into.
    assert "cache-first cut:" in out and "tokens left free" in " ".join(out.split())
    assert "Trim to 600 tokens" in out
    assert "dropped" in out.split("total")[-1]


def test_output_file_holds_the_trimmed_conversation_in_openai_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "trimmed.json"

    assert main(["trim", str(SCENARIO), "--budget", "2500", "--output", str(output)]) == 0

    original = json.loads(SCENARIO.read_text(encoding="utf-8"))
    trimmed = json.loads(output.read_text(encoding="utf-8"))
    assert 1 < len(trimmed) < len(original)
    assert trimmed[0] == original[0]  # the system prompt, unchanged
    assert trimmed[-1] == original[-1]  # the latest user message, unchanged
    assert {m["role"] for m in trimmed} <= {"system", "user", "assistant", "tool"}
    # Counted as the command counts (the default model's tokenizer, Qwen's): trimmed again to
    # the same budget, nothing more goes.
    capsys.readouterr()
    assert main(["trim", str(output), "--budget", "2500"]) == 0
    again = re.search(
        r"total ([\d,]+) -> ([\d,]+) tokens .*; (\d+) dropped, (\d+) shortened",
        " ".join(capsys.readouterr().out.split()),
    )
    assert again, "no totals line"
    before, after, dropped, shortened = (int(n.replace(",", "")) for n in again.groups())
    assert before == after <= 2500
    assert dropped == shortened == 0


def test_budget_comes_from_the_settings_file_when_not_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"promptTrimmer": {"defaultBudget": 700}}), encoding="utf-8")

    assert main(["trim", str(_conversation(tmp_path)), "--settings", str(settings)]) == 0

    assert "Trim to 700 tokens" in capsys.readouterr().out


def test_a_request_body_counts_its_tools_and_the_caption_shows_the_fixed_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.chdir(tmp_path)
    messages = json.loads(_conversation(tmp_path).read_text(encoding="utf-8"))
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Searches the catalogue. " * 40,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    body = {"model": "m", "messages": messages, "tools": [tool], "temperature": 0}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    output = tmp_path / "trimmed.json"

    assert main(["trim", str(path), "--budget", "600", "--output", str(output)]) == 0

    out = capsys.readouterr().out
    tool_tokens = TokenCounter.for_model("qwen-7b-chat").count_tools([tool])
    assert f"tool definitions {tool_tokens:,}" in out and "fixed part" in out
    assert "qwen" in out  # the tokenizer the counts are in
    written = json.loads(output.read_text(encoding="utf-8"))
    assert written["tools"] == [tool] and written["temperature"] == 0
    assert len(written["messages"]) < len(messages)

    assert main(["trim", str(path), "--budget", "200"]) == 0
    out = capsys.readouterr().out
    assert "OVER BUDGET: tool definitions" in out and "send fewer tools" in out


@pytest.mark.parametrize(
    ("document", "pattern"),
    [
        ({"messages": [], "tools": {"type": "function"}}, "'tools' must be a list"),
        ({"messages": [], "tools": [7]}, "tools\\[0\\] must be an object"),
        ({"messages": [], "response_format": "json"}, "'response_format' must be an object"),
        (
            [{"role": "user", "content": [{"type": "image_url"}]}],
            r"Message 0 \(user\), content part 0",
        ),
    ],
)
def test_a_bad_request_body_exits_2_with_one_line_naming_the_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    document: object,
    pattern: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "request.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    assert main(["trim", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err
    assert re.search(pattern, err)


def test_a_lone_surrogate_is_written_back_as_the_escape_it_was_read_as(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As json.loads of a truncated page gives it: the trim counted it, then writing the output
    # failed with "'utf-8' codec can't encode character '\ud800' ...: surrogates not allowed".
    monkeypatch.chdir(tmp_path)
    path, output = tmp_path / "conversation.json", tmp_path / "trimmed.json"
    path.write_text(
        '[{"role": "user", "content": "\\u4f60\\u597d, half a pair: \\ud800 and a smile '
        '\\ud83d\\ude00"}]',
        encoding="utf-8",
    )

    assert main(["trim", str(path), "--output", str(output)]) == 0

    written = output.read_text(encoding="utf-8")
    assert "你好" in written and "😀" in written  # the text as text, not as escapes
    assert json.loads(written) == json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("where", ["a directory", "a missing folder"])
def test_an_output_path_that_cannot_be_written_is_named_before_the_trim(
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    output = tmp_path if where == "a directory" else tmp_path / "missing" / "trimmed.json"

    assert main(["trim", str(_conversation(tmp_path)), "--output", str(output)]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""  # refused before trimming, not after the table
    (line,) = captured.err.strip().splitlines()
    assert f"--output {output}" in line and "Fix:" in line


# --- files that never end, and LangChain's own dump -------------------------------------------


def _trim_in_a_process(path: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``agent-latency trim PATH`` in its own process: a regression that reads forever or hangs
    fails on the timeout instead of hanging the suite."""
    return subprocess.run(
        [sys.executable, "-m", "agent_latency.cli", "trim", path],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_device_is_refused_in_one_line(tmp_path: Path) -> None:
    result = _trim_in_a_process("/dev/zero", tmp_path)

    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("agent-latency: error: /dev/zero: not a regular file")
    assert "Fix: give the path of an OpenAI-format conversation" in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_in_one_line_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "conversation.json"
    os.mkfifo(fifo)

    result = _trim_in_a_process(str(fifo), tmp_path)

    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"agent-latency: error: {fifo}: not a regular file")


def test_a_file_above_the_size_limit_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    big = tmp_path / "big.json"
    with big.open("wb") as file:  # sparse: no 64 MiB written
        file.truncate(LIMIT + 1)

    assert main(["trim", str(big)]) == 2

    [line] = capsys.readouterr().err.splitlines()
    assert f"{big}: {LIMIT + 1:,} bytes, more than the limit of {LIMIT:,}." in line


def test_a_langchain_messages_to_dict_dump_is_trimmed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.chdir(tmp_path)
    conversation = _conversation(tmp_path)
    messages = convert_to_messages(json.loads(conversation.read_text(encoding="utf-8")))
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(messages_to_dict(messages)), encoding="utf-8")
    output = tmp_path / "trimmed.json"

    assert main(["trim", str(dump), "--budget", "600", "--output", str(output)]) == 0
    from_dump = capsys.readouterr().out
    assert main(["trim", str(conversation), "--budget", "600"]) == 0

    assert from_dump == capsys.readouterr().out.replace(str(conversation), str(dump))
    written = json.loads(output.read_text(encoding="utf-8"))
    assert written[0] == {"role": "system", "content": "You are terse."}


@pytest.mark.parametrize(
    ("key", "removed", "fix"),
    [("mode", "cost_aware", "prefix_stable"), ("historySelection", "relevance", "cache_first")],
)
def test_trim_with_a_removed_mode_fails_with_the_key_and_the_fix(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    removed: str,
    fix: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _conversation(tmp_path)
    settings = tmp_path / f"{removed}.json"
    settings.write_text(json.dumps({"promptTrimmer": {key: removed}}), encoding="utf-8")

    assert main(["trim", str(path), "--budget", "600", "--settings", str(settings)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"promptTrimmer.{key}: {removed!r} was removed" in line
    assert f'Fix: set promptTrimmer.{key} to "{fix}", the default' in line
