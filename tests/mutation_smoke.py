"""Mutation smoke check: apply named mutations to a copy of the tree and show the tests kill each.

Run by hand, from the repository root (docs/TESTING.md)::

    python tests/mutation_smoke.py                 # every mutation, each against its tests
    python tests/mutation_smoke.py --list          # the mutations and what they change
    python tests/mutation_smoke.py host-priority   # some of them
    python tests/mutation_smoke.py --tests tests/unit   # every mutation against all of tests/unit

Each mutation replaces one exact snippet of production code (the script fails, rather than
passing vacuously, if the snippet is no longer there). The tree is copied to a temporary folder
first (tracked and untracked, non-ignored files), so the checkout is never changed; pytest runs
in the copy, which comes first on ``sys.path``. The unmutated copy runs first: a mutation counts
as killed only if the same tests pass without it and fail (tests failed, exit status 1) with it.
Exits 0 when every mutation is killed, 1 when one survives, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    why: str
    tests: tuple[str, ...]


CONTRACT = "tests/unit/http/test_request_contract.py"
ERRORS = ("tests/unit/http/test_error_types.py", "tests/unit/http/test_v2_errors.py")

MUTATIONS = [
    Mutation(
        "pipeline-priority", "router/pipeline.py",
        "work = PoolWork(model, version, valid, req.priority,",
        "work = PoolWork(model, version, valid, type(req.priority).INTERACTIVE,",
        "the pipeline builds the pool's work at INTERACTIVE whatever the request said",
        (CONTRACT,)),
    Mutation(
        "host-priority", "pool/host.py",
        "tensors, priority=work.priority, deadline=deadline)",
        "tensors, priority=type(work.priority).INTERACTIVE, deadline=deadline)",
        "the pool's host hands every request to the worker at INTERACTIVE",
        (CONTRACT,)),
    Mutation(
        "error-types-collapsed", "fallbacks/errors.py",
        'body: dict = {"error": self.message, "type": type(self).__name__}',
        'body: dict = {"error": self.message, "type": "TimeshareError"}',
        "every typed error reports one type",
        ERRORS),
    Mutation(
        "status-types-swapped", "router/http.py",
        "_STATUS_TYPES = {404: ModelNotFound, 405: InvalidRequest,",
        "_STATUS_TYPES = {404: InvalidRequest, 405: ModelNotFound,",
        "the framework's 404 and 405 bodies swap their types",
        ERRORS),
    Mutation(
        "edge-decision-flipped", "policies/edge.py",
        "    if unloaded_s <= deadline_s < unloaded_s + delay:",
        "    if not (unloaded_s <= deadline_s < unloaded_s + delay):",
        "the edge sheds what would meet its deadline and admits what would miss it",
        ("tests/unit/core/test_edge_policy.py", "tests/unit/core/test_edge_middleware.py")),
    Mutation(
        "edge-fast-path-flipped", "policies/edge.py",
        "    return (worst <= config.max_queue_delay_s[label]",
        "    return (worst > config.max_queue_delay_s[label]",
        "the edge's at-once admission holds where the worst case is over the class's ceiling",
        ("tests/unit/core/test_edge_policy.py",)),
    Mutation(
        "admission-decision-flipped", "policies/admission.py",
        "    if snapshot.queue_delay_s.get(priority, 0.0) > budget_s:",
        "    if snapshot.queue_delay_s.get(priority, 0.0) <= budget_s:",
        "the pipeline's admission sheds what fits its budget and admits what does not",
        ("tests/unit/fallbacks/test_admission.py",)),
    Mutation(
        "admission-fast-path-flipped", "policies/admission.py",
        "and longest_delay_s <= delay_floor and longest_delay_s <= budget_s)",
        "and longest_delay_s <= delay_floor and longest_delay_s > budget_s)",
        "the pipeline's at-once admission holds where the queue delay is over the budget",
        ("tests/unit/fallbacks/test_admission.py",)),
    Mutation(
        "scheduler-classes-ignored", "policies/scheduling.py",
        "return (self.effective_class(req, now), deadline, req.arrival, req.id)",
        "return (Priority.INTERACTIVE, deadline, req.arrival, req.id)",
        "the worker's scheduler ranks every request as one class (earliest deadline only)",
        ("tests/unit/pool/test_scheduling_policy.py",)),
]


def copy_tree(dst: Path) -> None:
    """Tracked and untracked, non-ignored files of the checkout, into ``dst``."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                         check=True, capture_output=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int, float]:
    start = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                         *tests], cwd=tree, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    return rc, time.monotonic() - start


def apply(tree: Path, m: Mutation) -> None:
    f = tree / m.path
    text = f.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"{m.name}: the snippet to mutate is not in {m.path} exactly once "
                         f"({text.count(m.old)} times); update this script")
    f.write_text(text.replace(m.old, m.new))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--tests", nargs="+", help="test paths to run for every mutation "
                    "(default: each mutation's own)")
    args = ap.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:28} {m.path}: {m.why}")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        print(f"unknown mutation(s) {unknown}; valid: {sorted(by_name)}", file=sys.stderr)
        return 2
    chosen = [by_name[n] for n in args.names] or MUTATIONS
    survived = []
    with tempfile.TemporaryDirectory(prefix="mutation-smoke-") as tmp:
        base = Path(tmp) / "base"
        copy_tree(base)
        for m in chosen:  # fail early on a stale snippet, before any test runs
            if (base / m.path).read_text().count(m.old) != 1:
                apply(base, m)  # raises SystemExit naming the stale snippet
        suites = {tuple(args.tests) if args.tests else m.tests for m in chosen}
        for tests in sorted(suites):
            rc, took = run_tests(base, tests)
            print(f"{'baseline':28} {'pass' if rc == 0 else 'FAIL'} (exit {rc}, {took:.0f} s) "
                  f"{' '.join(tests)}", flush=True)
            if rc != 0:
                print("the unmutated tree fails these tests: nothing to learn", file=sys.stderr)
                return 2
        for m in chosen:
            tree = Path(tmp) / m.name
            shutil.copytree(base, tree)
            apply(tree, m)
            tests = tuple(args.tests) if args.tests else m.tests
            rc, took = run_tests(tree, tests)
            killed = rc == 1
            if not killed:
                survived.append(m.name)
            print(f"{m.name:28} {'killed' if killed else 'SURVIVED'} (exit {rc}, {took:.0f} s) "
                  f"{m.path}: {m.why}", flush=True)
            shutil.rmtree(tree)
    print(f"{len(chosen) - len(survived)} of {len(chosen)} mutations killed"
          + (f"; survived: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
