"""Each option of ``bench`` and ``sim`` is declared once, as a field of the command's options
value: the command line typer builds has exactly those options, with their defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer

from agent_latency.cli._bench import BenchFlags, bench
from agent_latency.cli._sim import SimFlags, sim
from agent_latency.sim import SimulatorConfig


@pytest.mark.parametrize(
    ("command", "options"), [(bench, BenchFlags), (sim, SimFlags)], ids=["bench", "sim"]
)
def test_the_command_line_has_one_option_per_field_with_its_default(
    command: Any, options: type[Any]
) -> None:
    app = typer.Typer(add_completion=False)
    app.command()(command)
    click_command = typer.main.get_command(app)

    given = {param.name: param.default for param in click_command.params}
    declared = {field.name: field.default for field in dataclasses.fields(options)}
    assert given == declared


def test_sim_s_options_left_alone_serve_the_simulator_s_defaults() -> None:
    assert SimFlags().simulator() == SimulatorConfig()
    chosen = SimFlags(host="0.0.0.0", port=0, model="m-1", overhead_ms=5.0, buffered=True)
    assert chosen.simulator() == SimulatorConfig(model="m-1", overhead_ms=5.0, buffered=True)
