"""Cheap lexical checks a semantic match must also pass (pure; no I/O).

Mean-pooled sentence embeddings place "transfer 100 dollars" next to "transfer 500 dollars",
"laptops under $1000" next to "laptops over $1000", "alarm at 7 am" next to "7 pm", "buy" next to
"sell" and "dollars to euros" next to "euros to dollars" (word order barely moves the vector;
GPTCache issues #694 and #388 report the same). A cached answer is only reused when both texts:

- mention the same numbers in the same order (digits and number words);
- agree on negation (not/never/n't, and morphological negation: enable/disable, legal/illegal);
- use the same comparator classes (under = below = less/fewer < over = above = more; before /
  after; min / max and superlatives);
- name the same times (today/tomorrow/yesterday/tonight, weekdays, months, parts of the day,
  am/pm after a number, next/last/this before a time word, time units);
- do not use opposite words of one pair (buy/sell, from/to, send/receive, on/off, ...);
- name the same proper nouns (capitalised words inside a sentence, acronyms);
- keep their shared content words in the same order (swapped entities, reversed directions).

``incompatibility(a, b)`` names the first failed check (for counters and tests); ``compatible``
is its boolean. Known gap: a lower-case entity substituted for another ("weather in paris" /
"weather in rome") is left to the similarity threshold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from router.cache._private.guard_vocab import (
    AFTER_NUMBER,
    COMPARATORS,
    NEGATING_PREFIXES,
    NEGATIONS,
    NUMBER_WORDS,
    POLARITY,
    STOPWORDS,
    TIME_MODIFIERS,
    TIME_WORDS,
)

__all__ = ["TextFeatures", "compatible", "features", "incompatibility"]

_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*|[a-z]+(?:'[a-z]+)?")
_CASED = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|[.!?;:]")
_AMPM = re.compile(r"\b([ap])\.m\.?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TextFeatures:
    """What the guard compares of one text."""

    numbers: tuple[str, ...]
    negated: bool
    content: tuple[str, ...]  # stemmed content words, in order
    comparators: frozenset[str]
    times: frozenset[str]
    polarities: frozenset[tuple[int, int]]  # (opposite-pair group, side)
    proper: frozenset[str]  # lower-cased proper nouns and acronyms


def _stem(word: str) -> str:
    word = word.split("'")[0]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _proper_nouns(text: str) -> frozenset[str]:
    """Capitalised words not opening a sentence, and acronyms (TV, API) anywhere."""
    out: set[str] = set()
    sentence_start = True
    for tok in _CASED.findall(text):
        if tok in ".!?;:":
            sentence_start = True
            continue
        word = tok.split("'")[0]
        acronym = len(word) >= 2 and word.isupper()
        if (acronym or (word[0].isupper() and not sentence_start)) and word != "I":
            out.add(word.lower())
        sentence_start = False
    return frozenset(out)


def features(text: str) -> TextFeatures:
    """The guard's view of ``text``."""
    norm = _AMPM.sub(lambda m: m.group(1) + "m", text).replace("\u2019", "'")
    tokens = _TOKEN.findall(norm.lower())
    numbers: list[str] = []
    content: list[str] = []
    comps: set[str] = set()
    times: set[str] = set()
    pols: set[tuple[int, int]] = set()
    negated = False
    for i, tok in enumerate(tokens):
        bare = tok.replace("'", "")
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok[0].isdigit():
            numbers.append(tok.replace(",", ""))
            continue
        if tok in AFTER_NUMBER and i and tokens[i - 1][0].isdigit():
            times.add(tok)
            continue
        if tok in NUMBER_WORDS:
            numbers.append(NUMBER_WORDS[tok])
        elif tok.endswith("n't") or bare in NEGATIONS:
            negated = not negated
            continue
        if tok in COMPARATORS:
            comps.add(COMPARATORS[tok])
        if _stem(tok) in TIME_WORDS or tok in TIME_WORDS:
            times.add(TIME_WORDS.get(tok) or TIME_WORDS[_stem(tok)])
        if tok in TIME_MODIFIERS and (nxt in TIME_WORDS or _stem(nxt) in TIME_WORDS):
            times.add(tok)
        if tok in POLARITY:
            pols.add(POLARITY[tok])
        if tok.split("'")[0] not in STOPWORDS and tok not in NUMBER_WORDS:
            content.append(_stem(tok))
    return TextFeatures(tuple(numbers), negated, tuple(content), frozenset(comps),
                        frozenset(times), frozenset(pols), _proper_nouns(norm))


def _morphological_negation(a: set[str], b: set[str]) -> bool:
    only_a, only_b = a - b, b - a
    for x, other in ((only_a, only_b), (only_b, only_a)):
        for word in x:
            if any(p + word in other for p in NEGATING_PREFIXES):
                return True
    return False


def _same_order(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    shared = set(a) & set(b)
    seq_a = list(dict.fromkeys(t for t in a if t in shared))
    seq_b = list(dict.fromkeys(t for t in b if t in shared))
    return seq_a == seq_b


def _opposed(a: frozenset[tuple[int, int]], b: frozenset[tuple[int, int]]) -> bool:
    """Some opposite pair is used by both texts on disjoint sides ("to X" / "from X"; but
    "from dollars to euros" / "dollar to euro" share the "to" side and pass)."""
    groups = {g for g, _ in a} & {g for g, _ in b}
    return any(not {p for g2, p in a if g2 == g} & {p for g2, p in b if g2 == g}
               for g in groups)


def incompatibility(a: str, b: str) -> str | None:
    """The first check ``a`` and ``b`` fail (``numbers``, ``negation``, ``comparator``, ``time``,
    ``opposite``, ``entity``, ``order``), or None when a cached answer may be shared."""
    fa, fb = features(a), features(b)
    if fa.numbers != fb.numbers:
        return "numbers"
    if fa.negated != fb.negated or _morphological_negation(set(fa.content), set(fb.content)):
        return "negation"
    if fa.comparators != fb.comparators:
        return "comparator"
    if fa.times != fb.times:
        return "time"
    if _opposed(fa.polarities, fb.polarities):
        return "opposite"
    if fa.proper != fb.proper:
        return "entity"
    if not _same_order(fa.content, fb.content):
        return "order"
    return None


def compatible(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` pass every check of :func:`incompatibility`."""
    return incompatibility(a, b) is None
