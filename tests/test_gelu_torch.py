"""gelu, gelu_grad, erf, sin, cos against PyTorch and across targets on wide random data
(SPEC-transformers §25.4), and models using them exported by both PyTorch exporters.

- Property tests: every float16 value, and float32/float64 values from normal, uniform and
  log-uniform (|x| up to 1e30 / 1e300) draws plus the special values. Each target is within
  §25.4 of the reference (numpy: its bits), and so is PyTorch (``F.gelu`` both modes and its
  autograd, ``torch.erf/sin/cos`` and theirs), except where the spec records that PyTorch differs:
  erf-mode ``gelu(+inf)`` is NaN in PyTorch's vectorized float32 kernel (inf elsewhere; gradc:
  inf) and that kernel overflows to inf above 1.7e38 (gradc: x), and its float32 tanh-mode
  backward is NaN for |x| > 1.8e19 (``x**2`` overflows; float64: above 1.3e154) where gradc
  gives 1 or 0.
- Import: ``nn.GELU()``, ``nn.GELU(approximate="tanh")``, ``torch.erf``, ``torch.sin`` and
  ``torch.cos`` in a small model, exported with the TorchScript exporter (opset 17: GELU written
  out, imported op by op; opset 20: ``Gelu``) and the dynamo exporter; the forward against
  onnxruntime, the parameter gradients against autograd.
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest

import gradc
from gradc import ops
from activation_support import assert_25_4, outputs
from helpers import assert_bits
from test_elementwise_math_support import graph

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(2513)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3e38, -3e38, 1e20, -1e20, 1e-45,
           -1e-45, 1.8e19, -1.9e19, 5.0, -5.5, -3.0, 10.0, -10.0]


def sample(dtype: str, n: int = 1500) -> np.ndarray:
    """Wide random values of ``dtype`` (every float16), the special values included."""
    if dtype == "float16":
        return np.arange(2 ** 16, dtype=np.uint16).view(np.float16)
    top = 30 if dtype == "float32" else 300
    mag = 10.0 ** RNG.uniform(-40 if dtype == "float32" else -300, top, n)
    x = np.concatenate([RNG.standard_normal(n) * 3, RNG.uniform(-10, 10, n),
                        mag * RNG.choice([-1, 1], n), SPECIAL])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _torch_gelu(x: np.ndarray, dy: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    tx = torch.tensor(x, requires_grad=True)
    y = F.gelu(tx, approximate=mode)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), tx.grad.numpy()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_gelu_targets_and_pytorch_within_25_4(dtype, mode):
    x = sample(dtype)
    dy = RNG.standard_normal(x.shape).astype(dtype)
    g = graph(lambda x, dy: {"y": ops.gelu(x, mode), "dx": ops.gelu_grad(x, dy, mode)},
              {"x": (dtype, x.shape), "dy": (dtype, x.shape)})
    outs = outputs(g, {"x": x, "dy": dy})
    ref = outs["reference"]
    assert_bits(outs["numpy"]["y"], ref["y"], nan_payload=False)
    assert_bits(outs["numpy"]["dx"], ref["dx"], nan_payload=False)
    for t in ("c", "onnx"):
        assert_25_4(outs[t]["y"], ref["y"], x, what=f"{t} gelu")
        assert_25_4(outs[t]["dx"], ref["dx"], x, dy, what=f"{t} gelu_grad")
    ty, tdx = _torch_gelu(x, dy, mode)
    # PyTorch's vectorized float32 erf-mode kernel: gelu(+inf) is NaN (inf elsewhere), and
    # x * (1 + erf) overflows to inf before its 0.5 above FLT_MAX / 2 (gradc: inf, and x)
    differs_y = (x == np.inf) | ((x.astype(np.float64) > 3.4028234663852886e38 / 2)
                                 & (dtype == "float32") & (mode == "none"))
    assert (np.isnan(ty[differs_y]) | (ty[differs_y] == np.inf)).all()
    assert (ref["y"][differs_y] == x[differs_y]).all()
    assert_25_4(ty[~differs_y], ref["y"][~differs_y], x[~differs_y], what="torch gelu")
    differs = np.zeros(x.shape, bool)
    if mode == "tanh" and dtype != "float16":  # float16 runs in float32: no overflow
        with np.errstate(over="ignore"):
            differs = np.isfinite(x) & np.isinf(x * x)  # PyTorch's x**2 (1.8e19, 1.3e154)
        assert differs.any() and np.isnan(tdx[differs]).all()
        assert np.isin(ref["dx"][differs] / dy[differs], [0.0, 1.0]).all()
    assert_25_4(tdx[~differs], ref["dx"][~differs], x[~differs], dy[~differs],
                what="torch gelu backward")


ERF = np.frompyfunc(math.erf, 1, 1)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_erf_sin_cos_targets_and_pytorch_within_4_ulps(dtype):
    x = sample(dtype)
    dy = RNG.standard_normal(x.shape).astype(dtype)
    fns = {"erf": ops.erf, "sin": ops.sin, "cos": ops.cos}
    outs = outputs(graph(lambda x: {k: f(x) for k, f in fns.items()}, {"x": (dtype, x.shape)}),
                   {"x": x})
    ref = outs["reference"]
    derf = outputs(gradc.grad(graph(lambda x: {"y": ops.erf(x)}, {"x": (dtype, x.shape)})),
                   {"x": x, "grad_y": dy})
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        want = {"erf": np.asarray(ERF(x64), np.float64), "sin": np.sin(x64), "cos": np.cos(x64)}
    for k in fns:
        assert_bits(ref[k], want[k].astype(dtype), nan_payload=False)
        assert_bits(outs["numpy"][k], ref[k], nan_payload=False)
        for t in ("c", "onnx"):
            assert_25_4(outs[t][k], ref[k], what=f"{t} {k}")
        if dtype == "float16":  # PyTorch's float16 erf is 0 up to 2e-7 (1 ulp only from float32)
            continue
        tx = torch.tensor(x, requires_grad=True)
        ty = getattr(torch, k)(tx)
        assert_25_4(ty.detach().numpy(), ref[k], what=f"torch {k}")
        if k == "erf":  # its gradient: every target and autograd (sin, cos: below)
            ty.backward(torch.tensor(dy))
            for t in derf:
                assert_25_4(derf[t]["grad_x"], derf["reference"]["grad_x"], what=f"{t} d erf")
            assert_25_4(tx.grad.numpy(), derf["reference"]["grad_x"], what="torch d erf")


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sin_cos_gradients_against_autograd(op):
    x = sample("float32", 300)
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    g = gradc.grad(graph(lambda x: {"y": getattr(ops, op)(x)}, {"x": ("float32", x.shape)}))
    outs = outputs(g, {"x": x, "grad_y": dy}, targets=("reference", "c"))
    tx = torch.tensor(x, requires_grad=True)
    getattr(torch, op)(tx).backward(torch.tensor(dy))
    for o in outs.values():
        assert_25_4(o["grad_x"], tx.grad.numpy(), what=f"d {op}")


def test_float64_sin_cos_near_the_zeros_of_sin_on_onnx():
    """onnxruntime's double Sin/Cos lose the reduced argument below |x| = 15 (sin(pi) = 0)."""
    k = np.arange(1, 40, dtype=np.float64)
    x = np.concatenate([k * math.pi, -k * math.pi, (k + 0.5) * math.pi,
                        np.nextafter(k * math.pi, 0), [1e6 * math.pi, 7e5]])
    g = graph(lambda x: {"s": ops.sin(x), "c": ops.cos(x)}, {"x": ("float64", x.shape)})
    got = gradc.compile(g, "onnx")(x=x)
    assert_25_4(got["s"], np.sin(x), what="onnx sin")
    assert_25_4(got["c"], np.cos(x), what="onnx cos")


# -- import ----------------------------------------------------------------------------------

class _Model(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(4, 6), torch.nn.Linear(6, 4)
        self.act = torch.nn.GELU(approximate=mode)

    def forward(self, x):
        return self.l2(self.act(self.l1(x))) + torch.erf(x) * torch.sin(x) + torch.cos(x)


def _export(model: torch.nn.Module, x, form: str) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form == "dynamo":
            pytest.importorskip("onnxscript")
            torch.onnx.export(model, (x,), dynamo=True, input_names=["x"], output_names=["y"],
                              verbose=False).save(buf)
        else:
            torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=int(form[2:]),
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=["x"], output_names=["y"])
    return buf.getvalue()


@pytest.mark.parametrize("form", ["ts17", "ts20", "dynamo"])
@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_exported_gelu_models_import_run_and_differentiate(mode, form):
    onnx = pytest.importorskip("onnx")
    from onnx_import_helpers import run_ort  # lazy: needs onnxruntime

    torch.manual_seed(7)
    model = _Model(mode)
    x = torch.randn(3, 4)
    m = onnx.load_from_string(_export(model, x, form))
    g = gradc.from_onnx(m)
    node_ops = [n.op for n in g.nodes]
    if form == "ts17":  # written out: op by op, never rewritten into gelu
        assert "gelu" not in node_ops and ("erf" if mode == "none" else "tanh") in node_ops
        assert node_ops.count("erf") == (2 if mode == "none" else 1)
    else:
        gelu = [n for n in g.nodes if n.op == "gelu"]
        assert len(gelu) == 1 and gelu[0].attrs["approximation"] == mode
    y = model(x)
    y.backward(torch.ones_like(y))
    np.testing.assert_allclose(run_ort(m, {"x": x.numpy()})["y"], y.detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    t = gradc.grad(g, "all")
    feeds = {"x": x.numpy(), "grad_y": np.ones((3, 4), np.float32)}
    for target in ("reference", "c"):
        got = gradc.compile(t, target=target)(**feeds)
        np.testing.assert_allclose(got["y"], y.detach().numpy(), rtol=1e-5, atol=1e-6)
        for p in g.parameters:
            tp = _torch_parameter(model, p)
            dp = got[f"grad_{p.name}"]
            np.testing.assert_allclose(dp if dp.shape == tp.shape else dp.T, tp.grad.numpy(),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{target} {p.name}")


def _torch_parameter(model: torch.nn.Module, p: gradc.Value) -> torch.Tensor:
    """The PyTorch parameter a graph parameter holds: by name, else by value (the dynamo
    exporter stores Linear weights transposed under generated names)."""
    params = dict(model.named_parameters())
    if p.name in params:
        return params[p.name]
    for tp in params.values():
        v = tp.detach().numpy()
        if v.ndim == 2 and v.T.shape == p.value.shape and (v.T == p.value).all():
            return tp
    raise AssertionError(f"no PyTorch parameter holds {p.name}")
