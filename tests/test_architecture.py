"""What may import what: the executable form of docs/architecture.md's layering rules.

The import graph of `gradc` is read from the source with `ast` (nothing is imported), from the
folders that pyproject.toml's package-dir maps to packages, and their subpackages. An import
statement, or `import_module("gradc...")` with a literal name, is an edge; `from p import x` goes
to p.x when that is a module, else to p. Python running a package's parents' __init__ first is not
an edge; an __init__.py importing its own submodules is. Rules:

- No import cycles. Every import counts, wherever it is (deferring one into a function still
  closes the circle); only those under `if TYPE_CHECKING:` are left out, as they never run.
- Layers, lowest first: gradc.errors (a leaf) <- gradc.ir <- gradc.passes <- gradc.backends <-
  the driver (gradc and every other gradc.* module). A module imports its own layer and lower.
- Backends (gradc.backends.c, .numpy, .onnx, ...) are independent: one imports its own
  subpackage, gradc.backends itself (its shared modules: the Target protocol, the reference,
  the schedule and memory plan of gradc.backends.plan) and gradc.backends.reference, never
  another backend -- except that the CUDA target builds on the C target's C-text layer
  (`C_TEXT`: the writer, types and literals, scalar expressions, the kernel context and the
  prelude's helpers), which itself imports nothing else of the C target.
- Imports sit at module top level (a module-level `if TYPE_CHECKING:` or `try:` is top level); one
  inside a function needs a comment with "lazy:" and the reason, on its line or the line before:
  `import onnxruntime  # lazy: heavy optional dependency, loaded only when the target runs`.
- `import gradc.ir` loads the IR alone (besides `gradc` itself and gradc.errors).

GRADC_SOURCE_ROOT=<dir> checks another copy of the source tree.
"""

from __future__ import annotations

import ast
import io
import os
import subprocess
import sys
import tokenize
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import NamedTuple

import networkx as nx
import pytest

ROOT = Path(os.environ.get("GRADC_SOURCE_ROOT") or Path(__file__).resolve().parents[1])
LAYERS = ("errors", "ir", "passes", "backends", "driver")  # lowest first
SHARED_BACKEND = "reference"  # gradc.backends.reference, even as a package, serves every backend
# CUDA kernels are C: the cuda target shares the C target's text layer (never its program,
# compiler or runtime); the C target imports nothing of cuda.
C_TEXT = frozenset(f"gradc.backends.c.{m}" for m in ("writer", "ctypes_map", "scalar",
                                                     "elementwise_math", "activation", "kernel",
                                                     "prelude", "average_window"))
BUILDS_ON = {"cuda": C_TEXT}


class Import(NamedTuple):
    """An edge from the gradc module `source` to the gradc module `target`."""
    source: str
    target: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`


class ImportGraph(NamedTuple):
    """The modules (name -> file), the edges, and the imports in functions lacking a lazy:."""
    files: dict[str, Path]
    imports: list[Import]
    unexplained_nested: list[str]


def package_dirs(root: Path) -> dict[str, Path]:
    """The folder of each package that pyproject.toml's package-dir maps."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {pkg: (root / folder).resolve() for pkg, folder in mapping["package-dir"].items()}


def find_modules(root: Path) -> dict[str, Path]:
    """Every module of gradc, walking each mapped folder and its subpackages."""
    dirs, files = package_dirs(root), {}

    def walk(package: str, folder: Path) -> None:
        for path in sorted(folder.iterdir()):
            if path.is_dir() and (path / "__init__.py").exists() and path not in dirs.values():
                walk(f"{package}.{path.name}", path)
            elif path.suffix == ".py":
                files[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path

    for package, folder in dirs.items():
        walk(package, folder)
    return files


def known(name: str, files: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is a gradc module, or None outside gradc."""
    parts = name.split(".")
    prefixes = (".".join(parts[:k]) for k in range(len(parts), 0, -1))
    return next((prefix for prefix in prefixes if prefix in files), None)


def targets(node: ast.Import | ast.ImportFrom, module: str, files: dict[str, Path]) -> set[str]:
    """The gradc modules (other than `module`) that an import statement names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = module if files[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        origin = ".".join(filter(None, [base, node.module])) if node.level else node.module or ""
        names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in files else origin
                 for a in node.names]
    return {target for name in names if (target := known(name, files)) and target != module}


class ImportFinder(ast.NodeVisitor):
    """Collects (import, inside a function?, under TYPE_CHECKING?) for one module."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool, bool]] = []
        self.depth = self.type_checking = 0

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        guarded = ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        self.type_checking += guarded
        for statement in node.body:
            self.visit(statement)
        self.type_checking -= guarded
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.found.append((node, self.depth > 0, self.type_checking > 0))

    visit_ImportFrom = visit_Import

    def visit_Call(self, node: ast.Call) -> None:
        """`import_module("gradc.x")` is an edge too (rule (c) is about statements only)."""
        name = node.args[0] if node.args else None
        if ast.unparse(node.func).endswith("import_module") and isinstance(name, ast.Constant):
            self.found.append((ast.Import([ast.alias(str(name.value))], lineno=node.lineno,
                                          end_lineno=node.lineno), False,
                               self.type_checking > 0))
        self.generic_visit(node)


@cache
def import_graph(root: Path = ROOT) -> ImportGraph:
    """Reads every module of gradc under `root` and returns its import graph."""
    files, imports, nested = find_modules(root), [], []
    for module, path in sorted(files.items()):
        source = path.read_text()
        finder, tokens = ImportFinder(), tokenize.generate_tokens(io.StringIO(source).readline)
        lazy = {t.start[0] for t in tokens if t.type == tokenize.COMMENT and "lazy:" in t.string}
        finder.visit(ast.parse(source, filename=str(path)))
        for node, in_function, type_only in finder.found:
            excused = lazy & set(range(node.lineno - 1, (node.end_lineno or node.lineno) + 1))
            if in_function and not type_only and not excused:
                nested.append(f"{module}:{node.lineno}: `{ast.unparse(node)}` inside a function")
            imports += [Import(module, target, node.lineno, type_only)
                        for target in sorted(targets(node, module, files))]
    return ImportGraph(files, imports, nested)


def layer(module: str) -> str:
    """The layer of a gradc module: errors, ir, passes, backends or driver."""
    if module == "gradc.errors":
        return "errors"
    part = module.split(".")[1] if "." in module else ""
    return part if part in ("ir", "passes", "backends") else "driver"


def backend(module: str, files: dict[str, Path]) -> str | None:
    """The backend subpackage (c, numpy, onnx, ...) that a module lies in, if any."""
    parts, package = module.split("."), ".".join(module.split(".")[:3])
    in_subpackage = package in files and files[package].name == "__init__.py"
    return parts[2] if parts[1:2] == ["backends"] and len(parts) > 2 and in_subpackage else None


def violations(edges: list[Import], why: Callable[[str, str], str]) -> list[str]:
    """One line per offending (source, target) pair, with the lines of its imports."""
    lines: dict[tuple[str, str], set[int]] = {}
    for edge in edges:
        lines.setdefault((edge.source, edge.target), set()).add(edge.line)
    return [f"{source} imports {target} ({why(source, target)}) at line"
            f"{'s' if len(at) > 1 else ''} {', '.join(map(str, sorted(at)))}"
            for (source, target), at in sorted(lines.items())]


def fail_if(problems: list[str], title: str) -> None:
    """Fails the test with one problem per line under a title, if there are any."""
    if problems:
        pytest.fail(f"{title}:\n  " + "\n  ".join(problems), pytrace=False)


def shortest_cycle(graph: nx.DiGraph, start: str) -> list[str]:
    """The modules of a shortest cycle through `start`, from `start` to the module before it."""
    back = min((nx.shortest_path(graph, n, start) for n in graph[start]), key=len)
    return [start, *back[:-1]]


def test_no_import_cycles():
    graph, lines = nx.DiGraph(), {}
    for edge in import_graph().imports:
        if not edge.type_only:
            graph.add_edge(edge.source, edge.target)
            lines.setdefault((edge.source, edge.target), edge.line)
    problems = []
    for knot in (c for c in nx.strongly_connected_components(graph) if len(c) > 1):
        sub = graph.subgraph(knot)
        cycle = min((shortest_cycle(sub, start) for start in sorted(knot)), key=len)
        hops = [f"{a}:{lines[a, b]}" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
        text = " -> ".join([*hops, cycle[0]])
        rest = sorted(knot - set(cycle))
        problems.append(text + (f" (in one knot with {', '.join(rest)})" if rest else ""))
    fail_if(sorted(problems), "import cycles (module:line of each import on the cycle)")


def test_layers_import_downward_only():
    wrong = [edge for edge in import_graph().imports
             if LAYERS.index(layer(edge.target)) > LAYERS.index(layer(edge.source))]
    fail_if(violations(wrong, lambda s, t: f"{layer(s)} -> {layer(t)}: wrong way"),
            "imports against the layers (errors <- ir <- passes <- backends <- driver)")


def test_backends_are_independent():
    files = import_graph().files

    def crosses(edge: Import) -> bool:
        source, target = backend(edge.source, files), backend(edge.target, files)
        return (source is not None and target not in (None, source, SHARED_BACKEND)
                and edge.target not in BUILDS_ON.get(source, ()))

    crossing = [edge for edge in import_graph().imports if crosses(edge)]
    fail_if(violations(crossing, lambda s, t: f"backend {backend(s, files)} -> backend "
                                              f"{backend(t, files)}: backends are independent"),
            "backends importing one another (gradc.backends and its reference are shared)")


def test_the_shared_c_text_layer_stays_apart():
    """What the cuda target may import of the C target imports no other part of it."""
    out = [e for e in import_graph().imports if e.source in C_TEXT
           and e.target.startswith("gradc.backends.c.") and e.target not in C_TEXT]
    fail_if(violations(out, lambda s, t: "the C-text layer reaches into the C target"),
            "C-text modules (C_TEXT) importing the rest of the C target")


def test_imports_at_module_top_level():
    fail_if(import_graph().unexplained_nested,
            "imports inside functions without a '# lazy: <why>' comment on or above the line")


LOAD_IR = """import importlib.util, sys
class Finder:  # gradc's packages from ROOT's folders, wherever the installed gradc points
    def find_spec(name, path=None, target=None):
        folder = DIRS.get(name)
        return folder and importlib.util.spec_from_file_location(
            name, folder + '/__init__.py', submodule_search_locations=[folder])
sys.meta_path.insert(0, Finder)
import sys, gradc.ir; print(sorted(m for m in sys.modules if m.startswith('gradc')))"""


def test_import_ir_loads_the_ir_alone():
    dirs = {package: str(folder) for package, folder in package_dirs(ROOT).items()}
    result = subprocess.run([sys.executable, "-c", f"DIRS = {dirs!r}\n{LOAD_IR}"], cwd=ROOT,
                            capture_output=True, text=True)
    if result.returncode:
        pytest.fail(f"`import gradc.ir` fails:\n{result.stderr}", pytrace=False)
    loaded = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    extra = [m for m in loaded if m not in ("gradc", "gradc.errors") and layer(m) != "ir"]
    fail_if(extra, "`import gradc.ir` also loads modules above the IR")
