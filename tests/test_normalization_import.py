"""The ONNX import of SPEC-transformers.md §28.1's LayerNormalization, RMSNormalization and
Gather: PyTorch modules (nn.Embedding, nn.LayerNorm, nn.RMSNorm) exported by both exporters,
their forward against onnxruntime and every parameter gradient against PyTorch's autograd; the
rows' own rules (Mean/InvStdDev only where read, stash_type, Gather folded on shapes but never
a parameter's data, constant indices checked at import)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import helper as oh  # noqa: E402

from helpers import assert_bits  # noqa: E402
from import_shape_cases import gather_case  # noqa: E402
from normalization_bound import assert_within, forward_bound  # noqa: E402
from normalization_onnx_cases import layer_norm_case  # noqa: E402
from onnx_import_helpers import c64, make, run_ort  # noqa: E402

F32 = np.float32


class Tiny(torch.nn.Module):
    """Token and position embeddings, LayerNorm, RMSNorm (dynamo only: the TorchScript exporter
    has no rms_norm), a linear head."""

    def __init__(self, rms: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.use_rms = rms
        self.emb, self.pos = torch.nn.Embedding(11, 8), torch.nn.Embedding(6, 8)
        self.ln, self.rms = torch.nn.LayerNorm(8), torch.nn.RMSNorm(8, eps=1e-5)
        self.head = torch.nn.Linear(8, 5)
        with torch.no_grad():  # scales and biases away from their initial ones and zeros
            for p in (self.ln.weight, self.ln.bias, self.rms.weight):
                p.add_(torch.randn(p.shape) * 0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.ln(self.emb(ids) + self.pos(torch.arange(ids.shape[1])))
        return self.head(self.rms(h) if self.use_rms else h)


IDS = np.array([[1, 2, 10, 0, 3, 3], [4, 4, 5, 6, 7, 9]], np.int64)


def export(form: str) -> tuple[torch.nn.Module, bytes]:
    m = Tiny(rms=form == "dynamo")
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form == "torchscript":
            m.train()
            torch.onnx.export(m, (torch.tensor(IDS),), buf, dynamo=False, opset_version=17,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=["ids"],
                              output_names=["y"])
        else:
            prog = torch.onnx.export(m, (torch.tensor(IDS),), dynamo=True, opset_version=23,
                                     input_names=["ids"], output_names=["y"], verbose=False)
            prog.save(buf)
    return m, buf.getvalue()


def _torch_param(m: torch.nn.Module, name: str, value: np.ndarray) -> tuple[str, bool] | None:
    """The PyTorch parameter a gradc parameter is: by name, else by value (the dynamo exporter
    renames some, transposing the head's weight); (name, transposed)."""
    params = dict(m.named_parameters())
    if name in params:
        return name, False
    for k, p in params.items():
        a = p.detach().numpy()
        if a.shape == value.shape and np.array_equal(a, value):
            return k, False
        if a.ndim == 2 and a.T.shape == value.shape and np.array_equal(a.T, value):
            return k, True
    return None  # folded by the exporter (the position embedding read at a constant range)


@pytest.mark.parametrize("form", ["torchscript", "dynamo"])
def test_pytorch_exports_forward_and_gradients(form):
    m, data = export(form)
    g = gradc.from_onnx(data)
    ops_ = [n.op for n in g.nodes]
    assert ops_.count("mean_variance_normalization") == (2 if form == "dynamo" else 1)
    assert "gather" in ops_ and "reduce_mean" not in ops_  # unused statistics are not built
    y = gradc.compile(g, target="c")(ids=IDS)["y"]
    np.testing.assert_allclose(y, run_ort(onnx.load_from_string(data), {"ids": IDS})["y"],
                               rtol=1e-5, atol=1e-5)
    m.zero_grad()
    out = m(torch.tensor(IDS))
    np.testing.assert_allclose(y, out.detach().numpy(), rtol=1e-5, atol=1e-5)
    dy = np.random.default_rng(1).standard_normal(out.shape).astype(F32)
    out.backward(torch.tensor(dy))
    grads = gradc.compile(gradc.grad(g, wrt="parameters"), target="c")(ids=IDS, grad_y=dy)
    matched = 0
    for p in g.parameters:
        hit = _torch_param(m, p.name, p.value)
        if hit is None:
            continue
        want = dict(m.named_parameters())[hit[0]].grad.numpy()
        want = want.T if hit[1] else want
        np.testing.assert_allclose(grads[f"grad_{p.name}"], want, rtol=1e-4, atol=1e-5,
                                   err_msg=p.name)
        matched += 1
    assert matched >= 5  # embedding, the norms' scales and bias, the head


def test_onnxruntime_layer_normalization_is_within_the_bound_t_mvn_7():
    """T-MVN-7 (O): onnxruntime's own LayerNormalization kernel on T-MVN-5's data."""
    x = np.array([[0.1, -1.3, 2.7, 0.5, 3.2], [100, 100.5, 99.5, 100.25, 99.75]], F32)
    s, b = np.array([1.5, 0.5, -1, 2, 1], F32), np.array([0.25, 0, 0, -0.5, 1], F32)
    node = oh.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"],
                        epsilon=1e-5)
    model = make([node], {"x": (F32, [2, 5])}, {"y": F32, "mean": F32, "inv": F32},
                 {"s": s, "b": b}, opset=17)
    got = run_ort(model, {"x": x})
    want = gradc.compile(gradc.from_onnx(model), target="reference")(x=x)
    assert_within(got["y"], want["y"], forward_bound(x, s, b, (1,)))
    np.testing.assert_allclose(got["mean"].reshape(-1), [1.0399999618530273, 100], rtol=2e-7)
    np.testing.assert_allclose(got["inv"].reshape(-1), [0.5960823893547058, 2.8283138275146484],
                               rtol=1e-6)


def test_unread_statistics_are_not_built_and_read_ones_are():
    m, feeds = layer_norm_case(outputs=1)  # Mean and InvStdDev named, no graph output
    g = gradc.from_onnx(m)
    assert [n.op for n in g.nodes] == ["mean_variance_normalization"]
    m, feeds = layer_norm_case(outputs=3)
    out = gradc.compile(gradc.from_onnx(m), target="c")(**feeds)
    assert_bits(out["mean"], np.array([[4], [3]], F32))
    assert_bits(out["inv"], np.array([[0.25], [0.25]], F32))


@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_stash_type_other_than_1_is_refused_by_name(op):
    m, _ = layer_norm_case(outputs=1, stash_type=0)
    m.graph.node[0].op_type = op
    del m.graph.node[0].input[2:]
    if op == "RMSNormalization":  # new in opset 23, with one output
        m.opset_import[0].version, m.ir_version = 23, 11
        del m.graph.node[0].output[1:]
    with pytest.raises(gradc.UnsupportedError, match="attribute stash_type: 0 is not supported"):
        gradc.from_onnx(m)


def test_layer_normalization_axis_and_float16():
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float16)
    node = oh.make_node("LayerNormalization", ["x", "s"], ["y"], axis=1)
    model = make([node], {"x": (np.float16, [2, 3, 4])}, {"y": np.float16},
                 {"s": np.ones((3, 4), np.float16)}, opset=17)
    g = gradc.from_onnx(model)
    assert g.nodes[-1].attrs["axes"] == (1, 2)
    got = gradc.compile(g, target="reference")(x=x)["y"]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], atol=4e-3)


def test_gather_on_a_shape_still_folds():
    model, feeds = gather_case()
    g = gradc.from_onnx(model)
    assert [n.op for n in g.nodes] == ["reshape"]


def test_a_position_embedding_read_at_a_folded_range_stays_a_parameter():
    nodes = [oh.make_node("Shape", ["ids"], ["s"]),
             oh.make_node("Gather", ["s", "one"], ["n"], axis=0),
             oh.make_node("Range", ["zero", "n", "step"], ["t"]),
             oh.make_node("Gather", ["P", "t"], ["y"], axis=0)]
    inits = {"one": np.array(1, np.int64), "zero": np.array(0, np.int64),
             "step": np.array(1, np.int64), "P": np.arange(24, dtype=F32).reshape(6, 4)}
    g = gradc.from_onnx(make(nodes, {"ids": (np.int64, [2, 5])}, {"y": F32}, inits))
    assert [p.name for p in g.parameters] == ["P"]
    assert [n.op for n in g.nodes if n.op != "constant"] == ["gather"]
    y = gradc.compile(g, target="c")(ids=np.zeros((2, 5), np.int64))["y"]
    assert_bits(y, inits["P"][:5])


def test_constant_indices_out_of_range_are_refused_at_import():
    node = oh.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)
    model = make([node], {"x": (F32, [2, 3])}, {"y": F32}, {"i": c64(0, 3)})
    with pytest.raises(gradc.VerifyError, match=r"Gather 'g': input indices: expected indices "
                                                r"in -3\.\.2"):
        gradc.from_onnx(model)


def test_computed_indices_out_of_range_are_an_input_error_when_run():
    nodes = [oh.make_node("Add", ["ids", "one"], ["k"]),
             oh.make_node("Gather", ["W", "k"], ["y"], axis=0)]
    model = make(nodes, {"ids": (np.int64, [3])}, {"y": F32},
                 {"one": np.array(1, np.int64), "W": np.ones((4, 2), F32)})
    ex = gradc.compile(gradc.from_onnx(model), target="onnx")
    with pytest.raises(gradc.InputError, match=r"^gather: indices\[2\] = 4: expected an index "
                                               r"in -4\.\.3"):
        ex(ids=np.array([0, 1, 3]))


# -- conformance (docs/conformance.md) ---------------------------------------------------------
def test_conformance_float16_stash_type_1_is_within_a_float16_ulp():
    """ONNX's float16 LayerNormalization body (stash_type 1) rounds Normalized to float16
    before Scale and Bias; gradc rounds once at the end: at most a float16 ulp apart (SPEC).
    onnxruntime 1.32's kernel gave gradc's bits on this data."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((16, 24)) * 3).astype(np.float16)
    s, b = rng.standard_normal(24).astype(np.float16), rng.standard_normal(24).astype(np.float16)
    model = make([oh.make_node("LayerNormalization", ["x", "s", "b"], ["y"])],
                 {"x": (np.float16, [16, 24])}, {"y": np.float16}, {"s": s, "b": b}, opset=17)
    got = run_ort(model, {"x": x})["y"].astype(np.float64)
    want = gradc.compile(gradc.from_onnx(model), target="c")(x=x)["y"].astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert (np.abs(got - want) <= ulp).all()


def test_conformance_rms_norm_epsilon_default():
    """gradc's and ONNX RMSNormalization's default epsilon is 1e-5; torch.nn.RMSNorm's (None)
    is finfo(dtype).eps at run time: a graph built to match PyTorch passes it."""
    x = np.array([[1e-4, 2e-4, -1e-4, 3e-4]], F32)
    assert torch.nn.RMSNorm(4).eps is None
    eps = float(torch.finfo(torch.float32).eps)
    want = torch.nn.functional.rms_norm(torch.tensor(x), (4,)).numpy()
    g = gradc.Graph("rms")
    g.output(gradc.ops.mean_variance_normalization(g.input("x", "float32", (1, 4)),
                                                   use_mean=False, epsilon=eps), "y")
    got = gradc.compile(g, target="c")(x=x)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    g = gradc.Graph("rms_default")
    g.output(gradc.ops.mean_variance_normalization(g.input("x", "float32", (1, 4)),
                                                   use_mean=False), "y")
    assert np.abs(gradc.compile(g, target="c")(x=x)["y"] - want).max() > 0.1
