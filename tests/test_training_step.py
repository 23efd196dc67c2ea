"""gradc.training_step and gradc.Trainer (API.md "Training steps"): the step graph's interface,
its numbers against a slow NumPy step and torch.optim, running statistics, dropout state,
fusion, the C target's in-place update, state_dict/save/load and export."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gradc
from gradc import ops
from gradc.ir.ops.batch_norm import running_statistics
from gradc.trainer import inference_graph

F32 = np.float32


def mlp(seed: int = 0, batch: int | str = "N") -> gradc.Graph:
    """x (N, 3) -> gemm (5) -> relu -> gemm (4): logits."""
    r = np.random.default_rng(seed)
    g = gradc.Graph("mlp")
    x = g.input("x", "float32", (batch, 3))
    w1 = g.parameter("w1", r.standard_normal((5, 3)).astype(F32))
    b1 = g.parameter("b1", (r.standard_normal((1, 5)) * 0.1).astype(F32))
    w2 = g.parameter("w2", r.standard_normal((4, 5)).astype(F32))
    b2 = g.parameter("b2", np.zeros((1, 4), F32))
    with g:
        h = ops.relu(ops.gemm(x, w1, b1, trans_b=True))
        y = ops.gemm(h, w2, b2, trans_b=True)
    g.output(y, "y")
    return g


def bn_mlp(seed: int = 0, unbiased: bool = True) -> gradc.Graph:
    """x (N, 3) -> gemm -> training-mode batch norm (running statistics as state outputs) ->
    relu -> gemm: logits, then rm.next and rv.next."""
    r = np.random.default_rng(seed)
    g = gradc.Graph("bn_mlp")
    x = g.input("x", "float32", ("N", 3))
    w1 = g.parameter("w1", r.standard_normal((5, 3)).astype(F32))
    scale = g.parameter("scale", np.ones((1, 5), F32))
    bias = g.parameter("bias", np.zeros((1, 5), F32))
    rm = g.parameter("rm", np.zeros((1, 5), F32))
    rv = g.parameter("rv", np.ones((1, 5), F32))
    w2 = g.parameter("w2", r.standard_normal((4, 5)).astype(F32))
    with g:
        h = ops.gemm(x, w1, trans_b=True)
        y, mean, var = ops.batch_normalization_training(h, scale, bias, epsilon=1e-5)
        new_rm, new_rv = running_statistics(h, mean, var, rm, rv, 0.9, unbiased=unbiased)
        out = ops.gemm(ops.relu(y), w2, trans_b=True)
    g.output(out, "y")
    g.output(new_rm, "rm.next")
    g.output(new_rv, "rv.next")
    return g


def batch(seed: int, n: int = 6) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return {"x": r.standard_normal((n, 3)).astype(F32),
            "labels": r.integers(0, 4, n).astype(np.int64)}


# -- the step graph's interface ---------------------------------------------------------------

def test_interface_adam_order_and_names():
    s = gradc.training_step(mlp(), gradc.optim.Adam(lr=0.01), loss="cross_entropy")
    assert [v.name for v in s.inputs] == ["x", "labels", "step"]
    assert [(v.type.dtype.name, v.type.shape) for v in s.inputs[1:]] == [
        ("int64", ("N",)), ("int64", (1,))]
    names = ["w1", "b1", "w2", "b2"]
    assert [p.name for p in s.parameters] == names + [
        f"{n}.{k}" for n in names for k in ("exp_avg", "exp_avg_sq")]
    assert [v.name for v in s.outputs] == ["loss"] + [p.name + ".next" for p in s.parameters]
    for p in s.parameters[4:]:
        assert not p.value.any()  # optimizer state starts at zeros


def test_interface_sgd_frozen_list_and_mse():
    g = mlp()
    s = gradc.training_step(g, gradc.optim.SGD(0.1, momentum=0.5), loss="mse",
                            parameters=["w2", "w1"], frozen=["w1"])
    assert [v.name for v in s.inputs] == ["x", "target", "step"]
    assert s.inputs[1].type == g.outputs[0].type
    assert [p.name for p in s.parameters] == ["w2", "w2.momentum_buffer"]
    # Frozen and unselected parameters are constants of the step graph.
    consts = [n.attrs["value"] for n in s.nodes if n.op == "constant"]
    assert any(c.shape == (5, 3) and np.array_equal(c, g.parameters[0].value) for c in consts)
    plain = gradc.training_step(g, gradc.optim.SGD(0.1), loss="mse")
    assert [p.name for p in plain.parameters] == ["w1", "b1", "w2", "b2"]  # no momentum state


def test_loss_none_uses_the_first_output():
    lg = gradc.Graph("with_loss")
    x = lg.input("x", "float32", (4, 3))
    t = lg.input("t", "float32", (4, 2))
    w = lg.parameter("w", np.ones((2, 3), F32))
    with lg:
        loss = ops.mean_squared_error(ops.gemm(x, w, trans_b=True), t)
    lg.output(loss, "l")
    s = gradc.training_step(lg, gradc.optim.SGD(0.5))
    assert [v.name for v in s.inputs] == ["x", "t", "step"]
    xs = np.arange(12, dtype=F32).reshape(4, 3) / 10
    ts = np.ones((4, 2), F32)
    out = gradc.compile(s, "reference")(x=xs, t=ts, step=np.array([1]))
    # Slow reference: loss = mean((x w^T - t)^2), dL/dw = 2/8 * (x w^T - t)^T x.
    d = xs.astype(np.float64) @ np.ones((3, 2)) - 1
    np.testing.assert_allclose(out["loss"], (d ** 2).mean(), rtol=1e-6)
    np.testing.assert_allclose(out["w.next"], 1 - 0.5 * (2 / 8) * d.T @ xs, rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    ({"loss": "hinge"}, "loss: expected None, 'cross_entropy' or 'mse'"),
    ({"loss": None}, "first output .* to be the loss"),
    ({"parameters": ["nope"]}, r"parameters\[0\]: expected a name or pattern that matches"),
    ({"parameters": "some"}, "parameters: expected 'all' or a list"),
    ({"parameters": ["w1", "w2"], "frozen": ["w?"]}, "expected at least one trained"),
    ({"frozen": ["nope"]}, r"frozen\[0\]: expected a name or pattern that matches"),
    ({"frozen": "w1"}, "frozen: expected a list"),
    ({"seed": -1}, "seed: expected an int"),
    ({"seed": 2**64}, "seed: expected an int"),
])
def test_bad_arguments_name_the_field(kwargs, match):
    kwargs.setdefault("loss", "cross_entropy")
    with pytest.raises(gradc.VerifyError, match=match):
        gradc.training_step(mlp(), gradc.optim.SGD(0.1), **kwargs)


def test_bad_optimizer_and_name_clashes():
    with pytest.raises(gradc.VerifyError, match="optimizer: expected gradc.optim"):
        gradc.training_step(mlp(), "sgd", loss="cross_entropy")
    g = mlp()
    g.input("labels", "int64", ("N",))
    with pytest.raises(gradc.VerifyError, match="'labels'"):
        gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy")
    g = mlp()
    g.input("step", "int64", (1,))
    with pytest.raises(gradc.VerifyError, match="'step'"):
        gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy")
    g = mlp()
    g.parameter("w1.exp_avg", np.zeros(2, F32))
    with pytest.raises(gradc.VerifyError, match="w1.exp_avg"):
        gradc.training_step(g, gradc.optim.Adam(), loss="cross_entropy")


def test_integer_parameters_are_not_trained():
    g = mlp()
    g.parameter("table", np.arange(3))
    s = gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy")
    assert "table" not in [p.name for p in s.parameters]
    with pytest.raises(gradc.VerifyError, match="only floating-point parameters"):
        gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy",
                            parameters=["table"])


# -- numbers ---------------------------------------------------------------------------------

def _slow_sgd_step(params: dict, x: np.ndarray, labels: np.ndarray, lr: float) -> tuple:
    """The MLP's cross-entropy loss and one plain SGD step in float64 NumPy, by hand."""
    w1, b1, w2, b2 = (params[k].astype(np.float64) for k in ("w1", "b1", "w2", "b2"))
    x = x.astype(np.float64)
    a = x @ w1.T + b1
    h = np.maximum(a, 0)
    y = h @ w2.T + b2
    z = y - y.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    n = len(labels)
    loss = -logp[np.arange(n), labels].mean()
    dy = np.exp(logp)
    dy[np.arange(n), labels] -= 1
    dy /= n
    gw2, gb2 = dy.T @ h, dy.sum(0, keepdims=True)
    da = (dy @ w2) * (a > 0)
    gw1, gb1 = da.T @ x, da.sum(0, keepdims=True)
    new = {"w1": w1 - lr * gw1, "b1": b1 - lr * gb1, "w2": w2 - lr * gw2, "b2": b2 - lr * gb2}
    return loss, new


@pytest.mark.parametrize("target", ["reference", "numpy", "c", "onnx"])
def test_sgd_steps_match_a_slow_numpy_step(target):
    g = mlp(1)
    tr = gradc.Trainer(g, gradc.optim.SGD(0.2), loss="cross_entropy", target=target)
    params = {p.name: p.value.copy() for p in g.parameters}
    for i in range(3):
        b = batch(i)
        loss = tr.step(**b)
        want, params = _slow_sgd_step(params, b["x"], b["labels"], 0.2)
        assert loss == pytest.approx(want, rel=1e-5)  # float32 vs float64: a few ulps a step
        for k, v in tr.parameters.items():
            np.testing.assert_allclose(v, params[k], rtol=1e-4, atol=1e-5, err_msg=k)
            params[k] = v  # continue from gradc's float32 values: no drift between steps
    assert tr.steps == 3


@pytest.mark.parametrize("opt", [
    lambda: gradc.optim.SGD(0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
    lambda: gradc.optim.SGD(0.1, momentum=0.9, nesterov=True),
    lambda: gradc.optim.Adam(lr=0.05, weight_decay=0.01),
    lambda: gradc.optim.AdamW(lr=0.05, betas=(0.8, 0.99), eps=1e-6),
])
def test_matches_torch_optim(opt):
    torch = pytest.importorskip("torch")
    o = opt()
    g = mlp(2)
    tr = gradc.Trainer(g, o, loss="cross_entropy", target="c")
    p = {q.name: torch.tensor(q.value.copy(), requires_grad=True) for q in g.parameters}
    if isinstance(o, gradc.optim.SGD):
        topt = torch.optim.SGD(p.values(), lr=o.lr, momentum=o.momentum,
                               dampening=o.dampening, weight_decay=o.weight_decay,
                               nesterov=o.nesterov)
    else:
        cls = torch.optim.AdamW if isinstance(o, gradc.optim.AdamW) else torch.optim.Adam
        topt = cls(p.values(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
    for i in range(10):
        b = batch(i)
        x = torch.tensor(b["x"])
        y = torch.relu(x @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"]
        tl = torch.nn.functional.cross_entropy(y, torch.tensor(b["labels"]))
        topt.zero_grad()
        tl.backward()
        topt.step()
        loss = tr.step(**b)
        # float32 on both sides, different summation orders: a few ulps per step, growing.
        assert loss == pytest.approx(tl.item(), rel=1e-5, abs=1e-6), i
    for k, v in tr.parameters.items():
        np.testing.assert_allclose(v, p[k].detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_targets_agree_bit_for_bit():
    """c, numpy and reference keep the reference's roundings: the same state after 3 Adam
    steps, bit for bit (Adam's bias corrections use exp/log: transcendental, but the scalar
    is computed in float64 the same way everywhere here)."""
    runs = {}
    for t in ("reference", "numpy", "c"):
        tr = gradc.Trainer(bn_mlp(), gradc.optim.Adam(lr=0.01), loss="cross_entropy", target=t)
        runs[t] = ([tr.step(**batch(i)) for i in range(3)], tr.state_dict())
    ref_losses, ref_state = runs["reference"]
    for t in ("numpy", "c"):
        losses, state = runs[t]
        assert losses == ref_losses, t
        for k in ref_state:
            np.testing.assert_array_equal(state[k], ref_state[k], err_msg=f"{t}: {k}")


# -- running statistics and dropout --------------------------------------------------------------

def test_running_statistics_are_state_not_trained():
    torch = pytest.importorskip("torch")
    g = bn_mlp(3)
    s = gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy")
    names = [p.name for p in s.parameters]
    assert names == ["w1", "scale", "bias", "rm", "rv", "w2"]
    with pytest.raises(gradc.VerifyError, match="updated by the forward graph"):
        gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy", parameters=["rm"])
    # Frozen layer: its running statistics still update (API.md).
    fz = gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy",
                             frozen=["scale", "bias"])
    assert [p.name for p in fz.parameters] == ["w1", "rm", "rv", "w2"]
    # Against torch.nn.BatchNorm1d (momentum 0.1, unbiased running variance).
    tr = gradc.Trainer(g, gradc.optim.SGD(0.1), loss="cross_entropy", target="c")
    bn = torch.nn.BatchNorm1d(5, eps=1e-5, momentum=0.1)
    w1 = torch.tensor(g.parameters[0].value)
    for i in range(3):
        b = batch(i)
        bn(torch.tensor(b["x"]) @ w1.T)
        tr.step(**b)
        w1 = torch.tensor(tr.parameters["w1"])
    np.testing.assert_allclose(tr.parameters["rm"][0], bn.running_mean.numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(tr.parameters["rv"][0], bn.running_var.numpy(), rtol=1e-5)


def dropout_graph() -> gradc.Graph:
    """An ONNX MLP with a training-mode Dropout: the importer adds rng_state/rng_state_out."""
    from onnx import TensorProto as TP, helper as oh, numpy_helper as nh
    r = np.random.default_rng(0)
    nodes = [oh.make_node("Gemm", ["x", "w"], ["h"], transB=1),
             oh.make_node("Dropout", ["h", "ratio", "train"], ["d"]),
             oh.make_node("Gemm", ["d", "w2"], ["y"], transB=1)]
    inits = [nh.from_array(r.standard_normal((8, 3)).astype(F32), "w"),
             nh.from_array(r.standard_normal((4, 8)).astype(F32), "w2"),
             nh.from_array(np.array(0.5, F32), "ratio"), nh.from_array(np.array(True), "train")]
    graph = oh.make_graph(nodes, "drop", [oh.make_tensor_value_info("x", TP.FLOAT, [6, 3])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, [6, 4])], inits)
    return gradc.from_onnx(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))


def test_dropout_state_becomes_a_parameter_seeded_by_seed():
    g = dropout_graph()
    assert [v.name for v in g.inputs] == ["x", "rng_state"]
    s = gradc.training_step(g, gradc.optim.SGD(0.1), loss="cross_entropy", seed=2**40 + 7)
    assert [v.name for v in s.inputs] == ["x", "labels", "step"]
    assert [p.name for p in s.parameters] == ["w", "w2", "rng_state"]
    np.testing.assert_array_equal(s.parameters[2].value, [0, 0, 0, 0, 7, 256])
    losses = {}
    for seed in (0, 0, 1):
        tr = gradc.Trainer(g, gradc.optim.SGD(0.1), loss="cross_entropy", seed=seed,
                           target="c")
        losses.setdefault(seed, []).append([tr.step(**batch(i)) for i in range(3)])
        # 6 x 8 bits: ceil(48 / 4) = 12 Philox blocks per step.
        assert tr.state_dict()["rng_state"][:4].tolist() == [36, 0, 0, 0]
        assert tr.last_step_bytes["allocated"] == 0  # the state too is updated in place
    assert losses[0][0] == losses[0][1]
    assert losses[0][0] != losses[1][0]


# -- fusion and the in-place C step ---------------------------------------------------------------

def test_each_parameter_update_is_one_elementwise_group():
    s = gradc.training_step(mlp(), gradc.optim.Adam(), loss="cross_entropy")
    groups = [n for n in gradc.optimize(s).graph.nodes
              if any(v.name.endswith(".next") for v in n.outputs)]
    assert [sorted(v.name for v in n.outputs) for n in groups] == [
        sorted([f"{p}.next", f"{p}.exp_avg.next", f"{p}.exp_avg_sq.next"])
        for p in ("w1", "b1", "w2", "b2")]
    assert all(n.op == "fused" and n.attrs["kind"] == "elementwise" for n in groups)


def test_c_trainer_updates_state_in_place():
    tr = gradc.Trainer(bn_mlp(), gradc.optim.Adam(), loss="cross_entropy", target="c")
    total = sum(p.value.nbytes for p in tr.step_graph.parameters)
    # The batch is symbolic (N): the step is compiled for the batch's size.
    assert len(tr.executable_for(**batch(0)).in_place) == len(tr.step_graph.parameters)
    arrays = {k: id(v) for k, v in tr._state.items()}
    tr.step(**batch(0))
    assert tr.last_step_bytes == {"in_place": total, "allocated": 0, "copied": 0}
    assert {k: id(v) for k, v in tr._state.items()} == arrays  # the same arrays, updated
    num = gradc.Trainer(bn_mlp(), gradc.optim.Adam(), loss="cross_entropy", target="numpy")
    num.step(**batch(0))
    assert num.last_step_bytes == {"in_place": 0, "allocated": total, "copied": 0}


def test_c_step_updates_each_parameter_right_after_its_gradient():
    """The C program runs a parameter's update as soon as its gradient exists (``plan.
    hoist_sinks``), not after the whole backward pass: w2's update precedes the product that
    gives w1's gradient, and each update follows the product that gives its own gradient.
    (The weights are above ``SMALL_RESULTS`` elements: smaller kernels all move alike.)"""
    r = np.random.default_rng(0)
    g = gradc.Graph("mlp")
    x = g.input("x", "float32", ("N", 40))
    w1 = g.parameter("w1", (r.standard_normal((48, 40)) * 0.1).astype(F32))
    w2 = g.parameter("w2", (r.standard_normal((30, 48)) * 0.1).astype(F32))
    with g:
        y = ops.gemm(ops.relu(ops.gemm(x, w1, trans_b=True)), w2, trans_b=True)
    g.output(y, "y")
    s = gradc.training_step(g, gradc.optim.Adam(), loss="cross_entropy")
    exe = gradc.compile(s, "c", profile=True)
    feeds = {"x": r.standard_normal((6, 40)).astype(F32), "labels": np.arange(6) % 30}
    exe(**feeds, step=np.array([1]))
    whats = [r["what"] for r in sorted(exe.profile(), key=lambda r: int(r["kernel"][1:]))]

    def at(what: str) -> int:
        return next(i for i, w in enumerate(whats) if w.startswith(what))
    upd = "fused elementwise (sub, mul, add, sqrt, div) -> "
    assert at("gemm -> float32[30x48]") < at(upd + "float32[30x48]") < at("gemm -> float32[48x40]")
    assert at("gemm -> float32[48x40]") < at(upd + "float32[48x40]")
    ref = gradc.compile(s, "reference")(**feeds, step=np.array([1]))
    got = exe(**feeds, step=np.array([1]))
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])


def test_in_place_executable_never_overwrites_its_default_parameters():
    s = gradc.training_step(mlp(), gradc.optim.SGD(0.1), loss="cross_entropy")
    exe = gradc.compile(s, "c", update_in_place={"w1.next": "w1"})
    assert exe.in_place == {"w1.next": "w1"}
    before = exe.parameters["w1"].copy()
    out = exe(**batch(0), step=np.array([1]))
    np.testing.assert_array_equal(exe.parameters["w1"], before)
    mine = before.copy()
    out2 = exe(**batch(0), step=np.array([1]), w1=mine)
    assert out2["w1.next"] is mine
    np.testing.assert_array_equal(mine, out["w1.next"])


def test_in_place_is_refused_where_unsafe_and_reorders_where_needed():
    g = gradc.Graph("g")
    x = g.input("x", "float32", (3, 3))
    with g:
        t = ops.transpose(x, (1, 0))  # reads x at other indices: may not write into x
        d = ops.mul(x, x)  # elementwise, but reduce_sum below still reads x after it
        r = ops.reduce_sum(x, axes=(1,), keepdims=True)
    g.output(t, "t")
    g.output(d, "d")
    g.output(r, "r")
    a = np.arange(9, dtype=F32).reshape(3, 3)
    exe = gradc.compile(g, "c", passes=[], update_in_place={"t": "x", "d": "x"})
    assert exe.in_place == {"d": "x"}
    mine = a.copy()
    out = exe(x=mine)
    assert out["d"] is mine
    np.testing.assert_array_equal(out["t"], a.T)
    np.testing.assert_array_equal(out["d"], a * a)
    np.testing.assert_array_equal(out["r"], a.sum(1, keepdims=True))  # the old x
    with pytest.raises(gradc.GradcError, match="update_in_place"):
        gradc.compile(g, "c", update_in_place=["d"])


# -- Trainer state, files and export -------------------------------------------------------------

def test_resume_from_saved_state_equals_uninterrupted_training(tmp_path):
    g = bn_mlp(4)
    whole = gradc.Trainer(g, gradc.optim.AdamW(lr=0.01), loss="cross_entropy", target="c")
    want = [whole.step(**batch(i)) for i in range(6)]
    first = gradc.Trainer(g, gradc.optim.AdamW(lr=0.01), loss="cross_entropy", target="c")
    got = [first.step(**batch(i)) for i in range(3)]
    path = tmp_path / "state.npz"
    first.save(path)
    with np.load(path) as z:  # a standard .npz other tools read
        assert int(z["step"]) == 3 and "w1.exp_avg_sq" in z.files
    second = gradc.Trainer(g, gradc.optim.AdamW(lr=0.01), loss="cross_entropy",
                           target="numpy")
    second.load(path)
    assert second.steps == 3
    got += [second.step(**batch(i)) for i in range(3, 6)]
    assert got == want
    for k, v in whole.state_dict().items():
        np.testing.assert_array_equal(second.state_dict()[k], v, err_msg=k)


def test_strided_batches_are_accepted_on_the_c_target():
    tr = gradc.Trainer(mlp(), gradc.optim.SGD(0.1), loss="cross_entropy", target="c")
    ref = gradc.Trainer(mlp(), gradc.optim.SGD(0.1), loss="cross_entropy", target="numpy")
    b = batch(3)
    wide = np.zeros((6, 6), F32)
    wide[:, ::2] = b["x"]
    view = wide[:, ::2]  # not C-contiguous
    assert not view.flags.c_contiguous
    assert tr.step(x=view, labels=b["labels"]) == ref.step(**b)


def test_state_dict_errors_change_nothing(tmp_path):
    tr = gradc.Trainer(mlp(), gradc.optim.SGD(0.1), loss="cross_entropy", target="reference")
    tr.step(**batch(0))
    state = tr.state_dict()
    for bad, match in [({**state, "extra": np.zeros(1)}, "unexpected entry 'extra'"),
                       ({k: v for k, v in state.items() if k != "w1"}, "missing entry 'w1'"),
                       ({**state, "w1": np.zeros((2, 2), F32)}, "'w1': expected float32"),
                       ({**state, "step": np.array(-1)}, "'step': expected a non-negative"),
                       ]:
        with pytest.raises(gradc.InputError, match=match):
            tr.load_state_dict(bad)
        np.testing.assert_array_equal(tr.state_dict()["w1"], state["w1"])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(gradc.InputError, match="bad.npz"):
        tr.load(tmp_path / "bad.npz")
    with pytest.raises(gradc.InputError, match="unexpected array 'y'"):
        tr.step(**batch(0), y=np.zeros(1))
    with pytest.raises(gradc.InputError, match="missing array 'labels'"):
        tr.step(x=batch(0)["x"])


def test_save_is_atomic(tmp_path, monkeypatch):
    tr = gradc.Trainer(mlp(), gradc.optim.SGD(0.1), loss="cross_entropy", target="reference")
    path = tmp_path / "s.npz"
    tr.save(path)
    good = path.read_bytes()
    tr.step(**batch(0))

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tr.save(path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["s.npz"]  # no temporary file left


def test_export_is_inference_mode_and_runs_in_onnxruntime(tmp_path):
    g = bn_mlp(5)
    tr = gradc.Trainer(g, gradc.optim.SGD(0.1, momentum=0.9), loss="cross_entropy",
                       target="c")
    for i in range(4):
        tr.step(**batch(i))
    path = tmp_path / "m.onnx"
    tr.export(path)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    assert [o.name for o in m.graph.output] == ["y"]
    assert [i.name for i in m.graph.input] == ["x"]  # the weights are initializers only
    e = tr.inference_graph()
    assert {n.op for n in e.nodes} >= {"batch_normalization"}
    assert "batch_normalization_training" not in {n.op for n in e.nodes}
    # Slow reference: inference with the trained values and the running statistics.
    p = tr.parameters
    x = batch(9)["x"].astype(np.float64)
    h = x @ p["w1"].T
    y = (h - p["rm"]) / np.sqrt(p["rv"] + 1e-5) * p["scale"] + p["bias"]
    want = np.maximum(y, 0) @ p["w2"].T
    sess = ort.InferenceSession(str(path))
    got = sess.run(None, {"x": batch(9)["x"]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_export_drops_dropout():
    g = dropout_graph()
    tr = gradc.Trainer(g, gradc.optim.SGD(0.1), loss="cross_entropy", target="reference")
    tr.step(**batch(0))
    e = tr.inference_graph()
    assert [v.name for v in e.inputs] == ["x"]
    assert "random_generator" not in {n.op for n in e.nodes}
    p = tr.parameters
    x = batch(1)["x"]
    got = gradc.compile(e, "reference")(x=x)["y"]
    np.testing.assert_allclose(got, (x @ p["w"].T) @ p["w2"].T, rtol=1e-5, atol=1e-6)


def test_inference_graph_refuses_batch_norm_without_running_statistics():
    g = bn_mlp()
    bare = gradc.Graph("bare")
    x = bare.input("x", "float32", ("N", 5))
    s = bare.parameter("s", np.ones((1, 5), F32))
    b = bare.parameter("b", np.zeros((1, 5), F32))
    with bare:
        y, _, _ = ops.batch_normalization_training(x, s, b)
    bare.output(y, "y")
    with pytest.raises(gradc.UnsupportedError, match="no inference form"):
        inference_graph(bare, {})
    assert g is not None
