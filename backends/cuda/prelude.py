"""The fixed text every generated CUDA program starts with: ``prelude.cuh`` (package data),
then the C target's numeric helpers, copied verbatim from its ``prelude.h``, its
transcendental functions (``transcend.h``: on the GPU its ``GC_FMA`` is CUDA's ``fma``),
then ``x86nan.cuh`` (x86's NaN results, which the CUDA dialect of the element-wise
expressions calls: ``backends/cuda/scalar.py``).

The element-wise expressions are the C target's (``gradc.backends.c.scalar``): the same text in
both dialects, calling the same helpers (``gc_h2f``, ``gc_f2h``, ``gc_cvt32``, ...). The
helpers are taken from the C prelude between two landmarks (the first helper and the comment
that follows the last one) and compiled here as device functions (``GC_INLINE``), so the two
targets convert and round alike and no helper is written twice.
"""

from __future__ import annotations

from importlib.resources import files

from gradc.backends.c.prelude import PRELUDE as C_PRELUDE, TRANSCEND

HEADER = files(__package__).joinpath("prelude.cuh").read_text(encoding="utf-8")
HOST_HEADER = files(__package__).joinpath("host.h").read_text(encoding="utf-8")
X86_NAN = files(__package__).joinpath("x86nan.cuh").read_text(encoding="utf-8")
# the host harness's GPU NaN mode (host.py): float and double made to return canonical NaNs
HOST_GPU_NAN = files(__package__).joinpath("host_gpunan.h").read_text(encoding="utf-8")

FIRST = "GC_INLINE float gc_bits2f("  # the first numeric helper of the C prelude
AFTER = "/* Resample's tap rule for one axis"  # the comment after the last one


def numeric_helpers(prelude: str = C_PRELUDE) -> str:
    """The C prelude's float16, float-to-integer and wrap-around helpers (text)."""
    start, end = prelude.find(FIRST), prelude.find(AFTER)
    if start < 0 or end < start:
        raise RuntimeError("internal error: cuda target: the C prelude's numeric helpers "
                           f"moved (expected {FIRST!r} before {AFTER!r} in prelude.h)")
    return prelude[start:end].rstrip() + "\n"


PRELUDE = HEADER + "\n/* The C target's numeric helpers (prelude.h), as device functions. */\n" \
    + numeric_helpers() \
    + "\n/* The C target's transcendental functions (transcend.h), as device functions. */\n" \
    + TRANSCEND + "\n" + X86_NAN
