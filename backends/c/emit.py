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
from gradc.backends.plan import (Memory, Plan, Sizes, assign_buffers, checks_before_writes,
                                 flatten, hoist_sinks, plan_arena, plan_in_place, raises,
                                 relu_epilogues)

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
from gradc.backends.c.groups import GROUP_EMITTERS, form_groups
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
    overwrite (``update_in_place``, see ``gradc.backends.plan.plan_in_place``);
    ``Program.in_place`` holds the pairs that were granted. The kernel order, the buffers and
    the arena come from the shared plan (``gradc.backends.plan``)."""
    graph = parameters_as_inputs(graph)
    check_supported(graph)
    plan = Plan(Sizes(shapes or {}))
    flatten(graph, plan)
    relu_epilogues(graph, plan)
    form_groups(graph, plan)
    symbols = _symbols(graph, plan.nodes)
    dims = Dims(symbols, dict(shapes or {}))
    hoist_sinks(plan)
    granted = plan_in_place(graph, plan, in_place or {}, KERNELS)
    granted = checks_before_writes(graph, plan, granted)
    memory = assign_buffers(graph, plan, granted, KERNELS)
    return _Builder(graph, plan, dims, memory, symbols, granted, profile).build()


class _CKernels:
    """What the C kernels guarantee to the memory plan (``gradc.backends.plan``)."""

    def elementwise(self, n: Node) -> bool:
        """A kernel that loads each element of its operands (into a local, ``ExprGen``) before
        it stores that element."""
        return (n.attrs.get("kind") == "elementwise" if n.body is not None
                else EMITTERS.get(n.op) is emit_elementwise)

    def reads_all_first(self, n: Node, out: Value) -> bool:
        """``random_generator`` reads the six words of its state into locals before it writes
        its next state."""
        return n.op == "random_generator" and out is n.outputs[1]


KERNELS = _CKernels()


class _Builder:
    """Assigns buffers and writes the kernels and the entry function."""

    def __init__(self, graph: Graph, plan: Plan, dims: Dims, memory: Memory,
                 symbols: list[str], in_place: dict[int, int] | None = None,
                 profile: bool = False) -> None:
        self.graph = graph
        self.profile = profile
        self.labels: list[str] = []
        self.arena_bytes: int | None = None
        self.in_place = in_place or {}
        self.plan = plan
        self.memory = memory
        self.dims = dims
        self.symbols = symbols
        nin = len(graph.inputs)
        # The C names of the plan's buffers: the caller's arrays A[...], the temporaries b<k>
        # (kept in B[k] by the entry), the constants' static arrays.
        names = {"input": lambda i: f"A[{i}]", "output": lambda j: f"A[{nin + j}]",
                 "temp": lambda k: f"b{k}", "constant": lambda c: f"(void *)gc_const{c}"}
        self.buf: dict[Value, str] = {v: names[b.kind](b.index)
                                      for v, b in memory.buffers.items()}
        self.owned: dict[str, Value] = {f"b{k}": v for k, v in enumerate(memory.owners)}
        self.statics: list[str] = []
        self.kernels: list[str] = []  # the text of each distinct kernel function
        self.distinct: dict[str, str] = {}  # a kernel's text (unnamed) -> its function's name

    def build(self) -> Program:
        """Assemble the whole program."""
        g = self.graph
        outs = [self.plan.resolve(v) for v in g.outputs]
        steps = self._steps(set(outs))
        entry = CWriter()
        self._entry(entry, steps)  # plans the arena, which the header reports
        w = CWriter()
        _header(w, g, self.symbols, self.dims, self.in_place, self.arena_bytes,
                raises(self.plan.nodes))
        w.blank()
        w.line(*PRELUDE.splitlines())
        if raises(self.plan.nodes):  # the record of a run-time input error
            w.blank()
            w.line(*gather_kernels.ERROR_RECORD.splitlines())
        if self.statics:
            w.blank()
            w.line(*self.statics)
        for kernel in self.kernels:
            w.blank()
            w.line(*kernel.splitlines())
        w.blank()
        w.nest(entry)
        return Program(w.text() + "\n", self.symbols, list(g.inputs), list(g.outputs),
                       dict(self.in_place), self.arena_bytes, list(self.labels), self.profile)

    # -- kernels -------------------------------------------------------------------------
    def _steps(self, outs: set[Value]) -> list[tuple[Node, str | None, int]]:
        """Write the kernels (buffers from the plan); returns (node, kernel call or None, the
        call's profile slot or -1)."""
        steps: list[tuple[Node, str | None, int]] = []
        for n in self.plan.nodes:
            if n.op == "constant":
                steps.append((n, self._constant(n, outs), -1))
            elif n in self.memory.views:
                steps.append((n, None, -1))
            else:
                steps.append((n, self._kernel(n), len(self.labels) - 1))
        return steps

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
        return None  # the plan made ``name`` the value's buffer (``Buffer("constant", c)``)

    def _kernel(self, n: Node) -> str:
        """Emit the function of one node, or reuse an identical one; returns the C call.

        A kernel reads and writes its buffers only through its parameters, so two nodes whose
        functions have the same text (the identical kernels of identical layers) share one C
        function: the compiler sees each distinct kernel once, and the compile time of a deep
        model grows with its distinct layers, not with its depth."""
        name = "GC_KERNEL_NAME"  # replaced by the function's name once its text is known
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
        elif n.attrs["kind"] in GROUP_EMITTERS:
            GROUP_EMITTERS[n.attrs["kind"]](k)
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
        text = w.text()
        name = self.distinct.get(text, "")
        if not name:
            name = f"k{len(self.kernels)}"
            self.distinct[text] = name
            self.kernels.append(text.replace("GC_KERNEL_NAME", name, 1))
        label = kernel_label(n)
        self.labels.append(label if k.epilogue is None else f"{label} + {k.epilogue}")
        args = []
        for b, v, is_out in order:
            ty = k.types.get(params[b], ctype(v.type.dtype).store)
            args.append(f"({'' if is_out else 'const '}{ty} *){b}")
        return f"rc = {name}(S, nt, {', '.join(args)});"

    # -- entry -------------------------------------------------------------------------------
    def _entry(self, w: CWriter, steps: list[tuple[Node, str | None, int]]) -> None:
        """Write ``gradc_entry_arena`` and ``gradc_entry`` (see ``_arena`` for the buffers)."""
        mem = self.memory
        last = {f"b{k}": i for k, i in mem.last.items()}
        sizes = {b: self._bytes(v) for b, v in self.owned.items()}
        offsets = None
        if mem.static_sizes():
            offsets, total = plan_arena(mem.lives())
            self.arena_bytes = total
        nk = len(self.labels)  # profile slots: one per kernel call
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
                    n, call, kid = steps[i]
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
                        if self.profile and kid >= 0:
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
