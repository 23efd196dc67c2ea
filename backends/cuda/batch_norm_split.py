"""The batch-normalization ops' split sums (``sums="split"``; SPEC-training.md §12, §9.5).

Where a group has many members and the groups are few (a UNet's 16 channels of 32768 members),
the canonical kernels (``batch_norm.py``: a block per group, its thread 0 adding every term)
spend about one addition latency per member and leave most of the GPU idle. Here each group's
members are cut into parts, a block per (group, part) (``split.py``): the block's threads add
their terms of the part, a fixed tree adds the threads' sums, and the parts' sums go to scratch;
a later launch adds a group's parts in order, in every thread that needs the group's sum (the
same values in the same order: the same bits everywhere). Every other step is the canonical
kernels' own, one rounding each in ``ACC`` in the reference's order, so only the sums' order
differs: within §9.5's bound (statistics ``n`` terms, ``k = 1``).

- ``batch_normalization_training``: three launches: the parts of ``Σx``; the mean and the parts
  of ``Σ(x - mean)²``; the mean, the variance and the normalized output (and the statistics).
- ``batch_normalization_training_grad``: the parts of ``ΣdY`` and ``ΣdY·(x - mean)``; then dX
  and the parameter gradients.
- ``batch_normalization_grad``: dX with the parts of its two sums; then a thread per group.

With one part per group (``p == 1``: enough groups to fill the launch) each op is one launch:
the block's tree gives the group's sums directly, and the block goes on with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from gradc.backends.c.scalar import narrow
from gradc.backends.cuda.kernel import CudaKernel
from gradc.backends.cuda.split import Split, parts

if TYPE_CHECKING:  # batch_norm imports this module
    from gradc.backends.cuda.batch_norm import Groups


def split_parts(k: CudaKernel, groups: int, members: int) -> int:
    """Blocks per group when this kernel splits its sums, else 0 (canonical)."""
    return parts(groups, members) if k.split else 0


def _declare(G: Groups) -> None:
    """``base`` (the group's first member) and ``n`` (its member count in ACC)."""
    G.k.code.line(f"const int64_t base = {G.base};",
                  f"const {G.a} n = ({G.a})(int64_t){G.members};", "(void)n;")


def _partials(G: Groups, sp: Split, names: tuple[str, ...], terms: tuple[str, ...],
              before: tuple[str, ...], scratch: list[str] | None,
              after: tuple[str, ...] = ()) -> None:
    """Each thread's sums of ``terms`` over its members of the part (``before``: the lines
    computing them from ``o``; ``after``: more lines per member), then the block's tree: the
    part's totals saved in ``scratch[gb]``, or (``scratch`` None: one part per group) declared
    in every thread as ``<name>_all``."""
    cw, a = G.k.code, G.a
    cw.line(f"{a} {', '.join(f'{c} = 0' for c in names)};")
    with sp.each_term():
        cw.line(f"const int64_t o = base + {G.moff('j')};", *before,
                *(f"{c} = {c} + {t};" for c, t in zip(names, terms)), *after)
    totals = sp.tree(list(names))
    if scratch is None:  # every thread reads the totals before the tree's memory is reused
        cw.line(*(f"const {a} {c}_all = {t};" for c, t in zip(names, totals)),
                "__syncthreads();")
        return
    with cw.block("if (threadIdx.x == 0)"):
        cw.line(*(f"{s}[gb] = {t};" for s, t in zip(scratch, totals)))


def _scratch(k: CudaKernel, G: Groups, p: int) -> tuple[list[str] | None, list[str] | None]:
    """Two scratch arrays of the parts' sums (None with one part per group)."""
    if p == 1:
        return None, None
    return [k.scratch(G.a, G.count * p)], [k.scratch(G.a, G.count * p)]


def emit_training(k: CudaKernel, G: Groups, p: int) -> None:
    """§12.3 in three launches, or one (module docstring)."""
    x, scale, bias = k.node.inputs
    y, m, v = k.node.outputs
    a = G.a
    sp = Split(k, G.count, G.members, p)
    s1, s2 = _scratch(k, G, p)

    def mean() -> None:  # the group's mean, from the tree or from the parts
        if s1 is not None:
            sp.total("s_all", a, s1[0], "0")
        k.code.line(f"const {a} mean = s_all / n;")

    def squares() -> None:
        _partials(G, sp, ("s2",), ("d * d",), (f"const {a} d = {G.load(x, 'o')} - mean;",), s2)

    def normalize() -> None:  # the variance, the output and the statistics
        if s2 is not None:
            sp.total("s2_all", a, s2[0], "0")
        cw = k.code
        eps = G.lit(k.node.attrs["epsilon"])
        cw.line(f"const {a} var = s2_all / n;", f"const {a} dev = {G.sqrt('var + ' + eps)};",
                f"const {a} sc = {G.load(scale, 'g')}, bi = {G.load(bias, 'g')};")
        with sp.each_term():
            cw.line(f"const int64_t o = base + {G.moff('j')};",
                    f"const {a} d = {G.load(x, 'o')} - mean;", f"const {a} q = d / dev;",
                    f"const {a} r = sc * q;", f"const {a} u = r + bi;")
            G.store(y, "o", "u")
        with cw.block("if (part == 0 && threadIdx.x == 0)"):
            G.store(m, "g", "mean")
            G.store(v, "g", "var")

    def sums() -> None:
        _partials(G, sp, ("s",), (G.load(x, "o"),), (), s1)

    _launches(k, G, sp, [(1, [], [sums]), (1, [], [mean, squares]), (0, [mean], [normalize])])


def emit_training_grad(k: CudaKernel, G: Groups, p: int) -> None:
    """§12.4 in two launches, or one (module docstring)."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    a = G.a
    sp = Split(k, G.count, G.members, p)
    s1, s2 = _scratch(k, G, p)

    def mu() -> None:
        k.code.line(f"const {a} mu = {G.load(mean, 'g')};")

    def sums() -> None:
        _partials(G, sp, ("sd", "st"), ("gy", "gy * d"),
                  (f"const {a} gy = {G.load(dy, 'o')};", f"const {a} d = {G.load(x, 'o')} - mu;"),
                  None if s1 is None or s2 is None else s1 + s2)

    def gradients() -> None:
        if s1 is not None and s2 is not None:
            sp.total("sd_all", a, s1[0], "0")
            sp.total("st_all", a, s2[0], "0")
        cw = k.code
        cw.line(f"const {a} sc = {G.load(scale, 'g')};",
                f"const {a} ve = {G.load(var, 'g')} + {G.lit(k.node.attrs['epsilon'])};",
                f"const {a} dev = {G.sqrt('ve')};", f"const {a} mdy = sd_all / n;",
                f"const {a} q0 = st_all / n;", f"const {a} q = q0 / ve;",
                f"const {a} f = sc / dev;")
        with sp.each_term():
            cw.line(f"const int64_t o = base + {G.moff('j')};",
                    f"const {a} gy = {G.load(dy, 'o')};", f"const {a} d = {G.load(x, 'o')} - mu;",
                    f"const {a} r0 = gy - mdy;", f"const {a} r1 = d * q;",
                    f"const {a} r = r0 - r1;", f"const {a} u = f * r;")
            G.store(dx, "o", "u")
        with cw.block("if (part == 0 && threadIdx.x == 0)"):
            G.store(ds, "g", "st_all / dev")
            G.store(db, "g", "sd_all")

    _launches(k, G, sp, [(2, [], [mu, sums]), (0, [mu], [gradients])])


def emit_grad(k: CudaKernel, G: Groups, p: int) -> None:
    """§12.2 in two launches, or one (module docstring)."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    a = G.a
    sp = Split(k, G.count, G.members, p)
    s1, s2 = _scratch(k, G, p)

    def sums() -> None:  # dX, and the sums of its group
        k.code.line(f"const {a} mu = {G.load(mean, 'g')};",
                    f"const {a} dev = {G.dev(var, 'g')};",
                    f"const {a} cf = {G.load(scale, 'g')} / dev;")
        _partials(G, sp, ("st", "sb"), ("gy * d", "gy"),
                  (f"const {a} gy = {G.load(dy, 'o')};", f"const {a} d = {G.load(x, 'o')} - mu;",
                   f"const {a} pp = gy * cf;"),
                  None if s1 is None or s2 is None else s1 + s2,
                  after=(f"{k.param(dx)}[o] = {narrow(G.t, 'pp')};",))
        if s1 is None:
            with k.code.block("if (threadIdx.x == 0)"):
                G.store(ds, "g", "st_all / dev")
                G.store(db, "g", "sb_all")

    _launches(k, G, sp, [(2, [], [sums])])
    if s1 is not None and s2 is not None:  # a thread per group adds its parts
        k.next_launch()
        with k.each(G.count, "g"):
            sp.total("st", a, s1[0], "0")
            sp.total("sb", a, s2[0], "0")
            k.code.line(f"const {a} dev = {G.dev(var, 'g')};")
            G.store(ds, "g", "st / dev")
            G.store(db, "g", "sb")


Step = Callable[[], None]


def _launches(k: CudaKernel, G: Groups, sp: Split,
              phases: list[tuple[int, list[Step], list[Step]]]) -> None:
    """The phases of a split op, each ``(chains of its tree, steps repeated when the phase is
    a launch of its own, steps)``: each phase a launch over the (group, part) blocks, or, with
    one part per group, all of them in one launch (the block's tree gives its group's sums)."""
    if sp.p == 1:
        with sp.each_part(G.a, max(c for c, _, _ in phases)):
            _declare(G)
            for _, _, steps in phases:
                for step in steps:
                    step()
        return
    for i, (chains, again, steps) in enumerate(phases):
        if i:
            k.next_launch()
        with sp.each_part(G.a, chains):
            _declare(G)
            for step in again + steps:
                step()
