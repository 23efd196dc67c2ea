"""Average pooling's window arithmetic as C text, shared by the C and cuda targets' kernels:
the int64 bound every run-time position and count must stay under, and the per-axis range of a
window's taps inside the input (or inside its padded extent)."""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.c.writer import CWriter
from gradc.errors import UnsupportedError

BOUND = 2 ** 62
KEYS = ("window_size", "strides", "start_padding", "end_padding", "dilations")


def check_bounds(target: str, op: str, spatial: Sequence[int], out: Sequence[int],
                 attrs: Any) -> None:
    """UnsupportedError unless every run-time position and count fits int64 exactly (the C
    and cuda targets' kernels compute them in int64 alike)."""
    count = 1
    for i, (n, o) in enumerate(zip(spatial, out)):
        w, s, sp, ep, d = (attrs[k][i] for k in KEYS)
        reach = (o + 1) * s + sp + ep + n + (w + 1) * d + 2
        count *= min(w, (n + sp + ep) // d + 2)
        if reach >= BOUND or count >= BOUND:
            raise UnsupportedError(
                f"{target} target: {op}: window_size/strides/padding/dilations: expected "
                f"positions and window counts below 2**62 on spatial axis {i}, got window "
                f"{w}, stride {s}, padding {sp}/{ep}, dilation {d}")


def tap_range(cw: CWriter, i: int, n: int, attrs: Any, o: str, inside: bool) -> None:
    """``klo{i}..khi{i}``: the taps of window ``o`` on axis i inside the input (``inside``),
    or inside the padded extent; ``t{i}``: the window's first position."""
    w, s, sp, ep, d = (attrs[k][i] for k in KEYS)
    lo, hi = (0, n) if inside else (-sp, n + ep)
    sfx = "" if inside else "p"
    cw.line(f"const int64_t t{sfx}{i} = {o} * {s} - {sp};",
            f"const int64_t klo{sfx}{i} = t{sfx}{i} >= {lo} ? 0 : "
            f"({lo} - t{sfx}{i} + {d - 1}) / {d};",
            f"int64_t khi{sfx}{i} = {hi - 1} - t{sfx}{i} < 0 ? -1 : "
            f"({hi - 1} - t{sfx}{i}) / {d};",
            f"if (khi{sfx}{i} > {w - 1}) khi{sfx}{i} = {w - 1};")
