"""Executables: argument checking shared by every target, then the target's runner."""

from __future__ import annotations

import operator
import os
from typing import Any, Callable, Mapping

import numpy as np

from gradc.backends.target import Runner
from gradc.errors import GradcError, InputError, ResourceError
from gradc.ir.core import Graph, Value, parameters_as_inputs
from gradc.ir.printer import fmt_name, fmt_type
from gradc.ir.types import MAX_BYTES, byte_size, fmt_bytes


def static_signature(graph: Graph) -> list[tuple[str, np.dtype, tuple[int, ...]]] | None:
    """(name, dtype, shape) of every input when no shape has a symbol, else None: what
    ``bind_inputs`` checks first."""
    if any(isinstance(d, str) for v in graph.inputs for d in v.type.shape):
        return None
    return [(v.name, v.type.dtype.numpy, tuple(int(d) for d in v.type.shape))
            for v in graph.inputs]


def _exact(spec: list[tuple[str, np.dtype, tuple[int, ...]]], arrays: dict[str, Any],
           contiguous: bool, own: tuple[type, ...] = (),
           foreign: Callable[[Any], Any] | None = None, memo: dict[str, Any] | None = None
           ) -> bool:
    """True when the arrays are exactly the inputs of a static signature: the same names,
    plain ndarrays of the input's dtype and shape (C-contiguous if asked), arrays of the
    target's ``own`` types (always contiguous) of that dtype and shape, or other arrays the
    target takes (``foreign``) whose description matches -- each replaced in ``arrays`` by
    its description, as the checks below do.

    ``memo`` (the Executable's): the arrays of ``own`` types (read-only objects) that passed
    the last call; when the same objects come again (a Trainer's state, every step), only the
    other inputs are checked."""
    if len(arrays) != len(spec):
        return False
    check = spec
    last = memo.get("own") if memo is not None else None
    if last is not None and all(map(operator.is_, map(arrays.get, last[0]), last[1])):
        check = last[2]
    described: dict[str, Any] = {}
    for name, dtype, shape in check:
        a = arrays.get(name)
        t = type(a)
        if t is np.ndarray:
            if a.shape != shape or a.dtype != dtype or (contiguous and  # type: ignore[union-attr]
                                                         not a.flags.c_contiguous):  # type: ignore[union-attr]
                return False
        elif t in own:
            if a.shape != shape or a.dtype != dtype:  # type: ignore[union-attr]
                return False
        elif foreign is not None and a is not None and not isinstance(a, (np.ndarray,
                                                                          np.generic)):
            d = foreign(a)
            if d is None or tuple(d.shape) != shape or d.dtype != dtype or (
                    contiguous and not d.flags.c_contiguous):
                return False
            described[name] = d
        else:
            return False
    arrays.update(described)  # only when every array passed (else the checks describe them)
    if memo is not None and own and (check is spec or any(type(arrays[n]) in own
                                                          for n, _, _ in check)):
        names = [n for n, _, _ in spec if type(arrays[n]) in own]
        kept = set(names)
        memo["own"] = (names, [arrays[n] for n in names],  # one assignment: thread-safe
                       [e for e in spec if e[0] not in kept])
    return True


def bind_inputs(graph: Graph, arrays: Mapping[str, Any], shapes: Mapping[str, int] | None,
                contiguous: bool = False,
                spec: list[tuple[str, np.dtype, tuple[int, ...]]] | None = None,
                foreign: Callable[[Any], Any] | None = None,
                own: tuple[type, ...] = (), memo: dict[str, Any] | None = None
                ) -> dict[str, int]:
    """Check every array against the graph's inputs; return the symbol bindings.

    ``spec``: the graph's ``static_signature``; arrays that match it exactly (a training
    loop's every step) pass without the checks that name what is wrong (a step of the MLP
    passes 22 arrays: about 80 us of checks, a fifth of its step, became a few).
    ``foreign``: the target's description of arrays it takes besides NumPy's (GPU arrays,
    ``Lowered.foreign``); such an array is checked through its description, which replaces it
    in ``arrays``. ``own``: the target's own array types (``Lowered.own``), taken as they are
    by the static fast path (the runner reads them itself)."""
    bindings: dict[str, int] = dict(shapes or {})
    if spec is not None and _exact(spec, arrays, contiguous, own, foreign,  # type: ignore[arg-type]
                                   memo):
        return bindings
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
        if isinstance(a, np.ma.MaskedArray):
            raise InputError(f"input {v.name!r}: expected a numpy.ndarray, got a masked array "
                             "(its mask would be ignored: pass a.filled(value))")
        if isinstance(a, (np.generic, np.ndarray)) and type(a) is not np.ndarray:
            # A scalar, or a subclass (np.matrix, np.memmap, ...): the targets see the plain
            # array, so no method of a subclass (its __getitem__, its 2-D-only indexing) runs.
            a = np.asarray(a)
            arrays[v.name] = a  # type: ignore[index]
        if type(a) is not np.ndarray:
            described = foreign(a) if foreign is not None else None
            if described is None:
                raise InputError(f"input {v.name!r}: expected a numpy.ndarray"
                                 f"{' or a GPU array' if foreign else ''}, got "
                                 f"{type(a).__name__}")
            a = arrays[v.name] = described  # type: ignore[index]
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
            got = f"strides {a.strides}" if isinstance(a, np.ndarray) else "a strided GPU array"
            raise InputError(f"input {v.name!r}: expected a C-contiguous array, got {got}")
    return bindings


def memory_limit() -> int:
    """The most bytes one allocation can get here: physical memory, or RLIMIT_AS if lower."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        limit = MAX_BYTES
    try:
        import resource  # lazy: POSIX only
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, soft)
    except (ImportError, OSError, ValueError):
        pass
    return limit


def value_bytes(graph: Graph, bindings: Mapping[str, int]) -> list[tuple[int, Value]]:
    """(bytes, value) for every value of the graph with the symbols bound (an unbound symbol
    counts as 1), largest first; values inside fused bodies included. Exact Python ints: the
    one size computation of the driver (``check_addressable``, ``check_sizes``)."""
    values: list[Value] = []
    stack = [graph]
    while stack:
        g = stack.pop()
        values += list(g.inputs) + [o for n in g.nodes for o in n.outputs]
        stack += [n.body for n in g.nodes if n.body is not None]
    sizes = [(byte_size((bindings.get(d, 1) if isinstance(d, str) else d
                         for d in v.type.shape), v.type.dtype), v) for v in values]
    return sorted(sizes, key=lambda p: (-p[0], p[1].producer is None))


def check_addressable(graph: Graph, bindings: Mapping[str, int]) -> None:
    """ResourceError naming the largest value when the bound symbols make it larger than
    ``MAX_BYTES`` (2**62): no target addresses more (sizes, offsets and index arithmetic are
    int64 in C, NumPy and onnxruntime), so every size a target computes from these bindings
    fits in int64 once this passes. ``gradc.compile`` and ``artifact`` run it on the graph they
    lower with the ``shapes`` given, an Executable on every call's bindings."""
    sizes = value_bytes(graph, bindings)
    over = [(n, v) for n, v in sizes if n > MAX_BYTES]
    if over:  # the first in graph order (an input, where a symbol is too large)
        order = {id(v): i for i, v in enumerate(graph.values())}
        nbytes, v = min(over, key=lambda p: order.get(id(p[1]), len(order)))
        raise ResourceError(f"graph {graph.name!r}: value {_bound(v, bindings)} is "
                            f"{fmt_bytes(nbytes)}, more than the 2**62 bytes a tensor may "
                            f"hold (the most any target can address)")
    # A target may hold every value at once (the C target's arena of intermediates, the
    # reference's environment): their total must be addressable too.
    top = {id(v) for v in graph.values()}
    total = sum(n for n, v in sizes if id(v) in top)
    if total > MAX_BYTES:
        nbytes, v = sizes[0]
        raise ResourceError(f"graph {graph.name!r}: its values total {fmt_bytes(total)}, more "
                            f"than the 2**62 bytes a program can address (the largest: value "
                            f"{_bound(v, bindings)}, {fmt_bytes(nbytes)})")


def _bound(v: Value, bindings: Mapping[str, int]) -> str:
    """``%x: f32[N,3] with N=...`` for messages."""
    syms = ", ".join(f"{s}={bindings[s]}" for s in v.type.symbols if s in bindings)
    return f"{fmt_name(v.name)}: {fmt_type(v.type)}" + (f" with {syms}" if syms else "")


def check_sizes(graph: Graph, bindings: Mapping[str, int], limit: int) -> None:
    """InputError when a symbol of the graph is bound by no input (``random_generator``'s
    ``output_sizes`` may name one); ResourceError when the bound symbols make a value too large
    for any machine (``check_addressable``) or larger than ``limit``."""
    for v in graph.values():
        unbound = [s for s in v.type.symbols if s not in bindings]
        if unbound:
            raise InputError(f"graph {graph.name!r}: symbol {unbound[0]!r} (in the type of "
                             f"{fmt_name(v.name)}: {fmt_type(v.type)}) is the size of no "
                             f"input")
    check_addressable(graph, bindings)
    for nbytes, v in value_bytes(graph, bindings):
        if nbytes > limit:
            raise ResourceError(_too_big(graph, v, nbytes, f"this machine's memory "
                                         f"({fmt_bytes(limit)})"))
        break


def _too_big(graph: Graph, v: Value, nbytes: int, what: str) -> str:
    return (f"graph {graph.name!r}: value {fmt_name(v.name)}: {fmt_type(v.type)} needs "
            f"{fmt_bytes(nbytes)}, more than {what}")


def _shape(shape: tuple) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class Executable:
    """A compiled graph: call it with keyword arrays, get a dict of output arrays.

    ``parameters`` maps each parameter's name to the array a call uses when it passes none under
    that name; a passed array is checked like an input (the targets see parameters as inputs).
    A parameter without a value (parsed from text without values) must be passed.
    """

    def __init__(self, graph: Graph, target: str, runner: Runner,
                 shapes: Mapping[str, int] | None = None, source: str | None = None,
                 model: Any = None, contiguous: bool = False, report: list | None = None,
                 in_place: Mapping[str, str] | None = None,
                 foreign: Callable[[Any], Any] | None = None, exact: bool = True,
                 own: tuple[type, ...] = ()) -> None:
        self.graph = graph
        # True when the program keeps the canonical order of every sum (on an exact target:
        # the reference's bits); False when an option reordered some (SPEC-training §9.5).
        self.exact = exact
        # Outputs that a call writes into the array passed for an input (the C target's
        # ``update_in_place``): output name -> input or parameter name.
        self.in_place: dict[str, str] = dict(in_place or {})
        self.target = target
        self.source = source
        self.model = model
        self.report = report or []
        self._runner = runner
        self._shapes = dict(shapes or {})
        self._contiguous = contiguous
        self._foreign = foreign  # GPU arrays the target takes as inputs (Lowered.foreign)
        self._own = own  # the target's own array types (Lowered.own)
        self.parameters: dict[str, np.ndarray] = {p.name: p.value for p in graph.parameters
                                                  if p.value is not None}
        self._signature = parameters_as_inputs(graph)
        self._static = static_signature(self._signature)
        self._sizes_ok: set[tuple] = set()  # bindings whose value sizes passed check_sizes
        self._memo: dict[str, Any] = {}  # the target's own arrays that passed (``_exact``)
        self._overwritten = set(self.in_place.values())

    def __call__(self, /, **arrays: Any) -> dict[str, np.ndarray]:
        # `self` is positional-only, so an input may be named "self" (any name is an input).
        # (``arrays`` is this call's own dict: the checks below may replace its entries)
        overwritten = self._overwritten
        for name, value in self.parameters.items():
            if name not in arrays:
                # A parameter's own array is never overwritten by an in-place output: the
                # caller passes the array to update (gradc.Trainer does).
                arrays[name] = value.copy() if name in overwritten else value
        bindings = bind_inputs(self._signature, arrays, self._shapes, self._contiguous,
                               self._static, self._foreign, self._own, self._memo)
        # The sizes follow from the bindings alone: checked once per set of bindings (a
        # training loop calls with the same shapes every step).
        key = tuple(sorted(bindings.items()))
        if key not in self._sizes_ok:
            check_sizes(self._signature, bindings, memory_limit())
            if len(self._sizes_ok) < 64:
                self._sizes_ok.add(key)
        try:
            return self._runner(arrays, bindings)
        except MemoryError:
            nbytes, v = value_bytes(self.graph, bindings)[0]
            raise ResourceError(f"graph {self.graph.name!r}: out of memory while running on "
                                f"target {self.target!r} (its largest value "
                                f"{fmt_name(v.name)}: {fmt_type(v.type)} needs "
                                f"{fmt_bytes(nbytes)})") from None

    @property
    def arena_bytes(self) -> int | None:
        """Bytes of the planned arena (allocated once and reused by every call): the C
        target's intermediate values, the CUDA target's whole device arena; None for other
        targets or when a shape is symbolic."""
        return getattr(self._runner, "arena_bytes", None)

    def profile(self, reset: bool = False) -> list[dict]:
        """Time per kernel of a C executable compiled with ``profile=True``, slowest first:
        dicts of ``kernel`` (its function), ``what`` (op or fused group, result type),
        ``calls`` and ``seconds`` since it was compiled (or last reset). ``reset`` zeroes the
        counters after reading them."""
        if not getattr(self._runner, "profiled", False):
            raise GradcError(f"profile: expected an executable of target 'c' compiled with "
                             f"profile=True, got target {self.target!r}"
                             + (" without it" if self.target == "c" else ""))
        return self._runner.profile(reset)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"<Executable {self.graph.name} target={self.target}>"


Bindings = tuple[tuple[str, int], ...]  # (symbol, size) pairs, in the order of ``free``


class SizedExecutables:
    """Executables of one graph, each compiled for the sizes its calls bind, made on first use.

    A graph whose sizes are symbolic runs on the C target with every intermediate value
    allocated per call; compiled with its symbols bound (``compile(shapes=...)``) it plans them
    in one arena that every later call reuses. A training loop calls with one batch size, and
    perhaps a smaller last batch: ``select`` compiles one executable per set of sizes the
    arrays give the symbols that ``shapes`` leaves ``free``, up to ``limit`` sets; calls with
    any further set share one executable compiled with those symbols free, so a loop over
    many sizes compiles at most ``limit + 1`` times. ``limit=0``: never bind (one executable,
    compiled with ``shapes`` alone, for targets that plan nothing from sizes). ``make(shapes)``
    compiles (``gradc.compile`` with every other option fixed)."""

    def __init__(self, graph: Graph, make: Callable[[dict[str, int]], Executable],
                 shapes: Mapping[str, int] | None = None, limit: int = 4) -> None:
        self.graph = graph
        self._make = make
        self._shapes = dict(shapes or {})
        symbols = {s for v in graph.inputs for s in v.type.symbols}
        self.free = sorted(symbols - set(self._shapes))
        self.limit = limit
        self.executables: dict[Bindings, Executable] = {}  # () for the unbound one
        self._by_shapes: dict[tuple, Executable] = {}  # the arrays' shapes -> executable
        self.last: Executable | None = None  # the executable of the last ``select``
        if not self.free or limit <= 0:  # one executable for every call: compiled now
            self.last = self._unbound()

    def _unbound(self) -> Executable:
        exe = self.executables.get(())
        if exe is None:
            exe = self.executables[()] = self._make(dict(self._shapes))
        return exe

    def select(self, arrays: Mapping[str, Any]) -> Executable:
        """The executable for these arrays (the graph's inputs), compiled now if needed. The
        sizes are checked first (``bind_inputs``: an InputError compiles nothing)."""
        shapes = tuple(getattr(arrays.get(v.name), "shape", None) for v in self.graph.inputs)
        exe = self._by_shapes.get(shapes)
        if exe is None:
            exe = self._select(arrays)
            if len(self._by_shapes) < 64:
                self._by_shapes[shapes] = exe
        self.last = exe
        return exe

    def _select(self, arrays: Mapping[str, Any]) -> Executable:
        if not self.free or self.limit <= 0:
            return self._unbound()
        bound = bind_inputs(self.graph, dict(arrays), self._shapes)
        key = tuple((s, bound[s]) for s in self.free)
        exe = self.executables.get(key)
        if exe is None:
            if sum(1 for k in self.executables if k) >= self.limit:
                return self._unbound()
            exe = self.executables[key] = self._make({**self._shapes, **dict(key)})
        return exe
