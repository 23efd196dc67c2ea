"""What a target is: the ``Target`` protocol that every backend implements, and what it returns.

A target lowers an optimized, verified graph. ``lower`` returns a ``Lowered``: the runner that
computes the outputs from checked arrays, plus the program it made (source text or an ONNX
model); the driver (``gradc.compile``) wraps it in an ``Executable``, which checks every call's
arrays first. ``artifact`` gives the program alone, without building or loading it (what
``gradc compile -o FILE`` writes). ``lowerings`` names the ops the target lowers; a graph with
any other op is refused with an ``UnsupportedError`` before anything is produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Protocol

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.core import Graph

Runner = Callable[[Mapping[str, np.ndarray], Mapping[str, int]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Lowered:
    """What a target gives the driver: the runner and the program behind it."""

    runner: Runner
    source: str | None = None  # the generated program text ("numpy", "c")
    model: Any = None  # the onnx.ModelProto ("onnx")
    contiguous: bool = False  # the runner needs C-contiguous input arrays
    in_place: dict[str, str] = field(default_factory=dict)  # output -> input it overwrites
    # Arrays other than NumPy's that the runner takes as inputs (GPU arrays, for "cuda"): a
    # function from such an object to its description (``shape``, ``dtype``, ``ndim``,
    # ``flags.c_contiguous``), or None for an object it does not take.
    foreign: Callable[[Any], Any] | None = None
    # The target's own array types (the cuda target's ``DeviceArray``: an output kept on the
    # device, passed back on the next call): an object of one of them is always C-contiguous
    # and its ``shape`` and ``dtype`` are exact, so a call whose arrays match the static
    # signature passes without describing each one (a training step passes back hundreds).
    own: tuple[type, ...] = ()
    # False when this program sums some values in another order than the canonical one (an
    # option such as the cuda target's sums="split"): its results are then held to
    # SPEC-training.md §9.5's bound, not to the reference's bits, even on an exact target.
    exact: bool = True


class Target(Protocol):
    """One way to run a graph (see the module docstring)."""

    name: str
    exact: bool  # keeps the reference's order and roundings: bit-identical results
    artifact_kind: str | None  # what ``artifact`` writes ("C source", ...), None: nothing

    def lowerings(self) -> Collection[str]:
        """The ops this target lowers."""
        ...

    def lower(self, graph: Graph, shapes: Mapping[str, int], **options: Any) -> Lowered:
        """Build the runner of a verified, optimized graph; options are the target's own."""
        ...

    def artifact(self, graph: Graph, shapes: Mapping[str, int]) -> str | bytes:
        """The program for a verified, optimized graph, without building or loading it."""
        ...


def reject_options(target: str, options: Mapping[str, Any]) -> None:
    """VerifyError for the first option of a target that takes none."""
    if options:
        k = sorted(options)[0]
        raise VerifyError(f"compile: {k}: expected no such option for target {target!r}, "
                          f"got {options[k]!r}")
