"""The docs as written: every console block runs, the quickstart's Python too, links resolve."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support.doc_runner import REPO, doc_session, fenced_blocks

DOCS = sorted((REPO / "docs").glob("*.md"))
README = REPO / "README.md"
QUICKSTART = REPO / "docs" / "quickstart.md"
# Docs whose Python blocks are complete programs (run against the doc's simulator or their own)
# and that send traces to the collector at localhost:4318, here the test's stand-in: the traces
# must arrive.
TRACED_PROGRAM_DOCS = {QUICKSTART, REPO / "docs" / "jaeger.md"}
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _languages(doc: Path) -> set[str]:
    return {block.language for block in fenced_blocks(doc.read_text(encoding="utf-8"))}


def _runnable(doc: Path) -> bool:
    return "console" in _languages(doc) or doc in TRACED_PROGRAM_DOCS


def _name(doc: Path) -> str:
    return str(doc.relative_to(REPO))


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in [*DOCS, README] if _runnable(d)], ids=_name)
def test_doc_commands_work_as_written(
    doc: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced = doc in TRACED_PROGRAM_DOCS
    with doc_session(tmp_path, capsys, monkeypatch) as session:
        ran = session.run_document(doc, run_python=traced)

    assert ran > 0
    if traced:  # the programs flush their spans before they exit
        names = {span.name for span in session.collector.spans()}
        assert any(name.startswith("chat ") for name in names), names


def test_the_quickstart_runs_its_program_and_shows_jaeger() -> None:
    text = QUICKSTART.read_text(encoding="utf-8")
    blocks = fenced_blocks(text)
    consoles = "\n".join(block.text for block in blocks if block.language == "console")
    scripts = [block.text.split("\n", 1)[0] for block in blocks if block.language == "python"]

    assert "# first_call.py" in scripts
    assert "$ python first_call.py" in consoles
    assert "--otlp-endpoint http://localhost:4318" in consoles
    assert "(jaeger.md)" in text


@pytest.mark.parametrize("doc", [*DOCS, README], ids=_name)
def test_python_blocks_are_valid_python(doc: Path) -> None:
    for block in fenced_blocks(doc.read_text(encoding="utf-8")):
        if block.language == "python":
            ast.parse(block.text, filename=_name(doc))


@pytest.mark.parametrize("doc", [*DOCS, README], ids=_name)
def test_relative_links_resolve(doc: Path) -> None:
    targets = [
        link.split("#")[0]
        for link in _LINK.findall(doc.read_text(encoding="utf-8"))
        if "://" not in link and not link.startswith(("#", "mailto:"))
    ]

    missing = [target for target in targets if not (doc.parent / target).exists()]

    assert missing == []


def test_readme_links_every_doc() -> None:
    linked = {
        (REPO / link.split("#")[0]).resolve()
        for link in _LINK.findall(README.read_text(encoding="utf-8"))
    }

    assert [_name(doc) for doc in DOCS if doc.resolve() not in linked] == []
