"""``adam_optimizer`` (SPEC-training.md §19.1) and ``random_generator`` (§20.1).

- ``random_generator``: Philox4x32-10, a thread per block of four outputs (counter ``ctr + b``,
  128-bit, wrapping), integer arithmetic only: the reference's bits. The next state
  (``ctr + ceil(count / 4)``, the key) is written by the thread of block 0 after it has read the
  state; every thread reads the state first, and the memory plan never puts the next state over
  the state on this target (a kernel of several blocks cannot read all before any writes).
- ``adam_optimizer``: a thread per element, the reference's steps in ``ACC`` in its order (one
  rounding each, no contraction). The bias correction ``sqrt(1 - b2^t) / (1 - b1^t)`` is
  computed in double by every thread (once, before its elements) with ``b^t`` by exponentiation
  in double-double arithmetic (about 100 bits, Dekker's exact products: additions and
  multiplications only, no FMA), rounded once: the correctly rounded power, which glibc's ``pow``
  (the reference's and the C target's) returns except within about 2^-15 ulp of a rounding
  boundary -- and the same bits on the GPU and on the host harness, where the GPU's own ``pow``
  may differ from glibc's by an ulp. A negative step uses ``pow`` (the step is 1-based).

NaN: adam's elements are §9.5 tolerance results (k = 10), not selections: NaN results are NaN.
"""

from __future__ import annotations

from typing import Any

from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda.kernel import CudaKernel, static_shape

def _prod(sizes: list[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


PHILOX_ROUND = (
    "const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;",
    "const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;",
    "const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;",
    "c0 = n0; c1 = (uint32_t)p1; c2 = n2; c3 = (uint32_t)p0;",
)


def emit_random_generator(k: CudaKernel) -> None:
    """Philox 4x32-10: block ``b`` (a thread) fills elements ``4b .. 4b+3``."""
    n = k.node
    (state,) = n.inputs
    out, out_state = n.outputs
    count = _prod(static_shape(k, out.type.shape))
    blocks = -(-count // 4)
    st, y, ys = k.param(state), k.param(out), k.param(out_state)
    cw = k.code
    cw.line(f"const uint64_t lo0 = (uint64_t){st}[0] | ((uint64_t){st}[1] << 32);",
            f"const uint64_t hi0 = (uint64_t){st}[2] | ((uint64_t){st}[3] << 32);",
            f"const uint32_t key0 = {st}[4], key1 = {st}[5];")
    with k.each(max(1, blocks), "b"):
        with cw.block(f"if (b < {blocks})"):
            cw.line("const uint64_t lo = lo0 + (uint64_t)b;",
                    "const uint64_t hi = hi0 + (uint64_t)(lo < lo0);",
                    "uint32_t c0 = (uint32_t)lo, c1 = (uint32_t)(lo >> 32);",
                    "uint32_t c2 = (uint32_t)hi, c3 = (uint32_t)(hi >> 32);",
                    "uint32_t k0 = key0, k1 = key1;")
            with cw.block("for (int r = 0; r < 10; r++)"):
                cw.line("if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }", *PHILOX_ROUND)
            cw.line("const uint32_t w[4] = {c0, c1, c2, c3};")
            with cw.block(f"for (int64_t j = 0; j < 4 && 4 * b + j < {count}; j++)"):
                cw.line(f"{y}[4 * b + j] = w[j];")
        with cw.block("if (b == 0)"):
            cw.line(f"const uint64_t lo = lo0 + (uint64_t){blocks};",
                    "const uint64_t hi = hi0 + (uint64_t)(lo < lo0);",
                    f"{ys}[0] = (uint32_t)lo; {ys}[1] = (uint32_t)(lo >> 32);",
                    f"{ys}[2] = (uint32_t)hi; {ys}[3] = (uint32_t)(hi >> 32);",
                    f"{ys}[4] = key0; {ys}[5] = key1;")


# b^t for an integer t >= 0 in double-double (hi, lo): squarings and products with Dekker's
# exact product (split by 2^27 + 1, the error of each product exact), then hi + lo rounded once
DDMUL = r"""#define GC_DDMUL(xh, xl, yh, yl) do { \
    const double gc_p = (xh) * (yh); \
    const double gc_xs = 134217729.0 * (xh), gc_ys = 134217729.0 * (yh); \
    const double gc_xa = gc_xs - (gc_xs - (xh)), gc_xb = (xh) - gc_xa; \
    const double gc_ya = gc_ys - (gc_ys - (yh)), gc_yb = (yh) - gc_ya; \
    const double gc_e = (((gc_xa * gc_ya - gc_p) + gc_xa * gc_yb) + gc_xb * gc_ya) \
                        + gc_xb * gc_yb + ((xh) * (yl) + (xl) * (yh)); \
    const double gc_s = gc_p + gc_e; \
    (xl) = gc_e - (gc_s - gc_p); (xh) = gc_s; \
  } while (0)"""


ADAM_PER_THREAD = 8  # elements per thread of adam_optimizer (its grid-stride loop)


def _power(k: CudaKernel, name: str, base: str, t: str) -> None:
    """``name = base^t`` (``t``: the double step, an integer value >= 0)."""
    cw = k.code
    with cw.block():
        cw.line(f"double ph = 1.0, pl = 0.0, bh = {base}, bl = 0.0;")
        with cw.block(f"for (uint64_t e = (uint64_t){t}; e; e >>= 1)"):
            cw.line("if (e & 1) GC_DDMUL(ph, pl, bh, bl);",
                    "if (e > 1) GC_DDMUL(bh, bl, bh, bl);")
        cw.line(f"{name} = ph + pl;")


def emit_adam_optimizer(k: CudaKernel) -> None:
    """DirectML's Adam: the bias correction in double, then per element in ACC."""
    n = k.node
    x, m, v, g, step = n.inputs
    xo, mo, vo = n.outputs
    t = ctype(x.type.dtype)
    acc = t.acc
    sqrt = "sqrt" if acc == "double" else "sqrtf"
    lit = {a: float_literal(float(n.attrs[a]), "double")
           for a in ("learning_rate", "beta1", "beta2", "epsilon")}
    cw = k.code
    if DDMUL not in k.tables:
        k.tables.append(DDMUL)
    count = _prod(static_shape(k, x.type.shape))
    cw.line(f"const double t = (double){k.param(step)}[0];", "double b1t, b2t;")
    with cw.block("if (t >= 0)"):
        _power(k, "b1t", lit["beta1"], "t")
        _power(k, "b2t", lit["beta2"], "t")
    with cw.block("else"):
        cw.line(f"b1t = pow({lit['beta1']}, t);", f"b2t = pow({lit['beta2']}, t);")
    cw.line("const double corr = sqrt(1.0 - b2t) / (1.0 - b1t);",
            f"const {acc} lr_step = ({acc}){lit['learning_rate']} * ({acc})corr;",
            f"const {acc} b1 = ({acc}){lit['beta1']}, b2 = ({acc}){lit['beta2']};",
            f"const {acc} c1 = ({acc})(1.0 - {lit['beta1']}), "
            f"c2 = ({acc})(1.0 - {lit['beta2']});",
            f"const {acc} eps = ({acc}){lit['epsilon']};")
    px, pm, pv, pg = (k.param(a) for a in (x, m, v, g))
    pxo, pmo, pvo = (k.param(a) for a in (xo, mo, vo))
    with k.each(count) as i:
        cw.line(f"const {acc} gi = ({acc}){widen(t, f'{pg}[{i}]')};",
                f"const {acc} m1 = b1 * ({acc}){widen(t, f'{pm}[{i}]')};",
                f"const {acc} m2 = c1 * gi;", f"const {acc} mi = m1 + m2;",
                f"const {acc} v1 = b2 * ({acc}){widen(t, f'{pv}[{i}]')};",
                f"const {acc} g2 = gi * gi;", f"const {acc} v2 = c2 * g2;",
                f"const {acc} vi = v1 + v2;",
                f"const {acc} num = lr_step * mi;", f"const {acc} den = {sqrt}(vi) + eps;",
                f"const {acc} u = num / den;",
                f"const {acc} xi = ({acc}){widen(t, f'{px}[{i}]')} - u;",
                f"{pxo}[{i}] = {narrow(t, 'xi')};",
                f"{pmo}[{i}] = {narrow(t, 'mi')};",
                f"{pvo}[{i}] = {narrow(t, 'vi')};")
    # threads for ADAM_PER_THREAD elements each: every thread computes the bias correction
    # (some 250 double operations) before its elements, which a thread per element repeats
    # for each of them (about a third of resnet18's update of 11M parameters on the H200)
    k.work = max(1, -(-count // ADAM_PER_THREAD))


EMITTERS: dict[str, Any] = {
    "random_generator": emit_random_generator,
    "adam_optimizer": emit_adam_optimizer,
}
