"""Cheap lexical checks a semantic match must also pass.

Mean-pooled sentence embeddings place "transfer 100 dollars" next to "transfer 500 dollars",
"is it open" next to "is it not open" and "dollars to euros" next to "euros to dollars" (word order
barely moves the vector). A cached answer is only reused when both texts mention the same numbers
in the same order, agree on negation (including morphological negation: enable/disable), and
their shared content words appear in the same order. Known gap: lexical antonyms (open/closed)
are left to the similarity threshold.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*|[a-z]+(?:'[a-z]+)?")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
    "half": "0.5",
    "dozen": "12",
}
_NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "none",
        "nothing",
        "nobody",
        "nowhere",
        "neither",
        "nor",
        "without",
        "cannot",
        "cant",
        "dont",
        "doesnt",
        "didnt",
        "isnt",
        "arent",
        "wasnt",
        "werent",
        "wont",
        "wouldnt",
        "shouldnt",
        "couldnt",
        "hasnt",
        "havent",
        "hadnt",
    ]
)
_NEGATING_PREFIXES = ("un", "dis", "non", "in", "im", "il", "ir")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "for",
        "from",
        "in",
        "on",
        "at",
        "by",
        "with",
        "about",
        "into",
        "onto",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "doing",
        "have",
        "has",
        "had",
        "having",
        "i",
        "me",
        "my",
        "mine",
        "you",
        "your",
        "yours",
        "we",
        "our",
        "us",
        "he",
        "she",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "what",
        "whats",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "please",
        "tell",
        "show",
        "give",
        "let",
        "just",
        "some",
        "any",
        "so",
        "too",
        "very",
        "also",
        "really",
        "kindly",
    ]
)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


def _stem(word: str) -> str:
    word = word.split("'")[0]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _features(tokens: list[str]) -> tuple[tuple[str, ...], bool, list[str]]:
    numbers: list[str] = []
    content: list[str] = []
    negated = False
    for tok in tokens:
        if tok[0].isdigit():
            numbers.append(tok.replace(",", ""))
        elif tok in _NUMBER_WORDS:
            numbers.append(_NUMBER_WORDS[tok])
        elif tok.endswith("n't") or tok.replace("'", "") in _NEGATIONS:
            negated = not negated
        elif tok.split("'")[0] not in _STOPWORDS:
            content.append(_stem(tok))
    return tuple(numbers), negated, content


def _morphological_negation(a: set[str], b: set[str]) -> bool:
    only_a, only_b = a - b, b - a
    for x, other in ((only_a, only_b), (only_b, only_a)):
        for word in x:
            if any(p + word in other for p in _NEGATING_PREFIXES):
                return True
    return False


def _same_order(a: list[str], b: list[str]) -> bool:
    shared = set(a) & set(b)
    seq_a = list(dict.fromkeys(t for t in a if t in shared))
    seq_b = list(dict.fromkeys(t for t in b if t in shared))
    return seq_a == seq_b


def compatible(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` carry the same numbers, negation and content-word order."""
    nums_a, neg_a, content_a = _features(_tokens(a))
    nums_b, neg_b, content_b = _features(_tokens(b))
    if nums_a != nums_b or neg_a != neg_b:
        return False
    if _morphological_negation(set(content_a), set(content_b)):
        return False
    return _same_order(content_a, content_b)
