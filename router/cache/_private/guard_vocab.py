"""Word lists of the lexical guard (``text_guard``): data only, no logic.

Each list is a space-separated string so the vocabulary reads as prose and diffs stay small.
"""

from __future__ import annotations


def _words(s: str) -> frozenset[str]:
    return frozenset(s.split())


def _classes(spec: dict[str, str]) -> dict[str, str]:
    """``{"lt": "under below"}`` -> ``{"under": "lt", "below": "lt"}``."""
    return {w: cls for cls, words in spec.items() for w in words.split()}


NUMBER_WORDS: dict[str, str] = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000",
     "million": "1000000", "billion": "1000000000", "half": "0.5", "dozen": "12",
     "all": "all", "both": "both"}

NEGATIONS = _words(
    "not no never none nothing nobody nowhere neither nor without cannot cant dont doesnt didnt "
    "isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent hadnt"
)
NEGATING_PREFIXES = ("un", "dis", "non", "in", "im", "il", "ir")

STOPWORDS = _words(
    "a an the and or but if of to for from in on at by with about into onto as is are was were "
    "be been being am do does did doing have has had having i me my mine you your yours we our "
    "us he she it its they them their this that these those there here what whats which who whom "
    "whose when where why how can could would should will shall may might must please tell show "
    "give let just some any so too very also really kindly"
)

# Comparators: a matched text must use the same classes (under = below = less than, ...).
COMPARATORS = _classes({
    "gt": "over above more greater higher larger bigger exceeding exceeds exceed beyond longer "
          "heavier taller older pricier costlier",
    "lt": "under below less fewer lower smaller shorter lighter beneath cheaper younger",
    "before": "before earlier prior sooner until till",
    "after": "after later since",
    "max": "max maximum most largest biggest highest greatest longest tallest oldest",
    "min": "min minimum least smallest lowest fewest shortest youngest cheapest",
})

# Time words: a matched text must name the same days, parts of day, months and relative times.
_WEEKDAYS = {"monday": "mon tues tue tuesday", "wednesday": "wed", "thursday": "thu thurs",
             "friday": "fri", "saturday": "sat", "sunday": "sun"}
TIME_WORDS: dict[str, str] = (
    {w: w for w in (
        "today tomorrow yesterday tonight weekend weekday morning afternoon evening night noon "
        "midnight midday dawn dusk january february march april june july august september "
        "october november december second minute hour day week fortnight month quarter year "
        "decade century spring summer autumn winter".split())}
    | {a: full for full, abbr in _WEEKDAYS.items() for a in abbr.split()}
    | {full: full for full in _WEEKDAYS}
    | {"monday": "monday", "jan": "january", "feb": "february", "mar": "march", "apr": "april",
       "jun": "june", "jul": "july", "aug": "august", "sep": "september", "sept": "september",
       "oct": "october", "nov": "november", "dec": "december", "noonday": "noon"}
)
TIME_MODIFIERS = _words("next last this previous coming past upcoming")
AFTER_NUMBER = _words("am pm")  # time markers only right after a number ("7 am")

# Opposite pairs: (group, polarity). Texts that both use a group must use the same polarity.
_OPPOSITES = [
    ("buy bought buying buys purchase purchased purchasing", "sell sold selling sells"),
    ("import imported importing imports", "export exported exporting exports"),
    ("upload uploaded uploading uploads", "download downloaded downloading downloads"),
    ("deposit deposited depositing deposits", "withdraw withdrew withdrawing withdrawal"),
    ("send sent sending sends", "receive received receiving receives"),
    ("add added adding adds", "remove removed removing removes delete deleted"),
    ("increase increased increasing increases", "decrease decreased decreasing decreases"),
    ("lend lent lending lends loan", "borrow borrowed borrowing borrows"),
    ("start started starting starts begin", "stop stopped stopping stops end"),
    ("rise rising rose rises risen up gain gains", "fall falling fell falls fallen down drop"),
    ("enable enabled enabling enables", "disable disabled disabling disables"),
    ("open opened opening opens", "close closed closing closes shut"),
    ("win won winning wins", "lose lost losing loses"),
    ("accept accepted accepting approve approved", "reject rejected decline declined deny"),
    ("include included including includes", "exclude excluded excluding excludes"),
    ("on", "off"),
    ("to into towards toward", "from"),
    ("with", "without"),
    ("best better", "worst worse"),
    ("hot warm warmer hotter", "cold cool colder cooler"),
    ("good", "bad"),
    ("push pushed pushing", "pull pulled pulling"),
    ("arrive arrived arrival arriving", "depart departed departure departing leave"),
    ("inbound incoming", "outbound outgoing"),
    ("credit credited", "debit debited"),
    ("plus", "minus"),
    ("first", "last final"),
]
POLARITY: dict[str, tuple[int, int]] = {
    w: (g, p) for g, pair in enumerate(_OPPOSITES) for p, words in enumerate(pair)
    for w in words.split()
}
