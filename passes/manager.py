"""The pass manager: runs a pipeline with instruments (verify, timing, statistics)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from gradc.errors import VerifyError
from gradc.ir.core import Graph

PASSES: dict[str, type["Pass"]] = {}


@dataclass
class PassResult:
    """What a pass returns: the new graph, whether it changed, and its counters."""

    graph: Graph
    changed: bool
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class Pass:
    """Base of every pass: a dataclass whose fields are its options."""

    name: ClassVar[str] = "pass"

    def run(self, graph: Graph) -> PassResult:
        raise NotImplementedError


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available by its kebab-case name."""
    PASSES[cls.name] = cls
    return cls


@dataclass
class PassReport:
    """One entry of ``Optimized.report``."""

    name: str
    changed: bool
    seconds: float
    stats: dict[str, Any]
    ir: str


@dataclass
class Optimized:
    """The result of ``gradc.optimize``: the final graph and one report entry per pass."""

    graph: Graph
    report: list[PassReport]


def default_pipeline() -> list[str]:
    """The names of the passes that ``passes="default"`` runs."""
    return ["dce"]


def _resolve(passes: str | Sequence[str] | None) -> list[Pass]:
    if passes is None:
        names: list[str] = []
    elif passes == "default":
        names = default_pipeline()
    elif isinstance(passes, str):
        names = [p.strip() for p in passes.split(",") if p.strip()]
    else:
        names = list(passes)
    out = []
    for n in names:
        if isinstance(n, Pass):
            out.append(n)
        elif n in PASSES:
            out.append(PASSES[n]())
        else:
            raise VerifyError(f"passes: expected pass names from {', '.join(sorted(PASSES))}, "
                              f"got {n!r}")
    return out


def optimize(graph: Graph, passes: str | Sequence[str] | None = "default",
             verify_each: bool = True) -> Optimized:
    """Run a pipeline on a graph (never mutated); returns the result and a per-pass report."""
    graph.verify()
    report = []
    g = graph
    for p in _resolve(passes):
        t0 = time.perf_counter()
        r = p.run(g)
        seconds = time.perf_counter() - t0
        if verify_each:
            r.graph.verify()
        g = r.graph
        report.append(PassReport(p.name, r.changed, seconds, dict(r.stats), str(g)))
    return Optimized(g, report)
