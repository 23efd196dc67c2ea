"""The public entry points that wire the stages together: compile, parse, (later) grad and ONNX."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gradc.errors import GradcError, UnsupportedError, VerifyError
from gradc.executable import Executable
from gradc.ir.core import Graph

TARGETS = ("reference", "numpy", "c", "onnx")


def _check_shapes(shapes: Mapping[str, int] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in (shapes or {}).items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise VerifyError(f"compile: shapes[{k!r}]: expected an int >= 1, got {v!r}")
        out[k] = v
    return out


def compile(graph: Graph, target: str = "c", passes: str | Sequence[str] | None = "default",
            shapes: Mapping[str, int] | None = None, instruments: Sequence[Any] = (),
            verify_each: bool = True, **options: Any) -> Executable:
    """Verify, optimize and lower a graph for one target; returns an ``Executable``.

    ``instruments`` and ``verify_each`` go to the pass pipeline (``gradc.optimize``); the other
    keyword options go to the target (for example ``threads=2`` for ``"c"`` and ``"onnx"``).
    """
    if not isinstance(graph, Graph):
        raise VerifyError(f"compile: graph: expected a gradc.Graph, got {type(graph).__name__}")
    if target not in TARGETS:
        raise VerifyError(f"compile: target: expected one of {', '.join(TARGETS)}, got {target!r}")
    shapes = _check_shapes(shapes)
    graph.verify()
    from gradc.passes import optimize
    opt = optimize(graph, passes, instruments=instruments, verify_each=verify_each,
                   symbols=shapes)
    g = opt.graph
    if target == "reference":
        if options:
            k = sorted(options)[0]
            raise VerifyError(f"compile: {k}: expected no such option for target 'reference', "
                              f"got {options[k]!r}")
        from gradc.ir.interpret import ReferenceRunner
        return Executable(g, target, ReferenceRunner(g), shapes, report=opt.report)
    try:
        from importlib import import_module
        backend = import_module(f"gradc.backends.{target}.target")
    except ImportError:
        raise UnsupportedError(
            f"compile: target {target!r} is not available in this build") from None
    return backend.build(g, shapes, report=opt.report, **options)


__all__ = ["compile", "GradcError"]


def grad(graph: Graph, wrt: Sequence[str] | None = None) -> Graph:
    """The vector-Jacobian-product (training) graph of a forward graph (API.md)."""
    from gradc.autodiff import grad as _grad
    return _grad(graph, wrt)


def from_onnx(model_or_path: Any) -> Graph:
    """Import a forward ONNX model (a path, bytes or ``onnx.ModelProto``) as a graph."""
    from gradc.backends.onnx.importer import from_onnx as _from_onnx
    return _from_onnx(model_or_path)


def to_onnx(graph: Graph) -> Any:
    """Export a graph as a standard-domain ONNX model that stock onnxruntime runs."""
    from gradc.backends.onnx.target import to_onnx as _to_onnx
    return _to_onnx(graph)
