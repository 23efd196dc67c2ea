"""The ``"c"`` target: generated C (C11, standard library, optional OpenMP) loaded with ctypes.

``TARGET.lower(graph, shapes, cc=None, threads=None, cache_dir=None, openmp=True)``:

- ``cc``: the compiler command (default ``$CC``, else ``cc``; read here, at the API boundary).
- ``threads``: OpenMP threads per call (default: OpenMP's default, all cores).
- ``cache_dir``: where libraries are cached (default ``$XDG_CACHE_HOME/gradc`` or
  ``~/.cache/gradc``).
- ``openmp``: set False to compile without OpenMP even where the compiler supports it.
- ``spin_count``: how long an idle OpenMP thread busy-waits before it sleeps, in GCC's OpenMP
  runtime's spins (``GOMP_SPINCOUNT``; one spin is a ``pause``, about 45 ns on the AMD EPYC
  it was measured on). Default (None): ``runtime.DEFAULT_SPIN_COUNT`` (1000), unless the
  environment sets ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``; libgomp's own default is 300,000,
  which made each kernel of a step wait up to a time slice on a machine whose cores other
  processes use. 0 sleeps at once (``OMP_WAIT_POLICY=passive``): best on a crowded machine,
  slower on an idle one. The runtime reads it once per process, when it is loaded: it is set by
  the first C executable loaded, and a later one asking for another value is a GradcError
  (``backends/c/runtime.py`` says why and what was measured). Results never depend on it.
- ``profile``: time every kernel call (``Executable.profile()`` lists kernels slowest first:
  label, calls, seconds); off by default, the timers cost a clock read per kernel call.
- ``update_in_place``: a mapping of output names to input or parameter names: each such output
  is written into the array passed for that input, which a call then overwrites and returns as
  the output (a training step updates its parameters and optimizer state this way, without a
  copy or an allocation). A pair is granted only where that is safe
  (``gradc.backends.plan.plan_in_place``); ``Executable.in_place`` lists the pairs granted,
  the others get fresh arrays as usual.

Layout of the program (``emit``): one static function per node or fused group, one entry
function. Intermediate values of static shape share one arena (``gradc.backends.plan``:
``plan_arena`` places them by their lifetimes, planned at compile time): the runner allocates
it once and reuses it on every call, so a call allocates nothing for them
(``Executable.arena_bytes``: its size). Values of symbolic shape are allocated per call and
freed after their last use. Fused groups never get
intermediate buffers: an elementwise group is one loop; an anchored group evaluates its prologue
per gradient element, and its epilogue when it writes the result -- max_pooling_grad and
resample_grad accumulate each (n, c) plane in a small per-thread buffer (cache resident) and
apply the epilogue while writing the plane out (2x2 stride-2 windows that tile a float32 plane
are written directly, two windows per SSE2 step; other 2-D windows take a separable row/column
argmax); slice_grad writes every element once. Kernels that move 16 MiB or more write with
streaming stores (x86-64; see ``prelude.h``). Index arithmetic is int64 (in-plane pooling
indices are int32 when a plane has fewer than 2^31 elements). Outputs are allocated 64-byte
aligned.

Numerics (SPEC.md §1.6): float16 is widened exactly, computed in float32 and rounded once on
store; copies and selections move bit patterns; summing ops (max_pooling_grad, resample,
resample_grad, reduce_sum) keep the canonical order and the reference's accumulation types, so
every op is bit-identical to the reference target (NaN payloads of arithmetic results aside).
``cast`` from floating point to integer, undefined in C for NaN and out-of-range values, is
defined as NumPy behaves on x86-64 (see ``prelude.h``).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from gradc.errors import GradcError
from gradc.ir.core import Graph

from gradc.backends.c.build import compile_library
from gradc.backends.c.emit import EMITTERS, SPECIAL, generate
from gradc.backends.c.runtime import CRunner
from gradc.backends.target import Lowered


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/gradc`` or ``~/.cache/gradc``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gradc")


MAX_THREADS = 4096  # passed to C as an int; more than any machine has
MAX_SPIN_COUNT = 2 ** 63 - 1  # libgomp reads GOMP_SPINCOUNT as an unsigned long long


class CTarget:
    """The ``"c"`` target (see the module docstring)."""

    name: str = "c"
    exact: bool = True
    artifact_kind: str | None = "C source"

    def lowerings(self) -> frozenset[str]:
        """The ops with a C emitter (constants and fused groups are the program's own)."""
        return frozenset(EMITTERS) | frozenset(SPECIAL)

    def artifact(self, graph: Graph, shapes: Mapping[str, int]) -> str:
        """The C source; no compiler is needed to write it."""
        return generate(graph, shapes).source

    def lower(self, graph: Graph, shapes: Mapping[str, int], cc: str | None = None,
              threads: int | None = None, cache_dir: str | None = None, openmp: bool = True,
              update_in_place: Mapping[str, str] | None = None, profile: bool = False,
              spin_count: int | None = None, **options: Any) -> Lowered:
        """Generate, compile (or reuse) and load the C program of a verified graph."""
        unknown = sorted(options)
        if unknown:
            name = unknown[0]
            raise GradcError(f"c target: {name}: expected one of cc, threads, cache_dir, "
                             f"openmp, update_in_place, profile, spin_count, got an unknown "
                             f"option {name}={options[name]!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 1 <= threads <= MAX_THREADS):
            raise GradcError(f"c target: threads: expected an int in [1, {MAX_THREADS}] or "
                             f"None, got {threads!r}")
        if spin_count is not None and (isinstance(spin_count, bool)
                                       or not isinstance(spin_count, int)
                                       or not 0 <= spin_count <= MAX_SPIN_COUNT):
            raise GradcError(f"c target: spin_count: expected an int in [0, 2**63 - 1] or None, "
                             f"got {spin_count!r}")
        for name, v in (("cc", cc), ("cache_dir", cache_dir)):
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise GradcError(f"c target: {name}: expected a string or None, got "
                                 f"{type(v).__name__}")
        for name, flag in (("openmp", openmp), ("profile", profile)):
            if not isinstance(flag, bool):
                raise GradcError(f"c target: {name}: expected a bool, got "
                                 f"{type(flag).__name__}")
        cc = str(cc) if cc is not None else os.environ.get("CC", "cc")
        cache_dir = str(cache_dir) if cache_dir is not None else default_cache_dir()
        if update_in_place is not None and (
                not isinstance(update_in_place, Mapping)
                or not all(isinstance(k, str) and isinstance(v, str)
                           for k, v in update_in_place.items())):
            raise GradcError("c target: update_in_place: expected a mapping of output names to "
                             f"input names, got {update_in_place!r}")
        program = generate(graph, shapes, update_in_place, profile)
        lib = compile_library(program.source, cc, cache_dir, openmp=openmp,
                              name=graph.name)
        runner = CRunner(lib, program.symbols, program.inputs, program.outputs, threads,
                         program.in_place, program.arena_bytes, program.kernels, profile,
                         spin_count)
        granted = {program.outputs[j].name: program.inputs[i].name
                   for j, i in program.in_place.items()}
        return Lowered(runner, source=program.source, contiguous=True, in_place=granted)


TARGET = CTarget()
