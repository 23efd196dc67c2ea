"""The hand-written transformers of the test zoo (tests/transformer_models.py builds, exports
and describes them; this module is their PyTorch code, test-only).

Width 32, 2 layers, 2-4 heads, vocabulary 64, sequence 8; each written the way its family is
usually written: ``GPT`` (nanoGPT: causal SDPA with dropout, pre-norm, GELU, tied output
projection), ``Bert`` (post-norm, additive ``finfo.min`` padding mask, pooler and classifier),
``ViT`` (convolution patches, class token, position embeddings), ``Llama`` (RMS norm written
out, SiLU-gated MLP, rotary embeddings with sin/cos/slice/cat/neg, grouped-query attention by
expand/reshape, a causal ``-inf`` mask by ``triu``) and ``Encoder`` (``nn.TransformerEncoder``,
pre- or post-norm).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, LAYERS, SEQ, BATCH, CLASSES = 64, 32, 2, 8, 2, 5
IMAGE, PATCH = 12, 4  # ViT: 3 x 12 x 12 images, 4 x 4 patches: 9 patches + the class token
ATTN_DROPOUT = 0.1
# Every normalization's epsilon: a float32 value, because ONNX's LayerNormalization attribute
# and gradc (SPEC-training §9.3) hold epsilon in float32 also for float64 data, where PyTorch
# uses the Python float; 2**-17 keeps the float64 comparisons tight.
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
