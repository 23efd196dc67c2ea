"""Small transformers in PyTorch and their ONNX exports, for the transformer tests (test-only).

Hand-written models (width 32, 2 layers, 2-4 heads, sequence 8, vocabulary 64, batch 2; their
code is tests/transformer_modules.py), each written the way its family is usually written, so
that the exports hold the patterns of SPEC-transformers §27-§28:

- ``gpt``: token + position embeddings (positions by ``arange``), pre-norm blocks, causal
  ``scaled_dot_product_attention`` (``is_causal``, attention dropout), GELU MLP, the output
  projection tied to the token embedding (one parameter).
- ``bert``: post-norm encoder, a padding mask (``attention_mask`` input, additive
  ``finfo.min``), a pooler and a classification head on the first token.
- ``vit``: patch embedding by convolution, class token, position embeddings, pre-norm blocks.
- ``llama``: RMSNorm written out, SiLU-gated MLP, rotary embeddings (``sin``, ``cos``, slices,
  ``cat`` and ``neg``), grouped-query attention (K and V repeated by expand/reshape), a causal
  mask built by ``triu`` of ``-inf``.
- ``encoder_pre`` / ``encoder_post``: ``nn.TransformerEncoder`` with ``norm_first`` True and
  False (the pre-norm one with a causal mask), behind a token embedding and a token classifier.
- ``hf_gpt2``, ``hf_bert``, ``hf_vit``, ``hf_llama`` (each with ``_eager`` or ``_sdpa``
  attention): ``transformers`` models built from configs with random weights (nothing is
  downloaded), wrapped to return the logits alone.
- ``gpt_lora``: ``peft``'s LoRA wrapper of ``gpt`` (adapters on the attention and MLP
  projections).

``export(model, form, ...)``: ``"ts"`` is the TorchScript exporter in training mode
(``dynamo=False, training=TRAINING, do_constant_folding=False``), ``"dynamo"`` the default
exporter. The sequence length is fixed; the batch is fixed or, with ``symbolic_batch``, the
symbol ``batch``. Dropout layers other than the attention dropout have probability 0 so that
PyTorch's numbers are deterministic; the attention dropout that the exporters write without a
``training_mode`` input (§27.5) is kept (0.1), and the PyTorch side of a comparison runs with it
off (``attention_dropout_off``), which is what gradc imports.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from transformer_modules import (  # noqa: F401  (the zoo's sizes, for the tests)
    ATTN_DROPOUT, BATCH, CLASSES, EPS, IMAGE, LAYERS, PATCH, SEQ, VOCAB, WIDTH, GPT, Bert,
    CausalSelfAttention, Encoder, Llama, ViT,
)

FORMS = ("ts", "dynamo")


# -- transformers' models ---------------------------------------------------------------------

class Logits(nn.Module):
    """A ``transformers`` model returning its logits alone (the exporters want tensors)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        names = self.model.main_input_name, "attention_mask"
        return self.model(**dict(zip(names, args)), return_dict=True).logits


def _hf(name: str, attn: str) -> nn.Module:
    import transformers as tf  # lazy: only the transformers cases need it

    common: dict[str, Any] = {"attn_implementation": attn}
    # Eager attention applies its dropout with F.dropout(training=...): a training-mode Dropout
    # in the export, which gradc draws like PyTorch but with its own numbers. SDPA passes it as
    # dropout_p, which both exporters write without training_mode (§27.5): kept there.
    drop = ATTN_DROPOUT if attn == "sdpa" else 0.0
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=WIDTH, n_layer=LAYERS,
                            n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=drop,
                            bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                            layer_norm_epsilon=EPS, **common)
        return Logits(tf.GPT2LMHeadModel(cfg))
    if name == "bert":
        cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS,
                            num_attention_heads=4, intermediate_size=2 * WIDTH,
                            max_position_embeddings=16, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=drop, num_labels=CLASSES,
                            layer_norm_eps=EPS, **common)
        return Logits(tf.BertForSequenceClassification(cfg))
    if name == "vit":
        cfg = tf.ViTConfig(image_size=IMAGE, patch_size=PATCH, num_channels=3,
                           hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=2,
                           intermediate_size=2 * WIDTH, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=drop, num_labels=CLASSES,
                           layer_norm_eps=EPS, **common)
        return Logits(tf.ViTForImageClassification(cfg))
    if name == "llama":
        cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=2 * WIDTH,
                             num_hidden_layers=LAYERS, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=16,
                             attention_dropout=drop, rms_norm_eps=EPS, **common)
        return Logits(tf.LlamaForCausalLM(cfg))
    raise KeyError(name)


def lora(model: nn.Module, targets: tuple[str, ...] = ("qkv", "proj", "fc")) -> nn.Module:
    """``peft``'s LoRA wrapper (rank 4, alpha 8, dropout 0) of the named projections."""
    from peft import LoraConfig, get_peft_model  # lazy: only the LoRA cases need peft

    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=list(targets))
    wrapped = get_peft_model(model, cfg)
    # peft initializes B to zeros: the adapters would then have no effect and A no gradient;
    # random B makes the test see both factors.
    with torch.no_grad():
        for n, p in wrapped.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.1)
    return wrapped


# -- the zoo --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """How to build a model and its inputs."""

    build: Callable[[], nn.Module]
    kind: str  # "lm" (labels [N, T], class axis -1), "cls" (labels [N]), "token" ([N, T])
    inputs: tuple[str, ...]  # "ids", "mask", "pixels"


MODELS: dict[str, Spec] = {
    "gpt": Spec(GPT, "lm", ("ids",)),
    "bert": Spec(Bert, "cls", ("ids", "mask")),
    "vit": Spec(ViT, "cls", ("pixels",)),
    "llama": Spec(Llama, "lm", ("ids",)),
    "encoder_pre": Spec(lambda: Encoder(True), "token", ("ids",)),
    "encoder_post": Spec(lambda: Encoder(False), "token", ("ids",)),
    "gpt_lora": Spec(lambda: lora(GPT()), "lm", ("ids",)),
    **{f"hf_{m}_{a}": Spec(lambda m=m, a=a: _hf(m, a),  # type: ignore[misc]
                           "lm" if m in ("gpt2", "llama") else "cls",
                           ("pixels",) if m == "vit" else ("ids", "mask") if m == "bert"
                           else ("ids",))
       for m in ("gpt2", "bert", "vit", "llama") for a in ("eager", "sdpa")},
}
INPUT_NAMES = {"ids": "input_ids", "mask": "attention_mask", "pixels": "pixels"}


def gpt2_init(model: nn.Module) -> nn.Module:
    """GPT-2's initialization for the hand-written models: linear and embedding weights from
    N(0, 0.02), biases 0 (PyTorch's defaults give embeddings of N(0, 1), which with a tied
    output projection make the first logits huge)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def make(name: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The model with weights from ``seed``, in training mode, in ``dtype``."""
    torch.manual_seed(seed)
    model = MODELS[name].build()
    if not name.startswith("hf_"):
        gpt2_init(model.base_model.model if name.endswith("_lora") else model)
        if name.endswith("_lora"):  # the adapters again after the base (``lora``'s B)
            torch.manual_seed(seed + 1)
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    nn.init.normal_(p, 0.0, 0.1)
    return model.to(dtype).train()


def inputs(name: str, seed: int = 1, batch: int = BATCH,
           dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """A batch of inputs by ONNX input name: token ids (never 0: ``nn.Embedding``'s
    ``padding_idx``, which BERT's config sets to 0, gives that row no gradient in PyTorch, and
    the exports do not record it), a padding mask whose second row pads its last 3 positions,
    or images."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for kind in MODELS[name].inputs:
        if kind == "ids":
            out["input_ids"] = torch.randint(1, VOCAB, (batch, SEQ), generator=g)
        elif kind == "mask":
            mask = torch.ones(batch, SEQ, dtype=torch.int64)
            mask[1:, SEQ - 3:] = 0
            out["attention_mask"] = mask
        else:
            out["pixels"] = torch.randn(batch, 3, IMAGE, IMAGE, generator=g, dtype=dtype)
    return out


def labels(name: str, seed: int = 2, batch: int = BATCH) -> torch.Tensor:
    """Labels for the loss: ``[N, T]`` token labels (class axis -1) with -100 (ignored) at
    two positions of the first row, or ``[N]`` classes."""
    g = torch.Generator().manual_seed(seed)
    kind = MODELS[name].kind
    if kind == "cls":
        return torch.randint(0, CLASSES, (batch,), generator=g)
    classes = VOCAB if kind == "lm" else CLASSES
    y = torch.randint(0, classes, (batch, SEQ), generator=g)
    y[0, :2] = -100
    return y


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """PyTorch's loss of the same step: cross entropy over the last axis, ignore_index -100."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                           ignore_index=-100)


def attention_dropout_off(model: nn.Module) -> nn.Module:
    """The model as gradc imports it (§27.5): the attention-probability dropout, which both
    exporters write without ``training_mode``, off; every other module as it is."""
    for m in model.modules():
        if isinstance(m, CausalSelfAttention):
            m.attn_dropout = 0.0
        if hasattr(m, "config") and hasattr(m.config, "attn_pdrop"):
            m.config.attn_pdrop = 0.0
        for attr in ("attention_dropout", "attn_dropout"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)
        if isinstance(m, nn.Dropout) and m.p == ATTN_DROPOUT:
            m.p = 0.0
    return model


def export(model: nn.Module, form: str, args: dict[str, torch.Tensor],
           symbolic_batch: bool = False, opset: int | None = None,
           optimize: bool = False) -> bytes:
    """The ONNX bytes of ``model`` on ``args`` (a dict: input name -> tensor), output
    ``logits``. ``ts``: TorchScript exporter, training mode, no constant folding (opset 17
    unless given); ``dynamo``: the default exporter (its default opset unless given)."""
    buf = io.BytesIO()
    names = list(args)
    values = tuple(args.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.train()
        if form == "ts":
            axes = {n: {0: "batch"} for n in names + ["logits"]} if symbolic_batch else None
            torch.onnx.export(model, values, buf, dynamo=False, opset_version=opset or 17,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=names,
                              output_names=["logits"], dynamic_axes=axes)
        elif form == "dynamo":
            shapes = None
            if symbolic_batch:
                batch = torch.export.Dim("batch", min=1, max=1024)
                shapes = tuple({0: batch} for _ in names)
            kw: dict[str, Any] = {} if opset is None else {"opset_version": opset}
            prog = torch.onnx.export(model, values, dynamo=True, input_names=names,
                                     output_names=["logits"], dynamic_shapes=shapes,
                                     optimize=optimize, verbose=False, **kw)
            prog.save(buf)
        else:
            raise KeyError(form)
    return buf.getvalue()


def numpy_inputs(args: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The same arrays for gradc and onnxruntime."""
    return {k: v.detach().numpy() for k, v in args.items()}
