"""Ctrl-C (or SIGTERM) during ``agent-latency bench`` keeps what was measured, marked partial,
and exits 130 (143).

The real command runs in a subprocess on the embedded simulator, whose default latency makes
each timed call take a second or more; the signal goes once a progress line on stderr says which
calls finished, so what the run measured before it is known without a clock.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import agent_latency

pytestmark = pytest.mark.usefixtures("clean_environment")

CONVERSATION = '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]'
SOURCE = Path(agent_latency.__file__).parents[1]
"""Where the code under test is: the subprocess imports it, not an installed copy."""
INTERRUPTED = 128 + signal.SIGINT
LABELS = [
    "untrimmed + blocking",
    "untrimmed + streaming",
    "trimmed + blocking",
    "trimmed + streaming",
]


def bench_command(folder: Path, *options: str) -> list[str]:
    """Writes the conversation in ``folder``; returns the command line of ``bench`` on it."""
    (folder / "conversation.json").write_text(CONVERSATION, encoding="utf-8")
    argv = ["bench", "--messages", "conversation.json", *options]
    return [sys.executable, "-m", "agent_latency.cli", *argv]


def interrupted_bench(
    folder: Path,
    *options: str,
    after: str,
    signum: signal.Signals = signal.SIGINT,
    then: signal.Signals | None = None,
) -> tuple[int, str, str]:
    """Runs ``bench --messages conversation.json *options`` in ``folder``, sends ``signum``
    (Ctrl-C's SIGINT) once a progress line starts with ``after``, and ``then`` right after it
    if given; returns (status, stdout, stderr)."""
    with subprocess.Popen(
        bench_command(folder, *options),
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(SOURCE)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as command:
        assert command.stderr is not None
        progress = []
        while not progress or not progress[-1].startswith(after):
            progress.append(command.stderr.readline())
            assert progress[-1], progress  # it ended (or failed) before that line
        command.send_signal(signum)
        if then is not None:
            command.send_signal(then)
        out, err = command.communicate(timeout=120)
    return command.returncode, out, "".join(progress) + err


def stopped_before_any_call(said: str, stop: str, files: str) -> bool:
    """Whether ``said`` says the run was stopped before any call was measured: so, or (the
    signal landed inside the first timed call, an import half done among the places it can:
    seen once, a message class loaded twice so the call failed) that the call under way then
    failed, which is put down to the signal."""
    bench = f"agent-latency bench: {stop}"
    return said == f"{bench} before any call was measured{files}" or (
        said.startswith(f"{bench}; the call under way then failed (") and said.endswith(files)
    )


def test_ctrl_c_keeps_the_runs_that_finished_in_the_table_and_the_json(tmp_path: Path) -> None:
    # Before: exit 130 with "no table, no --json or --plot file": every finished run was lost.
    baseline = tmp_path / "baseline.json"
    slowest = {"trimmed": True, "streaming": True, "ttft_ms": {"p50": 10**9}}
    baseline.write_text(json.dumps({"modes": [slowest]}), encoding="utf-8")  # any run passes it
    outputs = ["--json", "out.json", "--plot", "out.png", "--baseline", str(baseline)]

    # The warm-up and the first round of the four modes have finished: one run each. (--plot
    # adds the prefill sweep: 6 calls after the 2 rounds.)
    status, out, err = interrupted_bench(
        tmp_path, "--runs", "2", *outputs, after="bench: 5/15 calls"
    )

    assert status == INTERRUPTED, err
    assert "Traceback" not in err
    assert (tmp_path / "out.json").exists(), err
    document = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert document["interrupted"] is True
    runs = [mode["runs"] for mode in document["modes"]]
    assert set(runs) <= {1, 2} and 1 in runs
    assert all(mode["error"] is None and mode["ttft_ms"]["p50"] > 0 for mode in document["modes"])
    short = [f"{2 - n} of 2 runs of {mode}" for mode, n in zip(LABELS, runs, strict=True) if n < 2]
    assert document["missing"] == [*short, "the prefill sweep"]
    assert "sweep" not in document
    lines = out.splitlines()
    assert lines[0] == (
        f"Partial results: interrupted (Ctrl-C). Not measured: {'; '.join(short)}; the prefill "
        "sweep."
    )
    rows = {" ".join(cells[:3]): cells[3:] for cells in map(str.split, lines) if len(cells) == 10}
    assert all(rows[mode][1].replace(",", "").isdigit() for mode in LABELS)  # a TTFT p50 each
    caption = " ".join(out.split())
    finished = ", ".join(map(str, runs))
    assert f"of the runs each mode finished before the run was stopped ({finished} of 2," in caption
    assert "Wrote out.json" in lines
    # A partial run never passes the gate, however slow the baseline; no figure is drawn.
    assert lines[-1] == (
        "Regression gate: not checked: the run was interrupted, and a partial run never passes "
        "the gate."
    )
    assert "REGRESSION" not in out and ": ok" not in out
    assert not (tmp_path / "out.png").exists()
    assert err.splitlines()[-1] == (
        "agent-latency bench: interrupted (Ctrl-C): the results above are partial; no --plot "
        "out.png (a partial run draws none)."
    )


def test_ctrl_c_before_any_timed_call_finished_says_nothing_was_measured(tmp_path: Path) -> None:
    status, out, err = interrupted_bench(
        tmp_path, "--runs", "2", "--json", "out.json", after="bench: 1/9 calls, warm-up"
    )

    assert status == INTERRUPTED, err
    assert out == ""
    assert stopped_before_any_call(
        err.splitlines()[-1], "interrupted (Ctrl-C)", ": no table, no --json or --plot file."
    ), err
    assert not (tmp_path / "out.json").exists()


def test_ctrl_c_in_a_later_phase_keeps_the_modes_and_names_the_phase(tmp_path: Path) -> None:
    # --quality runs after the four modes, for seconds, with no progress line of its own.
    status, out, err = interrupted_bench(
        tmp_path, "--runs", "1", "--quality", "--json", "out.json", after="bench: 5/5 calls"
    )

    assert status == INTERRUPTED, err
    assert "Traceback" not in err
    assert out.splitlines()[0] == (
        "Partial results: interrupted (Ctrl-C). Not measured: the retention (--quality)."
    )
    assert "Retention" not in out
    document = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert document["interrupted"] is True
    assert document["missing"] == ["the retention (--quality)"]
    assert [mode["runs"] for mode in document["modes"]] == [1, 1, 1, 1]
    assert "quality" not in document
    assert err.splitlines()[-1] == (
        "agent-latency bench: interrupted (Ctrl-C): the results above are partial."
    )


def test_sigterm_keeps_the_runs_that_finished_as_ctrl_c_does_and_exits_143(tmp_path: Path) -> None:
    # Before: SIGTERM (docker stop, Kubernetes, timeout) killed the process: no table, no JSON.
    status, out, err = interrupted_bench(
        tmp_path,
        "--runs",
        "1",
        "--json",
        "out.json",
        after="bench: 3/5 calls",
        signum=signal.SIGTERM,
    )

    assert status == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    document = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert document["interrupted"] is True
    runs = [mode["runs"] for mode in document["modes"]]
    assert runs[:2] == [1, 1] and 0 in runs  # the warm-up and two modes had finished, not all four
    missing = [f"1 of 1 runs of {mode}" for mode, n in zip(LABELS, runs, strict=True) if not n]
    assert document["missing"] == missing
    assert out.splitlines()[0] == (
        f"Partial results: terminated (SIGTERM). Not measured: {'; '.join(missing)}."
    )
    assert "Wrote out.json" in out.splitlines()
    assert err.splitlines()[-1] == (
        "agent-latency bench: terminated (SIGTERM): the results above are partial."
    )


def test_sigterm_before_any_timed_call_finished_exits_143_saying_so(tmp_path: Path) -> None:
    status, out, err = interrupted_bench(
        tmp_path, "--runs", "1", after="bench: 1/5 calls, warm-up", signum=signal.SIGTERM
    )

    assert (status, out) == (128 + signal.SIGTERM, "")
    assert stopped_before_any_call(err.splitlines()[-1], "terminated (SIGTERM)", ": no table."), err


def test_ctrl_c_after_the_last_measurement_leaves_the_results_complete(tmp_path: Path) -> None:
    # Every call has finished: the signal lands while the run builds its report, stops the
    # simulator or prints; whichever, nothing is missing. Before, the run was marked partial
    # with nothing listed as missing, its gate not checked, exit 130.
    baseline = tmp_path / "baseline.json"
    slowest = {"trimmed": True, "streaming": True, "ttft_ms": {"p50": 10**9}}
    baseline.write_text(json.dumps({"modes": [slowest]}), encoding="utf-8")
    options = ["--runs", "1", "--json", "out.json", "--baseline", str(baseline)]

    status, out, err = interrupted_bench(tmp_path, *options, after="bench: 5/5 calls")

    assert status == 0, err
    assert "Traceback" not in err
    document = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert (document["interrupted"], document["missing"]) == (False, [])
    assert [mode["runs"] for mode in document["modes"]] == [1, 1, 1, 1]
    assert "Partial" not in out
    assert "1 run per mode" in " ".join(out.split())
    assert out.splitlines()[-1].endswith(": ok")  # the gate was checked, and passed
    assert err.splitlines()[-1] == (
        "agent-latency bench: interrupted (Ctrl-C) after the last measurement: the results "
        "above are complete."
    )


def test_a_second_signal_while_the_run_winds_down_changes_nothing(tmp_path: Path) -> None:
    # SIGINT and SIGTERM at once: Python runs SIGINT's handler first, SIGTERM's at the next
    # instruction, while the first KeyboardInterrupt unwinds. Before, that second one cut the
    # run short (the partial report lost, or a traceback).
    status, out, err = interrupted_bench(
        tmp_path, "--runs", "1", "--json", "out.json", after="bench: 3/5 calls", then=signal.SIGTERM
    )

    assert status == INTERRUPTED, err
    assert "Traceback" not in err
    document = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert document["interrupted"] is True
    assert [mode["runs"] for mode in document["modes"]][:2] == [1, 1]
    assert out.splitlines()[0].startswith("Partial results: interrupted (Ctrl-C). Not measured: ")
    assert err.splitlines()[-1] == (
        "agent-latency bench: interrupted (Ctrl-C): the results above are partial."
    )


def test_a_json_file_whose_write_fails_midway_keeps_the_previous_one_whole(tmp_path: Path) -> None:
    # The process may write files of at most 200 bytes (RLIMIT_FSIZE): the results' JSON is cut
    # there, as a full disk or a signal would cut it. Before, the previous file was truncated
    # and left as its first 200 bytes of the new one.
    previous = json.dumps({"modes": [], "interrupted": False}, indent=2)
    (tmp_path / "out.json").write_text(previous, encoding="utf-8")

    def limited() -> None:
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (200, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        )

    command = subprocess.run(
        bench_command(tmp_path, "--runs", "1", "--json", "out.json"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SOURCE), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        preexec_fn=limited,
        timeout=120,
        check=False,
    )

    assert command.returncode == 2
    assert command.stderr.splitlines()[-1].startswith(
        "agent-latency: error: --json out.json: cannot be written (File too large)."
    )
    assert (tmp_path / "out.json").read_text(encoding="utf-8") == previous
    assert sorted(path.name for path in tmp_path.iterdir()) == ["conversation.json", "out.json"]
    assert "trimmed + streaming" in command.stdout  # the tables are printed all the same
