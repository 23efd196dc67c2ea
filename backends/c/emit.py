"""Graph -> C source: one static function per node (or fused group), one entry function.

The entry function is ``int gradc_entry(const int64_t *S, void *const *A, int nt)``: ``S`` holds
the symbol values (order: ``Program.symbols``), ``A`` the input pointers then the output
pointers (buffers allocated by the caller), ``nt`` the thread count (0: OpenMP's default). It
returns 0, or 1 when an allocation failed. Intermediate values get 64-byte aligned buffers
(``gc_alloc``), freed after their last use; ``reshape`` of an intermediate aliases its operand;
constants are static arrays of bit patterns. No user-supplied name or string reaches the
source: values are numbered, and the only comments name registry op names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir.core import Graph, Node, Value, parameters_as_inputs
from gradc.ir.fused import anchors_group, violations

from gradc.backends.c import elementwise_math as math_kernels
from gradc.backends.c import reduce as reduce_kernels
from gradc.backends.c import movement as movement_kernels
from gradc.backends.c import conv as conv_kernels
from gradc.backends.c import gemm as gemm_kernels
from gradc.backends.c import batch_norm as batch_norm_kernels
from gradc.backends.c import training as training_kernels
from gradc.backends.c import normalization as normalization_kernels
from gradc.backends.c import gather as gather_kernels
from gradc.backends.c.kernel import Kernel
from gradc.backends.c.pool import emit_max_pooling, emit_max_pooling_grad
from gradc.backends.c.resample import emit_resample, emit_resample_grad
from gradc.backends.c.slice_grad import emit_slice_grad
from gradc.backends.c.loops import emit_copy, emit_elementwise, emit_reduce_sum, emit_slice
from gradc.backends.c.prelude import PRELUDE
from gradc.backends.c.scalar import SCALAR
from gradc.backends.c.ctypes_map import Dims, ctype
from gradc.backends.c.writer import CWriter

Emitter = Callable[[Kernel], None]


def _emitters() -> dict[str, Emitter]:
    table: dict[str, Emitter] = {op: emit_elementwise for op in SCALAR}
    table.update({
        "slice": emit_slice, "slice_grad": emit_slice_grad, "reduce_sum": emit_reduce_sum,
        "max_pooling": emit_max_pooling, "max_pooling_grad": emit_max_pooling_grad,
        "resample": emit_resample, "resample_grad": emit_resample_grad, "reshape": emit_copy,
    })
    table.update(math_kernels.EMITTERS)
    table.update(reduce_kernels.EMITTERS)
    table.update(movement_kernels.EMITTERS)
    table.update(conv_kernels.EMITTERS)
    table.update(gemm_kernels.EMITTERS)
    table.update(batch_norm_kernels.EMITTERS)
    table.update(training_kernels.EMITTERS)
    table.update(normalization_kernels.EMITTERS)
    table.update(gather_kernels.EMITTERS)
    return table


EMITTERS = _emitters()
SPECIAL = ("constant", "fused")  # handled by the program builder itself


@dataclass
class Program:
    """The generated C text and what the runtime needs to call it."""

    source: str
    symbols: list[str]
    inputs: list[Value]
    outputs: list[Value]
    in_place: dict[int, int] = field(default_factory=dict)  # output index -> input index
    arena_bytes: int | None = None  # the planned arena of intermediates (None: malloc per value)
    kernels: list[str] = field(default_factory=list)  # a label per kernel (profile order)
    profile: bool = False  # kernels are timed (gradc_profile)


def check_supported(graph: Graph) -> None:
    """Raise UnsupportedError listing every op (also inside fused bodies) the C target lacks."""
    missing: set[str] = set()

    def walk(g: Graph) -> None:
        for n in g.nodes:
            if n.body is not None:
                walk(n.body)
            elif n.op not in EMITTERS and n.op not in SPECIAL:
                missing.add(n.op)

    walk(graph)
    if missing:
        raise UnsupportedError(f"c target: expected operators with a C lowering, got "
                               f"{', '.join(sorted(missing))}")


@dataclass
class _Plan:
    dims: Dims
    alias: dict[Value, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    epilogue: dict[Node, str] = field(default_factory=dict)  # kernel -> op applied as it stores

    def resolve(self, v: Value) -> Value:
        seen = 0
        while v in self.alias and seen < 10_000:
            v, seen = self.alias[v], seen + 1
        return v


def _group_ok(n: Node, dims: Dims) -> bool:
    """True when a fused node is a legal group (``gradc.ir.fused``) that runs as one kernel."""
    kind = n.attrs.get("kind")
    return (kind == "elementwise" or anchors_group(kind)) and not violations(n, dims)


def _flatten(g: Graph, plan: _Plan) -> None:
    for n in g.nodes:
        if n.body is not None and not _group_ok(n, plan.dims):
            for bi, oi in zip(n.body.inputs, n.inputs):
                plan.alias[bi] = oi
            _flatten(n.body, plan)
            for oo, bo in zip(n.outputs, n.body.outputs):
                plan.alias[oo] = bo
        else:
            plan.nodes.append(n)


def _relu_epilogues(graph: Graph, plan: _Plan) -> None:
    """A relu whose operand is a forward convolution's float32/float64 result that nothing else
    reads runs as that convolution's epilogue: the kernel stores ``v > 0 ? v : +0`` (the relu
    kernel's own expression) for each finished sum ``v`` (after the bias), and the relu's result
    becomes an alias of the convolution's. One pass over the result fewer (squeezenet's layers).
    """
    outs = {plan.resolve(v) for v in graph.outputs}
    readers: dict[Value, int] = {}
    for n in plan.nodes:
        for u in n.inputs:
            r = plan.resolve(u)
            readers[r] = readers.get(r, 0) + 1
    kernels = set(plan.nodes)
    drop = []
    for n in plan.nodes:
        if n.op != "relu" or n.body is not None:
            continue
        u = plan.resolve(n.inputs[0])
        c = u.producer
        if (c is None or c not in kernels or c.op != "convolution" or c in plan.epilogue
                or c.attrs.get("direction") != "forward" or readers.get(u) != 1 or u in outs
                or u.type != n.outputs[0].type
                or u.type.dtype.name not in ("float32", "float64")):
            continue
        plan.epilogue[c] = "relu"
        plan.alias[n.outputs[0]] = u
        drop.append(n)
    dropped = set(drop)
    plan.nodes[:] = [n for n in plan.nodes if n not in dropped]


def _symbols(graph: Graph, nodes: list[Node]) -> list[str]:
    seen: dict[str, None] = {}

    def add(v: Value) -> None:
        for d in v.type.shape:
            if isinstance(d, str):
                seen.setdefault(d)

    for v in graph.inputs:
        add(v)
    for n in nodes:
        for v in n.inputs + n.outputs:
            add(v)
        if n.body is not None:
            for v in n.body.values():
                add(v)
    return list(seen)


def generate(graph: Graph, shapes: Mapping[str, int] | None = None,
             in_place: Mapping[str, str] | None = None, profile: bool = False) -> Program:
    """The C program of a verified graph (UnsupportedError before any text is produced);
    parameters are arguments like inputs (the Executable feeds their values).

    ``in_place`` maps output names to input (or parameter) names whose buffer the output may
    overwrite (``update_in_place``, see ``_plan_in_place``); ``Program.in_place`` holds the
    pairs that were granted."""
    graph = parameters_as_inputs(graph)
    check_supported(graph)
    plan = _Plan(Dims([], dict(shapes or {})))
    _flatten(graph, plan)
    _relu_epilogues(graph, plan)
    symbols = _symbols(graph, plan.nodes)
    plan.dims = Dims(symbols, dict(shapes or {}))
    _hoist_sinks(plan)
    granted = _plan_in_place(graph, plan, in_place or {})
    granted = _checks_before_writes(graph, plan, granted)
    return _Builder(graph, plan, symbols, granted, profile).build()


def _checks_before_writes(graph: Graph, plan: _Plan, granted: dict[int, int]) -> dict[int, int]:
    """Every kernel that may raise an input error (``gather``'s range check) runs before the
    first in-place write, so that a call that raises leaves its inputs as they were
    (``gather_kernels.checks_first``); a write that cannot move loses its grant."""
    if not granted or not gather_kernels.raises(plan.nodes):
        return granted
    outs = [plan.resolve(v) for v in graph.outputs]
    writers: dict[Node, list[int]] = {}
    for j in granted:
        writers.setdefault(outs[j].producer, []).append(j)  # type: ignore[arg-type]
    reads = {n: {plan.resolve(u).producer for u in n.inputs} for n in plan.nodes}
    checks = gather_kernels.barriers(plan.nodes, plan.resolve)
    dropped = gather_kernels.checks_first(plan.nodes, writers, reads,  # type: ignore[arg-type]
                                          checks)
    return {j: i for j, i in granted.items() if j not in dropped}


SMALL_RESULTS = 1024  # elements: a kernel whose results are all this small runs early


def _hoist_sinks(plan: _Plan) -> None:
    """Moves each kernel whose results no other kernel reads (the graph's outputs only: an
    optimizer's update of a parameter and its moments, a returned gradient), and each kernel
    whose results are small (``SMALL_RESULTS`` elements in all, static), up to just after the
    last kernel it depends on; the others keep their order.

    A training step's updates come last in its graph, long after the backward pass produced
    their gradients; run there, each re-reads its gradient from memory, and the gradient's
    buffer stays live to the end of the step. Run early, the gradient (and the parameter, which
    the backward has just read) are still in cache and the gradient's buffer is freed at once.
    The small kernels are what the updates share (the bias corrections of the step number) or
    reduce a large value to (a bias gradient); moved up, no value but their small results lives
    longer. ``_plan_in_place`` may still move an update down, after the last reader of the
    buffer it overwrites.

    The order stays topological: a moved kernel follows its dependencies (fixed ones by
    position, moved ones by the same rule, earlier in the original order), and a fixed kernel
    that reads a moved one still follows it (the moved one's dependencies all precede it).
    """
    read = {plan.resolve(u) for n in plan.nodes for u in n.inputs}

    def movable(n: Node) -> bool:
        if not n.outputs:
            return False
        if not any(v in read for v in n.outputs):
            return True
        total = 0
        for v in n.outputs:
            size = plan.dims.prod_static(v.type.shape)
            if size is None:
                return False
            total += size
        return total <= SMALL_RESULTS

    fixed: dict[Node, int] = {}
    anchor: dict[Node, int] = {}
    after: dict[int, list[Node]] = {}
    for n in plan.nodes:
        if not movable(n):
            fixed[n] = len(fixed)
            continue
        deps = [fixed[p] if p in fixed else anchor[p] for u in n.inputs
                if (p := plan.resolve(u).producer) in fixed or p in anchor]
        anchor[n] = max(deps, default=-1)
        after.setdefault(anchor[n], []).append(n)
    order = after.get(-1, [])
    for n, k in fixed.items():
        order.append(n)
        order.extend(after.get(k, []))
    plan.nodes[:] = order


def _buffer_root(plan: _Plan, v: Value, outs: set[Value]) -> Value:
    """The value whose buffer ``v`` lives in: through aliases and ``reshape`` views (an
    output's reshape has a buffer of its own)."""
    v = plan.resolve(v)
    while v.producer is not None and v.producer.op == "reshape" and v not in outs:
        v = plan.resolve(v.producer.inputs[0])
    return v


def _elementwise(n: Node) -> bool:
    """A kernel that loads each element of its operands before it stores that element."""
    return (n.attrs.get("kind") == "elementwise" if n.body is not None
            else EMITTERS.get(n.op) is emit_elementwise)


def _plan_in_place(graph: Graph, plan: _Plan, wanted: Mapping[str, str]) -> dict[int, int]:
    """Which outputs are written into an input's buffer; reorders ``plan.nodes`` to allow it.

    A pair (output ``o``, input ``x``) is granted when both have one type, ``o`` is computed by
    a kernel ``W`` (not an input, a constant or another output's value) and

    - ``W`` reads ``x``'s buffer only as an elementwise kernel whose operand has ``o``'s shape:
      each element is loaded into a local before the element is stored (``ExprGen``), so the
      load of ``x[i]`` precedes the store of ``o[i]``; or ``W`` is ``random_generator`` writing
      its next state over its state (it reads the six words into locals first); no other
      kernel kind may overwrite what it reads;
    - every other kernel that reads ``x`` (also through a ``reshape`` alias) runs before ``W``:
      ``W`` is moved down to just after the last one, which is allowed when no kernel in
      between reads a result of ``W``.

    Other pairs are not granted: their outputs get fresh buffers as usual.
    """
    if not wanted:
        return {}
    in_index = {v.name: i for i, v in enumerate(graph.inputs)}
    outs = [plan.resolve(v) for v in graph.outputs]
    out_set = set(outs)

    def root(v: Value) -> Value:
        return _buffer_root(plan, v, out_set)

    nodes = plan.nodes

    def reads(n: Node, x: Value) -> list[Value]:
        return [u for u in n.inputs if root(u) is x]

    pairs: dict[int, int] = {}
    for j, o_val in enumerate(graph.outputs):
        name = wanted.get(o_val.name)
        if name is None or name not in in_index:
            continue
        i = in_index[name]
        x, o = graph.inputs[i], outs[j]
        w = o.producer
        if (o.type != x.type or w is None or w.op == "constant" or w not in nodes
                or outs.count(o) != 1 or i in pairs.values()):
            continue
        state_update = w.op == "random_generator" and o is w.outputs[1]
        if not state_update and any(not _elementwise(w) or u.type.shape != o.type.shape
                                    for u in reads(w, x)):
            continue  # the writer would overwrite elements it has still to read
        pairs[j] = i
    for _ in range(len(pairs) + 1):
        writers: dict[Node, list[Value]] = {}
        for j, i in pairs.items():
            writers.setdefault(outs[j].producer, []).append(graph.inputs[i])  # type: ignore
        moved_ok = True
        for w, xs in writers.items():
            pos = nodes.index(w)
            last = max((k for k, n in enumerate(nodes) if n is not w
                        and any(reads(n, x) for x in xs)), default=-1)
            if last <= pos:
                continue
            results = set(w.outputs)
            if any(root(u) in results or u in results for n in nodes[pos + 1:last + 1]
                   for u in n.inputs):
                for j in [j for j, i in pairs.items() if outs[j].producer is w]:
                    del pairs[j]
                moved_ok = False
                break
            nodes.remove(w)
            nodes.insert(last, w)  # `last` shifted down by one: just after the last reader
        if moved_ok:
            break
    # A final check of the order: every reader of a granted input precedes its writer.
    for j, i in list(pairs.items()):
        w = outs[j].producer
        pos = nodes.index(w)  # type: ignore[arg-type]
        if any(k > pos and reads(n, graph.inputs[i]) for k, n in enumerate(nodes)):
            del pairs[j]
    return pairs


class _Builder:
    """Assigns buffers and writes the kernels and the entry function."""

    def __init__(self, graph: Graph, plan: _Plan, symbols: list[str],
                 in_place: dict[int, int] | None = None, profile: bool = False) -> None:
        self.graph = graph
        self.profile = profile
        self.labels: list[str] = []
        self.arena_bytes: int | None = None
        self.in_place = in_place or {}
        self.plan = plan
        self.dims = plan.dims
        self.symbols = symbols
        self.buf: dict[Value, str] = {}
        self.owned: dict[str, Value] = {}  # malloc'd buffer name -> value
        self.statics: list[str] = []
        self.kernels: list[CWriter] = []

    def build(self) -> Program:
        """Assemble the whole program."""
        g = self.graph
        nin = len(g.inputs)
        for i, v in enumerate(g.inputs):
            self.buf[v] = f"A[{i}]"
        outs = [self.plan.resolve(v) for v in g.outputs]
        for j, v in enumerate(outs):
            k = self.in_place.get(j)
            self.buf[v] = f"A[{nin + j}]" if k is None else f"A[{k}]"
        steps = self._steps(set(outs))
        entry = CWriter()
        self._entry(entry, steps)  # plans the arena, which the header reports
        w = CWriter()
        _header(w, g, self.symbols, self.dims, self.in_place, self.arena_bytes,
                gather_kernels.raises(self.plan.nodes))
        w.blank()
        w.line(*PRELUDE.splitlines())
        if gather_kernels.raises(self.plan.nodes):  # the record of a run-time input error
            w.blank()
            w.line(*gather_kernels.ERROR_RECORD.splitlines())
        if self.statics:
            w.blank()
            w.line(*self.statics)
        for kernel in self.kernels:
            w.blank()
            w.nest(kernel)
        w.blank()
        w.nest(entry)
        return Program(w.text() + "\n", self.symbols, list(g.inputs), list(g.outputs),
                       dict(self.in_place), self.arena_bytes, list(self.labels), self.profile)

    # -- planning ------------------------------------------------------------------------
    def _steps(self, outs: set[Value]) -> list[tuple[Node, str | None]]:
        """Assign buffers and kernels; returns (node, kernel call or None) in order."""
        nodes = self.plan.nodes
        last_read: dict[Value, int] = {}  # buffer (its root value) -> last node reading it
        for i, n in enumerate(nodes):
            for u in n.inputs:
                last_read[_buffer_root(self.plan, u, outs)] = i
        steps = []
        for i, n in enumerate(nodes):
            if n.op == "constant":
                steps.append((n, self._constant(n, outs)))
                continue
            if n.op == "reshape" and n.outputs[0] not in outs:
                self.buf[n.outputs[0]] = self.buf[self.plan.resolve(n.inputs[0])]
                steps.append((n, None))
                continue
            taken: set[str] = set()
            for v in n.outputs:
                if v not in self.buf:
                    name = self._take_over(n, i, v, outs, last_read, taken)
                    if name is None:
                        name = f"b{len(self.owned)}"
                        self.owned[name] = v
                    self.buf[v] = name
                    taken.add(name)
            steps.append((n, self._kernel(n)))
        return steps

    def _take_over(self, n: Node, i: int, v: Value, outs: set[Value],
                   last_read: Mapping[Value, int], taken: set[str]) -> str | None:
        """An intermediate buffer that elementwise node ``n`` (step ``i``) may write its result
        ``v`` into: an operand of ``v``'s type that no later node reads (an output has its own
        buffer, never the arena's). Each element is loaded into a local before the element is
        stored (``ExprGen``), so the load of ``x[i]`` precedes the store of ``v[i]`` (as for
        ``_plan_in_place``); the kernel binds one parameter for both. A relu over its dying
        input, an accumulation of gradients: the arena then holds one buffer, not two."""
        if not _elementwise(n):
            return None
        for u in n.inputs:
            r = _buffer_root(self.plan, u, outs)
            b = self.buf.get(r, "")
            if (b not in self.owned or b in taken or last_read.get(r) != i
                    or u.type != v.type or self._bytes(self.owned[b]) != self._bytes(v)):
                continue
            if all(w.type.shape == v.type.shape for w in n.inputs
                   if _buffer_root(self.plan, w, outs) is r):
                return b
        return None

    def _constant(self, n: Node, outs: set[Value]) -> str | None:
        v = n.outputs[0]
        arr = np.ascontiguousarray(n.attrs["value"])
        t = ctype(v.type.dtype)
        name = f"gc_const{len(self.statics)}"
        bits = arr.reshape(-1).view(np.dtype(f"u{arr.dtype.itemsize}"))
        data = ", ".join(f"0x{int(b):x}u" for b in bits)
        self.statics.append(f"static const {t.bits} {name}[{bits.size}] = {{{data}}};")
        if v in outs:
            size = bits.size * arr.dtype.itemsize
            return f"memcpy({self.buf[v]}, {name}, {size});"
        self.buf[v] = f"(void *){name}"
        return None

    def _kernel(self, n: Node) -> str:
        """Emit the function of one node; returns the C call."""
        name = f"k{len(self.kernels)}"
        params: dict[str, str] = {}  # buffer -> parameter
        ptr: dict[Value, str] = {}
        order: list[tuple[str, Value, bool]] = []

        def bind(v: Value, outer: Value, is_out: bool) -> None:
            b = self.buf[self.plan.resolve(outer)]
            if b not in params:
                params[b] = f"p{len(params)}"
                order.append((b, outer, is_out))
            ptr[v] = params[b]

        for v in n.outputs:
            bind(v, v, True)
        for v in n.inputs:
            bind(v, v, False)
        if n.body is not None:
            for bv, ov in zip(n.body.inputs, n.inputs):
                bind(bv, ov, False)
            for bv, ov in zip(n.body.outputs, n.outputs):
                bind(bv, ov, True)
        k = Kernel(name, n, self.dims, ptr, epilogue=self.plan.epilogue.get(n))
        if n.body is None:
            EMITTERS[n.op](k)
        elif n.attrs["kind"] == "elementwise":
            emit_elementwise(k)
        else:
            EMITTERS[n.attrs["kind"]](k)
        sig = []
        for b, v, is_out in order:
            p = params[b]
            ty = k.types.get(p, ctype(v.type.dtype).store)
            sig.append(f"{ty} *restrict {p}" if is_out else f"const {ty} *restrict {p}")
        head = f"static int {name}(const int64_t *restrict S, int nt, {', '.join(sig)})"
        # parameters the body never read (e.g. expand's shape operand) are voided
        unused = "".join(f" (void){params[b]};" for b, _, _ in order if params[b] not in k.read)
        w = CWriter()
        w.comment(n.op if n.body is None else "fused")
        with w.block(head):
            w.line("(void)S; (void)nt;" + unused)
            w.nest(k.code)
            w.line("return 0;")
        self.kernels.append(w)
        label = kernel_label(n)
        self.labels.append(label if k.epilogue is None else f"{label} + {k.epilogue}")
        args = []
        for b, v, is_out in order:
            ty = k.types.get(params[b], ctype(v.type.dtype).store)
            args.append(f"({'' if is_out else 'const '}{ty} *){b}")
        return f"rc = {name}(S, nt, {', '.join(args)});"

    # -- entry -------------------------------------------------------------------------------
    def _entry(self, w: CWriter, steps: list[tuple[Node, str | None]]) -> None:
        """Write ``gradc_entry_arena`` and ``gradc_entry`` (see ``_arena`` for the buffers)."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, (n, _) in enumerate(steps):
            for v in n.inputs:
                b = self.buf[self.plan.resolve(v)]
                if b in self.owned:
                    last[b] = i
            for v in n.outputs:
                b = self.buf.get(v, "")
                if b in self.owned:
                    first.setdefault(b, i)
                    last[b] = max(last.get(b, i), i)
        sizes = {b: self._bytes(v) for b, v in self.owned.items()}
        offsets = None
        if all(isinstance(z, int) for z in sizes.values()):
            offsets, total = plan_arena({b: (first.get(b, 0), last.get(b, 0), int(z))
                                         for b, z in sizes.items()})
            self.arena_bytes = total
        nk = len(self.kernels)
        if self.profile:
            w.line(f"static double gc_prof[{2 * max(nk, 1)}];",
                   "GC_INLINE double gc_now(void) {",
                   "  struct timespec ts; timespec_get(&ts, TIME_UTC);",
                   "  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;", "}")
            with w.block("int gradc_profile(double *out, int reset)"):
                w.line(f"for (int i = 0; i < {2 * nk}; i++) {{ if (out) out[i] = gc_prof[i]; "
                       "if (reset) gc_prof[i] = 0; }", f"return {nk};")
            w.blank()
        parts = [range(i, min(i + STEPS_PER_PART, len(steps)))
                 for i in range(0, len(steps), STEPS_PER_PART)]
        for p, part in enumerate(parts):
            head = f"GC_NOINLINE static int gc_part{p}(const int64_t *S, void *const *A, int nt, "
            with w.block(head + "void **B, char *arena)"):
                w.line("int rc = 0;", "(void)S; (void)A; (void)nt; (void)B; (void)arena;")
                for i in part:
                    n, call = steps[i]
                    for v in n.outputs:
                        b = self.buf.get(v, "")
                        if b in self.owned and self.owned[b] is v:
                            if offsets is not None:
                                w.line(f"{_slot(b)} = arena + {offsets[b]};")
                            else:
                                w.line(f"{_slot(b)} = gc_alloc((size_t){sizes[b]});",
                                       f"if (!{_slot(b)}) return 1;")
                    if call is not None:
                        text = _BUFFER.sub(lambda m: _slot(m.group(0)), call)
                        if self.profile and call.startswith("rc = k"):
                            kid = int(call[len("rc = k"):call.index("(")])
                            w.line("{ const double t0 = gc_now(); " + text,
                                   f"  gc_prof[{2 * kid}] += gc_now() - t0; "
                                   f"gc_prof[{2 * kid + 1}] += 1; }}")
                        else:
                            w.line(text)
                        if call.startswith("rc ="):
                            w.line("if (rc) return rc;")
                    if offsets is None:
                        w.line(*(f"free({_slot(b)}); {_slot(b)} = NULL;"
                                 for b, j in last.items() if j == i))
                w.line("return rc;")
            w.blank()
        nbuf = len(self.owned)
        arena = self.arena_bytes or 0
        with w.block("int64_t gradc_arena_bytes(void)"):
            w.line(f"return {arena};")
        with w.block("int gradc_entry_arena(const int64_t *S, void *const *A, int nt, "
                     "void *arena)"):
            w.line("int rc = 0;")
            with w.conditional("#ifdef _OPENMP"):
                w.line("if (nt <= 0) nt = omp_get_max_threads();")
                w.otherwise()
                w.line("nt = 1;")
            w.line(f"void **B = (void **)calloc({max(nbuf, 1)}, sizeof(void *));",
                   "if (!B) return 1;")
            for p in range(len(parts)):
                w.line(f"rc = gc_part{p}(S, A, nt, B, (char *)arena);", "if (rc) goto done;")
            w.label("done")
            if offsets is None:
                w.line(f"for (int64_t i = 0; i < {nbuf}; i++) free(B[i]);")
            w.line("free(B);", "return rc;")
        with w.block("int gradc_entry(const int64_t *S, void *const *A, int nt)"):
            if arena:
                w.line(f"void *arena = gc_alloc({arena});", "if (!arena) return 1;",
                       "const int rc = gradc_entry_arena(S, A, nt, arena);", "free(arena);",
                       "return rc;")
            else:
                w.line("return gradc_entry_arena(S, A, nt, NULL);")

    def _bytes(self, v: Value) -> int | str:
        """The bytes of ``v``'s buffer: an int when its shape is static, else a C expression."""
        width = v.type.dtype.numpy.itemsize
        total = width
        for d in v.type.shape:
            size = self.dims.static(d)
            if size is None:
                return f"{self.dims.prod(v.type.shape)} * {width}"
            total *= size
        return total


def kernel_label(n: Node) -> str:
    """What a kernel computes, for profiles: its op (a fused group's kind and ops) and the dtype
    and shape of its first result. Registry op names only: no user name."""
    v = n.outputs[0]
    shape = "x".join(str(d) for d in v.type.shape)
    what = n.op
    if n.body is not None:
        names = list(dict.fromkeys(m.op for m in n.body.nodes if m.op != "constant"))
        more = f", +{len(names) - 6}" if len(names) > 6 else ""
        what = f"fused {n.attrs['kind']} ({', '.join(names[:6])}{more})"
    anchor = n if n.body is None else next(
        (m for m in n.body.nodes if m.op.startswith("convolution")), n)
    if anchor.op.startswith("convolution"):  # which way, and the filter's spatial size
        a = anchor.attrs
        taps = "x".join(str(d) for d in (anchor.inputs[1].type.shape[2:]
                                          if anchor.op == "convolution"
                                          else a["output_sizes"][2:]))
        what += (f" [{a['direction']} {taps} stride {'x'.join(map(str, a['strides']))}"
                 f"{' groups ' + str(a['group_count']) if a['group_count'] > 1 else ''}]")
    return f"{what} -> {v.type.dtype.name}[{shape}]"


ALIGN = 64  # bytes: every buffer of the arena starts on a cache line


def plan_arena(lives: Mapping[str, tuple[int, int, int]]) -> tuple[dict[str, int], int]:
    """Offsets of buffers in one arena, from their lifetimes: (first step, last step, bytes).

    Two buffers whose step ranges overlap never overlap in memory. Greedy by size (largest
    first), each at the lowest offset that is free during its whole life: near the peak of live
    bytes for the nets of a training step (the benchmark prints both). Returns (offsets, total).
    """
    order = sorted(lives, key=lambda b: (-lives[b][2], lives[b][0], b))
    n = len(order)
    f = np.empty(n, np.int64)
    la = np.empty(n, np.int64)
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    offsets: dict[str, int] = {}
    total = 0
    for k, b in enumerate(order):
        s, e, size = lives[b]
        size = max(ALIGN, -(-size // ALIGN) * ALIGN)
        live = (f[:k] <= e) & (la[:k] >= s)
        off = 0
        if live.any():
            idx = np.argsort(lo[:k][live], kind="stable")
            starts, ends = lo[:k][live][idx], hi[:k][live][idx]
            for a, z in zip(starts.tolist(), ends.tolist()):
                if a - off >= size:
                    break
                off = max(off, z)
        f[k], la[k], lo[k], hi[k] = s, e, off, off + size
        offsets[b] = off
        total = max(total, off + size)
    return offsets, total


# The entry's steps (allocate, call a kernel, free) are written in functions of this many steps:
# a C compiler's register allocation is superlinear in the size of one function (one function
# of 2,500 steps did not build in 300 s; in parts of 64, the build time is linear in the steps).
STEPS_PER_PART = 64
_BUFFER = re.compile(r"\bb[0-9]+\b")  # the temporary buffers b0, b1, ... in a kernel call


def _slot(b: str) -> str:
    """Temporary buffer ``bK`` lives in ``B[K]``, an array that every part of the entry sees."""
    return f"B[{b[1:]}]"


def _header(w: CWriter, g: Graph, symbols: list[str], dims: Dims,
            in_place: Mapping[int, int], arena: int | None = None,
            checks: bool = False) -> None:
    """Write the calling convention of ``gradc_entry``, so the file can be used on its own.

    No user name appears, even in this comment: arrays are described by position, dtype and
    shape, symbolic dims as ``S[i]`` in the order of ``S``."""
    index = {name: i for i, name in enumerate(symbols)}

    def ty(v: Value) -> str:
        text = ",".join(str(dims.static(d)) if dims.static(d) is not None
                        else f"S[{index[d]}]" if d in index else "?" for d in v.type.shape)
        return f"{v.type.dtype.name}[{text}]"
    n = len(g.inputs)
    w.comment("Generated by gradc: one entry function for the whole graph.",
              "int gradc_entry(const int64_t *S, void *const *A, int nt)",
              f"  S: the values of the graph's {len(symbols)} symbolic dims (those fixed at "
              "compile time must be given the same values)",
              "  A: contiguous row-major arrays, the graph's inputs then its outputs, in graph "
              "order",
              "     (the caller allocates both):",
              *(f"    A[{i}] input {i}: {ty(v)}" for i, v in enumerate(g.inputs)),
              *(f"    A[{n + j}] output {j}: {ty(v)}" + (
                  f" (written in place into A[{in_place[j]}]; A[{n + j}] is not used)"
                  if j in in_place else "") for j, v in enumerate(g.outputs)),
              "  nt: OpenMP threads (<= 0: OpenMP's default)",
              "  returns 0, or non-zero when a temporary buffer could not be allocated.",
              *(["  returns 2 when an input value is out of range (an index; nothing is "
                 "written): gradc_error(int64_t out[12]) gives op, value, size, rank, "
                 "position"] if checks else []),
              "int gradc_entry_arena(const int64_t *S, void *const *A, int nt, void *arena)",
              "  the same, with the intermediate values in a caller's arena of "
              "gradc_arena_bytes() bytes",
              f"  ({ARENA_LINE} {arena} bytes)" if arena is not None else
              "  (arena: none; intermediate values of symbolic shape are allocated per call)")


ARENA_LINE = "planned arena of intermediate values:"
