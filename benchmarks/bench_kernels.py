"""Times gradc's C and NumPy targets against their peers on memory-bound gradient kernels (issue 5).

    python benchmarks/bench_kernels.py [--threads 1,2] [--repeat N] [--quick]
        [--cases NAME,...] [--peers c,numpy,ort,torch,inductor,plain] [--default-malloc]

In one process and on the same arrays, it times gradc's C target, gradc's NumPy target, gradc's
ONNX export run by onnxruntime, PyTorch eager, torch.compile (when torch is installed) and plain
NumPy. Each peer's first result is checked against gradc's reference target before it is timed
(bit for bit where the op is exact, np.allclose elsewhere). A peer that is not
available (e.g. a gradc target that raises GradcError) shows "n/a" and the run goes on. The
bandwidth bound of a case is its compulsory traffic (inputs read once, output written once)
divided by a STREAM triad's bandwidth measured at the same thread count (stream_triad.c,
compiled with $CC or cc). The peers of one case are timed in interleaved rounds (see
``interleaved``), so a drift of the machine's bandwidth reaches them alike. The cases (graphs,
PyTorch and NumPy versions) are in kernel_cases.py. Progress goes to stderr; the Markdown tables
go to stdout. A full run takes about 2-3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnxruntime as ort

import gradc
from kernel_cases import F32, QUICK_CASES, Case, case_builders, torch

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------- the peers

class Peer:
    """One way to compute a case: set up once per case, then a runner per thread count."""

    key = ""
    label = ""

    def setup(self, case: Case) -> None:
        """Per-case preparation (compile, export); raises when the peer is unavailable."""
        self.case = case

    def runner(self, threads: int) -> Callable[[], np.ndarray]:
        """A zero-argument call that computes dx with `threads` threads."""
        raise NotImplementedError

    def teardown(self) -> None:
        """Drop per-case state (sessions, compiled code) before the next case."""
        self.__dict__.clear()


class GradcC(Peer):
    """gradc.compile(target="c", threads=T), compiled per thread count."""

    key, label = "c", "gradc C"

    def runner(self, threads: int) -> Callable[[], np.ndarray]:
        ex = gradc.compile(self.case.graph, target="c", threads=threads)
        arrays = self.case.arrays
        return lambda: ex(**arrays)["dx"]


class GradcNumpy(Peer):
    """gradc.compile(target="numpy"): one thread whatever T."""

    key, label = "numpy", "gradc NumPy"

    def setup(self, case: Case) -> None:
        self.case = case
        self.ex = gradc.compile(case.graph, target="numpy")

    def runner(self, threads: int) -> Callable[[], np.ndarray]:
        ex, arrays = self.ex, self.case.arrays
        return lambda: ex(**arrays)["dx"]


class GradcOnnx(Peer):
    """gradc.to_onnx(graph) run by an onnxruntime session with intra_op_num_threads=T."""

    key, label = "ort", "gradc ONNX in ORT"

    def setup(self, case: Case) -> None:
        self.case = case
        self.model = gradc.to_onnx(case.graph).SerializeToString()

    def runner(self, threads: int) -> Callable[[], np.ndarray]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = sess = ort.InferenceSession(self.model, opts,
                                                   providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        graph_names = [v.name for v in self.case.graph.inputs]
        if sorted(names) != sorted(graph_names):  # exported names differ: go by position
            names_by = dict(zip(graph_names, names))
        else:
            names_by = {n: n for n in graph_names}
        feeds = {names_by[n]: a for n, a in self.case.arrays.items()}
        return lambda: sess.run(None, feeds)[0]


class TorchEager(Peer):
    """The PyTorch CPU kernels a user would call, with torch.set_num_threads(T)."""

    key, label = "torch", "PyTorch eager"

    def setup(self, case: Case) -> None:
        if torch is None:
            raise ImportError("torch is not installed")
        self.case = case
        self.fn = case.torch_fn
        self.tensors = [torch.from_numpy(a) for a in case.inputs()]   # shares the arrays

    def runner(self, threads: int) -> Callable[[], np.ndarray]:
        torch.set_num_threads(threads)
        fn, ts = self.fn, self.tensors
        return lambda: fn(*ts).numpy()


class TorchCompile(TorchEager):
    """The same PyTorch function through torch.compile (inductor)."""

    key, label = "inductor", "torch.compile"

    def setup(self, case: Case) -> None:
        super().setup(case)
        # One compiled function per case; dynamo guards on the thread count, so the warm-up
        # at each thread count compiles (from inductor's cache after the first) outside timing.
        self.fn = torch.compile(case.torch_fn)


class PlainNumpy(Peer):
    """A hand-written NumPy version of the function (kernel_cases.py)."""

    key, label = "plain", "plain NumPy"

    def runner(self, threads: int) -> Callable[[], np.ndarray]:
        fn, xs = self.case.plain_fn, self.case.inputs()
        return lambda: fn(*xs)


PEERS = (GradcC, GradcNumpy, GradcOnnx, TorchEager, TorchCompile, PlainNumpy)
LIBRARY_PEERS = ("ort", "torch", "inductor", "plain")   # what a user would pick instead


# ---------------------------------------------------------------- measuring

@dataclass
class Result:
    """Timings of one peer on one case at one thread count (seconds), or why there are none."""

    times: list[float] | None = None
    missing: str | None = None       # reason the peer is n/a
    check: str = ""                  # "bit-exact", "allclose", or "NO: ..."

    @property
    def ok(self) -> bool:
        """Timed and in agreement with the reference."""
        return self.times is not None and not self.check.startswith("NO")

    @property
    def median_ms(self) -> float:
        """Median time in ms."""
        return 1e3 * float(np.median(self.times))

    @property
    def min_ms(self) -> float:
        """Fastest time in ms."""
        return 1e3 * min(self.times)


def why(e: BaseException) -> str:
    """A one-line reason for a peer being n/a."""
    text = " ".join(str(e).split())
    if len(text) > 160:   # keep both ends: onnxruntime puts the cause last
        text = text[:70] + " ... " + text[-85:]
    return f"{type(e).__name__}: {text}".rstrip(": ")


def compare(case: Case, ref: np.ndarray, got: Any) -> str:
    """'bit-exact' / 'allclose' when `got` agrees with the reference, else 'NO: ...'."""
    got = np.ascontiguousarray(got)
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return f"NO: got {got.dtype}{list(got.shape)}, expected {ref.dtype}{list(ref.shape)}"
    if case.exact:
        same = got.view(np.uint32) == ref.view(np.uint32)
        if same.all():
            return "bit-exact"
        bad = int((~same).sum())
        if np.array_equal(got, ref):
            return f"NO: {bad} elements differ only in the sign of zero"
        return f"NO: {bad} elements differ, max |diff| {np.nanmax(np.abs(got - ref)):.3g}"
    if np.allclose(got, ref, rtol=1e-5, atol=1e-5):
        return "allclose"
    return f"NO: max |diff| {np.nanmax(np.abs(got.astype(np.float64) - ref)):.3g}"


ROUND = 3  # timed calls per peer per round


def warm_up(fn: Callable[[], np.ndarray], case: Case, ref: np.ndarray) -> str:
    """Check the first result, then call until at least 3 calls and 0.2 s (at most 20 calls)."""
    check = compare(case, ref, fn())
    t_end, calls = time.perf_counter() + 0.2, 1
    while calls < 3 or (time.perf_counter() < t_end and calls < 20):
        fn()
        calls += 1
    return check


def interleaved(fns: dict[str, Callable[[], np.ndarray]], repeat: int,
                budget_s: float = 10.0) -> dict[str, list[float]]:
    """Time `repeat` calls of every function, in rounds of ROUND calls per function.

    Each round calls every function once untimed (its caches and threads were left by the
    previous one) and then ROUND times timed, in an order that rotates from round to round, so
    that a drift of the machine's memory bandwidth (other tenants) reaches all peers alike. A
    very slow function stops once it has 3 timed calls that add up to `budget_s`.
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    gc.collect()
    gc.disable()
    try:
        for r in range(-(-repeat // ROUND)):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                ts = times[key]
                if len(ts) >= repeat or (len(ts) >= 3 and sum(ts) > budget_s):
                    continue
                fns[key]()
                for _ in range(min(ROUND, repeat - len(ts))):
                    t0 = time.perf_counter()
                    fns[key]()
                    ts.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return times


def run_case(case: Case, peers: list[Peer], threads: list[int], repeat: int,
             results: dict[tuple[str, int, str], Result]) -> None:
    """Time every peer on one case at every thread count (peers interleaved, see above)."""
    ref = gradc.compile(case.graph, target="reference", passes=None)(**case.arrays)["dx"]
    broken: dict[str, str] = {}
    for p in peers:
        try:
            p.setup(case)
        except Exception as e:  # noqa: BLE001 - any failure makes the peer n/a, the run goes on
            broken[p.key] = why(e)
    for t in threads:
        fns: dict[str, Callable[[], np.ndarray]] = {}
        checks: dict[str, str] = {}
        for p in peers:
            if p.key in broken:
                results[(case.name, t, p.key)] = Result(missing=broken[p.key])
                continue
            try:
                fn = p.runner(t)
                checks[p.key] = warm_up(fn, case, ref)
                fns[p.key] = fn
            except Exception as e:  # noqa: BLE001
                results[(case.name, t, p.key)] = Result(missing=why(e))
        for key, ts in interleaved(fns, repeat).items():
            results[(case.name, t, key)] = Result(times=ts, check=checks[key])
        for p in peers:
            r = results[(case.name, t, p.key)]
            shown = f"{r.median_ms:.2f} ms {r.check}" if r.times else f"n/a ({r.missing})"
            print(f"[bench] {case.name} T={t} {p.label}: {shown}", file=sys.stderr, flush=True)
    for p in peers:
        p.teardown()


# ---------------------------------------------------------------- bandwidth probe

def compiler() -> list[str]:
    """The C compiler gradc's C target uses: $CC, else cc."""
    return shlex.split(os.environ.get("CC") or "cc")


def build_triad(tmp: Path) -> tuple[ctypes.CDLL, str]:
    """Compile stream_triad.c into a shared library; returns it and the flags used."""
    cc = compiler()
    if not shutil.which(cc[0]):
        raise RuntimeError(f"no C compiler: {cc[0]!r} not found (set $CC)")
    lib = tmp / "stream_triad.so"
    for flags in (["-O3", "-fopenmp"], ["-O3"]):
        cmd = [*cc, *flags, "-shared", "-fPIC", str(HERE / "stream_triad.c"), "-o", str(lib)]
        if subprocess.run(cmd, capture_output=True).returncode == 0:
            dll = ctypes.CDLL(str(lib))
            i64, flt, ptr, cint = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int
            dll.triad.argtypes = [ptr, ptr, ptr, flt, i64, cint]
            dll.triad_fill.argtypes = [ptr, ptr, ptr, i64, cint]
            return dll, " ".join(flags)
    raise RuntimeError(f"{' '.join(cc)} could not compile stream_triad.c")


class Triad:
    """The bandwidth probe: a triad over 3 arrays of n floats at each thread count."""

    def __init__(self, n: int, threads: list[int]) -> None:
        with tempfile.TemporaryDirectory(prefix="gradc-triad-") as tmp:
            self.dll, flags = build_triad(Path(tmp))   # stays mapped after the folder goes
        self.n, self.threads = n, threads
        openmp = "OpenMP" if self.dll.triad_has_openmp() else "no OpenMP: threads ignored"
        self.desc = (f"{' '.join(compiler())} {flags}, {n / 2**20:.0f}Mi floats x 3 arrays, "
                     f"{openmp}; run before and after the cases")
        self.runs: dict[int, list[list[float]]] = {t: [] for t in threads}

    def probe(self, reps: int) -> None:
        """Time `reps` triads (after 2 untimed) at every thread count; keep the GB/s samples."""
        arrays = [np.empty(self.n, F32) for _ in range(3)]   # 768 MB at the default size
        ptrs = [a.ctypes.data for a in arrays]
        self.dll.triad_fill(*ptrs, self.n, max(self.threads))
        for t in self.threads:
            for _ in range(2):
                self.dll.triad(*ptrs, 3.0, self.n, t)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                self.dll.triad(*ptrs, 3.0, self.n, t)
                times.append(time.perf_counter() - t0)
            self.runs[t].append([3 * 4 * self.n / 1e9 / x for x in times])
            print(f"[bench] triad T={t}: {np.median(self.runs[t][-1]):.1f} GB/s", file=sys.stderr)
        if arrays[0][0] != F32(7.0):
            raise RuntimeError("stream_triad.c computed a wrong result")

    def bandwidth(self, t: int) -> float:
        """Best GB/s over every probe at `t` threads (STREAM's convention): the bound's
        denominator; noise from other processes only ever lowers a sample."""
        return max(x for run in self.runs[t] for x in run)

    def table(self) -> list[str]:
        """GB/s per thread count: each probe's median and the best (used for the bounds)."""
        out = ["| threads | triad GB/s, median per probe (before, after the cases) "
               "| best (used for the bounds) |", "|---:|---|---:|"]
        for t, runs in self.runs.items():
            each = ", ".join(f"{np.median(r):.1f}" for r in runs)
            out.append(f"| {t} | {each} | {self.bandwidth(t):.1f} |")
        return out


class CpuLoad:
    """CPU time that other processes (and VM steal) took while the benchmark ran: a noise gauge."""

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float, float] | None:
        try:
            ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        busy = (sum(ticks[:8]) - ticks[3] - ticks[4] - ticks[7]) / hz   # not idle/iowait/steal
        own = os.times()
        steal = ticks[7] / hz if len(ticks) > 7 else 0.0
        return busy, own.user + own.system + own.children_user + own.children_system, steal, \
            time.perf_counter()

    def summary(self) -> str:
        """One line: other processes' CPU seconds and steal over the run."""
        end = self._sample()
        if self.start is None or end is None:
            return "n/a"
        busy, own, steal, wall = (e - s for e, s in zip(end, self.start))
        other = max(0.0, busy - own)
        return (f"other processes used {other:.0f} CPU-s and VM steal {steal:.0f} s during the "
                f"{wall:.0f} s run ({(other + steal) / wall:.0%} of one CPU; near 0% is a quiet "
                f"machine, else expect noisy medians, and trust the min column)")


def tune_malloc() -> str:
    """Keep freed tensor-sized blocks in the heap (as a caching allocator would), for every peer."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold,
                                                                       2**31 - 1)
    except (OSError, AttributeError):
        ok = False
    if not ok:
        return "default (mallopt unavailable)"
    return "glibc mallopt mmap_threshold=32 MiB, trim_threshold=2 GiB (--default-malloc: off)"


# ---------------------------------------------------------------- the report

SEMANTICS = """\
- Same function everywhere (NaN inputs aside; the random arrays hold none): relu_grad =
  `threshold_backward(dy, x, 0)`; clip_grad(min 0, max 6) = `hardtanh_backward(dy, x, 0, 6)`
  (both bounds give 0, as in gradc); the chain is relu_grad(a, clip_grad(b, relu_grad(c,
  dy), 0, 6)); slice_grad is offsets 0, strides (1,1,2,2), dy [32,64,28,28] -> dx
  [32,64,56,56] (torch: `new_zeros` + strided copy).
- max_pooling_grad recomputes the argmax from x: torch runs `max_pool2d(return_indices=True)`
  then `max_pool2d_with_indices_backward` (first maximum wins, padding never chosen, as in gradc).
- resample_grad nearest: PyTorch's `upsample_nearest2d_backward` picks floor(o * in/out), which
  is gradc's resample_grad with input/output_pixel_offsets 0 and rounding "decreasing"; linear
  uses gradc's defaults, equal to `upsample_bilinear2d_backward(align_corners=False)`.
- Times are per call, output allocated by the callee (ORT `run`, torch eager/compiled, NumPy).
  plain NumPy and gradc NumPy use one thread whatever the thread count.
- peer / C = peer median / gradc C median (how many times faster gradc C is);
  bound / median = fraction of the bandwidth bound reached (above 1 is possible: caches)."""


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _ratio(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or den is None else f"{num / den:.2f}x"


def case_table(cases: list[Case], peers: list[Peer], t: int, results: dict,
               bandwidth: float | None) -> list[str]:
    """The full table of one thread count: every case, every peer."""
    lines = ["| case | MB moved | bound ms | peer | median ms | min ms | peer / C "
             "| bound / median | check |", "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for case in cases:
        mb = case.megabytes()
        bound = mb / bandwidth if bandwidth else None   # MB / (GB/s) = ms
        c = results[(case.name, t, "c")]
        c_ms = c.median_ms if c.ok else None
        for i, p in enumerate(peers):
            r = results[(case.name, t, p.key)]
            med, low = (r.median_ms, r.min_ms) if r.times else (None, None)
            head = f"{case.name} | {mb:.1f} | {_ms(bound)}" if i == 0 else " | | "
            frac = f"{bound / med:.2f}" if bound and med else "n/a"
            check = r.check if r.times else "-"
            label = p.label + (" (!)" if r.times and not r.ok else "")
            lines.append(f"| {head} | {label} | {_ms(med)} | {_ms(low)} | {_ratio(med, c_ms)} "
                         f"| {frac} | {check} |")
    return lines


def summary_table(cases: list[Case], peers: list[Peer], t: int, results: dict) -> list[str]:
    """gradc C against the fastest agreeing library peer (or the named one) and issue 5's target."""
    lines = ["| case | gradc C ms | compared with | its ms | its time / C | target | met |",
             "|---|---:|---|---:|---:|---:|---|"]
    labels = {p.key: p.label for p in peers}
    for case in cases:
        c = results[(case.name, t, "c")]
        want, against = case.target
        keys = [k for k, lbl in labels.items() if k in LIBRARY_PEERS and
                (against == "fastest peer" or lbl == against)]
        timed = [(results[(case.name, t, k)].median_ms, k) for k in keys
                 if results[(case.name, t, k)].ok]
        c_ms = c.median_ms if c.ok else None
        if not timed:
            lines.append(f"| {case.name} | {_ms(c_ms)} | none | n/a | n/a | {want}x | n/a |")
            continue
        best_ms, best = min(timed)
        met = "n/a" if c_ms is None else ("yes" if best_ms / c_ms >= want else "no")
        lines.append(f"| {case.name} | {_ms(c_ms)} | {labels[best]} | {best_ms:.2f} "
                     f"| {_ratio(best_ms, c_ms)} | {want}x {against} | {met} |")
    return lines


def notes(cases: list[Case], peers: list[Peer], results: dict) -> list[str]:
    """Why peers are n/a, which ones disagree, and what plain NumPy runs per case."""
    missing: dict[tuple[str, str], list[str]] = {}
    wrong = []
    labels = {p.key: p.label for p in peers}
    for (name, t, key), r in results.items():
        if r.missing:
            cases_of = missing.setdefault((labels[key], r.missing), [])
            if name not in cases_of:
                cases_of.append(name)
        elif not r.ok:
            wrong.append(f"- {labels[key]} on {name} ({t} thr.) disagrees with the "
                         f"reference: {r.check[4:]}")
    out = [f"- n/a: {lbl}: {reason} ({', '.join(names)})"
           for (lbl, reason), names in missing.items()]
    out += wrong or ["- every timed peer agrees with gradc's reference target"]
    out += [f"- plain NumPy, {c.name}: {c.plain_label}" for c in cases]
    return out


def machine() -> list[str]:
    """One-line facts about the machine and the software, for the header."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cc = subprocess.run([*compiler(), "--version"], capture_output=True, text=True)
        cc_version = cc.stdout.splitlines()[0]
    except (OSError, IndexError):
        cc_version = "not found"
    tv = torch.__version__ if torch is not None else "not installed"
    return [f"- machine: {cpu}, {os.cpu_count()} CPUs; compiler: {cc_version}",
            f"- Python {platform.python_version()}, numpy {np.__version__}, torch {tv}, "
            f"onnxruntime {ort.__version__}, gradc {gradc.__version__}"]


def print_report(cases: list[Case], peers: list[Peer], threads: list[int], results: dict,
                 triad: Triad | None, header: list[str]) -> None:
    """All the tables, Markdown-style, on stdout."""
    out = ["# gradc kernel benchmark (float32)", "", *header]
    out += ["", *triad.table()] if triad else []
    for t in threads:
        bw = triad.bandwidth(t) if triad else None
        shown = f"{bw:.1f} GB/s" if bw else "n/a"
        out += ["", f"## {t} thread(s): bound = MB moved / triad bandwidth at {t} thread(s) "
                f"({shown})", "", *case_table(cases, peers, t, results, bw)]
    for t in threads:
        out += ["", f"## Summary, {t} thread(s): gradc C against the fastest library peer "
                "(ORT, PyTorch, torch.compile, plain NumPy; those that agree)", "",
                *summary_table(cases, peers, t, results)]
    out += ["", "## Notes", "", *notes(cases, peers, results), SEMANTICS]
    print("\n".join(out))


# ---------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    names = list(case_builders(0))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2 (default 1,2)")
    ap.add_argument("--repeat", type=int, default=None, help="timed calls per peer (default 12)")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke test: 3 repeats, cases {', '.join(QUICK_CASES)}")
    ap.add_argument("--cases", default=None, help=f"comma-separated subset of: {', '.join(names)}")
    ap.add_argument("--peers", default=None, help="comma-separated subset of: "
                    + ", ".join(p.key for p in PEERS) + " (gradc C is always kept)")
    ap.add_argument("--seed", type=int, default=0, help="random seed of the arrays")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc's malloc thresholds alone (allocations may page-fault)")
    args = ap.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    args.repeat = args.repeat or (3 if args.quick else 12)
    chosen = args.cases.split(",") if args.cases else list(QUICK_CASES if args.quick else names)
    unknown = sorted(set(chosen) - set(names))
    if unknown or not args.threads or min(args.threads) < 1 or args.repeat < 1:
        ap.error(f"bad --cases {unknown}" if unknown else "bad --threads or --repeat")
    args.cases = chosen
    keys = set(args.peers.split(",")) | {"c"} if args.peers else {p.key for p in PEERS}
    args.peers = [p() for p in PEERS if p.key in keys]
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the probe and every case, then print the tables."""
    args = parse_args(argv)
    start, load = time.perf_counter(), CpuLoad()
    header = machine()
    header.append("- malloc: " + ("default" if args.default_malloc else tune_malloc()))
    reps = 5 if args.quick else 10
    try:
        triad: Triad | None = Triad(64 * 2**20, args.threads)
        triad.probe(reps)
        header.append(f"- bandwidth probe: STREAM triad a = b + s*c, {triad.desc}")
    except Exception as e:  # noqa: BLE001 - no compiler: print times without bounds
        triad = None
        header.append(f"- bandwidth probe: n/a ({why(e)})")
    builders = case_builders(args.seed)
    cases, results = [], {}
    for name in args.cases:
        case = builders[name]()
        run_case(case, args.peers, args.threads, args.repeat, results)
        case.arrays = {}   # free the arrays; the report needs only names, sizes and results
        cases.append(case)
    if torch is not None:
        torch.set_num_threads(max(args.threads))
    if triad:
        triad.probe(reps)
    header.append(f"- arrays: random normal float32 (relu/clip inputs x4), seed {args.seed}; "
                  f"{args.repeat} timed calls per peer after warm-up (>= 3 calls and 0.2 s), "
                  f"interleaved: rounds of 1 untimed + {ROUND} timed calls per peer, the peers "
                  f"in rotating order; fewer (>= 3) once they add up to 10 s; whole run "
                  f"{time.perf_counter() - start:.0f} s")
    header.append(f"- load: {load.summary()}")
    print_report(cases, args.peers, args.threads, results, triad, header)


if __name__ == "__main__":
    main()
