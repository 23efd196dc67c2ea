"""Compile time of a GPT training step on the C target, by depth and width.

    python benchmarks/bench_gpt_compile.py [--configs 4x256,8x256,12x256,12x768] [--repeats 1]

For each configuration LAYERSxWIDTH (benchmarks/gpt_model.py's GPT: heads of 64, context 128,
vocabulary 4096, batch 8, AdamW) the model is exported and imported once (not timed), then the
step is built as ``gradc.Trainer(..., target="c")`` builds it, stage by stage, with an empty
compiler cache: ``training_step`` (differentiation, loss, optimizer), the pass pipeline
(``gradc.optimize``), C generation (the shared plan and the kernels) and the C compiler. The
table gives each stage's seconds (the compiler's wall time and its CPU time, which a loaded
machine inflates less), the lines of C, the kernel calls of one step and the distinct kernel
functions the program defines (identical kernels of identical layers are one function), so
that growth with depth shows where it comes from. Progress goes to stderr, the Markdown table to
stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import gradc
from gradc.backends.c.build import compile_library
from gradc.backends.c.emit import generate

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_model  # noqa: E402
from bench_grads import load, machine  # noqa: E402


def build_once(layers: int, width: int) -> dict[str, float]:
    """Seconds of every stage of one step's build, and the program's size."""
    c = gpt_model.Config(layers=layers, width=width, heads=max(1, width // 64))
    model, x, _ = gpt_model.make(c)
    graph = gradc.from_onnx(gpt_model.export(model, x))
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    step = gradc.training_step(graph, gradc.optim.AdamW(1e-3, weight_decay=0.01),
                               loss="cross_entropy", class_axis=2)
    out["training_step"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    opt = gradc.optimize(step).graph
    out["passes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    in_place = {p.name + ".next": p.name for p in opt.parameters}
    prog = generate(opt, {}, in_place)
    out["generate"] = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="gradc-compile-") as cache:
        before = os.times()
        t0 = time.perf_counter()
        compile_library(prog.source, os.environ.get("CC", "cc"), cache)
        out["cc"] = time.perf_counter() - t0
        after = os.times()
    out["cc_cpu"] = (after.children_user - before.children_user
                     + after.children_system - before.children_system)
    out["lines"] = prog.source.count("\n")
    out["calls"] = len(prog.kernels)
    out["functions"] = len(re.findall(r"^static int k\d+\(", prog.source, re.M))
    out["total"] = out["training_step"] + out["passes"] + out["generate"] + out["cc"]
    return out


def main() -> None:
    """Build every configuration (best of ``--repeats``) and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="4x256,8x256,12x256,12x768",
                    help="comma-separated LAYERSxWIDTH (default 4x256,8x256,12x256,12x768)")
    ap.add_argument("--repeats", type=int, default=1, help="builds per configuration (best)")
    args = ap.parse_args()
    configs = [tuple(int(v) for v in s.split("x")) for s in args.configs.split(",") if s]
    load_before = load()
    rows = []
    for layers, width in configs:
        print(f"[bench] {layers} layers x {width} ...", file=sys.stderr, flush=True)
        runs = [build_once(layers, width) for _ in range(max(1, args.repeats))]
        rows.append((layers, width, min(runs, key=lambda r: r["total"])))
    print("# Compile time of a GPT training step, C target (empty compiler cache)\n")
    print(f"- command: `python benchmarks/bench_gpt_compile.py --configs {args.configs} "
          f"--repeats {args.repeats}`")
    print(machine(1)[0].split(";")[0])  # the CPU (the compiler runs on one thread)
    print(machine(1)[1])
    print(f"- load average (1/5/15 min): before {load_before}, after {load()}\n")
    print("| layers x width | training_step s | passes s | generate s | cc s (CPU s) | total s "
          "| lines of C | kernel calls | kernel functions |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for layers, width, r in rows:
        print(f"| {layers} x {width} | {r['training_step']:.2f} | {r['passes']:.2f} | "
              f"{r['generate']:.2f} | {r['cc']:.2f} ({r['cc_cpu']:.2f}) | {r['total']:.2f} | "
              f"{int(r['lines'])} | {int(r['calls'])} | {int(r['functions'])} |")


if __name__ == "__main__":
    main()
