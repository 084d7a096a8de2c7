"""Lexical relevance of history rounds to the latest user message, with no model and no network.

Terms are lower-cased words of letters and digits (with their combining marks: accents, the
vowel signs of Hindi or Bengali; in NFC; Hebrew and Arabic vowel points left out; letters and
digits written in another shape folded to their plain form, see :data:`_FOLDS`), and for
Chinese, Japanese and Korean text, whose words are not separated by spaces, overlapping
character pairs (a one-character run is its own term). Rounds are ranked by Okapi BM25 against
the terms of the latest user message, so a round that mentions the rare words of the question
ranks above one that only shares common words. Term counts are cached by text, so a growing
conversation analyses each message once; every cache is bounded by bytes as well as entries
(see :class:`TermCache`).
"""

from __future__ import annotations

import bisect
import math
import operator
import re
import sys
import threading
import unicodedata
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, count, islice
from typing import Final, NamedTuple

from langchain_core.messages import BaseMessage

from agent_latency._caches import CONVERSATIONS_ACROSS_TURNS, LRUCache
from agent_latency.trimming._shortening import split_content

BM25_K1: Final = 1.2
BM25_B: Final = 0.75
"""BM25's term-count saturation and length discount (the usual values), for every BM25 score
of the trimmer."""
_CACHE_ENTRIES: Final = 16_384
_CACHE_BYTES: Final = 16 * 1024 * 1024
_SCORE_BYTES: Final = 4 * 1024 * 1024
_INDEX_BYTES: Final = 32 * 1024 * 1024
# The blocks of scripts written with spaces between words whose words hold combining marks
# (Latin and Cyrillic diacritics, Hebrew and Arabic vowel points, the vowel signs and viramas
# of Devanagari, Bengali, Tamil and the other Indic scripts to Sinhala): ``\w`` matches no
# mark, so "डेटाबेस" was split into single letters and Hindi had almost no terms. Thai, Lao,
# Tibetan, Myanmar and Khmer, written without spaces, keep the pieces their marks cut.
_MARK_BLOCKS: Final = (
    (0x0300, 0x036F),
    (0x0483, 0x0489),
    (0x0590, 0x08FF),
    (0x0900, 0x0DFF),
    (0x1AB0, 0x1AFF),
    (0x1DC0, 0x1DFF),
    (0x20D0, 0x20FF),
    (0xFE20, 0xFE2F),
)
_MARKS: Final = "".join(
    chr(code)
    for first, last in _MARK_BLOCKS
    for code in range(first, last + 1)
    if unicodedata.category(chr(code)).startswith("M")
)
# Hebrew and Arabic vowel points, cantillation and the Arabic tatweel: most text is written
# without them, so "الشّحن" (with a shadda) and "الشحن" are one word.
_POINTS: Final = re.compile(
    "["
    + "".join(
        chr(code)
        for first, last in ((0x0591, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x06D6, 0x06ED))
        for code in range(first, last + 1)
        if unicodedata.category(chr(code)) == "Mn"
    )
    + "\u0670\u0640]+"
)
# The compatibility forms that are the same letters and digits in another shape, folded as NFKC
# folds them: full- and half-width letters and digits (``ＸＫ７７３１``, as a Chinese or Japanese
# input method types it, is ``XK7731``; half-width katakana), math and letterlike fonts
# (``𝐛𝐨𝐥𝐝``), Arabic presentation forms, and the Latin, Armenian and Hebrew ligatures (``ﬁ`` in
# text copied from a PDF). The rest of NFKC is left out: it makes letters or digits of what
# stands for other text, glued to the word beside it: ``Acme™`` would be ``acmetm`` and no longer
# meet ``Acme``, ``5㎞`` ``5km``, ``10⁶`` ``106``, ``①`` ``1``.
_SHAPES: Final = frozenset(
    ("<wide>", "<narrow>", "<font>", "<initial>", "<medial>", "<final>", "<isolated>")
)
_LIGATURES: Final = range(0xFB00, 0xFB50)
# The blocks that hold those forms (a scan of every code point would slow the import).
_FOLD_BLOCKS: Final = (
    (0x2100, 0x214F),
    (0xFB00, 0xFEFF),
    (0xFF00, 0xFFEF),
    (0x1D400, 0x1D7FF),
    (0x1EE00, 0x1EEFF),
    (0x1FBF0, 0x1FBF9),
)
_FOLDS: Final = {
    code: unicodedata.normalize("NFKC", chr(code))
    for first, last in _FOLD_BLOCKS
    for code in range(first, last + 1)
    if chr(code).isalnum()  # punctuation and spaces of another width part words as they are
    and (
        (tag := unicodedata.decomposition(chr(code)).partition(" ")[0]) in _SHAPES
        or (tag == "<compat>" and code in _LIGATURES)
    )
}
# The forms of the Basic Multilingual Plane one by one (a bitmap: Chinese and Japanese text,
# full of full-width punctuation, is not folded), the blocks past it whole (their characters one
# by one would be tried in turn, 250 times slower on a chat's text; the translate folds only the
# forms).
_FOLDABLE = re.compile(
    "["
    + "".join(re.escape(chr(code)) for code in _FOLDS if code <= 0xFFFF)
    + "".join(f"{chr(first)}-{chr(last)}" for first, last in _FOLD_BLOCKS if first > 0xFFFF)
    + "]"
)
# Runs of letters, digits and marks (one alternation, at the start: a third quicker).
_WORD = re.compile(rf"(?:[^\W_]|[{_MARKS}])[^\W_]*(?:[{_MARKS}]+[^\W_]*)*", re.UNICODE)
_VOWELLESS = re.compile(r"[^aeiouy]+")
_SUFFIXES: Final = {suffix[-1]: suffix for suffix in ("ing", "ed", "ment", "ness")}
_STEMS: Final = 65_536
_HELD_WORD: Final = 64
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+",
)
# Per byte of UTF-8 text: an ASCII letter lower-cased, a digit kept, other ASCII a space, every
# other byte (of a character past ASCII) kept.
_ASCII_WORDS: Final = bytes.maketrans(
    bytes(range(128)),
    bytes(
        ord(c.lower()) if c.isascii() and c.isalnum() else ord(" ") for c in map(chr, range(128))
    ),
)
_SURROGATES: Final = "surrogatepass"  # a lone surrogate (e.g. half an emoji) is kept as it is
# Words so common in questions that matching them says nothing about a round's subject (a
# block of words: a list literal is formatted one word per line).
_STOPWORDS: Final = frozenset(
    """
    a an and are as at be but by can could did
    do does for from had has have how i if in into
    is it its me my no not of on or our so
    that the their them then there these they this to up was
    we were what when where which who why will with would you
    your
    """.split()  # noqa: SIM905
)
_EMPTY_BYTES: Final = sys.getsizeof("")


class TermCache:
    """Term counts of texts, cached by text; safe to share between threads.

    Bounded by bytes, not only by entries: the term counts of texts, with the texts they are
    keyed by, take at most ``max_bytes`` (16 MiB by default: the counts of a 20 KB text weigh
    about ten times the text); the scores remembered per question and the texts
    they were made of, at most 4 MiB. A text is held until it is evicted, also after its
    message died (a string cannot be weakly referenced); the bytes are those ``sys.getsizeof``
    reports for the strings and the counts.

    Args:
        max_entries: How many texts' term counts are remembered at most.
        max_bytes: How many bytes they, with their texts, take at most.
    """

    def __init__(self, max_entries: int = _CACHE_ENTRIES, max_bytes: int = _CACHE_BYTES) -> None:
        self._cache = LRUCache(max_entries, max_bytes)
        # Scores by (query, texts): an agent's tool steps ask the same question of the same
        # history, so only a new question or a changed history is scored again.
        self.scores = LRUCache(CONVERSATIONS_ACROSS_TURNS, _SCORE_BYTES)

    def counts(self, text: str) -> Counter[str]:
        """Returns how often each term occurs in ``text`` (shared: do not modify it)."""
        return self.entry(text)[0]

    def entry(self, text: str) -> tuple[Counter[str], int]:
        """Returns :meth:`counts` of ``text`` and how many terms it has."""
        found: tuple[Counter[str], int] | None = self._cache.get(text)
        if found is None:
            bag = Counter(_word_terms(text))
            bag.pop("", None)  # the words that are no term
            found = (bag, sum(bag.values()))
            self._cache.put(text, found, _held_bytes(text, bag))
        return found


def _held_bytes(text: str, bag: Counter[str]) -> int:
    """The bytes ``sys.getsizeof`` reports for a text, its term counts and their terms."""
    if text.isascii():  # ASCII terms: the size of an empty string and a byte a character
        terms_bytes = _EMPTY_BYTES * len(bag) + sum(map(len, bag))  # in C, no call per term
    else:
        terms_bytes = text_bytes(bag)
    return sys.getsizeof(text) + sys.getsizeof(bag) + terms_bytes


def text_bytes(texts: Iterable[str]) -> int:
    """The bytes the strings ``texts`` take (what a cache keyed or valued by them holds)."""
    return sum(map(sys.getsizeof, texts))


def text_of(message: BaseMessage) -> str:
    """The text of a message: its content when that is a string (no copy), else its text parts
    (an Anthropic-style ``tool_result`` block's nested text included), one per line: LangChain's
    ``message.text`` joins them with nothing between, gluing the last word of one to the first
    of the next.

    Null content (accepted, as ChatOpenAI sends it) has no text.
    """
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(split_content(content)[0])


def terms(text: str) -> list[str]:
    """Splits ``text`` into relevance terms (see the module docstring)."""
    return list(filter(None, _word_terms(text)))


def _word_terms(text: str) -> Iterator[str]:
    """Per word of ``text``, in order, its term, or ``""`` when it is none (see
    :class:`_WordTerms`); a CJK run's words are its character pairs."""
    lowered = text if text.isascii() else _plain(text)
    # In C: ASCII letters lower-cased, other ASCII but digits made spaces (UTF-8 keeps every
    # other character's bytes above 127), split at spaces.
    parts = (
        lowered.encode(errors=_SURROGATES)
        .translate(_ASCII_WORDS)
        .decode(errors=_SURROGATES)
        .split()
    )
    if lowered.isascii():  # most texts: the parts are the words
        return map(_TERMS.__getitem__, parts)
    words: list[str] = []
    for part in parts:
        if part.isascii():
            words.append(part)
            continue
        for word in _WORD.findall(part):
            if not _CJK.search(word):
                words.append(word)
                continue
            for run in _CJK.findall(word):
                words.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
            words.extend(_CJK.sub(" ", word).split())
    return map(_TERMS.__getitem__, words)


def _plain(text: str) -> str:
    """``text`` with its letters and digits in another shape folded (:data:`_FOLDS`; before
    lower-casing: ``𝐀`` folds to ``A``), lower-cased, in NFC: a letter and its accent typed apart
    (macOS, text copied from a PDF) meet the same letter typed whole."""
    if _FOLDABLE.search(text):
        text = text.translate(_FOLDS)
    text = text.lower()
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


class _WordTerms(dict[str, str]):
    """The term of each word met, ``""`` for none, worked out once; safe to share between threads.

    A piece of a CJK run is a term as it is; another word is one unless it is a stop word or a
    single letter, stemmed, and without Hebrew and Arabic vowel points (:data:`_POINTS`). Holds
    at most ``_STEMS`` words of at most ``_HELD_WORD`` characters (a longer one, such as a hash
    or an encoded blob, is worked out each time): when full, it forgets them all.
    """

    def __missing__(self, word: str) -> str:
        if not word.isascii() and _CJK.match(word):
            term = word
        elif not word.isascii() and (bare := _POINTS.sub("", word)) != word:
            term = self[bare] if bare else ""
        elif (len(word) > 1 or word.isdigit()) and word not in _STOPWORDS:
            term = _stem(word)
        else:
            term = ""
        if len(word) <= _HELD_WORD:
            if len(self) >= _STEMS:
                self.clear()
            self[word] = term
        return term


_TERMS: Final = _WordTerms()


def _stem(word: str) -> str:
    """An English word without its inflection ("paints", "painted", "painting": "paint"), so a
    question and the turn that answers it meet in other forms of a word; other words unchanged.

    A few suffix rules (plural and third-person ``s``, ``ing``, ``ed``, a doubled final
    consonant, a final ``y`` or ``e``), applied to lower-case ASCII words alike in the question
    and the messages: a rough stem is enough where both sides get the same.
    """
    if len(word) <= 3 or word[-1] not in "sdgtye" or not word.isascii() or not word.isalpha():
        return word  # short, or no rule's last letter (most words), or not an English word
    if word[-1] in "sd":  # where the plural rules' endings end
        if word.endswith(("ies", "ied")):
            word = word[:-3] + "i"
        elif word.endswith(("sses", "ches", "shes")) or (word.endswith("es") and word[-3] in "xz"):
            word = word[:-2]
        elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
    suffix = _SUFFIXES.get(word[-1])  # "ing", "ed", "ment" or "ness", told by the last letter
    if suffix and word.endswith(suffix):
        root = word[: -len(suffix)]
        if len(root) >= 3 and not _VOWELLESS.fullmatch(root):
            word = root[:-1] if len(root) > 3 and root[-1] == root[-2] not in "lsz" else root
    if len(word) > 3 and word[-1] in "ye":
        word = word[:-1] + ("i" if word[-1] == "y" else "")
    return word


def bm25_scores(query: str, documents: Sequence[Iterable[str]], cache: TermCache) -> list[float]:
    """Scores each document (a round: the texts of its messages) against ``query``.

    Only the query's terms are looked up in each text's cached counts, so a warm call costs a
    few dictionary look-ups per message, whatever the messages' length.

    Args:
        query: The latest user message's text.
        documents: Per document, the texts it is made of.
        cache: Where term counts are remembered between calls.

    Returns:
        One BM25 score per document; 0.0 for all when the query has no terms.
    """
    key = (query, tuple(map(tuple, documents)))
    remembered: list[float] | None = cache.scores.get(key)
    if remembered is not None:
        return list(remembered)
    scores = _scores(query, key[1], cache)
    weight = text_bytes([query, *(text for texts in key[1] for text in texts)])
    cache.scores.put(key, scores, weight)
    return list(scores)


def _scores(query: str, documents: Sequence[Sequence[str]], cache: TermCache) -> list[float]:
    query_terms = tuple(cache.counts(query))
    frequencies: list[list[int]] = []
    lengths: list[int] = []
    for texts in documents:
        found = [0] * len(query_terms)
        length = 0
        for text in texts:
            bag, terms_in_text = cache.entry(text)
            length += terms_in_text
            for k, term in enumerate(query_terms):
                found[k] += bag.get(term, 0)
        frequencies.append(found)
        lengths.append(length)
    if not query_terms or not frequencies:
        return [0.0] * len(frequencies)
    average = (sum(lengths) / len(lengths)) or 1.0
    idf = []
    for k in range(len(query_terms)):
        n = sum(1 for found in frequencies if found[k])
        idf.append(math.log(1 + (len(frequencies) - n + 0.5) / (n + 0.5)) if n else 0.0)
    scores = []
    for found, length in zip(frequencies, lengths, strict=True):
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / average)
        scores.append(
            sum(
                (
                    w * tf * (BM25_K1 + 1) / (tf + norm)
                    for w, tf in zip(idf, found, strict=True)
                    if tf
                ),
                0.0,
            )
        )
    return scores


class Occurrences(NamedTuple):
    """Where each term occurs in a conversation's first ``length`` messages.

    Attributes:
        postings: Per term, the positions of the messages holding it, ascending (shared and
            extended in place by later calls, also while this view is read: read through
            :meth:`positions`).
        length: How many messages this view covers.
        bags: Per message, its term counts (shared, extended in place like ``postings``).
        totals: The number of terms before each message, and after the last (likewise).
        peaks: Per term held more than once by a message, the most times a message holds it
            (of the messages indexed, perhaps more than ``length``: a bound; shared likewise).
    """

    postings: dict[str, list[int]]
    length: int
    bags: list[Counter[str]]
    totals: list[int]
    peaks: dict[str, int]

    def positions(self, term: str) -> list[int]:
        """The positions of the messages (of the first ``length``) holding ``term``: a copy,
        since a trim of a longer prefix of the conversation may extend the list meanwhile (in
        another thread)."""
        postings, held = self.held(term)
        return list(islice(postings, held))

    def held(self, term: str) -> tuple[Sequence[int], int]:
        """The positions of the messages holding ``term`` and how many of the first are of the
        first ``length`` messages: read only those (the list is not copied, and only ever grows
        at its end, so they stay as they are)."""
        found = self.postings.get(term)
        return (found, bisect.bisect_left(found, self.length)) if found else ((), 0)


@dataclass(slots=True)
class _Indexed:
    texts: list[str]
    postings: dict[str, list[int]]
    bags: list[Counter[str]]
    totals: list[int]
    text_bytes: int  # of ``texts``
    peaks: dict[str, int]  # only grow: a bound also for the texts before an edit


class TermIndex:
    """An inverted index of each conversation's messages, extended by the new messages only.

    A growing conversation's next call holds the same texts and a few new ones: only those are
    read. Remembers a few conversations (told apart by a key the caller gives, e.g. its first
    messages' ids); a call whose texts differ from those remembered (an edit, another
    conversation under the same key) re-reads from the first difference. Safe to share between
    threads.

    Args:
        cache: Term counts of texts.
        conversations: How many conversations are remembered.
    """

    def __init__(self, cache: TermCache, conversations: int = CONVERSATIONS_ACROSS_TURNS) -> None:
        self._cache = cache
        self._indexed = LRUCache(conversations, _INDEX_BYTES)
        self._lock = threading.Lock()

    def of(self, key: Hashable, texts: list[str]) -> Occurrences:
        """Returns where the terms of ``texts`` occur."""
        with self._lock:
            indexed: _Indexed | None = self._indexed.get(key)
            if indexed is None:
                indexed = _Indexed([], {}, [], [0], 0, {})
            seen = indexed.texts
            same = len(seen) <= len(texts) and texts[: len(seen)] == seen
            if not same:
                shared = next(compress(count(), map(operator.ne, texts, seen)), None)
                shared = min(len(texts), len(seen)) if shared is None else shared
                # A new dict: views handed out before hold the old one.
                postings = {
                    term: kept
                    for term, at in indexed.postings.items()
                    if (kept := at[: bisect.bisect_left(at, shared)])
                }
                indexed = _Indexed(
                    seen[:shared],
                    postings,
                    indexed.bags[:shared],
                    indexed.totals[: shared + 1],
                    text_bytes(seen[:shared]),
                    indexed.peaks,
                )
            postings, bags, totals, peaks = (
                indexed.postings,
                indexed.bags,
                indexed.totals,
                indexed.peaks,
            )
            new = texts[len(indexed.texts) :]
            find = postings.get
            for position, text in enumerate(new, len(indexed.texts)):
                bag, length = self._cache.entry(text)
                for term in bag:
                    at = find(term)
                    if at is None:
                        postings[term] = [position]
                    else:
                        at.append(position)
                if length > len(bag):  # a term held more than once
                    for term, held in bag.items():
                        if held > peaks.get(term, 1):
                            peaks[term] = held
                bags.append(bag)
                totals.append(totals[-1] + length)
            indexed.texts.extend(new)  # ours: ``texts`` is the caller's
            indexed.text_bytes += text_bytes(new)
            # About as many positions as terms in the texts: weighed like the texts twice.
            self._indexed.put(key, indexed, 2 * indexed.text_bytes)
            return Occurrences(postings, len(texts), bags, totals, peaks)
