"""mean_variance_normalization and its gradient (SPEC-transformers.md §24) on the GPU, bit for bit.

A thread per group (the elements sharing their coordinates on the axes not in ``axes``): its
sums add the group's members one after another in increasing logical index (nested loops over
the normalized axes), from +0, in ``ACC`` -- the canonical order of §24.1, the reference's
single left-to-right sum, so the bits are the reference's. Every step is one rounded operation
in ``ACC`` in the reference's order (the mean, ``d = x - mean``, the mean of ``d * d`` in a
second pass, ``inv = 1 / sqrt(var + epsilon)``, ``z = d * inv``, ``* scale``, ``+ bias``),
float16 widened exactly and rounded once on store; NVRTC's options keep IEEE division and
square root and contract nothing into an FMA. The groups' threads run in blocks of one warp
(``SERIAL_BLOCK``), so that a few thousand long sums spread over the GPU's SMs.

The gradient is two launches. The first is a thread per group: the statistics recomputed as
the forward computes them, the sums of ``g = dY * scale`` and ``g * z``, then ``dX``; it saves
each group's mean and ``inv`` in scratch. The second is a thread per element of ``scale``: its
``dscale`` and ``dbias`` sums run over the elements of X that broadcast to it in increasing
index of X (§24.2's canonical order), ``z`` recomputed from the saved statistics (the same
operations on the same values: the same bits).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Iterator, Sequence

from gradc.ir.core import Value

from gradc.backends.c.ctypes_map import CType, ctype, float_literal
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda.kernel import (BLOCK, SERIAL_BLOCK, CudaKernel, row_major,
                                        static_shape)
from gradc.backends.cuda.split import thread_parts


class _Layout:
    """The input's shape split into kept axes (groups) and normalized axes (members)."""

    def __init__(self, k: CudaKernel, x: Value, axes: Sequence[int]) -> None:
        self.k = k
        self.t: CType = ctype(x.type.dtype)
        self.a = self.t.acc
        self.shape = static_shape(k, x.type.shape)
        self.axes = list(axes)
        self.kept = [q for q in range(len(self.shape)) if q not in self.axes]
        self.xs = row_major(self.shape)
        self.groups = _prod([self.shape[q] for q in self.kept])
        self.n = _prod([self.shape[q] for q in self.axes])

    def pstrides(self, p: Value) -> list[int]:
        """Per input axis, the stride of a parameter broadcast to the input (0: broadcast)."""
        r = len(self.shape)
        ps = [1] * (r - p.type.rank) + static_shape(self.k, p.type.shape)
        st = row_major(ps)
        return [0 if ps[q] == 1 else st[q] for q in range(r)]

    def load(self, v: Value, at: str) -> str:
        """The ACC value of ``v``'s element ``at`` (float16 widened exactly)."""
        return f"({self.a}){widen(self.t, f'{self.k.param(v)}[{at}]')}"

    def store(self, v: Value, at: str, value: str) -> None:
        """``v[at] = value`` rounded once to the dtype."""
        self.k.code.line(f"{self.k.param(v)}[{at}] = {narrow(self.t, value)};")

    def lit(self, v: float) -> str:
        """A float as an exact ACC literal."""
        return float_literal(v, self.a)

    def members(self) -> AbstractContextManager[None]:
        """The loops over a group's members, in increasing logical index (``j<axis>``)."""
        return self.k.code.blocks([f"for (int64_t j{q} = 0; j{q} < {self.shape[q]}; j{q}++)"
                                   for q in self.axes])


def _prod(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def _terms(pairs: Sequence[tuple[str, int]]) -> str:
    """``c0 * s0 + ...`` (zero strides left out; ``0`` for none)."""
    return " + ".join(c if s == 1 else f"{c} * {s}" for c, s in pairs if s) or "0"


def _group_coords(L: _Layout, g: str) -> dict[int, str]:
    """Declare ``c<axis>``: the kept axes' coordinates of group ``g`` (row-major)."""
    coords: dict[int, str] = {}
    inner = 1
    for q in reversed(L.kept):
        L.k.code.line(f"const int64_t c{q} = {g} / {inner} % {L.shape[q]};" if inner > 1 else
                      f"const int64_t c{q} = {g} % {L.shape[q]};")
        coords[q] = f"c{q}"
        inner *= L.shape[q]
    return coords


def _offset(L: _Layout, coords: dict[int, str], st: Sequence[int]) -> str:
    """The offset of a member (coordinates ``coords`` on the kept axes, ``j<axis>`` on the
    normalized ones) in an array of strides ``st`` (broadcast to the input)."""
    c = {**coords, **{q: f"j{q}" for q in L.axes}}
    return _terms([(c[q], st[q]) for q in range(len(L.shape))])


def _stats(L: _Layout, x: Value, xo: str, um: bool, uv: bool, eps: float) -> None:
    """Declare ``mean`` and ``inv`` of the thread's group (§24.1's mvn_stats), two passes."""
    cw, a = L.k.code, L.a
    cw.line(f"const {a} nn = ({a}){L.n};", f"{a} mean = 0, inv = 1;", "(void)mean; (void)inv;")
    if um:
        cw.line(f"{a} s = 0;")
        with L.members():
            cw.line(f"s = s + {L.load(x, xo)};")
        cw.line("mean = s / nn;")
    if uv:
        cw.line(f"{a} s2 = 0;")
        with L.members():
            cw.line(*_d(L, x, xo, um), f"const {a} q = d * d;", "s2 = s2 + q;")
        sqrt = "sqrt" if a == "double" else "sqrtf"
        cw.line(f"const {a} var = s2 / nn;", f"const {a} se = var + {L.lit(eps)};",
                f"const {a} sd = {sqrt}(se);", f"inv = {L.lit(1.0)} / sd;")


def _d(L: _Layout, x: Value, xo: str, um: bool) -> list[str]:
    return [f"const {L.a} d = {L.load(x, xo)} - mean;" if um else
            f"const {L.a} d = {L.load(x, xo)};"]


def _z(L: _Layout, x: Value, xo: str, um: bool, uv: bool) -> list[str]:
    """The lines declaring ``z``, the normalized value of member ``xo``."""
    return _d(L, x, xo, um) + [f"const {L.a} z = d * inv;" if uv else f"const {L.a} z = d;"]


# Groups of ROW_MIN..ROW_MAX members (a transformer's layer norm: 2048 rows of 512 at batch 8)
# run a block per group (``_Rows``): the block loads the row and computes the terms of each sum
# in parallel into shared memory, and thread 0 adds them in order -- the same chain of additions
# as the thread per group, so the same bits, with coalesced loads and the GPU's threads busy.
# A thread per group read its members 2 KB apart; the GPT's 13 layer norms and their gradients
# took 3.6 ms of a 33 ms step on the H200 that way. ROW_MAX bounds the block's shared memory.
ROW_MIN = 128
ROW_MAX = {"float": 2048, "double": 1024}


class _Rows:
    """The loop of a block-per-group kernel: ``grp`` per block, members ``j`` per thread."""

    def __init__(self, L: _Layout, buffers: Sequence[str]) -> None:
        self.L = L
        k, cw = L.k, L.k.code
        k.work = max(k.work, L.groups * BLOCK)
        k.block, k.barrier = BLOCK, True
        cw.line(*(f"__shared__ {L.a} {b}[{L.n}];" for b in buffers),
                f"__shared__ {L.a} gc_st[4];", "const int tid = (int)threadIdx.x;")

    def groups(self) -> AbstractContextManager[None]:
        return self.L.k.code.block(f"for (int64_t grp = blockIdx.x; grp < {self.L.groups}; "
                                   "grp += gridDim.x)")

    @contextmanager
    def each(self) -> Iterator[None]:
        """This thread's members: ``j`` (flat, in the canonical order) and ``j<axis>``."""
        L = self.L
        with L.k.code.block(f"for (int64_t j = tid; j < {L.n}; j += {BLOCK})"):
            sizes = [L.shape[q] for q in L.axes]
            for q, st in zip(L.axes, row_major(sizes)):
                wrap = f" % {L.shape[q]}" if st * L.shape[q] != L.n else ""
                L.k.code.line(f"const int64_t j{q} = {'j' if st == 1 else f'j / {st}'}{wrap};",
                              f"(void)j{q};")
            yield

    def chains(self, sums: Sequence[tuple[str, str]]) -> None:
        """Thread 0 adds each buffer into its sum (``(name, buffer)``, declared from +0) in
        increasing member order: one chain per sum, as the thread per group adds them."""
        cw = self.L.k.code
        cw.line("__syncthreads();")
        with cw.block("if (tid == 0)"):
            cw.line(*(f"{self.L.a} {name} = 0;" for name, _ in sums))
            with cw.block(f"for (int64_t j = 0; j < {self.L.n}; j++)"):
                cw.line(*(f"{name} = {name} + {buf}[j];" for name, buf in sums))
            cw.line(*(f"gc_st[{i}] = {name};" for i, (name, _) in enumerate(sums)))
        cw.line("__syncthreads();")

    def stats(self, x: Value, xo: str, um: bool, uv: bool, eps: float) -> None:
        """``_stats`` with the block: ``xb`` holds the row, ``mean`` and ``inv`` declared."""
        L, cw, a = self.L, self.L.k.code, self.L.a
        cw.line(f"const {a} nn = ({a}){L.n};", f"{a} mean = 0, inv = 1;",
                "(void)mean; (void)inv;")
        with self.each():
            cw.line(f"xb[j] = {L.load(x, xo)};")
        if um:
            self.chains([("s", "xb")])
            cw.line("mean = gc_st[0] / nn;")
        if uv:
            with self.each():
                cw.line(f"const {a} d = {'xb[j] - mean' if um else 'xb[j]'};",
                        "tb[j] = d * d;")
            self.chains([("s2", "tb")])
            sqrt = "sqrt" if a == "double" else "sqrtf"
            cw.line(f"const {a} var = gc_st[0] / nn;", f"const {a} se = var + {L.lit(eps)};",
                    f"const {a} sd = {sqrt}(se);", f"inv = {L.lit(1.0)} / sd;")

    def z(self, um: bool, uv: bool) -> list[str]:
        """The lines declaring ``z`` of member ``j`` from the row in ``xb``."""
        a = self.L.a
        return [f"const {a} d = {'xb[j] - mean' if um else 'xb[j]'};",
                f"const {a} z = d * inv;" if uv else f"const {a} z = d;"]


def _rows(L: _Layout) -> bool:
    return ROW_MIN <= L.n <= ROW_MAX.get(L.a, 0)


def emit_mean_variance_normalization(k: CudaKernel) -> None:
    """§24.1: a thread per group: its statistics, then ``z * scale + bias`` per member."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    scale = n.inputs[1] if len(n.inputs) > 1 else None
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    um, uv = n.attrs["use_mean"], n.attrs["use_variance"]
    L = _Layout(k, x, n.attrs["axes"])
    cw = k.code
    if _rows(L):
        R = _Rows(L, ["xb", "tb"])
        with R.groups():
            coords = _group_coords(L, "grp")
            xo = _offset(L, coords, L.xs)
            R.stats(x, xo, um, uv, n.attrs["epsilon"])
            with R.each():
                cw.line(*R.z(um, uv), f"{L.a} v = z;")
                if scale is not None:
                    cw.line(f"v = v * {L.load(scale, _offset(L, coords, L.pstrides(scale)))};")
                if bias is not None:
                    cw.line(f"v = v + {L.load(bias, _offset(L, coords, L.pstrides(bias)))};")
                L.store(y, xo, "v")
            cw.line("__syncthreads();  /* the buffers are the next group's */")
        return
    k.block = SERIAL_BLOCK
    with k.each(L.groups, "grp"):
        coords = _group_coords(L, "grp")
        xo = _offset(L, coords, L.xs)
        _stats(L, x, xo, um, uv, n.attrs["epsilon"])
        with L.members():
            cw.line(f"const int64_t o = {xo};", *_z(L, x, "o", um, uv), f"{L.a} v = z;")
            if scale is not None:
                cw.line(f"v = v * {L.load(scale, _offset(L, coords, L.pstrides(scale)))};")
            if bias is not None:
                cw.line(f"v = v + {L.load(bias, _offset(L, coords, L.pstrides(bias)))};")
            L.store(y, "o", "v")


def emit_mean_variance_normalization_grad(k: CudaKernel) -> None:
    """§24.2: dX by a thread per group (statistics saved), then dscale and dbias by a thread
    per scale element."""
    n = k.node
    x, dy, scale = n.inputs
    dx, ds, db = n.outputs
    um, uv = n.attrs["use_mean"], n.attrs["use_variance"]
    L = _Layout(k, x, n.attrs["axes"])
    cw, a = k.code, L.a
    gm, gi = k.scratch(a, L.groups), k.scratch(a, L.groups)
    sst = L.pstrides(scale)
    if _rows(L):
        _grad_rows(L, n.inputs, dx, (gm, gi), um, uv, n.attrs["epsilon"])
        k.next_launch()
        _parameter_gradients(k, L, x, dy, scale, ds, db, (gm, gi), um, uv)
        return
    k.block = SERIAL_BLOCK
    with k.each(L.groups, "grp"):
        coords = _group_coords(L, "grp")
        xo, so = _offset(L, coords, L.xs), _offset(L, coords, sst)
        _stats(L, x, xo, um, uv, n.attrs["epsilon"])
        g = f"const {a} g = {L.load(dy, 'o')} * {L.load(scale, so)};"
        cw.line(f"{a} sg = 0, sgz = 0;", "(void)sg; (void)sgz;")
        if um or uv:
            with L.members():
                cw.line(f"const int64_t o = {xo};", g)
                if um:
                    cw.line("sg = sg + g;")
                if uv:
                    cw.line(*_z(L, x, "o", um, uv), f"const {a} t = g * z;", "sgz = sgz + t;")
        cw.line(f"const {a} mg = sg / nn, mgz = sgz / nn;", "(void)mg; (void)mgz;",
                f"{gm}[grp] = mean;", f"{gi}[grp] = inv;")
        with L.members():
            cw.line(f"const int64_t o = {xo};", g, f"{a} r = g;")
            if um:
                cw.line("r = r - mg;")
            if uv:
                cw.line(*_z(L, x, "o", um, uv), f"const {a} q = z * mgz;",
                        f"const {a} r2 = r - q;", "r = inv * r2;")
            L.store(dx, "o", "r")
    k.next_launch()
    _parameter_gradients(k, L, x, dy, scale, ds, db, (gm, gi), um, uv)


def _grad_rows(L: _Layout, inputs: Sequence[Value], dx: Value, stats: tuple[str, str],
               um: bool, uv: bool, eps: float) -> None:
    """dX with a block per group: the thread-per-group kernel's operations on the same values,
    its sums added in order by thread 0 (``_Rows``)."""
    x, dy, scale = inputs
    cw, a = L.k.code, L.a
    gm, gi = stats
    R = _Rows(L, ["xb", "tb", "gb"])
    with R.groups():
        coords = _group_coords(L, "grp")
        xo, so = _offset(L, coords, L.xs), _offset(L, coords, L.pstrides(scale))
        R.stats(x, xo, um, uv, eps)
        with R.each():
            cw.line(f"gb[j] = {L.load(dy, xo)} * {L.load(scale, so)};")
            if uv:
                cw.line(*R.z(um, uv), "tb[j] = gb[j] * z;")
        sums = ([("sg", "gb")] if um else []) + ([("sgz", "tb")] if uv else [])
        if sums:
            R.chains(sums)
        cw.line(f"const {a} sg = {'gc_st[0]' if um else '0'};",
                f"const {a} sgz = {f'gc_st[{int(um)}]' if uv else '0'};",
                f"const {a} mg = sg / nn, mgz = sgz / nn;", "(void)mg; (void)mgz;")
        with cw.block("if (tid == 0)"):
            cw.line(f"{gm}[grp] = mean;", f"{gi}[grp] = inv;")
        with R.each():
            cw.line(f"{a} r = gb[j];")
            if um:
                cw.line("r = r - mg;")
            if uv:
                cw.line(*R.z(um, uv), f"const {a} q = z * mgz;", f"const {a} r2 = r - q;",
                        "r = inv * r2;")
            L.store(dx, xo, "r")
        cw.line("__syncthreads();  /* the buffers are the next group's */")


def _parameter_gradients(k: CudaKernel, L: _Layout, x: Value, dy: Value, scale: Value,
                         ds: Value, db: Value, stats: tuple[str, str], um: bool,
                         uv: bool) -> None:
    """A thread per scale element: Σ dY·z and Σ dY over the input elements that broadcast to
    it, in increasing index of X, from +0."""
    cw, a = k.code, L.a
    gm, gi = stats
    r = len(L.shape)
    sst = L.pstrides(scale)
    keep = [q for q in range(r) if sst[q]]
    red = [q for q in range(r) if not sst[q]]
    gst = dict(zip(L.kept, row_major([L.shape[q] for q in L.kept])))
    outputs = _prod([L.shape[q] for q in keep])
    p = thread_parts(outputs, _prod([L.shape[q] for q in red])) if k.split else 0
    if p:
        _split_parameter_gradients(k, L, (x, dy, scale, ds, db), stats, um, uv, p)
        return
    k.block = SERIAL_BLOCK
    with k.each(outputs, "e"):
        c = {}
        for q in keep:  # the scale element's coordinates (its strides are row-major)
            cw.line(f"const int64_t c{q} = e / {sst[q]} % {L.shape[q]};")
            c[q] = f"c{q}"
        cw.line(f"{a} as = 0, ab = 0;")
        heads = [f"for (int64_t j{q} = 0; j{q} < {L.shape[q]}; j{q}++)" for q in red]
        coords = {**c, **{q: f"j{q}" for q in red}}
        with cw.blocks(heads) if heads else cw.block():
            cw.line(f"const int64_t m = {_terms([(coords[q], L.xs[q]) for q in range(r)])};",
                    f"const int64_t gq = {_terms([(coords[q], gst[q]) for q in L.kept])};",
                    "(void)gq;", f"const {a} gy = {L.load(dy, 'm')};")
            d = f"{L.load(x, 'm')} - {gm}[gq]" if um else L.load(x, "m")
            cw.line(f"const {a} d = {d};", f"const {a} z = {f'd * {gi}[gq]' if uv else 'd'};",
                    f"const {a} t = gy * z;", "as = as + t;", "ab = ab + gy;")
        L.store(ds, "e", "as")
        L.store(db, "e", "ab")


def _split_parameter_gradients(k: CudaKernel, L: _Layout, values: tuple[Value, ...],
                               stats: tuple[str, str], um: bool, uv: bool, p: int) -> None:
    """``sums="split"``: the members of each scale element (in increasing index of X) cut
    into ``p`` ranges, a thread per (range, element) adding its range in order into scratch;
    then a thread per element adds its ranges in order (``split.thread_parts``; SPEC-training
    §9.5's bound)."""
    k.reordered = True
    x, dy, scale, ds, db = values
    a, cw = L.a, k.code
    gm, gi = stats
    r = len(L.shape)
    sst = L.pstrides(scale)
    keep = [q for q in range(r) if sst[q]]
    red = [q for q in range(r) if not sst[q]]
    gst = dict(zip(L.kept, row_major([L.shape[q] for q in L.kept])))
    outputs = _prod([L.shape[q] for q in keep])
    members = _prod([L.shape[q] for q in red])
    length = -(-members // p)
    s_as, s_ab = k.scratch(a, outputs * p), k.scratch(a, outputs * p)
    with k.each(outputs * p, "w"):
        cw.line(f"const int64_t e = w % {outputs}, part = w / {outputs};")
        c = {}
        for q in keep:
            cw.line(f"const int64_t c{q} = e / {sst[q]} % {L.shape[q]};")
            c[q] = f"c{q}"
        cw.line(f"{a} as = 0, ab = 0;", f"const int64_t lo = part * {length};",
                f"const int64_t hi = lo + {length} < {members} ? lo + {length} : {members};")
        with cw.block("for (int64_t j = lo; j < hi; j++)"):
            rst = row_major([L.shape[q] for q in red])
            for q, st in zip(red, rst):
                cw.line(f"const int64_t j{q} = j / {st} % {L.shape[q]};" if st > 1 else
                        f"const int64_t j{q} = j % {L.shape[q]};")
            coords = {**c, **{q: f"j{q}" for q in red}}
            cw.line(f"const int64_t m = {_terms([(coords[q], L.xs[q]) for q in range(r)])};",
                    f"const int64_t gq = {_terms([(coords[q], gst[q]) for q in L.kept])};",
                    "(void)gq;", f"const {a} gy = {L.load(dy, 'm')};")
            d = f"{L.load(x, 'm')} - {gm}[gq]" if um else L.load(x, "m")
            cw.line(f"const {a} d = {d};", f"const {a} z = {f'd * {gi}[gq]' if uv else 'd'};",
                    f"const {a} t = gy * z;", "as = as + t;", "ab = ab + gy;")
        cw.line(f"{s_as}[w] = as;", f"{s_ab}[w] = ab;")
    k.next_launch()
    with k.each(outputs, "e"):
        k.code.line(f"{a} as = 0, ab = 0;")
        with k.code.block(f"for (int64_t q = 0; q < {p}; q++)"):
            k.code.line(f"as = as + {s_as}[q * {outputs} + e];",
                        f"ab = ab + {s_ab}[q * {outputs} + e];")
        L.store(ds, "e", "as")
        L.store(db, "e", "ab")


EMITTERS = {
    "mean_variance_normalization": emit_mean_variance_normalization,
    "mean_variance_normalization_grad": emit_mean_variance_normalization_grad,
}
