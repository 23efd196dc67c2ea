"""Write the character-level GPT example: ``examples/char_gpt.onnx`` (a tiny GPT-2-style decoder
exported by PyTorch in training mode), ``examples/shakespeare.npz`` and
``examples/shakespeare_val.npz`` (its training and validation windows of
``examples/shakespeare_200k.txt``). Run once by a developer (needs torch: ``pip install
torch``, then ``python examples/make_char_gpt.py``); the data functions need NumPy alone.

The vocabulary is the sorted set of the corpus's characters (62 of them: ``vocabulary``); a
character's token id is its position there. The first 90% of the text trains, the last 10%
validates. An example is a window of ``CONTEXT`` characters ``idx`` and the ``CONTEXT``
characters that follow each of them, ``labels`` (the window shifted by one): a language model's
next-token targets, for ``--loss cross_entropy --class-axis -1``. The training windows start
every ``TRAIN_STRIDE`` characters (a subset of all windows, to keep the file small); the
validation windows do not overlap.

The model (``CharGPT``, nanoGPT's shape): token and position embeddings, ``LAYERS`` pre-norm
blocks of causal self-attention (``scaled_dot_product_attention(is_causal=True)``, ``HEADS``
heads) and a GELU MLP, a final layer norm and an output projection tied to the token embedding
(one parameter), no dropout, GPT-2's initialization (N(0, 0.02)) from ``torch.manual_seed(0)``.
The TorchScript exporter writes it in training mode without constant folding (which would
untie the output projection from the embedding), with the sequence length fixed at
``CONTEXT`` and a symbolic batch ``batch``: input ``idx`` int64 ``[batch, 64]``, output
``logits`` float32 ``[batch, 64, 62]``.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "shakespeare_200k.txt"
CONTEXT, WIDTH, LAYERS, HEADS = 64, 64, 2, 4
TRAIN_FRACTION = 0.9
TRAIN_STRIDE = 37  # about 4,400 training windows; every character is in one or two of them


def read_corpus(path: Path = CORPUS) -> str:
    """The corpus as text (UTF-8; ASCII in fact), line ends as they are."""
    return path.read_bytes().decode("utf-8")


def vocabulary(text: str) -> str:
    """The characters of ``text``, sorted: character ``vocabulary(text)[i]`` is token ``i``."""
    return "".join(sorted(set(text)))


def encode(text: str, vocab: str) -> np.ndarray:
    """Token ids (int64) of ``text``; every character must be in ``vocab``."""
    table = {c: i for i, c in enumerate(vocab)}
    return np.array([table[c] for c in text], np.int64)


def windows(ids: np.ndarray, stride: int) -> dict[str, np.ndarray]:
    """``idx`` [N, CONTEXT]: windows of ``ids`` starting every ``stride`` tokens; ``labels``:
    the tokens that follow each position (the same windows, one token later)."""
    starts = np.arange(0, len(ids) - CONTEXT, stride)
    rows = starts[:, None] + np.arange(CONTEXT + 1)[None, :]
    w = ids[rows]
    return {"idx": np.ascontiguousarray(w[:, :-1]), "labels": np.ascontiguousarray(w[:, 1:])}


def datasets(text: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The training windows (first 90% of ``text``) and the validation windows (last 10%)."""
    ids = encode(text, vocabulary(text))
    cut = int(len(ids) * TRAIN_FRACTION)
    return windows(ids[:cut], TRAIN_STRIDE), windows(ids[cut:], CONTEXT)


def model(vocab_size: int) -> Any:
    """The network (``torch.nn.Module``) with GPT-2's initialization from seed 0."""
    import torch  # lazy: the data functions above need no torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        """Pre-norm: x + attn(ln1(x)), then x + mlp(ln2(x))."""

        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
            self.fc, self.out = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class CharGPT(nn.Module):
        """Token + position embeddings, the blocks, ln_f, lm_head tied to the embedding."""

        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab_size, WIDTH)
            self.wpe = nn.Embedding(CONTEXT, WIDTH)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(WIDTH)
            self.lm_head = nn.Linear(WIDTH, vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # tied: one parameter

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    torch.manual_seed(0)
    net = CharGPT()
    for m in net.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
    return net


def export(net: Any) -> bytes:
    """The ONNX bytes of ``net``: TorchScript exporter, training mode, no constant folding,
    opset 17, sequence length ``CONTEXT``, symbolic batch ``batch``."""
    import torch  # lazy: see model()

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(net.train(), (torch.zeros(2, CONTEXT, dtype=torch.int64),), buf,
                          dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["idx"], output_names=["logits"],
                          dynamic_axes={"idx": {0: "batch"}, "logits": {0: "batch"}})
    return buf.getvalue()


def main() -> None:
    """Write the three files and say their sizes."""
    text = read_corpus()
    train, val = datasets(text)
    np.savez_compressed(HERE / "shakespeare.npz", **train)
    np.savez_compressed(HERE / "shakespeare_val.npz", **val)
    (HERE / "char_gpt.onnx").write_bytes(export(model(len(vocabulary(text)))))
    for name, arrays in (("shakespeare.npz", train), ("shakespeare_val.npz", val)):
        print(f"wrote examples/{name}: {len(arrays['idx'])} windows of {CONTEXT} characters "
              f"({(HERE / name).stat().st_size} bytes)")
    print(f"wrote examples/char_gpt.onnx ({(HERE / 'char_gpt.onnx').stat().st_size} bytes)")


if __name__ == "__main__":
    main()
