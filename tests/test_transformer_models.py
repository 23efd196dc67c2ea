"""Real transformers, both exporters: import, forward, gradients and training against PyTorch and
onnxruntime (issue 26 item 4; the models are tests/transformer_models.py).

For each model and export form below: the import succeeds; the forward agrees with onnxruntime on
the exported file and with PyTorch; every trained parameter's gradient agrees with PyTorch
autograd (cross entropy over the last axis, ``ignore_index=-100`` on two positions). Then: float64
exports agree tightly; the generated targets agree with the reference; a tied embedding is one
parameter whose gradient sums both uses; AdamW with ``WarmupCosine`` and ``max_grad_norm`` follows
``torch.optim.AdamW`` + ``transformers.get_cosine_schedule_with_warmup`` + ``clip_grad_norm_``
(50 steps for the GPT, fewer for the others); a LoRA fine-tune (``parameters=["*lora_*"]``)
changes only the adapters and follows peft + PyTorch; the training step written as ONNX (by
``to_onnx`` and by ``gradc train-step``) passes the full checker, uses the default domain only
and trains in a plain onnxruntime loop with the reference's numbers.

Tolerances (relative: the largest difference over the largest magnitude; a gradient against the
larger of its own scale and 1e-3 of the model's largest gradient, ``transformer_check``):

- float32, forward 1e-5 and gradients 5e-5. The ops' classes (SPEC-training §9.5,
  SPEC-transformers §23.4) bound each summing op by (n + k + 1)·ε·S relative to its sum of
  magnitudes S: with the widest sums here (n = 128 products in the MLP, k <= 12), about 1e-5
  of S; transcendental ops add 4 ulps. Composed through two layers and the loss, the measured
  worst over every model and form is 1.3e-6 (gradients) and 3.7e-7 (forward): the bounds
  leave 30-40x room for other summation orders (onnxruntime's, PyTorch's vectorized ones).
- float64, 1e-13 for the forward and the gradients: (n + k + 1)·ε is 1.6e-14 with ε = 2^-53;
  measured worst 1.4e-15. Every normalization's epsilon is a float32 value (2^-17) because
  ONNX's attribute and gradc hold epsilon in float32 (SPEC-training §9.3). onnxruntime has no
  float64 Erf or Conv kernels, so float64 forwards are compared with PyTorch only.
- Training trajectories (float32): each step's loss within 1e-5 of PyTorch's. The parameters
  after training within 1e-3 of the largest parameter: Adam turns a gradient that is zero in
  exact arithmetic (attention's key bias: softmax ignores a constant added to a row) into
  steps of a size set by rounding noise, different in each implementation.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Iterator

import numpy as np
import pytest

import gradc
from gradc.cli import main as gradc_main

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxscript")  # the dynamo exporter
import transformer_check as tc  # noqa: E402  (needs torch)
import transformer_models as tm  # noqa: E402

logging.getLogger("torch.onnx").setLevel(logging.ERROR)

FWD_F32, GRAD_F32, TIGHT_F64 = 1e-5, 5e-5, 1e-13
TRAJ_LOSS, TRAJ_PARAM = 1e-5, 1e-3

# (model, export form): "ts" TorchScript in training mode, "dynamo" the default exporter (no
# optimizer), "dynamo23" the same at opset 23 (SDPA as ONNX Attention, inlined by gradc).
F32_CASES = [
    ("gpt", "ts"), ("gpt", "dynamo"), ("gpt", "dynamo23"),
    ("bert", "ts"), ("bert", "dynamo"),
    ("vit", "ts"), ("vit", "dynamo23"),
    ("llama", "ts"), ("llama", "dynamo"),
    ("encoder_pre", "ts"), ("encoder_post", "dynamo"),
    ("hf_gpt2_eager", "ts"), ("hf_bert_sdpa", "ts"), ("hf_bert_eager", "dynamo"),
    ("hf_vit_sdpa", "ts"), ("hf_llama_eager", "ts"), ("hf_llama_sdpa", "dynamo23"),
]
# float64: exports whose constants keep float64 (the dynamo exporter writes a Python float in the
# model, such as llama's 1/sqrt(d) or BERT's finfo(float64).min, as a float32 constant: 1e-8
# relative, or -inf and then 0 * -inf = NaN in a padding mask; transformers' Llama computes its
# rotary embeddings in float32 by design). The report's table lists those too.
F64_CASES = [("gpt", "ts"), ("llama", "ts"), ("encoder_post", "dynamo"),
             ("hf_gpt2_eager", "ts")]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """PyTorch on one thread: the steps are tiny, and the machine is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


_CASES: dict[tuple, tc.Case] = {}


def case(name: str, form: str, dtype: Any = None, symbolic_batch: bool = False) -> tc.Case:
    """Built once per session: the model, its export and its import."""
    dtype = dtype or torch.float32
    key = (name, form, dtype, symbolic_batch)
    if key not in _CASES:
        base, opset = ("dynamo", 23) if form == "dynamo23" else (form, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _CASES[key] = tc.make_case(name, base, dtype, symbolic_batch, opset)
    return _CASES[key]


def torch_forward(c: tc.Case) -> np.ndarray:
    with torch.no_grad():
        return c.model(*c.inputs.values()).numpy()


# -- forward and gradients ----------------------------------------------------------------------

@pytest.mark.parametrize("name,form", F32_CASES)
def test_forward_and_gradients_agree_with_onnxruntime_and_pytorch(name, form):
    c = case(name, form)
    y = tc.gradc_forward(c, "reference")
    assert tc.rel_diff(y, tc.ort_forward(c)) <= FWD_F32
    assert tc.rel_diff(y, torch_forward(c)) <= FWD_F32
    mapping, buffers = tc.param_names(c)
    assert all(b.endswith("inv_freq") for b in buffers), buffers  # rotary frequencies only
    want_loss, want = tc.torch_step(c)
    assert set(mapping.values()) == set(want), "every trainable PyTorch parameter is one"
    loss, got = tc.gradc_step(c, "reference", list(mapping))
    assert loss == pytest.approx(want_loss, rel=FWD_F32)
    diffs = tc.grad_diffs(got, want, mapping)
    worst = max(diffs, key=diffs.__getitem__)
    assert diffs[worst] <= GRAD_F32, (worst, diffs[worst])


@pytest.mark.parametrize("name,form", F64_CASES)
def test_float64_exports_agree_tightly(name, form):
    c = case(name, form, torch.float64)
    assert c.graph is not None
    assert {p.type.dtype.value for p in c.graph.parameters} == {"float64"}
    assert tc.rel_diff(tc.gradc_forward(c, "reference"), torch_forward(c)) <= TIGHT_F64
    mapping, _ = tc.param_names(c)
    want_loss, want = tc.torch_step(c)
    loss, got = tc.gradc_step(c, "reference", list(mapping))
    assert loss == pytest.approx(want_loss, rel=TIGHT_F64)
    assert max(tc.grad_diffs(got, want, mapping).values()) <= TIGHT_F64


def test_attention_dropout_without_training_mode_is_the_identity():
    """§27.5: SDPA's dropout (0.1 here) is exported without training_mode by both exporters;
    gradc imports it as the identity (what the gradient test above compares with PyTorch's
    attention dropout off). Only the training-mode Dropouts (the residual one, ratio 0) draw
    random numbers."""
    for form in ("ts", "dynamo"):
        c = case("gpt", form)
        model = onnx.load_from_string(c.blob)
        made = {o: n.op_type for n in model.graph.node for o in n.output}
        drops = [n for n in model.graph.node if n.op_type == "Dropout"]
        attention = [n for n in drops if made.get(n.input[0]) == "Softmax"]
        assert len(attention) == tm.LAYERS
        assert all(len(n.input) < 3 or not n.input[2] for n in attention)
        assert c.graph is not None
        draws = sum(n.op == "random_generator" for n in c.graph.nodes)
        assert draws == len(drops) - len(attention)


def test_generated_targets_agree_with_the_reference():
    """numpy and c bit for bit with the reference (forward, and numpy's gradients); the onnx
    target within float32 rounding (onnxruntime's own kernels)."""
    c = case("gpt", "ts")
    ref = tc.gradc_forward(c, "reference")
    np.testing.assert_array_equal(tc.gradc_forward(c, "numpy"), ref)
    np.testing.assert_array_equal(tc.gradc_forward(c, "c"), ref)
    assert tc.rel_diff(tc.gradc_forward(c, "onnx"), ref) <= FWD_F32
    mapping, _ = tc.param_names(c)
    _, want = tc.gradc_step(c, "reference", list(mapping))
    _, got = tc.gradc_step(c, "numpy", list(mapping))
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    _, got = tc.gradc_step(c, "onnx", list(mapping))
    assert max(tc.grad_diffs(got, want, {k: k for k in want}).values()) <= GRAD_F32


@pytest.mark.parametrize("form", ["ts", "dynamo"])
def test_tied_embedding_is_one_parameter_whose_gradient_sums_both_uses(form):
    """§28.4: wte is read by Gather (the embedding) and, transposed, by the output projection:
    one parameter, whose gradient is PyTorch's (the sum of both uses). Rows of tokens that are
    not in the batch get only the output projection's term, so they are not zero."""
    c = case("gpt", form)
    assert c.graph is not None
    tables = [p for p in c.graph.parameters if tuple(p.type.shape) == (tm.VOCAB, tm.WIDTH)]
    assert len(tables) == 1
    mapping, _ = tc.param_names(c)
    assert mapping[tables[0].name] == "wte.weight"
    _, want = tc.torch_step(c)
    _, got = tc.gradc_step(c, "reference", [tables[0].name])
    g = got[tables[0].name]
    assert tc.rel_diff(g, want["wte.weight"]) <= GRAD_F32
    absent = sorted(set(range(tm.VOCAB)) - set(c.inputs["input_ids"].reshape(-1).tolist()))
    assert np.abs(g[absent]).max() > 0


@pytest.mark.parametrize("form", ["ts", "dynamo23"])
def test_symbolic_batch_imports_and_runs_another_batch_size(form):
    """A symbolic batch with a fixed sequence length imports (§28.2) and runs a batch of 3."""
    c = case("gpt", form, symbolic_batch=True)
    assert c.graph is not None
    assert c.graph.inputs[0].type.shape[0] == "batch"
    ids = tm.inputs("gpt", seed=5, batch=3)
    c3 = tc.Case("gpt", form, torch.float32, True, c.model, ids, None, c.blob, c.graph)
    assert tc.rel_diff(tc.gradc_forward(c3, "reference"), tc.ort_forward(c3)) <= FWD_F32


def test_symbolic_batch_merged_with_heads_is_refused_naming_the_symbol():
    """The dynamo exporter's explicit SDPA (opset < 23) folds batch and heads into one axis
    (Reshape to (-1, T, d)): gradc keeps a symbol whole, so that export needs a fixed batch."""
    with pytest.raises(gradc.UnsupportedError, match="would merge or split the symbolic dim "
                                                     "'batch'"):
        case("gpt", "dynamo", symbolic_batch=True)


# -- training -------------------------------------------------------------------------------------

LR, WARMUP, CLIP, WD = 3e-3, 5, 1.0, 0.01


def batches(name: str, steps: int, dtype: Any = None) -> list[tuple[dict, Any]]:
    """Four fixed batches, cycled: the loss goes down as the model learns them."""
    fixed = [(tm.inputs(name, seed=100 + k, dtype=dtype or torch.float32),
              tm.labels(name, seed=200 + k)) for k in range(4)]
    return [fixed[s % 4] for s in range(steps)]


def warmup(total: int) -> int:
    return min(WARMUP, total // 2)


def torch_losses(model: Any, data: list, total: int) -> list[float]:
    """PyTorch's loop: AdamW, transformers' warmup-cosine schedule, clip_grad_norm_."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WD)
    sched = transformers.get_cosine_schedule_with_warmup(opt, warmup(total), total)
    out = []
    for inputs, labels in data:
        opt.zero_grad()
        loss = tm.loss_fn(model(*inputs.values()), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        sched.step()
        out.append(float(loss.detach()))
    return out


def optimizer(total: int) -> Any:
    return gradc.optim.AdamW(lr=LR, weight_decay=WD,
                             schedule=gradc.optim.WarmupCosine(warmup(total), total))


def trainer(c: tc.Case, total: int, parameters: Any, target: str = "reference") -> Any:
    assert c.graph is not None
    return gradc.Trainer(c.graph, optimizer(total), loss="cross_entropy", class_axis=-1,
                         ignore_index=-100, max_grad_norm=CLIP, parameters=parameters,
                         target=target)


def gradc_losses(tr: Any, data: list) -> list[float]:
    return [tr.step(**tm.numpy_inputs(i), labels=lab.numpy()) for i, lab in data]


@pytest.mark.parametrize("name,form,steps", [
    ("gpt", "ts", 50), ("llama", "dynamo", 8), ("bert", "ts", 8), ("vit", "ts", 8),
    ("hf_gpt2_eager", "ts", 8),
])
def test_training_follows_pytorch_adamw_warmup_cosine_and_clipping(name, form, steps):
    c = case(name, form)
    mapping, _ = tc.param_names(c)
    data = batches(name, steps)
    model = tm.make(name)  # a fresh copy: the case's model keeps its weights for other tests
    tm.attention_dropout_off(model)
    want = torch_losses(model, data, steps)
    tr = trainer(c, steps, list(mapping))
    got = gradc_losses(tr, data)
    np.testing.assert_allclose(got, want, rtol=TRAJ_LOSS, atol=0)
    if steps >= 50:
        assert min(got[-4:]) < got[0] - 0.5, "the GPT learns its four batches"
    torch_params = dict(model.named_parameters())
    scale = max(float(np.abs(p.detach().numpy()).max()) for p in torch_params.values())
    for g, t in mapping.items():
        diff = np.abs(tr.parameters[g] - torch_params[t].detach().numpy()).max()
        assert diff <= TRAJ_PARAM * scale, (g, diff)


def test_lora_fine_tune_changes_only_the_adapters_and_follows_peft():
    """peft's LoRA on the GPT (qkv, proj, fc): ``parameters=["*lora_*"]`` trains the twelve
    adapter matrices; the step graph holds no other parameter (the base weights are its
    constants), and the losses and adapters follow peft + PyTorch."""
    pytest.importorskip("peft")
    c = case("gpt_lora", "ts")
    assert c.graph is not None
    steps = 10
    tr = trainer(c, steps, ["*lora_*"])
    lora = [p.name for p in c.graph.parameters if "lora_" in p.name]
    assert len(lora) == 12 and sorted(tr.parameters) == sorted(lora)
    state = [f"{n}.{k}" for n in lora for k in ("exp_avg", "exp_avg_sq")]
    assert sorted(p.name for p in tr.step_graph.parameters) == sorted(
        lora + state + ["rng_state"])  # the residual Dropout(0.0) in training mode
    before = {n: a.copy() for n, a in tr.parameters.items()}
    data = batches("gpt_lora", steps)
    got = gradc_losses(tr, data)
    model = tm.attention_dropout_off(tm.make("gpt_lora"))
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    want = torch_losses(model, data, steps)
    np.testing.assert_allclose(got, want, rtol=TRAJ_LOSS, atol=0)
    after = tr.parameters
    assert all(not np.array_equal(after[n], before[n]) for n in lora), "every adapter moved"
    named = dict(model.named_parameters())
    for n in lora:
        np.testing.assert_allclose(after[n], named[n].detach().numpy(), rtol=0, atol=1e-5)
    assert all(torch.equal(named[n], b) for n, b in base.items())


def _standard(model: Any) -> None:
    onnx.checker.check_model(model, full_check=True)
    assert {n.domain for n in model.graph.node} == {""}, "default-domain operators only"
    assert {o.domain for o in model.opset_import} == {""}


def ort_losses(model: Any, names: list[str], data: list) -> tuple[list[float], dict]:
    """Stock onnxruntime: the state from the initializers, then each ``.next`` fed back."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    losses, state = [], {}
    for t, (inputs, labels) in enumerate(data, 1):
        r = dict(zip(outs, sess.run(None, {**tm.numpy_inputs(inputs), "labels": labels.numpy(),
                                           "step": np.array([t], np.int64), **state})))
        losses.append(float(r["loss"]))
        state = {n: r[n + ".next"] for n in names}
    return losses, state


@pytest.mark.parametrize("name,form", [("gpt", "ts"), ("llama", "dynamo")])
def test_training_step_as_standard_onnx_trains_in_onnxruntime(name, form):
    """``to_onnx`` of the step (AdamW, warmup-cosine in the graph, clipping, token labels with
    ignore_index): the full checker, the default domain, and onnxruntime's losses and state
    after 4 steps equal the reference Trainer's within float32 rounding."""
    c = case(name, form)
    assert c.graph is not None
    mapping, _ = tc.param_names(c)
    steps = 4
    step = gradc.training_step(c.graph, optimizer(steps), loss="cross_entropy",
                               parameters=list(mapping), class_axis=-1, ignore_index=-100,
                               max_grad_norm=CLIP)
    model = gradc.to_onnx(step)
    _standard(model)
    data = batches(name, steps)
    names = [p.name for p in step.parameters]
    got, state = ort_losses(model, names, data)
    tr = trainer(c, steps, list(mapping))
    want = gradc_losses(tr, data)
    np.testing.assert_allclose(got, want, rtol=TRAJ_LOSS, atol=0)
    ref = tr.state_dict()
    scale = max(float(np.abs(ref[n]).max()) for n in mapping)
    for n in mapping:
        assert np.abs(state[n] - ref[n]).max() <= 1e-5 * scale, n


def test_train_step_command_writes_a_lora_step_onnxruntime_trains(tmp_path, capsys):
    """The LoRA recipe on the command line: ``gradc train-step --train '*lora_*'`` with the
    token-label, clipping and schedule flags writes a standard step that trains only the
    adapters, with the reference's numbers."""
    pytest.importorskip("peft")
    c = case("gpt_lora", "ts")
    src, out = tmp_path / "lora.onnx", tmp_path / "step.onnx"
    src.write_bytes(c.blob)
    steps = 3
    assert gradc_main(["train-step", str(src), "-o", str(out), "--loss", "cross_entropy",
                       "--class-axis", "-1", "--ignore-index", "-100", "--optimizer", "adamw",
                       "--lr", str(LR), "--weight-decay", str(WD), "--max-grad-norm",
                       str(CLIP), "--schedule", "warmup-cosine", "--warmup-steps",
                       str(warmup(steps)), "--total-steps", str(steps), "--train",
                       "*lora_*"]) == 0
    capsys.readouterr()
    model = onnx.load(str(out))
    _standard(model)
    lora = [p.name for p in c.graph.parameters if "lora_" in p.name]  # type: ignore[union-attr]
    names = [o.name[:-len(".next")] for o in model.graph.output[1:]]
    assert sorted(n for n in names if not n.endswith(("exp_avg", "exp_avg_sq"))) == sorted(
        lora + ["rng_state"])
    data = batches("gpt_lora", steps)
    got, _ = ort_losses(model, names, data)
    want = gradc_losses(trainer(c, steps, ["*lora_*"]), data)
    np.testing.assert_allclose(got, want, rtol=TRAJ_LOSS, atol=0)
