"""Split sums: how the cuda target adds many terms into few outputs under ``sums="split"``.

The canonical order (``sums="canonical"``, the default) adds each output's terms one after
another from its first: a chain of dependent additions that one thread runs, so a sum of 32768
terms takes about 32768 addition latencies however many threads the GPU has. Where the outputs
are few (a batch norm's channels, a bias gradient, a scalar loss) most of the GPU idles. With
``sums="split"`` such a sum is added in a tree whose shape depends on the static sizes alone --
never on the GPU's SM count, with no atomics -- so its bits are the same on every run and GPU:

- the ``M`` terms of a group (an output) are cut into ``P`` parts of ``L`` consecutive terms
  (``parts``; the last part may be shorter);
- a block of ``BLOCK`` threads sums one part: thread ``t`` adds the part's terms ``t, t +
  BLOCK, ...`` in that order, then the block adds its threads' sums pairwise in shared memory,
  a fixed tree of log2(BLOCK) levels (``tree``);
- with ``P > 1`` each block writes its part's sum to scratch and a later launch adds a group's
  parts in order (``total``): every thread that needs a group's sum adds the same parts in the
  same order, so they all hold the same bits.

Every term of such a sum passes through at most ``L / BLOCK + log2(BLOCK) + P`` roundings,
far fewer than the canonical chain's ``M - 1``: a split sum differs from the reference's by
about the reference's own rounding error, within SPEC-training.md §9.5's bound ``(n + k + 1)·ε·S
+ η`` (the tests check the bound; data whose partial sums are exact give the exact result in
either order). The target reports such a program as not bit-exact (``Program.reordered``).

When (``parts``): a sum of at least ``MIN_TERMS`` terms into fewer than ``FILL_GROUPS``
outputs (more outputs fill the GPU with canonical chains, which are then as fast); ``P`` gives
each block at least ``MIN_PART`` terms and the launch about ``TARGET_BLOCKS`` blocks. Other sums
keep the canonical order and its bits.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from gradc.backends.cuda.kernel import BLOCK, CudaKernel

MIN_TERMS = 512  # a sum of fewer terms keeps the canonical order
FILL_GROUPS = 4096  # outputs from which canonical chains fill the GPU
TARGET_BLOCKS = 1024  # blocks a split launch aims at (a constant: no device query)
MIN_PART = 2048  # terms per block at least (8 per thread)
MAX_PARTS = 256


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def parts(groups: int, members: int) -> int:
    """Blocks per group of a split sum of ``members`` terms into each of ``groups`` outputs;
    0 where the canonical order is kept."""
    if members < MIN_TERMS or not 0 < groups < FILL_GROUPS:
        return 0
    p = max(1, min(cdiv(members, MIN_PART), cdiv(TARGET_BLOCKS, groups), MAX_PARTS))
    return cdiv(members, cdiv(members, p))  # no empty part


ROW_MIN = 32  # members per thread at least in a split of per-thread sums
TARGET_THREADS = 65536  # threads a split of per-thread sums aims at
FILL_THREADS = 32768  # outputs from which a thread per output fills the GPU


def thread_parts(outputs: int, members: int) -> int:
    """Parts of a sum that a thread per output adds (no block shares an output): each part a
    thread of its own over a range of the members, the parts then added in order; 0 where the
    canonical order is kept (short sums, or outputs enough to fill the GPU)."""
    if members < MIN_TERMS or not 0 < outputs < FILL_THREADS:
        return 0
    p = min(cdiv(members, ROW_MIN), cdiv(TARGET_THREADS, outputs), MAX_PARTS)
    p = cdiv(members, cdiv(members, p))  # no empty part
    return p if p > 1 else 0


def decompose(flat: str, sizes: Sequence[int], strides: Sequence[int]) -> str:
    """The offset of element ``flat`` (never negative) of a row-major box of ``sizes`` whose
    axes step by ``strides`` in memory (``0`` for a box of one element).

    Axes of one element are dropped and neighbours that lie contiguously (an axis's stride is
    its inner neighbour's size times stride: a bias gradient's rows and columns) are one axis,
    so a member's offset costs one division and one remainder per run of memory, not per
    axis; where every offset and ``flat`` fit in 31 bits the arithmetic is 32-bit unsigned
    (a division by a constant is then a multiply-high and a shift, not a 64-bit sequence)."""
    axes: list[tuple[int, int]] = []
    for size, st in zip(sizes, strides):
        if size == 1:
            continue
        if axes and axes[-1][1] == size * st:  # contiguous with its inner neighbour: merged
            axes[-1] = (axes[-1][0] * size, st)
        else:
            axes.append((size, st))
    total = 1
    for size, _ in axes:
        total *= size
    if total < 1 << 31 and sum((n - 1) * st for n, st in axes) < 1 << 31:
        flat = f"(unsigned)({flat})"
    return _offset(flat, axes, total)


def _offset(flat: str, axes: Sequence[tuple[int, int]], total: int) -> str:
    """``decompose``'s expression over its merged (size, stride) axes."""
    terms, inner = [], 1
    for size, st in reversed(axes):
        c = f"({flat})" if inner == 1 else f"({flat}) / {inner}"
        if inner * size != total:  # an outer axis remains: wrap
            c = f"({c}) % {size}"
        terms.append(c if st == 1 else f"({c}) * {st}")
        inner *= size
    return " + ".join(reversed(terms)) or "0"


class Split:
    """One launch of a split sum: ``groups`` x ``p`` blocks, each summing a part of
    ``length`` consecutive terms of its group (of ``members``)."""

    def __init__(self, k: CudaKernel, groups: int, members: int, p: int) -> None:
        self.k, self.groups, self.members, self.p = k, groups, members, p
        self.length = cdiv(members, p)

    @contextmanager
    def each_part(self, acc: str, chains: int) -> Iterator[None]:
        """The loop over the launch's (group, part) blocks: declares ``g``, ``part``, ``gb``
        (``g * p + part``) and the part's terms ``[lo, hi)``; ``chains`` sums of type ``acc``
        may be added by ``tree`` per block (none: a launch without barriers)."""
        k, cw = self.k, self.k.code
        k.work = max(k.work, self.groups * self.p * BLOCK)
        k.block = BLOCK
        if chains:
            k.barrier = True
            cw.line(f"__shared__ {acc} gc_red[{chains}][{BLOCK}];")
        with cw.block(f"for (int64_t gb = blockIdx.x; gb < {self.groups * self.p}; "
                      "gb += gridDim.x)"):
            cw.line(f"const int64_t g = gb / {self.p}, part = gb % {self.p};",
                    "(void)g; (void)part;",
                    f"const int64_t lo = part * {self.length};",
                    f"const int64_t hi = lo + {self.length} < {self.members} ? "
                    f"lo + {self.length} : {self.members};")
            yield
            if chains:
                cw.line("__syncthreads();  /* gc_red is the next block's */")

    @contextmanager
    def each_term(self) -> Iterator[None]:
        """This thread's terms of the part, in increasing order (``j``: the term's index in
        its group)."""
        with self.k.code.block(f"for (int64_t j = lo + threadIdx.x; j < hi; j += {BLOCK})"):
            yield

    def tree(self, sums: Sequence[str]) -> list[str]:
        """Add each thread's ``sums`` over the block, pairwise in a fixed tree; returns the
        C expressions of the block's totals (valid in every thread until the block ends)."""
        cw = self.k.code
        cw.line(*(f"gc_red[{c}][threadIdx.x] = {s};" for c, s in enumerate(sums)),
                "__syncthreads();")
        with cw.block(f"for (int w = {BLOCK // 2}; w > 0; w >>= 1)"):
            with cw.block("if ((int)threadIdx.x < w)"):
                cw.line(*(f"gc_red[{c}][threadIdx.x] = gc_red[{c}][threadIdx.x] + "
                          f"gc_red[{c}][threadIdx.x + w];" for c in range(len(sums))))
            cw.line("__syncthreads();")
        return [f"gc_red[{c}][0]" for c in range(len(sums))]

    def total(self, name: str, acc: str, scratch: str, init: str, group: str = "g") -> None:
        """``acc name``: the parts of ``group`` saved in ``scratch`` (``[group][part]``),
        added in order from ``init``."""
        cw = self.k.code
        cw.line(f"{acc} {name} = {init};")
        with cw.block(f"for (int64_t q = 0; q < {self.p}; q++)"):
            cw.line(f"{name} = {name} + {scratch}[{group} * {self.p} + q];")
