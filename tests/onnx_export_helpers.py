"""Helpers of the "onnx" target tests: run on both targets, compare, random data."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import settings

import gradc
from helpers import assert_bits, tolerance

nan, inf = np.nan, np.inf
FLOATS = ["float64", "float32", "float16"]
INTS = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"]
# GRADC_ONNX_EXAMPLES raises the example count for a longer local search
PROFILE = settings(max_examples=int(os.environ.get("GRADC_ONNX_EXAMPLES", "25")), deadline=None)
NAN_BITS = {"float32": (np.uint32, [0x7F800001, 0xFFC12345, 0x7FC00000]),
            "float16": (np.uint16, [0x7C01, 0xFE45, 0x7E00]),
            "float64": (np.uint64, [0x7FF0000000000001, 0xFFF8000012345678, 0x7FF8000000000000])}


def build(fn: Callable[..., Any], arrays: list[np.ndarray], symbolic: bool = False) -> gradc.Graph:
    """A graph with inputs x0, x1, ... (axis 0 symbolic "N" if asked) and outputs y0, y1, ..."""
    g = gradc.Graph("t")
    vals = [g.input(f"x{i}", a.dtype.name,
                    (("N",) + a.shape[1:]) if symbolic and a.ndim else a.shape)
            for i, a in enumerate(arrays)]
    out = fn(*vals)
    for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
        g.output(v, f"y{i}")
    return g


def both(g: gradc.Graph, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnx results, reference results) in output order; the model is checked first."""
    model = gradc.to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == [v.name for v in g.inputs]
    assert [o.name for o in model.graph.output] == [v.name for v in g.outputs]
    feeds = {v.name: a for v, a in zip(g.inputs, arrays)}
    got = gradc.compile(g, target="onnx", passes=None)(**feeds)
    ref = gradc.compile(g, target="reference", passes=None)(**feeds)
    # the model as a user runs it: a stock session with every optimization (NoopElimination too)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    raw = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for v, r in zip(g.outputs, raw.run(None, feeds)):
        assert_bits(r, got[v.name], nan_payload=False)  # x * 1.0 may be dropped there
    return [got[v.name] for v in g.outputs], [ref[v.name] for v in g.outputs]


def exact(fn: Callable[..., Any], *arrays: np.ndarray, symbolic: bool = False) -> list[np.ndarray]:
    """Run fn on both targets and require bit-identical results; returns them."""
    got, ref = both(build(fn, list(arrays), symbolic), list(arrays))
    for a, b in zip(got, ref):
        assert_bits(a, b)
    return got


def assert_close(got: np.ndarray, ref: np.ndarray, s: np.ndarray, n: int) -> None:
    """SPEC §1.6: |got - ref| <= tol(S, n); NaN matches NaN, infinities match exactly."""
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.shape)
    if got.dtype.kind != "f":
        assert (np.abs(got.astype(np.int64) - ref.astype(np.int64)) <= 1).all(), (got, ref)
        return
    g, r = got.astype(np.float64), ref.astype(np.float64)
    assert (np.isnan(g) == np.isnan(r)).all(), f"NaN positions differ\n{got}\n{ref}"
    inf_ = np.isinf(g) | np.isinf(r)
    assert (g[inf_] == r[inf_]).all(), f"infinities differ\n{got}\n{ref}"
    fin = ~(np.isnan(r) | inf_)
    tol = tolerance(got.dtype, np.broadcast_to(s, r.shape).astype(np.float64), n)
    bad = fin & ~(np.abs(g - r) <= tol)
    assert not bad.any(), f"beyond tolerance at {np.argwhere(bad)[:3]}\n{got}\n{ref}"


def values(rng: np.random.Generator, dtype: str, shape: tuple, special: bool = True,
           ties: bool = False) -> np.ndarray:
    """Random data: small integers (ties), and for floats -0.0, +-inf and NaNs with payloads."""
    dt = np.dtype(dtype)
    if dt.kind != "f":
        info = np.iinfo(dt)
        a = rng.integers(max(info.min, -4 if ties else -100), min(info.max, 4 if ties else 100),
                         shape, endpoint=True).astype(dt)
        edge = rng.random(shape) < 0.1
        return np.where(edge, np.where(rng.random(shape) < 0.5, info.min, info.max), a).astype(dt)
    a = (rng.integers(-4, 5, shape) if ties else rng.normal(0, 4, shape)).astype(dt)
    if special:
        u, pays = NAN_BITS[dtype]
        pool = np.concatenate([np.array([-0.0, 0.0, inf, -inf], dt), np.array(pays, u).view(dt)])
        pick = rng.random(shape) < 0.15
        a = np.where(pick, pool[rng.integers(0, len(pool), shape)], a).astype(dt)
    return np.ascontiguousarray(a)


def f32(*v: Any) -> np.ndarray:
    return np.array(v, np.float32)


