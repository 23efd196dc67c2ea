"""Transformer-shaped ONNX models for the ``onnx`` harness (SPEC-transformers.md §28).

``TransformerModelGen(rng).build()`` makes one small model (mostly valid) the way PyTorch's
exporters write transformers: token ids through ``Gather`` of an embedding table plus position
embeddings read at ``Range(0, Shape(ids)[1])``, or a float input ``[B, T, C]`` (``B`` symbolic
now and then); pre-norm blocks with ``LayerNormalization`` (1 or 3 outputs, any valid axis) or
``RMSNormalization``; attention either written out (nanoGPT's head split ``Shape -> Gather ->
Div -> Concat -> Reshape``, causal masks from ``Range``/``ConstantOfShape``/``Trilu``/
``Equal``/``Where``/``Expand``, the SDPA guard ``Where(IsNaN(p), 0, p)``) or as one opset-23
``Attention`` node (3-D or 4-D, grouped-query heads, with or without a bool or float mask,
``is_causal``, ``scale``, ``softcap``); an MLP with ``Gelu`` (both modes) or GELU written out
(``Erf``), rotary-style ``Sin``/``Cos`` of positions, ``SplitToSequence`` read by
``SequenceAt``, ``GatherND`` of known indices; now and then a loss. Boundary attribute values
come now and then (``edge``), and the harness's mutators (``MUTANT_OPS``, ``MUTANT_ATTRS``,
``arity``) make the invalid models.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fuzz.graphgen import FLOAT_EDGES, INT_EDGES

MUTANT_OPS = ("LayerNormalization", "RMSNormalization", "Gelu", "Erf", "Sin", "Cos", "IsNaN",
              "Attention", "Range", "Trilu", "ConstantOfShape", "SplitToSequence",
              "SequenceAt", "GatherND", "Mod", "CastLike", "Expand", "Equal", "Where")
MUTANT_ATTRS = ("stash_type", "approximate", "upper", "q_num_heads", "kv_num_heads",
                "is_causal", "scale", "softcap", "qk_matmul_output_mode", "softmax_precision",
                "keepdims", "batch_dims", "epsilon", "axis", "value")
INT64_EDGES = tuple(v for v in INT_EDGES if -2 ** 63 <= v < 2 ** 63)
Dims = list[Any]


class TransformerModelGen:
    """Builds one transformer-shaped model (see the module docstring)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.edge = rng.choice((0.0, 0.0, 0.05, 0.15))
        self.opset = rng.choice((17, 18, 20, 21, 22, 23, 23, 23))
        self.elem = rng.choice((TensorProto.FLOAT,) * 5 + (TensorProto.DOUBLE,
                                                            TensorProto.FLOAT16))
        self.dt = np.dtype(helper.tensor_dtype_to_np_dtype(self.elem))
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.extra_outputs: list[str] = []
        self.k = 0
        self.edged = False  # a boundary value was used: onnx's shape inference may crash on it
        self.batch: Any = "N" if rng.random() < 0.3 else rng.randint(1, 2)
        self.t = rng.randint(1, 4)
        self.heads = rng.choice((1, 2))
        self.c = self.heads * rng.choice((1, 2, 3))

    # -- pieces -----------------------------------------------------------------------------------
    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def int_(self, v: int) -> int:
        if self.rng.random() < self.edge:
            self.edged = True
            return self.rng.choice(INT64_EDGES)
        return v

    def float_(self, v: float) -> float:
        if self.rng.random() < self.edge:
            self.edged = True
            return self.rng.choice(FLOAT_EDGES)
        return v

    def node(self, op: str, ins: list[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.name("t") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=self.name(f"/{op}_"), **attrs))
        return outs

    def one(self, op: str, ins: list[str], **attrs: Any) -> str:
        return self.node(op, ins, **attrs)[0]

    def const(self, values: Any, dtype: Any = np.int64) -> str:
        """An initializer mostly, a Constant node now and then."""
        arr = np.array(values, dtype=dtype)
        if self.rng.random() < 0.3:
            return self.one("Constant", [], value=numpy_helper.from_array(arr))
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def weight(self, shape: Dims, scale: float = 0.5) -> str:
        """A float initializer (a parameter) of small dyadic values."""
        nrng = np.random.default_rng(self.rng.getrandbits(32))
        a = (nrng.integers(-4, 5, shape) / 8.0 * scale).astype(self.dt)
        n = self.name("w")
        self.inits.append(numpy_helper.from_array(a, n))
        return n

    def graph_input(self, base: str, elem: int, dims: Dims) -> str:
        n = self.name(base)
        self.inputs.append(helper.make_tensor_value_info(n, elem, dims))
        return n

    def dim_of(self, x: str, axis: int) -> str:
        """``Gather(Shape(x), axis)`` as a rank-0 int64 (or ``Shape`` with start/end, 15+)."""
        if self.opset >= 15 and self.rng.random() < 0.3:
            s = self.one("Shape", [x], start=axis, end=axis + 1)
            return self.one("Squeeze", [s, self.const([0])])
        return self.one("Gather", [self.one("Shape", [x]), self.const(axis)], axis=0)

    # -- embeddings and positions -----------------------------------------------------------------
    def embed(self) -> str:
        """Token ids through an embedding table, plus position embeddings at Range(0, T)."""
        vocab = self.rng.randint(5, 9)
        ids = self.graph_input("ids", self.rng.choice((TensorProto.INT64, TensorProto.INT64,
                                                       TensorProto.INT32)),
                               [self.batch, self.t])
        x = self.one("Gather", [self.weight([vocab, self.c]), ids], axis=0)
        if self.rng.random() < 0.7:
            length = self.dim_of(ids, 1)
            pos = self.one("Range", [self.const(0), length, self.const(1)])
            if self.rng.random() < 0.2:
                pos = self.one("Mod", [pos, self.const(self.int_(self.t))])
            x = self.one("Add", [x, self.one("Gather", [self.weight([self.t, self.c]), pos],
                                             axis=0)])
        return x

    def rotary(self, x: str) -> str:
        """x * cos(pos * f) + x * sin(pos * f): positions from Range, Cast, Sin and Cos."""
        pos = self.one("Cast", [self.one("Range", [self.const(0), self.const(self.t),
                                                   self.const(1)])], to=self.elem)
        pos = self.one("Unsqueeze", [pos, self.const([1])])
        ang = self.one("Mul", [pos, self.weight([1, self.c], scale=2.0)])
        return self.one("Add", [self.one("Mul", [x, self.one("Cos", [ang])]),
                                self.one("Mul", [x, self.one("Sin", [ang])])])

    # -- normalization ----------------------------------------------------------------------------
    def norm(self, x: str) -> str:
        rank = 3
        if self.opset >= 23 and self.rng.random() < 0.3:
            attrs: dict[str, Any] = {}
            if self.rng.random() < 0.4:
                attrs["epsilon"] = self.float_(self.rng.choice((1e-5, 1e-6, 0.0)))
            if self.rng.random() < 0.2:
                attrs["stash_type"] = self.int_(self.rng.choice((1, 1, 1, 16)))
            axis = self.rng.choice((-1, -1, 2, 1))
            if axis != -1 or self.rng.random() < 0.3:
                attrs["axis"] = self.int_(axis)
            return self.one("RMSNormalization", [x, self.weight(self._param(axis, rank))],
                            **attrs)
        axis = self.rng.choice((-1, -1, -1, 2, 1, -2, 0))
        attrs = {"axis": self.int_(axis)} if axis != -1 or self.rng.random() < 0.3 else {}
        if self.rng.random() < 0.4:
            attrs["epsilon"] = self.float_(self.rng.choice((1e-5, 1e-12, 0.0, 0.1)))
        if self.rng.random() < 0.1:
            attrs["stash_type"] = self.int_(self.rng.choice((1, 1, 1, 16)))
        ins = [x, self.weight(self._param(axis, rank))]
        if self.rng.random() < 0.7:
            ins.append(self.weight(self._param(axis, rank)))
        outs = self.node("LayerNormalization", ins, self.rng.choice((1, 1, 3)), **attrs)
        self.extra_outputs += [o for o in outs[1:] if self.rng.random() < 0.3]
        return outs[0]

    def _param(self, axis: int, rank: int) -> Dims:
        """Scale/bias dims over the normalized axes (some 1: they broadcast)."""
        full = [self.batch if isinstance(self.batch, int) else 1, self.t, self.c]
        tail = full[axis % rank:]
        return [1 if (self.rng.random() < 0.2 or not isinstance(d, int)) else d for d in tail]

    # -- attention --------------------------------------------------------------------------------
    def causal_bias(self) -> str:
        """A [T, T] float bias: 0 where a key may be seen, -inf (or finfo.min) elsewhere."""
        t = self.t
        r = self.rng.random()
        if r < 0.4:  # transformers: ones -> Trilu -> Equal 0 -> Where(-inf, 0)
            ones = self.one("ConstantOfShape", [self.const([t, t])],
                            value=numpy_helper.from_array(np.array([1], np.int64)))
            tri = self.one("Trilu", [ones], upper=self.int_(0))
            hidden = self.one("Equal", [tri, self.const(0)])
        elif r < 0.7:  # nanoGPT-like: Range rows and columns compared
            rows = self.one("Range", [self.const(0), self.const(t), self.const(1)])
            cols = self.one("Unsqueeze", [rows, self.const([1])])
            hidden = self.one("Greater", [rows, cols])
        else:  # a computed value's Trilu (imported as where(constant mask, x, 0))
            ones = self.one("Expand", [self.const(np.array(1.0, self.dt), self.dt),
                                       self.const([t, t])])
            tri = self.one("Trilu", [ones, self.const(np.array(0, np.int64))],
                           upper=self.rng.choice((0, 1)))
            hidden = self.one("Equal", [tri, self.const(np.array(0.0, self.dt), self.dt)])
        low = -np.inf if self.rng.random() < 0.7 else float(np.finfo(self.dt).min)
        return self.one("Where", [hidden, self.const(np.array(low, self.dt), self.dt),
                                  self.const(np.array(0.0, self.dt), self.dt)])

    def heads_split(self, x: str) -> str:
        """nanoGPT's ``B, T, C = x.shape; x.view(B, T, h, C // h).transpose(1, 2)``."""
        b, t, c = (self.one("Unsqueeze", [self.dim_of(x, i), self.const([0])])
                   for i in range(3))
        d = self.one("Div", [c, self.const([self.heads])])
        shape = self.one("Concat", [b, t, self.const([self.heads]), d], axis=0)
        return self.one("Transpose", [self.one("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def heads_merge(self, y: str, like: str) -> str:
        y = self.one("Transpose", [y], perm=[0, 2, 1, 3])
        b, t = (self.one("Unsqueeze", [self.dim_of(like, i), self.const([0])]) for i in (0, 1))
        return self.one("Reshape", [y, self.one("Concat", [b, t, self.const([-1])], axis=0)])

    def manual_attention(self, h: str) -> str:
        q, k, v = (self.one("MatMul", [h, self.weight([self.c, self.c])]) for _ in range(3))
        q, k, v = (self.heads_split(z) for z in (q, k, v))
        s = self.one("MatMul", [q, self.one("Transpose", [k], perm=[0, 1, 3, 2])])
        d = self.c // self.heads
        s = self.one("Mul", [s, self.const(np.array(1 / np.sqrt(d), self.dt), self.dt)])
        if self.rng.random() < 0.7:
            s = self.one("Add", [s, self.causal_bias()])
        p = self.one("Softmax", [s], axis=-1)
        if self.rng.random() < 0.4:  # PyTorch's SDPA guard (SPEC-transformers §27.2)
            p = self.one("Where", [self.one("IsNaN", [p]),
                                   self.const(np.array(0.0, self.dt), self.dt), p])
        return self.heads_merge(self.one("MatMul", [p, v]), h)

    def onnx_attention(self, h: str) -> str:
        """One opset-23 Attention node, 3-D (heads as attributes) or 4-D."""
        kv_heads = self.rng.choice([k for k in (1, self.heads) if self.heads % k == 0])
        d = self.c // self.heads
        q = self.one("MatMul", [h, self.weight([self.c, self.c])])
        k = self.one("MatMul", [h, self.weight([self.c, kv_heads * d])])
        v = self.one("MatMul", [h, self.weight([self.c, kv_heads * d])])
        attrs: dict[str, Any] = {}
        four = self.rng.random() < 0.4
        if four:
            q, k, v = (self.one("Transpose", [self.one("Reshape", [z, self.const(
                [0, self.t, n, d])])], perm=[0, 2, 1, 3]) for z, n in
                ((q, self.heads), (k, kv_heads), (v, kv_heads)))
        else:
            attrs = {"q_num_heads": self.int_(self.heads), "kv_num_heads": self.int_(kv_heads)}
        ins = [q, k, v]
        r = self.rng.random()
        if r < 0.25:
            ins.append(self.const(np.tril(np.ones((self.t, self.t), bool)), bool))
        elif r < 0.45:
            ins.append(self.causal_bias())
        if self.rng.random() < 0.3:
            attrs["is_causal"] = self.int_(1)
        if self.rng.random() < 0.3:
            attrs["scale"] = self.float_(self.rng.choice((0.5, 1.0, 0.125)))
        if self.rng.random() < 0.15:
            attrs["softcap"] = self.float_(self.rng.choice((5.0, 30.0)))
        if self.rng.random() < self.edge:
            self.edged = True
            attrs[self.rng.choice(("qk_matmul_output_mode", "softmax_precision"))] = \
                self.rng.choice((0, 1, 16, 3))
        n_out = 1 if self.rng.random() < 0.95 else self.rng.choice((2, 4))
        y = self.node("Attention", ins, n_out, **attrs)[0]
        if four:
            y = self.one("Reshape", [self.one("Transpose", [y], perm=[0, 2, 1, 3]),
                                     self.const([0, self.t, self.c])])
        return y

    # -- the MLP and the odd pieces ---------------------------------------------------------------
    def gelu(self, x: str) -> str:
        if self.opset >= 20 and self.rng.random() < 0.6:
            modes: tuple[str, ...] = ("none", "tanh", "tanh")
            if self.rng.random() < self.edge:
                modes, self.edged = ("exact", "", "TANH"), True
            attrs = {} if self.rng.random() < 0.4 else {"approximate": self.rng.choice(modes)}
            return self.one("Gelu", [x], **attrs)
        half = self.const(np.array(0.5, self.dt), self.dt)  # GELU written out (both exporters)
        e = self.one("Erf", [self.one("Div", [x, self.const(np.array(np.sqrt(2), self.dt),
                                                            self.dt)])])
        one = self.const(np.array(1.0, self.dt), self.dt)
        return self.one("Mul", [self.one("Mul", [x, half]), self.one("Add", [e, one])])

    def mlp(self, x: str) -> str:
        hidden = self.rng.choice((2, 4)) * self.c
        h = self.one("Add", [self.one("MatMul", [x, self.weight([self.c, hidden])]),
                             self.weight([hidden])])
        return self.one("MatMul", [self.gelu(h), self.weight([hidden, self.c])])

    def split_sequence(self, x: str) -> str:
        """SplitToSequence on the channel axis read back by SequenceAt, then summed."""
        parts = self.rng.choice([p for p in (1, 2, 3) if self.c % p == 0])
        size = self.c // parts
        attrs: dict[str, Any] = {"axis": self.int_(self.rng.choice((2, -1)))}
        ins = [x]
        if self.rng.random() < 0.5:
            ins.append(self.const(size if self.rng.random() < 0.5 else [size] * parts))
        elif size != 1:
            return x
        seq = self.one("SplitToSequence", ins, **attrs)
        outs = [self.one("SequenceAt", [seq, self.const(i - parts if self.rng.random() < 0.3
                                                        else i)]) for i in range(parts)]
        y = outs[0]
        for o in outs[1:]:
            y = self.one("Add", [y, o])
        return self.one("Concat", [y] * parts, axis=-1)

    def gather_nd(self, x: str) -> str:
        """GatherND of known indices (a pick per batch row), then Expand back."""
        if not isinstance(self.batch, int):
            return x
        idx = np.array([[self.rng.randrange(self.batch), self.rng.randrange(self.t)]
                        for _ in range(self.batch)], np.int64)
        picked = self.one("GatherND", [x, self.const(idx)])  # [B, C]
        back = self.one("Unsqueeze", [picked, self.const([1])])
        return self.one("Add", [x, back])

    def block(self, x: str) -> str:
        attn = self.onnx_attention if self.opset >= 23 and self.rng.random() < 0.5 else \
            self.manual_attention
        x = self.one("Add", [x, attn(self.norm(x))])
        return self.one("Add", [x, self.mlp(self.norm(x))])

    def head(self, x: str) -> str:
        vocab = self.rng.randint(2, 5)
        logits = self.one("MatMul", [x, self.weight([self.c, vocab])])
        if self.rng.random() < 0.3 and isinstance(self.batch, int):
            logits = self.one("Transpose", [logits], perm=[0, 2, 1])  # [B, V, T]
            labels = self.graph_input("labels", TensorProto.INT64, [self.batch, self.t])
            return self.one("SoftmaxCrossEntropyLoss", [logits, labels])
        return logits

    # -- the model --------------------------------------------------------------------------------
    def build(self) -> onnx.ModelProto:
        """One model (see the module docstring)."""
        rng = self.rng
        x = self.embed() if rng.random() < 0.5 else \
            self.graph_input("x", self.elem, [self.batch, self.t, self.c])
        pieces = [self.block] * rng.choice((1, 1, 2))
        pieces += rng.sample((self.rotary, self.split_sequence, self.gather_nd),
                             rng.choice((0, 0, 1)))
        rng.shuffle(pieces)
        for piece in pieces:
            x = piece(x)
        if rng.random() < 0.5:
            x = self.head(self.norm(x))
        outs = [helper.make_tensor_value_info(o, 0, None) for o in [x] + self.extra_outputs]
        graph = helper.make_graph(self.nodes, rng.choice(("main_graph", "torch_jit", "gpt")),
                                  self.inputs, outs, self.inits)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = helper.find_min_ir_version_for(opsets)
        if not self.edged:  # onnx's C++ shape inference segfaults on some boundary values
            _typed_outputs(model)
        return model


def ort_divergence(model: onnx.ModelProto) -> bool:
    """Models whose onnxruntime results are off on purpose of nothing gradc does: a float64
    ``Gelu``, ``Sin`` or ``Cos`` (onnxruntime 1.32's double kernels: a tanh-mode Gelu about
    1e-9 off, Sin/Cos that lose the reduced argument past pi; gradc's onnx lowering writes
    these functions out for float64, backends/onnx/lower_activation.py)."""
    double = any(t.data_type == TensorProto.DOUBLE for t in model.graph.initializer) or any(
        v.type.tensor_type.elem_type == TensorProto.DOUBLE for v in model.graph.input) or any(
        a.name == "to" and a.i == TensorProto.DOUBLE for n in model.graph.node
        for a in n.attribute)
    return double and any(n.op_type in ("Gelu", "Sin", "Cos") for n in model.graph.node)


def _typed_outputs(model: onnx.ModelProto) -> None:
    """The outputs' types as ONNX shape inference finds them (left bare when it fails)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an invalid model (edge values): outputs keep their bare types
        return
    types = {v.name: v.type for v in list(inferred.graph.value_info)
             + list(inferred.graph.output)}
    for out in model.graph.output:
        t = types.get(out.name)
        if t is not None and t.tensor_type.elem_type:
            out.type.CopyFrom(t)


__all__ = ["TransformerModelGen", "MUTANT_OPS", "MUTANT_ATTRS", "ort_divergence"]
