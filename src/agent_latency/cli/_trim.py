"""``agent-latency trim``: show what the trimmer keeps, drops and shortens in a request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from agent_latency._chat_format import escape_surrogates, openai_message
from agent_latency._server_usage import MAX_REPORTED_TOKENS
from agent_latency._user_input import load_request_file
from agent_latency.cli._tables import print_whole
from agent_latency.config import load_settings
from agent_latency.trimming import RULE_EXPLANATIONS, TrimResult, trimmer_from_settings

_ACTION_STYLES = {"kept": "green", "dropped": "red", "shortened": "yellow"}


def render_trim_table(result: TrimResult, counted_with: str) -> Table:
    """Returns a table with one row per input message, the totals and the fixed part.

    Args:
        result: The trim to show.
        counted_with: The name of the token counter, e.g. ``"qwen + qwen framing"``.
    """
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
            RULE_EXPLANATIONS[decision.rule][0],
        )
    fixed = (
        f"fixed part {result.fixed_tokens:,}: tool definitions {result.tool_tokens:,}, "
        f"response format {result.response_format_tokens:,}, "
        f"must-keep messages {result.must_keep_tokens:,}, framing {result.framing_tokens:,}"
    )
    table.caption = "\n".join(
        [
            f"total {result.tokens_before:,} -> {result.tokens_after:,} tokens of {counted_with}; "
            f"{result.dropped_messages} dropped, {result.shortened_messages} shortened",
            fixed,
            *(
                [
                    f"cache-first cut: {result.budget - result.tokens_after:,} of "
                    f"{result.budget:,} tokens left free, so that the next calls append to the "
                    "prompt the server has cached; the cut moves once the history has grown by "
                    "an epoch (docs/trimming.md, Cache-first cuts)"
                ]
                if any(d.rule == "dropped_at_cut" for d in result.decisions)
                and result.tokens_after < result.budget
                else []
            ),
            *(
                [f"OVER BUDGET: {result.over_budget_cause}. Fix: {result.over_budget_hint}."]
                if result.over_budget
                else []
            ),
        ]
    )
    return table


def trim(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="OpenAI-format conversation (JSON list), or a request body with 'messages' "
            "and optionally 'tools' and 'response_format'.",
        ),
    ],
    budget: Annotated[
        int | None,
        typer.Option(
            min=1, max=MAX_REPORTED_TOKENS, help="Token budget (default: from the settings)."
        ),
    ] = None,
    settings: Annotated[
        Path | None, typer.Option(metavar="FILE", help="settings.json to read.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(metavar="FILE", help="config.toml to read.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write the trimmed conversation (or request) here."),
    ] = None,
) -> None:
    """Trim a request and show, message by message, what was kept, dropped or shortened.

    Tokens are counted with the tokenizer of the configured model (llm.model, llm.tokenizer);
    the tools and response format of a request body count against the budget.
    """
    if output is not None:
        _check_output(output, {"FILE": file, "--settings": settings, "--config": config})
    loaded = load_settings(config, settings)
    request = load_request_file(file)
    options: dict[str, Any] = {"tools": request.tools, "response_format": request.response_format}
    if budget is not None:
        options["budget"] = budget
    trimmer = trimmer_from_settings(loaded, **options)
    result = trimmer.trim(request.messages)
    print_whole(Console(), render_trim_table(result, trimmer.token_counter.name))
    if output is not None:
        trimmed: Any = [openai_message(message) for message in result.messages]
        if isinstance(request.document, dict):
            trimmed = {**request.document, "messages": trimmed}
        text = json.dumps(trimmed, ensure_ascii=False, indent=2) + "\n"
        try:
            # A lone surrogate (read from an escape) is no UTF-8: written back as that escape.
            output.write_text(escape_surrogates(text), encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"--output {output}: cannot be written ({exc.strerror or type(exc).__name__}). "
                "Fix: give a file path you may write to."
            ) from None


def _check_output(output: Path, read: dict[str, Path | None]) -> None:
    """Refuses an output path that cannot become a file, or that is a file ``read`` names
    (by its option), before the trim is shown."""
    for option, path in read.items():
        if path is not None and path.resolve() == output.resolve():
            raise ValueError(
                f"--output {output}: is also the {option} file, which the trimmed conversation "
                "would overwrite (what was dropped would be lost). Fix: give another file name."
            )
    if output.is_dir():
        raise ValueError(
            f"--output {output}: is a directory. Fix: give a file path, e.g. "
            f"{output / 'trimmed.json'}."
        )
    if not output.parent.is_dir():
        raise ValueError(
            f"--output {output}: the folder {output.parent} does not exist. Fix: create it, "
            "or give a path in an existing folder."
        )
