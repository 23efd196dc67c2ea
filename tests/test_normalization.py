"""mean_variance_normalization and its gradient (SPEC-transformers.md §24): the §30.1 vectors on
every target, the §30.9 rejected arguments (V-45..V-55), the slow oracle, random agreement of
the targets (reference, numpy and c bit for bit; onnx within §24.4's bound), PyTorch's
layer_norm and rms_norm (within the bound; bit for bit on dyadic data), the VJP rule of §24.3
(its bias cases) against finite differences in float64, and the C kernels' paths."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from helpers import assert_bits, assert_c_compiles_cleanly, compile_for, cuda_targets, run
from normalization_bound import assert_within, backward_bounds, forward_bound
import slow_reference_transformers as slow

# the cuda target through its host harness, and on the GPU with GRADC_TEST_CUDA set (its random
# cases: test_cuda_transformers.py, many layouts in one build)
TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
F32 = np.float32


def f32(*rows):
    return np.array(rows, F32)


def mvn(target, x, scale=None, bias=None, **kw):
    args = [a for a in (x, scale, bias) if a is not None]

    def build(*v):
        s = v[1] if scale is not None else None
        b = v[-1] if bias is not None else None
        return ops.mean_variance_normalization(v[0], s, b, **kw)
    return run(build, *args, target=target)[0]


def mvn_grad(target, x, dy, scale, **kw):
    return run(lambda a, b, c: ops.mean_variance_normalization_grad(a, b, c, **kw), x, dy, scale,
               target=target)


def check(target, got, want, bound):
    """Bits on the exact targets; the bound on onnx (it sums in onnxruntime's order)."""
    if target == "onnx":
        assert_within(got, want, bound)
    else:
        assert_bits(got, want)


# -- §30.1 ------------------------------------------------------------------------------------
X1 = f32([1, 7, 1, 7], [0, 0, 6, 6])
S1, B1 = np.array([1, 2, 0.5, -1], F32), np.array([0, 1, -1, 0.5], F32)
DY1 = f32([1, 2, 3, 4], [-1, 0, 1, 2])


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_1_layer_norm(target):
    """Dyadic: exact on every target (= PyTorch's layer_norm, below)."""
    assert_bits(mvn(target, X1, S1, B1, axes=(1,), epsilon=7),
                f32([-0.75, 2.5, -1.375, -0.25], [-0.75, -0.5, -0.625, -0.25]))
    dx, ds, db = mvn_grad(target, X1, DY1, S1, axes=(1,), epsilon=7)
    assert_bits(dx, f32([0.005859375, 0.931640625, 0.130859375, -1.068359375],
                        [-0.111328125, 0.138671875, 0.298828125, -0.326171875]))
    assert_bits(ds, np.array([0, 1.5, -1.5, 4.5], F32))
    assert_bits(db, np.array([0, 2, 4, 6], F32))


X2, S2 = f32([1, 1, 3, 3], [-1, 1, -3, 3]), np.array([2, 1, 1, 0.5], F32)
DY2 = f32([1, -1, 2, 0], [0.5, 0.5, -1, 1])


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_2_rms_norm(target):
    assert_bits(mvn(target, X2, S2, use_mean=False, epsilon=11),
                f32([0.5, 0.25, 0.75, 0.375], [-0.5, 0.25, -0.75, 0.375]))
    dx, ds, db = mvn_grad(target, X2, DY2, S2, use_mean=False, epsilon=11)
    assert_bits(dx, f32([0.47265625, -0.27734375, 0.41796875, -0.08203125],
                        [0.265625, 0.109375, -0.203125, 0.078125]))
    assert_bits(ds, np.array([0.125, -0.125, 2.25, 0.75], F32))
    assert_bits(db, np.array([1.5, -0.5, 1, 1], F32))


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_3_without_variance(target):
    x, one = f32([1, 2, 3, 6]), np.array([1], F32)
    assert_bits(mvn(target, x, None, one, use_variance=False), f32([-1, 0, 1, 4]))
    dx, ds, db = mvn_grad(target, x, x, np.ones(1, F32), use_variance=False)
    assert_bits(dx, f32([-2, -1, 0, 3]))
    assert_bits(ds, np.array([14], F32))
    assert_bits(db, np.array([12], F32))
    y = mvn(target, x, np.array([2], F32), one, use_mean=False, use_variance=False)
    assert_bits(y, f32([3, 5, 7, 13]))


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_4_two_axes_and_a_broadcast_scale(target):
    x = np.array([[[1, 3], [5, 7]], [[7, 5], [3, 1]]], F32)
    s = np.array([[2], [-1]], F32)
    assert_bits(mvn(target, x, s, axes=(2, 1), epsilon=11),
                np.array([[[-1.5, -0.5], [-0.25, -0.75]], [[1.5, 0.5], [0.25, 0.75]]], F32))
    dy = np.array([[[1, 2], [3, 4]], [[-1, 0], [1, 0]]], F32)
    dx, ds, db = mvn_grad(target, x, dy, s, axes=(2, 1), epsilon=11)
    assert_bits(dx, np.array([[[0.26953125, 0.96484375], [-0.58984375, -0.64453125]],
                              [[-0.25390625, 0.20703125], [-0.08203125, 0.12890625]]], F32))
    assert_bits(ds, np.array([[-2], [3.5]], F32))
    assert_bits(db, np.array([[2], [8]], F32))


X5 = f32([0.1, -1.3, 2.7, 0.5, 3.2], [100, 100.5, 99.5, 100.25, 99.75])
S5, B5 = np.array([1.5, 0.5, -1, 2, 1], F32), np.array([0.25, 0, 0, -0.5, 1], F32)
DY5 = f32([1, -1, 0.5, 2, 0], [0.25, 0.5, -2, 1, 1])
Y5 = f32([-0.5904760956764221, -0.697416365146637, -0.9894968271255493, -1.1437689065933228,
          2.2875380516052246],
         [0.25, 0.7070784568786621, 1.4141569137573242, 0.9141569137573242, 0.2929215431213379])


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_5_the_reference_values(target):
    """The reference's float32 results: bit for bit on the exact targets, the bound on onnx."""
    check(target, mvn(target, X5, S5, B5), Y5, forward_bound(X5, S5, B5, (1,)))
    dx, ds, db = mvn_grad(target, X5, DY5, S5)
    bx, bs, bb = backward_bounds(X5, DY5, S5, (1,))
    check(target, dx, f32([0.22903814911842346, -1.1546753644943237, -0.607393205165863,
                           1.7739722728729248, -0.24094171822071075],
                          [-2.1212353706359863, -1.0607309341430664, 1.0607309341430664,
                           3.1817963123321533, -1.0605610609054565]), bx)
    check(target, ds, np.array([-0.5603173971176147, 2.1019110679626465, 3.3230621814727783,
                                0.06330955028533936, -0.7070784568786621], F32), bs)
    assert_bits(db, np.array([1.25, -0.5, -1.5, 3, 1], F32))


X6, S6, B6, DY6 = [0.5, 1.5, -2, 3], [1, 2, 1, 0.5], [0, 0, 1, 0], [1, 0, -1, 2]


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_6_float16_and_float64(target):
    h = np.float16
    x, s, b, dy = (np.array([v], h) if i in (0, 3) else np.array(v, h)
                   for i, v in enumerate((X6, S6, B6, DY6)))
    check(target, mvn(target, x, s, b),
          np.array([[-0.1373291015625, 0.82421875, -0.5107421875, 0.6181640625]], h),
          forward_bound(x, s, b, (1,)))
    dx, ds, _ = mvn_grad(target, x, dy, s)
    bx, bs, _ = backward_bounds(x, dy, s, (1,))
    check(target, dx, np.array([[0.46142578125, -0.28515625, -0.1451416015625,
                                 -0.031097412109375]], h), bx)
    check(target, ds, np.array([-0.1373291015625, 0, 1.5107421875, 2.47265625], h), bs)
    d = np.float64
    x, s, b, dy = (np.array([v], d) if i in (0, 3) else np.array(v, d)
                   for i, v in enumerate((X6, S6, B6, DY6)))
    check(target, mvn(target, x, s, b),
          np.array([[-0.1373603566124634, 0.8241621396747805, -0.5109639227370975,
                     0.6181216047560854]]), forward_bound(x, s, b, (1,)))
    check(target, mvn_grad(target, x, dy, s)[0],
          np.array([[0.4613233131747123, -0.2850870866244296, -0.1451371063517742,
                     -0.031099120198508474]]), backward_bounds(x, dy, s, (1,))[0])


@pytest.mark.parametrize("target", TARGETS)
def test_t_mvn_7_layer_normalization_with_three_outputs(target):
    """The ONNX LayerNormalization-17 of T-MVN-5, imported with Mean and InvStdDev."""
    from normalization_onnx_cases import layer_norm_case
    m, _ = layer_norm_case(outputs=3, epsilon=1e-5)
    for t in m.graph.initializer:
        t.CopyFrom(__import__("onnx").numpy_helper.from_array(S5 if t.name == "s" else B5,
                                                                t.name))
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 5
    g = gradc.from_onnx(m)
    assert [n.op for n in g.nodes].count("mean_variance_normalization") == 1
    out = compile_for(g, target)(x=X5)
    check(target, out["y"], Y5, forward_bound(X5, S5, B5, (1,)))
    exact = target != "onnx"
    mean, inv = out["mean"].reshape(-1), out["inv"].reshape(-1)
    want_mean, want_inv = np.array([1.0399999618530273, 100], F32), \
        np.array([0.5960823893547058, 2.8283138275146484], F32)
    if exact:
        assert_bits(mean, want_mean)
        assert_bits(inv, want_inv)
    else:
        np.testing.assert_allclose(mean, want_mean, rtol=2e-6)
        np.testing.assert_allclose(inv, want_inv, rtol=2e-6)


# -- §30.9 V-45..V-55 -------------------------------------------------------------------------
def _x(dtype="float32", shape=(2, 4), name="x", g=None):
    g = g or gradc.Graph("v")
    return g.input(name, dtype, shape)


def _xs(*specs):
    g = gradc.Graph("v")
    return [g.input(f"a{i}", d, s) for i, (d, s) in enumerate(specs)]


F = "float32"
REJECTED = [
    ("V-45", lambda: ops.mean_variance_normalization(_x("int32"), axes=(1,)), "input.dtype"),
    ("V-46", lambda: ops.mean_variance_normalization(_x(), axes=()), "axes"),
    ("V-47", lambda: ops.mean_variance_normalization(_x(), axes=(1, -1)), "axes[1]"),
    ("V-48", lambda: ops.mean_variance_normalization(_x(), axes=(2,)), "axes[0]"),
    ("V-49", lambda: ops.mean_variance_normalization(*_xs((F, (2, 4)), ("float16", (4,))),
                                                     axes=(1,)), "scale.dtype"),
    ("V-50", lambda: ops.mean_variance_normalization(*_xs((F, (2, 4)), (F, (3,))), axes=(1,)),
     "scale.shape"),
    ("V-51", lambda: ops.mean_variance_normalization(*_xs((F, (2, 4)), (F, (1, 2, 4))),
                                                     axes=(1,)), "scale.rank"),
    ("V-52", lambda: ops.mean_variance_normalization(_x(), axes=(1,), use_mean=1), "use_mean"),
    ("V-53", lambda: ops.mean_variance_normalization(_x(), axes=(1,), epsilon=-1e-5),
     "epsilon"),
    ("V-54", lambda: ops.mean_variance_normalization_grad(
        *_xs((F, (2, 4)), (F, (2, 3)), (F, (4,))), axes=(1,)), "input_gradient.shape"),
    ("V-55", lambda: ops.mean_variance_normalization_grad(*_xs((F, (2, 4)), (F, (2, 4))),
                                                          scale=None, axes=(1,)), "scale"),
    ("rank 0", lambda: ops.mean_variance_normalization(_x(shape=())), "input.rank"),
    ("rank 9", lambda: ops.mean_variance_normalization(_x(shape=(1,) * 9)), "input.rank"),
    ("bias shape", lambda: ops.mean_variance_normalization(
        *_xs((F, (2, 4)), (F, (4,)), (F, (2, 1, 4)))), "bias.rank"),
    ("bias dims", lambda: ops.mean_variance_normalization(
        *_xs((F, (2, 4)), (F, (4,)), (F, (3, 4)))), "bias.shape"),
    ("use_variance", lambda: ops.mean_variance_normalization(_x(), use_variance="yes"),
     "use_variance"),
    ("epsilon inf", lambda: ops.mean_variance_normalization(_x(), epsilon=1e39), "epsilon"),
    ("axes float", lambda: ops.mean_variance_normalization(_x(), axes=(1.0,)), "axes[0]"),
    ("grad dy dtype", lambda: ops.mean_variance_normalization_grad(
        *_xs((F, (2, 4)), ("float64", (2, 4)), (F, (4,)))), "input_gradient.dtype"),
    ("grad scale shape", lambda: ops.mean_variance_normalization_grad(
        *_xs((F, (2, 4)), (F, (2, 4)), (F, (2,)))), "scale.shape"),
]


@pytest.mark.parametrize("call,field", [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_rejected_arguments_name_their_field(call, field):
    with pytest.raises(gradc.VerifyError) as info:
        call()
    op = str(info.value).split(":")[0]
    assert str(info.value).startswith(f"{op}: {field}: expected"), str(info.value)


def test_a_bias_without_scale_reads_a_scale_of_ones():
    g = gradc.Graph("b")
    y = ops.mean_variance_normalization(g.input("x", "float32", (2, 4)), None,
                                        g.input("b", "float32", (4,)))
    node = y.producer
    assert len(node.inputs) == 3 and node.inputs[1].producer.op == "constant"
    assert_bits(node.inputs[1].producer.attrs["value"], np.ones(1, F32))


@pytest.mark.parametrize("shape,axes,sshape", [((2, 4), (-1,), (4,)),  # the row path
                                                ((4, 3), (0,), (4, 1))])  # the general one
def test_one_value_as_scale_and_bias(shape, axes, sshape):
    """fuzz/regressions/ir: the C target told scale from bias by identity, so
    ``mvn(x, s, s)`` multiplied by s twice instead of ``z * s + s``."""
    g = gradc.Graph("sb")
    x = g.input("x", "float32", shape)
    s = g.input("s", "float32", sshape)
    g.output(ops.mean_variance_normalization(x, s, s, axes=axes), "y")
    xv = np.arange(np.prod(shape), dtype=F32).reshape(shape) / 4 - 1
    sv = np.linspace(-1, 2, int(np.prod(s.type.shape)), dtype=F32).reshape(s.type.shape)
    want = gradc.compile(g, "reference")(x=xv, s=sv)["y"]
    for t in ("numpy", "c"):
        assert_bits(gradc.compile(g, t)(x=xv, s=sv)["y"], want)


# -- the slow oracle, and the targets on random data -------------------------------------------
CASES = [  # (shape, axes, scale shape, bias shape)
    ((3, 5), (1,), (5,), (5,)), ((4, 2, 3), (1, 2), (2, 3), (1,)), ((3, 4, 2), (0,), (4, 1),
                                                                    None),
    ((2, 3, 4), (0, 2), (3, 1), (2, 3, 4)), ((5,), (0,), None, (5,)), ((2, 6), (0, 1), (6,),
                                                                        (2, 6)),
]


@pytest.mark.parametrize("shape,axes,sshape,bshape", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_reference_is_the_slow_oracle_bit_for_bit(shape, axes, sshape, bshape, dtype):
    rng = np.random.default_rng(len(shape) * 7 + len(axes))
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    s = rng.standard_normal(sshape).astype(dtype) if sshape else None
    b = rng.standard_normal(bshape).astype(dtype) if bshape else None
    sg = s if s is not None else np.ones(1, dtype)
    for um, uv in ((True, True), (False, True), (True, False), (False, False)):
        kw = dict(axes=axes, use_mean=um, use_variance=uv, epsilon=1e-3)
        want = slow.mean_variance_normalization(x, s, b, axes, um, uv, np.float32(1e-3))
        assert_bits(mvn("reference", x, s, b, **kw), want, nan_payload=False)
        got = mvn_grad("reference", x, dy, sg, **kw)
        for g, w in zip(got, slow.mean_variance_normalization_grad(x, dy, sg, axes, um, uv,
                                                                   np.float32(1e-3))):
            assert_bits(g, w, nan_payload=False)


def _random_case(data):
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, rank - 1), min_size=1))))
    lead = data.draw(st.integers(0, rank - 1))
    sshape = tuple(d if data.draw(st.booleans()) else 1 for d in shape[lead:])
    dtype = data.draw(st.sampled_from([np.float32, np.float16, np.float64]))
    return shape, axes, sshape, dtype


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_targets_agree_on_random_layouts(data):
    """numpy and c bit for bit with the reference, onnx within §24.4's bound."""
    shape, axes, sshape, dtype = _random_case(data)
    um, uv = data.draw(st.booleans()), data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = (rng.standard_normal(shape) * 2 + rng.standard_normal()).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    s = rng.standard_normal(sshape).astype(dtype)
    b = rng.standard_normal(sshape).astype(dtype)
    kw = dict(axes=axes, use_mean=um, use_variance=uv)
    want = mvn("reference", x, s, b, **kw)
    wgrad = mvn_grad("reference", x, dy, s, **kw)
    bounds = (forward_bound(x, s, b, axes, um, uv),) + backward_bounds(x, dy, s, axes, um, uv)
    for target in ("numpy", "c", "onnx"):
        got = [mvn(target, x, s, b, **kw)] + list(mvn_grad(target, x, dy, s, **kw))
        for g, w, bd in zip(got, [want] + list(wgrad), bounds):
            if target == "onnx":
                assert_within(g, w, bd, target)
            else:
                assert_bits(g, w)


@pytest.mark.parametrize("rows,n", [(70, 40), (33, 17), (16, 256), (5, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_c_row_path_is_the_reference(rows, n, dtype):
    """Layer norm over the last axis: whole blocks of 16 (8) rows and 16 (8) columns, their
    tails, and rows one at a time, bit for bit (with symbolic rows too)."""
    rng = np.random.default_rng(rows + n)
    x = (rng.standard_normal((rows, n)) * 5 + 3).astype(dtype)
    dy = rng.standard_normal((rows, n)).astype(dtype)
    s, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    for um in (True, False):
        assert_bits(mvn("c", x, s, b, use_mean=um), mvn("reference", x, s, b, use_mean=um))
        for g, w in zip(mvn_grad("c", x, dy, s, use_mean=um),
                        mvn_grad("reference", x, dy, s, use_mean=um)):
            assert_bits(g, w)
    g = gradc.Graph("sym")
    X = g.input("x", dtype.__name__, ("N", n))
    g.output(ops.mean_variance_normalization(X, g.input("s", dtype.__name__, (n,))), "y")
    out = gradc.compile(g, target="c")(x=x, s=s)["y"]
    assert_bits(out, mvn("reference", x, s))


def test_the_c_source_compiles_cleanly(tmp_path):
    g = gradc.Graph("mvn")
    x, dy = g.input("x", "float32", ("N", 3, 20)), g.input("dy", "float32", ("N", 3, 20))
    s, b = g.input("s", "float32", (20,)), g.input("b", "float32", (3, 1))
    g.output(ops.mean_variance_normalization(x, s, b), "y")
    g.output(ops.mean_variance_normalization(x, s, axes=(0, 1), use_mean=False), "y2")
    for i, v in enumerate(ops.mean_variance_normalization_grad(x, dy, s, axes=(1,))):
        g.output(v, f"d{i}")
    h = g.input("h", "float16", (4, 5))
    g.output(ops.mean_variance_normalization(h, use_variance=False), "y3")
    assert_c_compiles_cleanly(g, tmp_path)


# -- PyTorch ----------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _torch_grads(fn, x, dy, *params):
    tx = torch.tensor(x, requires_grad=True)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    y = fn(tx, *tp)
    grads = torch.autograd.grad(y, [tx, *tp], torch.tensor(dy))
    return y.detach().numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("target", ["reference", "c"])
def test_pytorch_layer_norm_and_rms_norm_bit_for_bit_on_dyadic_data(target):
    """T-MVN-1 and T-MVN-2 (and T-MVN-4's forward) are PyTorch's own values."""
    F_ = torch.nn.functional
    y, (dx, ds, db) = _torch_grads(lambda a, s, b: F_.layer_norm(a, (4,), s, b, 7.0), X1, DY1,
                                   S1, B1)
    assert_bits(mvn(target, X1, S1, B1, epsilon=7), y)
    for g, w in zip(mvn_grad(target, X1, DY1, S1, epsilon=7), (dx, ds, db)):
        assert_bits(g, w)
    y, (dx, ds) = _torch_grads(lambda a, s: F_.rms_norm(a, (4,), s, 11.0), X2, DY2, S2)
    assert_bits(mvn(target, X2, S2, use_mean=False, epsilon=11), y)
    got = mvn_grad(target, X2, DY2, S2, use_mean=False, epsilon=11)
    assert_bits(got[0], dx)
    assert_bits(got[1], ds)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10 ** 6), st.sampled_from([64, 768, 5]), st.sampled_from([0.0, 1e2, 1e4]),
       st.booleans())
def test_pytorch_within_the_bound(seed, n, offset, rms):
    """Random rows with means up to 10^4 standard deviations: PyTorch's CPU layer_norm and
    rms_norm (Welford statistics, its own order) and their autograd are within §24.4's bound
    of the reference."""
    F_ = torch.nn.functional
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, n)) + offset * rng.standard_normal((3, 1))).astype(F32)
    dy = rng.standard_normal((3, n)).astype(F32)
    s, b = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
    eps = float(np.float32(1e-5))
    if rms:
        y, (dx, ds) = _torch_grads(lambda a, w: F_.rms_norm(a, (n,), w, eps), x, dy, s)
        want = mvn("reference", x, s, use_mean=False)
        wgrad = mvn_grad("reference", x, dy, s, use_mean=False)
        assert_within(y, want, forward_bound(x, s, None, (1,), um=False), "rms_norm")
        bx, bs, _ = backward_bounds(x, dy, s, (1,), um=False)
    else:
        y, (dx, ds, db) = _torch_grads(lambda a, w, c: F_.layer_norm(a, (n,), w, c, eps), x, dy,
                                       s, b)
        want, wgrad = mvn("reference", x, s, b), mvn_grad("reference", x, dy, s)
        assert_within(y, want, forward_bound(x, s, b, (1,)), "layer_norm")
        bx, bs, bb = backward_bounds(x, dy, s, (1,))
        assert_within(db, wgrad[2], bb, "dbias")
    assert_within(dx, wgrad[0], bx, "dx")
    assert_within(ds, wgrad[1], bs, "dscale")


# -- the VJP (§24.3) against finite differences ------------------------------------------------
def _fd_check(build, arrays, wrt, h=1e-6):
    """gradc.grad of sum(build(...) * w) in float64 against central differences."""
    rng = np.random.default_rng(5)
    g = gradc.Graph("fd")
    vals = [g.input(n, "float64", a.shape) for n, a in arrays.items()]
    y = build(*vals)
    w = rng.standard_normal(y.type.shape)
    g.output(ops.reduce_sum(ops.mul(y, ops.constant(w))), "loss")
    grad = gradc.compile(gradc.grad(g, wrt=list(wrt)), target="reference")
    out = grad(**arrays, grad_loss=np.ones((), np.float64))
    f = gradc.compile(g, target="reference")
    for name in wrt:
        a = arrays[name]
        fd = np.zeros_like(a)
        for i in np.ndindex(*a.shape):
            up, dn = a.copy(), a.copy()
            up[i] += h
            dn[i] -= h
            fd[i] = (f(**{**arrays, name: up})["loss"] - f(**{**arrays, name: dn})["loss"]) / \
                (2 * h)
        np.testing.assert_allclose(out[f"grad_{name}"], fd, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("sshape,bshape,kw", [
    ((4,), (4,), {}), ((4,), (1,), {}), (None, (4,), {}), (None, None, {"use_mean": False}),
    ((3, 1), (4,), {"axes": (1, 2)}), ((4,), (3, 1), {"use_variance": False}),
    ((1, 4), (2, 3, 4), {"axes": (0,)}),
])
def test_vjp_against_finite_differences(sshape, bshape, kw):
    """§24.3's rule, including a bias of scale's shape, one it sums to, one from dY, and a
    missing scale (ones)."""
    rng = np.random.default_rng(3)
    arrays = {"x": rng.standard_normal((2, 3, 4)) * 2 + 1}
    if sshape:
        arrays["s"] = rng.standard_normal(sshape)
    if bshape:
        arrays["b"] = rng.standard_normal(bshape)

    def build(*v):
        it = iter(v[1:])
        s = next(it) if sshape else None
        b = next(it) if bshape else None
        return ops.mean_variance_normalization(v[0], s, b, **kw)
    _fd_check(build, arrays, list(arrays))


def test_second_derivative_is_refused_naming_the_op():
    g = gradc.Graph("gg")
    x, dy = g.input("x", "float32", (2, 4)), g.input("dy", "float32", (2, 4))
    dx, _, _ = ops.mean_variance_normalization_grad(x, dy, g.input("s", "float32", (4,)))
    g.output(dx, "dx")
    with pytest.raises(gradc.UnsupportedError, match="mean_variance_normalization_grad"):
        gradc.grad(g)


@pytest.mark.parametrize("target", TARGETS)
def test_symbolic_normalized_axes(target):
    """n known only when the graph runs (a symbolic normalized dim), on every target."""
    rng = np.random.default_rng(8)
    g = gradc.Graph("sym")
    x, dy = g.input("x", "float32", (3, "T", 4)), g.input("dy", "float32", (3, "T", 4))
    s = g.input("s", "float32", (4,))
    g.output(ops.mean_variance_normalization(x, s, axes=(1, 2)), "y")
    for name, v in zip(("dx", "ds", "db"), ops.mean_variance_normalization_grad(
            x, dy, s, axes=(1,), use_mean=False)):
        g.output(v, name)
    feeds = {"x": rng.standard_normal((3, 5, 4)).astype(F32),
             "dy": rng.standard_normal((3, 5, 4)).astype(F32),
             "s": rng.standard_normal(4).astype(F32)}
    got = compile_for(g, target)(**feeds)
    want = gradc.compile(g, target="reference")(**feeds)
    for k in want:
        if target == "onnx":
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
        else:
            assert_bits(got[k], want[k])
