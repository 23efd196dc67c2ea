"""Small transformers in PyTorch for the ``gradc.from_torch`` transformer tests (test-only).

The models of the transformer issue, at width 32, 2 layers, 2-4 heads, sequence 8, vocabulary
64, batch 2, each written as its family usually is; the hand-written ones are the same classes
as the ONNX import's transformer tests use (to be shared with them):

- ``gpt``: token + position embeddings (positions by ``arange``), pre-norm blocks, causal
  ``scaled_dot_product_attention``, GELU MLP, the output projection tied to the token
  embedding (one parameter).
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
  downloaded), wrapped to return the logits alone. BERT's config gives its word embedding
  ``padding_idx=0``; ``inputs`` puts that token at the padded positions, so that the tests see
  PyTorch's padding gradient (none for that row).

Every dropout probability is 0: ``from_torch`` applies a dropout with gradc's own random bits
(SPEC-training §20), so a comparison with PyTorch's numbers needs none (the attention dropout of
``scaled_dot_product_attention`` is checked on its own in test_from_torch_ops.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, LAYERS, SEQ, BATCH, CLASSES = 64, 32, 2, 8, 2, 5
IMAGE, PATCH = 12, 4  # ViT: 3 x 12 x 12 images, 4 x 4 patches: 9 patches + the class token
ATTN_DROPOUT = 0.0
PAD = 0  # BERT's pad_token_id: the padding_idx of its word embedding
# Every normalization's epsilon: a float32 value, because gradc holds epsilon in float32
# (SPEC-training §9.3) also for float64 data, where PyTorch uses the Python float; 2**-17 keeps
# the float64 comparisons tight.
EPS = 2.0 ** -17


# -- GPT ------------------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    """One packed projection, causal SDPA with attention dropout, an output projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.attn_dropout = ATTN_DROPOUT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class GPTBlock(nn.Module):
    """Pre-norm: x + attn(ln(x)), x + mlp(ln(x)) with a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=EPS), nn.LayerNorm(width, eps=EPS)
        self.attn = CausalSelfAttention(width, heads)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.dropout(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """nanoGPT's shape: wte + wpe, blocks, ln_f, lm_head tied to wte."""

    def __init__(self, vocab: int = VOCAB, width: int = WIDTH, layers: int = LAYERS,
                 heads: int = 2, context: int = 16) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(GPTBlock(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=EPS)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one parameter

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# -- BERT -----------------------------------------------------------------------------------------

class BertLayer(nn.Module):
    """Post-norm: ln(x + attn(x)), ln(x + mlp(x)); separate q, k, v; an additive mask."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.o = nn.Linear(width, width)
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=EPS), nn.LayerNorm(width, eps=EPS)
        self.fc, self.out = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        d = c // self.heads

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.heads, d).permute(0, 2, 1, 3)

        s = heads(self.q(x)) @ heads(self.k(x)).transpose(-1, -2) / math.sqrt(d)
        p = torch.softmax(s + bias, dim=-1)
        y = (p @ heads(self.v(x))).permute(0, 2, 1, 3).reshape(b, t, c)
        x = self.ln1(x + self.o(y))
        return self.ln2(x + self.out(F.gelu(self.fc(x))))


class Bert(nn.Module):
    """Embeddings (+ LayerNorm), post-norm layers, tanh pooler on token 0, a classifier."""

    def __init__(self, vocab: int = VOCAB, width: int = WIDTH, layers: int = LAYERS,
                 heads: int = 4, context: int = 16, classes: int = CLASSES) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.ln = nn.LayerNorm(width, eps=EPS)
        self.layers = nn.ModuleList(BertLayer(width, heads) for _ in range(layers))
        self.pool, self.cls = nn.Linear(width, width), nn.Linear(width, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.ln(self.tok(input_ids) + self.pos(pos))
        # BERT's extended mask: 0 where attended, the dtype's most negative value at padding
        keep = attention_mask[:, None, None, :].to(x.dtype)
        bias = (1.0 - keep) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


# -- ViT ------------------------------------------------------------------------------------------

class ViTBlock(nn.Module):
    """Pre-norm, non-causal SDPA, GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=EPS), nn.LayerNorm(width, eps=EPS)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class ViT(nn.Module):
    """Conv patch embedding, class token, position embeddings, blocks, head on the class token."""

    def __init__(self, width: int = WIDTH, layers: int = LAYERS, heads: int = 2,
                 classes: int = CLASSES) -> None:
        super().__init__()
        n = (IMAGE // PATCH) ** 2
        self.patch = nn.Conv2d(3, width, PATCH, PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, width) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(width, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(width, eps=EPS), nn.Linear(width, classes)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x)[:, 0])


# -- Llama ----------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """LlamaRMSNorm's formula: x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, width: int, eps: float = EPS) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the last axis."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class LlamaAttention(nn.Module):
    """Rotary q and k, K and V repeated for grouped-query attention, a causal -inf mask."""

    def __init__(self, width: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, kv_heads * self.d, bias=False)
        self.v = nn.Linear(width, kv_heads * self.d, bias=False)
        self.o = nn.Linear(width, width, bias=False)

    def _repeat(self, z: torch.Tensor) -> torch.Tensor:
        b, h, t, d = z.shape
        r = self.heads // h
        return z[:, :, None].expand(b, h, r, t, d).reshape(b, h * r, t, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.heads, self.d).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = self._repeat(k), self._repeat(v)
        mask = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.d) + mask
        y = torch.softmax(s, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, t, c))


class LlamaBlock(nn.Module):
    """Pre-RMSNorm attention and SiLU-gated MLP."""

    def __init__(self, width: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(width), RMSNorm(width)
        self.attn = LlamaAttention(width, heads, kv_heads)
        self.gate = nn.Linear(width, 2 * width, bias=False)
        self.up = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """Embedding, blocks with rotary embeddings computed from positions, RMSNorm, an untied
    output projection."""

    def __init__(self, vocab: int = VOCAB, width: int = WIDTH, layers: int = LAYERS,
                 heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(LlamaBlock(width, heads, kv_heads) for _ in range(layers))
        self.norm, self.lm_head = RMSNorm(width), nn.Linear(width, vocab, bias=False)
        d = width // heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        pos = torch.arange(idx.shape[1], device=idx.device).to(x.dtype)
        freqs = pos[:, None] * self.inv_freq.to(x.dtype)[None, :]
        angles = torch.cat([freqs, freqs], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


# -- nn.TransformerEncoder --------------------------------------------------------------------

class Encoder(nn.Module):
    """Token embedding, ``nn.TransformerEncoder`` (pre- or post-norm), a token classifier.
    The pre-norm one runs with a causal mask (``is_causal``)."""

    def __init__(self, norm_first: bool, vocab: int = VOCAB, width: int = WIDTH,
                 layers: int = LAYERS, heads: int = 4) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0,
                                           activation="gelu", layer_norm_eps=EPS,
                                           batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        if self.norm_first:
            t = idx.shape[1]
            mask = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
            x = self.encoder(x, mask=mask, is_causal=True)
        else:
            x = self.encoder(x)
        return self.head(x)


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
    drop = ATTN_DROPOUT
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
    **{f"hf_{m}_{a}": Spec(lambda m=m, a=a: _hf(m, a),  # type: ignore[misc]
                           "lm" if m in ("gpt2", "llama") else "cls",
                           ("pixels",) if m == "vit" else ("ids", "mask") if m == "bert"
                           else ("ids",))
       for m in ("gpt2", "bert", "vit", "llama") for a in ("eager", "sdpa")},
}


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


def make(name: str, seed: int = 0, dtype: torch.dtype = torch.float64) -> nn.Module:
    """The model with weights from ``seed``, in training mode, in ``dtype``."""
    torch.manual_seed(seed)
    model = MODELS[name].build()
    if not name.startswith("hf_"):
        gpt2_init(model)
    return model.to(dtype).train()


def inputs(name: str, seed: int = 1, dtype: torch.dtype = torch.float64,
           batch: int = BATCH) -> tuple[torch.Tensor, ...]:
    """A batch of inputs in the forward's order: token ids (``PAD`` only at padded
    positions), a padding mask whose second row pads its last 3 positions, or images."""
    g = torch.Generator().manual_seed(seed)
    out: list[torch.Tensor] = []
    for kind in MODELS[name].inputs:
        if kind == "ids":
            out.append(torch.randint(1, VOCAB, (batch, SEQ), generator=g))
        elif kind == "mask":
            mask = torch.ones(batch, SEQ, dtype=torch.int64)
            mask[1:, SEQ - 3:] = 0
            out[0][mask == 0] = PAD
            out.append(mask)
        else:
            out.append(torch.randn(batch, 3, IMAGE, IMAGE, generator=g, dtype=dtype))
    return tuple(out)


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
    """PyTorch's token loss: cross entropy over the last axis, ignore_index -100."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                           ignore_index=-100)
