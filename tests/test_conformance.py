"""Cross-framework conformance: one test per row of docs/conformance.md.

Each test first pins gradc's rule through the reference target with exact values, then records
what onnxruntime (always installed) and PyTorch (optional: ``pytest.importorskip`` inside the
test, after the gradc part) do on the same case, so the table stays true as those libraries change.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as oh
from onnx import numpy_helper as onh
from onnx import shape_inference

import gradc
from gradc import ops
from helpers import assert_bits, f32, run

nan = np.nan
F32_LOWEST = np.finfo(np.float32).min
F32_MAX = float(np.finfo(np.float32).max)


# ---------------------------------------------------------------- onnxruntime / ONNX helpers

def onnx_model(nodes: list[Any], inputs: dict[str, np.ndarray], consts: dict[str, Any],
               outputs: Sequence[str] = ("y",), opset: int = 18) -> onnx.ModelProto:
    """A model of ``nodes`` with typed inputs, constant initializers and untyped outputs."""
    vi = [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in inputs.items()]
    init = [onh.from_array(np.asarray(v), n) for n, v in consts.items()]
    outs = [oh.make_empty_tensor_value_info(o) for o in outputs]
    g = oh.make_graph(nodes, "conformance", vi, outs, init)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset),
                                           oh.make_opsetid("com.microsoft", 1)], ir_version=10)


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the shape-mismatch warnings are asserted through onnx instead
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_run(model: onnx.ModelProto, **feeds: np.ndarray) -> list[np.ndarray]:
    return ort_session(model).run(None, feeds)


def ort_op(op: str, x: np.ndarray, consts: Sequence[Any] = (), n_out: int = 1,
           **attrs: Any) -> list[np.ndarray]:
    """Run one ONNX op on input ``x`` with constant extra inputs (an empty name for None)."""
    names = [f"c{i}" if c is not None else "" for i, c in enumerate(consts)]
    cs = {f"c{i}": c for i, c in enumerate(consts) if c is not None}
    outs = [f"y{i}" for i in range(n_out)]
    node = oh.make_node(op, ["x", *names], outs, **attrs)
    return ort_run(onnx_model([node], {"x": x}, cs, outs), x=x)


def resize_model(x: np.ndarray, scales: Sequence[float] | None = None,
                 sizes: Sequence[int] | None = None, **attrs: Any) -> onnx.ModelProto:
    consts: dict[str, Any] = {"roi": np.zeros(0, np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        consts["scales"] = np.asarray(scales, np.float32)
        names.append("scales")
    else:
        consts["sizes"] = np.asarray(sizes, np.int64)
        names += ["", "sizes"]
    return onnx_model([oh.make_node("Resize", names, ["y"], **attrs)], {"x": x}, consts, opset=19)


def ort_resize(x: np.ndarray, **kw: Any) -> np.ndarray:
    return ort_run(resize_model(x, **kw), x=x)[0]


def onnx_inferred_shape(model: onnx.ModelProto) -> list[int]:
    out = shape_inference.infer_shapes(model).graph.output[0]
    return [d.dim_value for d in out.type.tensor_type.shape.dim]


def row(*v: float, dtype: Any = np.float32) -> np.ndarray:
    """A 1x1x1xW tensor, the 4-D form onnxruntime and PyTorch need for a 1-D case."""
    return np.array(v, dtype).reshape(1, 1, 1, -1)


# ---------------------------------------------------------------- ONNX Resize -> gradc (SPEC §7.5)

NEAREST = {"floor": ("decreasing", 0.0), "ceil": ("increasing", 0.0),
           "round_prefer_ceil": ("decreasing", -0.5), "round_prefer_floor": ("increasing", 0.5)}


def resample_1d(x: np.ndarray, n_out: int, mode: str, ctm: str, nearest_mode: str = "floor",
                scale: float | None = None) -> np.ndarray:
    """gradc ``resample`` with the fields that SPEC §7.5 maps the ONNX attributes to."""
    n = x.shape[0]
    s = float(np.float32(n_out / n)) if scale is None else scale
    if ctm == "half_pixel":
        sc, ipo, opo = s, 0.5, -0.5
    elif ctm == "asymmetric":
        sc, ipo, opo = s, 0.0, 0.0
    elif ctm == "pytorch_half_pixel":
        sc, ipo, opo = (F32_MAX, 0.0, 0.0) if n_out == 1 else (s, 0.5, -0.5)
    else:  # align_corners
        sc, ipo, opo = (F32_MAX if 1 in (n, n_out) else (n_out - 1) / (n - 1)), 0.0, 0.0
    rd = "decreasing"
    if mode == "nearest":
        rd, shift = NEAREST[nearest_mode]
        ipo += shift
    return run(lambda a: ops.resample(a, (sc,), mode, rd, (ipo,), (opo,), (n_out,)), x)[0]


# ---------------------------------------------------------------- rows

def test_relu_forward_negative_zero_and_nan():
    x = f32(-0.0, 0.0, nan, 2.0, -1.0)
    assert_bits(run(ops.relu, x)[0], f32(0.0, 0.0, 0.0, 2.0, 0.0))  # every 0 is +0.0
    (y,) = ort_op("Relu", x)
    assert_bits(y, f32(-0.0, 0.0, nan, 2.0, 0.0))  # -0.0 kept, NaN propagated
    torch = pytest.importorskip("torch")
    assert_bits(torch.relu(torch.from_numpy(x)).numpy(), f32(-0.0, 0.0, nan, 2.0, 0.0))


def test_relu_grad_at_zero_and_nan():
    x, dy = f32(0.0, -0.0, nan, 2.0, -1.0), f32(-1, -2, -3, -4, -5)
    assert_bits(run(ops.relu_grad, x, dy)[0], f32(0.0, 0.0, 0.0, -4, 0.0))  # +0.0, whatever dY
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy()).requires_grad_()
    torch.relu(t).backward(torch.from_numpy(dy))
    assert_bits(t.grad.numpy(), f32(0.0, 0.0, -3, -4, 0.0))  # NaN x passes dY


@pytest.mark.parametrize("op", ["ReluGrad", "MaxPoolGrad", "SliceGrad", "ResizeGrad"])
def test_onnxruntime_cpu_has_no_training_grad_ops(op):
    dy = f32(1, 2)
    node = oh.make_node(op, ["dy", "x"], ["y"], domain="com.microsoft")
    with pytest.raises(Exception, match="not a registered function/op"):
        ort_session(onnx_model([node], {"dy": dy, "x": dy}, {}))


def test_clip_forward_nan_and_min_above_max():
    x = f32(nan, -0.0, 0.5, 3.0)
    assert_bits(run(lambda a: ops.clip(a, 0, 1), x)[0], f32(1, -0.0, 0.5, 1))  # NaN -> max
    x2 = f32(0, 1.5, 3, nan)
    assert_bits(run(lambda a: ops.clip(a, 2, 1), x2)[0], f32(2, 2, 2, 2))  # min > max -> min
    assert_bits(ort_op("Clip", x, (np.float32(0), np.float32(1)))[0], f32(nan, -0.0, 0.5, 1))
    assert_bits(ort_op("Clip", x2, (np.float32(2), np.float32(1)))[0], f32(1, 1, 1, nan))
    i8 = np.array([0, 1, 3, 5], np.int8)
    assert_bits(ort_op("Clip", i8, (np.int8(2), np.int8(1)))[0], np.full(4, 1, np.int8))
    torch = pytest.importorskip("torch")
    assert_bits(torch.clamp(torch.from_numpy(x), 0.0, 1.0).numpy(), f32(nan, -0.0, 0.5, 1))
    assert_bits(torch.clamp(torch.from_numpy(x2), 2.0, 1.0).numpy(), f32(1, 1, 1, nan))


def ort_clip_grad(x: np.ndarray, dy: np.ndarray, mn: float, mx: float) -> np.ndarray:
    """The subgraph ORT's gradient builder emits for Clip (GetClipGradient), run in ORT."""
    nodes = [oh.make_node("GreaterOrEqual", ["x", "mn"], ["a"]),
             oh.make_node("LessOrEqual", ["x", "mx"], ["b"]),
             oh.make_node("And", ["a", "b"], ["m"]),
             oh.make_node("Cast", ["m"], ["mf"], to=onnx.TensorProto.FLOAT),
             oh.make_node("Mul", ["dy", "mf"], ["y"])]
    consts = {"mn": np.float32(mn), "mx": np.float32(mx)}
    return ort_run(onnx_model(nodes, {"x": x, "dy": dy}, consts), x=x, dy=dy)[0]


def test_clip_grad_bounds_nan_and_min_above_max():
    x, dy = f32(-1, 0, 0.5, 1, 2, nan), f32(1, 2, 3, 4, 5, 6)
    x2, dy2 = f32(0, 1.5, 3, nan), f32(1, 2, 3, 4)
    cg = lambda mn, mx: (lambda a, b: ops.clip_grad(a, b, mn, mx))  # noqa: E731
    assert_bits(run(cg(0, 1), x, dy)[0], f32(0, 0, 3, 0, 0, 6))  # bounds exclusive, NaN passes
    assert_bits(run(cg(0, 1), x, -dy)[0], f32(0, 0, -3, 0, 0, -6))  # zeros are +0.0
    assert_bits(run(cg(2, 1), x2, dy2)[0], f32(0, 0, 0, 4))
    assert_bits(ort_clip_grad(x, dy, 0, 1), f32(0, 2, 3, 4, 0, 0))  # bounds inclusive, NaN -> 0
    assert_bits(ort_clip_grad(x, -dy, 0, 1), f32(-0.0, -2, -3, -4, -0.0, -0.0))  # 0 * dY
    inf = np.full(6, np.inf, np.float32)
    assert_bits(ort_clip_grad(x, inf, 0, 1), f32(nan, inf[0], inf[0], inf[0], nan, nan),
                nan_payload=False)  # 0 * inf
    assert_bits(ort_clip_grad(x2, dy2, 2, 1), f32(0, 0, 0, 0))
    torch = pytest.importorskip("torch")

    def tgrad(f, xs, dys):
        t = torch.from_numpy(xs.copy()).requires_grad_()
        f(t).backward(torch.from_numpy(dys))
        return t.grad.numpy()

    assert_bits(tgrad(lambda t: torch.clamp(t, 0.0, 1.0), x, dy), f32(0, 2, 3, 4, 0, 0))
    assert_bits(tgrad(lambda t: torch.clamp(t, 2.0, 1.0), x2, dy2), f32(0, 0, 0, 0))
    hardtanh = torch.nn.functional.hardtanh
    assert_bits(tgrad(lambda t: hardtanh(t, 0.0, 1.0), x, dy), f32(0, 0, 3, 0, 0, 6))
    with pytest.raises(ValueError):
        hardtanh(torch.zeros(1), 2.0, 1.0)


def test_max_pooling_tie_lowest_index():
    x = f32(1, 3, 3, 2, 3, 0, 1, 3).reshape(1, 1, 2, 4)
    y, i = run(lambda a: ops.max_pooling(a, (2, 2), (2, 2), output_indices=True), x)
    assert_bits(y, f32(3, 3).reshape(1, 1, 1, 2))
    assert_bits(i, np.array([1, 2], np.int64).reshape(1, 1, 1, 2))
    dy = f32(10, 20).reshape(1, 1, 1, 2)
    dx = run(lambda a, b: ops.max_pooling_grad(a, b, (2, 2), (2, 2)), x, dy)[0]
    assert_bits(dx, f32(0, 10, 20, 0, 0, 0, 0, 0).reshape(1, 1, 2, 4))
    oy, oi = ort_op("MaxPool", x, n_out=2, kernel_shape=[2, 2], strides=[2, 2])
    assert_bits(oy, y)
    assert_bits(oi, i)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy()).requires_grad_()
    ty, ti = torch.nn.functional.max_pool2d(t, 2, 2, return_indices=True)
    ty.backward(torch.from_numpy(dy))
    assert ti.flatten().tolist() == [1, 2]  # per-plane indices; N = C = 1 here
    assert_bits(t.grad.numpy(), dx)


def test_max_pooling_window_in_padding():
    x = f32(5, 6, 7).reshape(1, 1, 1, 3)  # T-MP-7: stride-2 windows, start padding 2
    kw = dict(strides=(1, 2), start_padding=(0, 2), end_padding=(0, 0))
    y, i = run(lambda a: ops.max_pooling(a, (1, 2), output_indices=True, **kw), x)
    assert_bits(y, f32(-np.inf, 6).reshape(1, 1, 1, 2))
    assert_bits(i, np.array([0, 1], np.int64).reshape(1, 1, 1, 2))
    dy = f32(10, 20).reshape(1, 1, 1, 2)
    dx = run(lambda a, b: ops.max_pooling_grad(a, b, (1, 2), **kw), x, dy)
    assert_bits(dx[0], f32(0, 20, 0).reshape(1, 1, 1, 3))
    # The form ORT and PyTorch accept: dilation 3 puts both taps of the only window in padding.
    x2 = f32(5, 6).reshape(1, 1, 1, 2)
    kw2 = dict(start_padding=(0, 1), end_padding=(0, 1), dilations=(1, 3))
    y, i = run(lambda a: ops.max_pooling(a, (1, 2), output_indices=True, **kw2), x2)
    assert_bits(y, f32(-np.inf).reshape(1, 1, 1, 1))
    assert_bits(i, np.zeros((1, 1, 1, 1), np.int64))
    dx = run(lambda a, b: ops.max_pooling_grad(a, b, (1, 2), **kw2), x2, f32(7).reshape(1, 1, 1, 1))
    assert_bits(dx[0], f32(0, 0).reshape(1, 1, 1, 2))
    with pytest.raises(Exception, match="Pad should be smaller than kernel"):
        ort_op("MaxPool", x, kernel_shape=[1, 2], strides=[1, 2], pads=[0, 2, 0, 0])
    oy, oi = ort_op("MaxPool", x2, n_out=2, kernel_shape=[1, 2], dilations=[1, 3],
                    pads=[0, 1, 0, 1])
    assert_bits(oy, f32(F32_LOWEST).reshape(1, 1, 1, 1))  # lowest finite, not -inf
    assert oi.flatten().tolist() == [-3]  # a negative index
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        torch.nn.functional.max_pool2d(torch.from_numpy(x), (1, 2), (1, 2), padding=(0, 2))
    ty, ti = torch.nn.functional.max_pool2d(torch.from_numpy(x2), (1, 2), 1, padding=(0, 1),
                                            dilation=(1, 3), return_indices=True)
    assert_bits(ty.numpy(), f32(-np.inf).reshape(1, 1, 1, 1))
    assert ti.flatten().tolist() == [2]  # past the end of the 2-element row; backward not run


def test_max_pooling_nan_in_window():
    x = f32(nan, 1, nan, nan, 2, nan).reshape(1, 3, 1, 2)
    y, i = run(lambda a: ops.max_pooling(a, (1, 2), output_indices=True), x)
    assert_bits(y, f32(1, nan, 2).reshape(1, 3, 1, 1))  # NaN only when all candidates are NaN
    assert_bits(i, np.array([1, 2, 4], np.int64).reshape(1, 3, 1, 1))
    dy = f32(5, 6, 7).reshape(1, 3, 1, 1)
    dx = run(lambda a, b: ops.max_pooling_grad(a, b, (1, 2)), x, dy)[0]
    assert_bits(dx, f32(0, 5, 6, 0, 7, 0).reshape(1, 3, 1, 2))
    oy, oi = ort_op("MaxPool", x, n_out=2, kernel_shape=[1, 2])  # with Indices
    assert_bits(oy, f32(nan, nan, 2).reshape(1, 3, 1, 1))  # a NaN in the first tap sticks
    assert oi.flatten().tolist() == [0, 2, 4]
    (oy,) = ort_op("MaxPool", x, kernel_shape=[1, 2])  # without Indices (another kernel)
    assert_bits(oy, f32(1, F32_LOWEST, 2).reshape(1, 3, 1, 1))  # NaN ignored everywhere
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy()).requires_grad_()
    ty, ti = torch.nn.functional.max_pool2d(t, (1, 2), return_indices=True)
    ty.backward(torch.from_numpy(dy))
    assert_bits(ty.detach().numpy(), f32(nan, nan, nan).reshape(1, 3, 1, 1))  # any NaN wins
    assert ti.flatten().tolist() == [0, 1, 1]  # per-plane; the last NaN of [nan, nan]
    assert_bits(t.grad.numpy(), f32(5, 0, 0, 6, 0, 7).reshape(1, 3, 1, 2))


def ceil_size(n: int, w: int, s: int, b: int, e: int) -> int:
    """SPEC §7.4: ONNX ceil_mode size; no window may start in the end padding."""
    out = -(-(n + b + e - w) // s) + 1
    return out - 1 if (out - 1) * s >= n + b else out


CEIL_CASES = [(5, 3, 3, 1), (5, 1, 3, 0), (7, 2, 3, 1), (5, 2, 2, 0), (6, 3, 2, 1), (4, 1, 3, 0)]


def test_ceil_mode_output_size():
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 1, 5)
    assert ceil_size(5, 3, 3, 1, 1) == 2  # naive ceil gives 3: its window would start at pad
    kw = dict(strides=(1, 3), start_padding=(0, 1), end_padding=(0, 1))
    y, i = run(lambda a: ops.max_pooling(a, (1, 3), output_indices=True, output_sizes=(1, 2),
                                         **kw), x)
    assert_bits(y, f32(1, 4).reshape(1, 1, 1, 2))
    assert_bits(i, np.array([1, 4], np.int64).reshape(1, 1, 1, 2))
    for n, w, s, p in CEIL_CASES:
        xs = np.arange(n, dtype=np.float32).reshape(1, 1, 1, n)
        attrs = dict(kernel_shape=[1, w], strides=[1, s], pads=[0, p, 0, p], ceil_mode=1)
        assert ort_op("MaxPool", xs, **attrs)[0].shape[3] == ceil_size(n, w, s, p, p)
    node = oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 3], strides=[1, 3],
                        pads=[0, 1, 0, 1], ceil_mode=1)
    assert onnx_inferred_shape(onnx_model([node], {"x": x}, {})) == [1, 1, 1, 3]  # ONNX disagrees
    torch = pytest.importorskip("torch")
    for n, w, s, p in CEIL_CASES:
        xs = torch.arange(n, dtype=torch.float32).reshape(1, 1, 1, n)
        ty = torch.nn.functional.max_pool2d(xs, (1, w), (1, s), (0, p), ceil_mode=True)
        assert ty.shape[3] == ceil_size(n, w, s, p, p)


def test_resample_coordinate_modes():
    x = f32(1, 2, 3, 4)
    cases = [  # (ctm, output size, expected)
        ("half_pixel", 8, f32(1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4)),
        ("asymmetric", 8, f32(1, 1.5, 2, 2.5, 3, 3.5, 4, 4)),
        ("align_corners", 7, f32(1, 1.5, 2, 2.5, 3, 3.5, 4)),
        ("half_pixel", 1, f32(2.5)),
        ("pytorch_half_pixel", 1, f32(1)),
        ("align_corners", 1, f32(1)),
    ]
    for ctm, n_out, want in cases:
        assert_bits(resample_1d(x, n_out, "linear", ctm), want)
        got = ort_resize(row(*x), sizes=[1, 1, 1, n_out], mode="linear",
                         coordinate_transformation_mode=ctm)
        assert_bits(got.reshape(-1), want)
    for ctm in ("pytorch_half_pixel", "align_corners"):  # nearest, output size 1 -> x[0]
        assert_bits(resample_1d(x, 1, "nearest", ctm, "round_prefer_floor"), f32(1))
    third = resample_1d(x, 3, "linear", "half_pixel")  # 4 -> 3: not dyadic, still bit-equal
    assert_bits(ort_resize(row(*x), sizes=[1, 1, 1, 3], mode="linear").reshape(-1), third)
    torch = pytest.importorskip("torch")
    interp = torch.nn.functional.interpolate
    t = torch.from_numpy(x.reshape(1, 1, 4))
    for ctm, n_out, want in cases:
        if ctm in ("half_pixel", "align_corners"):
            ac = ctm == "align_corners"
            got = interp(t, size=n_out, mode="linear", align_corners=ac).numpy().reshape(-1)
            assert_bits(got, want)  # size 1 without align_corners: 2.5, the half_pixel centre
    got = interp(t, size=3, mode="linear", align_corners=False).numpy().reshape(-1)
    assert_bits(got, third + f32(0, 0, np.spacing(third[2])))  # one ulp above at [2]


def test_resample_nearest_rounding():
    x = f32(0, 1, 2, 3)  # T-RS-8: scale 2.5, half_pixel
    want = {"floor": f32(0, 0, 0, 0, 1, 1, 2, 2, 2, 3), "ceil": f32(0, 1, 1, 1, 2, 2, 3, 3, 3, 3),
            "round_prefer_floor": f32(0, 0, 0, 1, 1, 2, 2, 2, 3, 3),
            "round_prefer_ceil": f32(0, 0, 1, 1, 1, 2, 2, 3, 3, 3)}
    for nm, w in want.items():
        assert_bits(resample_1d(x, 10, "nearest", "half_pixel", nm, scale=2.5), w)
        got = ort_resize(row(*x), scales=[1, 1, 1, 2.5], mode="nearest", nearest_mode=nm)
        assert_bits(got.reshape(-1), w)
    x10 = np.arange(10, dtype=np.float32)  # downsampling separates the PyTorch modes
    asym_floor = resample_1d(x10, 4, "nearest", "asymmetric", "floor")
    hp_rpc = resample_1d(x10, 4, "nearest", "half_pixel", "round_prefer_ceil")
    assert_bits(asym_floor, f32(0, 2, 5, 7))
    assert_bits(hp_rpc, f32(1, 3, 6, 8))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x10.reshape(1, 1, 10))
    interp = torch.nn.functional.interpolate
    assert_bits(interp(t, size=4, mode="nearest").numpy().reshape(-1), asym_floor)
    assert_bits(interp(t, size=4, mode="nearest-exact").numpy().reshape(-1), hp_rpc)


def test_resample_default_output_size_float32():
    x = np.arange(10, dtype=np.float32)
    assert run(lambda a: ops.resample(a, (0.7,)), x)[0].shape == (7,)  # f32(10 * f32(0.7)) = 7
    m = resize_model(row(*x), scales=[1, 1, 1, 0.7])
    assert ort_run(m, x=row(*x))[0].shape == (1, 1, 1, 7)
    assert onnx_inferred_shape(m) == [1, 1, 1, 6]  # onnx shape inference: double arithmetic
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.reshape(1, 1, 10))
    interp = torch.nn.functional.interpolate
    assert interp(t, scale_factor=0.7).shape[2] == 7  # Python float 0.7, in double
    assert interp(t, scale_factor=float(np.float32(0.7))).shape[2] == 6


def test_resample_linear_edge_clamp():
    x = f32(1, 2, 3, 4)  # T-RS-4: the coordinate is clamped to [0, n-1], edges repeat
    up = f32(1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4)
    assert_bits(resample_1d(x, 8, "linear", "half_pixel"), up)
    rg = lambda d: run(lambda a: ops.resample_grad(a, (4,), (2.0,), "linear"), d)[0]  # noqa: E731
    assert_bits(rg(np.ones(8, np.float32)), f32(2, 2, 2, 2))
    assert_bits(rg(np.arange(1, 9, dtype=np.float32)), f32(3.25, 7, 11, 14.75))
    got = ort_resize(row(*x), scales=[1, 1, 1, 2], mode="linear")
    assert_bits(got.reshape(-1), up)
    got = ort_resize(row(*x), scales=[1, 1, 1, 2], mode="linear",
                     coordinate_transformation_mode="asymmetric")
    assert_bits(got.reshape(-1), f32(1, 1.5, 2, 2.5, 3, 3.5, 4, 4))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.reshape(1, 1, 4).copy()).requires_grad_()
    ty = torch.nn.functional.interpolate(t, size=8, mode="linear", align_corners=False)
    assert_bits(ty.detach().numpy().reshape(-1), up)
    ty.backward(torch.arange(1, 9, dtype=torch.float32).reshape(1, 1, 8))
    assert_bits(t.grad.numpy().reshape(-1), f32(3.25, 7, 11, 14.75))


def test_resample_linear_int8_uint8_rounding():
    u8 = np.array([0, 1, 2, 3], np.uint8)  # half_pixel, 4 -> 2: values at exact halves
    u8b = np.array([0, 255, 100, 255], np.uint8)
    i8 = np.array([0, -1, 3, -2], np.int8)
    down = lambda a: ops.resample(a, (0.5,), "linear")  # noqa: E731
    assert_bits(run(down, u8)[0], np.array([1, 3], np.uint8))  # 0.5 -> 1, 2.5 -> 3
    assert_bits(run(down, u8b)[0], np.array([128, 178], np.uint8))
    assert_bits(run(down, i8)[0], np.array([-1, 1], np.int8))  # -0.5 -> -1
    up = np.array([0, 3], np.uint8)  # 0.75 and 2.25: not halves
    assert_bits(run(lambda a: ops.resample(a, (2.0,), "linear"), up)[0],
                np.array([0, 1, 2, 3], np.uint8))
    ort_lin = lambda a, s: ort_resize(row(*a, dtype=a.dtype), scales=[1, 1, 1, s],  # noqa: E731
                                      mode="linear").reshape(-1)
    assert_bits(ort_lin(u8, 0.5), np.array([0, 2], np.uint8))  # truncation toward zero
    assert_bits(ort_lin(u8b, 0.5), np.array([127, 177], np.uint8))
    assert_bits(ort_lin(i8, 0.5), np.array([0, 0], np.int8))
    assert_bits(ort_lin(up, 2.0), np.array([0, 0, 2, 3], np.uint8))
    torch = pytest.importorskip("torch")
    interp = torch.nn.functional.interpolate
    tu = lambda a, n: interp(torch.from_numpy(row(*a, dtype=np.uint8)), size=(1, n),  # noqa: E731
                             mode="bilinear").numpy().reshape(-1)
    assert_bits(tu(u8, 2), np.array([1, 3], np.uint8))
    assert_bits(tu(u8b, 2), np.array([128, 178], np.uint8))
    assert_bits(tu(up, 4), np.array([0, 1, 2, 3], np.uint8))
    with pytest.raises(RuntimeError, match="not implemented for 'Char'"):
        interp(torch.from_numpy(row(*i8, dtype=np.int8)), size=(1, 2), mode="bilinear")


def ort_slice(x: np.ndarray, starts: list[int], ends: list[int], axes: list[int],
              steps: list[int]) -> np.ndarray:
    consts = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
    return ort_op("Slice", x, consts)[0]


def test_slice_negative_strides():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)  # T-SL-1
    y = run(lambda a: ops.slice(a, (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2)), x)[0]
    assert_bits(y, f32(14, 16, 6, 8).reshape(1, 1, 2, 2))
    x5 = np.arange(5, dtype=np.float32)  # ONNX start 10, end -100, step -2 (clamped)
    assert_bits(run(lambda a: ops.slice(a, (0,), (5,), (-2,)), x5)[0], f32(4, 2, 0))
    dx = run(lambda a: ops.slice_grad(a, (5,), (1,), (4,), (-2,)), f32(7, 8))[0]  # T-SG-3
    assert_bits(dx, f32(0, 0, 8, 0, 7))
    assert_bits(ort_slice(x, [3, 1], [-5, 4], [2, 3], [-2, 2]), y)
    assert_bits(ort_slice(x5, [10], [-100], [0], [-2]), f32(4, 2, 0))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x5.copy()).requires_grad_()
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[4:0:-2]
    ty = t.flip(0)[0:3:2]  # the same elements as offset 1, size 4, stride -2
    assert_bits(ty.detach().numpy(), f32(4, 2))
    ty.backward(torch.from_numpy(f32(7, 8)))
    assert_bits(t.grad.numpy(), dx)


def test_slice_stride_zero():
    x = f32(10, 20, 30)
    assert_bits(run(lambda a: ops.slice(a, (1,), (1,), (0,), output_sizes=(3,)), x)[0],
                f32(20, 20, 20))
    g = gradc.Graph("s0")
    g.output(ops.slice(g.input("x", "float32", (3,)), (1,), (1,), (0,), output_sizes=(3,)), "y")
    out = gradc.compile(gradc.grad(g), target="reference", passes=None)(x=x, grad_y=f32(1, 2, 4))
    assert_bits(out["grad_x"], f32(0, 7, 0))  # reduce_sum, then a stride-1 slice_grad
    with pytest.raises(gradc.VerifyError, match="input_window_strides"):
        ops.slice_grad(gradc.Graph("q").input("d", "float32", (3,)), (3,), (1,), (1,), (0,))
    with pytest.raises(Exception, match="'step' cannot be 0"):
        ort_slice(x, [1], [2], [0], [0])
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy()).requires_grad_()
    with pytest.raises(ValueError, match="step cannot be zero"):
        t[1:2:0]
    t[1:2].expand(3).backward(torch.from_numpy(f32(1, 2, 4)))
    assert_bits(t.grad.numpy(), f32(0, 7, 0))


# ---------------------------------------------------------------- the ONNX importer (SPEC §7)

def _import_cases() -> dict[str, tuple[onnx.ModelProto, np.ndarray]]:
    x4 = row(1, 2, 3, 4)
    cases = {}
    for ctm, n in [("half_pixel", 8), ("asymmetric", 8), ("align_corners", 7),
                   ("pytorch_half_pixel", 1), ("half_pixel", 1)]:
        cases[f"resize-linear-{ctm}-{n}"] = (resize_model(x4, sizes=[1, 1, 1, n], mode="linear",
                                              coordinate_transformation_mode=ctm), x4)
    x0 = row(0, 1, 2, 3)
    for nm in NEAREST:
        cases[f"resize-nearest-{nm}"] = (resize_model(x0, scales=[1, 1, 1, 2.5], nearest_mode=nm),
                                         x0)
    x10 = row(*range(10))
    cases["resize-default-size"] = (resize_model(x10, scales=[1, 1, 1, 0.7]), x10)
    x5 = row(*range(5))
    pool = oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 3], strides=[1, 3],
                        pads=[0, 1, 0, 1], ceil_mode=1)
    cases["maxpool-ceil"] = (onnx_model([pool], {"x": x5}, {}), x5)
    clip = oh.make_node("Clip", ["x", "lo", "hi"], ["y"])
    cases["clip-min-above-max"] = (onnx_model([clip], {"x": x5}, {"lo": np.float32(3),
                                                                  "hi": np.float32(1)}), x5)
    x16 = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    sl = oh.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    cases["slice-negative-steps"] = (onnx_model([sl], {"x": x16}, {
        "s": np.array([3, 1]), "e": np.array([-5, 4]), "a": np.array([2, 3]),
        "t": np.array([-2, 2])}), x16)
    cases["slice-clamped"] = (onnx_model([sl], {"x": x16}, {
        "s": np.array([10]), "e": np.array([-100]), "a": np.array([3]), "t": np.array([-2])}), x16)
    return cases


IMPORT_CASES = _import_cases()


@pytest.mark.parametrize("case", sorted(IMPORT_CASES))
def test_onnx_import_agrees_with_onnxruntime(case):
    model, x = IMPORT_CASES[case]
    want = ort_run(model, x=x)[0]
    g = gradc.from_onnx(model)
    got = gradc.compile(g, target="reference", passes=None)(x=x)
    assert_bits(got[g.outputs[0].name], want)


def test_onnxruntime_skips_float16_rounding_before_ops_without_float16_kernels():
    """docs/conformance.md, "Float16 intermediates": gradc writes Cast(float32 -> float16) to
    round an add, onnxruntime removes it before the relu's Greater/Where (no float16 kernels)."""
    g = gradc.Graph("g")
    x = g.input("x", "float16", [2])
    c = ops.constant(np.array([-0.5, 1.0], np.float16), graph=g)
    g.output(ops.mul(ops.relu(ops.add(x, x)), c), "y")
    xs = np.array([40000, 1.5], np.float16)
    want = gradc.compile(g, target="reference")(x=xs)["y"]
    got = gradc.compile(g, target="onnx")(x=xs)["y"]
    assert want[0] == -np.inf and got[0] == np.float16(-40000), (want, got)
    assert want[1] == got[1] == 3.0


def test_float64_strided_backward_convolution_onnx_nan():
    """docs/conformance.md, "Convolution": the float64 ONNX lowering multiplies zero-upsampled
    inputs by each tap, so a position no tap reaches is 0 * inf (found by the fuzzer)."""
    g = gradc.parse('''graph g(%x: f64[1,1,2], %w: f64[1,1,1]) {
  %y = convolution(%x, %w) {direction = "backward", strides = [2]} : f64[1,1,3]
  return %y
}''')
    x, w = np.array([[[1.0, 2.0]]]), np.array([[[np.inf]]])
    for t in ("reference", "numpy", "c"):
        np.testing.assert_array_equal(gradc.compile(g, target=t)(x=x, w=w)["y"],
                                      [[[np.inf, 0.0, np.inf]]])
    got = gradc.compile(g, target="onnx")(x=x, w=w)["y"]
    assert np.isinf(got[0, 0, 0]) and np.isnan(got[0, 0, 1]) and np.isinf(got[0, 0, 2])
