"""``scripts/growing_ttft.py``: several conversations interleaved on a server with slots."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.scripts import benchmark_script

from agent_latency.sim import SimulatorConfig, running_simulator

# Six turns of each of the shipped set's first two conversations: three calls each.
CALLS = 3


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    with benchmark_script("growing_ttft") as module:
        yield module


def _run(script: ModuleType, slots: int, tmp_path: Path, *options: str) -> list[dict[str, Any]]:
    """Runs the script against a simulator with ``slots`` llama.cpp slots; returns its rows."""
    config = SimulatorConfig(
        cache_slots=slots, timings=True, overhead_ms=1, prefill_ms_per_token=0.001
    )
    out = tmp_path / f"rows-{slots}.json"
    with running_simulator(config) as sim:
        argv = ["--base-url", sim.base_url, "--model", config.models[0], "--tokenizer", "qwen"]
        argv += ["--turns", "6", "--budget", "3000", "--json", str(out), *options]
        assert script.main(argv) == 0
    rows: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return rows


def test_conversations_grow_in_turn_each_in_its_own_slot(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _run(script, 2, tmp_path, "--conversations", "2", "--strategies", "send_everything")

    printed = capsys.readouterr().out
    (row,) = rows
    calls = row["per_call"]
    assert [(c["conversation"], c["call"]) for c in calls] == [
        (conversation, call) for call in range(CALLS) for conversation in (0, 1)
    ]
    # Two slots: from the third round on, each conversation finds its previous prompt, whole,
    # in a slot of its own. (The second conversation's first call shares the system prompt
    # with the first's, more than --slot-prompt-similarity, so it goes to that slot and evicts
    # it, as on llama-server: the first conversation's second call starts over in the other.)
    for previous, call in zip(calls[2:], calls[4:], strict=False):
        assert call["cached"] >= previous["prompt"] > 700
    assert [c["conversation"] for c in row["conversations"]] == [0, 1]
    for figures in row["conversations"]:
        own = [c for c in calls if c["conversation"] == figures["conversation"]]
        assert figures["calls"] == CALLS
        assert figures["mean_cached"] == sum(c["cached"] for c in own) / CALLS
        assert f"  conversation {figures['conversation']} prompt {figures['mean_prompt']:7.0f}" in (
            printed
        )
    assert printed.startswith(f"send_everything  prompt {row['mean_prompt']:7.0f}")


def test_on_one_slot_conversations_in_turn_evict_each_other(
    script: ModuleType, tmp_path: Path
) -> None:
    (row,) = _run(script, 1, tmp_path, "--conversations", "2", "--strategies", "send_everything")

    calls = row["per_call"]
    # Replayed one after the other, each call would find the last in the slot; in turn, the
    # slot holds the other conversation's, which shares only the system prompt.
    assert len(calls) == 2 * CALLS
    assert all(c["cached"] < 100 for c in calls)
    assert all(c["prompt"] > 700 for c in calls[2:])


def test_every_slot_is_emptied_before_each_strategy(script: ModuleType, tmp_path: Path) -> None:
    rows = _run(script, 2, tmp_path, "--strategies", "send_everything,send_everything")

    first, again = (row["per_call"] for row in rows)
    # A conversation on two slots keeps one; the rerun must not find it there.
    assert again[0]["cached"] == first[0]["cached"] < 100
    assert [c["cached"] for c in again] == [c["cached"] for c in first]
    assert "conversations" in rows[0]
    assert [len(row["conversations"]) for row in rows] == [1, 1]


def test_concurrent_conversations_each_send_all_their_calls_in_order(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _run(
        script, 2, tmp_path, "--conversations", "2", "--concurrent", "--strategies", "age_1_1"
    )

    (row,) = rows
    for conversation in (0, 1):
        own = [c["call"] for c in row["per_call"] if c["conversation"] == conversation]
        assert own == list(range(CALLS))
    assert [f["calls"] for f in row["conversations"]] == [CALLS, CALLS]
    assert capsys.readouterr().out.count("  conversation ") == 2


def test_the_slot_a_call_finds_last_used_by_another_conversation_is_counted(
    script: ModuleType,
) -> None:
    calls = [
        {"conversation": conversation, "slot": slot, "prompt": 10, "cached": 0, "ttft_ms": 1}
        for conversation, slot in [(0, 0), (1, 0), (0, 1), (1, 0), (0, 1), (1, 1)]
    ]

    row = script._row("age_1_1", calls)

    assert [c["displaced"] for c in row["per_call"]] == [False, True, False, False, False, True]
    assert [(f["slots"], f["displaced"]) for f in row["conversations"]] == [
        ({1: 2, 0: 1}, 0),
        ({0: 2, 1: 1}, 2),
    ]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--conversations", "0"], "--conversations"),
        (["--conversation", "1", "--conversations", "99"], "--conversations 99"),
        (["--strategies", "default,no_such"], "no_such"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(
    script: ModuleType, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        script.main(["--base-url", "http://127.0.0.1:9/v1", "--model", "m", *argv])

    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
