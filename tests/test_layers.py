"""The package's imports point one way: down the layer table below, and never in a loop.

Every import counts: module level, inside functions, and under ``TYPE_CHECKING``. A package's modules may import
each other (``apps.captions`` may use ``apps.base``), but no two modules may import each other, directly or through
others. Packages on the same floor are strangers: neither imports the other.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rtc_agent"

# Top floor first. A name is a top-level module or package of ``rtc_agent``; "" is the package's own __init__.
FLOORS: list[set[str]] = [
    {"__main__"},
    {"cli"},
    {"app"},  # the composition root: mounts every layer's routes
    {"bench"},
    {"realtime"},  # the OpenAI Realtime API, an adapter over the server's sessions
    {"server"},  # HTTP: routes, sessions, signaling, pages
    {"apps"},  # per-session policies (the call app's rooms included)
    {"rtc", "engines"},  # WebRTC glue; model backends
    {"worker", "protocol", "auth"},  # scheduling; the event protocol; who may do what
    {"state"},  # the state store: tokens, links, counters, room leases, transcripts (memory, SQLite, Redis)
    {"config", "errors"},
    {"redact", "words", "metrics", "tasks", ""},
]
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports (resolved to the longest known module)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                wanted = [target] + [f"{target}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target.startswith("rtc_agent") and target != name:
                    graph[name].add(target)
    for name in paths:
        graph.setdefault(name, set())
    return graph


def _floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(FLOORS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its package {top!r} is on no floor of the layer table in {__file__}")


def test_every_import_points_down_the_layer_table() -> None:
    wrong = []
    for module, targets in sorted(_imports().items()):
        for target in sorted(targets):
            here, there = _floor(module), _floor(target)
            same_package = module.split(".")[:2] == target.split(".")[:2]
            if not same_package and there <= here:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports that run up or sideways:\n" + "\n".join(wrong)


def test_no_modules_import_each_other() -> None:
    graph = _imports()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "modules that import each other:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_is_over_the_line_limit() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
