"""The command line's argument types: every numeric option is parsed and range-checked here.

Each numeric flag of ``gradc`` takes its ``type=`` from ``integer``, ``real`` or ``seed``, so a
value outside the option's range (``--batch-size 0``, ``--lr nan``, ``--threads -1``) is
refused while the arguments are parsed, with exit status 2, before any file is read; no command
falls back to a default for a value it was given. ``tests/test_cli_args.py`` checks that no
option of any subcommand takes a bare ``int`` or ``float``.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Callable

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


def integer(least: int = INT64_MIN, most: int = INT64_MAX) -> Callable[[str], int]:
    """An argparse type: a decimal integer in ``[least, most]``."""
    def parse(text: str) -> int:
        value = int(text) if re.fullmatch(r"[+-]?[0-9]{1,19}", text.strip()) else None
        if value is None or not least <= value <= most:
            raise argparse.ArgumentTypeError(f"expected {_int_range(least, most)}, got "
                                             f"{text!r}")
        return value
    parse.__name__ = "integer"
    return parse


def real(least: float = 0.0, above: bool = False, below: float | None = None
         ) -> Callable[[str], float]:
    """An argparse type: a finite number ``>= least`` (``> least`` with ``above``), and
    ``< below`` when given."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (value > least if above else value >= least) and (
            below is None or value < below)
        if not ok:
            bound = f"> {least:g}" if above else f">= {least:g}"
            if below is not None:
                bound += f" and < {below:g}"
            raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got "
                                             f"{text!r}")
        return value
    parse.__name__ = "real"
    return parse


def seed(text: str) -> int:
    """A --seed value: an integer in [0, 2**63)."""
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) >= 2 ** 63:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {text!r}")
    return int(text)


def _int_range(least: int, most: int) -> str:
    if most == INT64_MAX:
        return "an integer" if least == INT64_MIN else f"an integer >= {least}"
    return f"an integer in [{least}, {most}]"


__all__ = ["integer", "real", "seed", "INT64_MIN", "INT64_MAX"]
