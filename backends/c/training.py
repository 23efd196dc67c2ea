"""C kernels of SPEC-training.md §19.1 and §20.1: ``adam_optimizer`` and ``random_generator``.

Both follow the reference operation by operation (compiled with -ffp-contract=off, so every
float operation rounds once as in NumPy): Philox blocks in uint32/uint64 integer arithmetic,
Adam's element-wise steps in the accumulation type, the bias correction in double through libm's
``pow`` and ``sqrt`` once per call. The losses, optimizers and dropout are composites (§9.6) and
need no kernel.
"""

from __future__ import annotations

from typing import Any

from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.scalar import narrow, widen

PHILOX_ROUND = (
    "const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;",
    "const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;",
    "const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;",
    "c0 = n0; c1 = (uint32_t)p1; c2 = n2; c3 = (uint32_t)p0;",
)


def emit_random_generator(k: Kernel) -> None:
    """Philox 4x32-10: block ``b`` has counter ``ctr + b`` (128-bit, wrapping) and fills
    elements ``4b .. 4b+3``; the output state is ``ctr + ceil(count / 4)``."""
    n = k.node
    (state,) = n.inputs
    out, out_state = n.outputs
    cw = k.code
    st, y, ys = k.param(state), k.param(out), k.param(out_state)
    cw.line(f"const uint64_t lo0 = (uint64_t){st}[0] | ((uint64_t){st}[1] << 32);",
            f"const uint64_t hi0 = (uint64_t){st}[2] | ((uint64_t){st}[3] << 32);",
            f"const uint32_t key0 = {st}[4], key1 = {st}[5];",
            f"const int64_t count = {k.dims.prod(out.type.shape)};",
            "const int64_t nb = count / 4 + (count % 4 != 0);")
    cw.line(omp_for("count"))
    with cw.block("for (int64_t b = 0; b < nb; b++)"):
        cw.line("const uint64_t lo = lo0 + (uint64_t)b;",
                "const uint64_t hi = hi0 + (uint64_t)(lo < lo0);",
                "uint32_t c0 = (uint32_t)lo, c1 = (uint32_t)(lo >> 32);",
                "uint32_t c2 = (uint32_t)hi, c3 = (uint32_t)(hi >> 32);",
                "uint32_t k0 = key0, k1 = key1;")
        with cw.block("for (int r = 0; r < 10; r++)"):
            cw.line("if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }", *PHILOX_ROUND)
        cw.line("const uint32_t w[4] = {c0, c1, c2, c3};")
        with cw.block("for (int64_t j = 0; j < 4 && 4 * b + j < count; j++)"):
            cw.line(f"{y}[4 * b + j] = w[j];")
    cw.line("const uint64_t lo = lo0 + (uint64_t)nb;",
            "const uint64_t hi = hi0 + (uint64_t)(lo < lo0);",
            f"{ys}[0] = (uint32_t)lo; {ys}[1] = (uint32_t)(lo >> 32);",
            f"{ys}[2] = (uint32_t)hi; {ys}[3] = (uint32_t)(hi >> 32);",
            f"{ys}[4] = key0; {ys}[5] = key1;")


def emit_adam_optimizer(k: Kernel) -> None:
    """DirectML's Adam: the bias correction once in double, then per element in ACC."""
    n = k.node
    x, m, v, g, step = n.inputs
    xo, mo, vo = n.outputs
    t = ctype(x.type.dtype)
    acc = "double" if t.store == "double" else "float"
    sqrt = "sqrt" if acc == "double" else "sqrtf"
    lr, b1, b2, eps = (float(n.attrs[a]) for a in ("learning_rate", "beta1", "beta2", "epsilon"))
    lit = {name: float_literal(val, "double") for name, val in
           (("lr", lr), ("b1", b1), ("b2", b2), ("eps", eps))}
    cw = k.code
    cw.line(f"const double t = (double){k.param(step)}[0];",
            f"const double corr = sqrt(1.0 - pow({lit['b2']}, t)) / (1.0 - pow({lit['b1']}, t));",
            f"const {acc} lr_step = ({acc}){lit['lr']} * ({acc})corr;",
            f"const {acc} b1 = ({acc}){lit['b1']}, b2 = ({acc}){lit['b2']};",
            f"const {acc} c1 = ({acc})(1.0 - {lit['b1']}), c2 = ({acc})(1.0 - {lit['b2']});",
            f"const {acc} eps = ({acc}){lit['eps']};",
            f"const int64_t count = {k.dims.prod(x.type.shape)};")
    px, pm, pv, pg = (k.param(a) for a in (x, m, v, g))
    pxo, pmo, pvo = (k.param(a) for a in (xo, mo, vo))
    cw.line(omp_for("count"))
    with cw.block("for (int64_t i = 0; i < count; i++)"):
        cw.line(f"const {acc} gi = ({acc}){widen(t, f'{pg}[i]')};",
                f"const {acc} mi = b1 * ({acc}){widen(t, f'{pm}[i]')} + c1 * gi;",
                f"const {acc} vi = b2 * ({acc}){widen(t, f'{pv}[i]')} + c2 * (gi * gi);",
                f"const {acc} u = (lr_step * mi) / ({sqrt}(vi) + eps);",
                f"const {acc} xi = ({acc}){widen(t, f'{px}[i]')} - u;",
                f"{pxo}[i] = {narrow(t, 'xi')};",
                f"{pmo}[i] = {narrow(t, 'mi')};",
                f"{pvo}[i] = {narrow(t, 'vi')};")


EMITTERS: dict[str, Any] = {
    "random_generator": emit_random_generator,
    "adam_optimizer": emit_adam_optimizer,
}
