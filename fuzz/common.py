"""Shared pieces of the fuzzer: crash class keys, findings, outcomes, gradc's source roots.

A crash class is keyed by ``(harness, kind, frame)``:

- ``kind`` is the exception type (``ValueError``), ``timeout``, ``signal 11``, ``exit 70 (T)``
  for the command line's internal error, ``warning:RuntimeWarning``, or the name of a property
  the harness checks itself (``mismatch``, ``roundtrip``, ...: see ``Finding``);
- ``frame`` is the innermost frame inside gradc's source as ``path/in/repo.py:function``
  (line numbers are left out, so that edits elsewhere in a file keep the key), else the
  innermost frame at all, else ``?``.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Iterable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADC_DIRS = ("compiler", "ir", "passes", "backends")
HARNESSES = ("ir", "onnx", "call", "cli")


def gradc_roots() -> tuple[str, ...]:
    """The directories that hold gradc's source (the checkout's, and the installed package's)."""
    roots = [os.path.join(REPO, d) for d in GRADC_DIRS]
    mod = sys.modules.get("gradc")
    if mod is not None and getattr(mod, "__file__", None):
        base = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__ or "")))
        roots += [os.path.join(base, d) for d in GRADC_DIRS]
        roots.append(os.path.dirname(os.path.abspath(mod.__file__ or "")))
    return tuple(dict.fromkeys(os.path.realpath(r) + os.sep for r in roots))


def in_gradc(filename: str, roots: Iterable[str] | None = None) -> str | None:
    """The repository-relative path of a gradc source file, None for any other file."""
    real = os.path.realpath(filename)
    for root in roots if roots is not None else gradc_roots():
        if real.startswith(root):
            return os.path.join(os.path.basename(root.rstrip(os.sep)), real[len(root):])
    return None


def frame_label(filename: str, function: str, roots: Iterable[str] | None = None) -> str:
    """``path:function`` for one frame (repository-relative inside gradc)."""
    rel = in_gradc(filename, roots)
    return f"{rel or os.path.basename(filename)}:{function}"


def innermost_frame(frames: list[tuple[str, str]], roots: Iterable[str] | None = None) -> str:
    """The class-key frame of a stack given innermost last as ``(filename, function)``."""
    roots = tuple(roots) if roots is not None else gradc_roots()
    for filename, function in reversed(frames):
        if in_gradc(filename, roots):
            return frame_label(filename, function, roots)
    if frames:
        return frame_label(*frames[-1], roots=roots)
    return "?"


def tb_frames(tb: TracebackType | None) -> list[tuple[str, str]]:
    """``(filename, function)`` of each frame of a traceback, innermost last."""
    return [(f.filename, f.name) for f in traceback.extract_tb(tb)]


def exception_frames(exc: BaseException) -> list[tuple[str, str]]:
    """The frames of an exception, following ``__context__`` into what it was raised from.

    When gradc catches a crash and raises another exception, the key should name where the
    first one happened only if the second is not an intended error; callers decide that, so
    this gives the exception's own frames.
    """
    return tb_frames(exc.__traceback__)


_FAULT_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line \d+ in (?P<func>\S+)')


def fault_frames(dump: str) -> list[tuple[str, str]]:
    """Frames of the thread that ran the input in a ``faulthandler`` dump, innermost last: the
    one whose stack holds the worker's loop (``fuzz/worker.py``), else the first listed.

    A timeout's dump lists every thread, the newest first, so a thread that gradc or a library
    started (a thread pool, a progress bar's monitor) would otherwise key the class by where
    it waits (``threading.py:wait``) instead of where the input was stuck.
    """
    threads: list[list[tuple[str, str]]] = []
    for line in dump.splitlines():
        # a timeout lists every thread under "Thread 0x..." headers; a fatal signal with
        # all_threads=False lists the one stack under "Stack (most recent call first):"
        if line.startswith(("Thread ", "Current thread ", "Stack ")):
            threads.append([])
            continue
        m = _FAULT_FRAME.match(line)
        if m and threads:
            threads[-1].append((m.group("file"), m.group("func")))
    main = next((t for t in threads if any(f.replace(os.sep, "/").endswith("fuzz/worker.py")
                                           for f, _ in t)), threads[0] if threads else [])
    return list(reversed(main))  # faulthandler lists the most recent call first


class Finding(Exception):
    """A property a harness checks itself failed (no exception from gradc to key it by).

    ``kind`` becomes the class key's second part and ``frame`` its third, e.g.
    ``Finding("mismatch", "c:float16", "output 'y' differs ...")``.
    """

    def __init__(self, kind: str, frame: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.frame = frame


@dataclass
class Result:
    """What running one input gave: ``ok``, ``refused`` (a GradcError) or ``crash``."""

    status: str
    key: tuple[str, str, str] | None = None
    message: str = ""
    detail: str = ""
    stage: str = ""
    seconds: float = 0.0
    restart: bool = False
    vm_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (for pickling across the worker pipe)."""
        return {"status": self.status, "key": list(self.key) if self.key else None,
                "message": self.message, "detail": self.detail, "stage": self.stage,
                "seconds": self.seconds, "restart": self.restart, "vm_mb": self.vm_mb,
                "extra": self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Result":
        """The inverse of ``to_dict``."""
        key = tuple(d["key"]) if d.get("key") else None
        return cls(d["status"], key, d.get("message", ""), d.get("detail", ""),  # type: ignore
                   d.get("stage", ""), d.get("seconds", 0.0), d.get("restart", False),
                   d.get("vm_mb", 0.0), d.get("extra", {}))


def key_text(key: tuple[str, str, str] | list[str] | None) -> str:
    """A class key as one line: ``ir | ValueError | backends/c/emit.py:emit``."""
    return " | ".join(key) if key else "-"


def short(text: str, n: int = 160) -> str:
    """The first line of a message, cut to ``n`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= n else line[: n - 3] + "..."
