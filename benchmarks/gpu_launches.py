"""Where a cuda training step's time goes, launch by launch (run on the GPU machine).

    python3 benchmarks/gpu_launches.py [--models resnet18,unet] [--batch 8] [--sums split]
        [--top 25] [--cache DIR] [--streams 1,2,4,8] [--profile] [--out FILE]

For each model of ``bench_gpu.py`` it builds the same ``Trainer(target="cuda")`` step and
prints, in one table per model:

- the step as ``Trainer.step`` times it (median of 20), the captured CUDA graph alone (a
  ``cuGraphLaunch`` between two CUDA events, median of 20: the step without the host's work;
  with ``--streams`` also the same launches captured over other numbers of streams, 1 being
  one chain instead of the DAG of ``backends/cuda/dag.py``), and the sum of the launches
  issued one by one (each between two events, so each carries its launch gap): the
  differences are the host's share, the launch gaps and what the DAG's overlap saves;
  then the step split into gradc's Python (the driver stubbed), the graph as the host sees
  it, and the driver calls; ``--profile`` adds where the host's share goes;
- the slowest ``--top`` launches: their op or fused group, grid and block, ms, and the first
  comment of the kernel's source (a product's sizes and tile, a split's parts), so the next
  kernel to improve is named with what it computes.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gradc  # noqa: E402
from bench_gpu import (MODELS, export_graph, launch_times, make_model,  # noqa: E402
                       runner_of)


def kernel_notes(source: str) -> dict[str, str]:
    """Kernel name -> the first comment inside its body (or '')."""
    out: dict[str, str] = {}
    for m in re.finditer(r"GC_KERNEL (\w+)\(", source):
        body = source[m.end():m.end() + 4000]
        c = re.search(r"/\* (.*?) \*/|// (.*)", body)
        nxt = body.find("GC_KERNEL")
        if c and (nxt < 0 or c.start() < nxt):
            out[m.group(1)] = (c.group(1) or c.group(2) or "").strip()
        else:
            out[m.group(1)] = ""
    return out


def graph_ms(runner: Any, reps: int = 20) -> float:
    """Median ms of one replay of the runner's captured graph, between two CUDA events."""
    drv = runner.driver
    d, stream, ok = drv.d, drv.stream, drv._ok
    drv._current()
    a, b = (ok(d.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    times = []
    for _ in range(reps):
        ok(d.cuEventRecord(a, stream), "cuEventRecord")
        drv.replay(runner.graph)
        ok(d.cuEventRecord(b, stream), "cuEventRecord")
        ok(d.cuStreamSynchronize(stream), "cuStreamSynchronize")
        times.append(ok(d.cuEventElapsedTime(a, b), "cuEventElapsedTime"))
    d.cuEventDestroy(a)
    d.cuEventDestroy(b)
    return float(statistics.median(times))


STUBBED = ("replay", "download", "upload", "copy", "wait_for_others", "synchronize")


def host_split(runner: Any, step: Any, reps: int = 200) -> str:
    """The step's time split three ways: gradc's Python alone (the driver's copies, replay and
    waits stubbed for ``reps`` steps), the graph as the host sees it (``cuGraphLaunch`` to
    the end of a ``cuStreamSynchronize``), and the rest: the driver calls of the step (the
    batch's copies, the loss's download) and their gaps."""
    drv = runner.driver

    def wall(fn: Any, n: int) -> float:
        ms = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            ms.append(1e3 * (time.perf_counter() - t))
        return float(statistics.median(ms))

    total = wall(step, 50)
    graph = wall(lambda: (drv.replay(runner.graph), drv.synchronize()), 50)
    for name in STUBBED:  # instance attributes shadow the driver's methods
        setattr(drv, name, lambda *a, **k: None)
    try:
        python = wall(step, reps)
    finally:
        for name in STUBBED:
            delattr(drv, name)
    return (f"step {total:.3f} ms = gradc's Python {python:.3f} ms + the graph, launch to "
            f"synchronize, {graph:.3f} ms + driver calls and gaps "
            f"{total - python - graph:.3f} ms (medians, one run)\n\n" + driver_calls(drv, step))


DRIVER = ("wait_for_others", "copy", "upload", "mark", "replay", "download", "synchronize",
          "wait_mark")


def driver_calls(drv: Any, step: Any, reps: int = 50) -> str:
    """Each driver call of a step, timed on the host (wall time inside the call, summed over
    ``reps`` steps): what the step's share beyond gradc's Python and the graph is made of.
    A download includes its wait for the stream (the graph's end, for the first one)."""
    spent: dict[str, float] = {n: 0.0 for n in DRIVER}
    calls: dict[str, int] = {n: 0 for n in DRIVER}

    def timed(name: str, fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
                calls[name] += 1
        return call

    for name in DRIVER:
        setattr(drv, name, timed(name, getattr(drv, name)))
    try:
        t = time.perf_counter()
        for _ in range(reps):
            step()
        total = time.perf_counter() - t
    finally:
        for name in DRIVER:
            delattr(drv, name)
    parts = [f"{n} {calls[n] / reps:g}x {1e3 * spent[n] / reps:.3f} ms"
             for n in DRIVER if calls[n]]
    return (f"driver calls per step (mean of {reps} steps of {1e3 * total / reps:.3f} ms; "
            f"a download's time includes its wait for the stream): " + ", ".join(parts))


def max_streams() -> int:
    from gradc.backends.cuda import dag
    return dag.MAX_STREAMS


def one(name: str, batch: int, sums: str, top: int, cache: str | None,
        streams: list[int], profile: bool) -> list[str]:
    import torch

    model, x, y, axis = make_model(name, batch)
    g = export_graph(name, model, x, y)
    xd, yd = x.to("cuda"), y.to("cuda")
    extra = {"cache_dir": cache} if cache else {}
    tr = gradc.Trainer(g, gradc.optim.AdamW(1e-3, weight_decay=0.01), loss="cross_entropy",
                       target="cuda", class_axis=axis, sums=sums, **extra)
    step = functools.partial(tr.step, x=xd, labels=yd)
    for _ in range(3):
        step()
    ms = []
    for _ in range(20):
        t = time.perf_counter()
        step()
        ms.append(1e3 * (time.perf_counter() - t))
    runner = runner_of(tr.executable)
    replay = graph_ms(runner)
    chain = ""
    for n in streams:  # the same launches captured over n streams (1: one chain)
        from gradc.backends.cuda import dag
        keep, dag.MAX_STREAMS = dag.MAX_STREAMS, n
        graph = runner.graph
        runner.graph = runner.driver.capture(runner.functions, runner.arena,
                                             runner.program.dependencies)
        chain += f", over {n} stream{'s' if n > 1 else ''} {graph_ms(runner):.3f} ms"
        runner.graph, dag.MAX_STREAMS = graph, keep
    split = host_split(runner, step)
    host = []
    if profile:  # where the host's share of a step goes
        import cProfile
        import io
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(20):
            step()
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(12)
        host = ["", "Host profile of 20 steps (cProfile, by own time):", "", "```",
                *buf.getvalue().strip().splitlines()[-16:], "```"]
    times = launch_times(runner)
    notes = kernel_notes(runner.program.source)
    launches = runner.program.launches
    lines = [f"## {name}, batch {batch}, sums={sums}", "",
             f"step {statistics.median(ms):.3f} ms (Trainer.step), graph replay {replay:.3f} ms"
             f" (a DAG over up to {max_streams()} streams){chain}, "
             f"{len(launches)} launches one by one {sum(times):.3f} ms", "", split, "",
             "| # | op or group | grid x block | ms | % of one-by-one | kernel note |",
             "|---:|---|---|---:|---:|---|"]
    order = np.argsort(times)[::-1][:top]
    total = sum(times)
    for i in order:
        x_ = launches[i]
        lines.append(f"| {i} | {x_.label[:70]} | {x_.grid} x {x_.block} | {times[i]:.4f} | "
                     f"{100 * times[i] / total:.1f} | {notes.get(x_.kernel, '')[:110]} |")
    del tr, runner
    torch.cuda.empty_cache()
    return lines + host + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18", help=f"comma-separated, of {MODELS}")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--sums", default="split", choices=("split", "canonical"))
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cache", default="", help="gradc's CUBIN cache (default: gradc's own)")
    ap.add_argument("--out", default="", help="also write the tables to this file")
    ap.add_argument("--streams", default="",
                    help="also time the step's graph captured over these numbers of streams "
                         "(comma-separated; 1: one chain of launches, no DAG)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile the host's side of 20 steps (cProfile)")
    args = ap.parse_args()
    out: list[str] = []
    for name in args.models.split(","):
        out += one(name, args.batch, args.sums, args.top, args.cache or None,
                   [int(n) for n in args.streams.split(",") if n], args.profile)
        print("\n".join(out[-(args.top + 30):]), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
