"""The GPT of the transformer benchmarks: a nanoGPT-style decoder, its export and its batch.

``GPT(layers, width, heads, context, vocab)``: token and position embeddings, pre-norm blocks
(LayerNorm, causal self-attention written out -- one fused QKV projection, ``q @ k^T`` scaled,
``masked_fill`` with -inf above the diagonal, softmax, ``@ v``, output projection -- then
LayerNorm and a GELU MLP of 4x the width), a final LayerNorm and an output projection tied to
the token embedding (one parameter). Weights as nanoGPT initializes them: normal(0, 0.02),
biases 0, LayerNorm 1 and 0. The issue's step (``CONFIG``): 4 layers, width 256, 4 heads,
context 128, vocabulary 4096, batch 8.

``build`` exports it once with the TorchScript exporter in training mode (the form
``tests/real_models.py`` calls ``ts_train``), imports it with ``gradc.from_onnx``, and returns a
``bench_train_step.Model`` whose loss is token-level cross-entropy: gradc's Trainer with
``class_axis=2`` on the ``[batch, context, vocab]`` logits, PyTorch's ``F.cross_entropy`` on
the logits viewed as ``[batch * context, vocab]`` (as nanoGPT computes it).

The causal mask is the whole ``context x context`` buffer (nanoGPT slices it to the sequence
length, ``mask[:, :, :T, :T]``; the sequence is always the context here, and the exporter writes
that slice of a bool constant as a Slice node that gradc's importer does not fold).
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import nn

import gradc
import bench_train_step as bts   # (benchmarks/ is on the path of every benchmark)


@dataclass(frozen=True)
class Config:
    """The size of a GPT and of its batch."""

    layers: int = 4
    width: int = 256
    heads: int = 4
    context: int = 128
    vocab: int = 4096
    batch: int = 8


CONFIG = Config()


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads = c.heads
        self.ln_1 = nn.LayerNorm(c.width)
        self.c_attn = nn.Linear(c.width, 3 * c.width)
        self.c_proj = nn.Linear(c.width, c.width)
        self.ln_2 = nn.LayerNorm(c.width)
        self.c_fc = nn.Linear(c.width, 4 * c.width)
        self.mlp_proj = nn.Linear(4 * c.width, c.width)
        mask = torch.tril(torch.ones(c.context, c.context, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, c.context, c.context))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        h = self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(w, dim=2)
        q = q.view(b, t, h, w // h).transpose(1, 2)
        k = k.view(b, t, h, w // h).transpose(1, 2)
        v = v.view(b, t, h, w // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(w // h))
        att = att.masked_fill(~self.mask, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, w)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    """nanoGPT's decoder (module docstring), returning ``[batch, context, vocab]`` logits."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.width)
        self.wpe = nn.Embedding(c.context, c.width)
        self.h = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.width)
        self.lm_head = nn.Linear(c.width, c.vocab, bias=False)
        self.lm_head.weight = self.wte.weight   # tied: one parameter
        self.register_buffer("pos", torch.arange(c.context))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(self.pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """nanoGPT's loss: cross-entropy over ``[batch * context, vocab]``."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def export(model: nn.Module, x: torch.Tensor) -> bytes:
    """The TorchScript export in training mode, without constant folding (``ts_train``)."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.train()
        torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["x"], output_names=["y"])
    return buf.getvalue()


def make(c: Config = CONFIG, seed: int = 0) -> tuple[GPT, torch.Tensor, torch.Tensor]:
    """The model (weights from ``seed``), a batch of tokens and its next-token labels."""
    torch.manual_seed(seed)
    model = GPT(c)
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, c.vocab, (c.batch, c.context), generator=g)
    labels = torch.randint(0, c.vocab, (c.batch, c.context), generator=g)
    return model, x, labels


def build(c: Config = CONFIG) -> bts.Model:
    """A ``bench_train_step.Model`` of the GPT: graph, batch, PyTorch's copy, its loss."""
    model, x, labels = make(c)
    graph = gradc.from_onnx(export(model, x))
    params = sum(p.numel() for p in model.parameters())   # the tied weight once
    return bts.Model("gpt", graph, x, labels, model.train(), params, class_axis=2,
                     torch_loss=token_loss)
