"""gemm (SPEC-training.md §11): vectors, checks, loop oracle, targets, gradients, PyTorch.

- §22.2's vectors on every target, exactly; every §22.12 gemm row and the rest of §11.1's
  checklist name their field;
- the reference against §11.1's pseudocode run element by element, bit for bit, over
  transposes, batch broadcasting, ``c`` broadcasting and the three dtypes; ``numpy`` and ``c``
  bit for bit against the reference (symbolic batch included), ``onnx`` within §9.5's bound;
- finite differences in float64 and PyTorch autograd for §11.2's gradients.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.check import finite_differences
from gradc.ir.ops.gemm import gemm_reference
from helpers import assert_bits, compile_for, cuda_targets, tolerance

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
F16, F32, F64 = np.float16, np.float32, np.float64


def _graph(a, b, c=None, batch=None, **f):
    g = gradc.Graph("gemm")
    ash = a.shape if batch is None else (batch,) + a.shape[1:]
    av, bv = g.input("a", a.dtype.name, ash), g.input("b", b.dtype.name, b.shape)
    cv = None if c is None else g.input("c", c.dtype.name, c.shape)
    g.output(ops.gemm(av, bv, cv, **f), "y")
    return g


def _grads(target, a, b, c, dy, **f):
    t = gradc.grad(_graph(a, b, c, **f))
    feeds = {"a": a, "b": b, "grad_y": dy}
    if c is not None:
        feeds["c"] = c
    return compile_for(t, target, passes=None)(**feeds)


A1 = np.array([[1, 2, 3], [4, 5, 6]], F32)
B1 = np.array([[1, 0], [0, 1], [1, 1]], F32)
DY = np.array([[1, 2], [3, 4]], F32)


# -- §22.2 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_t_gm_1_alpha_beta_and_broadcast_c(target):
    out = _grads(target, A1, B1, np.array([[1, -1]], F32), DY, alpha=2.0, beta=0.5)
    assert_bits(out["y"], np.array([[8.5, 9.5], [20.5, 21.5]], F32))
    assert_bits(out["grad_a"], np.array([[2, 4, 6], [6, 8, 14]], F32))
    assert_bits(out["grad_b"], np.array([[26, 36], [34, 48], [42, 60]], F32))
    assert_bits(out["grad_c"], np.array([[2, 3]], F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_gm_2_transposes(target):
    out = _grads(target, A1.T.copy(), B1.T.copy(), None, DY, trans_a=True, trans_b=True)
    assert_bits(out["y"], np.array([[4, 5], [10, 11]], F32))
    assert_bits(out["grad_a"], np.array([[1, 3], [2, 4], [3, 7]], F32))
    assert_bits(out["grad_b"], np.array([[13, 17, 21], [18, 24, 30]], F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_gm_3_batch_broadcast(target):
    a = np.arange(12, dtype=F32).reshape(2, 2, 3)
    b = np.array([[[1, 0], [0, 1], [1, -1]]], F32)
    out = _grads(target, a, b, None, np.ones((2, 2, 2), F32))
    assert_bits(out["y"], np.array([[[2, -1], [8, -1]], [[14, -1], [20, -1]]], F32))
    assert_bits(out["grad_b"], np.array([[[18, 18], [22, 22], [26, 26]]], F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_gm_4_beta_zero_does_not_read_c(target):
    c = np.array([[np.nan, np.inf]], F32)
    out = _grads(target, A1, B1, c, DY, beta=0.0)
    assert_bits(out["y"], np.array([[4, 5], [10, 11]], F32))
    assert "grad_c" not in out or not np.isnan(out["grad_c"]).any()


# -- §22.12 and the checklist --------------------------------------------------------------

def _types(*shapes, dtypes=None):
    g = gradc.Graph("v")
    dtypes = dtypes or ["float32"] * len(shapes)
    return [g.input(f"x{i}", d, s) for i, (s, d) in enumerate(zip(shapes, dtypes))]


@pytest.mark.parametrize("args, kw, field", [
    ([(2, 3), (4, 2)], {}, "b.shape"),                                     # V-21
    ([(2, 3), (3, 2)], {"dtypes": ["float32", "float16"]}, "b.dtype"),     # V-22
    ([(2, 3), (3, 2), (3, 2)], {}, "c.shape"),                             # V-23
    ([(3,), (3, 2)], {}, "a.rank"),
    ([(2, 3), (3,)], {}, "b.rank"),
    ([(2, 3), (3, 2), (2,)], {}, "c.rank"),
    ([(2, 3), (3, 2), (2, 2)], {"dtypes": ["float32", "float32", "float64"]}, "c.dtype"),
    ([(2, 2, 3), (3, 3, 2)], {}, "b.shape"),                                # batch 2 vs 3
    ([(2, 3), (3, 2)], {"dtypes": ["int32", "int32"]}, "a.dtype"),
])
def test_rejected_arguments_name_their_field(args, kw, field):
    vals = _types(*args, **kw)
    with pytest.raises(gradc.VerifyError, match=rf"gemm: {field}:"):
        ops.gemm(*vals)


@pytest.mark.parametrize("kw, field", [
    ({"trans_a": 1}, "trans_a"), ({"trans_b": "yes"}, "trans_b"),
    ({"alpha": 1e39}, "alpha"), ({"beta": float("nan")}, "beta"), ({"alpha": "2"}, "alpha"),
])
def test_rejected_attributes_name_their_field(kw, field):
    a, b = _types((2, 3), (3, 2))
    with pytest.raises(gradc.VerifyError, match=rf"gemm: {field}:"):
        ops.gemm(a, b, **kw)


def test_symbolic_dims_flow_through_and_alpha_rounds_to_float32():
    g = gradc.Graph("s")
    a, b = g.input("a", "float32", ("N", 3)), g.input("b", "float32", (3, 4))
    c = g.input("c", "float32", (1, 4))
    y = ops.gemm(a, b, c, alpha=0.1)
    assert y.type.shape == ("N", 4)
    assert y.producer.attrs["alpha"] == float(np.float32(0.1))


# -- loop oracle ---------------------------------------------------------------------------

def oracle(A, B, C, trans_a, trans_b, alpha, beta):
    """§11.1's pseudocode, element by element (slow, obviously right)."""
    acc_t = np.float64 if A.dtype == F64 else np.float32
    if trans_a:
        A = np.swapaxes(A, -1, -2)
    if trans_b:
        B = np.swapaxes(B, -1, -2)
    batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    Y = np.empty(batch + (M, N), A.dtype)
    for idx in np.ndindex(*Y.shape):
        b_, m, n = idx[:-2], idx[-2], idx[-1]
        ia = tuple(i if sz != 1 else 0 for i, sz in zip(b_, A.shape[:-2]))
        ib = tuple(i if sz != 1 else 0 for i, sz in zip(b_, B.shape[:-2]))
        acc = acc_t(0)
        for k in range(K):
            acc = acc_t(acc + acc_t(A[ia + (m, k)]) * acc_t(B[ib + (k, n)]))
        y = acc_t(acc_t(alpha) * acc)
        if C is not None and beta != 0:
            ic = tuple(i if sz != 1 else 0 for i, sz in zip(idx, C.shape))
            y = acc_t(y + acc_t(acc_t(beta) * acc_t(C[ic])))
        Y[idx] = y
    return Y


def random_case(rng, dtype, with_c=None):
    """Random (a, b, c, fields) over ranks 2..4, transposes and broadcasts."""
    rank = int(rng.integers(2, 5))
    m, k, n = (int(v) for v in rng.integers(1, 6, 3))
    batch = [int(v) for v in rng.integers(1, 4, rank - 2)]
    ab = [d if rng.random() < 0.6 else 1 for d in batch]
    bb = [d if (rng.random() < 0.6 or a == 1) else 1 for d, a in zip(batch, ab)]
    ta, tb = bool(rng.integers(2)), bool(rng.integers(2))
    a = rng.standard_normal(ab + ([k, m] if ta else [m, k])).astype(dtype)
    b = rng.standard_normal(bb + ([n, k] if tb else [k, n])).astype(dtype)
    out = [max(x, y) for x, y in zip(ab, bb)] + [m, n]
    c = None
    if with_c if with_c is not None else rng.random() < 0.7:
        c = rng.standard_normal([d if rng.random() < 0.5 else 1 for d in out]).astype(dtype)
    f = dict(trans_a=ta, trans_b=tb, alpha=float(rng.choice([1.0, 0.5, -1.25, 3.0])),
             beta=float(rng.choice([1.0, 0.0, 2.0, -0.75])))
    return a, b, c, f


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_reference_matches_the_loop_oracle_bit_for_bit(dtype):
    rng = np.random.default_rng(11)
    for _ in range(30):
        a, b, c, f = random_case(rng, dtype)
        got = gemm_reference(a, b, c, f["trans_a"], f["trans_b"],
                             float(np.float32(f["alpha"])), float(np.float32(f["beta"])))
        assert_bits(got, oracle(a, b, c, f["trans_a"], f["trans_b"], f["alpha"], f["beta"]))


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_targets_agree_with_the_reference(dtype):
    rng = np.random.default_rng(12)
    for _ in range(4):
        a, b, c, f = random_case(rng, dtype)
        g = _graph(a, b, c, **f)
        feeds = {"a": a, "b": b, **({} if c is None else {"c": c})}
        want = gradc.compile(g, target="reference", passes=None)(**feeds)["y"]
        for target in ("numpy", "c") + cuda_targets():
            assert_bits(compile_for(g, target, passes=None)(**feeds)["y"], want)
        got = gradc.compile(g, target="onnx", passes=None)(**feeds)["y"]
        s = np.abs(oracle(np.abs(a).astype(F64), np.abs(b).astype(F64),
                          None if c is None else np.abs(c).astype(F64), f["trans_a"],
                          f["trans_b"], abs(f["alpha"]), abs(f["beta"])))
        k = a.shape[-2] if f["trans_a"] else a.shape[-1]
        tol = tolerance(dtype, s, k + 3)
        assert (np.abs(got.astype(F64) - want.astype(F64)) <= tol).all(), (f, got, want)


def test_symbolic_batch_gradients_agree_on_every_target():
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((3, 4, 5)).astype(F32), rng.standard_normal((1, 5, 2)).astype(F32)
    c = rng.standard_normal((1, 1, 2)).astype(F32)
    t = gradc.grad(_graph(a, b, c, batch="N", alpha=0.5, beta=2.0))
    assert t.outputs[0].type.shape == ("N", 4, 2)
    feeds = dict(a=a, b=b, c=c, grad_y=rng.standard_normal((3, 4, 2)).astype(F32))
    want = gradc.compile(t, target="reference", passes=None)(**feeds)
    for target in ("numpy", "c"):
        got = gradc.compile(t, target=target, passes=None)(**feeds)
        for k in want:
            assert_bits(got[k], want[k])
    got = gradc.compile(t, target="onnx", passes=None)(**feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_c_handles_rows_wider_than_one_accumulator_block():
    rng = np.random.default_rng(14)
    a, b = rng.standard_normal((3, 7)).astype(F32), rng.standard_normal((7, 300)).astype(F32)
    for tb in (False, True):
        bb = b.T.copy() if tb else b
        g = _graph(a, bb, trans_b=tb)
        want = gradc.compile(g, target="reference", passes=None)(a=a, b=bb)["y"]
        assert_bits(gradc.compile(g, target="c", passes=None)(a=a, b=bb)["y"], want)


def test_reference_runs_an_mlp_layer_quickly():
    rng = np.random.default_rng(15)
    a = rng.standard_normal((8, 3072)).astype(F32)
    b = rng.standard_normal((512, 3072)).astype(F32)
    start = time.perf_counter()
    gemm_reference(a, b, None, False, True, 1.0, 1.0)
    assert time.perf_counter() - start < 1.0


# -- gradients -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_vjp_matches_finite_differences(seed):
    a, b, c, f = random_case(np.random.default_rng(100 + seed), F64, with_c=True)
    for name, err, scale in finite_differences(_graph(a, b, c, **f), {}, seed=seed):
        assert err <= 1e-6 * (1 + scale), (name, err, scale, f)


@pytest.mark.parametrize("seed", range(4))
def test_gradients_match_pytorch_autograd(seed):
    torch = pytest.importorskip("torch")
    a, b, c, f = random_case(np.random.default_rng(200 + seed), F64, with_c=True)
    f["alpha"], f["beta"] = float(np.float32(f["alpha"])), float(np.float32(f["beta"]))
    out = gradc.compile(gradc.grad(_graph(a, b, c, **f)), target="reference", passes=None)
    y = gemm_reference(a, b, c, f["trans_a"], f["trans_b"], f["alpha"], f["beta"])
    dy = np.random.default_rng(seed).standard_normal(y.shape)
    got = out(a=a, b=b, c=c, grad_y=dy)
    ta, tb, tc = (torch.tensor(v, requires_grad=True) for v in (a, b, c))
    opa = ta.transpose(-1, -2) if f["trans_a"] else ta
    opb = tb.transpose(-1, -2) if f["trans_b"] else tb
    ty = f["alpha"] * torch.matmul(opa, opb) + f["beta"] * tc
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(got["y"], ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name, t in (("grad_a", ta), ("grad_b", tb), ("grad_c", tc)):
        want = t.grad.numpy()
        if name == "grad_c" and f["beta"] == 0:
            assert name not in got or np.all(got[name] == 0)
            continue
        np.testing.assert_allclose(got[name], want, rtol=1e-12, atol=1e-12)
