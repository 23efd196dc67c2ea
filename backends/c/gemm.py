"""C kernels of SPEC-training.md §11 (gemm) and §13 (average pooling, in average_pooling.py).

gemm keeps §11.1's canonical order, so it is bit-identical to the reference: every result
element starts from +0 in the accumulation type and, for k ascending, adds one rounded product
with one rounded addition; then ``alpha * acc`` is rounded, and ``beta * c`` rounded and added
when ``c`` is given and ``beta != 0``. Only the loop structure around that sequence is chosen
for speed (BLIS-style register blocking):

- a job is (batch index, panel of ``NR`` columns, chunk of ``MC`` rows); OpenMP shares the jobs
  statically, so small-N and small-M shapes still give every thread work;
- k runs in blocks of ``KC``: each block packs ``op(b)[k0:k0+KC, n0:n0+NR]`` (widened to the
  accumulation type, zero-padded past N) into a contiguous, aligned panel, so transposed or
  strided ``b`` costs one copy per block;
- a micro-tile of ``MR`` rows x ``NR`` columns lives in vector registers (GCC vector extensions,
  64-byte vectors, two per row) across the block's k steps: ``p = b * a; acc = acc + p`` as
  separate statements (``-ffp-contract=off``: no FMA); rows past the last full tile take the same
  code one row at a time. Between k blocks the tile is kept in an accumulator array of the
  chunk; storing and reloading a float is exact, so splitting the k *loop* (not the sum) keeps
  the order;
- the epilogue (alpha, beta * c, narrowing to float16) runs per element after the last block.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.c.average_pooling import EMITTERS as AVERAGE_POOLING_EMITTERS
from gradc.backends.c.ctypes_map import CType, ctype, float_literal
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.mm import emit_plain, plain_product
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter
from gradc.ir.core import Value
from gradc.ir.types import Dim

VBYTES = 64  # bytes of one vector (AVX-512 register; GCC splits it where narrower)
NV = 2  # vectors per micro-tile row: NR = NV * lanes columns
MR = 8  # rows of a full micro-tile (MR * NV accumulators stay in registers)
MC = 128  # rows of a job's chunk (its accumulator array is MC x NR)
KC = 256  # k steps per packed panel of op(b) (KC x NR, fits L1/L2)


def _batch_strides(k: Kernel, v: Value, out_batch: Sequence[Dim]) -> list[str]:
    """Element strides of ``v``'s batch axes, 0 on an axis ``v`` broadcasts."""
    shape = v.type.shape
    out = []
    for i in range(len(out_batch)):
        if k.dims.static(shape[i]) == 1:
            out.append("0")
        else:
            out.append(k.dims.prod(shape[i + 1:]))
    return out


def emit_gemm(k: Kernel) -> None:
    """``Y = alpha * op(a) @ op(b) + beta * c`` in §11.1's order (module docstring); plain
    float32/float64 products go through the prelude's ``gc_mm`` (``mm.py``)."""
    node = k.node
    if plain_product(node, k.dims):
        emit_plain(k)
        return
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) == 3 and node.attrs["beta"] != 0 else None
    y = node.outputs[0]
    t = ctype(y.type.dtype)
    kdim = b.type.shape[-1] if node.attrs["trans_b"] else b.type.shape[-2]
    work = 1  # multiply-adds, when every dim is static (else 0)
    for dim in (*y.type.shape, kdim):
        size = k.dims.static(dim)
        work = work * size if size is not None else 0
    m, n = (k.dims.static(v) for v in y.type.shape[-2:])
    few_rows = m is not None and n is not None and m < NARROW_M and n > m
    if (t.acc == t.store and t.acc in ("float", "double") and len(y.type.shape) == 2
            and (c is None or len(c.type.shape) == 2)
            and work >= (TABLES_MIN_FEW_ROWS if few_rows else TABLES_MIN)):
        _emit_gemm_tables(k, a, b, c, y, t)
        return
    acc = t.acc
    lanes = VBYTES // (8 if acc == "double" else 4)
    nr = NV * lanes
    ta, tb = node.attrs["trans_a"], node.attrs["trans_b"]
    batch = y.type.shape[:-2]
    d = k.dims
    cw = k.code
    pa, pb, py = k.param(a), k.param(b), k.param(y)
    cw.line(f"typedef {acc} gc_gv __attribute__((vector_size({VBYTES})));",
            f"const int64_t M = {d.expr(y.type.shape[-2])};",
            f"const int64_t N = {d.expr(y.type.shape[-1])};",
            f"const int64_t K = {d.expr(b.type.shape[-1] if tb else b.type.shape[-2])};",
            f"const int64_t NBT = {d.prod(batch)};",
            f"const int64_t NP = (N + {nr - 1}) / {nr}, NMC = (M + {MC - 1}) / {MC};",
            "const int64_t J = NBT * NP * NMC;")
    sa, sb = _batch_strides(k, a, batch), _batch_strides(k, b, batch)
    sc = _batch_strides(k, c, batch) if c is not None else []
    cw.line(omp_for("(double)NBT * (double)M * (double)N * (double)K"))
    with cw.block("for (int64_t job = 0; job < J; job++)"):
        cw.line(f"const int64_t m0 = job % NMC * {MC}, n0 = job / NMC % NP * {nr};",
                f"const int64_t mb = M - m0 < {MC} ? M - m0 : {MC};",
                f"const int64_t nb = N - n0 < {nr} ? N - n0 : {nr};",
                "int64_t oa = 0, ob = 0, oc = 0;")
        cw.line("int64_t bi = job / NMC / NP;" if batch else "(void)oc;")
        for i in range(len(batch) - 1, -1, -1):
            with cw.block():
                cw.line(f"const int64_t ci = bi % {d.expr(batch[i])};",
                        f"bi /= {d.expr(batch[i])};",
                        f"oa += ci * {sa[i]};", f"ob += ci * {sb[i]};",
                        f"oc += ci * {sc[i]};" if c is not None else "(void)oc;")
        if batch:
            cw.line("(void)bi;")
        cw.line("const int64_t oy = job / NMC / NP * M * N;",
                f"{acc} bp[{KC * nr}] __attribute__((aligned({VBYTES})));",
                f"{acc} cb[{MC * nr}] __attribute__((aligned({VBYTES})));")
        # full-width tiles (not float16) finish in registers; the others go through cb
        cw.line(f"const int direct = {'0' if t.is_f16 else f'nb == {nr}'};")
        alpha = float_literal(node.attrs["alpha"], acc)
        beta = float_literal(node.attrs["beta"], acc)
        cref = None
        if c is not None:
            cs = c.type.shape
            cm = "0" if d.static(cs[-2]) == 1 else d.expr(cs[-1])
            cref = (k.param(c), cm, d.static(cs[-1]) != 1)
        with cw.block(f"for (int64_t k0 = 0; k0 < K; k0 += {KC})"):
            cw.line(f"const int64_t kb = K - k0 < {KC} ? K - k0 : {KC};")
            _pack_b(cw, t, pb, tb, nr)
            cw.line("int64_t i = 0;")
            with cw.block(f"for (; i + {MR} <= mb; i += {MR})"):
                _micro(cw, t, pa, ta, MR, lanes, (py, alpha, beta, cref))
            with cw.block("for (; i < mb; i++)"):
                _micro(cw, t, pa, ta, 1, lanes, (py, alpha, beta, cref))
        with cw.block("if (!direct) for (int64_t i = 0; i < mb; i++)"):
            with cw.block("for (int64_t j = 0; j < nb; j++)"):
                cw.line(f"{acc} v = {alpha} * cb[i * {nr} + j];")
                if cref is not None:
                    pc, cm, cvec = cref
                    el = f"{pc}[oc + (m0 + i) * {cm} + (n0 + j) * {'1' if cvec else '0'}]"
                    cw.line(f"const {acc} bc = {beta} * ({acc}){widen(t, el)};", "v = v + bc;")
                cw.line(f"{py}[oy + (m0 + i) * N + n0 + j] = {narrow(t, 'v')};")


def _pack_b(cw: CWriter, t: CType, pb: str, tb: bool, nr: int) -> None:
    """Copy ``op(b)[k0:k0+kb, n0:n0+nb]`` into ``bp`` (row stride ``nr``), zeros past ``nb``."""
    if tb:  # b is N x K: read along k
        with cw.block("for (int64_t j = 0; j < nb; j++)"):
            cw.line(f"const {t.store} *src = {pb} + ob + (n0 + j) * K + k0;",
                    f"for (int64_t kk = 0; kk < kb; kk++) bp[kk * {nr} + j] = "
                    f"({t.acc}){widen(t, 'src[kk]')};")
    else:  # b is K x N: read along n
        with cw.block("for (int64_t kk = 0; kk < kb; kk++)"):
            cw.line(f"const {t.store} *src = {pb} + ob + (k0 + kk) * N + n0;",
                    f"for (int64_t j = 0; j < nb; j++) bp[kk * {nr} + j] = "
                    f"({t.acc}){widen(t, 'src[j]')};")
    with cw.block(f"if (nb < {nr})"):
        cw.line(f"for (int64_t kk = 0; kk < kb; kk++) for (int64_t j = nb; j < {nr}; j++) "
                f"bp[kk * {nr} + j] = 0;")


def _micro(cw: CWriter, t: CType, pa: str, ta: bool, rows: int, lanes: int,
           epi: tuple[str, str, str, tuple[str, str, bool] | None]) -> None:
    """``rows`` x ``nr`` tile at chunk row ``i``: registers over the block's ``kb`` k steps.

    After the last block of a ``direct`` job the epilogue runs on the registers (``epi``: the
    output parameter, alpha and beta literals, and ``c`` as (parameter, row stride, varies
    along n) or None): ``alpha * acc`` then ``+ beta * c``, each rounded per lane, the same
    operations as the scalar epilogue; otherwise the tile goes back to ``cb``."""
    nr = NV * lanes
    rr, vv = range(rows), range(NV)
    for r in rr:
        cw.line(*(f"gc_gv c{r}_{v} = k0 == 0 ? (gc_gv){{0}} : "
                  f"*(const gc_gv *)(cb + (i + {r}) * {nr} + {v * lanes});" for v in vv))
        cw.line(f"const {t.store} *a{r} = {pa} + oa + "
                + (f"k0 * M + m0 + i + {r};" if ta else f"(m0 + i + {r}) * K + k0;"))
    step = "kk * M" if ta else "kk"
    with cw.block("for (int64_t kk = 0; kk < kb; kk++)"):
        cw.line(*(f"const gc_gv b{v} = *(const gc_gv *)(bp + kk * {nr} + {v * lanes});"
                  for v in vv))
        for r in rr:
            cw.line(f"const {t.acc} x{r} = {widen(t, f'a{r}[{step}]')};")
            for v in vv:
                cw.line(f"const gc_gv p{r}_{v} = b{v} * x{r};", f"c{r}_{v} = c{r}_{v} + p{r}_{v};")
    py, alpha, beta, cref = epi
    with cw.block("if (direct && k0 + kb == K)"):
        for r in rr:
            for v in vv:
                col = f"n0 + {v * lanes}"
                cw.line(f"gc_gv o{r}_{v} = {alpha} * c{r}_{v};")
                if cref is not None:
                    pc, cm, cvec = cref
                    row = f"{pc} + oc + (m0 + i + {r}) * {cm}"
                    if cvec:  # c varies along n: a vector of it, scaled lane by lane
                        cw.line(f"gc_gv q{r}_{v};", f"memcpy(&q{r}_{v}, {row} + {col}, "
                                f"sizeof q{r}_{v});", f"const gc_gv e{r}_{v} = {beta} * q{r}_{v};")
                    else:  # one c per row: scaled once, then splat (no arithmetic on it)
                        cw.line(f"const {t.acc} e{r}_{v} = {beta} * *({row});")
                    cw.line(f"o{r}_{v} = o{r}_{v} + e{r}_{v};")
                cw.line(f"memcpy({py} + oy + (m0 + i + {r}) * N + {col}, &o{r}_{v}, "
                        f"sizeof o{r}_{v});")
    with cw.block("else"):
        for r in rr:
            cw.line(*(f"*(gc_gv *)(cb + (i + {r}) * {nr} + {v * lanes}) = c{r}_{v};"
                      for v in vv))


EMITTERS: dict[str, Any] = {
    "gemm": emit_gemm,
    **AVERAGE_POOLING_EMITTERS,
}


# 2-D float32/float64 products of at least this many multiply-adds go through the prelude's
# gc_gemm (measured: 30% faster at 256^3, equal at 1024^3 and 8x128x3072; below about 2^22 its
# fixed costs -- offset tables, scratch -- make it slower than the kernel above)
TABLES_MIN = 1 << 22
NARROW_M = 16  # fewer rows than this (and more columns): the product runs transposed
# Transposed products (a few samples times a weight matrix) take the table gemm from this much
# work: it reads the weight in place and packs the few rows once, where the blocked kernel packs
# the weight, one scalar store per 8 multiply-adds. Measured (ms, 2 threads, x @ w^T):
# 8x3072 by 128: 0.127 -> 0.095; 8x512 by 512: 0.087 -> 0.060; 8x256 by 256: 0.025 -> 0.016;
# 8x128 by 64 (65K): 0.003 -> 0.0045, so smaller ones keep the blocked kernel.
TABLES_MIN_FEW_ROWS = 1 << 19


def _emit_gemm_tables(k: Kernel, a: Value, b: Value, c: Value | None, y: Value,
                      t: CType) -> None:
    """A 2-D float32/float64 gemm through the prelude's ``gc_gemm`` (the convolution kernels'
    register-tiled product, same order: k ascending from +0, one rounding per operation; no
    copy of a; op(b) packed per block), then ``alpha * acc (+ beta * c)`` per element. With
    alpha 1 and no c the product is the result (``1 * acc`` is ``acc`` exactly) and is written
    in place. With fewer than ``NARROW_M`` rows (a few samples times a weight matrix) it
    computes ``Y^T = op(b)^T @ op(a)^T`` into a scratch matrix instead, so that the weight
    matrix is read in place rather than packed for a handful of rows."""
    node = k.node
    d = k.dims
    cw = k.code
    ta, tb = node.attrs["trans_a"], node.attrs["trans_b"]
    pa, pb, py = k.param(a), k.param(b), k.param(y)
    sfx = "f32" if t.acc == "float" else "f64"
    plain = node.attrs["alpha"] == 1 and c is None
    cw.line(f"const int64_t M = {d.expr(y.type.shape[0])}, N = {d.expr(y.type.shape[1])}, "
            f"K = {d.expr(b.type.shape[1] if tb else b.type.shape[0])};",
            f"const int tr = M < {NARROW_M} && N > M;")
    lanes = 16 if t.acc == "float" else 8  # the prelude gemm's panel width (NR)
    cw.line(f"const int64_t NPK = tr ? (M + {lanes - 1}) / {lanes} * {lanes} * K : 1;")
    bufs = [("amo", "int64_t", "M"), ("aoff", "int64_t", "K"), ("boff", "int64_t", "K"),
            ("bno", "int64_t", "N"), ("ct", t.store, "(tr || !plain) ? M * N : 1"),
            ("apk", t.store, "NPK")]
    cw.line(f"const int plain = {int(plain)};")
    for name, ty, n in bufs:
        cw.line(f"{ty} *{name} = ({ty} *)gc_alloc((size_t)({n}) * sizeof({ty}));")
    ok = " && ".join(f"{name} != NULL" for name, _, _ in bufs)
    with cw.block(f"if (!({ok}))"):
        cw.line(*(f"free({name});" for name, _, _ in bufs), "return 1;")
    # op(a)[m, k] = a[amo[m] + aoff[k]], op(b)[k, n] = b[boff[k] + bno[n]]
    cw.line(f"for (int64_t i = 0; i < M; i++) amo[i] = {'i' if ta else 'i * K'};",
            f"for (int64_t i = 0; i < K; i++) aoff[i] = {'i * M' if ta else 'i'};",
            f"for (int64_t i = 0; i < K; i++) boff[i] = {'i' if tb else 'i * N'};",
            f"for (int64_t i = 0; i < N; i++) bno[i] = {'i * K' if tb else 'i'};",
            f"{t.store} *out = (tr || !plain) ? ct : {py};")
    cw.line("#pragma omp parallel num_threads(nt) if((double)M * (double)N * (double)K > "
            "GC_PAR_MIN)")
    with cw.block():
        with cw.block("if (tr)"):
            # op(a)^T packed once, panel-major (apk[((m / NR) * K + k) * NR + m % NR], zeros
            # past M), and read by every job: unpacked, each of the weight's row chunks would
            # pack it again (MLP's 8x3072 by 3072x128 layer: 0.127 -> 0.095 ms)
            cw.line("#pragma omp for schedule(static)")
            with cw.block(f"for (int64_t p = 0; p < NPK / {lanes}; p++)"):
                cw.line(f"const int64_t kk = p % K, m0 = p / K * {lanes};",
                        f"{t.store} *dst = apk + p * {lanes};")
                cw.line(f"for (int64_t j = 0; j < {lanes}; j++) dst[j] = m0 + j < M ? "
                        f"{pa}[amo[m0 + j] + aoff[kk]] : 0;")
            cw.line(f"gc_gemm_{sfx}(N, M, K, {pb}, bno, boff, apk, NULL, NULL, ct, M, 1, 1);")
        with cw.orelse():
            # transposed a: consecutive rows (amo NULL: one pointer per k-step)
            cw.line(f"gc_gemm_{sfx}(M, N, K, {pa}, {'NULL' if ta else 'amo'}, aoff, {pb}, boff, "
                    f"{'bno' if tb else 'NULL'}, out, N, 1, 0);")
        if plain:
            cw.line("#pragma omp for schedule(static)")
            with cw.block("for (int64_t i = 0; i < (tr ? M : 0); i++)"):
                cw.line(f"for (int64_t j = 0; j < N; j++) {py}[i * N + j] = ct[j * M + i];")
        else:
            alpha = float_literal(node.attrs["alpha"], t.acc)
            beta = float_literal(node.attrs["beta"], t.acc)
            cw.line("#pragma omp for schedule(static)")
            with cw.block("for (int64_t i = 0; i < M; i++)"):
                with cw.block("for (int64_t j = 0; j < N; j++)"):
                    cw.line(f"{t.acc} v = {alpha} * (tr ? ct[j * M + i] : ct[i * N + j]);")
                    if c is not None:
                        cs = c.type.shape
                        row = "0" if d.static(cs[0]) == 1 else "i * N"
                        col = "0" if d.static(cs[1]) == 1 else "j"
                        if row != "0" and col == "0":
                            row = "i"
                        cw.line(f"const {t.acc} bc = {beta} * {k.param(c)}[{row} + {col}];",
                                "v = v + bc;")
                    cw.line(f"{py}[i * N + j] = v;")
    cw.line(*(f"free({name});" for name, _, _ in bufs))
