"""Synthetic but realistic outcome log for a text route (``deploy/data/text_outcomes.jsonl``).

Route ``assistant-text`` fronts a small and a large language model. Two kinds of traffic, as a
help-desk assistant sees them: account and product questions (the small model answers ~90 %
acceptably, the large one ~95 %) and multi-step requests: code, maths word problems,
explanations with trade-offs (small ~35 %, large ~88 %). Correctness is drawn per line from those
rates (seed 0), so the file has the noise a real graded log has: the router can only learn the
topic, never each line's outcome. Regenerate with ``python -m deploy.demo_text_outcomes``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from router.text_routing import text_outcome_line

ROUTE = "assistant-text"
OUT = Path(__file__).parent / "data" / "text_outcomes.jsonl"

_SIMPLE = [
    ("How do I {verb} my {thing}?", {"verb": ["reset", "change", "update", "recover"],
                                     "thing": ["password", "email address", "phone number",
                                               "payment method", "username", "billing address"]}),
    ("Where can I find my {doc}?", {"doc": ["invoice", "receipt", "order history",
                                            "tax form", "warranty", "delivery note"]}),
    ("What are your {info}?", {"info": ["opening hours", "shipping fees", "return rules",
                                        "contact details", "holiday hours", "store locations"]}),
    ("Can I {act} my {plan}?", {"act": ["cancel", "pause", "upgrade", "downgrade", "renew"],
                                "plan": ["subscription", "plan", "order", "membership"]}),
    ("Is my {what} {state}?", {"what": ["order", "refund", "payment", "parcel", "return"],
                              "state": ["on its way", "confirmed", "processed", "delayed"]}),
    ("Do you {svc} to {place}?", {"svc": ["ship", "deliver", "send parcels"],
                                  "place": ["Canada", "Germany", "Japan", "Brazil", "Spain"]}),
]
_HARD = [
    ("Write a Python function that {task}.", {"task": [
        "merges two sorted lists in linear time", "parses a CSV file and sums one column",
        "finds the longest palindromic substring", "detects a cycle in a linked list",
        "implements an LRU cache with O(1) operations", "validates a sudoku board"]}),
    ("A train leaves at {h} o'clock at {v} km/h and another follows an hour later at {w} km/h; "
     "when does the second catch up?", {"h": ["6", "7", "8", "9"], "v": ["60", "80", "90"],
                                         "w": ["100", "120", "140"]}),
    ("Explain the difference between {a} with an example and the trade-offs.", {"a": [
        "processes and threads", "TCP and UDP", "optimistic and pessimistic locking",
        "eventual and strong consistency", "SQL joins and subqueries", "B-trees and LSM trees"]}),
    ("Prove that {claim}.", {"claim": [
        "the square root of 2 is irrational", "there are infinitely many primes",
        "the sum of the first n odd numbers is n squared",
        "every tree with n nodes has n-1 edges"]}),
    ("Why does this SQL query {bug}, and how do I fix it?", {"bug": [
        "return duplicate rows after a join", "time out on a large table",
        "ignore rows with NULL values", "deadlock under concurrent updates"]}),
    ("Plan a {n}-day budget for a trip to {city} for {p} people with {b} dollars.", {
        "n": ["3", "5", "7"], "city": ["Lisbon", "Tokyo", "Mexico City", "Rome"],
        "p": ["two", "four"], "b": ["1500", "3000", "5000"]}),
]
RATES = {"simple": (0.90, 0.95), "hard": (0.35, 0.88)}  # (cheap ok, expensive ok)


def _fill(rng: random.Random, template: str, slots: dict[str, list[str]]) -> str:
    return template.format(**{k: rng.choice(v) for k, v in slots.items()})


def generate(n: int = 1200, *, seed: int = 0) -> list[str]:
    """``n`` outcome lines (about 60 % simple traffic), plus a few of another route."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        kind = "simple" if rng.random() < 0.6 else "hard"
        template, slots = rng.choice(_SIMPLE if kind == "simple" else _HARD)
        text = _fill(rng, template, slots)
        if rng.random() < 0.3:
            text = rng.choice(["Hi, ", "Hello! ", "Quick question: ", "Please help: "]) + text
        p_cheap, p_exp = RATES[kind]
        lines.append(text_outcome_line(ROUTE, text, rng.random() < p_cheap,
                                       rng.random() < p_exp))
    for i in range(20):  # another route in the same log: readers filter by route
        lines.append(text_outcome_line("other-route", f"unrelated request {i}", i % 2 == 0, True))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deploy.demo_text_outcomes")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--rows", type=int, default=1200)
    args = ap.parse_args(argv)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(generate(args.rows)) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
