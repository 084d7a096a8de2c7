"""Each option declared once (issue 30, item 1).

A setting's declaration (``setting(...)`` in ``config/_settings.py``) is the one place that gives
its type, default, bounds, meaning and file keys; the file schemas, the loader's checks and the
tables of docs/configuration.md follow from it (the trimmer's side: tests/trimming/
test_options_table.py). These tests hold the docs' Markdown to the declarations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from agent_latency.config import SETTINGS, PromptSettings, Setting
from agent_latency.config._declared import declarations, documented, setting
from agent_latency.config._settings import JSON, TOML
from agent_latency.config._sources import FileSchema

CONFIGURATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
_KIND_CELL = {"bool": "bool", "str": "string", "list": "list", "int": "integer", "number": "number"}


# --- the docs' tables are the declarations ------------------------------------------------------


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _type_cell(each: Setting) -> str:
    declared = each.declared
    if declared.accepts is not None:
        return declared.accepts
    if each.choices:
        return ", ".join(f"`{choice}`" for choice in each.choices)
    if declared.minimum is None or declared.maximum is None:
        return _KIND_CELL[each.kind]
    if each.kind == "int":
        low = int(declared.minimum) + declared.above
        return f"integer in [{low:,}, {_number(declared.maximum)}]{declared.note}"
    opening = "(" if declared.above else "["
    return (
        f"number in {opening}{_number(declared.minimum)}, {_number(declared.maximum)}]"
        f"{declared.note}"
    )


def _default_cell(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{json.dumps(list(value))}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def settings_table(schema: FileSchema) -> str:
    """The docs' table of one file's keys, made from the declarations."""
    by_target = {each.target: each for each in SETTINGS}
    rows = ["| key | type | default | effect |", "| --- | --- | --- | --- |"]
    for key, spec in schema.keys.items():
        each = by_target[spec.target]
        toml = each.declared.toml
        effect = f"same as `{toml}`" if schema is JSON and toml else each.declared.doc
        rows.append(f"| `{key}` | {_type_cell(each)} | {_default_cell(each.default)} | {effect} |")
    return "\n".join(rows)


def _documented_table(file: str) -> str:
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    section = text.split(f"\n## `{file}`\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


@pytest.mark.parametrize("schema", [TOML, JSON], ids=lambda schema: schema.name)
def test_the_docs_table_of_each_file_is_made_from_the_declarations(schema: FileSchema) -> None:
    expected = settings_table(schema)
    assert _documented_table(schema.name) == expected, (
        f"docs/configuration.md, section {schema.name}: replace its table with\n{expected}"
    )


def test_every_setting_has_a_key_in_a_file_and_a_meaning() -> None:
    for each in SETTINGS:
        assert each.declared.toml or each.declared.json, each.target
        assert each.declared.doc, each.target
    assert len({key.target for key in (*TOML.keys.values(), *JSON.keys.values())}) == len(SETTINGS)


def test_the_settings_docstrings_are_the_declarations() -> None:
    doc = PromptSettings.__doc__ or ""
    assert "    Attributes:\n        token_budget: the most prompt tokens per model call\n" in doc


# --- a new setting is one declaration -----------------------------------------------------------


def test_a_new_setting_is_one_declaration() -> None:
    """What CONTRIBUTING.md's "How to add an option" shows: kind, choices, bounds, fix and
    docstring all come from the one ``setting(...)`` line."""

    @documented
    @dataclass(frozen=True)
    class ExampleSettings:
        """An example section."""

        retries: int = setting(
            3,
            "how often a call is retried",
            json="example.retries",
            minimum=0,
            maximum=10,
            example="e.g. 3",
        )
        style: Literal["short", "long"] | None = setting(None, "answer style", toml="x.style")

    retries, style = declarations(ExampleSettings)
    assert (retries.target, retries.kind, retries.default) == ("example.retries", "int", 3)
    assert retries.requirement == "must be >= 0 and at most 10; e.g. 3"
    assert retries.problem(11) == retries.requirement and retries.problem(True) is not None
    assert retries.problem(10) is None
    assert (style.kind, style.choices, style.optional) == ("str", ("short", "long"), True)
    assert style.problem(None) is None and style.problem("medium") == "must be one of short, long"
    assert "        retries: how often a call is retried\n" in (ExampleSettings.__doc__ or "")
