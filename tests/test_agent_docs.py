"""The README, docs/trimming.md and examples/ lead with ``create_agent``.

LangGraph 1.0 deprecates ``create_react_agent`` (``LangGraphDeprecatedSinceV10``) for
``langchain.agents.create_agent`` with middleware; the README recommended its ``pre_model_hook``
beside ``create_agent`` with no word of that. Now ``create_agent`` with ``TrimmingMiddleware``
comes first, and wherever the hook is shown the deprecation and the versions are named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.doc_runner import REPO, fenced_blocks

README = REPO / "README.md"
SHOWING_AGENTS = [README, REPO / "docs" / "trimming.md", *sorted((REPO / "examples").glob("*.py"))]


def test_the_readme_shows_create_agent_with_the_middleware_in_code() -> None:
    text = README.read_text(encoding="utf-8")
    agent_blocks = [
        block.text
        for block in fenced_blocks(text)
        if block.language == "python" and "create_agent(" in block.text
    ]

    assert agent_blocks, "no Python block builds an agent"
    assert "from langchain.agents import create_agent" in agent_blocks[0]
    assert "TrimmingMiddleware.from_settings(settings)" in agent_blocks[0]


@pytest.mark.parametrize("path", SHOWING_AGENTS, ids=lambda path: path.name)
def test_the_hook_is_shown_as_older_code_after_create_agent(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    hook = [text.find(name) for name in ("create_react_agent", "pre_model_hook") if name in text]
    if not hook:
        return
    assert "create_agent" in text
    assert text.index("create_agent") < min(hook)
    assert "LangGraph 1.0" in text  # the version that deprecates create_react_agent
    assert "0.3" in text  # the LangGraph that brought pre_model_hook
