"""gather and gather_grad (SPEC-transformers.md §26): the §30.3 vectors on every target, the
§30.9 rejected arguments (V-60..V-64), every dtype copied bit for bit, out-of-range indices as
an InputError with §26.3's message on every target (nothing produced, a Trainer's state
untouched, the C target's in-place writes after its checks), the slow oracle, PyTorch's
embedding and index_select (bit for bit, autograd included), and the importer's Gather."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from helpers import assert_bits, assert_c_compiles_cleanly, compile_for, cuda_targets, run
import slow_reference_transformers as slow

CPU_TARGETS = ("reference", "numpy", "c", "onnx")
# the cuda target through its host harness, and on the GPU with GRADC_TEST_CUDA set (its random
# cases: test_cuda_transformers.py, many layouts in one build)
TARGETS = CPU_TARGETS + cuda_targets()
F32 = np.float32
i64 = np.int64


def gather(target, x, idx, axis=0):
    return run(lambda a, i: ops.gather(a, i, axis=axis), x, idx, target=target)[0]


def gather_grad(target, dy, idx, sizes, axis=0):
    return run(lambda d, i: ops.gather_grad(d, i, sizes, axis=axis), dy, idx, target=target)[0]


# -- §30.3 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_t_ga_1(target):
    x, idx = np.arange(12, dtype=F32).reshape(3, 4), np.array([2, 0, 2], i64)
    assert_bits(gather(target, x, idx), x[[2, 0, 2]])
    assert_bits(gather_grad(target, np.ones((3, 4), F32), idx, (3, 4)),
                np.array([[1] * 4, [0] * 4, [2] * 4], F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_ga_2_negative_indices_on_axis_1(target):
    x, idx = np.array([[1, 2, 3], [4, 5, 6]], F32), np.array([[-1, 0], [1, -3]], np.int32)
    assert_bits(gather(target, x, idx, axis=1),
                np.array([[[3, 1], [2, 1]], [[6, 4], [5, 4]]], F32))
    dy = np.arange(8, dtype=F32).reshape(2, 2, 2)
    assert_bits(gather_grad(target, dy, idx, (2, 3), axis=1), np.array([[4, 2, 0], [12, 6, 4]],
                                                                        F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_ga_3_rank_0_indices(target):
    x = np.array([[1, 2], [3, 4], [5, 6]], F32)
    assert_bits(gather(target, x, np.array(1, i64)), np.array([3, 4], F32))
    assert_bits(gather(target, x, np.array(-1, i64), axis=1), np.array([2, 4, 6], F32))
    assert_bits(gather_grad(target, np.array([10, 20], F32), np.array(1, i64), (3, 2)),
                np.array([[0, 0], [10, 20], [0, 0]], F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_ga_4_order_of_occurrence(target):
    dy = np.array([[1], [2.0 ** -24], [2.0 ** -24]], F32)
    got = gather_grad(target, dy, np.array([0, 0, 0], i64), (2, 1))
    want = np.array([[1], [0]], F32)  # ((0 + 1) + 2^-24) + 2^-24; reversed: 1.0000001
    if target == "onnx":  # ScatterND leaves the order of duplicates open: §9.5's bound, n = 3
        assert np.abs(got - want).max() <= 4 * 2.0 ** -23 * (1 + 2 * 2.0 ** -24)
    else:
        assert_bits(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_t_ga_5_float16_accumulates_in_float32(target):
    dy = np.array([2048, 1, 1], np.float16)
    assert_bits(gather_grad(target, dy, np.array([0, 0, 0], i64), (1,)),
                np.array([2050], np.float16))


@pytest.mark.parametrize("target", TARGETS)
def test_t_ga_6_integers_and_bools(target):
    assert_bits(gather(target, np.array([10, 20, 30], i64), np.array([2, 2, 0], i64)),
                np.array([30, 30, 10], i64))
    assert_bits(gather(target, np.array([[True, False], [False, False]]), np.array([1, 0], i64)),
                np.array([[False, False], [True, False]]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("idx,message", [
    ([0, 3], "gather: indices[1] = 3: expected an index in -3..2 (input.shape[axis] = 3)"),
    ([-4, 0], "gather: indices[0] = -4: expected an index in -3..2 (input.shape[axis] = 3)"),
])
def test_t_ga_7_out_of_range_is_an_input_error(target, idx, message):
    with pytest.raises(gradc.InputError) as info:
        gather(target, np.zeros((3, 2), F32), np.array(idx, i64))
    assert str(info.value) == message


@pytest.mark.parametrize("target", TARGETS)
def test_the_first_bad_index_in_row_major_order_of_gather_grad(target):
    idx = np.array([[0, 1], [-6, 5]], np.int32)  # both bad: [1, 0] comes first
    with pytest.raises(gradc.InputError) as info:
        gather_grad(target, np.ones((2, 2, 4), F32), idx, (5, 4))
    assert str(info.value) == ("gather_grad: indices[1, 0] = -6: expected an index in -5..4 "
                               "(output_sizes[axis] = 5)")
    with pytest.raises(gradc.InputError, match=r"^gather: indices = 7: expected an index in "
                                               r"-4\.\.3 \(input.shape\[axis\] = 4\)$"):
        gather(target, np.zeros((2, 4), F32), np.array(7, i64), axis=1)


@pytest.mark.parametrize("target", TARGETS)
def test_the_first_failing_check_in_graph_order_names_the_error(target):
    """A gather whose result is only an output (a kernel nothing reads, which the cuda target's
    schedule sends to the end with the parameter updates) and, after it, a gather_grad of the
    same indices: both fail, and the error is the gather's, the first in the graph's order, on
    every target (fuzz seed 9797 found the cuda target naming the gather_grad's)."""
    g = gradc.Graph("two_checks")
    x = g.input("x", "float32", (2, 3))
    idx = g.input("idx", "int32", (4,))
    dy = g.input("dy", "float32", (4, 3))
    g.output(ops.gather(x, idx), "y")
    g.output(ops.add(ops.gather_grad(dy, idx, (2, 3)), x), "dx")  # read: not a sink
    feeds = {"x": np.ones((2, 3), F32), "idx": np.array([-2**31, 0, 1, 0], np.int32),
             "dy": np.ones((4, 3), F32)}
    with pytest.raises(gradc.InputError) as info:
        compile_for(g, target)(**feeds)
    assert str(info.value) == ("gather: indices[0] = -2147483648: expected an index in -2..1 "
                               "(input.shape[axis] = 2)")


# -- every dtype, bit for bit -------------------------------------------------------------------
DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32",
          "uint16", "uint8", "bool"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_is_copied_bit_for_bit(target, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 200, (4, 3, 2)).astype(dtype)
    if x.dtype.kind == "f":  # -0.0 and NaN payloads survive the copy
        bits = x.view(f"u{x.dtype.itemsize}")
        bits[0, 0, 0] = np.array(-0.0, dtype).view(bits.dtype)
        bits[1, 1, 1] = np.array(np.nan, dtype).view(bits.dtype) | 5
    idx = np.array([[1, -1], [0, 1]], np.int32)
    for axis in (0, 1, 2):
        assert_bits(gather(target, x, idx, axis=axis), np.take(x, idx % x.shape[axis],
                                                               axis=axis))


# -- §30.9 V-60..V-64 -------------------------------------------------------------------------
def _v(*specs):
    g = gradc.Graph("v")
    return [g.input(f"a{i}", d, s) for i, (d, s) in enumerate(specs)]


REJECTED = [
    ("V-60", lambda: ops.gather(*_v(("float32", (3, 4)), ("float32", (2,)))), "indices.dtype"),
    ("V-61", lambda: ops.gather(*_v(("float32", (3, 4)), ("int64", (2,))), axis=2), "axis"),
    ("V-62", lambda: ops.gather(*_v(("float32", (2,) * 8), ("int64", (2, 2)))), "indices.rank"),
    ("V-63", lambda: ops.gather_grad(*_v(("int32", (2, 4)), ("int64", (2,))), (5, 4)),
     "input_gradient.dtype"),
    ("V-64", lambda: ops.gather_grad(*_v(("float32", (2, 4)), ("int64", (3,))), (5, 4)),
     "input_gradient.shape"),
    ("rank 0 input", lambda: ops.gather(*_v(("float32", ()), ("int64", (2,)))), "input.rank"),
    ("uint indices", lambda: ops.gather(*_v(("float32", (3,)), ("uint32", (2,)))),
     "indices.dtype"),
    ("axis bool", lambda: ops.gather(*_v(("float32", (3,)), ("int64", (2,))), axis=True), "axis"),
    ("sizes empty", lambda: ops.gather_grad(*_v(("float32", (2,)), ("int64", (2,))), ()),
     "output_sizes"),
    ("sizes 0", lambda: ops.gather_grad(*_v(("float32", (2,)), ("int64", (2,))), (0,)),
     "output_sizes[0]"),
    ("grad axis", lambda: ops.gather_grad(*_v(("float32", (2,)), ("int64", (2,))), (3,), axis=1),
     "axis"),
]


@pytest.mark.parametrize("call,field", [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_rejected_arguments_name_their_field(call, field):
    with pytest.raises(gradc.VerifyError) as info:
        call()
    op = str(info.value).split(":")[0]
    assert str(info.value).startswith(f"{op}: {field}: expected"), str(info.value)


# -- the slow oracle and PyTorch ---------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(st.data())
def test_targets_are_the_slow_oracle(data):
    """gather bit for bit everywhere; gather_grad bit for bit on reference, numpy and c, within
    §9.5's bound (n = occurrences) on onnx; symbolic leading dims on the c target."""
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(0, rank - 1))
    ishape = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    dtype = data.draw(st.sampled_from([np.float32, np.float16, np.float64]))
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    size = shape[axis]
    idx = rng.integers(-size, size, ishape).astype(data.draw(st.sampled_from([i64, np.int32])))
    x = rng.standard_normal(shape).astype(dtype)
    want = slow.gather(x, idx, axis)
    out_shape = want.shape
    dy = (rng.standard_normal(out_shape) * 100).astype(dtype)
    wgrad = slow.gather_grad(dy, idx, shape, axis)
    occ = np.zeros(size)
    np.add.at(occ, idx.reshape(-1) % size, 1)
    for target in CPU_TARGETS:
        assert_bits(gather(target, x, idx, axis), want)
        got = gather_grad(target, dy, idx, shape, axis)
        if target == "onnx":
            s = slow.gather_grad(np.abs(dy).astype(np.float64), idx, shape, axis)
            n = np.expand_dims(occ, tuple(a for a in range(rank) if a != axis))
            eps = {4: 2.0 ** -23, 8: 2.0 ** -52}.get(np.dtype(dtype).itemsize)
            tol = 2.0 ** -9 * s if eps is None else (n + 1) * eps * s
            tol = tol + 2.0 ** -24
            assert (np.abs(got.astype(np.float64) - wgrad) <= tol).all()
        else:
            assert_bits(got, wgrad)


torch = pytest.importorskip("torch")


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10 ** 6), st.sampled_from([0, 1, 2]))
def test_pytorch_embedding_and_index_select_bit_for_bit(seed, axis):
    """Forward and autograd: PyTorch's CPU embedding and index_select backward add in order of
    occurrence, as gather_grad does (repeated token ids included)."""
    rng = np.random.default_rng(seed)
    shape = (5, 6, 7)
    x = (rng.standard_normal(shape) * 10).astype(F32)
    idx = rng.integers(0, shape[axis], (3, 4)) if axis == 0 else rng.integers(0, shape[axis], 9)
    tx = torch.tensor(x, requires_grad=True)
    if axis == 0:
        y = torch.nn.functional.embedding(torch.tensor(idx), tx.reshape(5, 42))
    else:
        y = torch.index_select(tx, axis, torch.tensor(idx))
    dy = (rng.standard_normal(tuple(y.shape)) * 100).astype(F32)
    (dx,) = torch.autograd.grad(y, [tx], torch.tensor(dy))
    xs = x.reshape(5, 42) if axis == 0 else x
    for target in ("reference", "c"):
        assert_bits(gather(target, xs, idx, axis=axis), y.detach().numpy())
        got = gather_grad(target, dy, idx, xs.shape, axis=axis)
        assert_bits(got, dx.numpy().reshape(xs.shape))


def test_vjp_against_finite_differences():
    """d(input) = gather_grad; gather_grad's own VJP is gather (float64)."""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((2, 2, 3))
    idx = np.array([[3, 0], [3, -1]], i64)
    g = gradc.Graph("fd")
    X, I = g.input("x", "float64", (4, 3)), g.input("i", "int64", (2, 2))
    y = ops.gather(X, I)
    z = ops.gather(ops.gather_grad(ops.mul(y, y), I, (4, 3)), I, axis=0)
    g.output(ops.reduce_sum(ops.mul(z, ops.constant(w))), "loss")
    dx = gradc.compile(gradc.grad(g, wrt=["x"]), target="reference")(
        x=x, i=idx, grad_loss=np.ones((), np.float64))["grad_x"]
    f = gradc.compile(g, target="reference")
    fd = np.zeros_like(x)
    for k in np.ndindex(*x.shape):
        up, dn = x.copy(), x.copy()
        up[k] += 1e-6
        dn[k] -= 1e-6
        fd[k] = (f(x=up, i=idx)["loss"] - f(x=dn, i=idx)["loss"]) / 2e-6
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)


def test_integer_and_bool_inputs_get_no_gradient():
    g = gradc.Graph("ints")
    t, i = g.input("t", "int32", (4, 2)), g.input("i", "int64", (3,))
    y = ops.gather(t, i)
    g.output(ops.cast(y, "float32"), "y")
    grad = gradc.grad(g, wrt=[])
    assert not any(n.op == "gather_grad" for n in grad.nodes)


def test_the_c_source_compiles_cleanly(tmp_path):
    g = gradc.Graph("gather")
    x, i = g.input("x", "float16", ("N", 5, 3)), g.input("i", "int32", (2, 2))
    y = ops.gather(x, i, axis=1)
    g.output(y, "y")
    g.output(ops.gather_grad(y, i, ("N", 5, 3), axis=1), "dx")
    g.output(ops.gather(x, g.input("k", "int64", ()), axis=2), "z")
    assert_c_compiles_cleanly(g, tmp_path)


def test_the_numpy_module_raises_its_own_input_error():
    """The generated module stands alone: it raises its InputError (a ValueError)."""
    g = gradc.Graph("emb")
    g.output(ops.gather(g.input("w", "float32", (3, 2)), g.input("i", "int64", (2,))), "y")
    ex = gradc.compile(g, target="numpy")
    namespace: dict = {}
    exec(compile(ex.source, "<m>", "exec"), namespace)
    with pytest.raises(namespace["InputError"], match=r"indices\[1\] = 3"):
        namespace["ENTRY"](np.zeros((3, 2), F32), np.array([0, 3], i64))
    assert issubclass(namespace["InputError"], ValueError)


# -- conformance (docs/conformance.md) ---------------------------------------------------------
def test_conformance_peers_on_bad_and_negative_indices():
    """gradc: InputError for an index outside [-size, size), negative ones from the end.
    PyTorch's embedding and index_select raise IndexError for both (advanced indexing counts a
    negative one from the end); onnxruntime's Gather counts from the end and refuses the rest."""
    w = np.arange(6, dtype=F32).reshape(3, 2)
    assert_bits(gather("reference", w, np.array([-1, 0], i64)), w[[2, 0]])
    for idx in ([0, 3], [-1, 0]):
        with pytest.raises(IndexError, match="index out of range in self"):
            torch.nn.functional.embedding(torch.tensor(idx), torch.tensor(w))
        with pytest.raises(IndexError, match="index out of range in self"):
            torch.index_select(torch.tensor(w), 0, torch.tensor(idx))
    from onnx import helper as oh
    from onnx_import_helpers import make, run_ort
    m = make([oh.make_node("Gather", ["w", "i"], ["y"])], {"w": (F32, [3, 2]),
                                                         "i": (i64, [2])}, {"y": F32})
    assert_bits(run_ort(m, {"w": w, "i": np.array([-1, 0])})["y"], w[[2, 0]])
    with pytest.raises(Exception, match=r"idx=3 must be within the inclusive range \[-3,2\]"):
        run_ort(m, {"w": w, "i": np.array([0, 3])})


def test_gradc_check_draws_indices_in_range(capsys):
    """``gradc check`` feeds random inputs: a gather's indices are drawn in its valid range."""
    from gradc.check import random_inputs, run_check
    g = gradc.Graph("emb")
    w, ids = g.input("w", "float32", (5, 3)), g.input("ids", "int64", ("N", 7))
    g.output(ops.mul(ops.gather(w, ids), ops.gather(w, ids)), "y")
    feeds = random_inputs(g, {"N": 40})
    assert feeds["ids"].min() >= -5 and feeds["ids"].max() <= 4
    assert run_check(g, grad=True, shapes={"N": 3}) == 0


@pytest.mark.parametrize("target", TARGETS)
def test_symbolic_dims_and_a_symbolic_indexed_axis(target):
    """gather/gather_grad across a symbolic batch axis, and along it (output_sizes[axis] is
    the symbol N: the range check and the zeros take its bound value)."""
    rng = np.random.default_rng(7)
    g = gradc.Graph("sym")
    x, i = g.input("x", "float32", ("N", 5, 3)), g.input("i", "int32", (2, 2))
    y = ops.gather(x, i, axis=1)
    g.output(ops.gather_grad(ops.mul(y, y), i, ("N", 5, 3), axis=1), "dx")
    r = g.input("r", "int64", (3,))
    rows = ops.gather(x, r)
    g.output(ops.gather_grad(rows, r, ("N", 5, 3)), "dr")
    ex = compile_for(g, target)
    xs = rng.standard_normal((4, 5, 3)).astype(F32)
    feeds = {"x": xs, "i": np.array([[4, -5], [0, 4]], np.int32), "r": np.array([3, -4, 3])}
    got = ex(**feeds)
    want = gradc.compile(g, target="reference")(**feeds)
    for k in want:
        if target == "onnx":
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
        else:
            assert_bits(got[k], want[k])
    with pytest.raises(gradc.InputError, match=r"^gather: indices\[1\] = -5: expected an index "
                                               r"in -4\.\.3 \(input.shape\[axis\] = 4\)$"):
        ex(**{**feeds, "r": np.array([0, -5, 1])})


def test_text_ir_round_trip():
    g = gradc.Graph("t")
    x, i = g.input("x", "float32", ("N", 5)), g.input("i", "int32", (2,))
    y = ops.gather(x, i, axis=-1)
    g.output(ops.gather_grad(y, i, ("N", 5), axis=1), "dx")
    g.output(ops.mean_variance_normalization(x, None, g.input("b", "float32", (5,))), "z")
    text = str(g)
    assert "gather(%x, %i) {axis = 1}" in text
    assert gradc.parse(text) == g
