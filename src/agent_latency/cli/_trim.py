"""``agent-latency trim``: show what the trimmer keeps, drops and shortens in a conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from langchain_core.messages import convert_to_openai_messages
from rich.console import Console
from rich.table import Table

from agent_latency._config import load_settings
from agent_latency._messages import load_messages_file
from agent_latency.trimming._trimmer import PriorityTrimmer, Rule, TrimResult

RULE_REASONS: dict[Rule, str] = {
    "fits": "all fits the budget",
    "must_keep": "always kept",
    "latest_tool_call": "current tool call",
    "within_budget": "budget left for it",
    "dropped_for_budget": "lower priority/older",
    "orphan_tool_result": "no tool call asked",
    "tool_result_cap": "over tool result cap",
    "shortened_to_fit": "must-keep over budget",
}
_ACTION_STYLES = {"kept": "green", "dropped": "red", "shortened": "yellow"}


def render_trim_table(result: TrimResult) -> Table:
    """Returns a table with one row per input message and the totals."""
    table = Table(title=f"Trim to {result.budget} tokens", show_footer=False)
    for header, justify in (
        ("#", "right"),
        ("role", "left"),
        ("tokens", "right"),
        ("after", "right"),
        ("action", "left"),
        ("class", "left"),
        ("why", "left"),
    ):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for decision in result.decisions:
        style = _ACTION_STYLES[decision.action]
        table.add_row(
            str(decision.index),
            decision.role,
            str(decision.tokens),
            str(decision.tokens_after),
            f"[{style}]{decision.action}[/{style}]",
            decision.priority_class,
            RULE_REASONS[decision.rule],
        )
    table.caption = (
        f"total {result.tokens_before} -> {result.tokens_after} tokens "
        f"(reply priming included); {result.dropped_messages} dropped, "
        f"{result.shortened_messages} shortened"
        + ("; OVER BUDGET: even the must-keep messages do not fit" if result.over_budget else "")
    )
    return table


def trim(
    file: Annotated[Path, typer.Argument(help="OpenAI-format conversation (JSON list).")],
    budget: Annotated[
        int | None, typer.Option(min=1, help="Token budget (default: from the settings).")
    ] = None,
    settings: Annotated[Path | None, typer.Option(help="settings.json to read.")] = None,
    config: Annotated[Path | None, typer.Option(help="config.toml to read.")] = None,
    output: Annotated[
        Path | None, typer.Option(help="Write the trimmed conversation here.")
    ] = None,
) -> None:
    """Trim a conversation and show, message by message, what was kept, dropped or shortened."""
    loaded = load_settings(config, settings)
    messages = load_messages_file(file)
    options = {} if budget is None else {"budget": budget}
    result = PriorityTrimmer.from_settings(loaded, **options).trim(messages)
    Console().print(render_trim_table(result))
    if output is not None:
        trimmed = convert_to_openai_messages(result.messages)
        output.write_text(json.dumps(trimmed, ensure_ascii=False, indent=2) + "\n", "utf-8")
