"""The fixed C text every generated program starts with: ``prelude.h``, shipped as package data.

The header (includes, macros, float16 conversions, float-to-integer casts, ``gc_axis_taps``)
is C that C tools and editors can read; its opening comment describes the helpers. It is copied
into every generated source, so a generated file compiles on its own.
"""

from __future__ import annotations

from importlib.resources import files

PRELUDE = files(__package__).joinpath("prelude.h").read_text(encoding="utf-8")
