"""Cold cost of each offline tokenizer: loading its vocabulary, and tokenising 100k characters.

English is the project's README and docs, Chinese a repeated paragraph about prefill latency.
Each text is counted by a fresh ``TokenCounter.for_model`` counter as one message (nothing
cached), best of three runs.

Run: ``python scripts/tokenizer_cost.py`` (about half a minute on 2 cores).
"""

from __future__ import annotations

import time
from pathlib import Path

from langchain_core.messages import HumanMessage

from agent_latency.tokens import TokenCounter

ROOT = Path(__file__).parents[1]
MODELS = ("gpt-4", "gpt-4o", "qwen-7b-chat", "qwen3.6-27b", "llama-3.1-8b", "gemma-3-4b")
CHARS = 100_000


def _texts() -> dict[str, str]:
    english = "\n".join(
        p.read_text(encoding="utf-8")
        for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )
    chinese = (
        "首个词元的等待时间取决于服务器需要预填充的提示长度。智能体每一步都会把完整的对话历史、"
        "工具定义和系统提示发送给模型，上下文越长，预填充越慢。"
    )
    return {"en": (english * 2)[:CHARS], "zh": (chinese * (CHARS // len(chinese) + 1))[:CHARS]}


def main() -> None:
    texts = _texts()
    header = ("model", "counter", "load ms", "en ms/100k", "zh ms/100k", "en tokens", "zh tokens")
    print("{:<14} {:<30} {:>8} {:>11} {:>11} {:>10} {:>10}".format(*header))
    for model in MODELS:
        started = time.perf_counter()
        counter = TokenCounter.for_model(model)
        counter.count_text("warm up")
        load_ms = (time.perf_counter() - started) * 1000
        cells = []
        for text in texts.values():
            runs = []
            for _ in range(3):
                fresh = TokenCounter.for_model(model)  # vocabulary shared, caches empty
                started = time.perf_counter()
                tokens = fresh.count_message(HumanMessage(text))
                runs.append((time.perf_counter() - started) * 1000)
            cells.append((min(runs), tokens))
        (en_ms, en_tokens), (zh_ms, zh_tokens) = cells
        print(
            f"{model:<14} {counter.name:<30} {load_ms:>8.0f} {en_ms:>11.1f} {zh_ms:>11.1f} "
            f"{en_tokens:>10,} {zh_tokens:>10,}"
        )


if __name__ == "__main__":
    main()
