"""gradc.from_torch, operator by operator: small modules through the ATen table (issue 27).

Each case is a module whose exported program holds the ATen operators named in its id; its
gradc graph, on the reference target, gives PyTorch's outputs and (for random cotangents) the
gradients torch.autograd gives with respect to the inputs and every parameter, in float64
(``torch_modules.check``). The real models are in test_from_torch_models.py; the inputs,
parameters, state, outputs and errors of the translation are in test_from_torch_io.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from torch_modules import Fn, check, rand  # noqa: E402  (needs torch)

import gradc.torch_translate  # noqa: E402,F401  (registers every converter of the table)
from gradc.ir.ops.softmax import guard_of  # noqa: E402
from gradc.torch_ops import ATEN, Converter  # noqa: E402

A = torch.ops.aten
SEEN: set[str] = set()  # ATen converters that built a graph in this module's tests
RAN: set[str] = set()  # the cases that ran (test_every_converter_is_exercised runs the rest)


@pytest.fixture(scope="module", autouse=True)
def record_converters():
    """Every converter of the table, wrapped to record that it built something."""
    saved = dict(ATEN)
    assert len(saved) > 50, "the table is registered (gradc.torch_translate imported)"

    def recording(name, build):
        def run(n, ctx):
            out = build(n, ctx)
            SEEN.add(name)
            return out
        return run

    for name, conv in saved.items():
        ATEN[name] = Converter(recording(name, conv.build))
    yield
    ATEN.clear()
    ATEN.update(saved)


def _seq(*layers: nn.Module) -> nn.Module:
    return nn.Sequential(*layers).double().train()


CASES = {
    # convolution: every overload decomposes to aten.convolution.default
    "conv1d": (lambda: _seq(nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2)), (2, 4, 11)),
    "conv2d_groups": (lambda: _seq(nn.Conv2d(4, 6, 3, padding=2, groups=2, bias=False)),
                      (2, 4, 7, 6)),
    "conv_transpose2d": (lambda: _seq(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                         output_padding=1, groups=2)),
                         (2, 4, 5, 5)),
    "conv3d": (lambda: _seq(nn.Conv3d(2, 3, 2, stride=(1, 2, 1))), (1, 2, 4, 5, 3)),
    # batch normalization, training mode (running statistics compared too) and eval
    "batch_norm1d_rank2": (lambda: _seq(nn.Linear(5, 4), nn.BatchNorm1d(4, momentum=0.3)),
                           (6, 5)),
    "batch_norm1d_rank3_no_affine": (lambda: _seq(nn.BatchNorm1d(3, affine=False)),
                                     (4, 3, 5)),
    "batch_norm2d_no_stats": (lambda: _seq(nn.BatchNorm2d(3, track_running_stats=False)),
                              (2, 3, 4, 4)),
    "batch_norm2d_eval": (lambda: _seq(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)).eval(),
                          (2, 3, 4, 4)),
    # pooling
    "max_pool2d_ceil_dilation": (lambda: _seq(nn.MaxPool2d(3, 2, 1, dilation=1,
                                                           ceil_mode=True)), (2, 3, 8, 7)),
    "max_pool1d": (lambda: _seq(nn.MaxPool1d(2)), (2, 3, 8)),
    "avg_pool2d_ceil_include_pad": (lambda: _seq(nn.AvgPool2d(3, 2, 1, ceil_mode=True)),
                                    (2, 3, 8, 7)),
    "avg_pool2d_exclude_pad": (lambda: _seq(nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
                               (2, 3, 7, 7)),
    "adaptive_avg_pool2d": (lambda: _seq(nn.AdaptiveAvgPool2d(1)), (2, 3, 5, 4)),
    "adaptive_avg_pool2d_2x2": (lambda: _seq(nn.AdaptiveAvgPool2d(2)), (2, 3, 6, 4)),
    # upsampling, through resample
    "upsample_nearest_scale": (lambda: _seq(nn.Upsample(scale_factor=2)), (2, 3, 3, 4)),
    "upsample_nearest_size": (lambda: _seq(nn.Upsample(size=(7, 5))), (2, 3, 3, 4)),
    "upsample_nearest_exact": (lambda: _seq(nn.Upsample(size=(7, 5), mode="nearest-exact")),
                               (2, 3, 3, 4)),
    "upsample_bilinear": (lambda: _seq(nn.Upsample(scale_factor=2, mode="bilinear")),
                          (2, 3, 3, 4)),
    "upsample_bilinear_align_corners": (lambda: _seq(nn.Upsample(size=(7, 5), mode="bilinear",
                                                                 align_corners=True)),
                                        (2, 3, 3, 4)),
    "upsample_linear1d": (lambda: _seq(nn.Upsample(scale_factor=3, mode="linear")), (2, 3, 4)),
    "pool_resample_overloads": (lambda: _fn(lambda m, x: (
        A.avg_pool3d(x, [2, 2, 2]), A.max_pool3d_with_indices(x, [2, 2, 2])[0],
        A._adaptive_avg_pool2d(x[0], [2, 2]), A.upsample_nearest2d.default(x[0], [6, 8]),
        A.upsample_nearest1d.vec(x[0, 0], None, [2.0]), A.upsample_nearest1d.default(x[0, 0], [7]),
        A.upsample_linear1d.default(x[0, 0], [7], True),
        A._upsample_nearest_exact1d.vec(x[0, 0], [7], None),
        A._upsample_nearest_exact1d.default(x[0, 0], [7]),
        A._upsample_nearest_exact2d.default(x[0], [7, 5]))), (1, 2, 4, 4, 4)),
    # matrix products
    "linear_rank3": (lambda: _seq(nn.Linear(5, 3)), (2, 4, 5)),
    "linear_no_bias": (lambda: _seq(nn.Linear(5, 3, bias=False)), (4, 5)),
    # activations, softmax, dropout with p = 0
    "activations": (lambda: _seq(nn.Linear(6, 6), nn.ReLU6(), nn.Linear(6, 6), nn.LeakyReLU(0.2),
                                 nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6), nn.SiLU(),
                                 nn.Linear(6, 6), nn.Hardswish(), nn.Linear(6, 6), nn.Sigmoid(),
                                 nn.Linear(6, 6), nn.ELU(), nn.Softmax(1)), (3, 6)),
    "log_softmax_dropout0": (lambda: _seq(nn.Linear(6, 5), nn.Dropout(0.0), nn.LogSoftmax(-1)),
                             (3, 6)),
}


# gradc's resample computes coordinates and weights in float32 (SPEC.md §6.1) also for float64
# data: scales that are no powers of two part from PyTorch's float64 weights by ~1e-7.
FLOAT32_WEIGHTS = {"upsample_bilinear_align_corners", "upsample_linear1d"}


@pytest.mark.parametrize("name", CASES)
def test_module_matches_pytorch(name):
    make, shape = CASES[name]
    torch.manual_seed(0)
    check(make(), rand(*shape), rel=1e-6 if name in FLOAT32_WEIGHTS else 1e-10)
    RAN.add(name)


def _fn(fn, **params):
    return Fn(fn, **params).double().train()


FUNCTIONS = {
    "elementwise_scalars_alpha": (lambda m, x, y: (torch.add(x, y, alpha=2) - 3 * x) / (y * y + 1)
                                  + torch.sub(2.5, x) - x.neg().exp() + (x * x + 1).log()
                                  + (x * x + 1).sqrt() + (x * x + 1).rsqrt() + x.pow(3)
                                  + (y * y + 1).reciprocal() + x.abs(), 2),
    "clamp_max_min_where": (lambda m, x, y: torch.where(x > y, x.clamp(-0.5, 0.7),
                                                         torch.maximum(x, y))
                            + torch.minimum(x, y) * (x <= 0.1) + x.clamp(min=0.0)
                            + torch.where(x != y, 1.0, x), 2),
    "masks_logic": (lambda m, x, y: torch.where((x > 0) & (y < 0) | ~(x == y), x, y)
                    + torch.where(torch.logical_not(x >= y), y, 0.0), 2),
    "int_promotion": (lambda m, x: x * torch.arange(4) + (x > 0).long() * 2
                      + ((x > 0).long() >= 0.5) * x, 1),
    "reductions": (lambda m, x: (x.sum(1, keepdim=True), x.mean((0, 1)), x.amax(1),
                                    x.amin(0), x.max(1).values, x.var(1), x.std(0),
                                    x.sum(), (x > 0).any(1), x.mean()), 1),
    "movement": (lambda m, x, y: (torch.cat([x, y, x], 1), x.transpose(0, 1).reshape(4, 3),
                                  x.unsqueeze(1).expand(3, 2, 4), x[:, 1:3], x[1], x[:, ::2],
                                  x.view(3, 2, 2).permute(2, 0, 1), x.flatten(),
                                  x.unsqueeze(0).squeeze(0), x.repeat(2, 1),
                                  F.pad(x, (1, 2)), torch.stack([x, y])), 2),
    "split_chunk": (lambda m, x, y: (*torch.split(x, [1, 3], 1), *torch.chunk(y, 2, 1),
                                     *x.split(2, 0), x.unbind(0)[1]), 2),
    "matmul_family": (lambda m, x, y: (x @ y.T, torch.mm(x, y.T), torch.bmm(
        x.expand(2, 3, 4), y.T.expand(2, 4, 3)), torch.matmul(x, y[0]), torch.matmul(
        x[0], y.T), torch.addmm(m.b, x, y.T, beta=0.5, alpha=2.0), x @ m.w), 2),
    "inplace": (lambda m, x, y: torch.relu_(x.clone().mul_(2).add_(y).sub_(1).div_(3))
                + x.clone().clamp_(0, 0.5), 2),
    "created_tensors": (lambda m, x, y: x + torch.ones(3, 4) * 2 + torch.zeros_like(x)
                        + torch.full((4,), 0.5) + torch.arange(4.0)
                        + torch.ones_like(y).tril() + torch.eye(3, 4)
                        + torch.full_like(x, 3.0), 2),
    # ATen overloads that the usual modules do not produce, called directly
    "direct_aten_math": (lambda m, x, y: (
        A.add.Scalar(x, 2), A.sub.Scalar(x, 1), A.mul.Scalar(x, 3), A.div.Scalar(x, 4),
        A.div.Tensor_mode(x, y * y + 1, rounding_mode=None),
        A.div.Scalar_mode(x, 2.0, rounding_mode=None), A.eq.Scalar(torch.relu(x), 0.0),
        A.ne.Scalar(x, 0.5), A.le.Tensor(x, y), A.lt.Tensor(x, y), A.logical_and(x > 0, y > 0),
        A.logical_or(x > 0, y > 0), A.any.default(x > 0), A.any.dims(x > 2, [0, 1]),
        A.max.default(x), A.min.default(x), A.min.dim(x, 1)[0], torch.clamp(x, min=y, max=2 * y),
        x.clone().copy_(y[0]), A.alias(x) * 2), 2),
}
PARAMS = {"matmul_family": {"b": lambda: rand(3, 3, seed=5), "w": lambda: rand(4, 2, seed=6)}}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_matches_pytorch(name):
    fn, count = FUNCTIONS[name]
    params = {k: f() for k, f in PARAMS.get(name, {}).items()}
    xs = [rand(3, 4, seed=1), rand(3, 4, seed=2)][:count]
    assert fn.__code__.co_argcount == count + 1
    check(_fn(fn, **params), *xs)
    RAN.add(name)


def test_softmax_axes_and_losses():
    def fn(m, x, labels, t, pixels):
        return (F.softmax(x, 0), F.log_softmax(x, 1), F.cross_entropy(x, labels),
                F.nll_loss(F.log_softmax(x, 1), labels, reduction="sum"),
                F.mse_loss(x, t), F.cross_entropy(x.view(3, 2, 2), pixels, reduction="none"))
    check(_fn(fn), rand(3, 4, seed=1), torch.tensor([1, 0, 3]), rand(3, 4, seed=3),
          torch.tensor([[1, 0], [0, 0], [1, 1]]))
    RAN.add("losses")


def test_sizes_from_a_symbolic_batch():
    """``full``, ``full_like`` and ``expand`` to a shape with a symbolic size take it from a
    value of that shape, or one made from a value with the same symbolic sizes (a class token
    expanded to the batch, zeros of a new width); the graph runs for any batch."""
    def fn(m, x):
        y = torch.zeros(x.shape[0], 4, dtype=x.dtype) + x * torch.full_like(x, 2.0)
        cls = m.w.expand(x.shape[0], 2, 4)
        return torch.cat([cls, y.unsqueeze(1)], 1), x.new_zeros(x.size(0), 6) + 1

    m = _fn(fn, w=rand(1, 2, 4, seed=3))
    g = gradc.from_torch(m, (rand(3, 4),), dynamic_shapes={"xs": ({0: torch.export.Dim("n")},)})
    assert g.inputs[0].type.shape == ("n", 4)
    exe = gradc.compile(g, target="reference")
    for n in (2, 5):
        x = rand(n, 4, seed=n)
        got = exe(xs_0=x.numpy())
        for name, want in zip(("output_0", "output_1"), m(x)):
            np.testing.assert_allclose(got[name], want.detach().numpy(), rtol=1e-12)
    RAN.add("symbolic")


class Dropout(nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.5, training=self.training)


def test_dropout_in_training_is_gradcs_dropout():
    """p = 0.5: gradc draws its own bits (SPEC-training §20), so the output is checked against
    its own mask: each element is 0 or twice the input, and the mask is used, not all True."""
    m = Dropout()
    x = rand(64, 8, seed=1)
    g = gradc.from_torch(m, (x,))
    assert [v.name for v in g.inputs] == ["x", "rng_state"]
    assert [v.name for v in g.outputs] == ["output", "rng_state_out"]
    out = gradc.compile(g, target="reference")(x=x.numpy(),
                                               rng_state=np.array([0, 0, 0, 0, 7, 0], np.uint32))
    y = out["output"]
    kept = y != 0
    np.testing.assert_array_equal(y[kept], 2 * x.numpy()[kept])
    assert 0.3 < kept.mean() < 0.7
    eval_graph = gradc.from_torch(m.eval(), (x,))
    assert [v.name for v in eval_graph.inputs] == ["x"]


def _ids(*rows):
    return torch.tensor(rows, dtype=torch.int64)


def _mask(*rows):
    return torch.tensor(rows, dtype=torch.bool)


def _attention(**kw):
    def fn(m, q, k, v, *mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None, **kw)
    return fn


Q, KV = (2, 4, 3, 8), (2, 2, 5, 8)  # (batch, heads, sequence, head size); GQA: 2 key heads
# name -> (the module's forward, its inputs): the transformer operators (SPEC-transformers)
TRANSFORMER = {
    # embedding (BERT's padding_idx: that row gets no gradient), index_select, x[i], x[:, i],
    # constant index tensors on adjacent axes, torch.gather with a constant index
    "embedding_padding_idx": (lambda m, ids: F.embedding(ids, m.w, padding_idx=2)
                              + F.embedding(ids, m.w) * 0.5,
                              lambda: (_ids([2, 0, 5], [2, 2, 1]),)),
    "indexing": (lambda m, x, i, j: (x.index_select(1, i), x[j], x[:, j], x.index_select(0, i[1:]),
                                     x[torch.tensor([[0], [2]]), torch.tensor([1, 3, -1])],
                                     x.gather(1, torch.tensor([[0, 0, 3], [1, 2, 2], [3, 0, 1]]))),
                 lambda: (rand(3, 4, seed=1), _ids(2, 0, 1), _ids(2, -1))),
    # layer norm: affine, without bias, without affine over two axes, its mean and rstd read;
    # RMS norm, which torch decomposes (pow, mean, add, rsqrt, mul: translated op by op)
    "layer_norm": (lambda m, x: (F.layer_norm(x, (4,), m.w[0], m.w[1], 2.0 ** -10),
                                 F.layer_norm(x, (4,), m.w[0]), F.layer_norm(x, (3, 4)),
                                 *A.native_layer_norm(x, [4], m.w[1], None, 1e-5),
                                 F.rms_norm(x, (4,), m.w[0], 2.0 ** -10), F.rms_norm(x, (3, 4))),
                   lambda: (rand(2, 3, 4, seed=1),)),
    "gelu_erf_sin_cos_isnan": (lambda m, x: (F.gelu(x), F.gelu(x, approximate="tanh"),
                                             torch.erf(x), torch.sin(x), torch.cos(x),
                                             torch.isnan(x / (x * 0 + (x > 0))),
                                             torch.isnan(torch.arange(3)[None] + x[..., :3]),
                                             torch.erf(torch.ones(2, dtype=torch.int64))),
                               lambda: (rand(3, 4, seed=1),)),
    # scaled dot-product attention (kept whole, written as PyTorch's math decomposition)
    "sdpa_causal_scale": (_attention(is_causal=True, scale=0.3),
                          lambda: (rand(*Q, seed=1), rand(*Q, seed=2), rand(*Q, seed=3))),
    "sdpa_gqa_float_mask": (_attention(enable_gqa=True),
                            lambda: (rand(*Q, seed=1), rand(*KV, seed=2), rand(*KV, seed=3),
                                     rand(3, 5, seed=4))),
    # a bool mask with a fully masked query row: zeros, and a finite gradient (§27.2)
    "sdpa_bool_mask_masked_row": (_attention(),
                                  lambda: (rand(2, 3, 8, seed=1), rand(2, 5, 8, seed=2),
                                           rand(2, 5, 8, seed=3),
                                           _mask([1, 0, 1, 1, 0], [0, 0, 0, 0, 0],
                                                 [1, 1, 1, 1, 1]))),
    # the flash-attention form older exports hold: decomposed by torch to the math form
    "sdpa_flash_for_cpu_decomposed": (
        lambda m, q, k, v: A._scaled_dot_product_flash_attention_for_cpu(q, k, v,
                                                                        is_causal=True)[0],
        lambda: (rand(*Q, seed=1), rand(*Q, seed=2), rand(*Q, seed=3))),
    # _safe_softmax as torch decomposes it, where(all masked, zeros_like(p), p), with a fully
    # masked row: b's gradient sums every row, NaN without §27.2's guard
    "safe_softmax_decomposed": (lambda m, x, mask: A._safe_softmax(
        x.masked_fill(mask, float("-inf")) + m.b, -1) * 2,
        lambda: (rand(3, 4, seed=1), _mask([0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]))),
}
TRANSFORMER_PARAMS = {"embedding_padding_idx": {"w": lambda: rand(6, 3, seed=5)},
                      "layer_norm": {"w": lambda: rand(2, 4, seed=5)},
                      "safe_softmax_decomposed": {"b": lambda: rand(1, 4, seed=5)}}


def _transformer_case(name):
    fn, inputs = TRANSFORMER[name]
    params = {k: f() for k, f in TRANSFORMER_PARAMS.get(name, {}).items()}
    return _fn(fn, **params), inputs()


@pytest.mark.parametrize("name", TRANSFORMER)
def test_transformer_operator_matches_pytorch(name):
    m, inputs = _transformer_case(name)
    g = check(m, *inputs)
    RAN.add(name)
    if name == "embedding_padding_idx":  # the padding row comes through no gradient
        assert "adam_optimizer" in {n.op for n in g.nodes}
    if name.startswith(("sdpa", "safe_softmax")):  # every softmax is §27.2's guarded one
        softmaxes = [n for n in g.nodes if n.op == "softmax"]
        assert softmaxes and all(guard_of(n) is not None for n in softmaxes)
    if name == "sdpa_bool_mask_masked_row":
        out = gradc.compile(g, target="reference")(**{v.name: t.numpy() for v, t in zip(
            g.inputs, inputs)})["output"]
        assert not out[:, 1].any() and np.isfinite(out).all()


def test_attention_dropout_is_gradcs_dropout_on_the_probabilities():
    """dropout_p = 0.5 (applied in either mode, as PyTorch does): with q = k = 0 every
    probability is 1/5 and v = 1, so each output is (kept keys) / (5 * 0.5)."""
    m = _fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)).eval()
    q, k, v = torch.zeros(2, 4, 3, 8), torch.zeros(2, 4, 5, 8), torch.ones(2, 4, 5, 8)
    g = gradc.from_torch(m, (q, k, v))
    assert [x.name for x in g.inputs][-1] == "rng_state"
    assert [x.name for x in g.outputs] == ["output", "rng_state_out"]
    out = gradc.compile(g, target="reference")(xs_0=q.numpy(), xs_1=k.numpy(), xs_2=v.numpy(),
                                               rng_state=np.array([0, 0, 0, 0, 3, 0],
                                                                  np.uint32))["output"]
    kept = out * 2.5
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-5)
    assert kept.min() >= 0 and kept.max() <= 5 and 1.5 < kept.mean() < 3.5
    assert np.all(out == out[..., :1])  # one mask per (query, key): the same on every channel


class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(10, 8, scale_grad_by_freq=True)

    def forward(self, ids, x):
        y = self.tok(ids).sum() + torch.cumsum(x, 1).sum() + torch.cumsum(x, 0).sum()
        return y + x[:, :, 0].gather(1, ids[:, :2] - 1).sum() + x[ids[:1, :1], :, ids[:1, :1]].sum()


def test_refusals_are_reported_together_with_their_places():
    """One UnsupportedError names each ATen operator, its module path and its source line,
    grouped on the first line: an embedding's gradient options, PyTorch's element-wise gather
    with a computed index, index tensors apart, and an operator without a converter."""
    with pytest.raises(gradc.UnsupportedError) as e:
        gradc.from_torch(Refused(), (_ids([1, 2, 3], [4, 5, 6]), rand(2, 3, 4)))
    first, *rest = str(e.value).splitlines()
    assert first.startswith("torch program 'Refused': 5 unsupported features: ")
    assert "aten.embedding.default (1 node, first node 'embedding' in 'tok', " \
           "test_from_torch_ops.py:" in first
    assert "aten.cumsum.default (2 nodes, first node 'cumsum', test_from_torch_ops.py:" in first
    assert "scale_grad_by_freq=True is not supported" in rest[0]
    assert any("aten.gather.default" in r and "GatherElements" in r for r in rest)
    assert any("aten.index.Tensor" in r and "not adjacent" in r for r in rest)
    assert e.value.problems == rest


def test_a_constant_index_out_of_range_is_refused_at_import():
    m = _fn(lambda m, x: x.gather(1, torch.tensor([[0, 4]])))
    with pytest.raises(gradc.VerifyError, match=r"aten\.gather\.default .*index\[0, 1\] = 4: "
                       r"expected an index in 0\.\.3"):
        gradc.from_torch(m, (rand(1, 4),))


class Cumsum(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1) * 2


def test_unknown_operator_is_refused_with_its_place():
    with pytest.raises(gradc.UnsupportedError, match=r"^torch program 'Cumsum': 1 unsupported "
                       r"feature: aten\.cumsum\.default \(node 'cumsum', "
                       r"test_from_torch_ops\.py:\d+\): is not supported \(no converter"):
        gradc.from_torch(Cumsum(), (rand(2, 3),))


def test_every_converter_is_exercised():
    """Each ATen converter of the table builds a graph in this module's cases (the cases that
    did not run, under ``-k``, are translated here); no entry is dead."""
    for name in set(CASES) - RAN:
        make, shape = CASES[name]
        gradc.from_torch(make(), (rand(*shape),))
    for name in set(FUNCTIONS) - RAN:
        fn, count = FUNCTIONS[name]
        params = {k: f() for k, f in PARAMS.get(name, {}).items()}
        gradc.from_torch(_fn(fn, **params), tuple([rand(3, 4, seed=1), rand(3, 4)][:count]))
    for name in set(TRANSFORMER) - RAN:
        m, inputs = _transformer_case(name)
        gradc.from_torch(m, inputs)
    if "losses" not in RAN or "symbolic" not in RAN:
        pytest.skip("needs test_softmax_axes_and_losses and test_sizes_from_a_symbolic_batch")
    gradc.from_torch(Dropout(), (rand(4, 4),))
    assert sorted(set(ATEN) - SEEN) == []
