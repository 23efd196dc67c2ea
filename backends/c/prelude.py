"""The fixed C text every generated program starts with: ``prelude.h`` followed by ``mm.h``,
shipped as package data.

The headers (includes, macros, float16 conversions, float-to-integer casts, ``gc_axis_taps``,
the convolutions' gemm; then the product of packed blocks) are C that C tools and editors can
read; their opening comments describe the helpers. The text is copied into every generated
source, so a generated file compiles on its own.
"""

from __future__ import annotations

from importlib.resources import files

HEADERS = ("prelude.h", "mm.h")  # in this order: mm.h uses prelude.h's helpers
PRELUDE = "".join(files(__package__).joinpath(h).read_text(encoding="utf-8") for h in HEADERS)
