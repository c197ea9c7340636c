"""Cheap lexical checks a semantic match must also pass.

Sentence embeddings place "transfer 100 dollars" next to "transfer 500 dollars" and "is it open"
next to "is it not open". A cached answer is only reused when both texts mention the same numbers
(in order) and agree on negation.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[a-z]+(?:'[a-z]+)?")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000",
     "million": "1000000", "billion": "1000000000", "half": "0.5", "dozen": "12"}
_NEGATIONS = frozenset(
    "not no never none nothing nobody nowhere neither nor without cannot cant dont doesnt didnt "
    "isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent hadnt".split()
)


def _features(text: str) -> tuple[tuple[str, ...], bool]:
    numbers: list[str] = []
    negated = False
    for tok in _TOKEN.findall(text.lower().replace("\u2019", "'")):
        if tok[0].isdigit():
            numbers.append(tok.replace(",", ""))
        elif tok in _NUMBER_WORDS:
            numbers.append(_NUMBER_WORDS[tok])
        elif tok.endswith("n't") or tok.replace("'", "") in _NEGATIONS:
            negated = not negated
    return tuple(numbers), negated


def compatible(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` carry the same numbers and the same negation polarity."""
    return _features(a) == _features(b)
