"""The pass manager: runs a pipeline with instruments around each pass (verify, report, hooks).

    opt = gradc.optimize(g, "canonicalize,cse,dce", instruments=[TimePasses(sys.stderr)])
    opt.graph                       # the result; ``g`` itself is never modified
    opt.report[0].stats             # {"rewritten:relu-grad-of-relu": 2, "bytes-before": ..., ...}
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

from gradc.errors import GradcError, VerifyError
from gradc.ir.core import Graph
from gradc.passes.cost import graph_bytes
from gradc.ir.verify import verify

PASSES: dict[str, type["Pass"]] = {}


@dataclass
class PassResult:
    """What a pass returns: the new graph, whether it changed, and its counters."""

    graph: Graph
    changed: bool
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class Pass:
    """Base of every pass: a dataclass whose fields are its options; ``run`` never mutates."""

    name: ClassVar[str] = "pass"

    def run(self, graph: Graph) -> PassResult:
        """Transform ``graph`` into a new graph (or return it unchanged)."""
        raise NotImplementedError


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available by its kebab-case name."""
    PASSES[cls.name] = cls
    return cls


@dataclass(eq=False)
class PassReport:
    """One entry of ``Optimized.report``; ``ir`` is the text IR after the pass (made on demand)."""

    name: str
    changed: bool
    seconds: float
    stats: dict[str, Any]
    graph: Graph = field(repr=False)

    @cached_property
    def ir(self) -> str:
        """The text IR of the graph after this pass."""
        return str(self.graph)


@dataclass(eq=False)
class Optimized:
    """The result of ``gradc.optimize``: the final graph and one report entry per pass."""

    graph: Graph
    report: list[PassReport]
    input: Graph | None = field(default=None, repr=False)

    @cached_property
    def input_ir(self) -> str:
        """The text IR of the graph the pipeline started from."""
        return str(self.input) if self.input is not None else ""


@dataclass(eq=False)
class PassEvent:
    """What an instrument sees after a pass: its position, the pass, before and after."""

    index: int
    pass_: Pass
    before: Graph
    entry: PassReport
    optimized: Optimized

    @property
    def before_ir(self) -> str:
        """The text IR the pass started from (computed once per graph)."""
        if self.index == 1:
            return self.optimized.input_ir
        return self.optimized.report[self.index - 2].ir

    @property
    def after_ir(self) -> str:
        """The text IR the pass produced."""
        return self.entry.ir


class Instrument:
    """Hooks that ``optimize`` calls around the pipeline; override the ones you need."""

    def before_pipeline(self, graph: Graph, passes: Sequence[Pass], optimized: Optimized) -> None:
        """Called once before the first pass."""

    def after_pass(self, event: PassEvent) -> None:
        """Called after each pass (and after its result was verified)."""

    def after_pipeline(self, optimized: Optimized) -> None:
        """Called once after the last pass."""


def default_pipeline() -> list[str]:
    """The names of the passes that ``passes="default"`` runs."""
    return ["canonicalize", "cse", "constant-fold", "dce", "relu-mask-from-output",
            "fuse-gradients", "fuse-elementwise", "dce"]


def resolve(passes: str | Pass | Sequence[str | Pass] | None) -> list[Pass]:
    """Pass objects for ``"default"``, ``None``, ``"a,b"`` or a list of names / Pass objects."""
    if passes is None:
        items: list[Any] = []
    elif isinstance(passes, Pass):
        items = [passes]
    elif passes == "default":
        items = default_pipeline()
    elif isinstance(passes, str):
        items = [p.strip() for p in passes.split(",") if p.strip()]
    elif isinstance(passes, (list, tuple)):
        items = list(passes)
    else:
        raise VerifyError("passes: expected 'default', None, a comma-separated string or a list "
                          f"of pass names / Pass objects, got {type(passes).__name__}")
    out: list[Pass] = []
    for p in items:
        if isinstance(p, Pass):
            out.append(p)
        elif p == "default":
            out.extend(resolve("default"))
        elif isinstance(p, str) and p in PASSES:
            out.append(PASSES[p]())
        else:
            raise VerifyError(f"passes: expected pass names from {', '.join(sorted(PASSES))} "
                              f"or 'default', got {p!r}")
    return out


def optimize(graph: Graph, passes: str | Sequence[str | Pass] | None = "default",
             instruments: Iterable[Instrument] = (), verify_each: bool = True,
             symbols: Mapping[str, int] | None = None) -> Optimized:
    """Run a pipeline on a graph (never mutated); returns the result and a per-pass report.

    ``instruments`` are called around each pass (see ``gradc.passes.instruments``);
    ``verify_each`` checks every pass's result; ``symbols`` sizes symbolic dims in the
    memory-traffic statistics (1 when not given).
    """
    verify(graph)
    pipeline = resolve(passes)
    instruments = list(instruments)
    opt = Optimized(graph, [], graph)
    for ins in instruments:
        ins.before_pipeline(graph, pipeline, opt)
    with _gc_paused():
        _run_pipeline(opt, pipeline, instruments, verify_each, symbols)
    for ins in instruments:
        ins.after_pipeline(opt)
    return opt


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause automatic garbage collection (its state is restored after): passes allocate many
    long-lived objects, and repeated full collections would make compile time grow faster than
    linearly. Dropped intermediate graphs (values and nodes refer to each other) are collected
    at the next collection after the pipeline."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_pipeline(opt: Optimized, pipeline: list[Pass], instruments: list[Instrument],
                  verify_each: bool, symbols: Mapping[str, int] | None) -> None:
    g = opt.graph
    nodes, traffic = len(g.nodes), graph_bytes(g, symbols)
    for i, p in enumerate(pipeline, 1):
        r, seconds = _run_one(p, g, verify_each)
        if r.graph is g:
            after_nodes, after_traffic = nodes, traffic
        else:
            after_nodes, after_traffic = len(r.graph.nodes), graph_bytes(r.graph, symbols)
        stats = dict(r.stats) | {"nodes-before": nodes, "nodes-after": after_nodes,
                                 "bytes-before": traffic, "bytes-after": after_traffic}
        entry = PassReport(p.name, r.changed, seconds, stats, r.graph)
        opt.report.append(entry)
        opt.graph = r.graph
        event = PassEvent(i, p, g, entry, opt)
        for ins in instruments:
            ins.after_pass(event)
        g, nodes, traffic = r.graph, after_nodes, after_traffic


def _run_one(p: Pass, g: Graph, verify_each: bool) -> tuple[PassResult, float]:
    t0 = time.perf_counter()
    r = p.run(g)
    seconds = time.perf_counter() - t0
    if verify_each and r.graph is not g:  # an unchanged graph was verified already
        try:
            verify(r.graph)
        except GradcError as e:
            raise VerifyError(f"pass {p.name} produced an invalid graph: {e}") from None
    return r, seconds
