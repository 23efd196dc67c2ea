"""Import rules of SPEC-transformers §28 on small hand-built ONNX models (no PyTorch needed).

- ONNX ``Attention`` (23-25) is inlined by its function body: T-AT-3's vectors (forward against
  onnxruntime, and the gradients of T-AT-1, whose fully masked row gets a zero gradient through
  the body's row guard, §27.2), GQA, and each refusal naming its input or output (key/value
  cache, a read ``qk_matmul_output``, bfloat16 ``softmax_precision``, unknown input types).
- ``SplitToSequence`` read by ``SequenceAt`` (the dynamo exporter's ``torch.split`` without its
  optimizer) becomes ``Split`` or ``Slice``; other uses are refused naming why.
- ``CastLike``, a ``Cast`` to the input's own dtype (no node), ``GatherElements``/``GatherND``
  of known values folded.
- A float initializer expanded to a shape computed from another value (a ViT's class token) stays
  a parameter.
- MatMul of any rank with broadcast batch axes (§28.1), forward and gradient.
- The refusals of §28.5 with their messages: GatherND with computed indices, ScatterND,
  ScatterElements, Einsum, RotaryEmbedding, com.microsoft operators, bfloat16 tensors.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradc
from gradc.errors import UnsupportedError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from onnx_import_helpers import cross_check, distinct, make  # noqa: E402
from transformer_onnx_cases import (  # noqa: E402
    K, MASK, Q, V, attention_model, causal_attention, masked_attention,
)

F32 = np.float32


def refused(model) -> str:
    with pytest.raises(UnsupportedError) as info:
        gradc.from_onnx(model)
    return str(info.value)


# -- Attention ------------------------------------------------------------------------------------

def test_attention_inlined_gives_t_at_3_forward_and_t_at_1_gradients():
    """T-AT-3: the inlined body equals T-AT-1's out, dQ, dK (and dV); onnxruntime agrees on
    the forward. Without the row guard, dQ's row 1 and all of dK would be NaN."""
    model, feeds = masked_attention()
    got = cross_check(model, feeds)["Y"].reshape(2, 2)
    np.testing.assert_array_equal(got, np.array([[2.4621171951293945, 3.4621171951293945],
                                                 [0, 0]], F32))
    g = gradc.grad(gradc.from_onnx(model), ["Q", "K", "V"])
    for target in ("reference", "numpy", "c"):
        out = gradc.compile(g, target=target)(**feeds, grad_Y=np.ones((1, 1, 2, 2), F32))
        np.testing.assert_allclose(out["grad_Q"].reshape(2, 2),
                                   [[-0.7864477634429932, 0.7864477038383484], [0, 0]],
                                   rtol=4e-7, atol=0, err_msg=target)
        np.testing.assert_allclose(out["grad_K"].reshape(2, 2),
                                   [[-0.7864477634429932, -1.5728955268859863],
                                    [0.7864477038383484, 1.5728954076766968]],
                                   rtol=4e-7, atol=0, err_msg=target)
        np.testing.assert_allclose(out["grad_V"].reshape(2, 2),
                                   [[0.2689414322376251, 0.2689414322376251],
                                    [0.7310585975646973, 0.7310585975646973]],
                                   rtol=4e-7, atol=0, err_msg=target)


def test_attention_causal_default_scale_t_at_3():
    model, feeds = causal_attention()
    got = cross_check(model, feeds, exact=False, rtol=4e-7, atol=0)["Y"].reshape(3, 2)
    np.testing.assert_allclose(got, [[1, 0], [0.6697615385055542, 0.3302384316921234],
                                     [0.85997074842453, 0.4240246117115021]], rtol=4e-7)


def test_attention_3d_grouped_query_with_softcap_agrees_with_onnxruntime():
    """3-D inputs with q_num_heads 4 and kv_num_heads 2 (K and V repeated), a float mask and
    softcap: forward against onnxruntime, gradients finite."""
    rng = np.random.default_rng(5)
    f = lambda w: (TP.FLOAT, [2, 3, w])  # noqa: E731
    m = attention_model({"Q": f(8), "K": f(4), "V": f(4), "mask": (TP.FLOAT, [3, 3])}, ["Y"],
                        q_num_heads=4, kv_num_heads=2, softcap=2.0)
    feeds = {"Q": rng.standard_normal((2, 3, 8)).astype(F32),
             "K": rng.standard_normal((2, 3, 4)).astype(F32),
             "V": rng.standard_normal((2, 3, 4)).astype(F32),
             "mask": np.triu(np.full((3, 3), -1e9, F32), 1)}
    cross_check(m, feeds, exact=False, rtol=2e-6, atol=1e-7)
    g = gradc.grad(gradc.from_onnx(m), ["Q", "K", "V"])
    out = gradc.compile(g, target="reference")(**feeds, grad_Y=np.ones((2, 3, 8), F32))
    assert all(np.isfinite(out[k]).all() for k in ("grad_Q", "grad_K", "grad_V"))


F4 = (TP.FLOAT, [1, 1, 2, 2])


@pytest.mark.parametrize("inputs,outputs,attrs,field", [
    ({"Q": F4, "K": F4, "V": F4, "": None, "pk": F4, "pv": F4}, ["Y"], {},
     "input past_key ('pk') is a key/value cache"),
    ({"Q": F4, "K": F4, "V": F4}, ["Y", "present_key"], {},
     "output present_key ('present_key') is a key/value cache"),
    ({"Q": F4, "K": F4, "V": F4}, ["Y", "", "", "qk"], {"qk_matmul_output_mode": 1},
     "output qk_matmul_output ('qk') is read"),
    ({"Q": F4, "K": F4, "V": F4}, ["Y"], {"softmax_precision": TP.BFLOAT16},
     "attribute softmax_precision: 16 (bfloat16) is not supported"),
])
def test_attention_refusals_name_the_input_or_output(inputs, outputs, attrs, field):
    m = attention_model({k: v for k, v in inputs.items() if k}, outputs, **attrs)
    node = m.graph.node[0]
    del node.input[:]
    node.input.extend(list(inputs))  # the absent attn_mask stays an empty name
    for name in outputs[1:]:
        if name:  # read: a graph output
            m.graph.output.append(oh.make_tensor_value_info(name, TP.FLOAT, None))
    msg = refused(m)
    assert f"Attention 'attn': {field}" in msg, msg


def test_attention_unread_optional_outputs_are_dropped():
    f = (TP.FLOAT, [1, 1, 2, 2])
    m = attention_model({"Q": f, "K": f, "V": f, "mask": (TP.BOOL, [2, 2])},
                        ["Y", "", "", "qk"], scale=1.0, qk_matmul_output_mode=1)
    got = cross_check(m, {"Q": Q, "K": K, "V": V, "mask": MASK})
    assert list(got) == ["Y"]


def test_attention_without_input_types_is_refused():
    """Q comes from an op that ONNX shape inference does not know: no type, no body."""
    m = attention_model({"Q": F4, "K": F4, "V": F4}, ["Y"])
    m.graph.node.insert(0, oh.make_node("MyOp", ["q0"], ["Q"], name="r", domain="com.example"))
    m.graph.input[0].name = "q0"
    m.opset_import.append(oh.make_opsetid("com.example", 1))
    msg = refused(m)
    assert "Attention 'attn': its function body could not be made" in msg, msg


# -- SplitToSequence / SequenceAt -------------------------------------------------------------

def _sequence_model(split, axis=1, keepdims=1, positions=(0, 1, 2), shape=(2, 6, 3),
                    value_info=True, extra_reader=False):
    nodes = [oh.make_node("Relu", ["x"], ["r"], name="relu")]
    ins = ["r"]
    inits = {}
    if split is not None:
        inits["split"] = np.asarray(split, np.int64)
        ins.append("split")
    nodes.append(oh.make_node("SplitToSequence", ins, ["seq"], name="sts", axis=axis,
                              keepdims=keepdims))
    outs = {}
    for k, p in enumerate(positions):
        inits[f"p{k}"] = np.array(p, np.int64)
        nodes.append(oh.make_node("SequenceAt", ["seq", f"p{k}"], [f"y{k}"], name=f"at{k}"))
        outs[f"y{k}"] = F32
    if extra_reader:
        nodes.append(oh.make_node("SequenceLength", ["seq"], ["n"], name="len"))
        outs["n"] = np.int64
    m = make(nodes, {"x": (F32, list(shape))}, outs, inits, opset=18)
    if value_info:
        m.graph.value_info.append(oh.make_tensor_value_info("r", TP.FLOAT, list(shape)))
    return m


@pytest.mark.parametrize("split,keepdims,positions,op", [
    (2, 1, (0, 1, 2), "split"),          # torch.split(x, 2, dim=1): a scalar split
    ([1, 2, 3], 1, (2, 0), "split"),     # sizes; not every part read
    (4, 1, (-1, 0), "split"),            # 4 and 2: the last part is smaller, read from the end
    (None, 0, (0, 5, -2), "split"),      # unbind: parts of 1, squeezed
])
def test_split_to_sequence_read_by_sequence_at(split, keepdims, positions, op):
    m = _sequence_model(split, keepdims=keepdims, positions=positions)
    assert op in {n.op for n in gradc.from_onnx(m).nodes}
    cross_check(m, {"x": distinct((2, 6, 3))})


def test_split_to_sequence_without_known_size_slices_each_part():
    """The model states the split axis as a symbol (value_info), so the rewrite does not know
    the parts' count: each SequenceAt takes its part by Slice (which clamps at the end)."""
    m = _sequence_model(4, axis=2, positions=(0, 1), shape=(2, 3, 6), value_info=False)
    m.graph.node.insert(1, oh.make_node("Shape", ["x"], ["xs"]))
    m.graph.node.insert(2, oh.make_node("Reshape", ["r", "xs"], ["r2"]))
    m.graph.node[3].input[0] = "r2"
    m.graph.value_info.append(oh.make_tensor_value_info("r2", TP.FLOAT, [2, 3, "d"]))
    assert "slice" in {n.op for n in gradc.from_onnx(m).nodes}
    cross_check(m, {"x": distinct((2, 3, 6))})


def test_split_to_sequence_with_a_huge_stated_size_builds_no_huge_split():
    """A value_info that states 10**12 parts (no split input: parts of 1) makes no list of that
    length: each reader slices its part, and the import takes the real (static) shape."""
    m = _sequence_model(None, keepdims=0, positions=(0, 5), value_info=False)
    m.graph.value_info.append(oh.make_tensor_value_info("r", TP.FLOAT, [2, 10**12, 3]))
    g = gradc.from_onnx(m)
    assert "slice" in {n.op for n in g.nodes} and "split" not in {n.op for n in g.nodes}
    x = distinct((2, 6, 3))
    out = gradc.compile(g, target="reference")(x=x)
    np.testing.assert_array_equal(out["y1"], np.maximum(x, 0)[:, 5])


def test_sequence_read_otherwise_is_refused():
    msg = refused(_sequence_model(2, extra_reader=True))
    assert "SplitToSequence 'sts': op SplitToSequence is not supported (gradc has no " \
           "sequence type" in msg, msg
    assert "SequenceAt 'at0': op SequenceAt is not supported" in msg


# -- CastLike, Cast, GatherElements / GatherND folds, the class token ---------------------------

def test_cast_like_of_a_known_value_folds_and_of_a_parameter_casts():
    nodes = [oh.make_node("CastLike", ["c", "x"], ["cc"], name="known"),
             oh.make_node("CastLike", ["w", "x"], ["wc"], name="param"),
             oh.make_node("Add", ["cc", "wc"], ["s"]), oh.make_node("Add", ["s", "x"], ["y"])]
    m = make(nodes, {"x": (np.float64, [3])}, {"y": np.float64},
             {"c": np.array([1, 2, 3], np.int64), "w": np.array([0.5, 0.25, 2], F32)},
             opset=19)
    g = gradc.from_onnx(m)
    assert [p.name for p in g.parameters] == ["w"]  # the float initializer stays a parameter
    assert sum(n.op == "cast" for n in g.nodes) == 1
    cross_check(m, {"x": np.array([1.5, -2, 0.125])})


def test_cast_to_the_same_dtype_is_no_node():
    m = make([oh.make_node("Cast", ["x"], ["c"], to=TP.FLOAT),
              oh.make_node("Relu", ["c"], ["y"])], {"x": (F32, [3])}, {"y": F32})
    assert [n.op for n in gradc.from_onnx(m).nodes] == ["relu"]


def test_gather_elements_and_gather_nd_of_known_values_fold():
    """transformers' BERT picks its token-type ids from a buffer with GatherElements."""
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    nodes = [oh.make_node("GatherElements", ["d", "i"], ["ge"], axis=1),
             oh.make_node("GatherND", ["d", "j"], ["gn"]),
             oh.make_node("Cast", ["ge"], ["gef"], to=TP.FLOAT),
             oh.make_node("Cast", ["gn"], ["gnf"], to=TP.FLOAT),
             oh.make_node("Add", ["x", "gef"], ["y"]), oh.make_node("Add", ["x1", "gnf"], ["y1"])]
    inits = {"d": data, "i": np.array([[0, -1], [2, 2], [3, 0]], np.int64),
             "j": np.array([[2, 1], [0, -1]], np.int64)}
    m = make(nodes, {"x": (F32, [3, 2]), "x1": (F32, [2])}, {"y": F32, "y1": F32}, inits)
    g = gradc.from_onnx(m)
    assert {n.op for n in g.nodes} <= {"constant", "add"}
    cross_check(m, {"x": np.zeros((3, 2), F32), "x1": np.zeros(2, F32)})


def test_expand_of_a_float_initializer_keeps_it_a_parameter():
    """A ViT's class token: ``cls.expand(x.shape[0], -1, -1)`` reads the batch from a Shape;
    the folded shape must not fold the initializer into a constant (it would never train)."""
    nodes = [oh.make_node("Shape", ["x"], ["s"], start=0, end=1),
             oh.make_node("Concat", ["s", "rest"], ["shape"], axis=0),
             oh.make_node("Expand", ["cls", "shape"], ["tok"]),
             oh.make_node("Concat", ["tok", "x"], ["y"], axis=1)]
    inits = {"cls": np.array([[[0.5, -1]]], F32), "rest": np.array([1, 2], np.int64)}
    m = make(nodes, {"x": (F32, [2, 3, 2])}, {"y": F32}, inits)
    g = gradc.from_onnx(m)
    assert [p.name for p in g.parameters] == ["cls"]
    cross_check(m, {"x": distinct((2, 3, 2))})
    gg = gradc.grad(g, ["cls"])
    out = gradc.compile(gg, target="reference")(x=distinct((2, 3, 2)),
                                                 grad_y=np.ones((2, 4, 2), F32))
    np.testing.assert_array_equal(out["grad_cls"], np.full((1, 1, 2), 2, F32))


def test_gather_nd_with_known_indices_is_a_gather_with_its_gradient():
    """GatherND of a computed value at known index pairs: gradc's gather on the flattened
    value (onnxruntime agrees bit for bit); its gradient scatter-adds (a pair read twice gets
    both cotangents)."""
    idx = np.array([[0, 1], [1, -1], [0, 1]], np.int64)
    m = make([oh.make_node("Relu", ["x"], ["r"]), oh.make_node("GatherND", ["r", "i"], ["y"])],
             {"x": (F32, [2, 3, 2])}, {"y": F32}, {"i": idx})
    x = np.arange(1, 13, dtype=F32).reshape(2, 3, 2)
    cross_check(m, {"x": x})
    g = gradc.grad(gradc.from_onnx(m), ["x"])
    dy = np.array([[1, 2], [3, 4], [5, 6]], F32)
    got = gradc.compile(g, target="reference")(x=x, grad_y=dy)["grad_x"]
    want = np.zeros_like(x)
    np.add.at(want, (idx[:, 0], idx[:, 1] % 3), dy)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("projection", ["transpose_matmul", "gemm_trans_b"])
def test_tied_embedding_gradient_sums_the_gather_and_the_projection(projection):
    """§28.4: one initializer read by Gather (the embedding) and by the output projection
    (Transpose + MatMul, or Gemm with transB) is one parameter, whose gradient is the sum of
    the two uses' gradients (each computed alone here by numpy)."""
    rng = np.random.default_rng(3)
    wte = rng.standard_normal((6, 4)).astype(F32)
    ids = np.array([1, 4, 1], np.int64)
    nodes = [oh.make_node("Gather", ["wte", "ids"], ["h"])]
    if projection == "transpose_matmul":
        nodes += [oh.make_node("Transpose", ["wte"], ["wt"], perm=[1, 0]),
                  oh.make_node("MatMul", ["h", "wt"], ["logits"])]
    else:
        nodes += [oh.make_node("Gemm", ["h", "wte"], ["logits"], transB=1)]
    m = make(nodes, {"ids": (np.int64, [3])}, {"logits": F32}, {"wte": wte})
    g = gradc.from_onnx(m)
    assert [p.name for p in g.parameters] == ["wte"]
    dl = rng.standard_normal((3, 6)).astype(F32)
    got = gradc.compile(gradc.grad(g, ["wte"]), target="reference")(
        ids=ids, grad_logits=dl)["grad_wte"]
    h = wte[ids].astype(np.float64)
    projection_part = dl.T.astype(np.float64) @ h           # d(h @ wte^T)/d(wte)
    embedding_part = np.zeros((6, 4))
    np.add.at(embedding_part, ids, dl.astype(np.float64) @ wte.astype(np.float64))
    np.testing.assert_allclose(got, projection_part + embedding_part, rtol=1e-6, atol=1e-6)
    assert np.abs(embedding_part).max() > 0.1 and np.abs(projection_part).max() > 0.1


# -- MatMul of any rank -------------------------------------------------------------------------

@pytest.mark.parametrize("a,b", [((2, 3, 4, 5), (5, 6)), ((5,), (2, 5, 3)), ((4, 1, 3, 5),
                                                                           (2, 5, 7)),
                                 ((2, 1, 2, 3, 4), (2, 4, 5)), ((3, 4), (4,))])
def test_matmul_any_rank_broadcasts_batch_axes(a, b):
    m = make([oh.make_node("MatMul", ["a", "b"], ["y"])], {"a": (F32, list(a)),
                                                         "b": (F32, list(b))}, {"y": F32})
    feeds = {"a": distinct(a) / 8, "b": distinct(b) / 8}
    cross_check(m, feeds, exact=False, rtol=1e-6, atol=1e-6)
    g = gradc.grad(gradc.from_onnx(m), ["a", "b"])
    y = np.matmul(feeds["a"].astype(np.float64), feeds["b"].astype(np.float64))
    out = gradc.compile(g, target="reference")(**feeds, grad_y=np.ones(y.shape, F32))
    # d(sum of y)/d(a[i]) is exact here: y is linear in a, so a unit bump gives it
    for name in ("a", "b"):
        want = np.zeros(feeds[name].shape)
        for idx in itertools.product(*map(range, feeds[name].shape)):
            bumped = {k: v.astype(np.float64) for k, v in feeds.items()}
            bumped[name][idx] += 1.0
            want[idx] = np.matmul(bumped["a"], bumped["b"]).sum() - y.sum()
        np.testing.assert_allclose(out[f"grad_{name}"], want, rtol=1e-5, atol=1e-5,
                                   err_msg=name)


# -- refusals (§28.5) ---------------------------------------------------------------------------

def test_gather_nd_with_computed_indices_is_refused():
    m = make([oh.make_node("Cast", ["i"], ["j"], to=TP.INT64),
              oh.make_node("GatherND", ["x", "j"], ["y"], name="/model/GatherND")],
             {"x": (F32, [3, 4]), "i": (np.int32, [2, 1])}, {"y": F32})
    assert "GatherND '/model/GatherND': op GatherND is not supported (gradc imports Gather" \
        in refused(m)


@pytest.mark.parametrize("op,inputs,attrs,why", [
    ("ScatterND", ["x", "i", "u"], {}, "gradc imports Gather"),
    ("ScatterElements", ["x", "i", "u"], {}, "gradc imports Gather"),
    ("Einsum", ["x", "x"], {"equation": "ij,kj->ik"}, "write the product with matmul"),
])
def test_refused_ops_name_why(op, inputs, attrs, why):
    nodes = [oh.make_node(op, inputs, ["y"], name="n7", **attrs)]
    m = make(nodes, {"x": (F32, [3, 4])}, {"y": F32},
             {"i": np.zeros((1, 1), np.int64), "u": np.zeros((1, 4), F32)})
    assert f"{op} 'n7': op {op} is not supported ({why}" in refused(m)


def test_rotary_embedding_is_refused():
    node = oh.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], name="rope")
    m = make([node], {"x": (F32, [1, 2, 4, 8]), "c": (F32, [4, 4]), "s": (F32, [4, 4])},
             {"y": F32})
    m.opset_import[0].version = 23
    m.ir_version = 10
    assert "RotaryEmbedding 'rope': op RotaryEmbedding is not supported (exporters write " \
           "rotary embeddings as Sin, Cos, Slice, Concat and Mul" in refused(m)


def test_com_microsoft_operators_are_refused_by_domain():
    node = oh.make_node("FastGelu", ["x"], ["y"], name="n7", domain="com.microsoft")
    m = make([node], {"x": (F32, [4])}, {"y": F32})
    m.opset_import.append(oh.make_opsetid("com.microsoft", 1))
    assert "FastGelu 'n7': domain com.microsoft is not supported (export with the standard " \
           "opset)" in refused(m)


def test_bfloat16_tensors_are_refused():
    m = make([oh.make_node("Relu", ["x"], ["y"])], {"x": (F32, [2])}, {"y": F32})
    m.graph.input[0].type.tensor_type.elem_type = TP.BFLOAT16
    assert "BFLOAT16 is not supported" in refused(m)
    w = numpy_helper.from_array(np.zeros(2, F32), "w")
    w.data_type = TP.BFLOAT16
    m2 = make([oh.make_node("Add", ["x", "w"], ["y"])], {"x": (F32, [2])}, {"y": F32})
    m2.graph.initializer.append(w)
    assert "BFLOAT16" in refused(m2)


def test_shape_inference_never_sees_an_unvalidated_attribute(tmp_path):
    """fuzz/regressions/onnx: inlining Attention asked ONNX's shape inference for its inputs'
    types, on the whole model before any validation; onnx's C++ segfaults on a three-output
    LayerNormalization whose axis is 2**31. It now infers only the nodes upstream of the
    value it needs, none of whose integer attributes may exceed 32 bits: the model is
    refused naming the LayerNormalization, in a process that lives on."""
    import subprocess
    import sys

    w = numpy_helper.from_array(np.full((4, 4), 0.25, F32), "w")
    nodes = [oh.make_node("MatMul", ["x", "w"], ["q"]),
             oh.make_node("Attention", ["q", "q", "q"], ["a"], q_num_heads=2, kv_num_heads=2),
             oh.make_node("LayerNormalization", ["a", "s"], ["y", "m", "i"], axis=2 ** 31)]
    model = oh.make_model(oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 3, 4])],
        [oh.make_tensor_value_info("y", TP.FLOAT, None)],
        [w, numpy_helper.from_array(np.ones(4, F32), "s")]),
        opset_imports=[oh.make_opsetid("", 23)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    code = ("import gradc, sys\ntry:\n    gradc.from_onnx(sys.argv[1])\n"
            "except gradc.GradcError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LayerNormalization" in done.stdout and "axis" in done.stdout, done.stdout


@pytest.mark.parametrize("version", [2 ** 62, -1])
def test_an_opset_beyond_a_c_int_is_refused_not_a_type_error(version):
    """fuzz/regressions/onnx: the Attention rewrite passed the model's opset to onnx.defs,
    which takes a C int (TypeError for 2**62); it is clamped as the schema checks clamp it."""
    m, _ = masked_attention()
    m.opset_import[0].version = version
    with pytest.raises(gradc.GradcError):
        gradc.from_onnx(m)


def test_a_rewrite_never_reads_an_attribute_of_the_wrong_type():
    """fuzz/regressions/onnx: the SplitToSequence rewrite read ``axis`` before any
    validation (a STRING axis: ValueError from int(b'')); a node without its schema's
    inputs, outputs and attribute types is left to the importer's schema check."""
    m = _sequence_model(2)
    for n in m.graph.node:
        if n.op_type == "SplitToSequence":
            n.attribute[0].CopyFrom(oh.make_attribute("axis", b""))
    with pytest.raises(gradc.VerifyError, match="attribute axis"):
        gradc.from_onnx(m)


def test_a_rewrite_reads_a_malformed_constant_as_the_importer_does():
    """fuzz/regressions/onnx (seed 4242): SequenceAt's position, an int64 scalar initializer
    holding two values, reached NumPy's reshape inside the SplitToSequence rewrite
    (ValueError); the rewrite reads constants through the importer's tensor reader, which
    refuses malformed data naming the tensor."""
    m = _sequence_model(2)
    (pos,) = [t for t in m.graph.initializer if t.name == "p1"]
    pos.CopyFrom(numpy_helper.from_array(np.array([0, 1], np.int64), "p1"))
    del pos.dims[:]  # a scalar's dims with two values
    with pytest.raises(gradc.VerifyError, match="tensor 'p1'"):
        gradc.from_onnx(m)
