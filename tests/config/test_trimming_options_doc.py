"""docs/trimming.md's Options table against the code.

The table gave ``history_keep_head`` 2, ``history_keep_tail`` 4 and ``history_selection`` ``age``
long after the defaults (one source: :class:`~agent_latency.config.PromptSettings`) became 1, 1
and ``relevance`` (since replaced by ``cache_first``). Each row here is checked against the
trimmer's options table (``TrimOptions``, whose fields are ``PriorityTrimmer``'s options), so a
changed default fails until the table says it too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from agent_latency.trimming import TrimOptions

TRIMMING_DOC = Path(__file__).resolve().parents[2] / "docs/trimming.md"


def _options_table() -> dict[str, str]:
    """The option -> default cell of the table under ``## Options``."""
    text = TRIMMING_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`", cells[0]) if len(cells) >= 3 else None
        if name is not None:
            rows[name[1]] = cells[1]
    return rows


def _shown(value: object) -> str:
    """A default as the table writes it: numbers bare, everything else in backticks."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, tuple):
        return f"`{', '.join(map(str, value))}`"
    return f"`{value}`"


def _defaults() -> dict[str, object]:
    defaults = TrimOptions()
    return {field.name: getattr(defaults, field.name) for field in dataclasses.fields(TrimOptions)}


def test_the_table_has_a_row_per_option_and_no_other() -> None:
    assert sorted(_options_table()) == sorted(_defaults())


def test_each_fixed_default_is_the_one_in_the_code() -> None:
    table = _options_table()
    for name, default in _defaults().items():
        if default is None or default in ((), frozenset()):
            continue  # budget-dependent or "none": said in words
        assert table[name] == _shown(default), f"docs/trimming.md Options: {name}"


def test_a_default_said_in_words_is_no_literal() -> None:
    table = _options_table()
    for name, default in _defaults().items():
        if default is None or default in ((), frozenset()):
            cell = table[name]
            assert not re.fullmatch(r"\d+|`(True|False|\w+)`", cell) or cell == "`None`", name
