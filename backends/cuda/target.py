"""The ``"cuda"`` target: generated CUDA C, compiled with NVRTC, run as one CUDA graph per call.

``TARGET.lower(graph, shapes, **options)``:

- ``update_in_place``: a mapping of output names to input (or parameter) names: each such output
  is written into that input's slot of the device arena (a ``Trainer`` keeps its parameters and
  optimizer state there between steps). Pairs are granted as on the C target
  (``gradc.backends.plan.plan_in_place``); ``Executable.in_place`` lists them.
- ``keep_on_device``: output names returned as ``DeviceArray`` views of the arena instead of
  NumPy copies (nothing read back; ``np.asarray`` copies one to the host).
- ``runtime``: ``"device"`` (the default: the GPU, through the driver API) or ``"host"``: the
  same kernels compiled as C++ by the system compiler and run on the CPU through the host
  harness (``host.py``), with host memory standing in for the device's -- how CI runs the
  target without a GPU.
- ``sums``: ``"canonical"`` (the default: every sum in the reference's canonical order, so
  every result is the reference's bits) or ``"split"``: a long sum into few outputs (batch
  normalization's statistics and gradient sums, a bias gradient, a loss's total, the long
  products of a convolution's filter gradient or of a small convolution or gemm) is added in a
  fixed tree that fills the GPU (``split.py``, ``tiling.choose_split``), within
  SPEC-training.md §9.5's bound, and every gemm and convolution adds its terms with fused
  multiply-adds (``tiled.py``: one rounding per term, within the same bound); the other sums
  that already fill the GPU keep the canonical order. The executable's ``exact`` says which a
  program got (``Program.reordered`` lists the kernels).
- ``device``: the GPU's ordinal (default 0); ``cxx``: the host harness's compiler (default
  ``$CXX``, else ``c++``); ``cache_dir``: where CUBINs and harness libraries are cached
  (default ``$XDG_CACHE_HOME/gradc`` or ``~/.cache/gradc``).

Layout (``emit``): one kernel per node or fused group, every buffer at a constant offset of one
arena (inputs, outputs, then the temporaries that the shared plan places by their lifetimes);
shapes are static (a graph with symbols gets one program per set of symbol values, on the call
that first binds it). ``artifact`` is the source (``gradc compile -t cuda -o step.cu``), written
without NVRTC or a GPU.

Numerics (SPEC.md §1.6): the C target's expressions and helpers, NVRTC's exact options (no FMA
contraction, no flush to zero, IEEE division and square root); selections and gathers move bit
patterns; summing ops keep the canonical order and the reference's accumulation types (a thread
per output element or group, no atomics): bit-identical to the reference, transcendental
functions aside (the GPU's double-precision ``exp``/``log``/``tanh``/``pow`` are within an ulp of
glibc's and rounded once to the dtype).
"""

from __future__ import annotations

import os
from typing import Any, Collection, Mapping

from gradc.errors import GradcError
from gradc.ir.core import Graph

from gradc.backends.cuda import build, rt
from gradc.backends.cuda.arrays import DeviceArray, describe
from gradc.backends.cuda.emit import (EMITTERS, SPECIAL, SUMS, Program, generate,
                                     unbound_symbols)
from gradc.backends.cuda.host import HostDriver
from gradc.backends.cuda.runtime import CudaRunner, Specializing
from gradc.backends.target import Lowered

OPTIONS = ("update_in_place", "keep_on_device", "runtime", "sums", "device", "cxx", "cache_dir")


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/gradc`` or ``~/.cache/gradc``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gradc")


def _names(option: str, value: Any) -> None:
    if not isinstance(value, Collection) or isinstance(value, str) or not all(
            isinstance(k, str) for k in value):
        raise GradcError(f"cuda target: {option}: expected a collection of output names, got "
                         f"{value!r}")


class CudaTarget:
    """The ``"cuda"`` target (see the module docstring)."""

    name: str = "cuda"
    exact: bool = True
    artifact_kind: str | None = "CUDA source"

    def lowerings(self) -> frozenset[str]:
        """The ops with a CUDA kernel (constants and fused groups are the program's own)."""
        return frozenset(EMITTERS) | frozenset(SPECIAL)

    def artifact(self, graph: Graph, shapes: Mapping[str, int]) -> str:
        """The CUDA source; neither NVRTC nor a GPU is needed to write it."""
        return generate(graph, shapes).source

    def lower(self, graph: Graph, shapes: Mapping[str, int],
              update_in_place: Mapping[str, str] | None = None,
              keep_on_device: Collection[str] = (), runtime: str = "device",
              sums: str = "canonical", device: int = 0, cxx: str | None = None,
              cache_dir: str | None = None, **options: Any) -> Lowered:
        """Generate, compile (or reuse) and load the program of a verified graph."""
        if options:
            name = sorted(options)[0]
            raise GradcError(f"cuda target: {name}: expected one of {', '.join(OPTIONS)}, got "
                             f"an unknown option {name}={options[name]!r}")
        if runtime not in ("device", "host"):
            raise GradcError(f"cuda target: runtime: expected 'device' or 'host', got "
                             f"{runtime!r}")
        if not isinstance(sums, str) or sums not in SUMS:
            raise GradcError(f"cuda target: sums: expected 'canonical' or 'split', got "
                             f"{sums!r}")
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:
            raise GradcError(f"cuda target: device: expected a GPU ordinal >= 0, got {device!r}")
        if update_in_place is not None and (
                not isinstance(update_in_place, Mapping)
                or not all(isinstance(k, str) and isinstance(v, str)
                           for k, v in update_in_place.items())):
            raise GradcError("cuda target: update_in_place: expected a mapping of output names "
                             f"to input names, got {update_in_place!r}")
        _names("keep_on_device", keep_on_device)
        for name, v in (("cxx", cxx), ("cache_dir", cache_dir)):
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise GradcError(f"cuda target: {name}: expected a string or None, got "
                                 f"{type(v).__name__}")
        cache = str(cache_dir) if cache_dir is not None else default_cache_dir()
        host = runtime == "host"
        if host:
            driver: Any = HostDriver(str(cxx) if cxx else os.environ.get("CXX", "c++"), cache)
        else:  # the package, the driver and the GPU are checked before anything is generated
            driver = rt.DeviceDriver(lambda src, arch: build.compile_cubin(src, arch, cache),
                                     device)
        free = unbound_symbols(graph, shapes)

        def make(bound: dict[str, int]) -> CudaRunner:
            program = generate(graph, {**shapes, **bound}, update_in_place, sums)
            return CudaRunner(program, driver, keep_on_device, on_device=not host)

        if free:
            runner: Any = Specializing(free, make)
            program = None
        else:
            runner = make({})
            program = runner.program
        # exact: every sum canonical (a symbolic graph in split mode may split some)
        exact = not program.reordered if program is not None else sums == "canonical"
        return Lowered(runner, source=program.source if program else None, contiguous=True,
                       in_place=_granted(program),
                       foreign=lambda a: describe(a, host), exact=exact, own=(DeviceArray,))


def _granted(program: Program | None) -> dict[str, str]:
    """The in-place pairs granted (none known for a graph with symbols: they are decided per
    program, on the call that binds them)."""
    if program is None:
        return {}
    return {program.outputs[j].name: program.inputs[i].name
            for j, i in program.in_place.items()}


TARGET = CudaTarget()
