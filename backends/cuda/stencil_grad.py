"""The filter gradient of a 2-D forward convolution of few output channels (unit strides) or of
few input channels (a first layer, any strides), under ``sums="split"``: ``dW[z*M + m, c, tap] =
sum over (image, position) of dY[m, o] * X[c, o*s - sp + tap'*d]`` with each part's sum in a
thread's registers and the input read from a staged patch.

The implicit GEMM (``tiled.py``) stages the im2col matrix of ``X`` (``C x taps`` columns, one
element per column and position) and each thread of its 16x16 tiles adds 4 products per 4
shared loads (measured on the H200: the UNet's 16-channel filter gradients at 4-8 TFLOP/s).
Here a block stages, per chunk of ``RC`` output rows of one image, ``dY``'s chunk (the block's
channels of the group, ``[position][channel]``) and ``X``'s rows under it with their halo
(``CB`` input channels, padding staged as 0). A thread owns 4 channels of ``dY`` by one input
channel by every tap, or by the taps of a group of filter rows (``KG`` groups: a first layer's
7x7 filter would need 196 sums a thread), ``4 x taps / KG`` sums in registers: per 4 positions
of a row it reads 4 vectors of ``dY`` and, per filter row, a window of ``X`` (``3*sw + (KW-1)*dw
+ 1`` values, whole vectors), and adds ``4 x 4 x KW`` products per filter row (144 for a 3x3
filter against 10 shared loads; 112 per 8 loads for a 7x7 filter at stride 2). A row whose
length 4 does not divide ends in a group of fewer positions. A first layer's many channels of
``dY`` are cut into ``MS`` chunks, a block each, so a block keeps 256 threads at most.

**The sums.** Split, as ``tiled.py``'s products under ``sums="split"``: each output's terms
(images, then positions in row-major order) are cut into parts of ``RP`` whole output rows of
one image (the image's last part shorter where ``RP`` does not divide its rows); a part's
terms are added in order, one fused multiply-add each, and saved to scratch; a second launch
adds each output's parts in order from +0 (``tiled.sum_parts``). Within SPEC-training.md
§9.5's bound, reproducible, and the host harness gives the GPU's bits. Positions in the padding
are staged as ``x = 0``, which adds ±0 where ``dY`` is finite; a chunk whose ``dY`` holds a NaN
or an infinity (flagged while staging) is multiplied with each term's validity checked from its
coordinates instead, as the reference skips.

``plan`` takes a layer or leaves it to the implicit GEMM; the canonical order
(``sums="canonical"``) always keeps the latter. It takes float32 or float16 data, filters of
at least 2x2 and rows of at least 8 positions, and either (``_threads``) 8 input channels or
more with unit strides, 2 to 32 channels of ``dY`` per group and rows of a multiple of 4, or a
first layer of fewer than 8 input channels, up to ``MAX_M`` channels of ``dY``, filters up to 9
wide, at least ``MIN_INTENSITY`` products per staged element (measured: the 7x7 first layers
win, the 3x3 ones lose) and 32 threads a block.
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
# sums a thread keeps at most (4 channels of dY by a 3x3 filter): a first layer's larger filter
# is cut into groups of rows, a thread each
MAX_SUMS = 36
# the most channels of dY a first layer takes (the largest first layer of the models)
MAX_M = 128
# a first layer's products per staged element (a chunk's terms over the X and dY it stages) at
# least: on the H200 at batch 64 (gpu_launches.py) squeezenet1_0's 96x3x7x7 filter gradient
# (85 per staged element) ran 1.83x faster than the implicit GEMM (0.150 -> 0.082 ms) and
# resnet18's 64x3x7x7 (72) 1.14x (0.083 -> 0.073 ms); the UNet's 16x3x3x3 (19) ran 2.1x slower
# (0.054 -> 0.113 ms) and mobilenet_v2's 32x3x3x3 (18) slower too (under 0.030 -> 0.035 ms)
MIN_INTENSITY = 40


@dataclass(frozen=True)
class Geometry:
    """``dY``: ``nb x groups*m x outs``; ``X``: ``nb x groups*c x ins``; the filter ``ks``,
    dilations ``d``, start padding ``sp``, ``flip`` for a mirrored filter, strides ``s``."""

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
    s: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class Plan:
    """``G`` groups of 4 channels of dY by ``CB`` input channels by ``KG`` groups of filter rows
    a block (a thread each), the group's channels of dY in ``MS`` chunks (a block each), parts
    of ``RP`` output rows (the last of an image shorter where ``RP`` does not divide them)
    staged ``RC`` rows at a time."""

    g: int
    cb: int
    rp: int
    rc: int
    kg: int = 1
    ms: int = 1

    @property
    def threads(self) -> int:
        return self.g * self.cb * self.kg

    def __str__(self) -> str:
        rows = f", filter rows in {self.kg} groups" if self.kg > 1 else ""
        chunks = f", {self.ms} blocks of channels" if self.ms > 1 else ""
        return (f"{self.g * TM}x{self.cb} a block{rows}{chunks}, parts of {self.rp} rows by "
                f"{self.rc}")


def _window(geo: Geometry, n: int) -> int:
    """The vectors of a window of X under ``n`` neighbouring positions of a row."""
    return cdiv((n - 1) * geo.s[1] + (geo.ks[1] - 1) * geo.d[1] + 1, 4)


def _sizes(geo: Geometry, p: Plan) -> tuple[int, int, int, int, int]:
    """The staged patch's rows, row pitch and channel pitch, a window's vectors, and dY's row
    pitch. The channel pitch is 4 modulo 32 words, and with groups of filter rows a group's
    first row lies ``4 x CB`` words further modulo 32 where a pitch allows it: the 8 threads of
    a quarter warp (input channel fastest, then filter rows) read their windows from distinct
    banks."""
    KH, dh, (sh, sw), ow = geo.ks[0], geo.d[0], geo.s, geo.outs[1]
    rows = (p.rc - 1) * sh + (KH - 1) * dh + 1
    nv = _window(geo, TM)
    pitch = 4 * (cdiv(ow, 4) - 1) * sw + 4 * nv
    if p.kg > 1:
        step = KH // p.kg * dh
        pitch = next((q for q in range(pitch, pitch + 32, 4)
                      if step * q % 32 == 4 * p.cb % 32), pitch)
    cpitch = rows * pitch
    cpitch += (4 - cpitch) % 32
    return rows, pitch, cpitch, nv, p.g * TM + 4


def _shared(geo: Geometry, p: Plan) -> int:
    _, _, cpitch, _, dp = _sizes(geo, p)
    return 4 * (p.cb * cpitch + p.rc * geo.outs[1] * dp) + 16


def _threads(geo: Geometry) -> tuple[int, int, int, int] | None:
    """A block's threads (``G``, ``CB``, ``KG``) and the chunks of dY's channels (``MS``).

    A layer of 8 or more input channels (unit strides, 2 to 32 channels of dY, rows of a
    multiple of 4) takes every tap in a thread and the most input channels that give a block
    of 32 to 256 threads, as measured in the UNet. A first layer (fewer than 8 input channels,
    any strides, up to ``MAX_M`` channels of dY) takes all its input channels in a block, the
    most filter rows a thread that keep ``MAX_SUMS`` sums and, where they can, 64 threads, and
    the channels of dY in as few chunks as fit 256 threads."""
    (KH, KW), g = geo.ks, cdiv(geo.m, TM)
    if geo.c >= 8:
        if geo.s != (1, 1) or geo.m > 32 or geo.outs[1] % 4:
            return None
        cbs = [cb for cb in range(geo.c, 0, -1) if geo.c % cb == 0 and 32 <= g * cb <= BLOCK]
        return (g, cbs[0], 1, 1) if cbs else None
    if geo.m > MAX_M or TM * KW > MAX_SUMS:
        return None
    krs = [r for r in range(KH, 0, -1) if KH % r == 0 and TM * r * KW <= MAX_SUMS]
    kr = next((r for r in krs if min(g, BLOCK // (geo.c * KH // r)) * geo.c * KH // r >= 64),
              krs[-1])
    u = geo.c * (KH // kr)
    if u > BLOCK:
        return None
    ms = cdiv(g, BLOCK // u)
    gb = cdiv(g, ms)
    return (gb, geo.c, KH // kr, ms) if gb * u >= 32 else None


def fits(geo: Geometry, acc: str) -> bool:
    """True when a layer's shape suits the kernel (module docstring)."""
    return (acc == "float" and geo.m >= 2 and min(geo.ks) >= 2 and geo.outs[1] >= 8
            and _threads(geo) is not None)


def plan(geo: Geometry, acc: str) -> Plan | None:
    """The blocking of a layer, or None when it takes the implicit GEMM."""
    if not fits(geo, acc):
        return None
    threads = _threads(geo)
    assert threads is not None
    g, cb, kg, ms = threads
    oh, ow = geo.outs
    blocks = geo.groups * (geo.c // cb) * ms * geo.nb
    # the longest parts (whole rows of one image) that still give the SMs blocks enough, of
    # MIN_PART positions at least (else the implicit GEMM): rows that divide the image's, else
    # (a prime count of rows) the fewest parts of nearly equal rows
    rps = [r for r in range(oh, 0, -1) if oh % r == 0 and r * ow >= MIN_PART]
    rp = next((r for r in rps if blocks * (oh // r) >= MIN_BLOCKS), 0)
    if not rp:
        even = [cdiv(oh, n) for n in range(1, oh + 1)]
        rp = next((r for r in even if r * ow >= MIN_PART and blocks * cdiv(oh, r) >= MIN_BLOCKS),
                  0)
    for rc in (2, 1, 4, 8):  # two rows a chunk measured fastest (module docstring)
        p = Plan(g, cb, rp, rc, kg, ms)
        if rp and rp % rc == 0 and _shared(geo, p) <= SHARED_BLOCK:
            return p if geo.c >= 8 or intensity(geo, p) >= MIN_INTENSITY else None
    return None


def intensity(geo: Geometry, p: Plan) -> float:
    """A chunk's products over the elements it stages (X's patch and dY's rows)."""
    rows, pitch, _, _, dp = _sizes(geo, p)
    staged = p.cb * rows * pitch + p.rc * geo.outs[1] * (dp - 4)
    return p.rc * geo.outs[1] * (dp - 4) * p.cb * geo.ks[0] * geo.ks[1] / staged


def emit(k: CudaKernel, geo: Geometry, p: Plan, product: tiling.Product, pdy: str, px: str,
         t: CType) -> None:
    """The two launches (module docstring); ``product`` is the filter gradient's product
    (``Z = groups``, ``M`` channels of ``dY``, ``N = c x taps``: its epilogue and index
    type); ``pdy`` and ``px`` the pointers of dY and X, both of type ``t``."""
    ix = product.ix
    k.barrier = True
    k.reordered = True
    cw = k.code
    (H, W), (OH, OW), (KH, KW), (s0, s1), sh = geo.ins, geo.outs, geo.ks, geo.sp, geo.s[0]
    taps, kr = KH * KW, KH // p.kg
    rows, pitch, cpitch, nv, dp = _sizes(geo, p)
    per_image = cdiv(OH, p.rp)
    ragged = OH % p.rp != 0 or p.rp % p.rc != 0  # chunks of fewer rows than RC
    parts = geo.nb * per_image
    cs = geo.c // p.cb
    count = geo.groups * p.ms * cs * parts
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
            "const int tid = (int)threadIdx.x;")
    if p.kg > 1:
        cw.line(f"const int gi = tid / {p.cb * p.kg}, kg = tid / {p.cb} % {p.kg}, "
                f"ci = tid % {p.cb};")
    else:
        cw.line(f"const int gi = tid / {p.cb}, ci = tid % {p.cb};")
    cw.line("if (tid == 0) gc_bad = 0;", "int q = 0;")
    with cw.block(f"for ({ix} tile = blockIdx.x; tile < {count}; tile += gridDim.x)"):
        m0 = f"mc * {p.g * TM}" if p.ms > 1 else ""
        if p.ms > 1:
            cw.line(f"const {ix} cs = tile % {cs}, mc = tile / {cs} % {p.ms}, "
                    f"part = tile / {cs * p.ms} % {parts};",
                    f"const {ix} z = tile / {cs * p.ms * parts};")
        else:
            cw.line(f"const {ix} cs = tile % {cs}, part = tile / {cs} % {parts};",
                    f"const {ix} z = tile / {cs * parts};")
        cw.line(f"const {ix} nbi = part / {per_image}, rb = part % {per_image};",
                f"const {ix} xbase = (nbi * {geo.groups * geo.c} + z * {geo.c} + cs * {p.cb}) "
                f"* {H * W};",
                f"const {ix} dbase = (nbi * {geo.groups * geo.m} + z * {geo.m}"
                f"{' + ' + m0 if m0 else ''}) * {OH * OW};")
        if ragged:
            cw.line(f"const {ix} rend = rb * {p.rp} + {p.rp} < {OH} ? rb * {p.rp} + {p.rp} : "
                    f"{OH};")
        cw.line(f"float c[{TM}][{kr * KW}];")
        unrolled(cw, [f"i < {TM}", f"t < {kr * KW}"], ["c[i][t] = 0;"])
        with cw.block(f"for (int rc = 0; rc < {cdiv(p.rp, p.rc)}; rc++)"):
            cw.line(f"const {ix} oh0 = rb * {p.rp} + rc * {p.rc};")
            if ragged:
                cw.line("if (oh0 >= rend) break;",
                        f"const int nr = rend - oh0 < {p.rc} ? (int)(rend - oh0) : {p.rc};")
            cw.line("bool bad = false;", "__syncthreads();")  # the previous chunk's readers
            with cw.block(f"for (int e = tid; e < {xe}; e += {T})"):
                cw.line(f"const int xc = e / {rows * pitch}, xr = e / {pitch} % {rows}, "
                        f"xq = e % {pitch};",
                        f"const {ix} h = oh0{f' * {sh}' if sh > 1 else ''} - {s0} + xr, "
                        f"w = xq - {s1};",
                        f"gc_xs[xc * {cpitch} + xr * {pitch} + xq] = h >= 0 && h < {H} && "
                        f"w >= 0 && w < {W} ? "
                        f"{widen(t, f'{px}[xbase + xc * {H * W} + h * {W} + w]')} : 0.0f;")
            with cw.block(f"for (int e = tid; e < {de}; e += {T})"):
                inside = f"{m0} + dm < {geo.m}" if m0 else f"dm < {geo.m}"
                if ragged:
                    inside += f" && dq < nr * {OW}"
                cw.line(f"const int dm = e / {p.rc * OW}, dq = e % {p.rc * OW};",
                        f"const float v = {inside} ? "
                        f"{widen(t, f'{pdy}[dbase + dm * {OH * OW} + oh0 * {OW} + dq]')}"
                        " : 0.0f;",
                        "bad |= !(v - v == 0.0f);",
                        f"gc_ds[dq * {dp} + dm] = v;")
            cw.line("q++;", "if (bad) gc_bad = q;", "__syncthreads();")
            with cw.block("if (gc_bad == q)"):
                _multiply(cw, geo, p, True, ragged)
            with cw.orelse():
                _multiply(cw, geo, p, False, ragged)
        body = []
        for kk in range(kr):
            for kw in range(KW):
                if p.kg > 1:
                    row = f"({KH - 1 - kk} - kg * {kr})" if geo.flip else f"(kg * {kr} + {kk})"
                    tap = f"{row} * {KW} + {KW - 1 - kw if geo.flip else kw}"
                else:
                    tap = str(((KH - 1 - kk) * KW + KW - 1 - kw) if geo.flip else kk * KW + kw)
                body.append(f"if (m < {geo.m}) "
                            f"{split.cell('m', f'(cs * {p.cb} + ci) * {taps} + {tap}')} = "
                            f"c[i][{kk * KW + kw}];")
        first = f"{m0} + gi * {TM} + i" if m0 else f"gi * {TM} + i"
        unrolled(cw, [f"i < {TM}"], [f"const {ix} m = {first};", *body])
    tiled.sum_parts(k, product, split)


def _multiply(cw: CWriter, geo: Geometry, p: Plan, masked: bool, ragged: bool) -> None:
    """The chunk's terms: rows, then positions of a row in fours (a last group of fewer where
    4 does not divide the row), in order; ``masked``: each term only where its input position
    lies inside the input."""
    OW = geo.outs[1]
    _, pitch, cpitch, _, dp = _sizes(geo, p)
    cw.line("#pragma unroll 1")
    with cw.block(f"for (int r = 0; r < {'nr' if ragged else p.rc}; r++)"):
        full, rest = OW // 4 * 4, OW % 4
        cw.line("#pragma unroll 1")
        with cw.block(f"for (int c0 = 0; c0 < {full}; c0 += 4)"):
            _positions(cw, geo, p, masked, 4, pitch, cpitch, dp)
        if rest:
            with cw.block():
                cw.line(f"const int c0 = {full};")
                _positions(cw, geo, p, masked, rest, pitch, cpitch, dp)


def _positions(cw: CWriter, geo: Geometry, p: Plan, masked: bool, n: int, pitch: int,
               cpitch: int, dp: int) -> None:
    """The terms of ``n`` neighbouring positions of row ``r`` from column ``c0``: their vectors
    of dY, then per filter row the window of X under them, every tap of the row."""
    (H, W), (KH, KW), (dh, dw), (s0, s1), OW = geo.ins, geo.ks, geo.d, geo.sp, geo.outs[1]
    (sh, sw), kr = geo.s, KH // p.kg
    nv = _window(geo, n)
    cw.line(f"gc_vs dv[{n}];")
    unrolled(cw, [f"j < {n}"], [
        f"dv[j] = *(const gc_vs *)&gc_ds[(r * {OW} + c0 + j) * {dp} + gi * {TM}];"])
    cw.line("#pragma unroll")
    with cw.block(f"for (int kh = 0; kh < {kr}; kh++)"):
        row = "r" if sh == 1 else f"r * {sh}"
        first = f"(kg * {kr} + kh)" if p.kg > 1 else "kh"
        col = "c0" if sw == 1 else f"c0 * {sw}"
        cw.line(f"gc_vs xw[{nv}];")
        unrolled(cw, [f"u < {nv}"], [
            f"xw[u] = *(const gc_vs *)&gc_xs[ci * {cpitch} + ({row} + {first} * {dh}) * "
            f"{pitch} + {col} + u * 4];"])
        if masked:
            at_row = "oh0 + r" if sh == 1 else f"(oh0 + r) * {sh}"
            cw.line(f"const int h = (int)({at_row} + {first} * {dh}) - {s0};",
                    f"const bool rok = h >= 0 && h < {H};")
        at = f"j * {sw} + kw * {dw}" if sw > 1 else f"j + kw * {dw}"
        term = [f"c[i][kh * {KW} + kw] = fmaf(dv[j].v[i], xw[({at}) / 4].v[({at}) % 4], "
                f"c[i][kh * {KW} + kw]);"]
        if masked:
            w = f"{col} + {at} - {s1}"
            cond = f"rok && {w} >= 0 && {w} < {W}"
            term = [f"if ({cond})", "{", *("  " + x for x in term), "}"]
        unrolled(cw, [f"j < {n}", f"kw < {KW}", f"i < {TM}"], term)
