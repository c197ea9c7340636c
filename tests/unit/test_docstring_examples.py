"""Every ``>>>`` example in the core packages' docstrings runs and gives what it shows.

Examples are documentation a reader trusts; one that no test runs drifts from the code (four had,
found in issue 38's seventh session). Modules are found by their text, so a new example is run
without anyone listing it here. An example that cannot run (it needs Ray, a model, a loop) says
``# doctest: +SKIP`` or is written as a plain ``::`` block."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

from tests.support.import_graph import CORE_PACKAGES, find_modules

ROOT = Path(__file__).resolve().parents[2]
WITH_EXAMPLES = sorted(name for name, path in find_modules(ROOT, CORE_PACKAGES).items()
                       if ">>>" in path.read_text(encoding="utf-8"))


def test_the_core_packages_have_examples_to_run():
    # the search itself can fail: if it found nothing, every test below would vanish unseen
    assert "policies.edge" in WITH_EXAMPLES and len(WITH_EXAMPLES) >= 10, WITH_EXAMPLES


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_a_wrong_example_fails():
    # the check can fail: an example whose shown output is wrong is reported
    def shows_the_wrong_sum() -> None:
        """>>> 1 + 1
        3
        """

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(verbose=False)
    for test in finder.find(shows_the_wrong_sum, "shows_the_wrong_sum", globs={}):
        runner.run(test, out=lambda _text: None)
    assert runner.summarize(verbose=False).failed == 1
