"""Derives ``longmemeval_s_20k.json.gz`` from LongMemEval_S instances: how the file was made.

Usage::

    python benchmarks/data/make_longmemeval_subset.py SOURCE OUT.json.gz

``SOURCE`` is LongMemEval's ``longmemeval_s_cleaned.json`` (a JSON list of instances) or a
folder of one instance per ``*.json`` file. Per question type (abstention questions and those
without a turn labelled ``has_answer`` left out), the first :data:`PER_TYPE` instances by
``question_id`` are kept. Each instance's history is shortened to about :data:`TARGET_CHARS`
characters (~20k tokens): every evidence session (``answer_session_ids``) stays, and the
other sessions are drawn at random (seeded by the question id) until the target is reached;
the kept sessions stay in their original order with their original dates. Nothing else is
changed: the turns' roles, text and ``has_answer`` labels are LongMemEval's.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

PER_TYPE = 10
TARGET_CHARS = 80_000


def _instances(source: Path) -> list[dict[str, Any]]:
    if source.is_dir():
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(source.glob("*.json"))]
    loaded: list[dict[str, Any]] = json.loads(source.read_text(encoding="utf-8"))
    return loaded


def _has_evidence(instance: dict[str, Any]) -> bool:
    return any(t.get("has_answer") for s in instance["haystack_sessions"] for t in s)


def _shortened(instance: dict[str, Any]) -> dict[str, Any]:
    sessions = instance["haystack_sessions"]
    ids = instance["haystack_session_ids"]
    evidence = {i for i, sid in enumerate(ids) if sid in set(instance["answer_session_ids"])}
    evidence |= {i for i, s in enumerate(sessions) if any(t.get("has_answer") for t in s)}
    size = [sum(len(t["content"]) for t in s) for s in sessions]
    kept = set(evidence)
    total = sum(size[i] for i in kept)
    others = [i for i in range(len(sessions)) if i not in kept]
    random.Random(instance["question_id"]).shuffle(others)
    for i in others:
        if total >= TARGET_CHARS:
            break
        kept.add(i)
        total += size[i]
    order = sorted(kept)
    return {
        "question_id": instance["question_id"],
        "question_type": instance["question_type"],
        "question": instance["question"],
        "answer": str(instance["answer"]),
        "question_date": instance["question_date"],
        "haystack_session_ids": [ids[i] for i in order],
        "haystack_dates": [instance["haystack_dates"][i] for i in order],
        "haystack_sessions": [
            [
                {
                    "role": t["role"],
                    "content": t["content"],
                    "has_answer": bool(t.get("has_answer")),
                }
                for t in sessions[i]
            ]
            for i in order
        ],
    }


def main(source: str, out: str) -> None:
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for instance in _instances(Path(source)):
        if instance["question_id"].endswith("_abs") or not _has_evidence(instance):
            continue
        by_type[instance["question_type"]].append(instance)
    chosen = [
        _shortened(i)
        for kind in sorted(by_type)
        for i in sorted(by_type[kind], key=lambda i: i["question_id"])[:PER_TYPE]
    ]
    data = json.dumps(chosen, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:
        f.write(data)
    print(f"{len(chosen)} instances, {len(data):,} bytes of JSON -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
