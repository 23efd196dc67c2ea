"""Shared helpers of the element-wise math tests (SPEC-training.md §16): run on every target,
compare bit for bit or within §9.5's ulps."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

import gradc

from helpers import compile_for, cuda_targets

# The cuda target runs here through the host harness ("cuda-host"), and on the GPU with
# GRADC_TEST_CUDA=1 (helpers.cuda_targets).
TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
TRANSCENDENTAL = {"exp", "log", "pow", "sigmoid", "tanh"}


def graph(fn: Callable[..., dict[str, Any]], inputs: Mapping[str, tuple[str, tuple]],
          name: str = "m") -> gradc.Graph:
    """A graph with the given inputs whose outputs are ``fn(**values)`` (a dict by name)."""
    g = gradc.Graph(name)
    vals = {k: g.input(k, d, s) for k, (d, s) in inputs.items()}
    for k, v in fn(**vals).items():
        g.output(v, k)
    return g


def run_targets(g: gradc.Graph, feeds: Mapping[str, np.ndarray], passes: Any = None,
                targets: tuple[str, ...] = TARGETS) -> dict[str, dict[str, np.ndarray]]:
    """Every target's outputs of ``g`` on ``feeds``."""
    return {t: compile_for(g, t, passes=passes)(**feeds) for t in targets}


def ulps(dtype: np.dtype) -> int:
    """§9.5's recommended tolerance of a transcendental op, in ulps of the dtype."""
    return 1 if np.dtype(dtype) == np.float16 else 4


def assert_ulps(got: np.ndarray, want: np.ndarray, k: int) -> None:
    """NaN matches NaN, infinities match exactly, other values within ``k`` ulps of ``want``."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"NaN positions differ\n{got}\n{want}"
    inf = np.isinf(want)
    assert (got[inf] == want[inf]).all() and not np.isinf(got[~inf & ~nan]).any(), (got, want)
    fin = ~nan & ~inf
    w = want[fin].astype(np.float64)
    tol = k * np.spacing(np.abs(want[fin])).astype(np.float64)
    err = np.abs(got[fin].astype(np.float64) - w)
    assert (err <= tol).all(), f"beyond {k} ulps:\n got={got[fin][err > tol]}\nwant={w[err > tol]}"


def bits(a: np.ndarray) -> bytes:
    """The raw bytes with the dtype and shape: equal means bit-for-bit equal."""
    a = np.asarray(a)
    return a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()
