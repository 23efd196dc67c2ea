"""Executables: argument checking shared by every target, then the target's runner."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from gradc.backends.target import Runner
from gradc.errors import InputError
from gradc.ir.core import Graph


def bind_inputs(graph: Graph, arrays: Mapping[str, Any], shapes: Mapping[str, int] | None,
                contiguous: bool = False) -> dict[str, int]:
    """Check every array against the graph's inputs; return the symbol bindings."""
    bindings: dict[str, int] = dict(shapes or {})
    names = [v.name for v in graph.inputs]
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise InputError(f"unexpected input {extra[0]!r}: graph {graph.name!r} takes "
                         f"{', '.join(names) or 'no inputs'}")
    for v in graph.inputs:
        if v.name not in arrays:
            raise InputError(f"input {v.name!r}: missing (expected {v.type.dtype} array of shape "
                             f"{_shape(v.type.shape)})")
        a = arrays[v.name]
        if isinstance(a, np.generic):
            a = np.asarray(a)
            arrays[v.name] = a  # type: ignore[index]
        if not isinstance(a, np.ndarray):
            raise InputError(f"input {v.name!r}: expected a numpy.ndarray, got "
                             f"{type(a).__name__}")
        want = v.type.dtype.numpy
        if a.dtype != want:
            raise InputError(f"input {v.name!r}: expected dtype {want}, got {a.dtype}")
        if a.ndim != v.type.rank:
            raise InputError(f"input {v.name!r}: expected shape {_shape(v.type.shape)}, got "
                             f"{tuple(a.shape)} (rank {a.ndim})")
        for i, (d, n) in enumerate(zip(v.type.shape, a.shape)):
            if isinstance(d, str):
                if n < 1:
                    raise InputError(f"input {v.name!r}: expected {d} >= 1 on axis {i}, got {n}")
                if bindings.setdefault(d, n) != n:
                    raise InputError(f"input {v.name!r}: expected shape {_shape(v.type.shape)} "
                                     f"with {d}={bindings[d]}, got {tuple(a.shape)}")
            elif d != n:
                raise InputError(f"input {v.name!r}: expected shape {_shape(v.type.shape)}, got "
                                 f"{tuple(a.shape)}")
        if contiguous and not a.flags.c_contiguous:
            raise InputError(f"input {v.name!r}: expected a C-contiguous array, got strides "
                             f"{a.strides}")
    return bindings


def _shape(shape: tuple) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class Executable:
    """A compiled graph: call it with keyword arrays, get a dict of output arrays."""

    def __init__(self, graph: Graph, target: str, runner: Runner,
                 shapes: Mapping[str, int] | None = None, source: str | None = None,
                 model: Any = None, contiguous: bool = False, report: list | None = None) -> None:
        self.graph = graph
        self.target = target
        self.source = source
        self.model = model
        self.report = report or []
        self._runner = runner
        self._shapes = dict(shapes or {})
        self._contiguous = contiguous

    def __call__(self, **arrays: Any) -> dict[str, np.ndarray]:
        arrays = dict(arrays)
        bindings = bind_inputs(self.graph, arrays, self._shapes, self._contiguous)
        return self._runner(arrays, bindings)

    def __repr__(self) -> str:
        return f"<Executable {self.graph.name} target={self.target}>"
