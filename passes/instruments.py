"""Instruments: what ``gradc.optimize(..., instruments=[...])`` reports about each pass.

    optimize(g, "default", instruments=[PrintAfterAll(sys.stderr), PrintAfterChange(sys.stderr),
                                        DiffEach(sys.stderr), TimePasses(sys.stderr),
                                        PassStatistics(sys.stderr), DumpIR("ir-dump")])

A stream of ``None`` means ``sys.stderr`` at the time of writing. The CLI builds the list with
``instruments_from_flags``.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from typing import IO, Sequence

from gradc.ir.core import Graph
from gradc.passes.manager import Instrument, Optimized, Pass, PassEvent


class _Writer(Instrument):
    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        (self.stream or sys.stderr).write(text)


def banner(event: PassEvent) -> str:
    """``// -----// IR after 003 fuse-elementwise (changed) //----- //``."""
    state = "changed" if event.entry.changed else "unchanged"
    return f"// -----// IR after {event.index:03d} {event.entry.name} ({state}) //----- //\n"


class PrintAfterAll(_Writer):
    """Print the IR after every pass."""

    def after_pass(self, event: PassEvent) -> None:
        self.write(banner(event) + event.after_ir + "\n\n")


class PrintAfterChange(_Writer):
    """Print the IR after each pass that changed the graph."""

    def after_pass(self, event: PassEvent) -> None:
        if event.entry.changed:
            self.write(banner(event) + event.after_ir + "\n\n")


def unified_diff(before: str, after: str, name: str) -> str:
    """A unified diff of two IR texts (empty when they are equal)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True),
                                 after.splitlines(keepends=True),
                                 fromfile=f"before {name}", tofile=f"after {name}", n=2)
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text


class DiffEach(_Writer):
    """Print a unified diff of the IR for each pass that changed the graph."""

    def after_pass(self, event: PassEvent) -> None:
        if event.entry.changed:
            self.write(f"// -----// diff of {event.index:03d} {event.entry.name} //----- //\n"
                       + unified_diff(event.before_ir, event.after_ir, event.entry.name) + "\n")


def time_table(optimized: Optimized) -> str:
    """A table of pass times: seconds and share of the total, then the total."""
    total = sum(e.seconds for e in optimized.report) or 1e-12
    rows = ["===-------------------------------------------------------------------------===",
            "                         ... Pass execution timing report ...",
            "===-------------------------------------------------------------------------===",
            f"  Total Execution Time: {total:.4f} seconds", "",
            "   ---Wall Time---  --- Name ---"]
    for e in optimized.report:
        rows.append(f"   {e.seconds:.4f} ({100 * e.seconds / total:5.1f}%)  {e.name}")
    rows.append(f"   {total:.4f} (100.0%)  Total")
    return "\n".join(rows) + "\n"


class TimePasses(_Writer):
    """Print the time of each pass at the end of the pipeline."""

    def after_pipeline(self, optimized: Optimized) -> None:
        self.write(time_table(optimized))


def stats_table(optimized: Optimized) -> str:
    """Every pass's counters, one block per pass."""
    rows = ["===-------------------------------------------------------------------------===",
            "                          ... Pass statistics report ...",
            "===-------------------------------------------------------------------------==="]
    for i, e in enumerate(optimized.report, 1):
        rows.append(f"{i:03d} {e.name}{'' if e.changed else ' (unchanged)'}")
        for k, v in e.stats.items():
            rows.append(f"  {v:>12}  {k}")
    return "\n".join(rows) + "\n"


class PassStatistics(_Writer):
    """Print each pass's statistics at the end of the pipeline."""

    def after_pipeline(self, optimized: Optimized) -> None:
        self.write(stats_table(optimized))


def dump_name(index: int, name: str) -> str:
    """``003-fuse-elementwise.ir`` (index 0 is the input: ``000-input.ir``)."""
    return f"{index:03d}-{name}.ir"


class DumpIR(Instrument):
    """Write the input IR and the IR after each pass to files in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)

    def before_pipeline(self, graph: Graph, passes: Sequence[Pass], optimized: Optimized) -> None:
        os.makedirs(self.directory, exist_ok=True)
        for old in os.listdir(self.directory):  # a shorter pipeline must not leave stale stages
            if re.fullmatch(r"\d{3}-[a-z0-9-]+\.ir", old):
                os.unlink(os.path.join(self.directory, old))
        self._write(dump_name(0, "input"), optimized.input_ir)

    def after_pass(self, event: PassEvent) -> None:
        self._write(dump_name(event.index, event.entry.name), event.after_ir)

    def _write(self, filename: str, text: str) -> None:
        with open(os.path.join(self.directory, filename), "w", encoding="utf-8") as f:
            f.write(text + "\n")


def instruments_from_flags(print_after_all: bool = False, print_after_change: bool = False,
                           diff: bool = False, time_passes: bool = False,
                           statistics: bool = False, dump_ir: str | None = None,
                           stream: IO[str] | None = None) -> list[Instrument]:
    """The instruments that the command-line flags of ``gradc compile`` ask for."""
    out: list[Instrument] = []
    if print_after_all:
        out.append(PrintAfterAll(stream))
    elif print_after_change:
        out.append(PrintAfterChange(stream))
    if diff:
        out.append(DiffEach(stream))
    if time_passes:
        out.append(TimePasses(stream))
    if statistics:
        out.append(PassStatistics(stream))
    if dump_ir:
        out.append(DumpIR(dump_ir))
    return out
