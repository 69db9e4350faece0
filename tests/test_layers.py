"""The architecture, checked from the source: imports point one way through the layers, no module
imports in a circle, package imports sit at module top, nothing below the engine imports torch at
import time, and modules and functions stay small. Reads the code with ``ast``; runs none of it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "pytest_attn"
#: Each layer may import from the layers listed before it (and from itself).
ORDER = ("core", "oracle", "backends", "capture", "engine", "fuzz", "verdicts", "plugin")
ALLOWED = {
    "core": {"core"},
    "oracle": {"core", "oracle"},
    "backends": {"core", "oracle", "backends"},
    "capture": {"core", "capture"},  # beside backends: it wraps the libraries' entry points to record calls
    "engine": {"core", "oracle", "backends", "engine"},
    "fuzz": {"core", "oracle", "backends", "engine", "fuzz"},
    "verdicts": {"core", "verdicts"},
    "plugin": set(ORDER),
}
#: Package imports inside functions, each with its reason. Hypothesis is imported like torch: only where a
#: fuzz test needs it (0.12 s at every pytest start otherwise); the fuzz layer imports it at module top.
LAZY_ALLOWED = {
    ("plugin/fuzz.py", "pytest_attn.fuzz"),
    ("plugin/fuzz.py", "pytest_attn.fuzz.profiles"),
    ("plugin/fuzz.py", "pytest_attn.fuzz.fuzzer"),
    ("plugin/handover.py", "pytest_attn.fuzz.fuzzer"),  # a worker's fuzz reach, read where one was handed over
}
#: Imported only inside the functions that use them: the plugin loads in every pytest session of its
#: environment (numpy alone was a third of its start-up cost).
HEAVY = ("torch", "flash_attn", "flash_attn_interface", "flashinfer", "triton", "hypothesis", "pynvml", "numpy")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "pytest_attn" and parts[1] in ORDER else None


def resolve(path: Path, node: ast.ImportFrom) -> list[str]:
    """Absolute module names an ``import from`` brings in (a name may be a submodule)."""
    if node.level == 0:
        base = node.module or ""
    else:
        package = dotted(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    names = [f"{base}.{alias.name}" for alias in node.names]
    return names if node.module is None else [base, *names]  # "from . import x" imports x, not the package


@functools.cache  # read once for the tests of this module: the code does not change while they run
def imports(path: Path) -> tuple[tuple[str, bool], ...]:
    """(module, at module top) for every import of ``path``, TYPE_CHECKING blocks excluded."""
    tree = ast.parse(path.read_text())
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                out.extend((name, top) for name in resolve(path, child))
            visit(child, inner)

    visit(tree, True)
    return tuple(out)


@functools.cache
def _known() -> frozenset[str]:
    return frozenset(dotted(p) for p in modules())


def package_imports(path: Path) -> list[tuple[str, bool]]:
    return [(name, top) for name, top in imports(path) if name in _known() and name != dotted(path)]


def test_every_module_lives_in_a_layer():
    loose = [dotted(p) for p in modules() if p.parent != PACKAGE and layer(dotted(p)) is None]
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert not loose and top_level == ["__init__.py"], (loose, top_level)


def test_imports_point_one_way():
    wrong = []
    for path in modules():
        mine = layer(dotted(path))
        for name, _ in package_imports(path):
            theirs = layer(name)
            if mine and theirs and theirs not in ALLOWED[mine]:
                wrong.append(f"{dotted(path)} ({mine}) imports {name} ({theirs})")
    assert not wrong, "\n".join(wrong)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (module -> modules it imports) as a path back to its start, or None."""
    done: set[str] = set()
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        path.append(node)
        for child in sorted(graph.get(node, ())):
            found = walk(child)
            if found:
                return found
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        found = walk(node)
        if found:
            return found
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    graph = {dotted(p): {name for name, _ in package_imports(p)} for p in modules()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_package_imports_sit_at_module_top():
    lazy = {(str(p.relative_to(PACKAGE)), name) for p in modules() for name, top in package_imports(p) if not top}
    assert lazy <= LAZY_ALLOWED, sorted(lazy - LAZY_ALLOWED)


def test_heavy_libraries_are_imported_only_where_used():
    # torch, kernel libraries, Hypothesis and NVML are imported inside functions, except in the fuzz layer
    # (Hypothesis at its top: the layer exists to run it)
    found = []
    for path in modules():
        if layer(dotted(path)) == "fuzz":
            continue
        for name, top in imports(path):
            if top and name.split(".")[0] in HEAVY:
                found.append(f"{dotted(path)} imports {name} at module top")
    assert not found, "\n".join(found)


def test_modules_and_functions_stay_small():
    big = []
    for path in modules():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            big.append(f"{dotted(path)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    big.append(f"{dotted(path)}.{node.name}: {length} lines")
    assert not big, "\n".join(big)


def test_each_layer_says_what_it_is():
    for name in ORDER:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and len(doc) > 200, f"pytest_attn/{name}/__init__.py needs its one-paragraph docstring"


def test_no_two_modules_share_a_name():
    """A name says one job: ``gate`` was the plugin's wiring, the verdict rule and (as ``gating``) a run's
    decision; ``reference`` both the oracle and the back end that runs it. Now ``plugin.gate``,
    ``verdicts.rule``, ``verdicts.decision``, ``oracle.reference`` and ``backends.upcast``."""
    seen: dict[str, list[str]] = {}
    for path in modules():
        if path.stem not in ("__init__", "__main__"):
            seen.setdefault(path.stem, []).append(dotted(path))
    shared = {name: where for name, where in seen.items() if len(where) > 1}
    assert not shared, shared


def test_each_package_docstring_names_its_modules():
    """A new maintainer reads a package's docstring first: every module of the package is named there."""
    for name in ORDER:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text())) or ""
        unnamed = [p.stem for p in sorted((PACKAGE / name).glob("*.py"))
                   if p.stem != "__init__" and f":mod:`.{p.stem}`" not in doc]
        assert not unnamed, f"pytest_attn/{name}/__init__.py does not name {', '.join(unnamed)}"


def test_the_session_end_is_in_one_place():
    """The session's end was seven ``pytest_sessionfinish`` and five ``pytest_terminal_summary`` hooks in seven
    modules, their order set by registration and tryfirst/trylast and written down nowhere. Now plugin.finish
    runs the steps in the order its docstring gives; the one other hook is history's SavingGuard, the wrapper
    that turns a failed save into a message."""
    ends = ("pytest_sessionfinish", "pytest_terminal_summary")
    found = []
    for path in sorted((PACKAGE / "plugin").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in ends:
                found.append(f"{path.stem}.{node.name}")
    assert sorted(found) == ["finish.pytest_sessionfinish", "finish.pytest_sessionfinish",
                             "finish.pytest_terminal_summary", "finish.pytest_terminal_summary",
                             "history.pytest_sessionfinish"], found


def test_options_are_converted_once_and_read_from_one_place():
    """Every ``--attn-*`` option is converted at configure into AttnOptions or GateOptions; code reads them there.
    Ten were read ad hoc with ``config.getoption`` in five modules (fuzz, bench, workers, summary, ab)."""
    import re

    reads = [f"{path.relative_to(PACKAGE)}:{n}" for path in modules()
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"getoption\(\s*[\"']attn_", line)
             and path.relative_to(PACKAGE).as_posix() not in ("plugin/options.py", "plugin/session.py")]
    assert not reads, reads
