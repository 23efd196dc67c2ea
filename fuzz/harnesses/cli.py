"""Harness ``cli``: files and flags for ``gradc.cli.main``, with the command line's contract.

Inputs are files written into a fresh folder: text IR and ONNX models (generated, sometimes
mutated, sometimes with the other format's extension), garbage, empty files, invalid UTF-8 or
UTF-16 text, directories, missing paths, ``example:NAME``. The command is one of the subcommands
(``train-step`` included, with its optimizer flags) with valid or hostile flags
(``--shape N=0``, ``N=2**70``, a bad ``--target``, ``-p`` with an unknown pass, ``-o`` into a
missing folder, ...).

The contract checked: ``main`` returns (or argparse exits) with status 0, 1 or 2, never 70 (an
internal error) and never raises; stderr has no traceback; a failure prints one non-empty
``gradc: error:`` line that names the input file when the flags were valid (so the file is at
fault, whatever is wrong with the file); a failed command leaves no output file and no
temporary file behind.

Payload: ``{"files": [{"name", "kind": "bytes"|"dir", "data"}], "argv": [...],
"input": path or None, "output": path or None, "clean": bool}``; ``{dir}`` in a path stands
for the folder the files are written to.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import shutil
import tempfile
from typing import Any, Callable

from fuzz.cli_train_cases import step_flags, train_case, write_data
from fuzz.common import Finding, innermost_frame, tb_frames
from fuzz.graphgen import generate_graph
from fuzz.minimize import ddmin
from fuzz.pipeline import total_elements
from fuzz.textmut import TextMutator

SUBCOMMANDS = ("verify", "print", "run", "grad", "compile", "show", "check", "verify", "print",
               "run", "compile", "show", "train-step", "train-step", "train", "train")
HOSTILE_SHAPES = ("N=0", "N=-1", f"N={2 ** 70}", "=3", "N", "N=1e3", "N=٣", "N=99999999999",
                  "N=3=4", "N=", "self=2", f"N={2 ** 40}")
HOSTILE_PASSES = ("bogus", "cse,bogus", "", "none", "default,cse", ",", "dce,,cse", "CSE",
                  "canonicalize,canonicalize")


MAX_INPUT_ELEMENTS = 1 << 24  # elements of a model's graph inputs (symbolic dims as 2)


def _input_elements(data: bytes) -> int:
    """Elements of the graph inputs of a serialized model (0 when it does not parse)."""
    import onnx  # lazy: as ModelGen

    try:
        m = onnx.load_from_string(data)
    except Exception:  # a mutation onnx cannot read: nothing to run on
        return 0
    total = 0
    for v in m.graph.input:
        n = 1
        for d in v.type.tensor_type.shape.dim:
            n *= d.dim_value if d.dim_value > 0 else 2
        total += n
    return total


def _input_file(rng: random.Random, small: bool) -> tuple[list[dict[str, Any]], str, bool]:
    """(files, input path, whether the input is a well-formed file of its kind)."""
    r = rng.random()
    if r < 0.35:
        text = ""
        try:
            g = generate_graph(rng, small=small).graph
            if not small or total_elements(g, {}) < 100_000:
                text = str(g)
        except Exception:  # a generated graph that cannot print: an empty file then
            pass
        well = rng.random() < 0.6
        if not well:
            text = TextMutator(rng).mutate(text, rng.randint(1, 3))
        name = rng.choice(("g.ir", "g.ir", "g.txt", "graph", "g h.ir", "ünï.ir", "g.gradc"))
        return [{"name": name, "kind": "bytes",
                 "data": text.encode("utf-8", "surrogatepass")}], "{dir}/" + name, well
    if r < 0.65:
        from fuzz.harnesses.onnxmodel import ModelGen, ModelMutator

        data = ModelGen(rng).build().SerializeToString()
        data = ModelMutator(rng).mutate(data, rng.choice((0, 0, 1, 2)))
        if _input_elements(data) > MAX_INPUT_ELEMENTS:
            # `gradc run`/`check` draw random inputs of that size and print their statistics:
            # seconds per GiB of legitimate work, which the input's time limit would call a
            # hang (seed 10101: uint8[2**31]); the unmutated model instead
            data = ModelGen(rng).build().SerializeToString()
        name = rng.choice(("m.onnx", "m.onnx", "m.onnx", "m.ir", "m"))
        return [{"name": name, "kind": "bytes", "data": data}], "{dir}/" + name, False
    if r < 0.75:
        data = rng.choice((b"", b"\xff\xfe\x00g\x00r", b"graph g(", b"\x00" * 10,
                           "graph g() {\n  return\n}".encode("utf-16"), b"\x80abc",
                           bytes(rng.randrange(256) for _ in range(64)), b"graph \xed\xa0\x80"))
        name = rng.choice(("x.ir", "x.onnx", "x"))
        return [{"name": name, "kind": "bytes", "data": data}], "{dir}/" + name, False
    if r < 0.82:
        name = rng.choice(("d.onnx", "d.ir", "d"))
        return [{"name": name, "kind": "dir", "data": b""}], "{dir}/" + name, False
    if r < 0.86:
        return [], rng.choice(("{dir}/missing.ir", "{dir}/missing.onnx", "{dir}/no/such.ir",
                               "", "-", "{dir}/\udcff.ir", "{dir}/missing.pt2")), False
    if r < 0.9:  # .pt2 paths (torch.export.save) that are no program
        kind = rng.choice(("bytes", "bytes", "bytes", "dir", "zip"))
        data = rng.choice((b"", b"garbage bytes", b"PK\x03\x04", bytes(range(256))))
        if kind == "zip":  # an archive, but not a torch.export program
            import io
            import zipfile

            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                z.writestr(rng.choice(("archive/version", "data.pkl", "x")), b"\x80\x04K\x01.")
            kind, data = "bytes", buf.getvalue()
        return [{"name": "m.pt2", "kind": kind, "data": data}], "{dir}/m.pt2", False
    return [], "example:" + rng.choice(("forward", "pool_step", "train_step", "cnn", "bogus",
                                        "", "../x")), True


def generate(rng: random.Random) -> dict[str, Any]:
    """A command line and the files it reads."""
    sub = rng.choice(SUBCOMMANDS)
    clean = True
    output: str | None = None

    def hostile(p: float = 0.15) -> bool:
        nonlocal clean
        if rng.random() < p:
            clean = False
            return True
        return False

    if sub == "train" and rng.random() < 0.8:
        files, flags, path = train_case(rng, hostile)
        well = True
    else:
        # graphs that run (run, check) stay small: a big one is slow work, not a hang
        files, path, well = _input_file(rng, small=sub in ("run", "check", "train"))
        flags = ["--data", "{dir}/nodata.npz"] if sub == "train" else []
    argv: list[str] = [sub, path] + flags

    if sub != "train" and rng.random() < 0.3:
        argv += ["--shape", rng.choice(HOSTILE_SHAPES + ("N=1", "N=2", "N=3", "M=2"))]
        clean = False  # the graph may not have the symbol: the flag may be at fault
    if sub in ("run", "compile", "show") and rng.random() < 0.3:
        argv += ["-p", rng.choice(HOSTILE_PASSES) if hostile(0.6) else
                 rng.choice(("default", "none", "cse,dce", "canonicalize", "fuse-elementwise"))]
    if sub == "run":
        argv += ["-t", rng.choice(("reference", "numpy", "onnx", "c", "numpy"))]
        if hostile(0.1):
            argv[-1] = rng.choice(("bogus", "C", ""))
        if rng.random() < 0.2:
            argv += ["--seed", str(rng.choice((0, 1, -1, 2 ** 70))) if hostile(0.3) else "3"]
    elif sub == "compile":
        t = rng.choice(("numpy", "onnx", "c"))
        argv += ["-t", t]
        ext = {"numpy": ".py", "onnx": ".onnx", "c": ".c"}[t]
        if t == "onnx" or rng.random() < 0.5:
            output = "{dir}/out" + ext
        for flag in ("--print-after-all", "--print-after-change", "--print-diff",
                     "--time-passes", "--pass-statistics"):
            if rng.random() < 0.1:
                argv.append(flag)
        if rng.random() < 0.1:
            argv += ["--dump-ir", "{dir}/dump" if not hostile(0.3) else "{dir}/nope/dump"]
    elif sub == "grad":
        output = rng.choice(("{dir}/train.onnx", "{dir}/train.ir"))
        if rng.random() < 0.2:
            argv += ["--wrt", rng.choice(("x", "in0", "v1", "self"))]
            clean = False  # the name may not be an input of the graph
        if rng.random() < 0.1:
            argv.append("--check")
    elif sub == "train-step":
        output = rng.choice(("{dir}/step.onnx", "{dir}/step.ir"))
        opt = rng.choice(("sgd", "adam", "adamw"))
        argv += ["--optimizer", opt, "--lr", rng.choice(("0.1", "1e-3", "0"))]
        if rng.random() < 0.7:
            argv += ["--loss", rng.choice(("cross_entropy", "mse"))]
        else:
            clean = False  # the first output may not be a loss: the file is not at fault
        if opt == "sgd" and rng.random() < 0.5:
            argv += ["--momentum", "0.9"]
        if hostile(0.15):
            argv += rng.choice((["--lr", "-1"], ["--lr", "nan"], ["--momentum", "0.5"],
                                ["--frozen", "nope"], ["--betas", "1", "2"], ["--seed", "-3"]))
        argv += step_flags(rng, hostile, None)
        if any(f in argv for f in ("--class-axis", "--ignore-index", "--train", "--frozen")):
            clean = False  # the model may have no such axis or names: the flags may be at fault
    elif sub == "train":
        output = rng.choice(("{dir}/trained.onnx", "{dir}/trained.onnx", "{dir}/t.ir"))
        if "--loss" not in argv or argv.count("--class-axis") > 1 or output.endswith(".ir") \
                or any(f in argv for f in ("--ignore-index", "--train", "--frozen")):
            clean = False  # the model's first output or names may not fit: flags at fault
    elif sub in ("print", "show"):
        if rng.random() < 0.4:
            output = "{dir}/out.txt"
        if sub == "show" and rng.random() < 0.4:
            argv += ["--format", rng.choice(("text", "dot", "html"))]
    elif sub == "check":
        if rng.random() < 0.3:
            argv.append("--grad")
        argv += ["--targets", rng.choice(("numpy", "onnx", "numpy,onnx", "c"))]
        if hostile(0.15):
            argv[-1] = rng.choice(("bogus", "", "numpy,,onnx", "reference"))
    if output is not None and hostile(0.15):
        output = rng.choice(("{dir}/nope/out.txt", "{dir}", "{dir}/" + "x" * 300))
    if output is not None:
        argv += ["-o", output]
    if rng.random() < 0.03:
        argv.insert(rng.randrange(len(argv) + 1), rng.choice(("--bogus", "-x", "--", "--help")))
        clean = False
    return {"files": files, "argv": argv, "input": path, "output": output,
            "clean": clean, "well_formed": well, "subcommand": sub}


def _run_main(argv: list[str]) -> tuple[int | None, str, str, BaseException | None]:
    from gradc.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc: int | None = None
    exc: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse: usage errors and --help
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except Exception as e:  # noqa: BLE001 (the finding)
            exc = e
    return rc, out.getvalue(), err.getvalue(), exc


def _import_torch() -> None:
    """gradc imports torch to read a .pt2 file: seconds, once per worker, outside the input's
    time limit (``fuzz.worker.untimed``)."""
    import importlib

    from fuzz.worker import untimed

    try:
        untimed(lambda: importlib.import_module("torch"))
    except ImportError:  # gradc then says how to install it
        pass


def _leftovers(folder: str) -> list[str]:
    try:
        return [f for f in os.listdir(folder) if f.startswith(".gradc-")]
    except OSError:
        return []


def execute(payload: dict[str, Any]) -> str:
    """Run the command in a fresh folder and check the command line's contract."""
    base = tempfile.mkdtemp(prefix="cli-")
    try:
        return _execute(payload, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _execute(payload: dict[str, Any], base: str) -> str:
    for f in payload["files"]:
        path = os.path.join(base, f["name"])
        if f["kind"] == "dir":
            os.makedirs(path, exist_ok=True)
        elif f["kind"] == "npz":
            write_data(path, base, f["spec"])
        else:
            with open(path, "wb") as fh:
                fh.write(f["data"])
    argv = [a.replace("{dir}", base) for a in payload["argv"]]
    if any(a.endswith(".pt2") and os.path.isfile(a) for a in argv):
        _import_torch()
    sub = payload.get("subcommand") or (payload["argv"][0] if payload["argv"] else "?")
    inp = (payload.get("input") or "").replace("{dir}", base)
    out_path = (payload.get("output") or "").replace("{dir}", base) or None
    existed = out_path is not None and os.path.exists(out_path)
    rc, out, err, exc = _run_main(argv)
    if exc is not None:
        raise exc
    if rc == 70:
        _, _, _, dbg = _run_main(["--debug"] + argv)
        kind = f"exit 70 ({type(dbg).__name__})" if dbg is not None else "exit 70"
        frame = innermost_frame(tb_frames(dbg.__traceback__)) if dbg is not None else sub
        line = next((x for x in err.splitlines() if "error" in x), err.strip()[:300])
        raise Finding(kind, frame, f"gradc {sub} exited 70: {line}")
    if rc not in (0, 1, 2):
        raise Finding(f"exit {rc}", sub, f"gradc {sub} exited with status {rc!r}")
    if "Traceback (most recent call last)" in err:
        raise Finding("traceback printed", sub, f"gradc {sub} printed a traceback (status {rc})")
    if rc != 0 and out_path and not existed and os.path.exists(out_path) \
            and not os.path.isdir(out_path):
        raise Finding("partial output", sub, f"gradc {sub} failed (status {rc}) but wrote "
                      f"{os.path.basename(out_path)}")
    folder = os.path.dirname(out_path) if out_path else base
    if _leftovers(folder):
        raise Finding("temporary file left", sub, f"gradc {sub} left {_leftovers(folder)[0]}")
    if rc == 2 and not err.startswith("usage:"):
        errors = [x for x in err.splitlines() if x.startswith("gradc: error:")]
        if not errors:
            raise Finding("no error line", sub, f"gradc {sub} exited 2 without an error line: "
                          f"{err.strip()[:200]!r}")
        msg = errors[0][len("gradc: error:"):].strip()
        if not msg:
            raise Finding("empty error message", sub, f"gradc {sub} printed {errors[0]!r}")
        named = [inp] + [a.replace("{dir}", base) for a in payload["argv"][2:]
                         if a.startswith("{dir}/") and a.endswith((".npz", ".onnx"))]
        if payload.get("clean") and inp and not any(p in errors[0] for p in named):
            words = re.sub(r"'[^']*'|\"[^\"]*\"|[0-9]+|\S*/\S*", "", msg).split()[:3]
            raise Finding("error without file name", f"{sub}:{' '.join(words)}",
                          f"gradc {sub}: error line does not name {os.path.basename(inp)!r}: "
                          f"{errors[0][:300]}")
    if rc == 1 and sub == "check" and payload.get("clean"):
        raise Finding("check disagreement", sub, f"gradc check reported a disagreement: "
                      f"{out.strip().splitlines()[-1] if out.strip() else ''}")
    return "ok" if rc == 0 else f"refused:exit {rc}"


def reduce(payload: dict[str, Any], test: Callable[[Any], bool]) -> dict[str, Any]:
    """Fewer flags; for a text input, fewer lines."""
    cur = dict(payload)
    head, flags = cur["argv"][:2], cur["argv"][2:]
    kept = ddmin(flags, lambda fl: test({**cur, "argv": head + fl})) if flags else flags
    cur["argv"] = head + kept
    files = cur["files"]
    if len(files) == 1 and files[0]["kind"] == "bytes":
        try:
            text = files[0]["data"].decode("utf-8")
        except UnicodeDecodeError:
            return cur
        lines = ddmin(text.split("\n"), lambda ls: test(
            {**cur, "files": [{**files[0], "data": "\n".join(ls).encode("utf-8")}]}))
        cur["files"] = [{**files[0], "data": "\n".join(lines).encode("utf-8")}]
    return cur


def files(payload: dict[str, Any]) -> tuple[str, bytes | None, dict[str, Any]]:
    """The whole recipe in the JSON file."""
    return ".json", None, payload


def load(data: bytes | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The recipe as stored."""
    return meta
