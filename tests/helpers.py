"""Small helpers shared by the tests: run one op on arrays, compare bit for bit."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import gradc


def graph_of(fn: Callable[..., Any], *arrays: np.ndarray, name: str = "t") -> gradc.Graph:
    """A graph with one input per array (x0, x1, ...) whose outputs are ``fn(*values)``."""
    g = gradc.Graph(name)
    vals = [g.input(f"x{i}", a.dtype.name, a.shape) for i, a in enumerate(arrays)]
    out = fn(*vals)
    outs = out if isinstance(out, tuple) else (out,)
    for i, v in enumerate(outs):
        g.output(v, f"y{i}")
    return g


def cuda_targets() -> tuple[str, ...]:
    """The cuda target's modes that the target-parametrized tests add to their targets:
    ``"cuda-host"`` (the kernels compiled as C++ and run on the CPU by the host harness)
    wherever a C++ compiler is, and ``"cuda"`` (the GPU) when ``GRADC_TEST_CUDA=1`` (both) or
    ``GRADC_TEST_CUDA=only`` (the GPU alone; ``benchmarks/gpu_smoke.sh`` sets it)."""
    import os
    import shutil

    gpu = os.environ.get("GRADC_TEST_CUDA", "")
    cxx = os.environ.get("CXX", "c++").split()
    modes = ("cuda-host",) if cxx and shutil.which(cxx[0]) and gpu != "only" else ()
    return modes + (("cuda",) if gpu in ("1", "only") else ())


def compile_for(graph: gradc.Graph, target: str, **opts: Any) -> gradc.Executable:
    """``gradc.compile`` for a test target name: a target of ``TARGETS``, or ``"cuda-host"``
    (the cuda target with ``runtime="host"``). On a cuda mode, a graph with an op that the cuda
    target does not lower yet (``PENDING`` in test_completeness.py) skips the test."""
    if target.startswith("cuda"):
        from gradc.backends import TARGETS

        missing = sorted({n.op for n in graph.nodes} - set(TARGETS["cuda"].lowerings())
                         - {"constant", "fused"})
        if missing:
            import pytest

            pytest.skip(f"the cuda target does not lower {', '.join(missing)} yet")
    if target == "cuda-host":
        return gradc.compile(graph, target="cuda", runtime="host", **opts)
    return gradc.compile(graph, target=target, **opts)


def run(fn: Callable[..., Any], *arrays: np.ndarray, target: str = "reference",
        **opts: Any) -> list[np.ndarray]:
    """Build a graph around ``fn``, compile it for ``target`` and run it on ``arrays``."""
    g = graph_of(fn, *arrays)
    ex = compile_for(g, target, passes=None, **opts)
    out = ex(**{f"x{i}": a for i, a in enumerate(arrays)})
    return [out[f"y{i}"] for i in range(len(out))]


def assert_bits(got: np.ndarray, want: np.ndarray, nan_payload: bool = True) -> None:
    """Bit-for-bit equality (distinguishes -0.0 from +0.0 and NaN payloads).

    ``nan_payload=False`` is for summing ops, where a NaN produced by arithmetic (inf - inf) has
    no specified payload (SPEC.md §1.6: a NaN must match a NaN); every other bit must match.
    """
    got, want = np.asarray(got), np.asarray(want)
    if not nan_payload and got.dtype.kind == "f":
        assert (np.isnan(got) == np.isnan(want)).all(), f"NaN positions differ\n{got}\n{want}"
        got, want = np.where(np.isnan(got), 0, got), np.where(np.isnan(want), 0, want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind == "f":
        u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        bad = got.view(u) != want.view(u)
        if bad.any():
            i = np.argwhere(bad)[0]
            raise AssertionError(f"differ at {tuple(i)}: got {got[tuple(i)]!r}, "
                                 f"want {want[tuple(i)]!r}\n got={got}\nwant={want}")
    else:
        np.testing.assert_array_equal(got, want)


def tolerance(dtype: np.dtype, s: np.ndarray, n: int) -> np.ndarray:
    """SPEC.md §1.6 tolerance for summing ops: S = op on |data| in float64, n terms."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return 2.0 ** -9 * s + 2.0 ** -24
    if dtype == np.float32:
        return (n + 1) * 2.0 ** -23 * s + 2.0 ** -126
    if dtype == np.float64:
        return (n + 1) * 2.0 ** -52 * s + 2.0 ** -1022
    return np.ones_like(s)


def f32(*v: Any) -> np.ndarray:
    return np.array(v, np.float32)


def assert_c_compiles_cleanly(graph: gradc.Graph, folder: Any) -> None:
    """The graph's generated C compiles with -Wall -Wextra -Werror (syntax only)."""
    import os
    import subprocess

    from gradc.backends.c.build import toolchain
    from gradc.backends.c.emit import generate

    cc = os.environ.get("CC", "cc")
    omp = "-fopenmp" if toolchain(cc, str(folder)).openmp else "-Wno-unknown-pragmas"
    src = os.path.join(str(folder), f"werror_{len(os.listdir(str(folder)))}.c")
    with open(src, "w", encoding="utf-8") as f:
        f.write(generate(graph).source)
    r = subprocess.run([*cc.split(), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", omp,
                        "-fsyntax-only", src], capture_output=True, text=True)
    assert r.returncode == 0, f"{graph.name}: {r.stderr[-2000:]}"


def with_specials(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Normal random values with a NaN, +inf, -inf and -0.0 at four random places (at least
    four elements)."""
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    flat[rng.choice(flat.size, 4, replace=False)] = np.array([np.nan, np.inf, -np.inf, -0.0],
                                                             dtype)
    return a
