"""Products in the canonical order: the tiled shared-memory kernel of gemm and convolution.

``gemm.py`` and ``conv.py`` state each op as ``Z`` independent products (batch entries, groups)
``OUT[z][m][n] = sum over kk of A(z, m, kk) * B(z, kk, n)`` whose ``kk`` runs, from 0 to
``K - 1``, in the op's canonical order (SPEC-training.md §9.5-§11): k ascending for gemm, input
channel then tap for a convolution, image then position for a filter gradient. ``B`` may skip
terms (``Operand.at`` gives a validity: padding, taps that miss the input), which the reference
skips rather than multiplying by 0. Every element starts from +0 in ``ACC`` and adds one rounded
product with one rounded addition per term, written as two statements (NVRTC runs with
``--fmad=false``, the host harness with ``-ffp-contract=off``), so the result is the reference's
bits whatever the tiling. Under ``sums="split"`` each term is one fused multiply-add instead
(``fused_terms``: ``fmaf``/``fma``, one rounding; within §9.5's bound, and correctly rounded, so the
host harness and every GPU give the same bits).

The tiled kernel (``emit_tiled``), one block of 256 threads per ``BM x BN`` tile of outputs:

- ``K`` runs in chunks of ``BK``: the threads stage ``A``'s ``BM x BK`` and ``B``'s ``BK x BN``
  chunk (widened to ``ACC``; neighbouring threads read neighbouring elements along the operand's
  ``fast`` index, so the loads coalesce) into shared memory, double-buffered: the next chunk is
  read into registers while the current one is multiplied, then stored, one barrier a chunk;
- each computing thread keeps a ``TM x TN`` block of sums in registers and reads its ``A`` and
  ``B`` fragments with 16-byte shared loads (``_Frag``: rows at one kk, or consecutive kk of
  one row); for each ``kk`` of the chunk in order it adds ``A[i] * B[j]`` to sum ``(i, j)``: the
  order of every sum is ``kk`` ascending;
- a skipped term is staged as ``B = 0``: a sum starts at +0 and an IEEE sum is -0 only when both
  terms are, so it never is, and ``s + (+-0) = s``, provided the other factor is finite
  (``inf * 0`` is NaN). The staging threads flag a chunk whose ``A`` holds a NaN or an infinity
  (``gc_bad``), and the block multiplies that chunk with each term's validity instead (a mask
  staged beside ``B``), as the reference skips. Terms past ``K`` are ``A = B = 0`` (+0 added);
- the tile's results are stored by the op's epilogue (``Product.store``).

The direct kernel (``emit_direct``, a thread per output element, its terms read from global
memory in order, skipped terms not multiplied) serves products with a side of at most two rows
(a depthwise convolution's groups, a matrix-vector product), where a tile would be mostly empty.

The tile of each product is chosen at compile time by ``tiling.choose`` (``tiling.py``: the
product's description, the tile shapes, the cost model).
"""

from __future__ import annotations

from typing import Sequence

from gradc.backends.c.scalar import widen
from gradc.backends.c.writer import CWriter
from gradc.backends.cuda import tiling
from gradc.backends.cuda.kernel import BLOCK, CudaKernel
from gradc.backends.cuda.tiling import DIRECT, PAD, Lines, Operand, Product, Tile, cdiv

def fused_terms(k: CudaKernel) -> bool:
    """True when this kernel's products add each term with one fused multiply-add: under
    ``sums="split"`` (``fmaf``/``fma``: one rounding per term instead of two, so within
    SPEC-training.md §9.5's bound; an FMA is correctly rounded, so the host harness gives the
    GPU's bits). Measured on the H200 (bench_gpu_gemm.py, resnet18 and the UNet at batch 64):
    the convolutions' kernels 11% faster in all, 15-20% where they are compute-bound."""
    return k.split


def add_term(acc: str, x: str, y: str, s: str, fused: bool, tmp: str) -> Lines:
    """Add the product ``x * y`` to the sum ``s``: two rounded operations (the reference's; the
    product named ``tmp``), or one fused multiply-add."""
    if fused:
        return [f"{s} = {'fmaf' if acc == 'float' else 'fma'}({x}, {y}, {s});"]
    return [f"const {acc} {tmp} = {x} * {y};", f"{s} = {s} + {tmp};"]


class Parts:
    """A product split along K (``sums="split"``): ``count`` parts of ``length`` terms, each
    part's sums saved in ``scratch`` as ``[part][z][m][n]`` in ACC."""

    def __init__(self, p: Product, count: int, length: int, scratch: str) -> None:
        self.p, self.count, self.length, self.scratch = p, count, length, scratch

    def declare(self, cw: CWriter, zp: str) -> None:
        """``part``, ``z`` of the split problem index ``zp``, and the part's terms
        ``[kbeg, kend)``."""
        p, ix = self.p, self.p.ix
        cw.line(f"const {ix} part = {zp} / {p.z}, z = {zp} % {p.z};",
                f"const {ix} kbeg = part * {self.length};",
                f"const {ix} kend = kbeg + {self.length} < {p.k} ? kbeg + {self.length} : "
                f"{p.k};")

    def cell(self, m: str, n: str) -> str:
        """The scratch element of this part's sum of output (m, n)."""
        p = self.p
        return f"{self.scratch}[((part * {p.z} + z) * {p.m} + {m}) * {p.n} + {n}]"

    def save(self, m: str, n: str, acc: str) -> list[str]:
        """The line saving the part's sum of output (m, n)."""
        return [f"{self.cell(m, n)} = {acc};"]

    def vectors(self, fb: "_Frag") -> bool:
        """True when a thread's sums of one row are saved as 16-byte vectors: its B rows lie
        kk-major, ``V`` consecutive outputs from a multiple of ``V``, and rows of ``N`` (a
        multiple of ``V``) keep every vector inside one row and aligned (the scratch is
        256-byte aligned). One store instead of ``V``, each filling whole sectors."""
        return fb.kmajor and self.p.n % fb.v == 0

    def save_vectors(self, cw: CWriter, fa: "_Frag", fb: "_Frag", t: Tile, inside: str) -> None:
        """The tile's sums of this part, saved a vector at a time (``vectors``)."""
        p, ix, v = self.p, self.p.ix, fb.v
        vals = ", ".join(f"c[i][jv * {v} + {e}]" for e in range(v))
        body = [f"const {ix} m = m0 + {fa.row('i')};",
                f"const {ix} n = n0 + {fb.row(f'(jv * {v})')};",
                f"if ({inside}m < {p.m} && n < {p.n})", "{",
                f"  *({fb.vec} *)&{self.cell('m', 'n')} = {fb.vec}{{{{{vals}}}}};", "}"]
        unrolled(cw, [f"i < {t.tm}", f"jv < {t.tn // v}"], body)


def emit(k: CudaKernel, p: Product, tile: Tile | None = None, parts: int = 1) -> Tile:
    """Write the kernel of ``p`` (tiled, or direct); returns the tile used. Under
    ``sums="split"`` (``k.split``) the tile and the parts come from ``tiling.choose_split``
    (``parts`` given with ``tile``: forced, for tests)."""
    if tile is None:
        t, parts = tiling.choose_split(p) if k.split else (tiling.choose(p), 1)
    else:
        t = tile
    if fused_terms(k):  # every term one fused multiply-add: not the reference's rounding
        k.reordered = True
    if parts > 1:
        _emit_split(k, p, t, parts)
        return t
    k.code.comment(f"{p.z} x ({p.m} x {p.n}) sums of {p.k} terms; tile {t}")
    if t == DIRECT:
        emit_direct(k, p)
    else:
        emit_tiled(k, p, t)
    return t


def _emit_split(k: CudaKernel, p: Product, t: Tile, parts: int) -> None:
    """Two launches: each part's sums (the tile's kernel over a K range), then a thread per
    output adding its parts in order from +0 and running the epilogue."""
    k.reordered = True
    length = cdiv(cdiv(p.k, parts), t.bk) * t.bk
    count = cdiv(p.k, length)
    split = Parts(p, count, length, k.scratch(p.acc, count * p.z * p.m * p.n))
    k.code.comment(f"{p.z} x ({p.m} x {p.n}) sums of {p.k} terms in {count} parts of "
                   f"{length} (sums=split); tile {t}")
    if t == DIRECT:
        emit_direct(k, p, split)
    else:
        emit_tiled(k, p, t, split)
    sum_parts(k, p, split)


def sum_parts(k: CudaKernel, p: Product, split: Parts) -> None:
    """The second launch of a split product: a thread per output adds its parts in order from
    +0 and runs the epilogue."""
    k.next_launch()
    cw, ix, outs, count = k.code, p.ix, p.z * p.m * p.n, split.count
    k.code.comment(f"the {count} parts of each output, in order")
    with k.each(outs, "e"):
        cw.line(f"const {ix} z = ({ix})(e / {p.m * p.n});",
                f"const {ix} m = ({ix})(e / {p.n} % {p.m});",
                f"const {ix} n = ({ix})(e % {p.n});", f"{p.acc} s = 0;")
        with cw.block(f"for (int q = 0; q < {count}; q++)"):
            cw.line(f"s = s + {split.scratch}[(int64_t)q * {outs} + e];")
        cw.line(*p.setup(), *p.store("m", "n", "s"))
    k.note_reads()


# -- the direct kernel -------------------------------------------------------------------------

def emit_direct(k: CudaKernel, p: Product, split: Parts | None = None) -> None:
    """A thread per output element: its terms in order, skipped ones not multiplied (``split``:
    the terms of one part, saved to scratch)."""
    cw, ix, acc = k.code, p.ix, p.acc
    parts = split.count if split else 1
    with k.each(parts * p.z * p.m * p.n, "e"):
        if split:
            split.declare(cw, f"({ix})(e / {p.m * p.n})")
        else:
            cw.line(f"const {ix} z = ({ix})(e / {p.m * p.n});")
        cw.line(f"const {ix} m = ({ix})(e / {p.n} % {p.m});",
                f"const {ix} n = ({ix})(e % {p.n});")
        cw.line(*p.setup(), *p.a.row("ra", "m"), *p.b.row("rb", "n"), f"{acc} s = 0;")
        head = f"for ({ix} kk = kbeg; kk < kend; kk++)" if split else \
            f"for ({ix} kk = 0; kk < {p.k}; kk++)"
        with cw.block(head):
            la, oa, _ = p.a.at("ra", "kk")
            lb, ob, vb = p.b.at("rb", "kk")
            cw.line(f"{acc} x, y;", "bool ok = true;")
            with cw.block():  # A's element is always in bounds (a skipped term's too)
                cw.line(*la, f"x = {widen(p.a.t, f'{p.a.ptr}[{oa}]')};")
            with cw.block():
                cw.line(*lb, f"ok = {vb or 'true'};",
                        f"y = ok ? {widen(p.b.t, f'{p.b.ptr}[{ob}]')} : 0;")
            with cw.block("if (ok)"):
                cw.line(*add_term(acc, "x", "y", "s", fused_terms(k), "q"))
        cw.line(*(split.save("m", "n", "s") if split else p.store("m", "n", "s")))


# -- the tiled kernel --------------------------------------------------------------------------

class _Frag:
    """One operand's part of the tile: its chunk in shared memory and a thread's ``n`` rows
    (``TM`` of A, ``TN`` of B) of the tile's ``rows``, the thread's index being ``var``.

    Where ``n`` rows fill 16 bytes, the chunk is stored kk-major (``[kk][row]``) and a thread
    reads its rows at each kk as 16-byte vectors (rows ``var*V + v + r*S``); with fewer rows it
    is stored row-major (``[row][kk]``) and a thread reads 16 bytes of consecutive kk of each
    of its rows (``var + i * rows / n``) once per group of kk. Either way one shared load gives
    four floats (two doubles)."""

    def __init__(self, side: str, rows: int, n: int, var: str, acc: str, bk: int) -> None:
        self.side, self.rows, self.n, self.var, self.acc, self.bk = side, rows, n, var, acc, bk
        self.kmajor, self.v, self.r = tiling.layout(n, acc)  # r: vectors read per kk (group)
        self.s = rows // self.r if self.kmajor else 0
        self.name, self.vec = f"gc_{side}s", f"gc_v{side}"

    def declarations(self) -> Lines:
        """The vector type and the two shared chunks."""
        dims = (f"[{self.bk}][{self.rows + PAD}]" if self.kmajor
                else f"[{self.rows}][{self.bk + PAD}]")
        return [f"struct alignas(16) {self.vec} {{ {self.acc} v[{self.v}]; }};",
                f"alignas(16) __shared__ {self.acc} {self.name}[2]{dims};"]

    def cell(self, buf: str, kk: str, row: str) -> str:
        """The shared element of (kk, row in the tile)."""
        return f"{self.name}[{buf}][{kk}][{row}]" if self.kmajor else \
            f"{self.name}[{buf}][{row}][{kk}]"

    def row(self, i: str) -> str:
        """The tile row of the thread's i-th row."""
        if self.kmajor:
            return f"{self.var} * {self.v} + {i} % {self.v} + {i} / {self.v} * {self.s}"
        return f"{self.var} + {i} * {self.rows // self.n}"

    def group(self, cw: CWriter, k0: str) -> None:
        """Row-major: the thread's vectors of the group of kk at ``k0``."""
        if not self.kmajor:
            cw.line(f"{self.vec} g{self.side}[{self.n}];")
            unrolled(cw, [f"i < {self.n}"], [
                f"g{self.side}[i] = *(const {self.vec} *)&{self.cell('cur', k0, self.row('i'))};"])

    def step(self, cw: CWriter, kk: str) -> None:
        """Kk-major: the thread's vectors at ``kk``."""
        if self.kmajor:
            cw.line(f"{self.vec} f{self.side}[{self.r}];")
            at = f"{self.var} * {self.v} + r * {self.s}"
            unrolled(cw, [f"r < {self.r}"], [
                f"f{self.side}[r] = *(const {self.vec} *)&{self.name}[cur][{kk}][{at}];"])

    def value(self, i: str, kq: str) -> str:
        """The thread's i-th row at the kq-th kk of the group."""
        if self.kmajor:
            return f"f{self.side}[{i} / {self.v}].v[{i} % {self.v}]"
        return f"g{self.side}[{i}].v[{kq}]"


class _Staging:
    """One operand's staging: slots of the chunk per thread, their rows and their kk."""

    def __init__(self, name: str, op: Operand, frag: _Frag, count: int) -> None:
        self.name, self.op, self.frag, self.count = name, op, frag, count
        self.rows, self.bk = frag.rows, frag.bk
        self.slots = cdiv(self.rows * self.bk, BLOCK)
        self.partial = (self.rows * self.bk) % BLOCK != 0

    def positions(self, s: int) -> tuple[str, str]:
        """C expressions (row in tile, kk in chunk) of slot ``s`` of thread ``tid``."""
        idx = f"(tid + {BLOCK * s})" if s else "tid"
        if self.op.fast == "k":
            return f"{idx} / {self.bk}", f"{idx} % {self.bk}"
        return f"{idx} % {self.rows}", f"{idx} / {self.rows}"

    def row_tag(self, s: int) -> str:
        """The names of slot ``s``'s row values: slot 0's when every slot has its row (a
        block's threads span whole rows of the chunk, neighbours along the row)."""
        shared = self.op.fast == "r" and BLOCK % self.rows == 0
        return f"{self.name}{0 if shared else s}"

    def k_tag(self, s: int) -> str:
        """The name of slot ``s``'s kk in the chunk: slot 0's when every slot has the same one
        (the threads stage along K and a block spans whole chunk rows), so the digits taken
        from a term's index are computed once for all the thread's slots."""
        shared = self.op.fast == "k" and BLOCK % self.bk == 0
        return f"{self.name}{0 if shared else s}"

    def declare(self, cw: CWriter, origin: str, ix: str) -> None:
        """Per output tile: each slot's row, whether it is inside the problem, and the
        operand's row values."""
        for s in range(self.slots):
            row, kk = self.positions(s)
            tag = f"{self.name}{s}"
            # a row past the problem's edge only where the tiles do not divide it
            inside = "true" if self.count % self.rows == 0 else \
                f"{self.row_tag(s)}_r < {self.count}"
            if self.partial and s == self.slots - 1:
                inside += f" && tid + {BLOCK * s} < {self.rows * self.bk}"
            if self.row_tag(s) == tag:
                cw.line(f"const {ix} {tag}_r = {origin} + ({row});")
            if self.k_tag(s) == tag:
                cw.line(f"const int {tag}_k = {kk};")
            cw.line(f"const bool {tag}_in = {inside};")
            if self.row_tag(s) == tag:
                cw.line(*self.op.row(tag, f"{tag}_r"))

    def load(self, cw: CWriter, acc: str, k0: str, kcount: str | None, masked: bool,
             check: bool, ix: str) -> None:
        """Read the chunk at ``k0`` into registers ``<name>v<s>`` (and masks ``<name>m<s>``;
        ``kcount``: the end of the terms, None where no chunk passes it; ``check``: flag a NaN
        or an infinity in ``bad``)."""
        op = self.op
        for s in range(self.slots):
            tag = f"{self.name}{s}"
            v = f"{self.name}v{s}"
            cw.line(f"{v} = 0;")
            if masked:
                cw.line(f"{self.name}m{s} = 0;")
            with cw.block():
                cw.line(f"const {tiling.digits(ix)} kk = {k0} + {self.k_tag(s)}_k;")
                inside = f"{tag}_in" if kcount is None else f"{tag}_in && kk < {kcount}"
                with cw.block(f"if ({inside})"):
                    lines, off, valid = op.at(self.row_tag(s), "kk")
                    cw.line(*lines)
                    value = widen(op.t, f"{op.ptr}[{off}]")
                    if valid is None:
                        cw.line(f"{v} = {value};")
                    else:
                        with cw.block(f"if ({valid})"):
                            cw.line(f"{v} = {value};", f"{self.name}m{s} = 1;")
            if check:
                cw.line(f"bad |= !({v} - {v} == ({acc})0);")

    def store(self, cw: CWriter, buf: str, masked: bool) -> None:
        """Registers -> the shared chunk ``buf``."""
        for s in range(self.slots):
            row, kk = self.positions(s)
            guard = f"if (tid + {BLOCK * s} < {self.rows * self.bk}) " \
                if self.partial and s == self.slots - 1 else ""
            cw.line(f"{guard}{self.frag.cell(buf, kk, row)} = {self.name}v{s};")
            if masked:
                cw.line(f"{guard}gc_{self.name}k[{buf}][{kk}][{row}] = {self.name}m{s};")


def emit_tiled(k: CudaKernel, p: Product, t: Tile, split: Parts | None = None) -> None:
    """The tiled kernel (module docstring); ``split``: the tiles of every part, each summing
    its own K range and saving the sums to scratch."""
    k.barrier = True
    cw, ix, acc = k.code, p.ix, p.acc
    fused = fused_terms(k)
    masked = _masked(p)
    fa = _Frag("a", t.bm, t.tm, "ty", acc, t.bk)
    fb = _Frag("b", t.bn, t.tn, "tx", acc, t.bk)
    mt, nt = cdiv(p.m, t.bm), cdiv(p.n, t.bn)
    count = (split.count if split else 1) * p.z * mt * nt
    chunks = cdiv(split.length if split else p.k, t.bk)
    k0, kend = ("kbeg", "kend") if split else ("0", str(p.k))
    # A chunk reaches past the terms only where the chunks do not divide K (or the parts do
    # not: a part's length is a multiple of the chunk, so its chunks never pass its end).
    assert split is None or split.length % t.bk == 0
    tail = p.k % split.length != 0 if split else p.k % t.bk != 0
    kcount = kend if tail else None
    sta, stb = _Staging("a", p.a, fa, p.m), _Staging("b", p.b, fb, p.n)
    k.work = min(count, 1 << 30) * BLOCK
    cw.line(*fa.declarations(), *fb.declarations())
    if masked:
        cw.line(f"__shared__ unsigned char gc_bk[2][{t.bk}][{t.bn}];",
                "__shared__ int gc_bad[2];")
    cw.line("const int tid = (int)threadIdx.x;",
            f"const int tx = tid % {t.tx}, ty = tid / {t.tx};")
    if masked:  # the chunk flags are compared with the staging count q (never stale)
        cw.line("if (tid < 2) gc_bad[tid] = 0;", "__syncthreads();", "int q = 0;")
    cw.line(*(f"{acc} av{s};" for s in range(sta.slots)),
            *(f"{acc} bv{s};" for s in range(stb.slots)))
    if masked:
        cw.line(*(f"unsigned char bm{s};" for s in range(stb.slots)))
    with cw.block(f"for ({ix} tile = blockIdx.x; tile < {count}; tile += gridDim.x)"):
        if split:
            split.declare(cw, f"tile / {mt * nt}")
        else:
            cw.line(f"const {ix} z = tile / {mt * nt};")
        cw.line(f"const {ix} m0 = tile / {nt} % {mt} * {t.bm};",
                f"const {ix} n0 = tile % {nt} * {t.bn};")
        cw.line(*p.setup())
        sta.declare(cw, "m0", ix)
        stb.declare(cw, "n0", ix)
        cw.line(f"{acc} c[{t.tm}][{t.tn}];")
        unrolled(cw, [f"i < {t.tm}", f"j < {t.tn}"], ["c[i][j] = 0;"])
        _stage(cw, sta, stb, acc, k0, kcount, masked, ix, "0")
        cw.line("__syncthreads();")
        with cw.block(f"for (int kt = 0; kt < {chunks}; kt++)"):
            cw.line("const int cur = kt & 1;", f"const bool more = kt + 1 < {chunks};")
            if masked:
                cw.line("bool bad = false;")
            with cw.block("if (more)"):
                nxt = f"kbeg + (kt + 1) * {t.bk}" if split else f"(kt + 1) * {t.bk}"
                _load(cw, sta, stb, acc, nxt, kcount, masked, ix)
            with cw.block(f"if (tid < {t.threads})" if t.threads < BLOCK else ""):
                if masked:
                    with cw.block("if (gc_bad[cur] == q)"):
                        _multiply(cw, t, fa, fb, True, fused)
                    with cw.orelse():
                        _multiply(cw, t, fa, fb, False, fused)
                else:
                    _multiply(cw, t, fa, fb, False, fused)
            with cw.block("if (more)"):
                _store(cw, sta, stb, "cur ^ 1", masked)
            cw.line("__syncthreads();")
        inside = f"tid < {t.threads} && " if t.threads < BLOCK else ""
        if split and split.vectors(fb):
            split.save_vectors(cw, fa, fb, t, inside)
            return
        body = [f"const {ix} m = m0 + {fa.row('i')};", f"const {ix} n = n0 + {fb.row('j')};",
                f"if ({inside}m < {p.m} && n < {p.n})", "{",
                *("  " + x for x in (split.save("m", "n", "c[i][j]") if split
                                     else p.store("m", "n", "c[i][j]"))), "}"]
        unrolled(cw, [f"i < {t.tm}", f"j < {t.tn}"], body)


def _masked(p: Product) -> bool:
    """True when B skips terms (probed with a dummy row)."""
    return p.b.at("x", "kk")[2] is not None


def _load(cw: CWriter, sta: _Staging, stb: _Staging, acc: str, k0: str, kcount: str | None,
          masked: bool, ix: str) -> None:
    sta.load(cw, acc, k0, kcount, False, masked, ix)
    stb.load(cw, acc, k0, kcount, masked, False, ix)


def _store(cw: CWriter, sta: _Staging, stb: _Staging, buf: str, masked: bool) -> None:
    sta.store(cw, buf, False)
    stb.store(cw, buf, masked)
    if masked:  # the chunk's flag: this staging's number, from any thread that saw a non-finite
        cw.line("q++;", f"if (bad) gc_bad[{buf}] = q;")


def _stage(cw: CWriter, sta: _Staging, stb: _Staging, acc: str, k0: str, kcount: str | None,
           masked: bool, ix: str, buf: str) -> None:
    """Load and store the first chunk (its own scope: ``bad`` is the chunk's)."""
    with cw.block():
        if masked:
            cw.line("bool bad = false;")
        _load(cw, sta, stb, acc, k0, kcount, masked, ix)
        _store(cw, sta, stb, buf, masked)


def unrolled(cw: CWriter, conds: Sequence[str], body: Lines) -> None:
    """Fully unrolled loops ``for (int i = 0; <cond>; i++)`` around ``body``."""
    def nest(level: int) -> None:
        if level == len(conds):
            cw.line(*body)
            return
        var = conds[level].split()[0]
        cw.line("#pragma unroll")
        with cw.block(f"for (int {var} = 0; {conds[level]}; {var}++)"):
            nest(level + 1)
    nest(0)


def _multiply(cw: CWriter, t: Tile, fa: _Frag, fb: _Frag, masked: bool, fused: bool) -> None:
    """The chunk's terms, kk ascending, in groups of one vector's kk: each thread's ``TM x TN``
    sums, one product and one addition each (``masked``: only the terms whose mask is set)."""
    g = fa.v
    cw.line("#pragma unroll")
    with cw.block(f"for (int k0 = 0; k0 < {t.bk}; k0 += {g})"):
        fa.group(cw, "k0")
        fb.group(cw, "k0")
        cw.line("#pragma unroll")
        with cw.block(f"for (int kq = 0; kq < {g}; kq++)"):
            fa.step(cw, "k0 + kq")
            fb.step(cw, "k0 + kq")
            term = add_term(fa.acc, fa.value('i', 'kq'), fb.value('j', 'kq'), "c[i][j]", fused, "x")
            if masked:
                term = [f"if (gc_bk[cur][k0 + kq][{fb.row('j')}])", "{",
                        *("  " + x for x in term), "}"]
            unrolled(cw, [f"i < {t.tm}", f"j < {t.tn}"], term)
