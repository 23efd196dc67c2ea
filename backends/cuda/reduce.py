"""Reductions (SPEC-training.md §14), softmax and log_softmax (§17): a thread per group
(softmax and log_softmax of long groups: a block per group, ``_softmax_rows``).

A group is one element of the result (the kept axes); its thread visits the members in nested
loops over the reduced axes, in increasing logical index -- the canonical order the references
use -- with the C target's accumulators: floating sums start at -0.0 (the identity of IEEE
addition, so the first term is taken exactly, as NumPy's ``cumsum`` does), float16 is widened
and rounded once on store, integer sums wrap in an unsigned type. Selections (§14.2) compare in
the compute type and copy the stored element. So every result is the reference's bits (the
transcendental functions of softmax aside: the GPU's ``exp``/``log`` in double are within an ulp
of glibc's, rounded once to the dtype). reduce_max_grad/reduce_min_grad write all of a group's
members from the group's thread: dY at the selected one, +0 at the others (one writer each).

Under ``sums="split"`` a floating reduce_sum or reduce_mean of many members into few groups is a
split sum (``split.py``: blocks of threads over parts of each group, a fixed tree, then the
parts in order), within SPEC-training.md §9.5's bound; each thread's sum starts at -0.0 as the
canonical one does. Integer sums wrap, so every order gives their bits: they stay canonical.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from gradc.ir.core import Value

from gradc.backends.c.ctypes_map import CType, ctype
from gradc.backends.c.scalar import wrap
from gradc.backends.cuda.kernel import BLOCK, CudaKernel, row_major, static_shape
from gradc.backends.cuda.split import Split, decompose, parts


def _widen(t: CType, e: str) -> str:
    return f"gc_h2f({e})" if t.is_f16 else e


def _store(t: CType, e: str) -> str:
    return f"gc_f2h({e})" if t.is_f16 else f"({t.store})({e})"


@contextmanager
def _groups(k: CudaKernel, x: Value, axes: Sequence[int]) -> Iterator[str]:
    """The grid-stride loop over groups (index ``g``, ``base`` declared); yields the C
    expression of a member's offset, valid inside ``_members``."""
    shape = static_shape(k, x.type.shape)
    kept = [a for a in range(len(shape)) if a not in axes]
    st = row_major(shape)
    count = 1
    for a in kept:
        count *= shape[a]
    with k.each(count, "g"):
        terms = []
        inner = 1
        for a in reversed(kept):
            c = "g" if inner == 1 else f"g / {inner}"
            terms.append(f"({c} % {shape[a]}) * {st[a]}")
            inner *= shape[a]
        k.code.line(f"const int64_t base = {' + '.join(terms) or '0'};")
        yield " + ".join(["base"] + [f"j{a} * {st[a]}" for a in axes])


def _members(k: CudaKernel, x: Value, axes: Sequence[int]) -> Any:
    """The nested loops over a group's members, in increasing logical index."""
    shape = static_shape(k, x.type.shape)
    heads = [f"for (int64_t j{a} = 0; j{a} < {shape[a]}; j{a}++)" for a in axes]
    return k.code.blocks(heads) if heads else k.code.block()


def _select(k: CudaKernel, xs: str, t: CType, x: Value, axes: Sequence[int], off: str,
            largest: bool, var: str, compute: str) -> None:
    """§14.2: ``bi`` = offset of the first extreme (NaN-ignoring), ``var`` its value."""
    cw = k.code
    cw.line("int64_t bi = -1;", f"{compute} {var} = 0;")
    op = ">" if largest else "<"
    better = (f"(v == v && ({var} != {var} || v {op} {var}))" if t.is_float
              else f"v {op} {var}")
    with _members(k, x, axes):
        cw.line(f"const int64_t o = {off};", f"const {compute} v = {_widen(t, f'{xs}[o]')};")
        with cw.block(f"if (bi < 0 || {better})"):
            cw.line("bi = o;", f"{var} = v;")


def emit_reduce_sum(k: CudaKernel) -> None:
    """Canonical sums (a copy when nothing is added)."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t, axes = ctype(x.type.dtype), n.attrs["axes"]
    shape = static_shape(k, x.type.shape)
    xs, ys = k.param(x), k.param(y)
    if all(shape[a] == 1 for a in axes):
        k.as_bits(x, y)
        with k.each(_prod(shape)) as i:
            k.code.line(f"{ys}[{i}] = {xs}[{i}];")
        return
    if t.is_float and _split_sum(k, x, y, axes, None):
        return
    acc = t.acc if t.is_float else t.uarith
    with _groups(k, x, axes) as off:
        k.code.line(f"{acc} acc = {'-0.0' if t.is_float else '0'};")
        with _members(k, x, axes):
            k.code.line(f"acc += ({acc}){_widen(t, f'{xs}[{off}]')};")
        value = "gc_f2h(acc)" if t.is_f16 else "acc" if t.is_float else wrap(t, "acc")
        k.code.line(f"{ys}[g] = {value};")


def emit_reduce_mean(k: CudaKernel) -> None:
    """Canonical sum in ACC, divided once by the count, rounded once."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t, axes = ctype(x.type.dtype), n.attrs["axes"]
    shape = static_shape(k, x.type.shape)
    count = _prod([shape[a] for a in axes])
    xs, ys = k.param(x), k.param(y)
    if _split_sum(k, x, y, axes, count):
        return
    with _groups(k, x, axes) as off:
        k.code.line(f"{t.acc} acc = -0.0;")
        with _members(k, x, axes):
            k.code.line(f"acc += {_widen(t, f'{xs}[{off}]')};")
        k.code.line(f"{ys}[g] = {_store(t, f'acc / ({t.acc}){count}')};")


def _split_sum(k: CudaKernel, x: Value, y: Value, axes: Sequence[int],
               count: int | None) -> bool:
    """A split sum (divided once by ``count`` for a mean) when ``k.split`` and the sizes ask
    for one (``split.parts``); False where the canonical sum is kept."""
    shape = static_shape(k, x.type.shape)
    kept = [a for a in range(len(shape)) if a not in axes]
    groups, members = _prod([shape[a] for a in kept]), _prod([shape[a] for a in axes])
    p = parts(groups, members) if k.split else 0
    if not p:
        return False
    k.reordered = True
    t = ctype(x.type.dtype)
    a, st = t.acc, row_major(shape)
    xs = k.param(x)
    base = decompose("g", [shape[q] for q in kept], [st[q] for q in kept])
    moff = decompose("j", [shape[q] for q in axes], [st[q] for q in axes])
    sp = Split(k, groups, members, p)

    def finish(total: str) -> str:
        return _store(t, f"{total} / ({a}){count}") if count is not None else \
            _store(t, total)
    scratch = k.scratch(a, groups * p) if p > 1 else ""
    with sp.each_part(a, 1):
        k.code.line(f"const int64_t base = {base};", f"{a} s = -0.0;")
        with sp.each_term():
            k.code.line(f"s += ({a}){_widen(t, f'{xs}[base + {moff}]')};")
        (total,) = sp.tree(["s"])
        with k.code.block("if (threadIdx.x == 0)"):
            k.code.line(f"{scratch}[gb] = {total};" if p > 1 else
                        f"{k.param(y)}[g] = {finish(total)};")
    if p > 1:
        k.next_launch()
        with k.each(groups, "g"):
            sp.total("s", a, scratch, "-0.0")
            k.code.line(f"{k.param(y)}[g] = {finish('s')};")
    return True


def _extreme(largest: bool) -> Any:
    def emit(k: CudaKernel) -> None:
        n = k.node
        x, y = n.inputs[0], n.outputs[0]
        t, axes = ctype(x.type.dtype), n.attrs["axes"]
        xs, ys = k.param(x), k.param(y)
        with _groups(k, x, axes) as off:
            _select(k, xs, t, x, axes, off, largest, "bv", t.compute)
            k.code.line(f"{ys}[g] = {xs}[bi];")
    emit.__doc__ = f"reduce_{'max' if largest else 'min'}: the selected element, copied."
    return emit


def _extreme_grad(largest: bool) -> Any:
    def emit(k: CudaKernel) -> None:
        n = k.node
        x, dy, dx = n.inputs[0], n.inputs[1], n.outputs[0]
        t, axes = ctype(x.type.dtype), n.attrs["axes"]
        xs, dys, dxs = k.param(x), k.param(dy), k.param(dx)
        zero = "(uint16_t)0" if t.is_f16 else f"({t.store})0"
        with _groups(k, x, axes) as off:
            _select(k, xs, t, x, axes, off, largest, "bv", t.compute)
            with _members(k, x, axes):
                k.code.line(f"const int64_t o = {off};",
                            f"{dxs}[o] = o == bi ? {dys}[g] : {zero};")
    emit.__doc__ = "dY stored at each group's selected element, +0 at the others."
    return emit


def emit_element_count(k: CudaKernel) -> None:
    """The product of the sizes on ``axes``, converted once to the dtype."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t = ctype(y.type.dtype)
    shape = static_shape(k, x.type.shape)
    count = f"(int64_t){_prod([shape[a] for a in n.attrs['axes']])}"
    value = f"gc_d2h((double){count})" if t.is_f16 else f"({t.store}){count}"
    with k.each(1) as i:
        k.code.line(f"{k.param(y)}[{i}] = {value};")


# softmax and log_softmax of groups of at least ROW_MEMBERS members run a block per group
# (``_softmax_rows``): one thread per group reads its members at a stride (uncoalesced) and
# leaves most of the GPU idle when the groups are few -- a GPT's log_softmax over a vocabulary
# of 8192 took 5.2 ms of a 33 ms step on the H200 that way.
ROW_MEMBERS = 128
ROW_BYTES = 32768  # shared memory per block for one chunk of a group's exponentials


def _softmax(log: bool) -> Any:
    def emit(k: CudaKernel) -> None:
        n = k.node
        x, y = n.inputs[0], n.outputs[0]
        t, axes = ctype(x.type.dtype), n.attrs["axes"]
        shape = static_shape(k, x.type.shape)
        if _prod([shape[a] for a in axes]) >= ROW_MEMBERS:
            _softmax_rows(k, log)
            return
        a = t.acc
        xs, ys = k.param(x), k.param(y)
        cw = k.code
        with _groups(k, x, axes) as off:
            _select(k, xs, t, x, axes, off, True, "mx", a)
            cw.line(f"{a} total = -0.0;")
            sh = f"const {a} sh = ({a})({_widen(t, f'{xs}[o]')} - mx);"
            with _members(k, x, axes):
                cw.line(f"const int64_t o = {off};", sh, f"total += ({a})exp((double)sh);")
            if log:
                cw.line(f"const {a} lt = ({a})log((double)total);")
                value = f"({a})(sh - lt)"
            else:
                value = f"({a})(({a})exp((double)sh) / total)"
            with _members(k, x, axes):
                cw.line(f"const int64_t o = {off};", sh, f"{ys}[o] = {_store(t, value)};")
    emit.__doc__ = f"{'log_' if log else ''}softmax: §17.1's steps per group, in ACC."
    return emit


def _softmax_rows(k: CudaKernel, log: bool) -> None:
    """softmax/log_softmax with a block per group, every result the thread-per-group kernel's:

    1. the maximum: each thread selects the first extreme of its members ``j = tid, tid +
       BLOCK, ...`` (§14.2's rule: NaN ignored unless all are NaN), then the block combines
       the threads' (value, index) pairs in a fixed tree -- the larger value, the smaller index
       among equal ones (so -0.0 and +0.0 are told apart by position), a NaN only where both
       are NaN. A selection, not a sum: the result is the canonical one whatever the tree.
    2. the sum of the exponentials in the canonical order: the block computes a chunk of them
       in parallel into shared memory, then thread 0 adds the chunk in order, from -0.0, and
       the next chunk follows -- one chain of additions, as the thread per group adds them.
    3. every thread writes its members (coalesced when the reduced axes are the innermost).
    """
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t, axes = ctype(x.type.dtype), n.attrs["axes"]
    a = t.acc
    shape = static_shape(k, x.type.shape)
    kept = [q for q in range(len(shape)) if q not in axes]
    st = row_major(shape)
    groups, members = _prod([shape[q] for q in kept]), _prod([shape[q] for q in axes])
    chunk = min(members, ROW_BYTES // (4 if a == "float" else 8))
    base = decompose("g", [shape[q] for q in kept], [st[q] for q in kept])
    moff = decompose("j", [shape[q] for q in axes], [st[q] for q in axes])
    xs, ys = k.param(x), k.param(y)
    cw = k.code
    k.work = max(k.work, groups * BLOCK)
    k.block, k.barrier = BLOCK, True
    cw.line(f"__shared__ {a} gc_sv[{BLOCK}];", f"__shared__ int64_t gc_si[{BLOCK}];",
            f"__shared__ {a} gc_buf[{chunk}];", f"__shared__ {a} gc_tot;",
            "const int tid = (int)threadIdx.x;")
    with cw.block(f"for (int64_t g = blockIdx.x; g < {groups}; g += gridDim.x)"):
        cw.line(f"const int64_t base = {base};", "int64_t bi = -1;", f"{a} mx = 0;")
        with cw.block(f"for (int64_t j = tid; j < {members}; j += {BLOCK})"):
            cw.line(f"const {a} v = {_widen(t, f'{xs}[base + {moff}]')};")
            with cw.block("if (bi < 0 || (v == v && (mx != mx || v > mx)))"):
                cw.line("bi = j;", "mx = v;")
        cw.line("gc_sv[tid] = mx;", "gc_si[tid] = bi;", "__syncthreads();")
        with cw.block(f"for (int w = {BLOCK // 2}; w > 0; w >>= 1)"):
            with cw.block("if (tid < w)"):
                cw.line(f"const {a} b = gc_sv[tid + w], c = gc_sv[tid];",
                        "const int64_t ib = gc_si[tid + w], ic = gc_si[tid];")
                better = ("ib >= 0 && (ic < 0 || (b != b ? (c != c && ib < ic) : "
                          "(c != c || b > c || (b == c && ib < ic))))")
                with cw.block(f"if ({better})"):
                    cw.line("gc_sv[tid] = b;", "gc_si[tid] = ib;")
            cw.line("__syncthreads();")
        cw.line("mx = gc_sv[0];", f"{a} total = -0.0;")
        sh = f"const {a} sh = ({a})({_widen(t, f'{xs}[base + {moff}]')} - mx);"
        with cw.block(f"for (int64_t c0 = 0; c0 < {members}; c0 += {chunk})"):
            cw.line(f"const int64_t cn = {members} - c0 < {chunk} ? {members} - c0 : {chunk};")
            with cw.block(f"for (int64_t q = tid; q < cn; q += {BLOCK})"):
                cw.line("const int64_t j = c0 + q;", sh, f"gc_buf[q] = ({a})exp((double)sh);")
            cw.line("__syncthreads();")
            with cw.block("if (tid == 0)"):
                with cw.block("for (int64_t q = 0; q < cn; q++)"):
                    cw.line("total += gc_buf[q];")
            cw.line("__syncthreads();")
        with cw.block("if (tid == 0)"):
            cw.line("gc_tot = total;")
        cw.line("__syncthreads();", "total = gc_tot;")
        if log:
            cw.line(f"const {a} lt = ({a})log((double)total);")
        with cw.block(f"for (int64_t j = tid; j < {members}; j += {BLOCK})"):
            if log:
                cw.line(sh)
                value = f"({a})(sh - lt)"
            elif chunk == members:  # the one chunk's exponentials are still in gc_buf
                value = f"({a})(gc_buf[j] / total)"
            else:
                cw.line(sh)
                value = f"({a})(({a})exp((double)sh) / total)"
            cw.line(f"{ys}[base + {moff}] = {_store(t, value)};")
        cw.line("__syncthreads();  /* gc_sv, gc_buf and gc_tot are the next group's */")


def _prod(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


EMITTERS: dict[str, Any] = {
    "reduce_sum": emit_reduce_sum, "reduce_mean": emit_reduce_mean,
    "reduce_max": _extreme(True), "reduce_min": _extreme(False),
    "reduce_max_grad": _extreme_grad(True), "reduce_min_grad": _extreme_grad(False),
    "element_count": emit_element_count,
    "softmax": _softmax(False), "log_softmax": _softmax(True),
}
