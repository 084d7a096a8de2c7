"""``bench --json`` replaces the file it names whole: a link's target, with its permissions."""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import pytest

from agent_latency.cli import main

pytestmark = pytest.mark.usefixtures("clean_environment")


def test_a_linked_json_file_is_replaced_at_its_target_and_keeps_its_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The file is written beside its target and renamed over it: renamed over the link, the
    # link would become a file and the target keep the old results.
    conversation = tmp_path / "conversation.json"
    conversation.write_text('[{"role": "user", "content": "hi"}]', encoding="utf-8")
    target = tmp_path / "results" / "bench.json"
    target.parent.mkdir()
    target.write_text("{}", encoding="utf-8")
    target.chmod(0o640)
    link = tmp_path / "out.json"
    link.symlink_to(target)
    handler = signal.getsignal(signal.SIGTERM)

    status = main(["bench", "--runs", "1", "--messages", str(conversation), "--json", str(link)])

    assert status == 0, capsys.readouterr().err
    assert link.is_symlink()
    assert json.loads(target.read_text(encoding="utf-8"))["interrupted"] is False
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(path.name for path in target.parent.iterdir()) == ["bench.json"]
    assert signal.getsignal(signal.SIGTERM) is handler  # the command's handler is gone
