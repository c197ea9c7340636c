"""The project's module import graph, read with ``ast`` (nothing is imported).

Every import of a project module counts: at module level, inside functions and under
``if TYPE_CHECKING:``. ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else
to ``a.b`` (the usual convention of import checkers: the parent packages that Python runs first
are not edges of their own). Used by ``tests/unit/test_import_graph.py``.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# A function-level import in a core package must say why on its own line, e.g.
# ``import torch  # lazy: optional dependency``.
LAZY_MARK = "# lazy:"
# The app's own packages, below deploy/ and benchmarks/ (DESIGN.md, "Layout and ownership").
CORE_PACKAGES = ("common", "router", "pool", "policies", "fallbacks", "alerting")


@dataclass(frozen=True, slots=True)
class Import:
    """One imported name's module, where it is and whether it runs inside a function.

    ``target`` is the project module it resolves to, or None for a module from outside the
    project (kept: a function-level import of ``torch`` needs a reason as much as one of ours).
    """

    source: str
    imported: str
    target: str | None
    path: Path
    line: int
    in_function: bool
    reason: str | None


def module_name(root: Path, path: Path) -> str:
    """``root/a/b/c.py`` -> ``a.b.c``; ``root/a/b/__init__.py`` -> ``a.b``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(root, path)] = path
    return modules


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a project module, if any."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _base_of_relative(source: str, is_package: bool, level: int, module: str | None) -> str:
    package = source.split(".") if is_package else source.split(".")[:-1]
    if level > 1:
        package = package[: len(package) - (level - 1)]
    return ".".join([*package, *([module] if module else [])])


class _Collector(ast.NodeVisitor):
    def __init__(self, source: str, path: Path, modules: Mapping[str, Path], lines: list[str]):
        self.source = source
        self.path = path
        self.modules = modules
        self.lines = lines
        self.is_package = path.name == "__init__.py"
        self.depth = 0
        self.found: list[Import] = []
        self._last: tuple[int, str | None] | None = None  # (end line, reason) of the last import

    def _reason(self, node: ast.stmt) -> str | None:
        """The ``# lazy:`` reason of an import statement: on one of its own lines, in the comment
        lines just above it, or the reason of the import statement on the line just above (one
        comment may cover a group of imports)."""
        end = node.end_lineno or node.lineno
        for text in self.lines[node.lineno - 1 : end]:
            if LAZY_MARK in text:
                return text.split(LAZY_MARK, 1)[1].strip() or None
        above = node.lineno - 2  # index of the line above
        while above >= 0 and self.lines[above].strip().startswith("#"):
            if LAZY_MARK in self.lines[above]:
                return self.lines[above].split(LAZY_MARK, 1)[1].strip() or None
            above -= 1
        if self._last is not None and self._last[0] == node.lineno - 1:
            return self._last[1]
        return None

    def _add(self, node: ast.stmt, name: str) -> None:
        target = _resolve(name, self.modules)
        if target == self.source:
            return
        reason = self._reason(node) if self.depth > 0 else None
        self._last = (node.end_lineno or node.lineno, reason)
        self.found.append(
            Import(
                self.source,
                name,
                target,
                self.path,
                node.lineno,
                self.depth > 0,
                reason,
            )
        )

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = _base_of_relative(self.source, self.is_package, node.level, node.module)
        else:
            base = node.module or ""
        for alias in node.names:
            if alias.name != "*" and f"{base}.{alias.name}" in self.modules:
                self._add(node, f"{base}.{alias.name}")
            else:
                self._add(node, base)


def collect_imports(modules: Mapping[str, Path]) -> list[Import]:
    """Every import made by one of ``modules`` (of project modules and others)."""
    found: list[Import] = []
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        collector = _Collector(name, path, modules, text.splitlines())
        collector.visit(ast.parse(text, filename=str(path)))
        found.extend(collector.found)
    return found


def graph_of(imports: Iterable[Import]) -> dict[str, set[str]]:
    """Project module -> the project modules it imports."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set())
        if imp.target is not None:
            graph[imp.source].add(imp.target)
            graph.setdefault(imp.target, set())
    return graph


def _strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has a few hundred nodes, but no recursion limit
    worries either way)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _shortest_cycle(graph: Mapping[str, set[str]], start: str, within: set[str]) -> list[str]:
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & within):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no cycle")  # unreachable for a member of an SCC


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One shortest cycle, as a path ``[a, b, ..., a]``, through each member of every strongly
    connected component with more than one module: so a component made of two separate loops
    shows both."""
    cycles: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for component in _strongly_connected(graph):
        if len(component) < 2:
            continue
        members = set(component)
        for node in component:
            cycle = _shortest_cycle(graph, node, members)
            # The same loop found from another of its members is rotated: keep one copy.
            loop = cycle[:-1]
            turn = loop.index(min(loop))
            key = tuple(loop[turn:] + loop[:turn])
            if key not in seen:
                seen.add(key)
                cycles.append([*key, key[0]])
    return cycles


def layer_violations(
    imports: Iterable[Import], forbidden: Mapping[str, frozenset[str]]
) -> list[str]:
    """Imports from a top-level package into one it must not import (``forbidden``: package ->
    packages it may not import), as ``path:line: source -> target``."""
    found = []
    for imp in imports:
        banned = forbidden.get(imp.source.split(".")[0], frozenset())
        if imp.target is not None and imp.target.split(".")[0] in banned:
            found.append(f"{imp.path}:{imp.line}: {imp.source} -> {imp.target}")
    return found
