"""The stages every accepted graph goes through, and the properties checked between them.

``check_graph(g, options)`` runs, in order: verify; print -> parse round trip (the text parses,
gives an equal graph, prints the same); optimize (and the optimized graph's round trip); grad
(and its round trip, and now and then the whole pipeline on it); ``to_onnx`` (``onnx.checker``
full check, and ``from_onnx`` gives the graph back); now and then ``gradc.training_step`` of the
graph with some inputs as parameters, through the whole pipeline and the C target's in-place
update (``fuzz.training_stage``); now and then one public entry point called
with a bad argument (``hostile_api_call``); ``artifact`` for one target; compile on
each target (after the default passes, none, or a random list of passes); and, when every
tensor is small, a run on random inputs with the outputs compared between targets (``numpy``
and ``c`` bit for bit with the reference, ``onnx`` within the tolerance of ``gradc check``;
for a tenth of the small graphs also the cuda target through its host harness, bit for bit in
``sums="canonical"`` and within the tolerance in ``"split"``) and the inputs checked to be
left unchanged. A ``GradcError`` at a stage is a refusal: that stage's
dependants are skipped and the refusal is reported; anything else propagates as a crash or a
``Finding``.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
from typing import Any, Callable, Mapping

import numpy as np

import gradc
import gradc.api
import gradc.backends
import gradc.passes
from gradc.errors import GradcError, InputError
from gradc.check import output_scales, uses_transcendental
from gradc.ir.core import Graph, structurally_equal
from gradc.ir.parser import parse
from gradc.ir.verify import verify

from fuzz.common import Finding
from fuzz.graphgen import random_array
from fuzz.readback import check_readback
from fuzz.tolerance import GATHERS, NORMS, floor_for, index_feeds
from fuzz.training_stage import check_training

RUN_LIMIT = 200_000  # run on random inputs only when every tensor together is this small
TARGETS = ("reference", "numpy", "c", "onnx")
C_MAX_NODES = 300  # graphs compiled for C (see check_graph)
# The cuda target's kernels through its host harness (C++ on the CPU, bit for bit with the GPU's
# arithmetic): a C++ build of every graph would take most of a campaign, so a tenth of the
# small graphs that the C target takes
CUDA_HOST_NODES, CUDA_HOST_SHARE = 40, 0.1
ONNX_MAX_ELEMENTS = 1 << 22  # graphs compiled for onnx: every tensor together (check_graph)


class Stages:
    """Records the first stage that refused (a GradcError) while the pipeline goes on."""

    def __init__(self) -> None:
        self.refused: str | None = None

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or None when it raises a GradcError (then the stage is noted)."""
        try:
            return fn()
        except GradcError:
            if self.refused is None:
                self.refused = name
            return None

    @property
    def status(self) -> str:
        """``ok`` or ``refused:<first stage>``."""
        return "ok" if self.refused is None else f"refused:{self.refused}"


def _op_at(text: str, line: int) -> str:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return "?"
    m = re.search(r"= ([A-Za-z_]+)\(", lines[line - 1])
    if m:
        return m.group(1)
    s = lines[line - 1].strip()
    return "graph header" if s.startswith("graph") else s.split(" ")[0][:20] or "?"


def _difference(a: Graph, b: Graph) -> str:
    from gradc.ir import core

    fn = getattr(core, "_structure_difference", None)
    return (fn(a, b) if fn else None) or "structurally different"


def roundtrip(g: Graph, what: str) -> Graph:
    """Check that ``parse(str(g), parameters=...)`` equals ``g`` and prints the same; returns the
    parsed graph. The text holds no parameter values: they are passed separately."""
    text = str(g)
    values = {p.name: p.value for p in g.parameters}
    try:
        g2 = parse(text, parameters=values if all(v is not None for v in values.values())
                   else None)
    except GradcError as e:
        line = getattr(e, "line", 0)
        raise Finding("roundtrip", f"{what}:reparse:{_op_at(text, line)}",
                      f"{what}: the printed graph does not parse back: {e}") from None
    if not structurally_equal(g, g2):
        why = _difference(g, g2)
        m = re.match(r"node \d+ \((\w+)\): (\w+)", why)
        where = f"{m.group(1)}:{m.group(2)}" if m else re.sub(r"[%\d'\"].*", "", why)[:40]
        raise Finding("roundtrip", f"{what}:unequal:{where}",
                      f"{what}: parse(str(g)) differs from g: {why}")
    text2 = str(g2)
    if text2 != text:
        raise Finding("roundtrip", f"{what}:reprint",
                      f"{what}: str(parse(str(g))) differs from str(g)")
    return g2


def symbols_of(g: Graph) -> list[str]:
    """The symbolic dims of a graph's inputs, in order of first use."""
    out: dict[str, None] = {}
    for v in g.inputs:
        for d in v.type.shape:
            if isinstance(d, str):
                out.setdefault(d)
    return list(out)


def total_elements(g: Graph, bind: Mapping[str, int]) -> int:
    """Elements of every input and node result together (symbols bound; unbound count 2)."""
    total = 0
    for v in g.values():
        total += math.prod(bind.get(d, 2) if isinstance(d, str) else d for d in v.type.shape)
    return total


def feeds_for(g: Graph, bind: Mapping[str, int], rng: random.Random) -> dict[str, np.ndarray]:
    """Random input arrays with special values (NaN payloads, infinities, -0.0, extremes)."""
    return {v.name: random_array(rng, [bind.get(d, 2) if isinstance(d, str) else d
                                       for d in v.type.shape], v.type.dtype.value)
            for v in g.inputs}


def identical(got: np.ndarray, ref: np.ndarray) -> bool:
    """Same shape, dtype and bits, except that NaNs may differ in payload."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    if ref.dtype.kind != "f":
        return bool(np.array_equal(got, ref))
    bits = np.dtype(f"u{ref.dtype.itemsize}")
    same = got.view(bits) == ref.view(bits)
    return bool((same | (np.isnan(got) & np.isnan(ref))).all())


def close(got: np.ndarray, ref: np.ndarray, sums: bool = False, floor: float = 0.0) -> bool:
    """Within ``gradc check``'s whole-graph tolerance for inexact targets; with ``sums``, an
    element that is not finite on either side is not compared (an overflow in another order).
    ``floor``: the least magnitude the tolerance is relative to (for data of that magnitude,
    where a result that cancels to 0 may carry the rounding of the terms it summed)."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    if ref.dtype.kind != "f":
        return bool(np.array_equal(got, ref))
    with np.errstate(all="ignore"):
        g, r = got.astype(np.float64), ref.astype(np.float64)
        if not sums and (not (np.isnan(g) == np.isnan(r)).all()
                         or not (np.isinf(r) <= (g == r)).all()):
            return False
        fin = np.isfinite(r) & np.isfinite(g)
        err = float(np.abs(g[fin] - r[fin]).max(initial=0.0))
        info = np.finfo(ref.dtype)
        return err <= 64 * float(info.eps) * max(float(np.abs(r[fin]).max(initial=0.0)),
                                                 floor) + float(info.tiny)


# Ops that add many terms: an inexact target may add them in another order, and where a partial
# sum overflows (the feeds hold float maxima and infinities) the non-finite results differ.
TRAINING_SUMMING = frozenset({  # SPEC-training §9.5's summing ops (see ``tame_feeds``)
    "convolution", "convolution_filter_grad", "gemm", "average_pooling", "average_pooling_grad",
    "reduce_mean", "batch_normalization", "batch_normalization_grad",
    "batch_normalization_training", "batch_normalization_training_grad", "softmax",
    "log_softmax", "gather_grad", "mean_variance_normalization",
    "mean_variance_normalization_grad"})
SUMMING = frozenset({"reduce_sum", "resample", "resample_grad", "max_pooling_grad"}) | \
    TRAINING_SUMMING | GATHERS | NORMS
# SPEC-training §9.5: the reference evaluates these in float64 with NumPy and rounds once; the C
# target calls the C library, whose results may differ in the last place ("targets may
# differ", 4 ulps): so ``c`` is held to the tolerance, not bit for bit, where they occur.
def compare(target: str, out: Mapping[str, Any], ref: Mapping[str, np.ndarray],
            sums: bool = False, half: bool = False, approx: bool = False,
            floor: float = 0.0, exact: bool | None = None) -> None:
    """Raise a ``mismatch`` Finding when a target's outputs differ from the reference's;
    ``half``: the graph computes in float16 somewhere (see the onnx rule below); ``approx``:
    an exact target is held to the tolerance too (ops with ``transcendental`` set);
    ``floor``: see ``close``; ``exact``: whether the target is bit for bit (default: the
    target's); like ``gradc check``, an output is held to 64 ulps of the
    largest output of its dtype at least (a gradient that is 0 in exact arithmetic holds the
    rounding noise of the sums the others come from).
    """
    if set(out) != set(ref):
        raise Finding("mismatch", f"{target}:outputs",
                      f"{target}: outputs {sorted(out)} against the reference's {sorted(ref)}")
    if exact is None:  # (the executable's own, where an option may reorder sums)
        exact = gradc.backends.TARGETS[target].exact
    scales = output_scales(ref)  # as gradc check: 64 ulps of the largest output of a dtype
    for name, want in ref.items():
        got = out[name]
        if type(got) is not np.ndarray:
            raise Finding("mismatch", f"{target}:type",
                          f"{target}: output {name!r} is a {type(got).__name__}")
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Finding("mismatch", f"{target}:shape",
                          f"{target}: output {name!r} is {got.dtype}{list(got.shape)}, the "
                          f"reference's {want.dtype}{list(want.shape)}")
        if target == "onnx" and half:
            continue  # onnxruntime drops float16 roundings (docs/conformance.md): not compared
        if not (identical(got, want) if exact and not approx else
                close(got, want, sums, max(floor, scales.get(want.dtype.str, 0.0)))):
            g, w = got.reshape(-1), want.reshape(-1)
            bad = [i for i in range(g.size) if not identical(g[i:i + 1], w[i:i + 1])]
            at = bad[0] if bad else 0
            raise Finding("mismatch", f"{target}:{want.dtype}",
                          f"{target}: output {name!r} ({want.dtype}{list(want.shape)}) differs "
                          f"from the reference at flat index {at} ({len(bad)} elements): "
                          f"{g[at] if g.size else '?'} against {w[at] if w.size else '?'}")


def check_graph(g: Graph, opts: Mapping[str, Any], stages: Stages | None = None) -> str:
    """Run every stage on a graph that was accepted (parsed, imported or built)."""
    st = stages or Stages()
    seed = opts.get("seed", 0)

    def stream(stage: str) -> random.Random:
        # one stream per stage: a stage added later leaves the others' choices as they were,
        # so stored cases replay the same way
        return random.Random(f"{seed}:{stage}")

    rng = stream("targets")
    if st.run("verify", lambda: verify(g) or True) is None:
        return st.status
    roundtrip(g, "graph")
    opt = st.run("optimize", lambda: gradc.optimize(g))
    if opt is not None:
        st.run("verify-optimized", lambda: verify(opt.graph))
        roundtrip(opt.graph, "optimized")
    if opts.get("grad", True) and any(v.type.dtype.is_float for v in g.inputs) \
            and any(v.type.dtype.is_float for v in g.outputs):
        t = st.run("grad", lambda: gradc.grad(g))
        if t is not None:
            st.run("verify-grad", lambda: verify(t))
            roundtrip(t, "grad")
            rg = stream("grad")
            if rg.random() < 0.3:  # the training graph through the targets too
                check_graph(t, {**opts, "grad": False, "onnx_export": False, "api": False,
                                "train": False, "seed": rg.getrandbits(32)}, st)
    if opts.get("onnx_export", True):
        check_export(g, st, stream("readback"))
    rt = stream("train")
    if opts.get("train", True) and rt.random() < 0.25:  # the graph as a training step
        check_training(g, opts, st.run, rt,
                       lambda s, o: check_graph(s, o, st), C_MAX_NODES, RUN_LIMIT)
    ra = stream("api")
    if opts.get("api", False) and ra.random() < 0.3:
        hostile_api_call(g, ra, st)
    syms = symbols_of(g)
    bind = {s: rng.choice((1, 2, 3)) for s in syms}
    shapes = bind if rng.random() < 0.5 else {}
    # C builds take about 15 ms of the C compiler per kernel (linear in the graph), so a big
    # unfused graph would spend the per-input timeout in cc: those are left to the other targets.
    c_ok = opts.get("c", False) and len(g.nodes) <= C_MAX_NODES
    # onnxruntime folds the constants of a lowering when it makes a session (a Range of a
    # pooling window's 2^24 positions takes seconds): slow work on a huge graph, not a hang
    onnx_ok = total_elements(g, bind) <= ONNX_MAX_ELEMENTS
    targets = [t for t in TARGETS if (t != "c" or c_ok) and (t != "onnx" or onnx_ok)]
    if c_ok and len(g.nodes) <= CUDA_HOST_NODES and rng.random() < CUDA_HOST_SHARE \
            and shutil.which(os.environ.get("CXX", "c++").split()[0]):
        targets.append("cuda-host")
    if rng.random() < 0.3:
        art = rng.choice(["numpy", "onnx"] + (["c"] if "c" in targets else []))
        st.run(f"artifact:{art}", lambda: gradc.api.artifact(g, art, shapes=shapes))
    exes = {}
    names = sorted(gradc.passes.PASSES)
    for t in targets:
        passes: Any = None if t == "reference" or rng.random() < 0.2 else "default"
        if passes and rng.random() < 0.25:  # another pipeline: passes in any order, repeated
            passes = [rng.choice(names) for _ in range(rng.randint(1, 6))]
        extra: dict[str, Any] = {}
        if t == "cuda-host":  # canonical sums (bit for bit) mostly, split ones now and then
            extra = {"runtime": "host", "sums": "split" if rng.random() < 0.3 else "canonical"}
        exe = st.run(f"compile:{t}",
                     lambda: gradc.compile(g, target=t.removesuffix("-host"), passes=passes,
                                           shapes=shapes, **extra))
        if exe is not None:
            exes[t] = exe
    if "reference" not in exes or total_elements(g, bind) > RUN_LIMIT:
        return st.status
    feeds = feeds_for(g, bind, stream("feeds"))
    index_feeds(g, feeds, bind, stream("indices"))
    keep = {k: v.copy() for k, v in feeds.items()}
    ref, ref_error = run_target(st, "reference", exes["reference"], feeds)
    if ref is None and ref_error is None:
        return st.status
    live_error = None
    if ref_error is not None:  # the error may come from a node no output needs (see below)
        ref, live_error = live_reference(g, shapes, feeds)
    half = any(v.type.dtype.value == "float16" for v in g.values())
    floor = None
    for t, exe in exes.items():
        if t == "reference":
            continue
        out, error = run_target(st, t, exe, feeds)
        for k, v in keep.items():
            if not identical(feeds[k], v):
                raise Finding("input-modified", t, f"{t}: the call changed input {k!r}")
        same_input_error(t, ref_error, live_error, error, out is not None)
        if out is None or ref is None or undefined_casts(g):
            continue
        # the C library's last bits (§9.5); the host harness's double libm calls are glibc's
        libm = t in ("c", "cuda-host") and uses_transcendental(g)
        exact = exe.exact if t == "cuda-host" else None  # False: a sum was split (§9.5)
        if opts.get("exact_only") and (libm or not (exact if exact is not None else
                                                    gradc.backends.TARGETS[t].exact)):
            continue  # run (crashes count) but not compared: see fuzz/training_stage.py
        if t == "onnx" and any(n.op in TRAINING_SUMMING for n in g.nodes):
            tame = tame_feeds(feeds, stream("tame"))
            ref2 = st.run("run:reference", lambda: exes["reference"](**tame))
            out = st.run("run:onnx", lambda: exe(**tame))
            if ref2 is not None and out is not None:
                compare(t, out, ref2, sums=True, half=half,
                        floor=max(1.0, floor_for(g, tame, bind)))
            continue
        if floor is None:
            floor = floor_for(g, feeds, bind)
        compare(t, out, ref, sums=any(n.op in SUMMING for n in g.nodes), half=half,
                approx=libm, floor=floor, exact=exact)
    return st.status


def run_target(st: Stages, t: str, exe: Any, feeds: Mapping[str, np.ndarray]
               ) -> tuple[Any, str | None]:
    """(outputs, None), or (None, message) when the call raised ``InputError`` (an index out
    of range, SPEC-transformers §26.3), or (None, None) for another refusal (noted)."""
    try:
        return exe(**feeds), None
    except GradcError as e:
        if st.refused is None:
            st.refused = f"run:{t}"
        return None, str(e) if isinstance(e, InputError) else None


def live_reference(g: Graph, shapes: Mapping[str, int], feeds: Mapping[str, np.ndarray]
                   ) -> tuple[Any, str | None]:
    """The reference's run of ``g`` without the nodes no output needs: (outputs, None), or
    (None, the InputError's message)."""
    exe = gradc.compile(g, target="reference", passes=["dce"], shapes=shapes)
    try:
        return exe(**feeds), None
    except InputError as e:
        return None, str(e)


def same_input_error(t: str, want: str | None, live: str | None, got: str | None,
                     returned: bool) -> None:
    """§26.3: where the reference raises ``InputError``, every target raises it with the same
    message and produces nothing; where the reference runs, no target raises one.

    The reference runs every node; a target after dead-code elimination runs only those an
    output needs, so an index out of range in a node no output needs may go unnoticed there
    (``live``: the message of the reference without those nodes, None when it runs). A target
    then returns the outputs, or raises either message.
    """
    if want is None and got is not None:
        raise Finding("mismatch", f"{t}:InputError", f"{t}: InputError where the reference "
                      f"runs: {got}")
    if want is not None and returned and live is not None:
        raise Finding("accepted-bad-input", t, f"{t}: returned results where the reference "
                      f"raises InputError: {live}")
    if want is not None and got is not None and got not in (want, live):
        raise Finding("mismatch", f"{t}:InputError-message", f"{t}: InputError {got!r}, the "
                      f"reference's {want!r}")


def tame_feeds(feeds: Mapping[str, np.ndarray], rng: random.Random) -> dict[str, np.ndarray]:
    """The feeds with every float replaced by a small multiple of 1/4 (integers kept).

    The ``onnx`` target of a graph with one of SPEC-training §9.5's summing ops is compared on
    these instead of the special values: onnxruntime sums in its own order, so with float maxima
    and subnormals a partial sum rounds or overflows differently, and an op after it that is
    not continuous (``relu_grad``, a comparison, ``max_pooling``'s argmax) turns that rounding
    into any difference (a false alarm: the sums are within §9.5's tolerance). Also, the
    reference skips padding taps of ``convolution`` (never 0·w) where onnxruntime's ``Conv``
    multiplies the zeros, so an inf filter gives NaN on the ``onnx`` target only, a documented
    deviation (docs/conformance.md, "Convolution"). These values sum exactly in any order.
    """
    nrng = np.random.default_rng(rng.getrandbits(32))
    return {k: (nrng.integers(-8, 9, a.shape) / 4.0).astype(a.dtype) if a.dtype.kind == "f"
            else a.copy() for k, a in feeds.items()}


def undefined_casts(g: Graph) -> bool:
    """Whether the graph casts floats to integers: out-of-range values and NaN give an
    implementation-defined integer there (ir/ops/arith.py, ``cast``), which differs between
    NumPy's paths, C and onnxruntime, so the targets' values are not compared."""
    return any(n.op == "cast" and n.inputs[0].type.dtype.is_float
               and not n.outputs[0].type.dtype.is_float and n.outputs[0].type.dtype.value != "bool"
               for n in g.nodes)


def hostile_api_call(g: Graph, rng: random.Random, st: Stages) -> None:
    """One public entry point called with a bad argument: a GradcError, or success, is fine."""
    names = [v.name for v in g.inputs]
    sym = (symbols_of(g) or ["N"])[0]
    text = str(g)
    shapes: Any = rng.choice(({sym: 0}, {sym: -1}, {sym: 2 ** 70}, {sym: True}, {sym: 1.5},
                         {sym: "2"}, {1: 2}, {sym: np.int64(3)}, {"zz": 2}, [(sym, 2)], sym))
    target: Any = rng.choice(("C", "", "bogus", None, 3, "reference ", "onnx\x00"))
    passes: Any = rng.choice(("bogus", "", [None], ["cse", "bogus"], 5, ["default"], "cse,dce",
                         ["dce"] * 50, ("cse",), "none"))
    option: dict[str, Any] = {rng.choice(("threads", "bogus", "cc")):
                              rng.choice((0, -1, 2 ** 40, "x", None))}
    opt_passes: Any = rng.choice(("bogus", "", [None], 7, ["fuse-elementwise"] * 3,
                             "canonicalize,canonicalize"))
    wrt: Any = rng.choice(([], ["bogus"], names[:1] * 2, list(reversed(names)), "x", [None], [3],
                      names))
    text_arg: Any = rng.choice((text.encode(), None, 5, [text], text + "\x00", text * 2))
    model_arg: Any = rng.choice((None, 5, "", ".", "/", "\x00", bytearray(b"\x08\x07"),
                            memoryview(b""), b"", text, object()))
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("compile:shapes", lambda: gradc.compile(g, target="numpy", shapes=shapes)),
        ("compile:target", lambda: gradc.compile(g, target=target)),
        ("compile:passes", lambda: gradc.compile(g, target="reference", passes=passes)),
        ("compile:options", lambda: gradc.compile(
            g, target=rng.choice(("c", "onnx", "numpy")), **option)),
        ("optimize:passes", lambda: gradc.optimize(g, passes=opt_passes)),
        ("grad:wrt", lambda: gradc.grad(g, wrt)),
        ("parse:type", lambda: gradc.parse(text_arg)),
        ("from_onnx:type", lambda: gradc.from_onnx(model_arg)),
        ("to_onnx:type", lambda: gradc.to_onnx(rng.choice((None, text, 5)))),  # type: ignore
        ("artifact:target", lambda: gradc.api.artifact(g, rng.choice(("reference", "bogus",
                                                                      "C", "onnx")))),
    ]
    name, fn = rng.choice(calls)
    st.run(f"api:{name}", fn)


def check_export(g: Graph, st: Stages, rng: random.Random) -> None:
    """``to_onnx``: the model passes ``onnx.checker`` and imports back as the same graph; now
    and then, without its embedded IR, as a graph that computes the same (``fuzz.readback``)."""
    import onnx

    model = st.run("to_onnx", lambda: gradc.to_onnx(g))
    if model is None:
        return
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # the checker raises ValidationError, InferenceError, ...
        raise Finding("onnx-invalid", "to_onnx",
                      f"to_onnx: the model fails onnx.checker: {type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}") from None
    back = st.run("from_onnx(to_onnx)", lambda: gradc.from_onnx(model.SerializeToString()))
    if back is not None and not structurally_equal(back, g):
        raise Finding("roundtrip", "from_onnx(to_onnx(g))",
                      f"from_onnx(to_onnx(g)) differs from g: {_difference(g, back)}")
    if rng.random() < 0.3 and total_elements(g, {}) <= RUN_LIMIT:
        check_readback(g, model, st.run, rng, compare)
