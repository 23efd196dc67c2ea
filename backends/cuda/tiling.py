"""What a tiled product is and which tile it takes (the kernels are ``tiled.py``'s).

``Operand`` and ``Product`` state a product (``gemm.py``, ``conv.py``); ``Tile`` is one shape of
the tiled kernel: ``BM x BN`` outputs per block of 256 threads, chunks of ``BK`` terms, ``TM x TN``
sums per computing thread (all 256 threads compute, or one to four warps of them for products of
few outputs and long sums, the others only staging chunks). ``layout`` is how a thread's rows
of an operand lie in shared memory (its ``_Frag`` in ``tiled.py``), which ``shared_bytes`` and
the cost model count.

``choose`` picks a tile per product at compile time (shapes are static) with a small cost model
of an H200 (132 SMs; FP32 add and multiply each at 128 lanes a clock per SM, FP64 at half;
shared loads in 128-byte wavefronts; a dependent addition every 4 clocks at best; a chunk's L2
loads hidden behind the previous chunk): it trades the work per fragment read (``TM x TN``)
against filling the SMs. Large products get 128x128 tiles of 8x8 sums per thread, small ones
down to 8x4 tiles with one computing warp. The canonical order makes each sum a serial chain
over ``K``: a product of few outputs and a long ``K`` cannot use more threads than outputs, and
its time is about ``K`` dependent additions (no split of ``K``). ``benchmarks/bench_gpu_gemm.py
--sweep`` times every tile of a layer on the GPU, to tune the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from gradc.backends.c.ctypes_map import CType
from gradc.backends.cuda.kernel import BLOCK

PAD = 4  # elements added to each shared row: staging stores along K spread over the banks
SMS = 132  # the H200's multiprocessors (the cost model's only device facts are here)
REGS = 65536  # registers per SM
SHARED = 227 * 1024  # shared memory per SM a kernel may use
SHARED_BLOCK = 48 * 1024  # static shared memory of one block
INT31 = (1 << 31) - 1
CHUNK_LATENCY = 500  # clocks: a chunk's loads from L2 must hide behind the previous chunk
# What a chunk cost on the H200 with one block per SM (benchmarks/gpu_launches.py, resnet18 at
# batch 8: 1,900-3,700 clocks per chunk of products of 2,048-2,304 terms into 8k-33k outputs,
# where the model with CHUNK_LATENCY said 300-500): the staging's global loads, its index
# arithmetic and the barrier are exposed when few warps share an SM. ``choose_split`` weighs
# splits with it (the tiles of the canonical order, and so the golden files, keep the other).
SPLIT_CHUNK_LATENCY = 2400
# Instructions a computing warp spends per kk beyond its products and fragment loads (loop,
# addresses, waits on shared loads): fitted to bench_gpu_gemm.py --sweep on the H200 (resnet18
# and the UNet at batch 64), where the model without it took tiles of 1-2 sums per thread for
# 1.3-2.3x faster than they ran (a filter gradient's 32x8x64/1x1: modelled 0.089 ms, measured
# 0.207; split 32 ways on 64x64x8/4x4 tiles it ran in 0.075).
KK_OVERHEAD = 3

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


def digits(ix: str) -> str:
    """The unsigned type of index type ``ix``: a term's index ``kk`` (never negative) and the
    digits taken from it (channel, tap, position) are declared with it, so dividing them by the
    static sizes is a multiply-high and a shift, not a signed division's sign fix-up (measured in
    the staging's machine code: 3-4 instructions less per digit). An expression mixing a digit
    with a negative offset wraps and is converted back to ``ix`` (modular, exact) before any
    comparison."""
    return "unsigned" if ix == "int" else "uint64_t"


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


def layout(n: int, acc: str) -> tuple[bool, int, int]:
    """How a thread holds ``n`` rows of an operand (``tiled._Frag``): (kk-major, elements per
    16-byte vector, vectors read per kk (kk-major) or per group of a vector's kk)."""
    v = 2 if acc == "double" else 4
    return (True, v, n // v) if n >= v else (False, v, n)


def shared_bytes(t: Tile, acc: str, masked: bool = True) -> int:
    """The static shared memory of a tile's kernel: two chunks of A and B (kk-major: ``BK``
    rows of ``rows + PAD``; row-major: ``rows`` rows of ``BK + PAD``), and the masks and flags
    of a product with skipped terms."""
    word = 8 if acc == "double" else 4
    total = 0
    for rows, n in ((t.bm, t.tm), (t.bn, t.tn)):
        kmajor = layout(n, acc)[0]
        total += 2 * (t.bk * (rows + PAD) if kmajor else rows * (t.bk + PAD)) * word
    return total + (2 * t.bk * t.bn + 8 if masked else 0)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cost(p: Product, t: Tile, latency: int = CHUNK_LATENCY) -> float:
    """Estimated clocks of the busiest SM (see the module docstring); ``latency``: a chunk's
    exposed clocks (``CHUNK_LATENCY``, or ``SPLIT_CHUNK_LATENCY`` for split decisions)."""
    word = 2 if p.acc == "double" else 1
    if t == DIRECT:
        outs = p.z * p.m * p.n
        per_sm = cdiv(outs, SMS)
        per_term = 2 * word + p.a.cost + p.b.cost + 6  # two global reads through L1
        return cdiv(per_sm, BLOCK) * p.k * max(8 * per_term / 4, per_term + 24)
    blocks = p.z * cdiv(p.m, t.bm) * cdiv(p.n, t.bn)
    regs = word * (t.tm * t.tn + t.tm + t.tn) + 48
    shared = shared_bytes(t, p.acc)
    occupancy = max(1, min(REGS // (BLOCK * regs), SHARED // shared, 8))
    waves = cdiv(blocks, SMS * occupancy)
    resident = min(occupancy, cdiv(blocks, SMS))  # blocks on the busiest SM
    warps = resident * cdiv(t.threads, 32)  # of them computing
    # shared loads of one warp per kk and their wavefronts (128 bytes each): a warp's threads
    # share a row of A per ty and of B per tx
    loads = wf = 0.0
    for n, nd in ((t.tm, max(1, 32 // t.tx)), (t.tn, min(32, t.tx))):
        kmajor, v, r = layout(n, p.acc)
        each = r if kmajor else n / v
        loads += each
        wf += each * max(1.0, nd * 16 / 128)
    fp = 2 * t.tm * t.tn  # warp instructions a kk (FP64 issues at half the rate)
    staging = ((t.bm * (p.a.cost + 2) + t.bn * (p.b.cost + 3)) * t.bk / BLOCK + 40) / t.bk
    issue = warps * (fp * word + loads + KK_OVERHEAD) + resident * BLOCK // 32 * staging
    # a computing warp's own chain: its instructions, or the dependent additions (4 clocks)
    per_kk = max(issue / 4, warps * wf, fp + loads + staging + 2 + KK_OVERHEAD, 4 * 1.15,
                 latency / t.bk)
    return waves * cdiv(p.k, t.bk) * t.bk * per_kk


# The B operand's cost (integer instructions per element) from which it is an implicit GEMM's
# (a convolution's input read through its window): its staging keeps indices per slot, and an
# 8x8 tile's kernel then takes 169 registers (cuda_tile_resources.md), one block per SM, where
# the cost model counts two. On the H200 the 128x64 tiles ran 2-10% faster than 128x128 on every
# resnet18 layer swept (bench_gpu_gemm.py --sweep, batch 64), so such products go without.
IMPLICIT_COST = 8.0


def choose(p: Product, latency: int = CHUNK_LATENCY) -> Tile:
    """The cheapest tile for a product (``DIRECT`` when a side has at most two rows); of tiles
    that cost about the same, the one that computes fewer outputs past the edges. An implicit
    GEMM's product (``IMPLICIT_COST``) takes no tile of 64 sums per thread."""
    if min(p.m, p.n) <= 2:
        return DIRECT

    def key(t: Tile) -> float:
        padded = cdiv(p.m, t.bm) * t.bm * cdiv(p.n, t.bn) * t.bn
        return cost(p, t, latency) * (1.2 - 0.2 * p.m * p.n / padded)
    shapes = [t for t in tiles(p.acc)
              if p.b.cost <= IMPLICIT_COST or t.tm * t.tn < 64]
    return min(shapes, key=key)


# -- split products (sums="split") -------------------------------------------------------------

SPLIT_PARTS = (2, 4, 8, 16, 32, 64, 128)  # parts tried along K
SPLIT_MIN_TERMS = 128  # terms per part at least
# a split is taken only when estimated this much faster than the canonical sum (1.5 until the
# sweep of KK_OVERHEAD: resnet18's 256x256x3x3 filter gradient at batch 64 ran 1.38x faster
# split 8 ways, which the model put at 1.12x)
SPLIT_GAIN = 1.1
BYTES_PER_CLOCK = 16.0  # DRAM bytes per clock per SM (4.3 TB/s over 132 SMs at 1.98 GHz)
LAUNCH_CLOCKS = 3000  # a further launch in the step's graph (about 1.5 us)


def split_cost(p: Product, t: Tile, parts: int) -> float:
    """Estimated clocks of a product split into ``parts`` along K: the tile's kernel over the
    parts (as ``parts`` times as many products of ``K / parts`` terms), the partial sums
    written and read back, and the second launch."""
    length = cdiv(cdiv(p.k, parts), t.bk) * t.bk
    sub = replace(p, z=p.z * cdiv(p.k, length), k=length)
    word = 8 if p.acc == "double" else 4
    traffic = (2 * parts + 1) * p.z * p.m * p.n * word
    return cost(sub, t, SPLIT_CHUNK_LATENCY) + traffic / (SMS * BYTES_PER_CLOCK) + LAUNCH_CLOCKS


def choose_split(p: Product) -> tuple[Tile, int]:
    """The tile and the number of parts along K of a product under ``sums="split"``: the
    canonical sum (one part) unless a split is estimated ``SPLIT_GAIN`` times faster.

    A split shape depends on the product's static sizes only (never on the device): each
    output's parts are summed in order by one thread, each part's terms by the tile's kernel in
    canonical order (``tiled.py``), so results are reproducible and within SPEC-training.md
    §9.5's bound."""
    best, parts = choose(p), 1
    best_cost = cost(p, best, SPLIT_CHUNK_LATENCY) / SPLIT_GAIN
    for n in SPLIT_PARTS:
        if cdiv(p.k, n) < SPLIT_MIN_TERMS:
            break
        t = choose(replace(p, z=p.z * n, k=cdiv(p.k, n)), SPLIT_CHUNK_LATENCY)
        c = split_cost(p, t, n)
        if c < best_cost:
            best, parts, best_cost = t, n, c
    if parts > 1:  # the parts actually made (each a whole number of the tile's chunks)
        parts = cdiv(p.k, cdiv(cdiv(p.k, parts), best.bk) * best.bk)
    return best, parts
