"""The training loop of the C target on the README's two examples: a symbolic batch compiled per
batch size (``gradc.Trainer``), and OpenMP's idle threads (the C target's ``spin_count``) on a
machine whose cores other processes use.

Each measurement is a fresh process (libgomp reads its spin count once per process): a
``gradc.Trainer`` on ``examples/char_gpt.onnx`` (AdamW, clipping, batch 32) or
``examples/digits_cnn.onnx`` (Adam, batch 32), a few untimed steps (the compile, the first
touch of the arena), then ``--steps`` timed steps over consecutive batches of the data; it
reports wall ms per step (mean: the throughput of an epoch) and the process's user and system
CPU ms per step (``getrusage``; a spinning thread counts as user time).

- ``--trainer old``: the step compiled once with the batch symbolic (the Trainer before it
  bound sizes: every intermediate value allocated per call); ``new``: bound per size.
- ``--spins``: the ``spin_count`` values (``300000`` is libgomp's own default, ``0`` sleeps at
  once like ``OMP_WAIT_POLICY=passive``); ``threads1``: one thread.
- ``--busy``: background processes that spin (``while True: pass``) during the measurements.
- ``--raise-priority``: run everything in a new session whose autogroup has nice -20 (Linux,
  root), so that on a shared machine the measured processes and the ``--busy`` ones compete
  with each other and hardly with the others': ``--busy 0`` then stands for an idle machine.

Usage: ``.venv/bin/python benchmarks/bench_train_loop.py --models gpt,digits --busy 0,2
--reps 3 --spins 300000,1000,0,threads1 --trainer new --raise-priority``. Prints a markdown
table of the median over ``--reps`` runs (and each run's figure).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32


def measure(model: str, trainer: str, spin: str, steps: int) -> dict[str, float]:
    """One measurement in this process."""
    import gradc  # lazy: the parent process never loads the C runtime
    import gradc.trainer

    if trainer == "old":
        gradc.trainer.BINDING_TARGETS = frozenset()  # type: ignore[misc]
    options: dict = {"threads": 1 if spin == "threads1" else 2}
    if spin != "threads1":
        options["spin_count"] = int(spin)
    if model == "gpt":
        g = gradc.from_onnx(str(ROOT / "examples/char_gpt.onnx"))
        z = np.load(ROOT / "examples/shakespeare.npz")
        tr = gradc.Trainer(g, gradc.optim.AdamW(lr=3e-3), loss="cross_entropy", class_axis=-1,
                           max_grad_norm=1.0, **options)
        data = {"idx": z["idx"], "labels": z["labels"]}
    else:
        g = gradc.from_onnx(str(ROOT / "examples/digits_cnn.onnx"))
        z = np.load(ROOT / "examples/digits.npz")
        tr = gradc.Trainer(g, gradc.optim.Adam(lr=0.01), loss="cross_entropy", **options)
        data = {"x": z["x"], "labels": z["labels"]}
    n = len(next(iter(data.values()))) // BATCH
    batches = [{k: np.ascontiguousarray(v[(i % n) * BATCH:(i % n + 1) * BATCH])
                for k, v in data.items()} for i in range(steps + 5)]
    for b in batches[:5]:
        tr.step(**b)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for b in batches[5:]:
        tr.step(**b)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return {"ms": 1e3 * wall / steps, "user": 1e3 * (r1.ru_utime - r0.ru_utime) / steps,
            "sys": 1e3 * (r1.ru_stime - r0.ru_stime) / steps}


def child(model: str, trainer: str, spin: str, steps: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", model, trainer, spin,
                          str(steps)], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--models", default="gpt,digits")
    p.add_argument("--trainer", default="new", help="old, new or old,new")
    p.add_argument("--spins", default="300000,1000,0,threads1")
    p.add_argument("--busy", default="0,2")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps-gpt", type=int, default=40)
    p.add_argument("--steps-digits", type=int, default=300)
    p.add_argument("--raise-priority", action="store_true")
    a = p.parse_args()
    if a.child:
        model, trainer, spin, steps = a.child
        print(json.dumps(measure(model, trainer, spin, int(steps))))
        return
    if a.raise_priority:  # a session of its own: an autogroup of its own (sched(7))
        if os.getsid(0) != os.getpid():
            try:
                os.setsid()
            except PermissionError:  # a process-group leader: run again in a new session
                raise SystemExit(subprocess.run([sys.executable, *sys.argv],
                                                start_new_session=True).returncode) from None
        Path("/proc/self/autogroup").write_text("-20")
    runs: dict[tuple, list[dict[str, float]]] = {}
    for _ in range(a.reps):
        for busy in (int(b) for b in a.busy.split(",")):
            procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                     for _ in range(busy)]
            try:
                for model in a.models.split(","):
                    steps = a.steps_gpt if model == "gpt" else a.steps_digits
                    for trainer in a.trainer.split(","):
                        for spin in a.spins.split(","):
                            r = child(model, trainer, spin, steps)
                            runs.setdefault((model, busy, trainer, spin), []).append(r)
                            print(model, busy, trainer, spin, r, file=sys.stderr, flush=True)
            finally:
                for q in procs:
                    q.kill()
                    q.wait()
    print(f"{a.reps} runs each; ms per step: the median of the runs' means (each run's in "
          f"brackets); CPU: user + system ms per step\n")
    print("| model | busy processes | Trainer | spin_count | ms per step | runs | user ms "
          "| sys ms |")
    print("|---|---|---|---|---|---|---|---|")
    for (model, busy, trainer, spin), rs in runs.items():
        def med(k: str) -> float:
            return statistics.median(r[k] for r in rs)
        each = ", ".join(f"{r['ms']:.1f}" for r in rs)
        print(f"| {model} | {busy} | {trainer} | {spin} | {med('ms'):.2f} | {each} | "
              f"{med('user'):.2f} | {med('sys'):.2f} |")


if __name__ == "__main__":
    main()
