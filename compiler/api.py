"""The public entry points that wire the stages together: compile, grad, ONNX in and out."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import onnx

from gradc.autodiff import GradNames
from gradc.autodiff import grad as _grad
from gradc.autodiff import grad_names as _grad_names
from gradc.backends import TARGETS
from gradc.backends.onnx.importer import from_onnx as _from_onnx
from gradc.backends.onnx.target import to_onnx as _to_onnx
from gradc.errors import GradcError, VerifyError
from gradc.executable import Executable, check_addressable
from gradc.ir.core import Graph, parameters_as_inputs
from gradc.ir.ops.registry import show_value
from gradc.ir.types import MAX_DIM
from gradc.passes import Optimized, optimize
from gradc.ir.verify import verify


def _check_shapes(shapes: Mapping[str, int] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    if shapes is not None and not isinstance(shapes, Mapping):
        raise VerifyError(f"compile: shapes: expected a mapping of symbol names to sizes, got "
                          f"{type(shapes).__name__}")
    for k, v in (shapes or {}).items():
        if (not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int)
                or not 1 <= v <= MAX_DIM):
            raise VerifyError(f"compile: shapes[{show_value(k, repr)}]: expected an int in "
                              f"[1, 2**63 - 1], got {show_value(v, repr)}")
        out[k] = v
    return out


def _prepare(graph: Graph, target: str, passes: str | Sequence[str] | None,
             shapes: Mapping[str, int] | None, instruments: Sequence[Any],
             verify_each: bool) -> tuple[Optimized, dict[str, int]]:
    """Check the arguments, verify the graph and run the pass pipeline."""
    if not isinstance(graph, Graph):
        raise VerifyError(f"compile: graph: expected a gradc.Graph, got {type(graph).__name__}")
    if not isinstance(target, str) or target not in TARGETS:
        raise VerifyError(f"compile: target: expected one of {', '.join(TARGETS)}, got "
                          f"{show_value(target, repr)}")
    bound = _check_shapes(shapes)
    verify(graph)
    _check_free_symbols(graph)
    opt = optimize(graph, passes, instruments=instruments, verify_each=verify_each,
                   symbols=bound)
    # Sizes beyond what any target addresses are refused here, once, before a target computes
    # offsets, literals or allocations from them.
    check_addressable(opt.graph, bound)
    return opt, bound


def _check_free_symbols(graph: Graph) -> None:
    """Every symbol must size an input: the targets read symbols from the inputs' shapes
    (``random_generator``'s ``output_sizes`` may name one that sizes nothing)."""
    sized = {s for v in graph.inputs for s in v.type.symbols}
    for v in graph.values():
        free = [s for s in v.type.symbols if s not in sized]
        if free:
            raise VerifyError(f"compile: symbol {free[0]!r} (in the type of %{v.name}) is the "
                              f"size of no input of graph {graph.name!r}: a symbolic size must "
                              f"be an input's, or write the size as a number")


def compile(graph: Graph, target: str = "c", passes: str | Sequence[str] | None = "default",
            shapes: Mapping[str, int] | None = None, instruments: Sequence[Any] = (),
            verify_each: bool = True, **options: Any) -> Executable:
    """Verify, optimize and lower a graph for one target; returns an ``Executable``.

    ``instruments`` and ``verify_each`` go to the pass pipeline (``gradc.optimize``); the other
    keyword options go to the target (for example ``threads=2`` for ``"c"`` and ``"onnx"``).
    """
    opt, bound = _prepare(graph, target, passes, shapes, instruments, verify_each)
    # The targets compile parameters as inputs; the Executable feeds their values.
    lowered = TARGETS[target].lower(parameters_as_inputs(opt.graph), bound, **options)
    return Executable(opt.graph, target, lowered.runner, bound, source=lowered.source,
                      model=lowered.model, contiguous=lowered.contiguous, report=opt.report,
                      in_place=lowered.in_place, foreign=lowered.foreign, own=lowered.own,
                      exact=TARGETS[target].exact and lowered.exact)


def artifact(graph: Graph, target: str, passes: str | Sequence[str] | None = "default",
             shapes: Mapping[str, int] | None = None,
             instruments: Sequence[Any] = ()) -> str | bytes:
    """The program a target makes of a graph (C or NumPy source, ONNX bytes), not loaded."""
    opt, bound = _prepare(graph, target, passes, shapes, instruments, True)
    return TARGETS[target].artifact(parameters_as_inputs(opt.graph), bound)


__all__ = ["compile", "artifact", "grad", "grad_names", "from_onnx", "to_onnx", "GradcError"]


def grad(graph: Graph, wrt: str | Sequence[str] | None = None) -> Graph:
    """The vector-Jacobian-product (training) graph of a forward graph.

    ``wrt``: "inputs" (the default), "parameters", "all" or a list of input/parameter names.
    """
    return _grad(graph, wrt)


def grad_names(graph: Graph, wrt: str | Sequence[str] | None = None) -> GradNames:
    """The names ``grad(graph, wrt)`` gives its cotangent inputs (``.cotangents``: output name
    -> input name) and gradient outputs (``.gradients``: differentiated name -> output name):
    ``grad_<name>``, or ``grad_<name>_1``, ``_2``, ... where the graph already uses it."""
    return _grad_names(graph, wrt)


def from_onnx(model_or_path: Any) -> Graph:
    """Import a forward ONNX model (a path, bytes or ``onnx.ModelProto``) as a graph."""
    return _from_onnx(model_or_path)


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """Export a graph as a standard-domain ONNX model that stock onnxruntime runs."""
    return _to_onnx(graph)
