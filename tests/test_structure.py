"""The package's layout rules, checked on its source: imports point one way (no cycle), and no
module reaches for another module's underscore names."""

from __future__ import annotations

import ast
from pathlib import Path

import timewheel

ROOT = Path(timewheel.__file__).parent


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"))
    return out


MODULES = _modules()


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every ``timewheel`` import, at any depth (lazy imports count)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("timewheel"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("timewheel"):
                    found.append((alias.name, []))
    return found


def _target(module: str, name: str) -> str:
    """``from timewheel import testing`` imports a module: name the module."""
    sub = f"{module}.{name}"
    return sub if sub in MODULES else module


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, tree in MODULES.items():
        for imported, names in _imports(tree):
            targets = {_target(imported, n) for n in names} or {imported}
            graph[module] |= {t for t in targets if t in MODULES and t != module}
    seen: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if seen.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in seen:
                visit(dep)
        path.pop()
        seen[node] = 2

    for module in sorted(graph):
        if module not in seen:
            visit(module)


def test_no_module_imports_another_modules_private_names() -> None:
    offenders = []
    for module, tree in MODULES.items():
        for imported, names in _imports(tree):
            for name in names:
                private = name.startswith("_") and not name.endswith("__")
                if private and _target(imported, name) == imported:
                    offenders.append(f"{module} imports {name} from {imported}")
        aliases = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("timewheel")
            for alias in node.names
            if _target(node.module or "", alias.name) != node.module
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                offenders.append(f"{module} uses {node.value.id}.{node.attr}")
    assert offenders == []


def test_no_module_probes_for_private_attributes() -> None:
    offenders = []
    for module, tree in MODULES.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and node.args[1].value.startswith("_")
                and not node.args[1].value.startswith("__")
            ):
                offenders.append(f"{module}: {node.func.id}(..., {node.args[1].value!r})")
    assert offenders == []
