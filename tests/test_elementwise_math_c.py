"""The C (and NumPy, ONNX) lowering of SPEC-training.md §16 on random bit patterns: exact ops
bit for bit with the reference (NaN payloads, -0.0, subnormals, infinities), transcendental ops
within §9.5's ulps; and the generated C free of -Wall -Wextra warnings for every dtype."""

from __future__ import annotations


import numpy as np
import pytest

from gradc import ops
from gradc.ir.types import FLOATS, NUMERIC
from helpers import assert_bits, assert_c_compiles_cleanly
from test_elementwise_math_support import TARGETS, assert_ulps, graph, run_targets

EXACT_FLOAT = {"div": ops.div, "sqrt": lambda a, b: ops.sqrt(a),
               "lr": lambda a, b: ops.leaky_relu(a, -0.75)}
TRANSCENDENTAL = {"exp": lambda a, b: ops.exp(a), "log": lambda a, b: ops.log(a),
                  "pow": lambda a, b: ops.pow(b, -2.5), "sig": lambda a, b: ops.sigmoid(b),
                  "tanh": lambda a, b: ops.tanh(a)}
SELECT = {"mx": ops.maximum, "mn": ops.minimum, "gt": ops.greater, "lt": ops.less,
          "eq": ops.equal, "ge": ops.greater_equal, "le": ops.less_equal}


def math_graph(dtype: str, fused: bool = False):
    """Every §16 op the dtype takes, on a (N, 4) and a (4,) operand."""
    is_float = np.dtype(dtype).kind == "f"

    def fn(a, b, c):
        out = {k: f(a, b) for k, f in SELECT.items()}
        out["w"] = ops.where(c, a, b)
        if is_float:
            out.update({k: f(a, b) for k, f in {**EXACT_FLOAT, **TRANSCENDENTAL}.items()})
        if fused:  # one chain: comparisons feeding where feeding arithmetic
            out["chain"] = ops.where(ops.less(a, b), ops.maximum(a, b), ops.minimum(b, a))
        return out
    return graph(fn, {"a": (dtype, ("N", 4)), "b": (dtype, (4,)), "c": ("bool", ("N", 1))},
                 name=f"math_{dtype}")


def random_bits(rng: np.random.Generator, dtype: str, shape: tuple) -> np.ndarray:
    """Random bit patterns (every NaN payload, subnormal, inf), with a few ties and zeros."""
    d = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * d.itemsize, dtype=np.uint8)
    a = raw.view(d).reshape(shape).copy()
    if d.kind == "f":
        flat = a.reshape(-1)
        flat[::5] = np.array([0.0, -0.0, 1.0, -np.inf, 0.5], d)[: len(flat[::5])]
    return a


@pytest.mark.parametrize("dtype", [d.value for d in NUMERIC])
def test_every_target_matches_the_reference_on_random_bits(dtype):
    rng = np.random.default_rng(sum(map(ord, dtype)))
    g = math_graph(dtype, fused=True)
    feeds = {"a": random_bits(rng, dtype, (3, 4)), "b": random_bits(rng, dtype, (4,)),
             "c": rng.random((3, 1)) < 0.5}
    if np.dtype(dtype).kind == "f":  # zero ties of opposite signs: lhs is taken
        feeds["b"][:2] = np.array([0.0, -0.0], dtype)
        feeds["a"][1, :2] = np.array([-0.0, 0.0], dtype)
    feeds["a"][0] = feeds["b"]  # ties
    outs = run_targets(g, feeds, passes="default")
    ref = outs["reference"]
    for t in TARGETS[1:]:
        for k in ref:
            if k in TRANSCENDENTAL:
                k_ulps = 1 if dtype == "float16" else (8 if (t, k) == ("onnx", "tanh") else 4)
                assert_ulps(outs[t][k], ref[k], k_ulps)
            elif k in EXACT_FLOAT and (t, dtype) == ("onnx", "float16"):
                # a NaN they compute is arithmetic, not a copy; onnxruntime's float32 -> float16
                # Cast rewrites payloads (0xffec2000 -> 0xfe00), and ONNX has no bitcast
                assert_bits(outs[t][k], ref[k], nan_payload=False)
            else:  # NaN payloads included
                assert_bits(outs[t][k], ref[k])


def test_generated_c_compiles_without_warnings(tmp_path):
    for d in [x.value for x in FLOATS] + ["int8", "uint8", "int64", "uint64"]:
        assert_c_compiles_cleanly(math_graph(d, fused=d == "float16"), tmp_path)
