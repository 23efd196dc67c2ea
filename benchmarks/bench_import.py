"""Import time of a PyTorch model: ``gradc.from_torch`` against the ONNX path.

For each model of tests/real_models.py at full width (batch 2, 224x224; the MLP 3x32x32) and the
GPT of tests/transformer_models.py (``gpt``: the tests' size; ``gpt_bench``: issue 26's
benchmark GPT, 4 layers, width 256, 4 heads, context 128, vocabulary 4096, tied embeddings,
batch 8), in training mode: ``from_torch`` split into its steps (``torch.export.export``,
``run_decompositions`` to core ATen, the translation), and the ONNX path (the TorchScript
training export to bytes, then ``gradc.from_onnx``). Medians of ``--repeat`` runs, one torch
thread. Usage: ``python benchmarks/bench_import.py [--models resnet18 ...] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

import gradc
from gradc.torch_frontend import decompose
from gradc.torch_translate import TorchTranslator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import real_models as rm  # noqa: E402
import transformer_models as tm  # noqa: E402

GPTS = {"gpt": dict(batch=2, ids=tm.SEQ),
        "gpt_bench": dict(vocab=4096, width=256, layers=4, heads=4, context=128, batch=8,
                          ids=128)}


def model_and_input(name: str, size: int) -> tuple[Any, Any]:
    """The model in training mode and an example input."""
    if name in GPTS:
        cfg = dict(GPTS[name])
        batch, length = cfg.pop("batch"), cfg.pop("ids")
        torch.manual_seed(0)
        model = tm.attention_dropout_off(tm.gpt2_init(tm.GPT(**cfg))).train()
        vocab = cfg.get("vocab", tm.VOCAB)
        return model, torch.randint(0, vocab, (batch, length))
    model, shape = rm.make(name, 1, size=size)
    return model.train(), torch.randn(2, *shape)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def from_torch_steps(model: Any, x: Any) -> dict[str, float]:
    """Seconds of each step of ``from_torch``."""
    t_export, program = _timed(lambda: torch.export.export(model, (x,)))
    t_decomp, core = _timed(lambda: decompose(program))
    t_translate, g = _timed(lambda: TorchTranslator(torch, core, "m", {}).run())
    return {"export": t_export, "decompose": t_decomp, "translate": t_translate,
            "from_torch": t_export + t_decomp + t_translate, "nodes": len(g.nodes)}


def onnx_steps(model: Any, x: Any) -> dict[str, float]:
    """Seconds of the TorchScript training export and of ``from_onnx``."""
    t_export, blob = _timed(lambda: rm.export(copy.deepcopy(model), "ts_train", x, None))
    t_import, g = _timed(lambda: gradc.from_onnx(blob))
    return {"onnx export": t_export, "from_onnx": t_import, "onnx path": t_export + t_import,
            "onnx nodes": len(g.nodes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "mlp", "gpt",
                                                    "gpt_bench"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    cols = ["export", "decompose", "translate", "from_torch", "onnx export", "from_onnx",
            "onnx path"]
    print(f"| model | {' | '.join(cols)} | from_torch / onnx path | gradc nodes (torch, onnx) |")
    print("|---" * (len(cols) + 3) + "|")
    for name in args.models:
        model, x = model_and_input(name, args.size)
        runs = [{**from_torch_steps(model, x), **onnx_steps(model, x)}
                for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in cols}
        cells = " | ".join(f"{med[k]:.2f} s" for k in cols)
        print(f"| {name} | {cells} | {med['from_torch'] / med['onnx path']:.2f}x | "
              f"{runs[0]['nodes']}, {runs[0]['onnx nodes']} |")


if __name__ == "__main__":
    main()
