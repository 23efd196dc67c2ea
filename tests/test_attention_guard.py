"""The guarded softmax of SPEC-transformers §27.2 and attention built from gradc ops (§27.3):
§30.4's vectors T-SM-5, T-AT-1, T-AT-2 on every target against PyTorch (``_safe_softmax``,
SDPA, eager attention), the NaN key gradient that the rule removes, the forms the rule must not
take, and SDPA with a bool mask exported by both PyTorch exporters.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.ops import softmax as softmax_module
from activation_support import outputs
from helpers import assert_bits, compile_for
from test_elementwise_math_support import assert_ulps, graph

nan, inf = np.nan, np.inf
Q = np.array([[1, 2], [0.5, -1]], np.float32)
K = np.array([[1, 0], [0, 1]], np.float32)
V = np.array([[1, 2], [3, 4]], np.float32)
MASK = np.array([[True, True], [False, False]])  # query 1 sees no key
ONES = np.ones((2, 2), np.float32)


def f32(*rows: object) -> np.ndarray:
    return np.array(rows, np.float32)


def _zero() -> gradc.Value:
    return ops.constant(np.float32(0))


def _attention(fill: float, guard: bool) -> gradc.Graph:
    """out = where(is_nan(P), 0, P) @ V with P = softmax(Q K^T + where(mask, 0, fill))."""
    def fn(q, k, v, mask):
        s = ops.add(ops.gemm(q, k, trans_b=True),
                    ops.where(mask, _zero(), ops.constant(np.float32(fill))))
        p = ops.softmax(s, (-1,))
        if guard:
            p = ops.where(ops.is_nan(p), _zero(), p)
        return {"p": p, "out": ops.gemm(p, v)}
    g = graph(fn, {"q": ("float32", (2, 2)), "k": ("float32", (2, 2)), "v": ("float32", (2, 2)),
                   "mask": ("bool", (2, 2))})
    return gradc.grad(g, wrt=["q", "k", "v"])


def _feeds() -> dict[str, np.ndarray]:
    return {"q": Q, "k": K, "v": V, "mask": MASK, "grad_p": np.zeros((2, 2), np.float32),
            "grad_out": ONES}


T_AT_1 = {
    "out": f32([2.4621171951293945, 3.4621171951293945], [0, 0]),
    "grad_q": f32([-0.7864477634429932, 0.7864477038383484], [0, 0]),
    "grad_k": f32([-0.7864477634429932, -1.5728955268859863],
                  [0.7864477038383484, 1.5728954076766968]),
    "grad_v": f32([0.2689414322376251, 0.2689414322376251],
                  [0.7310585975646973, 0.7310585975646973]),
}
T_AT_2 = {
    "out": f32([2.4621171951293945, 3.4621171951293945], [2, 3]),
    "grad_q": f32([-0.7864477634429932, 0.7864477038383484], [-1, 1]),
    "grad_k": f32([-1.2864477634429932, -0.5728955268859863],
                  [1.2864477634429932, 0.5728954076766968]),
    "grad_v": f32([0.7689414322376251, 0.7689414322376251],
                  [1.2310585975646973, 1.2310585975646973]),
}


def _torch_attention(bool_mask: bool) -> dict[str, np.ndarray]:
    """PyTorch SDPA (its math backend's _safe_softmax) with the bool mask, or eager attention
    with the finfo.min additive mask; out and the gradients of sum(out)."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.tensor(a[None, None], requires_grad=True) for a in (Q, K, V))
    mask = torch.tensor(MASK)
    if bool_mask:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                               scale=1.0)
    else:
        bias = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
        out = torch.softmax(q @ k.transpose(-1, -2) + bias, -1) @ v
    out.sum().backward()
    return {"out": out.detach().numpy()[0, 0], "grad_q": q.grad.numpy()[0, 0],
            "grad_k": k.grad.numpy()[0, 0], "grad_v": v.grad.numpy()[0, 0]}


@pytest.mark.parametrize("vector,fill,guard", [("T-AT-1", -inf, True),
                                               ("T-AT-2", float(np.finfo(np.float32).min), False)])
def test_t_at_attention_on_every_target_against_pytorch(vector, fill, guard):
    want = T_AT_1 if vector == "T-AT-1" else T_AT_2
    outs = outputs(_attention(fill, guard), _feeds())
    ref = outs["reference"]
    for k, w in want.items():
        assert_bits(ref[k], w)
        for t in ("numpy", "c"):
            assert_bits(outs[t][k], ref[k])
        assert_ulps(outs["onnx"][k], w, 4)
    torch_outs = _torch_attention(bool_mask=guard)
    for k, w in want.items():
        assert_ulps(torch_outs[k], w, 4)


def test_t_at_1_without_the_guard_row_1_of_dq_and_all_of_dk_are_nan():
    outs = outputs(_attention(-inf, guard=False), _feeds(), targets=("reference",))
    ref = outs["reference"]
    assert np.isnan(ref["out"][1]).all() and np.isnan(ref["grad_k"]).all()
    assert np.isnan(ref["grad_q"][1]).all() and not np.isnan(ref["grad_q"][0]).any()


def test_removing_the_rule_brings_back_the_nan_key_gradient(monkeypatch):
    """The guarded vector fails without §27.2's rule: dK is NaN through §17.1's rule alone."""
    monkeypatch.setattr(softmax_module, "guard_of", lambda node: None)
    got = outputs(_attention(-inf, guard=True), _feeds(), targets=("reference",))["reference"]
    assert np.isnan(got["grad_k"]).all()
    assert_bits(got["out"], T_AT_1["out"])  # the forward is the same


def test_t_sm_5_guarded_softmax_and_safe_softmax():
    g = gradc.grad(graph(lambda x: {"yp": ops.where(ops.is_nan(s := ops.softmax(x, (1,))),
                                                    _zero(), s)}, {"x": ("float32", (2, 2))}))
    feeds = {"x": f32([-inf, -inf], [0, 0]), "grad_yp": f32([1, 2], [1, 3])}
    for o in outputs(g, feeds).values():
        assert_bits(o["yp"], f32([0, 0], [0.5, 0.5]))
        assert_bits(o["grad_x"], f32([0, 0], [-0.5, 0.5]))
    torch = pytest.importorskip("torch")
    x = torch.tensor(feeds["x"], requires_grad=True)
    y = torch.ops.aten._safe_softmax(x, 1)
    y.backward(torch.tensor(feeds["grad_yp"]))
    assert_bits(y.detach().numpy(), f32([0, 0], [0.5, 0.5]))
    assert_bits(x.grad.numpy(), f32([0, 0], [-0.5, 0.5]))
    x2 = torch.tensor(feeds["x"], requires_grad=True)  # softmax + where(isnan): 17.1's NaN
    s = torch.softmax(x2, 1)
    torch.where(torch.isnan(s), 0.0, s).backward(torch.tensor(feeds["grad_yp"]))
    assert np.isnan(x2.grad.numpy()[0]).all()


def _one_softmax_vjp(fn) -> list[str]:
    """The ops of the softmax VJP of ``fn``'s graph (between the forward and the output)."""
    g = gradc.grad(graph(fn, {"x": ("float32", (2, 3)), "c": ("bool", (2, 1)),
                              "cc": ("bool", (2, 3))}), wrt=["x"])
    return [n.op for n in g.nodes]


def _guarded(n: gradc.Graph) -> bool:
    """Whether the softmax VJP multiplies by the guard's result (the where) rather than Y."""
    sm = next(x for x in n.nodes if x.op == "softmax").outputs[0]
    last = next(x for x in n.nodes if x.outputs[0] is next(o for o in n.outputs
                                                             if o.name == "grad_x"))
    return sm not in last.inputs


@pytest.mark.parametrize("case,guarded", [
    ("is_nan", True), ("row_guard", True), ("elementwise_condition", False),
    ("second_reader", False), ("output", False), ("nonzero_fill", False), ("swapped", False)])
def test_the_rule_takes_only_the_guard_forms(case, guarded):
    def fn(x, c, cc):
        y = ops.softmax(x, (1,))
        cond = {"is_nan": ops.is_nan(y), "row_guard": c, "elementwise_condition": cc}.get(
            case, ops.is_nan(y))
        fill = ops.constant(np.float32(0.5 if case == "nonzero_fill" else 0))
        yp = ops.where(cond, y, fill) if case == "swapped" else ops.where(cond, fill, y)
        out = {"yp": yp}
        if case == "second_reader":
            out["z"] = ops.mul(y, y)
        if case == "output":
            out["y"] = y
        return out
    g = gradc.grad(graph(fn, {"x": ("float32", (2, 3)), "c": ("bool", (2, 1)),
                              "cc": ("bool", (2, 3))}), wrt=["x"])
    assert _guarded(g) == guarded


def test_row_guard_of_onnx_attention_zeroes_fully_masked_rows():
    """Where(Equal(ReduceMax(bias), -inf), 0, P): the guard of ONNX Attention's body."""
    def fn(x, bias):
        y = ops.softmax(ops.add(x, bias), (1,))
        c = ops.equal(ops.reduce_max(bias, (1,), keepdims=True), ops.constant(np.float32(-inf)))
        return {"yp": ops.where(c, _zero(), y)}
    g = gradc.grad(graph(fn, {"x": ("float32", (2, 2)), "bias": ("float32", (2, 2))}),
                   wrt=["x"])
    feeds = {"x": f32([1, 2], [3, 4]), "bias": f32([-inf, -inf], [0, 0]),
             "grad_yp": f32([1, 2], [1, 3])}
    for o in outputs(g, feeds).values():
        assert_bits(o["grad_x"][0], f32(0, 0))
        assert not np.isnan(o["grad_x"]).any()


# -- SDPA with a bool mask, exported ------------------------------------------------------------

def _sdpa_export(dynamo: bool):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    if dynamo:
        pytest.importorskip("onnxscript")
    nn = torch.nn

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x, mask, eager_min=False):
            q, k, v = self.q(x), self.k(x), self.v(x)
            if not eager_min:
                return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            # what the dynamo export writes: the bool mask as a finfo.min bias (§27.4)
            bias = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
            return torch.softmax(q @ k.transpose(-1, -2) * 0.5 + bias, -1) @ v

    torch.manual_seed(0)
    model = Attn()
    x = torch.randn(1, 1, 3, 4)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, (x, mask), dynamo=True, input_names=["x", "mask"],
                              output_names=["y"], verbose=False).save(buf)
        else:
            torch.onnx.export(model, (x, mask), buf, dynamo=False, input_names=["x", "mask"],
                              output_names=["y"], training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
    return model, x, mask, buf.getvalue()


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_sdpa_bool_mask_exports_train_like_pytorch(dynamo):
    """Row 1 is fully masked. The TorchScript export writes SDPA's -inf bias and the IsNaN
    guard: gradc's gradients are PyTorch SDPA's (finite, the row's 0). The dynamo export writes
    a finfo.min bias (the row becomes the mean of V, as onnxruntime computes it): gradc follows
    the file, and matches PyTorch's eager attention with that bias."""
    import onnx  # lazy: optional, skipped above when absent
    from onnx_import_helpers import run_ort  # lazy: needs onnxruntime, present with onnx

    model, x, mask, data = _sdpa_export(dynamo)
    m = onnx.load_from_string(data)
    assert {"IsNaN", "Where", "Softmax"} <= {n.op_type for n in m.graph.node}
    g = gradc.from_onnx(m)
    assert "is_nan" in {n.op for n in g.nodes}
    t = gradc.grad(g, "parameters")
    feeds = {"x": x.numpy(), "mask": mask.numpy(), "grad_y": np.ones((1, 1, 3, 4), np.float32)}
    y = model(x, mask, eager_min=dynamo)
    y.sum().backward()
    ort_y = run_ort(m, {"x": feeds["x"], "mask": feeds["mask"]})["y"]
    np.testing.assert_allclose(ort_y, y.detach().numpy(), rtol=1e-5, atol=1e-6)
    for target in ("reference", "c"):
        got = compile_for(t, target)(**feeds)
        np.testing.assert_allclose(got["y"], y.detach().numpy(), rtol=1e-5, atol=1e-6)
        for name, p in model.named_parameters():
            gname, flip = _parameter_of(g, name, p.detach().numpy())
            dp = got[f"grad_{gname}"].T if flip else got[f"grad_{gname}"]
            assert not np.isnan(dp).any(), name
            np.testing.assert_allclose(dp, p.grad.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{target} {name}")


def _parameter_of(g: gradc.Graph, name: str, value: np.ndarray) -> tuple[str, bool]:
    """The graph parameter holding a PyTorch parameter: by name, else by value (the dynamo
    exporter stores Linear weights transposed, as ``val_<n>``); whether it is transposed."""
    if any(p.name == name for p in g.parameters):
        return name, False
    for p in g.parameters:
        if p.value is not None and p.value.shape == value.T.shape and (p.value == value.T).all():
            return p.name, True
    raise AssertionError(f"no parameter of the graph holds {name}")
