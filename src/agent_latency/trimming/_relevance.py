"""Lexical relevance of history rounds to the latest user message, with no model and no network.

Terms are lower-cased words of letters and digits, and for Chinese, Japanese and Korean text,
whose words are not separated by spaces, overlapping character pairs (a one-character run is its
own term). Rounds are ranked by Okapi BM25 against the terms of the latest user message, so a
round that mentions the rare words of the question ranks above one that only shares common
words. Term counts are cached by text, so a growing conversation analyses each message once.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from agent_latency._tokens import LRUCache

_K1: Final = 1.2
_B: Final = 0.75
_CACHE_ENTRIES: Final = 16_384
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+",
)
# Words so common in questions that matching them says nothing about a round's subject.
_STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "up",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


class TermCache:
    """Term counts of texts, cached by text and bounded; safe to share between threads."""

    def __init__(self, max_entries: int = _CACHE_ENTRIES) -> None:
        self._cache = LRUCache(max_entries)

    def counts(self, text: str) -> Counter[str]:
        """Returns how often each term occurs in ``text``."""
        found: Counter[str] | None = self._cache.get(text)
        if found is None:
            found = Counter(terms(text))
            self._cache.put(text, found)
        return found


def terms(text: str) -> list[str]:
    """Splits ``text`` into relevance terms (see the module docstring)."""
    found: list[str] = []
    for word in _WORD.findall(text.lower()):
        for run in _CJK.findall(word):
            found.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
        rest = _CJK.sub(" ", word).split()
        found.extend(w for w in rest if (len(w) > 1 or w.isdigit()) and w not in _STOPWORDS)
    return found


def bm25_scores(query: str, documents: Sequence[Iterable[str]], cache: TermCache) -> list[float]:
    """Scores each document (a round: the texts of its messages) against ``query``.

    Args:
        query: The latest user message's text.
        documents: Per document, the texts it is made of.
        cache: Where term counts are remembered between calls.

    Returns:
        One BM25 score per document; 0.0 for all when the query has no terms.
    """
    query_terms = set(cache.counts(query))
    bags: list[Counter[str]] = []
    for texts in documents:
        bag: Counter[str] = Counter()
        for text in texts:
            bag.update(cache.counts(text))
        bags.append(bag)
    if not query_terms or not bags:
        return [0.0] * len(bags)
    lengths = [sum(bag.values()) for bag in bags]
    average = (sum(lengths) / len(lengths)) or 1.0
    frequency = {t: sum(1 for bag in bags if t in bag) for t in query_terms}
    idf = {t: math.log(1 + (len(bags) - n + 0.5) / (n + 0.5)) for t, n in frequency.items() if n}
    scores = []
    for bag, length in zip(bags, lengths, strict=True):
        norm = _K1 * (1 - _B + _B * length / average)
        scores.append(
            sum((w * bag[t] * (_K1 + 1) / (bag[t] + norm) for t, w in idf.items() if t in bag), 0.0)
        )
    return scores


def term_coverage(query: str, kept: Iterable[str], cache: TermCache) -> float | None:
    """Returns the share of the query's terms that still occur in the kept context.

    A proxy for what a trim cost the answer: 1.0 when every salient word of the question is
    still somewhere in what is sent besides the question itself.

    Args:
        query: The latest user message's text.
        kept: The texts of the other messages that are sent.
        cache: Where term counts are remembered between calls.

    Returns:
        A share from 0.0 to 1.0, or ``None`` when the question has no terms.
    """
    wanted = set(cache.counts(query))
    if not wanted:
        return None
    present: set[str] = set()
    for text in kept:
        present.update(wanted.intersection(cache.counts(text)))
        if len(present) == len(wanted):
            break
    return len(present) / len(wanted)
