"""The filter gradient of a 2-D, unit-stride, forward convolution of few output channels, under
``sums="split"``: ``dW[z*M + m, c, tap] = sum over (image, position) of dY[m, o] * X[c, o - sp +
tap'*d]`` with each part's sum in a thread's registers and the input read from a staged patch.

The implicit GEMM (``tiled.py``) stages the im2col matrix of ``X`` (``C x taps`` columns, one
element per column and position) and each thread of its 16x16 tiles adds 4 products per 4
shared loads (measured on the H200: the UNet's 16-channel filter gradients at 4-8 TFLOP/s).
Here a block stages, per chunk of ``RC`` output rows of one image, ``dY``'s chunk (every channel
of the group, ``[position][channel]``) and ``X``'s rows under it with their halo (``CB`` input
channels, padding staged as 0). A thread owns 4 channels of ``dY`` by one input channel by every
tap (``4 x taps`` sums in registers): per 4 positions of a row it reads 4 vectors of ``dY`` and,
per filter row, a window of ``X`` (``4 + (KW-1)*dw`` values, whole vectors), and adds
``4 x 4 x taps`` products, 144 for a 3x3 filter against 10 shared loads.

**The sums.** Split, as ``tiled.py``'s products under ``sums="split"``: each output's terms
(images, then positions in row-major order) are cut into parts of ``RP`` whole output rows of
one image; a part's terms are added in order, one fused multiply-add each, and saved to scratch;
a second launch adds each output's parts in order from +0 (``tiled.sum_parts``). Within
SPEC-training.md §9.5's bound, reproducible, and the host harness gives the GPU's bits.
Positions in the padding are staged as ``x = 0``, which adds ±0 where ``dY`` is finite; a chunk
whose ``dY`` holds a NaN or an infinity (flagged while staging) is multiplied with each term's
validity checked from its coordinates instead, as the reference skips.

``plan`` takes a layer (``fits``: float32 or float16 data, 2 to 32 channels of ``dY`` per group,
at least 8 input channels, filters of at least 2x2, rows of a multiple of 4 positions) or leaves
it to the implicit GEMM; the canonical order (``sums="canonical"``) always keeps the latter.
"""

from __future__ import annotations

from dataclasses import dataclass
from gradc.backends.c.ctypes_map import CType
from gradc.backends.c.scalar import widen
from gradc.backends.c.writer import CWriter
from gradc.backends.cuda import tiled, tiling
from gradc.backends.cuda.kernel import BLOCK, CudaKernel
from gradc.backends.cuda.tiled import unrolled
from gradc.backends.cuda.tiling import SHARED_BLOCK, SMS, cdiv

TM = 4  # channels of dY per thread: one 16-byte vector
MIN_BLOCKS = 3 * SMS  # blocks wanted at least (parts shrink until there are)
# positions a part holds at least: on the H200 parts of 32 ran 1.2-1.5x slower than the implicit
# GEMM (the UNet's 32x32x3x3 filter gradients at 16x16 and batch 64, at 32x32 and batch 8), and
# parts of 64-512 1.2-2.6x faster (the same run: the UNet at batch 64, 0.302 -> 0.114 ms for
# its 16x32x3x3 one)
MIN_PART = 64


@dataclass(frozen=True)
class Geometry:
    """``dY``: ``nb x groups*m x outs``; ``X``: ``nb x groups*c x ins``; the filter ``ks``,
    dilations ``d``, start padding ``sp``, ``flip`` for a mirrored filter."""

    nb: int
    groups: int
    m: int
    c: int
    ins: tuple[int, int]
    outs: tuple[int, int]
    ks: tuple[int, int]
    d: tuple[int, int]
    sp: tuple[int, int]
    flip: bool


@dataclass(frozen=True)
class Plan:
    """``G`` groups of 4 channels of ``dY`` by ``CB`` input channels a block (a thread each),
    parts of ``RP`` output rows staged ``RC`` rows at a time."""

    g: int
    cb: int
    rp: int
    rc: int

    @property
    def threads(self) -> int:
        return self.g * self.cb

    def __str__(self) -> str:
        return f"{self.g * TM}x{self.cb} a block, parts of {self.rp} rows by {self.rc}"


def _sizes(geo: Geometry, g: int, rc: int, cb: int) -> tuple[int, int, int, int, int]:
    """The staged patch's rows, row pitch and channel pitch, a window's vectors, and dY's row
    pitch (a channel pitch of 4 modulo 32 words: the threads of a warp, one channel each, read
    their windows from distinct banks)."""
    (KH, KW), (dh, dw), ow = geo.ks, geo.d, geo.outs[1]
    rows = rc + (KH - 1) * dh
    nv = cdiv(TM + (KW - 1) * dw, 4)
    pitch = ow - 4 + 4 * nv
    cpitch = rows * pitch
    cpitch += (4 - cpitch) % 32
    return rows, pitch, cpitch, nv, g * TM + 4


def _shared(geo: Geometry, g: int, rc: int, cb: int) -> int:
    _, _, cpitch, _, dp = _sizes(geo, g, rc, cb)
    return 4 * (cb * cpitch + rc * geo.outs[1] * dp) + 16


def fits(geo: Geometry, acc: str) -> bool:
    """True when a layer's shape suits the kernel (module docstring)."""
    return (acc == "float" and 2 <= geo.m <= 32 and geo.c >= 8 and min(geo.ks) >= 2
            and geo.outs[1] % 4 == 0 and geo.outs[1] >= 8)


def plan(geo: Geometry, acc: str) -> Plan | None:
    """The blocking of a layer, or None when it takes the implicit GEMM."""
    if not fits(geo, acc):
        return None
    g = cdiv(geo.m, TM)
    cbs = [cb for cb in range(geo.c, 0, -1)
           if geo.c % cb == 0 and 32 <= g * cb <= BLOCK]
    if not cbs:
        return None
    cb, oh = cbs[0], geo.outs[0]
    # the longest parts (whole rows of one image) that still give the SMs blocks enough, of
    # MIN_PART positions at least (else the implicit GEMM)
    rps = [r for r in range(oh, 0, -1) if oh % r == 0 and r * geo.outs[1] >= MIN_PART]
    blocks = geo.groups * (geo.c // cb) * geo.nb
    rp = next((r for r in rps if blocks * (oh // r) >= MIN_BLOCKS), 0)
    for rc in (2, 1, 4, 8):  # two rows a chunk measured fastest (module docstring)
        if rp and rp % rc == 0 and _shared(geo, g, rc, cb) <= SHARED_BLOCK:
            return Plan(g, cb, rp, rc)
    return None


def emit(k: CudaKernel, geo: Geometry, p: Plan, product: tiling.Product, pdy: str, px: str,
         t: CType) -> None:
    """The two launches (module docstring); ``product`` is the filter gradient's product
    (``Z = groups``, ``M`` channels of ``dY``, ``N = c x taps``: its epilogue and index
    type); ``pdy`` and ``px`` the pointers of dY and X, both of type ``t``."""
    ix = product.ix
    k.barrier = True
    k.reordered = True
    cw = k.code
    (H, W), (OH, OW), (KH, KW), (s0, s1) = geo.ins, geo.outs, geo.ks, geo.sp
    taps = KH * KW
    rows, pitch, cpitch, nv, dp = _sizes(geo, p.g, p.rc, p.cb)
    per_image = OH // p.rp
    parts = geo.nb * per_image
    cs = geo.c // p.cb
    count = geo.groups * cs * parts
    T = p.threads
    xe, de = p.cb * rows * pitch, p.g * TM * p.rc * OW
    split = tiled.Parts(product, parts, p.rp * OW,
                         k.scratch("float", parts * product.z * product.m * product.n))
    k.block = T
    k.work = min(count, 1 << 30) * T
    cw.comment(f"{geo.groups} x ({geo.m} x {geo.c * taps}) sums of {geo.nb * OH * OW} terms in "
               f"{parts} parts of {p.rp * OW} (sums=split); direct filter gradient {p}")
    cw.line("struct alignas(16) gc_vs { float v[4]; };",
            f"alignas(16) __shared__ float gc_xs[{p.cb * cpitch}];",
            f"alignas(16) __shared__ float gc_ds[{p.rc * OW * dp}];",
            "__shared__ int gc_bad;",
            "const int tid = (int)threadIdx.x;",
            f"const int gi = tid / {p.cb}, ci = tid % {p.cb};",
            "if (tid == 0) gc_bad = 0;", "int q = 0;")
    with cw.block(f"for ({ix} tile = blockIdx.x; tile < {count}; tile += gridDim.x)"):
        cw.line(f"const {ix} cs = tile % {cs}, part = tile / {cs} % {parts};",
                f"const {ix} z = tile / {cs * parts};",
                f"const {ix} nbi = part / {per_image}, rb = part % {per_image};",
                f"const {ix} xbase = (nbi * {geo.groups * geo.c} + z * {geo.c} + cs * {p.cb}) "
                f"* {H * W};",
                f"const {ix} dbase = (nbi * {geo.groups * geo.m} + z * {geo.m}) * {OH * OW};",
                f"float c[{TM}][{taps}];")
        unrolled(cw, [f"i < {TM}", f"t < {taps}"], ["c[i][t] = 0;"])
        with cw.block(f"for (int rc = 0; rc < {p.rp // p.rc}; rc++)"):
            cw.line(f"const {ix} oh0 = rb * {p.rp} + rc * {p.rc};", "bool bad = false;",
                    "__syncthreads();")  # the previous chunk's readers are done
            with cw.block(f"for (int e = tid; e < {xe}; e += {T})"):
                cw.line(f"const int xc = e / {rows * pitch}, xr = e / {pitch} % {rows}, "
                        f"xq = e % {pitch};",
                        f"const {ix} h = oh0 - {s0} + xr, w = xq - {s1};",
                        f"gc_xs[xc * {cpitch} + xr * {pitch} + xq] = h >= 0 && h < {H} && "
                        f"w >= 0 && w < {W} ? "
                        f"{widen(t, f'{px}[xbase + xc * {H * W} + h * {W} + w]')} : 0.0f;")
            with cw.block(f"for (int e = tid; e < {de}; e += {T})"):
                cw.line(f"const int dm = e / {p.rc * OW}, dq = e % {p.rc * OW};",
                        f"const float v = dm < {geo.m} ? "
                        f"{widen(t, f'{pdy}[dbase + dm * {OH * OW} + oh0 * {OW} + dq]')}"
                        " : 0.0f;",
                        "bad |= !(v - v == 0.0f);",
                        f"gc_ds[dq * {dp} + dm] = v;")
            cw.line("q++;", "if (bad) gc_bad = q;", "__syncthreads();")
            with cw.block("if (gc_bad == q)"):
                _multiply(cw, geo, p, nv, dp, pitch, cpitch, True)
            with cw.orelse():
                _multiply(cw, geo, p, nv, dp, pitch, cpitch, False)
        body = []
        for kh in range(KH):
            for kw in range(KW):
                tap = ((KH - 1 - kh) * KW + KW - 1 - kw) if geo.flip else kh * KW + kw
                body.append(f"if (m < {geo.m}) "
                            f"{split.cell('m', f'(cs * {p.cb} + ci) * {taps} + {tap}')} = "
                            f"c[i][{kh * KW + kw}];")
        unrolled(cw, [f"i < {TM}"], [f"const {ix} m = gi * {TM} + i;", *body])
    tiled.sum_parts(k, product, split)


def _multiply(cw: CWriter, geo: Geometry, p: Plan, nv: int, dp: int, pitch: int, cpitch: int,
              masked: bool) -> None:
    """The chunk's terms: rows, then positions of a row in fours, in order; ``masked``: each
    term only where its input position lies inside the input."""
    (H, W), (KH, KW), (dh, dw), (s0, s1), OW = geo.ins, geo.ks, geo.d, geo.sp, geo.outs[1]
    cw.line("#pragma unroll 1")
    with cw.block(f"for (int r = 0; r < {p.rc}; r++)"):
        cw.line("#pragma unroll 1")
        with cw.block(f"for (int c0 = 0; c0 < {OW}; c0 += 4)"):
            cw.line("gc_vs dv[4];")
            unrolled(cw, ["j < 4"], [
                f"dv[j] = *(const gc_vs *)&gc_ds[(r * {OW} + c0 + j) * {dp} + gi * {TM}];"])
            cw.line("#pragma unroll")
            with cw.block(f"for (int kh = 0; kh < {KH}; kh++)"):
                cw.line(f"gc_vs xw[{nv}];")
                unrolled(cw, [f"u < {nv}"], [
                    f"xw[u] = *(const gc_vs *)&gc_xs[ci * {cpitch} + (r + kh * {dh}) * {pitch} "
                    f"+ c0 + u * 4];"])
                if masked:
                    cw.line(f"const int h = (int)(oh0 + r + kh * {dh}) - {s0};",
                            f"const bool rok = h >= 0 && h < {H};")
                term = [f"c[i][kh * {KW} + kw] = fmaf(dv[j].v[i], "
                        f"xw[(j + kw * {dw}) / 4].v[(j + kw * {dw}) % 4], c[i][kh * {KW} + kw]);"]
                if masked:
                    w = f"c0 + j + kw * {dw} - {s1}"
                    cond = f"rok && {w} >= 0 && {w} < {W}"
                    term = [f"if ({cond})", "{", *("  " + x for x in term), "}"]
                unrolled(cw, ["j < 4", f"kw < {KW}", f"i < {TM}"], term)

