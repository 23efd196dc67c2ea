"""The fixed C text every generated program starts with: ``prelude.h``, ``transcend.h`` and
``mm.h``, shipped as package data.

The headers (includes, macros, float16 conversions, float-to-integer casts, ``gc_axis_taps``,
the convolutions' gemm; then the vectorizable transcendental functions; then the product of
packed blocks) are C that C tools and editors can read; their opening comments describe the
helpers. The text is copied into every generated source, so a generated file compiles on its
own.
"""

from __future__ import annotations

from importlib.resources import files

# in this order: transcend.h and mm.h use prelude.h's helpers
HEADERS = ("prelude.h", "transcend.h", "mm.h")
TEXTS = [files(__package__).joinpath(h).read_text(encoding="utf-8") for h in HEADERS]
PRELUDE = "".join(TEXTS)
# The cuda target compiles the scalar functions for the GPU too (not the softmax rows that follow
# them: host loops over whole rows).
ROWS = "/* Rows of a softmax over trailing axes"
TRANSCEND = TEXTS[1][:TEXTS[1].index(ROWS)] + "#endif\n"
