"""``scripts/growing_trim_cost.py``: ours beside ``trim_messages`` on a growing chat."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.scripts import benchmark_script

SUFFIXES = {
    "trim": ([], "messages of real chat (longmemeval_s_20k.json.gz)"),
    "middleware": (["--middleware"], "ours: TrimmingMiddleware"),
    "dicts": (["--dicts"], "as OpenAI-format dicts"),
    "fresh": (["--fresh"], "new objects on every call"),
    "tool results": (["--tool-results"], "an agent history of long tool results"),
}


@pytest.mark.parametrize(("path", "suffix"), SUFFIXES.values(), ids=SUFFIXES)
def test_prints_each_band_with_both_costs_and_their_ratio(
    path: list[str], suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with benchmark_script("growing_trim_cost") as script:
        argv = ["--messages", "150", "--repeat", "2", "--budget", "2000", *path]
        assert script.main(argv) == 0

    lines = capsys.readouterr().out.splitlines()
    rounds = path == ["--tool-results"]  # whole rounds of four messages
    assert lines[0].startswith(f"budget 2,000; median CPU ms per call, {148 if rounds else 150} ")
    assert lines[0].endswith(suffix)
    bands = [line.split() for line in lines[2:]]
    assert [band[0] for band in bands] == ["0-99", "100-199"]
    calls = sum(int(band[1]) for band in bands)
    if rounds:  # a call per round
        assert calls == 150 // 4
    else:  # a call per user turn: about half the messages
        assert 60 <= calls <= 90
    for _, _, ours, theirs, ratio in bands:
        mine, peer = float(ours), float(theirs)
        assert mine > 0 and peer > 0
        # The times are printed to 0.01 ms: the ratio, of the times unrounded, lies between.
        assert (mine - 0.005) / (peer + 0.005) - 0.005 <= float(ratio)
        assert float(ratio) <= (mine + 0.005) / (peer - 0.005) + 0.005


def test_a_file_it_cannot_read_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with benchmark_script("growing_trim_cost") as script:
        assert script.main(["--data", str(tmp_path / "missing.json")]) == 2

    (line,) = capsys.readouterr().err.splitlines()
    assert "missing.json" in line and "Fix:" in line


def test_dicts_with_the_middleware_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with benchmark_script("growing_trim_cost") as script, pytest.raises(SystemExit) as exited:
        script.main(["--dicts", "--middleware"])
    assert exited.value.code == 2
    assert "--dicts and --middleware" in capsys.readouterr().err


def test_dicts_read_back_fresh_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with benchmark_script("growing_trim_cost") as script, pytest.raises(SystemExit) as exited:
        script.main(["--dicts", "--fresh"])
    assert exited.value.code == 2
    assert "--dicts and --fresh" in capsys.readouterr().err
