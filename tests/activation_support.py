"""Shared helpers of the activation tests (SPEC-transformers §25): §25.4's tolerance, and the
targets' outputs of a graph checked against the reference."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import gradc
from helpers import assert_bits, compile_for
from test_elementwise_math_support import TARGETS

ABS_EPS = {np.dtype(np.float16): 2.0 ** -23, np.dtype(np.float32): 2.0 ** -23,
           np.dtype(np.float64): 2.0 ** -52}


def bound_25_4(want: np.ndarray, x: np.ndarray | None = None, dy: np.ndarray | None = None
               ) -> np.ndarray:
    """§25.4's allowed error per element, as float64: k ulps of the reference's value (1 for
    float16, 4 otherwise), plus ``4 eps (1 + |x|)`` (times ``|dy|`` for gelu_grad) when ``x``
    is given (gelu, gelu_grad); erf, sin and cos have no absolute term."""
    want = np.asarray(want)
    k = 1 if want.dtype == np.float16 else 4
    with np.errstate(over="ignore", invalid="ignore"):  # NaN and inf elements: checked apart
        tol = k * np.spacing(np.abs(want)).astype(np.float64)
    if x is not None:
        with np.errstate(invalid="ignore"):
            term = 4 * ABS_EPS[want.dtype] * (1 + np.abs(np.asarray(x, np.float64)))
            if dy is not None:
                term = term * np.abs(np.asarray(dy, np.float64))
            tol = tol + term
    return tol


def assert_25_4(got: np.ndarray, want: np.ndarray, x: np.ndarray | None = None,
                dy: np.ndarray | None = None, what: str = "") -> float:
    """NaN matches NaN and infinities match exactly; other elements within ``bound_25_4``.
    Returns the largest error as a fraction of the bound (for reports)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"{what}: NaN positions differ\n{got}\n{want}"
    inf = np.isinf(want)
    assert (got[inf] == want[inf]).all(), f"{what}: infinities differ\n{got}\n{want}"
    fin = ~nan & ~inf
    assert not np.isinf(got[fin]).any(), f"{what}: an infinity where the reference is finite"
    tol = np.broadcast_to(bound_25_4(want, x, dy), want.shape)[fin]
    err = np.abs(got[fin].astype(np.float64) - want[fin].astype(np.float64))
    bad = err > tol
    assert not bad.any(), (f"{what}: beyond §25.4 at x={np.broadcast_to(x, want.shape)[fin][bad]}"
                           f"\n got={got[fin][bad]}\nwant={want[fin][bad]}" if x is not None else
                           f"{what}: beyond §25.4\n got={got[fin][bad]}\nwant={want[fin][bad]}")
    return float(np.max(err / tol, initial=0.0))


def outputs(g: gradc.Graph, feeds: Mapping[str, np.ndarray], passes: Any = "default",
            targets: tuple[str, ...] = TARGETS) -> dict[str, dict[str, np.ndarray]]:
    """Every target's outputs (the default passes, as users compile)."""
    opts = {} if passes == "default" else {"passes": passes}
    return {t: compile_for(g, t, **opts)(**feeds) for t in targets}


def assert_targets(outs: dict[str, dict[str, np.ndarray]], key: str, want: np.ndarray,
                   x: np.ndarray | None = None, dy: np.ndarray | None = None,
                   exact: np.ndarray | None = None, tolerant: bool = True) -> None:
    """The reference gives ``want``'s bits (an arithmetic NaN may have any payload); numpy the
    reference's bits; c, onnx and the cuda modes within §25.4 of ``want`` (``tolerant``) or its
    bits, and every target the exact bits at the positions of ``exact`` (the spec's dyadic
    values)."""
    want = np.asarray(want)
    assert_bits(outs["reference"][key], want, nan_payload=False)
    assert_bits(outs["numpy"][key], outs["reference"][key], nan_payload=False)
    for t in ("c", "onnx") + tuple(t for t in outs if t.startswith("cuda")):
        got = outs[t][key]
        if tolerant:
            assert_25_4(got, want, x, dy, what=f"{t} {key}")
        else:
            assert_bits(got, want, nan_payload=False)
        if exact is not None:
            sel = np.broadcast_to(exact, want.shape)
            assert_bits(got[sel], want[sel], nan_payload=False)
