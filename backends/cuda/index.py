"""gather and gather_grad (SPEC-transformers.md §26) on the GPU, and the run-time error record.

The range check (§26.3) is the first launch of both ops: one block whose threads each scan a
strided share of the indices in row-major order and keep their first bad position; a tree of
``min`` over the block (exact, so in any order) gives the first bad index of all, and thread 0
writes the error record -- the op's code, the index's value, the size and the index's position,
as the C target's record -- or a 0 when every index is in range. The record lies in the arena
(``emit.py`` reserves it); every launch after the first check returns at once when it holds an
error (so nothing reads at a bad index and no in-place state write happens), and the runtime
reads it after the graph and raises ``InputError`` with the C target's message (``record_message``).

``gather``: a thread per output element copies one element's bit pattern (exact).

``gather_grad``: each output element sums its terms in increasing position of ``indices``, from
+0, in ``ACC`` (the canonical order of occurrence), rounded once -- a thread per output element,
no atomics. With at most ``SCAN_MAX`` indices the thread scans them all in order. Otherwise the
positions are sorted by (index, position) -- keys ``index * count + position``, unique, so any
correct sort is the stable one: runs of ``RUN`` keys ranked by counting, then merged pairwise,
each key placed at its rank in the pair found by binary search (a launch per merge level) --
each output row's segment of the sorted keys is found by binary search, and each output
element sums its row's positions in sorted, i.e. increasing, order.
"""

from __future__ import annotations

from typing import Sequence

from gradc.errors import UnsupportedError
from gradc.ir.core import Value
from gradc.ir.ops.gather import RECORD_CODES

from gradc.backends.c.ctypes_map import ctype
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda.kernel import BLOCK, CudaKernel, static_shape

RECORD = 12  # int64 words of the error record: op, value, size, rank, 8 coordinates
SCAN_MAX = 16  # indices that gather_grad's threads scan directly (more: sorted first)
RUN = BLOCK  # keys ranked by counting per run before the merges


def _prod(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def _check(k: CudaKernel, idx: Value, size: int, op: str) -> None:
    """The first launch: the range check of every index, its record written by thread 0."""
    assert k.error_at is not None, "internal error: cuda target: no error record reserved"
    cw = k.code
    shape = static_shape(k, idx.type.shape)
    count = _prod(shape)
    k.work, k.barrier = BLOCK, True  # one block
    cw.line(f"__shared__ int64_t bad[{BLOCK}];", "const int64_t t = threadIdx.x;",
            f"int64_t first = {count};")
    with cw.block(f"for (int64_t i = t; i < {count}; i += {BLOCK})"):
        cw.line(f"const int64_t v = (int64_t){k.param(idx)}[i];")
        with cw.block(f"if (v < -{size} || v >= {size})"):
            cw.line("first = i;", "break;")
    cw.line("bad[t] = first;", "__syncthreads();")
    with cw.block(f"for (int64_t s = {BLOCK // 2}; s > 0; s >>= 1)"):
        cw.line("if (t < s && bad[t + s] < bad[t]) bad[t] = bad[t + s];", "__syncthreads();")
    with cw.block("if (t == 0)"):
        cw.line(f"int64_t *err = (int64_t *)(gc_arena + {k.error_at});",
                "const int64_t f = bad[0];")
        with cw.block(f"if (f < {count})"):
            cw.line(f"err[1] = (int64_t){k.param(idx)}[f];", f"err[2] = {size};",
                    f"err[3] = {len(shape)};", "int64_t rem = f;")
            for a in reversed(range(len(shape))):
                cw.line(f"err[{4 + a}] = rem % {shape[a]};", f"rem /= {shape[a]};")
            cw.line(f"err[0] = {RECORD_CODES[op]};")
        with cw.orelse():
            cw.line("err[0] = 0;")
    k.next_launch()


def _index(k: CudaKernel, idx: Value, at: str, size: int, var: str = "v") -> None:
    """Declare ``var``: the index at position ``at``, negative ones counted from the end."""
    k.code.line(f"int64_t {var} = (int64_t){k.param(idx)}[{at}];",
                f"if ({var} < 0) {var} += {size};")


def emit_gather(k: CudaKernel) -> None:
    """§26.1: the check, then a thread per output element copying its element's bits."""
    n = k.node
    x, idx = n.inputs
    y = n.outputs[0]
    axis = n.attrs["axis"]
    xs = static_shape(k, x.type.shape)
    size, post = xs[axis], _prod(xs[axis + 1:])
    count = _prod(static_shape(k, idx.type.shape))
    _check(k, idx, size, "gather")
    k.as_bits(x, y)
    with k.each(_prod(static_shape(k, y.type.shape))) as i:
        k.code.line(f"const int64_t p = {i} / {count * post}, j = {i} / {post} % {count}, "
                    f"s = {i} % {post};")
        _index(k, idx, "j", size)
        k.code.line(f"{k.param(y)}[{i}] = {k.param(x)}[(p * {size} + v) * {post} + s];")


def emit_gather_grad(k: CudaKernel) -> None:
    """§26.2: the check, then each output element's terms summed in order of occurrence."""
    n = k.node
    dy, idx = n.inputs
    dx = n.outputs[0]
    axis = n.attrs["axis"]
    out = static_shape(k, dx.type.shape)
    size, post = out[axis], _prod(out[axis + 1:])
    count = _prod(static_shape(k, idx.type.shape))
    _check(k, idx, size, "gather_grad")
    if count <= SCAN_MAX:
        _sum(k, dy, dx, idx, size, post, count, None)
        return
    if size * count >= 1 << 62:
        raise UnsupportedError(f"cuda target: gather_grad: expected output_sizes[axis] * "
                               f"indices.size below 2**62 (the sort's keys), got {size} * "
                               f"{count}")
    keys = _sort(k, idx, size, count)
    start = k.scratch("int64_t", size + 1)
    with k.each(size + 1, "r"):  # each output row's first key: a lower bound
        _lower_bound(k, keys, "0", str(count), f"r * {count}", "lo")
        k.code.line(f"{start}[r] = lo;")
    k.next_launch()
    _sum(k, dy, dx, idx, size, post, count, (keys, start))


def _sum(k: CudaKernel, dy: Value, dx: Value, idx: Value, size: int, post: int, count: int,
         sorted_: tuple[str, str] | None) -> None:
    """A thread per output element: its terms from +0 in increasing position, rounded once."""
    t = ctype(dy.type.dtype)
    cw = k.code
    total = _prod(static_shape(k, dx.type.shape))
    src = f"{k.param(dy)}[(p * {count} + j) * {post} + s]"
    with k.each(total) as i:
        cw.line(f"const int64_t p = {i} / {size * post}, r = {i} / {post} % {size}, "
                f"s = {i} % {post};", f"{t.acc} acc = 0;")
        if sorted_ is None:
            with cw.block(f"for (int64_t j = 0; j < {count}; j++)"):
                _index(k, idx, "j", size)
                cw.line(f"if (v == r) acc = acc + ({t.acc}){widen(t, src)};")
        else:
            keys, start = sorted_
            with cw.block(f"for (int64_t e = {start}[r]; e < {start}[r + 1]; e++)"):
                cw.line(f"const int64_t j = {keys}[e] - r * {count};",
                        f"acc = acc + ({t.acc}){widen(t, src)};")
        cw.line(f"{k.param(dx)}[{i}] = {narrow(t, 'acc')};")


def _lower_bound(k: CudaKernel, keys: str, lo: str, hi: str, key: str, var: str) -> None:
    """Declare ``var``: the first position in ``keys[lo..hi)`` (sorted) not below ``key``."""
    cw = k.code
    cw.line(f"int64_t {var} = {lo}, {var}_hi = {hi};")
    with cw.block(f"while ({var} < {var}_hi)"):
        cw.line(f"const int64_t m = {var} + ({var}_hi - {var}) / 2;",
                f"if ({keys}[m] < {key}) {var} = m + 1; else {var}_hi = m;")


def _sort(k: CudaKernel, idx: Value, size: int, count: int) -> str:
    """Launches sorting the keys ``index * count + position`` (unique) into scratch; returns
    the C expression of the sorted array."""
    bufs = [k.scratch("int64_t", count), k.scratch("int64_t", count)]

    def key(at: str, var: str) -> None:
        _index(k, idx, at, size, f"{var}v")
        k.code.line(f"const int64_t {var} = {var}v * {count} + {at};")

    with k.each(count):  # runs of RUN keys: each key's rank among its run, by counting
        k.code.line(f"const int64_t lo = i / {RUN} * {RUN};",
                f"const int64_t hi = lo + {RUN} < {count} ? lo + {RUN} : {count};")
        key("i", "ki")
        k.code.line("int64_t rank = 0;")
        with k.code.block("for (int64_t u = lo; u < hi; u++)"):
            key("u", "ku")
            k.code.line("rank += ku < ki;")
        k.code.line(f"{bufs[0]}[lo + rank] = ki;")
    k.next_launch()
    width, src = RUN, 0
    while width < count:  # merge runs pairwise: a key's rank in the pair by binary search
        a, b = bufs[src], bufs[1 - src]
        with k.each(count):
            k.code.line(f"const int64_t run = i / {width}, lo = run * {width};",
                    f"const int64_t plo = (run ^ 1) * {width};",
                    f"const int64_t phi = plo + {width} < {count} ? plo + {width} : {count};",
                    f"const int64_t key = {a}[i];")
            _lower_bound(k, a, "plo", "(plo < phi ? phi : plo)", "key", "c")
            k.code.line(f"{b}[(run & ~(int64_t)1) * {width} + (i - lo) + (c - plo)] = key;")
        k.next_launch()
        width, src = width * 2, 1 - src
    return bufs[src]


EMITTERS = {"gather": emit_gather, "gather_grad": emit_gather_grad}
