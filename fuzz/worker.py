"""The worker child process: runs one input at a time under an address-space and time limit.

Started by ``fuzz.supervisor.Worker`` as ``python -m fuzz.worker --mem-mb M --fault-file F``.
It talks to the parent over its original stdin/stdout (length-prefixed pickles); what gradc or a
C library prints goes to stderr instead. Requests:

- ``{"op": "fuzz", "harness": h, "seed": s, "timeout": t}``: generate an input with the
  harness's ``generate``, send it (``("case", payload)``), then run it as for ``run``;
- ``{"op": "run", "harness": h, "payload": p, "timeout": t}``: run ``execute(payload)`` and
  send ``("result", Result.to_dict())``;
- ``{"op": "quit"}``.

Before each input ``faulthandler.dump_traceback_later(t, exit=True)`` is armed, so a hang dumps
its stack to the fault file and exits; ``faulthandler.enable`` does the same for a fatal signal.
The parent reads that file to key a timeout or a signal by its innermost frame.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import pickle
import random
import resource
import struct
import sys
import time
import traceback
import warnings
from types import FrameType, ModuleType
from typing import Any, BinaryIO

from fuzz.common import Finding, Result, frame_label, in_gradc, innermost_frame, short, tb_frames

HARNESS_MODULES = {
    "ir": "fuzz.harnesses.ir",
    "onnx": "fuzz.harnesses.onnxmodel",
    "call": "fuzz.harnesses.call",
    "cli": "fuzz.harnesses.cli",
    "selftest": "fuzz.harnesses.selftest",
}
VM_RESTART_MB = 1536  # ask for a fresh worker when the address space grows past this
_HEADER = struct.Struct(">Q")
_INPUT: dict[str, Any] = {}  # the input under way: out fd, fault file, timeout, start (serve)


def harness_module(name: str) -> ModuleType:
    """The module of a harness (imported on first use)."""
    return importlib.import_module(HARNESS_MODULES[name])


# -- framing (shared with the supervisor) ------------------------------------------------------
def write_frame(fd: int, obj: Any) -> None:
    """Send one pickled object with its length."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int) -> bytes | None:
    """Read exactly ``n`` bytes (None at end of file)."""
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, n - got)
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(fd: int) -> Any:
    """Receive one object sent by ``write_frame`` (None at end of file)."""
    head = read_exact(fd, _HEADER.size)
    if head is None:
        return None
    body = read_exact(fd, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


# -- limits --------------------------------------------------------------------------------------
def set_limits(mem_mb: int) -> None:
    """Address space ``mem_mb`` MiB, no core files, files of at most 1 GiB."""
    limit = mem_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))


def vm_mb() -> float:
    """This process's address-space size in MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError):
        return 0.0


# -- running one input ---------------------------------------------------------------------------
class WarningTrap:
    """Records RuntimeWarnings raised from gradc's source while it is installed."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str, str]] = []  # (category, frame label, message)
        self._saved: Any = None
        self._catcher: Any = None

    def __enter__(self) -> "WarningTrap":
        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("always")
        warnings.showwarning = self._show
        return self

    def __exit__(self, *exc: object) -> None:
        self._catcher.__exit__(*exc)

    def _show(self, message: Any, category: type[Warning], filename: str, lineno: int,
              file: Any = None, line: Any = None) -> None:
        if not issubclass(category, RuntimeWarning) or not in_gradc(filename):
            return
        func = "?"
        f: FrameType | None = sys._getframe(1)
        while f is not None:
            if f.f_code.co_filename == filename and f.f_lineno == lineno:
                func = f.f_code.co_name
                break
            f = f.f_back
        self.found.append((category.__name__, frame_label(filename, func), str(message)))


def classify(harness: str, exc: BaseException) -> Result:
    """The Result of an exception that escaped a harness's ``execute``."""
    from gradc.errors import GradcError

    if isinstance(exc, GradcError):
        return Result("refused", message=short(f"{type(exc).__name__}: {exc}"))
    if isinstance(exc, Finding):
        return Result("crash", (harness, exc.kind, exc.frame), str(exc), detail=str(exc))
    key = (harness, type(exc).__name__, innermost_frame(tb_frames(exc.__traceback__)))
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-30:])
    restart = isinstance(exc, (MemoryError, RecursionError, SystemExit, KeyboardInterrupt))
    return Result("crash", key, f"{type(exc).__name__}: {exc}"[:2000], detail=detail[-6000:],
                  restart=restart)


def execute(harness: str, payload: Any) -> Result:
    """Run one input of a harness; never raises."""
    start = time.perf_counter()
    mod = harness_module(harness)
    trap = WarningTrap()
    try:
        with trap:
            status = mod.execute(payload) or "ok"
        result = Result("ok" if status == "ok" else "refused", stage=str(status))
    except BaseException as e:  # noqa: BLE001 (every escape is a finding or a refusal)
        result = classify(harness, e)
    if result.status != "crash" and trap.found:
        cat, frame, msg = trap.found[0]
        result = Result("crash", (harness, f"warning:{cat}", frame), f"{cat}: {msg}",
                        detail="\n".join(f"{c} at {fr}: {m}" for c, fr, m in trap.found[:10]))
    result.seconds = time.perf_counter() - start
    result.vm_mb = vm_mb()
    result.restart = result.restart or result.vm_mb > VM_RESTART_MB
    return result


def generate(harness: str, seed: int) -> Any:
    """A new input of a harness from a seed."""
    return harness_module(harness).generate(random.Random(seed))


def untimed(fn: Any) -> Any:
    """``fn()`` outside the input's time limit: a one-time cost the input must not be charged
    for (``import torch`` takes seconds, more on a loaded machine). The alarm is paused and the
    parent told to extend its deadline by the time spent (``pause``/``resume`` frames)."""
    if not _INPUT:
        return fn()
    faulthandler.cancel_dump_traceback_later()
    write_frame(_INPUT["out"], ("pause", None))
    began = time.monotonic()
    try:
        return fn()
    finally:
        spent = time.monotonic() - began
        write_frame(_INPUT["out"], ("resume", spent))
        left = max(1.0, _INPUT["timeout"] - (began - _INPUT["start"]))
        _INPUT["start"] += spent
        faulthandler.dump_traceback_later(left, exit=True, file=_INPUT["fault"])


# -- main loop -----------------------------------------------------------------------------------
def serve(proto_in: int, proto_out: int, fault: BinaryIO) -> None:
    """Answer requests until ``quit`` or end of input."""
    while True:
        msg = read_frame(proto_in)
        if msg is None or msg.get("op") == "quit":
            return
        fault.seek(0)
        fault.truncate()
        timeout = float(msg.get("timeout", 15.0))
        faulthandler.dump_traceback_later(timeout, exit=True, file=fault)
        _INPUT.update(out=proto_out, fault=fault, timeout=timeout, start=time.monotonic())
        try:
            if msg["op"] == "fuzz":
                try:
                    payload = generate(msg["harness"], msg["seed"])
                except Exception as e:  # a bug of the fuzzer itself, not of gradc
                    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                    write_frame(proto_out, ("result", Result(
                        "error", None, f"generator: {type(e).__name__}: {e}", detail=text,
                        stage="generate").to_dict()))
                    continue
                write_frame(proto_out, ("case", payload))
            else:
                payload = msg["payload"]
            result = execute(msg["harness"], payload)
        finally:
            faulthandler.cancel_dump_traceback_later()
            _INPUT.clear()
        write_frame(proto_out, ("result", result.to_dict()))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the worker process."""
    ap = argparse.ArgumentParser(prog="fuzz.worker")
    ap.add_argument("--mem-mb", type=int, default=3072)
    ap.add_argument("--fault-file", required=True)
    args = ap.parse_args(argv)
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # gradc must not read the protocol
    os.dup2(2, 1)  # nor print into it
    sys.stdout = os.fdopen(1, "w", closefd=False)
    fault = open(args.fault_file, "w+b")
    faulthandler.enable(file=fault, all_threads=False)
    set_limits(args.mem_mb)
    import gradc.errors  # noqa: F401  (the class every harness tells refusals by)

    serve(proto_in, proto_out, fault)
    return 0


if __name__ == "__main__":
    sys.exit(main())
