"""A fuzzing campaign: harnesses round-robin within a time budget, then a report.

Each of ``jobs`` threads owns a ``Worker`` child and takes the next input from the harnesses in
turn (input ``i`` of harness ``h`` is generated from a seed derived from the campaign seed, ``h``
and ``i``). A crash whose class key is new (not stored, not seen in this run) is minimized with
the same worker and, unless ``save`` is off, stored under ``fuzz/regressions``.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from fuzz import store
from fuzz.common import REPO, Result, key_text, short
from fuzz.minimize import Budget, minimize
from fuzz.supervisor import Worker
from fuzz.worker import harness_module


@dataclass
class CrashClass:
    """One crash class seen in a campaign."""

    key: tuple[str, str, str]
    count: int = 0
    message: str = ""
    detail: str = ""
    path: str | None = None  # the stored reproducer
    known: bool = False  # stored before this campaign
    seed: int | None = None


@dataclass
class HarnessStats:
    """Counters of one harness."""

    name: str
    tried: int = 0
    ok: int = 0
    refused: int = 0
    crash: int = 0
    errors: int = 0
    seconds: float = 0.0
    first_error: str = ""
    refused_at: dict[str, int] = field(default_factory=dict)


def derive_seed(seed: int, harness: str, index: int) -> int:
    """The generation seed of input ``index`` of a harness."""
    h = hashlib.sha256(f"{seed}:{harness}:{index}".encode()).hexdigest()
    return int(h[:15], 16)


class Campaign:
    """Runs the harnesses within a budget and collects statistics and crash classes."""

    def __init__(self, harnesses: list[str], seconds: float, seed: int, jobs: int = 1,
                 save: bool = True, timeout: float = 15.0, mem_mb: int = 3072,
                 log: Callable[[str], None] = print) -> None:
        self.harnesses = harnesses
        self.seconds = seconds
        self.seed = seed
        self.jobs = max(1, jobs)
        self.save = save
        self.timeout = timeout
        self.mem_mb = mem_mb
        self.log = log
        self.stats = {h: HarnessStats(h) for h in harnesses}
        self.classes: dict[tuple[str, str, str], CrashClass] = {}
        self.known = store.stored_keys()
        self.lock = threading.Lock()
        self._turn = itertools.cycle(harnesses)
        self._index = {h: 0 for h in harnesses}
        self.started = 0.0
        self.elapsed = 0.0

    # -- running ----------------------------------------------------------------------------
    def run(self) -> None:
        """Fuzz until the budget is spent."""
        self.started = time.monotonic()
        deadline = self.started + self.seconds
        threads = [threading.Thread(target=self._loop, args=(deadline,), daemon=True)
                   for _ in range(self.jobs)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            self.log("interrupted: stopping after the inputs under way")
            self._stop = True
            for t in threads:
                t.join(self.timeout + 15)
        self.elapsed = time.monotonic() - self.started

    _stop = False

    def _next(self) -> tuple[str, int]:
        with self.lock:
            h = next(self._turn)
            i = self._index[h]
            self._index[h] = i + 1
            return h, i

    def _loop(self, deadline: float) -> None:
        with Worker(mem_mb=self.mem_mb, timeout=self.timeout) as w:
            while time.monotonic() < deadline and not self._stop:
                h, i = self._next()
                seed = derive_seed(self.seed, h, i)
                t0 = time.monotonic()
                payload, r = w.fuzz(h, seed)
                self._record(h, r, time.monotonic() - t0)
                if r.status == "crash" and r.key is not None:
                    try:
                        self._crash(w, h, payload, r, seed, deadline)
                    except Exception as e:  # a bug of the fuzzer: report it, keep fuzzing
                        with self.lock:
                            s = self.stats[h]
                            s.errors += 1
                            s.first_error = s.first_error or \
                                f"while minimizing or saving: {type(e).__name__}: {e}"
                        self.log(f"[{h}] fuzzer error while minimizing or saving: "
                                 f"{type(e).__name__}: {e}")

    def _record(self, h: str, r: Result, seconds: float) -> None:
        with self.lock:
            s = self.stats[h]
            s.tried += 1
            s.seconds += seconds
            if r.status == "ok":
                s.ok += 1
            elif r.status == "refused":
                s.refused += 1
                at = (r.stage or "refused").split(":", 1)[-1] if r.stage else "?"
                s.refused_at[at] = s.refused_at.get(at, 0) + 1
            elif r.status == "crash":
                s.crash += 1
            else:
                s.errors += 1
                if not s.first_error:
                    s.first_error = r.message + "\n" + r.detail[-3000:]
                    self.log(f"[{h}] fuzzer error: {r.message}")

    def _crash(self, w: Worker, h: str, payload: Any, r: Result, seed: int,
               deadline: float) -> None:
        assert r.key is not None
        with self.lock:
            c = self.classes.get(r.key)
            new = c is None
            if c is None:
                c = self.classes[r.key] = CrashClass(r.key, message=r.message, detail=r.detail,
                                                     seed=seed)
                if r.key in self.known:
                    c.known, c.path = True, self.known[r.key]
            c.count += 1
        if not new:
            return
        variant = None
        if c.known and r.key[1] != "timeout" and not self._stored_case_fails(w, r.key):
            # The stored case of this key passes now: this input is another bug under the same
            # key. (Timeouts are left known: a stored hang that runs fast when replayed alone
            # says nothing about this one.)
            c.known, variant = False, hashlib.sha1(repr(payload).encode(
                "utf-8", "surrogatepass")).hexdigest()[:6]
        self.log(f"[{h}] {'known' if c.known else 'NEW'} class {key_text(r.key)}: "
                 f"{short(r.message, 120)}")
        if c.known or payload is None or not self.save:
            return
        slow = r.key[1] == "timeout" or r.seconds > 5
        left = deadline - time.monotonic()  # past the deadline: a short reduction only
        budget = Budget(tests=8 if slow else 250,
                        seconds=min(90.0 if slow else 60.0, max(10.0, 0.3 * left)))
        module = harness_module(h)

        def still_fails(p: Any) -> bool:
            return w.run(h, p).key == r.key

        if not still_fails(payload):  # depends on the worker's history: keep it as found
            path = store.save(h, r.key, payload, r.message, seed, reproduced=False,
                              variant=variant)
            self.log(f"[{h}]   did not fail again in a fresh run; kept unminimized -> "
                     f"{os.path.relpath(path, REPO)}")
        else:
            small = minimize(module, payload, still_fails, budget)
            path = store.save(h, r.key, small, r.message, seed, variant=variant)
            self.log(f"[{h}]   minimized in {budget.used} tests -> "
                     f"{os.path.relpath(path, REPO)}")
        with self.lock:
            c.path = path

    def _stored_case_fails(self, w: Worker, key: tuple[str, str, str]) -> bool:
        """Whether the stored case of ``key`` still fails with that key."""
        try:
            case = store.load_case(self.known[key])
        except (OSError, ValueError, KeyError):
            return True
        return w.run(case.harness, case.payload).key == key

    # -- results ----------------------------------------------------------------------------
    @property
    def new_classes(self) -> list[CrashClass]:
        """Classes not stored before this campaign."""
        return [c for c in self.classes.values() if not c.known]

    def report(self, fmt: str = "text", argv: str = "") -> str:
        """The report: per-harness table, then every crash class (text or Markdown)."""
        md = fmt == "md"
        rows = [("harness", "inputs", "inputs/s", "ok", "refused", "crash", "classes",
                 "fuzzer errors")]
        for h, s in self.stats.items():
            n_cls = sum(1 for k in self.classes if k[0] == h)
            rate = s.tried / s.seconds if s.seconds else 0.0
            rows.append((h, str(s.tried), f"{rate:.1f}", str(s.ok), str(s.refused),
                         str(s.crash), str(n_cls), str(s.errors)))
        total = sum(s.tried for s in self.stats.values())
        lines = []
        head = (f"gradc fuzz: {total} inputs in {self.elapsed:.0f} s, seed {self.seed}, "
                f"{self.jobs} job(s); {len(self.classes)} crash classes "
                f"({len(self.new_classes)} new)")
        lines.append(("# " if md else "") + head)
        if argv:
            lines.append("")
            lines.append(f"Command: `{argv}`" if md else f"command: {argv}")
        lines.append("")
        lines += _table(rows, md)
        for h, s in self.stats.items():
            if s.refused_at:
                top = sorted(s.refused_at.items(), key=lambda kv: -kv[1])[:6]
                lines.append(("- " if md else "  ") + f"{h}: refused at " +
                             ", ".join(f"{k} {v}" for k, v in top))
        lines.append("")
        lines.append(("## " if md else "") + "Crash classes")
        lines.append("")
        crows = [("harness", "kind", "innermost gradc frame", "count", "first message",
                  "reproducer")]
        for c in sorted(self.classes.values(), key=lambda c: (c.key[0], -c.count)):
            where = os.path.relpath(c.path, REPO) if c.path else "(not saved)"
            if c.known:
                where += " (stored before)"
            crows.append((c.key[0], c.key[1], c.key[2], str(c.count), short(c.message, 100),
                          where))
        lines += _table(crows, md) if len(crows) > 1 else ["(none)"]
        lines.append("")
        lines.append(("## " if md else "") + "Replay")
        lines.append("")
        lines.append("Each reproducer replays with `python -m fuzz --replay PATH`; this run "
                     f"again with `python -m fuzz --seed {self.seed} --seconds "
                     f"{self.seconds:.0f} --harness {','.join(self.harnesses)}`.")
        errs = [s for s in self.stats.values() if s.first_error]
        if errs:
            lines.append("")
            lines.append(("## " if md else "") + "Fuzzer errors (bugs of the fuzzer)")
            for s in errs:
                lines.append(f"{s.name}: {s.first_error.strip()[:1500]}")
        return "\n".join(lines) + "\n"


def _table(rows: Sequence[tuple[str, ...]], md: bool) -> list[str]:
    if md:
        esc = [tuple(x.replace("|", "\\|") for x in r) for r in rows]
        out = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(rows[0])]
        return out + ["| " + " | ".join(r) + " |" for r in esc[1:]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[-1] = 0
    return ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
