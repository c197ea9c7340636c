"""The project's import graph, read with ``ast``: no cycles (imports inside functions and under
``TYPE_CHECKING`` count), the layering of DESIGN.md, and no unexplained imports inside functions
in the core packages. A checker test on a small synthetic package shows each check can fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import (
    CORE_PACKAGES,
    LAZY_MARK,
    Import,
    collect_imports,
    find_cycles,
    find_modules,
    graph_of,
    layer_violations,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "router", "pool", "policies", "fallbacks", "alerting", "deploy",
            "benchmarks")
CORE = frozenset(CORE_PACKAGES)

# Package -> the packages it must not import (DESIGN.md, "Layout and ownership"): ``common`` is
# the bottom layer; ``policies`` decides over snapshots and needs nothing above it; ``pool`` and
# ``fallbacks`` are siblings (what both need is in ``common``); ``alerting`` takes nothing from
# the serving path; nothing in the app imports ``deploy`` or ``benchmarks``.
_ALL = frozenset(PACKAGES)
FORBIDDEN: dict[str, frozenset[str]] = {
    "common": _ALL - {"common"},
    "policies": _ALL - {"common", "policies"},
    "fallbacks": frozenset({"router", "pool", "alerting", "deploy", "benchmarks"}),
    "pool": frozenset({"router", "fallbacks", "alerting", "deploy", "benchmarks"}),
    "alerting": _ALL - {"common", "alerting"},
    "router": frozenset({"deploy", "benchmarks"}),
    "deploy": frozenset({"benchmarks"}),
}


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return collect_imports(find_modules(ROOT, PACKAGES))


def test_there_is_no_import_cycle(imports):
    cycles = find_cycles(graph_of(imports))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_packages_keep_their_layers(imports):
    bad = layer_violations(imports, FORBIDDEN)
    assert not bad, "imports across the layers (DESIGN.md):\n" + "\n".join(bad)


def test_an_import_inside_a_core_function_says_why(imports):
    # Only an optional dependency, or a heavy one on a cold path, is imported inside a function,
    # with ``# lazy: <reason>`` on its line or just above it.
    bare = sorted({f"{i.path.relative_to(ROOT)}:{i.line}: {i.imported}" for i in imports
                   if i.in_function and i.reason is None and i.source.split(".")[0] in CORE})
    assert not bare, (f"imports inside functions without a '{LAZY_MARK} <reason>' comment:\n"
                      + "\n".join(bare))


def test_the_whole_project_was_read(imports):
    # A checker that found no modules would pass every test above.
    sources = {i.source.split(".")[0] for i in imports}
    assert sources == set(PACKAGES)
    assert len({i.source for i in imports}) > 200


# -- the checker itself, on a synthetic package --------------------------------------------------

def _package(root: Path, files: dict[str, str]) -> list[Import]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return collect_imports(find_modules(root, sorted({r.split("/")[0] for r in files})))


def test_the_checker_finds_cycles_through_functions_and_type_checking(tmp_path):
    imports = _package(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "from low import b\n",
        "low/b.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from low.c import C\n"),
        "low/c.py": "def f():\n    from . import a\n",
        "low/d.py": "from .e import x\n",
        "low/e.py": "import low.d\nx = 1\n",
        "low/f.py": "import json\nfrom low import a\n",  # leads into a cycle, is on none
    })
    assert find_cycles(graph_of(imports)) == [
        ["low.a", "low.b", "low.c", "low.a"],
        ["low.d", "low.e", "low.d"],
    ]


def test_the_checker_reports_layer_violations_and_bare_function_imports(tmp_path):
    imports = _package(tmp_path, {
        "base/__init__.py": "",
        "base/x.py": (
            "def f():\n"
            "    import top.y\n"
            "    import json  # lazy: the reason\n"
            "    # lazy: both below, heavy\n"
            "    import csv\n"
            "    import zlib\n"
            "\n"
            "    import top\n"),
        "top/__init__.py": "",
        "top/y.py": "from base import x\n",
    })
    assert layer_violations(imports, {"base": frozenset({"top"})}) == [
        f"{tmp_path / 'base/x.py'}:2: base.x -> top.y",
        f"{tmp_path / 'base/x.py'}:8: base.x -> top"]
    reasons = {i.imported: i.reason for i in imports if i.in_function}
    assert reasons == {"top.y": None, "json": "the reason", "csv": "both below, heavy",
                       "zlib": "both below, heavy", "top": None}
    assert [i.in_function for i in imports if i.source == "top.y"] == [False]
