"""Batch normalization (SPEC-training.md §12): a block per group, sums in the canonical order.

A group is a position of the parameters (the kept axes; its index is the parameters' flat
index); its members are the input positions on the reduced axes, in increasing logical index.
§12's sums add the members' terms in that order from +0, each addition rounded in ``ACC``: a
chain of dependent additions, which no parallel tree reproduces bit for bit. So each group is
one block (a grid-stride loop over groups): the block's threads compute the terms of a chunk of
``CHUNK`` members (coalesced loads, the per-element arithmetic in parallel) into shared memory,
and thread 0 adds them to the running sum, in order, while the others compute the next chunk
into the other half of a double buffer (one barrier per chunk). The element-wise passes
(normalized output, input gradient) use every thread of the block. Float16 is widened exactly
and rounded once on store; every operation rounds separately (NVRTC's ``--fmad=false``), so the
results are the reference's bits. ``batch_normalization`` (statistics given) sums nothing: a
thread per element.

NaN: these are summing ops (§9.5), whose NaN payloads are not specified; a NaN is a NaN.

Under ``sums="split"`` the three summing ops split a long sum into few groups
(``batch_norm_split.py``), within §9.5's bound.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from gradc.ir.core import Value

from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda import batch_norm_split as split
from gradc.backends.cuda.kernel import BLOCK, CudaKernel, row_major, static_shape
from gradc.backends.cuda.split import decompose

CHUNK = 1024  # members staged per turn (per buffer half and chain: 4 KB of float)


def _prod(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


class Groups:
    """One kernel's groups: X's static shape split into kept and reduced axes."""

    def __init__(self, k: CudaKernel, x: Value, pshape: Sequence[Any]) -> None:
        self.k, self.t = k, ctype(x.type.dtype)
        shape = static_shape(k, x.type.shape)
        st = row_major(shape)
        red = [a for a, d in enumerate(pshape) if d == 1]
        kept = [a for a in range(len(shape)) if a not in red]
        self.a = self.t.acc
        self.count = _prod([shape[a] for a in kept])  # G
        self.members = _prod([shape[a] for a in red])  # M
        self.base = decompose("g", [shape[a] for a in kept], [st[a] for a in kept])
        self.moff = lambda j: decompose(j, [shape[a] for a in red], [st[a] for a in red])

    def load(self, v: Value, index: str) -> str:
        """The ACC value of ``v``'s element ``index``."""
        return f"({self.a}){widen(self.t, f'{self.k.param(v)}[{index}]')}"

    def store(self, v: Value, index: str, value: str) -> None:
        """``v[index] = value``, rounded once to the dtype."""
        self.k.code.line(f"{self.k.param(v)}[{index}] = {narrow(self.t, value)};")

    def lit(self, v: float) -> str:
        """A float attribute as an exact ACC literal."""
        return float_literal(v, self.a)

    def sqrt(self, e: str) -> str:
        """The correctly rounded square root in ACC."""
        return f"sqrt({e})" if self.a == "double" else f"sqrtf({e})"

    def dev(self, var: Value, index: str) -> str:
        """``sqrt(variance + epsilon)`` of the parameter at ``index``."""
        return self.sqrt(f"{self.load(var, index)} + {self.lit(self.k.node.attrs['epsilon'])}")

    @contextmanager
    def each_group(self) -> Iterator[None]:
        """The grid-stride loop over groups, one block each; ``base``: the first member's
        offset, ``n``: the member count in ACC. Declares the block's shared memory."""
        k, a = self.k, self.a
        k.work = max(k.work, max(1, self.count) * BLOCK)
        k.barrier = True
        k.code.line(f"__shared__ {a} gc_sa[2][{CHUNK}], gc_sb[2][{CHUNK}], gc_bc[2];")
        with k.code.block(f"for (int64_t g = blockIdx.x; g < {self.count}; g += gridDim.x)"):
            k.code.line(f"const int64_t base = {self.base};",
                        f"const {a} n = ({a})(int64_t){self.members};", "(void)n;")
            yield
            k.code.line("__syncthreads();  /* the block's shared memory is the next group's */")

    @contextmanager
    def each_member(self) -> Iterator[None]:
        """All threads over the group's members (``o``: the member's offset)."""
        with self.k.code.block(f"for (int64_t j = threadIdx.x; j < {self.members}; "
                               "j += blockDim.x)"):
            self.k.code.line(f"const int64_t o = base + {self.moff('j')};")
            yield

    def sums(self, chains: Sequence[str], terms: Sequence[str], before: Sequence[str] = (),
             after: Sequence[str] = ()) -> None:
        """Canonical sums ``chains[i] = sum of terms[i]`` (thread 0 holds them): each thread
        runs ``before`` (lines computing the terms from ``o``) for its members of a chunk and
        stages the terms; thread 0 adds the chunk in order. ``after`` runs with ``before``."""
        cw, a = self.k.code, self.a
        bufs = ("gc_sa", "gc_sb")[:len(chains)]
        cw.line(f"{a} {', '.join(f'{c} = 0' for c in chains)};")
        with cw.block(f"for (int64_t c0 = 0, turn = 0; c0 < {self.members}; "
                      f"c0 += {CHUNK}, turn ^= 1)"):
            with cw.block(f"for (int64_t jj = threadIdx.x; jj < {CHUNK} && c0 + jj < "
                          f"{self.members}; jj += blockDim.x)"):
                cw.line(f"const int64_t o = base + {self.moff('c0 + jj')};", *before,
                        *(f"{b}[turn][jj] = {t};" for b, t in zip(bufs, terms)), *after)
            cw.line("__syncthreads();")
            with cw.block("if (threadIdx.x == 0)"):
                cw.line(f"const int64_t len = {self.members} - c0 < {CHUNK} ? "
                        f"{self.members} - c0 : {CHUNK};")
                with cw.block("for (int64_t jj = 0; jj < len; jj++)"):
                    cw.line(*(f"{c} = {c} + {b}[turn][jj];" for c, b in zip(chains, bufs)))

    def share(self, slot: int, name: str, value: str) -> None:
        """``const ACC name = value`` computed by thread 0 and read by the whole block."""
        cw = self.k.code
        with cw.block("if (threadIdx.x == 0)"):
            cw.line(f"gc_bc[{slot}] = {value};")
        cw.line("__syncthreads();", f"const {self.a} {name} = gc_bc[{slot}];")


def _split(k: CudaKernel, G: Groups, emit: Callable[[CudaKernel, Groups, int], None]) -> bool:
    """Emit the split form (``batch_norm_split.py``) when the kernel may split and the sizes
    ask for it; False where the canonical form is kept."""
    p = split.split_parts(k, G.count, G.members)
    if p:
        k.reordered = True
        emit(k, G, p)
    return bool(p)


def emit_batch_normalization(k: CudaKernel) -> None:
    """§12.1: ``scale * ((x - mean) / dev) + bias``, a thread per element."""
    x, mean, var, scale, bias = k.node.inputs
    y = k.node.outputs[0]
    G = Groups(k, x, mean.type.shape)
    a, cw = G.a, k.code
    shape = static_shape(k, x.type.shape)
    pshape = static_shape(k, mean.type.shape)
    # the parameters' flat index of element i: its coordinates on the kept axes
    pst = row_major(pshape)
    terms, inner = [], 1
    for ax in reversed(range(len(shape))):
        if pshape[ax] != 1:
            terms.append(f"(i / {inner} % {shape[ax]}) * {pst[ax]}")
        inner *= shape[ax]
    with k.each(_prod(shape)) as i:
        cw.line(f"const int64_t p = {' + '.join(terms) or '0'};",
                f"const {a} mu = {G.load(mean, 'p')}, sc = {G.load(scale, 'p')}, "
                f"bi = {G.load(bias, 'p')};",
                f"const {a} dev = {G.dev(var, 'p')};",
                f"const {a} d = {G.load(x, i)} - mu;", f"const {a} q = d / dev;",
                f"const {a} r = sc * q;", f"const {a} v = r + bi;")
        G.store(y, i, "v")


def emit_batch_normalization_grad(k: CudaKernel) -> None:
    """§12.2: dX = dY * (scale / dev); dscale = sum(dY (x - mean)) / dev; dbias = sum(dY)."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    G = Groups(k, x, mean.type.shape)
    a, cw = G.a, k.code
    if _split(k, G, split.emit_grad):
        return
    with G.each_group():
        cw.line(f"const {a} mu = {G.load(mean, 'g')};",
                f"const {a} dev = {G.dev(var, 'g')};",
                f"const {a} cf = {G.load(scale, 'g')} / dev;")
        G.sums(("st", "sb"), ("gy * d", "gy"),
               before=(f"const {a} gy = {G.load(dy, 'o')};",
                       f"const {a} d = {G.load(x, 'o')} - mu;", f"const {a} p = gy * cf;"),
               after=(f"{k.param(dx)}[o] = {narrow(G.t, 'p')};",))
        with cw.block("if (threadIdx.x == 0)"):
            G.store(ds, "g", "st / dev")
            G.store(db, "g", "sb")


def emit_batch_normalization_training(k: CudaKernel) -> None:
    """§12.3: mean and biased variance in two canonical passes, then the normalized output."""
    x, scale, bias = k.node.inputs
    y, m, v = k.node.outputs
    G = Groups(k, x, scale.type.shape)
    a, cw = G.a, k.code
    if _split(k, G, split.emit_training):
        return
    with G.each_group():
        G.sums(("s",), (G.load(x, "o"),))
        G.share(0, "mean", "s / n")
        G.sums(("s2",), ("d * d",), before=(f"const {a} d = {G.load(x, 'o')} - mean;",))
        G.share(1, "var", "s2 / n")
        cw.line(f"const {a} dev = {G.sqrt('var + ' + G.lit(k.node.attrs['epsilon']))};",
                f"const {a} sc = {G.load(scale, 'g')}, bi = {G.load(bias, 'g')};")
        with G.each_member():
            cw.line(f"const {a} d = {G.load(x, 'o')} - mean;", f"const {a} q = d / dev;",
                    f"const {a} r = sc * q;", f"const {a} u = r + bi;")
            G.store(y, "o", "u")
        with cw.block("if (threadIdx.x == 0)"):
            G.store(m, "g", "mean")
            G.store(v, "g", "var")


def emit_batch_normalization_training_grad(k: CudaKernel) -> None:
    """§12.4: DirectML's formula in the reference's order."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    G = Groups(k, x, mean.type.shape)
    a, cw = G.a, k.code
    if _split(k, G, split.emit_training_grad):
        return
    with G.each_group():
        cw.line(f"const {a} mu = {G.load(mean, 'g')}, sc = {G.load(scale, 'g')};")
        G.sums(("sd", "st"), ("gy", "gy * d"),
               before=(f"const {a} gy = {G.load(dy, 'o')};",
                       f"const {a} d = {G.load(x, 'o')} - mu;"))
        G.share(0, "sum_dy", "sd")
        G.share(1, "sum_dyt", "st")
        cw.line(f"const {a} ve = {G.load(var, 'g')} + {G.lit(k.node.attrs['epsilon'])};",
                f"const {a} dev = {G.sqrt('ve')};", f"const {a} mdy = sum_dy / n;",
                f"const {a} q0 = sum_dyt / n;", f"const {a} q = q0 / ve;",
                f"const {a} f = sc / dev;")
        with G.each_member():
            cw.line(f"const {a} gy = {G.load(dy, 'o')};", f"const {a} d = {G.load(x, 'o')} - mu;",
                    f"const {a} r0 = gy - mdy;", f"const {a} r1 = d * q;",
                    f"const {a} r = r0 - r1;", f"const {a} u = f * r;")
            G.store(dx, "o", "u")
        with cw.block("if (threadIdx.x == 0)"):
            G.store(ds, "g", "sum_dyt / dev")
            G.store(db, "g", "sum_dy")


EMITTERS: dict[str, Any] = {
    "batch_normalization": emit_batch_normalization,
    "batch_normalization_grad": emit_batch_normalization_grad,
    "batch_normalization_training": emit_batch_normalization_training,
    "batch_normalization_training_grad": emit_batch_normalization_training_grad,
}
