"""The parent's side of a worker process: start it, send inputs, survive hangs and deaths.

A ``Worker`` owns one long-lived ``python -m fuzz.worker`` child. Each request waits for the
answer until the input's timeout plus a grace period; a child that died or hung is classified
(``timeout``, ``signal N``, ``exit N``) by the innermost frame of the stack that ``faulthandler``
wrote to the fault file, then replaced by a fresh child on the next request.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from fuzz.common import REPO, Result, fault_frames, innermost_frame
from fuzz.worker import read_frame, write_frame

GRACE_S = 10.0  # beyond the input's timeout, for faulthandler to dump and exit
PAUSE_S = 300.0  # the longest a one-time import may take (fuzz.worker.untimed)


class WorkerDied(Exception):
    """The child ended or hung without answering."""


class Worker:
    """One worker child process with its scratch folder, fault file and limits."""

    def __init__(self, mem_mb: int = 3072, timeout: float = 15.0,
                 workdir: str | None = None) -> None:
        self.mem_mb = mem_mb
        self.timeout = timeout
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="gradc-fuzz-")
        os.makedirs(self.workdir, exist_ok=True)
        self.fault_path = os.path.join(self.workdir, "fault.txt")
        self.log_path = os.path.join(self.workdir, "worker.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._buf = b""

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start a fresh child (stopping the old one)."""
        self.stop()
        env = dict(os.environ)
        cache = os.path.join(self.workdir, "cache")
        tmp = os.path.join(self.workdir, "tmp")
        os.makedirs(cache, exist_ok=True)
        os.makedirs(tmp, exist_ok=True)
        env.update({
            "PYTHONPATH": REPO + os.pathsep + env.get("PYTHONPATH", ""),
            "XDG_CACHE_HOME": cache, "TMPDIR": tmp, "MALLOC_ARENA_MAX": "2",
            "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "PYTHONFAULTHANDLER": "",
        })
        env.pop("PYTHONFAULTHANDLER")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fuzz.worker", "--mem-mb", str(self.mem_mb),
             "--fault-file", self.fault_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=self.workdir,
            env=env, start_new_session=True)
        log.close()
        self.starts += 1

    def stop(self) -> None:
        """Stop the child if it runs (politely, then by force)."""
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            if p.poll() is None and p.stdin is not None:
                write_frame(p.stdin.fileno(), {"op": "quit"})
                p.stdin.close()
                p.wait(timeout=3)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        self._kill(p)

    def close(self) -> None:
        """Stop the child and remove the scratch folder if this worker made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _kill(p: subprocess.Popen[bytes]) -> None:
        try:  # the child leads its own session: this also ends what it started (cc, ...)
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if p.poll() is None:
                p.kill()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (p.stdin, p.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    # -- requests ---------------------------------------------------------------------------
    def fuzz(self, harness: str, seed: int) -> tuple[Any, Result]:
        """Generate and run one input in the child: (the input or None, its result)."""
        return self._exchange(harness, {"op": "fuzz", "harness": harness, "seed": seed})

    def run(self, harness: str, payload: Any) -> Result:
        """Run one given input in the child."""
        return self._exchange(harness, {"op": "run", "harness": harness,
                                        "payload": payload}, payload)[1]

    def _exchange(self, harness: str, msg: dict[str, Any],
                  payload: Any = None) -> tuple[Any, Result]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        msg["timeout"] = self.timeout
        started = time.monotonic()
        deadline = started + self.timeout + GRACE_S
        try:
            write_frame(self.proc.stdin.fileno(), msg)
            paused = deadline
            while True:
                kind, body = self._read(deadline)
                if kind == "case":
                    payload = body
                    continue
                if kind == "pause":  # fuzz.worker.untimed: a one-time import under way
                    paused, deadline = deadline, time.monotonic() + PAUSE_S
                    continue
                if kind == "resume":
                    deadline = paused + float(body)
                    continue
                result = Result.from_dict(body)
                if result.restart:
                    self.stop()
                return payload, result
        except WorkerDied as e:
            return payload, self._death(harness, str(e), time.monotonic() - started)
        except (BrokenPipeError, OSError) as e:
            return payload, self._death(harness, f"pipe: {e}", time.monotonic() - started)

    def _read(self, deadline: float) -> tuple[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise WorkerDied("no answer before the deadline")
        frame = read_frame(fd)  # a frame is written at once: the rest follows promptly
        if frame is None:
            raise WorkerDied("the worker closed its pipe")
        return frame

    def _death(self, harness: str, why: str, seconds: float) -> Result:
        """Classify a child that hung or died, then discard it."""
        p = self.proc
        assert p is not None
        hung = why.startswith("no answer")
        if not hung:
            try:
                p.wait(timeout=5)  # the pipe closes a moment before the child is reaped
            except subprocess.TimeoutExpired:
                pass
        self._kill(p)
        self.proc = None
        code = p.returncode
        try:
            with open(self.fault_path, encoding="utf-8", errors="replace") as f:
                dump = f.read()
        except OSError:
            dump = ""
        frame = innermost_frame(fault_frames(dump)) if dump else "?"
        if hung or dump.lstrip().startswith("Timeout"):
            kind = "timeout"
            message = f"no result within {self.timeout:g} s"
        elif code is not None and code < 0:
            kind = f"signal {-code}"
            message = f"worker killed by signal {-code} ({signal.Signals(-code).name})"
        else:
            kind = f"exit {code}"
            message = f"worker exited with status {code} ({why})"
        tail = self._log_tail()
        detail = (dump[-4000:] + ("\n--- worker stderr ---\n" + tail if tail else ""))
        return Result("crash", (harness, kind, frame), message, detail=detail, seconds=seconds,
                      restart=True)

    def _log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
