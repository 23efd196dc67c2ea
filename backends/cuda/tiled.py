"""Products in the canonical order: the tiled shared-memory kernel of gemm and convolution.

``gemm.py`` and ``conv.py`` state each op as ``Z`` independent products (batch entries, groups)
``OUT[z][m][n] = sum over kk of A(z, m, kk) * B(z, kk, n)`` whose ``kk`` runs, from 0 to
``K - 1``, in the op's canonical order (SPEC-training.md §9.5-§11): k ascending for gemm, input
channel then tap for a convolution, image then position for a filter gradient. ``B`` may skip
terms (``Operand.at`` gives a validity: padding, taps that miss the input), which the reference
skips rather than multiplying by 0. Every element starts from +0 in ``ACC`` and adds one rounded
product with one rounded addition per term, written as two statements (NVRTC runs with
``--fmad=false``, the host harness with ``-ffp-contract=off``), so the result is the reference's
bits whatever the tiling.

The tiled kernel (``emit_tiled``), one block of 256 threads per ``BM x BN`` tile of outputs:

- ``K`` runs in chunks of ``BK``: the threads stage ``A``'s ``BM x BK`` and ``B``'s ``BK x BN``
  chunk (widened to ``ACC``; neighbouring threads read neighbouring elements along the operand's
  ``fast`` index, so the loads coalesce) into shared memory, double-buffered: the next chunk is
  read into registers while the current one is multiplied, then stored, one barrier a chunk;
- each thread keeps a ``TM x TN`` block of sums in registers and reads its ``A`` and ``B``
  fragments with 8- or 16-byte shared loads; for each ``kk`` of the chunk in order it adds
  ``A[i] * B[j]`` to sum ``(i, j)``: the order of every sum is ``kk`` ascending;
- a skipped term is staged as ``B = 0``: a sum starts at +0 and an IEEE sum is -0 only when both
  terms are, so it never is, and ``s + (+-0) = s``, provided the other factor is finite
  (``inf * 0`` is NaN). The staging threads flag a chunk whose ``A`` holds a NaN or an infinity
  (``gc_bad``), and the block multiplies that chunk with each term's validity instead (a mask
  staged beside ``B``), as the reference skips. Terms past ``K`` are ``A = B = 0`` (+0 added);
- the tile's results are stored by the op's epilogue (``Product.store``).

The direct kernel (``emit_direct``, a thread per output element, its terms read from global
memory in order, skipped terms not multiplied) serves products with a side of at most two rows
(a depthwise convolution's groups, a matrix-vector product), where a tile would be mostly empty.

Tile sizes are chosen per problem at compile time (shapes are static) by ``choose``: a small cost
model of an H200 (132 SMs; FP32 add and multiply each at 128 lanes a clock per SM, FP64 at
half) that trades the work per thread (``TM x TN`` sums per fragment read) against filling the
SMs: large products get 128x128 tiles of 8x8 sums per thread, small ones down to 16x16 tiles of
one sum per thread. The canonical order fixes each sum as a serial chain over ``K``, so a product
with few outputs and a long ``K`` cannot use more threads than outputs (no split of ``K``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from gradc.backends.c.ctypes_map import CType
from gradc.backends.c.scalar import widen
from gradc.backends.c.writer import CWriter
from gradc.backends.cuda.kernel import BLOCK, CudaKernel

PAD = 4  # elements added to each shared row: staging stores along K spread over the banks
SMS = 132  # the H200's multiprocessors (the cost model's only device facts are here)
LANES = 128  # FP32 lanes per SM (FP64: half)
REGS = 65536  # registers per SM
SHARED = 227 * 1024  # shared memory per SM a kernel may use
SHARED_BLOCK = 48 * 1024  # static shared memory of one block
INT31 = (1 << 31) - 1
CHUNK_LATENCY = 500  # clocks: a chunk's loads from L2 must hide behind the previous chunk

Lines = list[str]


@dataclass
class Operand:
    """One factor of the product, as a thread reaches its elements.

    ``row(tag, r)`` declares what depends only on the operand's row ``r`` (``m`` for ``A``,
    ``n`` for ``B``; a C expression) with names starting ``tag``, once per output tile;
    ``at(tag, kk)`` gives the lines, offset and validity (None: always valid) of element
    ``(r, kk)`` inside a block of its own. ``fast``: ``"k"`` when neighbouring ``kk`` are
    neighbours in memory (the threads stage along K), ``"r"`` when neighbouring rows are.
    """

    ptr: str
    t: CType
    fast: str
    row: Callable[[str, str], Lines]
    at: Callable[[str, str], tuple[Lines, str, str | None]]
    cost: float = 4.0  # integer instructions to find one element (the cost model's)


@dataclass
class Product:
    """``Z`` products of ``M x N`` outputs, each a sum of ``K`` terms, and their epilogue.

    ``setup()`` declares what depends on the problem index ``z`` (a C variable); ``store(m, n,
    acc)`` the lines that finish and store output ``(m, n)`` from its sum ``acc``.
    """

    z: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    acc: str  # "float" or "double"
    setup: Callable[[], Lines]
    store: Callable[[str, str, str], Lines]
    ix: str = "int"  # the index type: int, or int64_t when an index may pass 2**31 - 1


@dataclass(frozen=True)
class Tile:
    """``BM x BN`` outputs per block, ``BK`` terms per staged chunk, ``TM x TN`` per thread."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def tx(self) -> int:
        """Threads along N."""
        return self.bn // self.tn

    @property
    def threads(self) -> int:
        """Threads that compute sums (the block's others only stage chunks)."""
        return (self.bm // self.tm) * self.tx

    def __str__(self) -> str:
        if self.bk == 1:
            return "direct"
        return f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"


DIRECT = Tile(1, 1, 1, 1, 1)  # the direct kernel (a thread per output)
GRIDS = ((16, 16), (8, 32), (32, 8), (4, 64), (64, 4))  # threads along (M, N): 256 each
# Fewer threads computing, one to four warps, for products of few outputs and long sums: a
# sum's serial chain then sets the time, and the other warps stage the chunks.
FEW = ((8, 4), (4, 8), (8, 8), (16, 8), (8, 16))
PER_THREAD = {"float": (1, 2, 4, 8), "double": (1, 2, 4)}


def index_type(*counts: int) -> str:
    """``int`` when every count (elements of an operand, outputs, ...) fits in 31 bits with room
    to spare (rows past the last tile's edge form offsets a little past an operand's end)."""
    return "int" if 2 * max(counts) + (1 << 20) <= INT31 else "int64_t"


def tiles(acc: str) -> list[Tile]:
    """Every tile shape the kernel takes for an accumulator type."""
    out = []
    for gy, gx in GRIDS + FEW:
        for tm in PER_THREAD[acc]:
            for tn in PER_THREAD[acc]:
                bm, bn = gy * tm, gx * tn
                if (max(bm, bn) <= 128 and 1 / 4 <= tm / tn <= 4
                        and (gy * gx == BLOCK or max(tm, tn) <= 2)):
                    s = bm + bn  # deeper chunks where a chunk is little work
                    bk = (8 if s >= 128 else 16 if s >= 64 else 32 if s >= 48 else
                          64 if s > 12 else 128)
                    while shared_bytes(Tile(bm, bn, bk, tm, tn), acc) > SHARED_BLOCK:
                        bk //= 2
                    out.append(Tile(bm, bn, bk, tm, tn))
    return out


def shared_bytes(t: Tile, acc: str, masked: bool = True) -> int:
    """The static shared memory of a tile's kernel: two chunks of A and B (``_Frag``), and
    the masks and flags of a product with skipped terms."""
    total = 0
    for rows, n in ((t.bm, t.tm), (t.bn, t.tn)):
        f = _Frag("a", rows, n, "", acc, t.bk)
        total += 2 * (t.bk * (rows + PAD) if f.kmajor else rows * (t.bk + PAD)) * f.word
    return total + (2 * t.bk * t.bn + 8 if masked else 0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cost(p: Product, t: Tile) -> float:
    """Estimated clocks of the busiest SM (see the module docstring)."""
    word = 2 if p.acc == "double" else 1
    if t == DIRECT:
        outs = p.z * p.m * p.n
        per_sm = _cdiv(outs, SMS)
        per_term = 2 * word + p.a.cost + p.b.cost + 6  # two global reads through L1
        return _cdiv(per_sm, BLOCK) * p.k * max(8 * per_term / 4, per_term + 24)
    blocks = p.z * _cdiv(p.m, t.bm) * _cdiv(p.n, t.bn)
    regs = word * (t.tm * t.tn + t.tm + t.tn) + 48
    shared = shared_bytes(t, p.acc)
    occupancy = max(1, min(REGS // (BLOCK * regs), SHARED // shared, 8))
    waves = _cdiv(blocks, SMS * occupancy)
    resident = min(occupancy, _cdiv(blocks, SMS))  # blocks on the busiest SM
    warps = resident * _cdiv(t.threads, 32)  # of them computing
    # shared loads of one warp per kk and their wavefronts (128 bytes each): a warp's threads
    # share a row of A per ty and of B per tx
    loads = wf = 0.0
    for n, rows, nd in ((t.tm, t.bm, max(1, 32 // t.tx)), (t.tn, t.bn, min(32, t.tx))):
        f = _Frag("a", rows, n, "", p.acc, t.bk)
        each = f.r if f.kmajor else n / f.v
        loads += each
        wf += each * max(1.0, nd * 16 / 128)
    fp = 2 * t.tm * t.tn  # warp instructions a kk (FP64 issues at half the rate)
    staging = ((t.bm * (p.a.cost + 2) + t.bn * (p.b.cost + 3)) * t.bk / BLOCK + 40) / t.bk
    issue = warps * (fp * word + loads) + resident * BLOCK // 32 * staging  # all schedulers
    # a computing warp's own chain: its instructions, or the dependent additions (4 clocks)
    per_kk = max(issue / 4, warps * wf, fp + loads + staging + 2, 4 * 1.15,
                 CHUNK_LATENCY / t.bk)
    return waves * _cdiv(p.k, t.bk) * t.bk * per_kk


def choose(p: Product) -> Tile:
    """The cheapest tile for a product (``DIRECT`` when a side has at most two rows); of tiles
    that cost about the same, the one that computes fewer outputs past the edges."""
    if min(p.m, p.n) <= 2:
        return DIRECT

    def key(t: Tile) -> float:
        padded = _cdiv(p.m, t.bm) * t.bm * _cdiv(p.n, t.bn) * t.bn
        return cost(p, t) * (1.2 - 0.2 * p.m * p.n / padded)
    return min(tiles(p.acc), key=key)


def emit(k: CudaKernel, p: Product, tile: Tile | None = None) -> Tile:
    """Write the kernel of ``p`` (tiled, or direct); returns the tile used."""
    t = tile or choose(p)
    k.code.comment(f"{p.z} x ({p.m} x {p.n}) sums of {p.k} terms; tile {t}")
    if t == DIRECT:
        emit_direct(k, p)
    else:
        emit_tiled(k, p, t)
    return t


# -- the direct kernel -------------------------------------------------------------------------

def emit_direct(k: CudaKernel, p: Product) -> None:
    """A thread per output element: its terms in order, skipped ones not multiplied."""
    cw, ix, acc = k.code, p.ix, p.acc
    with k.each(p.z * p.m * p.n, "e"):
        cw.line(f"const {ix} z = ({ix})(e / {p.m * p.n});",
                f"const {ix} m = ({ix})(e / {p.n} % {p.m});",
                f"const {ix} n = ({ix})(e % {p.n});")
        cw.line(*p.setup(), *p.a.row("ra", "m"), *p.b.row("rb", "n"), f"{acc} s = 0;")
        with cw.block(f"for ({ix} kk = 0; kk < {p.k}; kk++)"):
            la, oa, _ = p.a.at("ra", "kk")
            lb, ob, vb = p.b.at("rb", "kk")
            cw.line(f"{acc} x, y;", "bool ok = true;")
            with cw.block():  # A's element is always in bounds (a skipped term's too)
                cw.line(*la, f"x = {widen(p.a.t, f'{p.a.ptr}[{oa}]')};")
            with cw.block():
                cw.line(*lb, f"ok = {vb or 'true'};",
                        f"y = ok ? {widen(p.b.t, f'{p.b.ptr}[{ob}]')} : 0;")
            with cw.block("if (ok)"):
                cw.line(f"const {acc} q = x * y;", "s = s + q;")
        cw.line(*p.store("m", "n", "s"))


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
        self.word = 8 if acc == "double" else 4  # bytes per element
        self.v = 16 // self.word  # elements per 16-byte vector
        self.kmajor = n >= self.v
        self.r = n // self.v if self.kmajor else n  # vectors read per kk (per group)
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
            _unrolled(cw, [f"i < {self.n}"], [
                f"g{self.side}[i] = *(const {self.vec} *)&{self.cell('cur', k0, self.row('i'))};"])

    def step(self, cw: CWriter, kk: str) -> None:
        """Kk-major: the thread's vectors at ``kk``."""
        if self.kmajor:
            cw.line(f"{self.vec} f{self.side}[{self.r}];")
            at = f"{self.var} * {self.v} + r * {self.s}"
            _unrolled(cw, [f"r < {self.r}"], [
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
        self.slots = _cdiv(self.rows * self.bk, BLOCK)
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

    def declare(self, cw: CWriter, origin: str, ix: str) -> None:
        """Per output tile: each slot's row, whether it is inside the problem, and the
        operand's row values."""
        for s in range(self.slots):
            row, kk = self.positions(s)
            tag = f"{self.name}{s}"
            inside = f"{self.row_tag(s)}_r < {self.count}"
            if self.partial and s == self.slots - 1:
                inside += f" && tid + {BLOCK * s} < {self.rows * self.bk}"
            if self.row_tag(s) == tag:
                cw.line(f"const {ix} {tag}_r = {origin} + ({row});")
            cw.line(f"const int {tag}_k = {kk};", f"const bool {tag}_in = {inside};")
            if self.row_tag(s) == tag:
                cw.line(*self.op.row(tag, f"{tag}_r"))

    def load(self, cw: CWriter, acc: str, k0: str, kcount: int, masked: bool,
             check: bool, ix: str) -> None:
        """Read the chunk at ``k0`` into registers ``<name>v<s>`` (and masks ``<name>m<s>``;
        ``check``: flag a NaN or an infinity in ``bad``)."""
        op = self.op
        for s in range(self.slots):
            tag = f"{self.name}{s}"
            v = f"{self.name}v{s}"
            cw.line(f"{v} = 0;")
            if masked:
                cw.line(f"{self.name}m{s} = 0;")
            with cw.block():
                cw.line(f"const {ix} kk = {k0} + {tag}_k;")
                with cw.block(f"if ({tag}_in && kk < {kcount})"):
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


def emit_tiled(k: CudaKernel, p: Product, t: Tile) -> None:
    """The tiled kernel (module docstring)."""
    k.barrier = True
    cw, ix, acc = k.code, p.ix, p.acc
    masked = _masked(p)
    fa = _Frag("a", t.bm, t.tm, "ty", acc, t.bk)
    fb = _Frag("b", t.bn, t.tn, "tx", acc, t.bk)
    mt, nt = _cdiv(p.m, t.bm), _cdiv(p.n, t.bn)
    count = p.z * mt * nt
    chunks = _cdiv(p.k, t.bk)
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
        cw.line(f"const {ix} z = tile / {mt * nt};",
                f"const {ix} m0 = tile / {nt} % {mt} * {t.bm};",
                f"const {ix} n0 = tile % {nt} * {t.bn};")
        cw.line(*p.setup())
        sta.declare(cw, "m0", ix)
        stb.declare(cw, "n0", ix)
        cw.line(f"{acc} c[{t.tm}][{t.tn}];")
        _unrolled(cw, [f"i < {t.tm}", f"j < {t.tn}"], ["c[i][j] = 0;"])
        _stage(cw, sta, stb, acc, "0", p.k, masked, ix, "0")
        cw.line("__syncthreads();")
        with cw.block(f"for (int kt = 0; kt < {chunks}; kt++)"):
            cw.line("const int cur = kt & 1;", f"const bool more = kt + 1 < {chunks};")
            if masked:
                cw.line("bool bad = false;")
            with cw.block("if (more)"):
                _load(cw, sta, stb, acc, f"(kt + 1) * {t.bk}", p.k, masked, ix)
            with cw.block(f"if (tid < {t.threads})" if t.threads < BLOCK else ""):
                if masked:
                    with cw.block("if (gc_bad[cur] == q)"):
                        _multiply(cw, t, fa, fb, True)
                    with cw.orelse():
                        _multiply(cw, t, fa, fb, False)
                else:
                    _multiply(cw, t, fa, fb, False)
            with cw.block("if (more)"):
                _store(cw, sta, stb, "cur ^ 1", masked)
            cw.line("__syncthreads();")
        inside = f"tid < {t.threads} && " if t.threads < BLOCK else ""
        body = [f"const {ix} m = m0 + {fa.row('i')};", f"const {ix} n = n0 + {fb.row('j')};",
                f"if ({inside}m < {p.m} && n < {p.n})", "{",
                *("  " + x for x in p.store("m", "n", "c[i][j]")), "}"]
        _unrolled(cw, [f"i < {t.tm}", f"j < {t.tn}"], body)


def _masked(p: Product) -> bool:
    """True when B skips terms (probed with a dummy row)."""
    return p.b.at("x", "kk")[2] is not None


def _load(cw: CWriter, sta: _Staging, stb: _Staging, acc: str, k0: str, kcount: int,
          masked: bool, ix: str) -> None:
    sta.load(cw, acc, k0, kcount, False, masked, ix)
    stb.load(cw, acc, k0, kcount, masked, False, ix)


def _store(cw: CWriter, sta: _Staging, stb: _Staging, buf: str, masked: bool) -> None:
    sta.store(cw, buf, False)
    stb.store(cw, buf, masked)
    if masked:  # the chunk's flag: this staging's number, from any thread that saw a non-finite
        cw.line("q++;", f"if (bad) gc_bad[{buf}] = q;")


def _stage(cw: CWriter, sta: _Staging, stb: _Staging, acc: str, k0: str, kcount: int,
           masked: bool, ix: str, buf: str) -> None:
    """Load and store the first chunk (its own scope: ``bad`` is the chunk's)."""
    with cw.block():
        if masked:
            cw.line("bool bad = false;")
        _load(cw, sta, stb, acc, k0, kcount, masked, ix)
        _store(cw, sta, stb, buf, masked)


def _unrolled(cw: CWriter, conds: Sequence[str], body: Lines) -> None:
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


def _multiply(cw: CWriter, t: Tile, fa: _Frag, fb: _Frag, masked: bool) -> None:
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
            term = [f"const {fa.acc} x = {fa.value('i', 'kq')} * {fb.value('j', 'kq')};",
                    "c[i][j] = c[i][j] + x;"]
            if masked:
                term = [f"if (gc_bk[cur][k0 + kq][{fb.row('j')}])", "{",
                        *("  " + x for x in term), "}"]
            _unrolled(cw, [f"i < {t.tm}", f"j < {t.tn}"], term)
