"""Shape arithmetic on partly symbolic shapes, and causal-mask chains, as PyTorch exports them
(issue 25 item 3; SPEC-transformers §28.1 and §28.2).

Small torch modules, exported in training mode by the TorchScript exporter (``dynamo=False``,
no constant folding) and by the dynamo exporter, with a symbolic batch and a fixed sequence
length: nanoGPT's ``B, T, C = y.size(); y.view(B, T, h, C // h)`` on an intermediate value, a
causal mask from a ``tril`` buffer with ``masked_fill``, masks computed in ``forward``
(``torch.tril(torch.ones(T, T))``, ``torch.arange``), ``scaled_dot_product_attention(...,
is_causal=True)``, shufflenet's ``chunk`` and channel shuffle. Each imports and agrees with
onnxruntime on the file at two batch sizes. A symbolic sequence length under a causal mask is
refused naming the node, its input and the symbol (§28's message). ``nn.MultiheadAttention``
multiplies the batch by the head count (a merged symbol gradc does not have) and picks q, k, v
with a Gather of computed data (gradc's ``gather``): it imports with a fixed batch only.
"""

from __future__ import annotations

import io
import logging
import warnings
from typing import Any

import numpy as np
import onnx
import pytest

import gradc

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn, F = torch.nn, torch.nn.functional

T, C, H = 8, 32, 4  # sequence, width, heads


class Heads(nn.Module):
    """The issue's idiom on an intermediate value: ``y.reshape(B, T, 4, C // 4)``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(C, C)

    def forward(self, x: Any) -> Any:
        y = self.lin(x)
        B, T_, C_ = y.shape
        return y.reshape(B, T_, H, C_ // H).transpose(1, 2) * 2.0


class Causal(nn.Module):
    """nanoGPT's attention: a tril buffer, view(B, T, h, C // h), masked_fill, softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x: Any) -> Any:
        B, T_, C_ = x.size()
        q, k, v = self.qkv(x).split(C_, dim=2)
        q, k, v = (t.view(B, T_, H, C_ // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.bias[:, :, :T_, :T_] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T_, C_))


class Masks(nn.Module):
    """Masks built in forward: Trilu of ConstantOfShape, Range, LessOrEqual, Not, Where."""

    def forward(self, x: Any) -> Any:
        B, T_, C_ = x.shape
        tri = torch.tril(torch.ones(T_, T_))
        pos = torch.arange(T_)
        keep = pos[None, :] <= pos[:, None]
        att = (x @ x.transpose(1, 2)).masked_fill(~keep, float("-inf")) + tri
        return F.softmax(att, dim=-1) @ x + pos.to(x.dtype)[None, :, None]


class SDPA(nn.Module):
    """F.scaled_dot_product_attention(..., is_causal=True)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)

    def forward(self, x: Any) -> Any:
        B, T_, C_ = x.size()
        q, k, v = self.qkv(x).split(C_, dim=2)
        q, k, v = (t.view(B, T_, H, C_ // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(B, T_, C_)


class Shuffle(nn.Module):
    """shufflenet_v2's channel split (chunk) and channel shuffle (view, transpose, view)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x: Any) -> Any:
        x1, x2 = x.chunk(2, dim=1)
        out = torch.cat((x1, torch.relu(self.conv(x2))), dim=1)
        b, c, h, w = out.size()
        out = out.view(b, 2, c // 2, h, w).transpose(1, 2).contiguous()
        return out.view(b, -1, h, w)


class MHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(C, H, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.mha(x, x, x, need_weights=False)[0]


SHAPES = {Heads: (2, T, C), Causal: (2, T, C), Masks: (2, T, 8), SDPA: (2, T, C),
          Shuffle: (2, 8, 4, 4), MHA: (2, T, C)}


def export(cls: type, dynamo: bool, seq: bool = False, batch: bool = True) -> onnx.ModelProto:
    """The module exported in training mode; axis 0 symbolic ('batch'), axis 1 too if seq."""
    torch.manual_seed(0)
    module, x = cls().train(), torch.randn(*SHAPES[cls])
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            if dynamo:
                dims = {0: torch.export.Dim("batch")} if batch else {}
                if seq:
                    dims[1] = torch.export.Dim("seq", min=2, max=64)
                prog = torch.onnx.export(module, (x,), dynamo=True, input_names=["x"],
                                         output_names=["y"], verbose=False,
                                         dynamic_shapes={"x": dims} if dims else None)
                prog.save(buf)
            else:
                axes = ({0: "batch"} if batch else {}) | ({1: "seq"} if seq else {})
                torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"],
                                  output_names=["y"], training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False,
                                  dynamic_axes={"x": axes} if axes else None)
        finally:
            logging.disable(logging.NOTSET)
    return onnx.load_from_string(buf.getvalue())


def agrees_with_onnxruntime(model: onnx.ModelProto, batches: tuple[int, ...] = (1, 3)
                            ) -> gradc.Graph:
    g = gradc.from_onnx(model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    ex = gradc.compile(g, target="reference")
    for n in batches:
        shape = [n if isinstance(d, str) else d for d in g.inputs[0].type.shape]
        x = np.random.default_rng(n).normal(size=shape).astype(np.float32)
        got = ex(x=x)
        for o, want in zip(model.graph.output, sess.run(None, {"x": x})):
            np.testing.assert_allclose(got[o.name], want, rtol=2e-5, atol=2e-6, err_msg=o.name)
    return g


# dynamo writes shufflenet's chunk as a Split with static sizes (no shape arithmetic to test)
CASES: list[tuple[type, bool]] = [
    (Heads, False), (Heads, True), (Causal, False), (Causal, True), (Masks, False),
    (Masks, True), (SDPA, False), (Shuffle, False)]


@pytest.mark.parametrize("cls,dynamo", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_symbolic_batch_imports_and_agrees_with_onnxruntime(cls, dynamo):
    g = agrees_with_onnxruntime(export(cls, dynamo))
    assert g.inputs[0].type.shape[0] == "batch"


def test_the_issue_case_folds_c_over_h_and_keeps_the_batch_symbol():
    """Heads, TorchScript: Shape -> Gather(2) -> Div(4) folds to 8; the batch stays 'batch'."""
    m = export(Heads, False)
    assert {"Shape", "Gather", "Div", "Reshape"} <= {n.op_type for n in m.graph.node}
    g = gradc.from_onnx(m)
    shapes = [n.outputs[0].type.shape for n in g.nodes if n.op == "reshape"]
    assert ("batch", T, H, C // H) in shapes


def test_causal_masks_fold_to_constants():
    """The tril/arange chains of Masks (TorchScript: Trilu, Range, LessOrEqual, Not) leave no
    node of theirs in the graph: the masks are constants."""
    m = export(Masks, False)
    assert {"Trilu", "Range", "LessOrEqual", "Not"} <= {n.op_type for n in m.graph.node}
    g = gradc.from_onnx(m)
    ops = [n.op for n in g.nodes]
    assert "less_equal" not in ops and ops.count("where") == 1, ops


def test_sdpa_with_a_fixed_batch_under_dynamo():
    """dynamo flattens batch and heads into one dim for SDPA: with a symbolic batch that is a
    merged symbol (refused below); with a fixed batch it imports."""
    agrees_with_onnxruntime(export(SDPA, True, batch=False), batches=(2,))


SEQ_MESSAGE = "depends on the symbolic dim 'seq' (gradc has no run-time shapes; export with " \
              "a fixed size for 'seq')"


@pytest.mark.parametrize("cls,dynamo", [(Causal, False), (Masks, False), (Masks, True),
                                        (SDPA, False)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_symbolic_sequence_under_a_causal_mask_is_refused_naming_it(cls, dynamo):
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(export(cls, dynamo, seq=True))
    problems = info.value.problems  # type: ignore[attr-defined]
    assert problems and all(SEQ_MESSAGE in p for p in problems), problems
    first = problems[0]
    assert first.split(" ", 1)[0] in ("Slice", "Trilu", "Range", "Cast"), first
    assert ": input " in first  # the node, its input, the symbol


def test_the_merged_batch_of_sdpa_under_dynamo_is_refused_naming_the_symbol():
    with pytest.raises(gradc.UnsupportedError, match="would merge or split the symbolic dim "
                       "'batch'"):
        gradc.from_onnx(export(SDPA, True))


def test_multihead_attention_with_a_fixed_batch_imports():
    """nn.MultiheadAttention picks q, k and v with a Gather of computed data (gradc's gather)."""
    agrees_with_onnxruntime(export(MHA, False, batch=False), batches=(2,))


def test_multihead_attention_with_a_symbolic_batch_is_refused_naming_the_symbol():
    """It computes bsz * num_heads, a merged symbol gradc does not represent."""
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(export(MHA, False, batch=True))
    problems = info.value.problems  # type: ignore[attr-defined]
    assert {p.split(" ", 1)[0] for p in problems} == {"Mul"}, problems
    for p in problems:
        assert "depends on the symbolic dim 'batch' (gradc has no run-time shapes" in p
