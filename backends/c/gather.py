"""C kernels of SPEC-transformers.md §26 (gather, gather_grad) and the run-time input error.

Both kernels first check every index, serially and in row-major order, before they write
anything: the first index outside ``[-size, size)`` is recorded in ``gc_err`` (thread-local: the
check runs in the calling thread) with its position, and the kernel returns ``GC_INPUT_ERROR``,
which the entry function passes on at once. The runtime then reads the record with
``gradc_error`` and raises ``InputError`` with the reference's message (``record_message`` of
``gradc.ir.ops.gather``). A target that updates parameters in place runs every checking kernel
before its first in-place write (``checks_first``), so a failed step leaves the state as it
was.

``gather`` copies whole slices as unsigned bit patterns (exact for every dtype). ``gather_grad``
zeroes the output (an ``ACC`` scratch for float16), then adds the slices in order of occurrence:
each output element receives its terms in increasing position of ``indices``, from +0 (the
canonical order), the work split over the leading axes and chunks of the trailing ones.
"""

from __future__ import annotations

from gradc.backends.c.ctypes_map import ctype
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.scalar import narrow, widen
from gradc.ir.core import Value
from gradc.ir.ops.gather import RECORD_CODES

INPUT_ERROR = 2  # the entry's return code for a run-time input error (1: out of memory)
RECORD = 12  # int64 words of the error record: op, value, size, rank, 8 coordinates
SLICE = 64  # trailing elements per parallel job of gather_grad

ERROR_RECORD = f"""\
/* A run-time input error (an index out of range): what the check found, for gradc_error. */
#define GC_INPUT_ERROR {INPUT_ERROR}
static _Thread_local int64_t gc_err[{RECORD}];  /* op, value, size, rank, coordinates */
static int gc_index_error(int64_t op, int64_t flat, int64_t value, int64_t size, int rank,
                          const int64_t *dims) {{
  gc_err[0] = op; gc_err[1] = value; gc_err[2] = size; gc_err[3] = rank;
  for (int a = rank - 1; a >= 0; a--) {{ gc_err[4 + a] = flat % dims[a]; flat /= dims[a]; }}
  return GC_INPUT_ERROR;
}}
int gradc_error(int64_t *out) {{  /* the record of this thread's last input error */
  for (int i = 0; i < {RECORD}; i++) out[i] = gc_err[i];
  return (int)gc_err[0];
}}"""


def _check(k: Kernel, idx: Value, size: str, op: str) -> None:
    """Serial range check of every index, in row-major order, before any write."""
    cw, dims = k.code, k.dims
    shape = idx.type.shape
    count = dims.prod(shape)
    sizes = ", ".join(dims.expr(d) for d in shape)
    table = f"(const int64_t[]){{{sizes}}}" if shape else "NULL"
    with cw.block(f"for (int64_t i = 0; i < {count}; i++)"):
        cw.line(f"const int64_t v = (int64_t){k.param(idx)}[i];")
        with cw.block(f"if (v < -({size}) || v >= ({size}))"):
            cw.line(f"return gc_index_error({RECORD_CODES[op]}, i, v, {size}, {len(shape)}, "
                    f"{table});")


def emit_gather(k: Kernel) -> None:
    """§26.1: check, then one copy of ``post`` elements per (leading position, index)."""
    n = k.node
    x, idx = n.inputs
    y = n.outputs[0]
    axis, shape, dims, cw = n.attrs["axis"], x.type.shape, k.dims, k.code
    size = dims.expr(shape[axis])
    _check(k, idx, size, "gather")
    k.as_bits(x, y)
    bits = ctype(x.type.dtype).bits
    pre, post = dims.prod(shape[:axis]), dims.prod(shape[axis + 1:])
    count = dims.prod(idx.type.shape)
    cw.line(f"const int64_t SS = {post}, K = {count};")
    cw.line(omp_for(dims.prod(y.type.shape)))
    with cw.block(f"for (int64_t t = 0; t < {pre} * K; t++)"):
        cw.line("const int64_t p = t / K, j = t % K;",
                f"int64_t v = (int64_t){k.param(idx)}[j];", f"if (v < 0) v += {size};",
                f"const {bits} *restrict src = {k.param(x)} + (p * {size} + v) * SS;",
                f"{bits} *restrict dst = {k.param(y)} + t * SS;")
        with cw.block("for (int64_t q = 0; q < SS; q++)"):
            cw.line("dst[q] = src[q];")


def emit_gather_grad(k: Kernel) -> None:
    """§26.2: check, zero the output, then add each slice at its index in order of occurrence."""
    n = k.node
    dy, idx = n.inputs
    dx = n.outputs[0]
    axis, out, dims, cw = n.attrs["axis"], n.attrs["output_sizes"], k.dims, k.code
    t = ctype(dy.type.dtype)
    size = dims.expr(out[axis])
    _check(k, idx, size, "gather_grad")
    pre, post = dims.prod(out[:axis]), dims.prod(out[axis + 1:])
    total = dims.prod(out)
    count = dims.prod(idx.type.shape)
    cw.line(f"const int64_t SS = {post}, K = {count}, P = {pre};")
    if t.is_f16:  # accumulate in float, round once
        cw.line(f"float *acc = (float *)gc_alloc((size_t){total} * sizeof(float));",
                "if (!acc) return 1;")
        dst = "acc"
    else:
        dst = k.param(dx)
    cw.line(omp_for(total))
    with cw.block(f"for (int64_t i = 0; i < {total}; i++)"):
        cw.line(f"{dst}[i] = 0;")
    chunks = f"((SS + {SLICE - 1}) / {SLICE})"
    cw.line(omp_for("K * P * SS"))
    with cw.block(f"for (int64_t b = 0; b < P * {chunks}; b++)"):
        cw.line(f"const int64_t p = b / {chunks}, q0 = (b % {chunks}) * {SLICE};",
                f"const int64_t qn = SS - q0 < {SLICE} ? SS - q0 : {SLICE};")
        with cw.block("for (int64_t j = 0; j < K; j++)"):
            cw.line(f"int64_t v = (int64_t){k.param(idx)}[j];", f"if (v < 0) v += {size};",
                    f"{t.acc} *restrict o = {dst} + (p * {size} + v) * SS + q0;",
                    f"const {t.store} *restrict g = {k.param(dy)} + (p * K + j) * SS + q0;")
            with cw.block("for (int64_t q = 0; q < qn; q++)"):
                cw.line(f"o[q] = o[q] + ({t.acc}){widen(t, 'g[q]')};")
    if t.is_f16:
        cw.line(omp_for(total))
        with cw.block(f"for (int64_t i = 0; i < {total}; i++)"):
            cw.line(f"{k.param(dx)}[i] = {narrow(t, 'acc[i]')};")
        cw.line("free(acc);")


EMITTERS = {"gather": emit_gather, "gather_grad": emit_gather_grad}
