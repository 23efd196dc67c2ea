"""The direct convolution of few output channels, or of a first layer: a 2-D convolution whose
input patch is staged once per chunk of channels and whose every tap reads it from shared
memory.

An implicit GEMM (``tiled.py``) stages the im2col matrix ``B``: each staged element serves the
``M`` rows of its column, 16 multiply-adds for a 16-channel layer, against some 20 instructions
to find, check and store it (measured on the H200: the UNet's 16-channel layers at 11-12 TFLOP/s
in every tile shape). Here a block computes a ``BR x BC`` tile of output positions of one image
for all ``M`` channels of a group: per chunk of ``CC`` input channels it stages the tile's input
patch with its halo (``BR + (KH-1)*dh`` rows of ``BC + (KW-1)*dw``, padding staged as 0) and the
chunk's filter (``CC x taps x M``), and every staged input element then serves ``M x taps``
terms. Each thread keeps ``TM`` channels by ``TN`` neighbouring positions of one row in
registers; per channel and filter row it reads its window of ``TN + (KW-1)*dw`` inputs with
16-byte shared loads, then for each tap of the row adds ``W[i] * x[j + kw*dw]`` to sum (i, j).

A first layer (fewer than 8 input channels, forward) may have strides: the patch then spans
``(BR-1)*sh + (KH-1)*dh + 1`` rows and a window ``(TN-1)*sw + (KW-1)*dw + 1`` inputs, read at
``j*sw + kw*dw``. Its output channels beyond 8 groups of ``TM`` are cut into ``MS`` chunks,
each a tile of its own (squeezenet1_0's 96 channels in 3 chunks of 32).

**The order.** Every sum runs channel by channel, and within a channel over the taps in
row-major order, the canonical order of ``conv.py``'s product: the forward direction sums
``X[o - sp + tap*d]``; the backward direction (unit stride) sums ``X[o + sp - tap*d]`` with the
taps reversed, which is the same walk over ``tap' = taps - 1 - tap`` ascending with the padding
``(K-1)*d - sp``: both are ``X[o - P + tap'*d]`` for ``tap'`` ascending. The filter value of
each term is the product's own ``A`` (``conv.py``'s ``_filter_forward``/``_filter_backward``)
at ``kk = ci * taps + tap'``, so mirroring and the backward direction's transposition are
theirs. A skipped term (a position in the padding) is staged as ``x = 0``: with a finite filter
value it adds ±0, and a sum that starts at +0 is never -0 and is unchanged by ±0 (``tiled.py``
argues it at length). A chunk's channels divide the group's (``_make``).
The staging threads flag a chunk whose filter holds a NaN or an infinity, and such a chunk is
multiplied with each term's validity checked from its coordinates instead, as the reference
skips. Each term is the product and the addition of the reference (bit-exact), or one fused
multiply-add under ``sums="split"`` (``tiled.fused_terms``).

``plan`` decides whether a layer takes this kernel (``fits``: 2-D, 2 to 64 output channels per
group or up to ``MAX_FIRST`` for a first layer, filters of at least 2x2, rows of at least 8,
unit strides or a first layer's of at least ``MIN_STRIDED_TAPS`` taps; tiles mostly inside
the output, at least ``MIN_TAKEN`` of them) and its tile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from gradc.backends.c.ctypes_map import CType
from gradc.backends.c.scalar import widen
from gradc.backends.c.writer import CWriter
from gradc.backends.cuda import tiling
from gradc.backends.cuda.kernel import BLOCK, CudaKernel
from gradc.backends.cuda.tiled import fused_terms, add_term, unrolled
from gradc.backends.cuda.tiling import SHARED_BLOCK, SMS, cdiv

# output channels per group that take this kernel: on the H200 resnet18's 64-channel 3x3 layers
# at 16x16 and batch 64 (128 tiles) ran 1.13x faster than the implicit GEMM forward, 1.13x
# backward (gpu_launches.py), once the filter's staging read along its rows
MAX_CHANNELS = 64
# output channels of a first layer (fewer than 8 input channels): more than 64 are cut into
# chunks, a tile each
MAX_FIRST = 128
# taps a strided first layer needs at least: on the H200 at batch 64 (gpu_launches.py) the 7x7
# stride-2 first layers ran faster than the implicit GEMM (squeezenet1_0's 0.124 -> 0.083 ms,
# resnet18's 0.087 -> under 0.060 ms); a 3x3 strided one (mobilenet_v2's, 27 terms) was not
# timed apart and keeps the implicit GEMM
MIN_STRIDED_TAPS = 25
# tiles a layer needs at least to take this kernel (half the H200's SMs): fewer leave the GPU
# idle where the implicit GEMM splits its sums; 128 is the fewest measured faster
MIN_TAKEN = 64
# tiles wanted at least (a thread's block of sums shrinks until there are): measured on the
# H200 (the UNet at batch 64, gpu_launches.py), its 16-channel layers at 64x64 ran 1.46x faster
# in 1,024 tiles of 4x64 positions (4x4 a thread) than in 512 of 8x64 (4x8 a thread), and the
# 27-term first layer 2.1x
MIN_TILES = 8 * SMS
STAGE = 2048  # input elements staged per chunk, about (the chunk's channels follow from it)


@dataclass(frozen=True)
class Geometry:
    """A unit-stride 2-D convolution as this kernel sees it: ``Y[z*cog + m, oh, ow]`` sums
    ``A(m, ci*taps + tap') * X[z*cig + ci, oh - P0 + th*d0, ow - P1 + tw*d1]``."""

    nb: int
    groups: int
    cig: int
    cog: int
    ci_all: int
    ins: tuple[int, int]  # the input's spatial sizes
    outs: tuple[int, int]  # the output's
    ks: tuple[int, int]  # the filter's
    d: tuple[int, int]
    pad: tuple[int, int]  # P: the start padding (forward), or (K-1)*d - sp (backward)
    s: tuple[int, int] = (1, 1)  # strides (a first layer's, forward)


@dataclass(frozen=True)
class Plan:
    """The tile: ``TM`` channels by ``TN`` positions of a row per thread, ``G`` channel groups
    of ``T = 256 / G`` threads, ``TC`` threads along a row (``BC = TC * TN`` columns), ``BR``
    rows, ``CC`` input channels per chunk; a first layer's output channels in ``MS`` chunks of
    ``G * TM``, a tile each."""

    tm: int
    tn: int
    g: int
    tc: int
    cc: int
    ms: int = 1

    @property
    def t(self) -> int:
        return BLOCK // self.g

    @property
    def bc(self) -> int:
        return self.tc * self.tn

    @property
    def br(self) -> int:
        return self.t // self.tc

    def __str__(self) -> str:
        chunks = f" ({self.ms} chunks of channels)" if self.ms > 1 else ""
        return f"{self.g * self.tm}x{self.br}x{self.bc}/{self.tm}x{self.tn} by {self.cc}{chunks}"


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _vec(acc: str) -> int:
    return 2 if acc == "double" else 4


def _sizes(geo: Geometry, p: Plan, acc: str) -> tuple[int, int, int, int]:
    """Rows and row pitch of the staged patch, a thread's window (in whole vectors), and the
    filter's padded channel count."""
    v, (sh, sw) = _vec(acc), geo.s
    rows = (p.br - 1) * sh + (geo.ks[0] - 1) * geo.d[0] + 1
    window = cdiv((p.tn - 1) * sw + (geo.ks[1] - 1) * geo.d[1] + 1, v) * v
    pitch = cdiv(max(_need(geo, p), (p.bc - p.tn) * sw + window), v) * v
    return rows, pitch, window, p.g * p.tm


def _need(geo: Geometry, p: Plan) -> int:
    """The columns of the patch that the tile's windows read and use."""
    return (p.bc - 1) * geo.s[1] + (geo.ks[1] - 1) * geo.d[1] + 1


def _shared(geo: Geometry, p: Plan, acc: str) -> int:
    rows, pitch, _, mp = _sizes(geo, p, acc)
    word = 8 if acc == "double" else 4
    taps = geo.ks[0] * geo.ks[1]
    return 2 * p.cc * (rows * pitch + taps * (mp + _vec(acc))) * word + 16


def _make(geo: Geometry, tm: int, tn: int, acc: str) -> Plan | None:
    # the output channels in chunks of at most 8 groups of TM where they do not fit one (first
    # layers only): of up to twice the fewest chunks, the fewest idle groups, then the fewest
    # chunks (each stages the input patch again). Measured on the H200 (squeezenet1_0's
    # 96-channel first layer at batch 64): 3 chunks of 4 groups 0.083 ms, 2 chunks of 8 groups
    # (2 idle) 0.104 ms, the implicit GEMM 0.124 ms
    fit = [(ms, _pow2(cdiv(cdiv(geo.cog, ms), tm))) for ms in range(1, cdiv(geo.cog, tm) + 1)]
    fit = [(ms, g) for ms, g in fit if g <= BLOCK // 32 and (ms == 1 or geo.cig < 8)]
    if not fit:
        return None
    fit = [f for f in fit if f[0] <= 2 * fit[0][0]]
    ms, g = min(fit, key=lambda f: (f[0] * f[1] * tm - geo.cog, f[0])) if fit[0][0] > 1 \
        else fit[0]
    t = BLOCK // g
    tc = min(t, _pow2(cdiv(geo.outs[1], tn)), max(1, 128 // tn))
    p = Plan(tm, tn, g, tc, 1, ms)
    rows, pitch, _, _ = _sizes(geo, p, acc)
    limit = max(1, min(8, STAGE // (rows * pitch)))
    # the most channels a chunk that divide the input's (no partial chunk) and fit
    for cc in range(min(limit, geo.cig), 0, -1):
        p = Plan(tm, tn, g, tc, cc, ms)
        if (geo.cig % cc == 0 or cc == 1) and _shared(geo, p, acc) <= SHARED_BLOCK:
            return p
    return None


def tiles(geo: Geometry, p: Plan) -> int:
    return geo.groups * geo.nb * p.ms * cdiv(geo.outs[0], p.br) * cdiv(geo.outs[1], p.bc)


def fits(geo: Geometry) -> bool:
    """True when a layer's shape suits the kernel (module docstring)."""
    first = geo.cig < 8  # a first layer: strides, and more output channels in chunks
    return (2 <= geo.cog <= (MAX_FIRST if first else MAX_CHANNELS) and min(geo.ks) >= 2
            and geo.outs[1] >= 8 and geo.outs[0] >= 2
            and (geo.s == (1, 1) or first and geo.ks[0] * geo.ks[1] >= MIN_STRIDED_TAPS))


def plan(geo: Geometry, acc: str) -> Plan | None:
    """The tile of a layer, or None when it takes the implicit GEMM."""
    if not fits(geo):
        return None
    v = _vec(acc)
    tm = min(geo.cog, 4) if geo.cog <= 16 else 8
    # the most positions per thread that fill the SMs, of the tiles mostly inside the output
    # (else the one of most tiles)
    shapes = [p for tn in (8, 4, 2) if tm * tn <= 32 and tn % v == 0
              for p in [_make(geo, tm, tn, acc)] if p is not None and _waste(geo, p) <= 1.3]
    if not shapes:
        return None
    full = [p for p in shapes if tiles(geo, p) >= MIN_TILES]
    best = full[0] if full else max(shapes, key=lambda p: tiles(geo, p))
    return best if tiles(geo, best) >= MIN_TAKEN else None


def _waste(geo: Geometry, p: Plan) -> float:
    """Positions of the tiles over the output's positions."""
    padded = cdiv(geo.outs[0], p.br) * p.br * cdiv(geo.outs[1], p.bc) * p.bc
    return padded / (geo.outs[0] * geo.outs[1])


def emit(k: CudaKernel, geo: Geometry, p: Plan, a: tiling.Operand, t_x: CType,
         px: str, ix: str, store: Callable[[str, str, str], Sequence[str]]) -> None:
    """The kernel (module docstring): ``a`` the filter operand (rows ``m``, terms
    ``kk = ci*taps + tap'``, reading the group ``z``), ``px`` the input's pointer (``t_x`` its
    type), ``store(m, n, s)`` the epilogue of output ``(m, n)``, ``n`` counting (image,
    position)."""
    acc = t_x.acc
    k.barrier = True
    cw = k.code
    fused = fused_terms(k)
    if fused:
        k.reordered = True
    (H, W), (OH, OW), (KH, KW), (P0, P1) = geo.ins, geo.outs, geo.ks, geo.pad
    (sh, sw), taps, po, px_, v = geo.s, KH * KW, OH * OW, H * W, _vec(acc)
    rows, pitch, window, mp = _sizes(geo, p, acc)
    rt, ct = cdiv(OH, p.br), cdiv(OW, p.bc)
    count = tiles(geo, p)
    xe, we = p.cc * rows * pitch, p.cc * taps * mp
    st = _Staging(cw, geo, p, a, t_x, px, acc, xe, we)
    xslots, wslots = st.xslots, st.wslots
    chunks = cdiv(geo.cig, p.cc)
    need = _need(geo, p)
    k.work = min(count, 1 << 30) * BLOCK
    k.code.comment(f"{geo.groups} x ({geo.cog} x {geo.nb * po}) sums of {geo.cig * taps} "
                   f"terms; direct convolution {p}")
    cw.line(f"struct alignas(16) gc_vs {{ {acc} v[{v}]; }};",
            f"alignas(16) __shared__ {acc} gc_xs[2][{p.cc}][{rows}][{pitch}];",
            f"alignas(16) __shared__ {acc} gc_ws[2][{p.cc * taps}][{mp + v}];",
            "__shared__ int gc_bad[2];",
            "const int tid = (int)threadIdx.x;",
            f"const int gi = tid / {p.t}, lt = tid % {p.t};",
            f"const int tr = lt / {p.tc}, tq = lt % {p.tc};",
            "if (tid < 2) gc_bad[tid] = 0;", "__syncthreads();", "int q = 0;")
    # each staging slot's place in the chunk (the same for every tile)
    for s in range(xslots):
        e = f"(tid + {BLOCK * s})" if s else "tid"
        cw.line(f"const int xc{s} = {e} / {rows * pitch}, xr{s} = {e} / {pitch} % {rows}, "
                f"xq{s} = {e} % {pitch};")
    for s in range(wslots):
        e = f"(tid + {BLOCK * s})" if s else "tid"
        # neighbouring threads stage neighbouring terms of a filter row (the filter's layout
        # in either direction: coalesced reads), into rows padded by a vector (fewer bank
        # conflicts between the channels they store)
        cw.line(f"const int wk{s} = {e} % {p.cc * taps}, wm{s} = {e} / {p.cc * taps};",
                f"const bool win{s} = {e} < {we} && wm{s} < {geo.cog};")
    cw.line(*(f"{acc} xv{s};" for s in range(xslots)),
            *(f"{acc} wv{s};" for s in range(wslots)))
    with cw.block(f"for ({ix} tile = blockIdx.x; tile < {count}; tile += gridDim.x)"):
        cw.line(f"const {ix} tw = tile % {ct}, th = tile / {ct} % {rt};")
        if p.ms > 1:
            cw.line(f"const {ix} mc = tile / {rt * ct} % {p.ms}, nz = tile / {rt * ct * p.ms};")
        else:
            cw.line(f"const {ix} nz = tile / {rt * ct};")
        cw.line(f"const {ix} z = nz % {geo.groups}, nbi = nz / {geo.groups};",
                f"const {ix} oh0 = th * {p.br}, ow0 = tw * {p.bc};")
        for s in range(xslots):
            inside = [f"tid + {BLOCK * s} < {xe}"] if (s + 1) * BLOCK > xe else []
            at = ("oh0", "ow0") if geo.s == (1, 1) else (f"oh0 * {sh}", f"ow0 * {sw}")
            cw.line(f"const {ix} xh{s} = {at[0]} - {P0} + xr{s}, "
                    f"xw{s} = {at[1]} - {P1} + xq{s};")
            inside += [f"xh{s} >= 0", f"xh{s} < {H}", f"xw{s} >= 0", f"xw{s} < {W}"]
            if pitch > need:
                inside.append(f"xq{s} < {need}")
            cw.line(f"const bool xin{s} = {' && '.join(inside)};",
                    f"const {ix} xo{s} = (nbi * {geo.ci_all} + z * {geo.cig} + xc{s}) * {px_} "
                    f"+ xh{s} * {W} + xw{s};")
        for s in range(wslots):
            cw.line(*a.row(f"wa{s}", f"(mc * {mp} + wm{s})" if p.ms > 1 else f"wm{s}"))
        cw.line(f"{acc} c[{p.tm}][{p.tn}];")
        unrolled(cw, [f"i < {p.tm}", f"j < {p.tn}"], ["c[i][j] = 0;"])
        st.first()
        cw.line("__syncthreads();")
        with cw.block(f"for (int kt = 0; kt < {chunks}; kt++)"):
            cw.line("const int cur = kt & 1;", f"const bool more = kt + 1 < {chunks};",
                    "bool bad = false;")
            with cw.block("if (more)"):
                st.load(f"(kt + 1) * {p.cc}")
            with cw.block("if (gc_bad[cur] == q)"):
                _multiply(cw, geo, p, acc, window, fused, True)
            with cw.orelse():
                _multiply(cw, geo, p, acc, window, fused, False)
            with cw.block("if (more)"):
                st.store("cur ^ 1")
            cw.line("__syncthreads();")
        body = [f"const {ix} m = {f'mc * {mp} + ' if p.ms > 1 else ''}gi * {p.tm} + i;",
                f"const {ix} oh = oh0 + tr, ow = ow0 + tq * {p.tn} + j;",
                f"if (m < {geo.cog} && oh < {OH} && ow < {OW})", "{",
                f"  const {ix} n = nbi * {po} + oh * {OW} + ow;",
                *("  " + x for x in store("m", "n", "c[i][j]")), "}"]
        unrolled(cw, [f"i < {p.tm}", f"j < {p.tn}"], body)


@dataclass
class _Staging:
    """A chunk's staging: the input patch's slots (``xv<s>``: ``xe`` elements) and the
    filter's (``wv<s>``: ``we``), a thread's ``tid + 256 * s``-th of each."""

    cw: CWriter
    geo: Geometry
    p: Plan
    a: tiling.Operand
    t_x: CType
    px: str
    acc: str
    xe: int
    we: int

    @property
    def xslots(self) -> int:
        return cdiv(self.xe, BLOCK)

    @property
    def wslots(self) -> int:
        return cdiv(self.we, BLOCK)

    def load(self, c0: str) -> None:
        """The chunk of channels from ``c0`` into registers, flagging a non-finite filter
        value in ``bad``."""
        cw, geo, a, acc = self.cw, self.geo, self.a, self.acc
        assert geo.cig % self.p.cc == 0
        taps = geo.ks[0] * geo.ks[1]
        for s in range(self.xslots):
            at = f"{self.px}[xo{s} + ({c0}) * {geo.ins[0] * geo.ins[1]}]"
            cw.line(f"xv{s} = xin{s} ? {widen(self.t_x, at)} : ({acc})0;")
        for s in range(self.wslots):
            cw.line(f"wv{s} = 0;")
            inside = f" && mc * {self.p.g * self.p.tm} + wm{s} < {geo.cog}" \
                if self.p.ms > 1 else ""
            with cw.block(f"if (win{s}{inside})"):
                lines, off, _ = a.at(f"wa{s}", f"(({c0}) * {taps} + wk{s})")
                cw.line(*lines, f"wv{s} = {widen(a.t, f'{a.ptr}[{off}]')};")
            cw.line(f"bad |= !(wv{s} - wv{s} == ({acc})0);")

    def store(self, buf: str) -> None:
        """Registers -> the shared chunk ``buf`` (a partial last slot's spare threads store
        nothing), and the chunk's flag: this staging's number where a thread saw a non-finite
        filter value (``tiled.py``'s flags)."""
        cw = self.cw
        for s in range(self.xslots):
            guard = f"if (tid + {BLOCK * s} < {self.xe}) " if (s + 1) * BLOCK > self.xe else ""
            cw.line(f"{guard}(&gc_xs[{buf}][0][0][0])[tid + {BLOCK * s}] = xv{s};")
        for s in range(self.wslots):
            guard = f"if (tid + {BLOCK * s} < {self.we}) " if (s + 1) * BLOCK > self.we else ""
            cw.line(f"{guard}gc_ws[{buf}][wk{s}][wm{s}] = wv{s};")
        cw.line("q++;", f"if (bad) gc_bad[{buf}] = q;")

    def first(self) -> None:
        """Load and store the first chunk (its own scope: ``bad`` is the chunk's)."""
        with self.cw.block():
            self.cw.line("bool bad = false;")
            self.load("0")
            self.store("0")


def _multiply(cw: CWriter, geo: Geometry, p: Plan, acc: str, window: int, fused: bool,
              masked: bool) -> None:
    """The chunk's terms: channel, filter row, tap of the row, in order; ``masked``: each term
    only where its input position lies inside the input."""
    (H, W), (KH, KW), (dh, dw), (P0, P1), (sh, sw) = geo.ins, geo.ks, geo.d, geo.pad, geo.s
    v = _vec(acc)
    vec_w = p.tm % v == 0
    if masked and (sh, sw) == (1, 1):
        cw.line(f"const int ih0 = (int)(oh0 + tr) - {P0}, iw0 = (int)(ow0 + tq * {p.tn}) - {P1};")
    elif masked:
        cw.line(f"const int ih0 = (int)(oh0 + tr) * {sh} - {P0}, "
                f"iw0 = (int)(ow0 + tq * {p.tn}) * {sw} - {P1};")
    cw.line("#pragma unroll" if not masked else "#pragma unroll 1")
    with cw.block(f"for (int cc = 0; cc < {p.cc}; cc++)"):
        cw.line("#pragma unroll")
        with cw.block(f"for (int kh = 0; kh < {KH}; kh++)"):
            cw.line(f"gc_vs xr[{window // v}];")
            row = "tr" if sh == 1 else f"tr * {sh}"
            col = f"tq * {p.tn}" if sw == 1 else f"tq * {p.tn * sw}"
            unrolled(cw, [f"u < {window // v}"], [
                f"xr[u] = *(const gc_vs *)&gc_xs[cur][cc][{row} + kh * {dh}][{col} + u * {v}];"])
            if masked:
                cw.line(f"const bool rok = ih0 + kh * {dh} >= 0 && ih0 + kh * {dh} < {H};")
            cw.line("#pragma unroll")
            with cw.block(f"for (int kw = 0; kw < {KW}; kw++)"):
                tap = f"cc * {KH * KW} + kh * {KW} + kw"
                if vec_w:
                    cw.line(f"gc_vs wr[{p.tm // v}];")
                    unrolled(cw, [f"u < {p.tm // v}"], [
                        f"wr[u] = *(const gc_vs *)&gc_ws[cur][{tap}][gi * {p.tm} + u * {v}];"])
                    wval = f"wr[i / {v}].v[i % {v}]"
                else:
                    cw.line(f"{acc} wr[{p.tm}];")
                    unrolled(cw, [f"i < {p.tm}"], [f"wr[i] = gc_ws[cur][{tap}][gi * {p.tm} + i];"])
                    wval = "wr[i]"
                at = f"j + kw * {dw}" if sw == 1 else f"j * {sw} + kw * {dw}"
                xval = f"xr[({at}) / {v}].v[({at}) % {v}]"
                term = add_term(acc, wval, xval, "c[i][j]", fused, "x")
                if masked:
                    cond = (f"rok && iw0 + {at} >= 0 && iw0 + {at} < {W}")
                    term = [f"if ({cond})", "{", *("  " + x for x in term), "}"]
                unrolled(cw, [f"i < {p.tm}", f"j < {p.tn}"], term)
