"""Which launches of a step must follow which: the step's CUDA graph as a DAG, not a chain.

The program's launches are written in the plan's order, and running them in that order is
always right. Two launches may also run at once, or in the other order, when neither writes a
byte of the arena that the other reads or writes (``Launch.reads`` and ``Launch.writes``: the
buffers a launch's pointers reach, its node's scratch, the error record). ``dependencies``
gives each launch the earlier launches it conflicts with: the last writer of every byte it
reads or writes (read after write, write after write), and, for every byte it writes, the
launches that read it since that write (write after read). Every conflicting pair is then
ordered, directly or through a chain, so any order that respects these edges computes what
the plan's order computes, bit for bit: no kernel's result depends on when it runs (no
atomics, no reads of memory another launch may be writing).

On the GPU (``rt.DeviceDriver.capture``) the launches of the step's graph are spread over a few
streams with events for these edges, so independent kernels overlap: a layer's filter
gradient beside its input gradient, the branches of squeezenet's fire modules, short kernels
beside long ones (``MAX_STREAMS`` says what that gained). The memory plan reuses the
arena for sequential execution; its reuse shows up here as write-after-read edges, which keep
that reuse safe.
"""

from __future__ import annotations

import bisect
import random
from typing import Protocol, Sequence


class Access(Protocol):
    """What ``dependencies`` reads of a launch."""

    @property
    def reads(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def writes(self) -> tuple[tuple[int, int], ...]: ...


def dependencies(launches: Sequence[Access]) -> list[tuple[int, ...]]:
    """Per launch, the earlier launches (indices, ascending) it must follow (module
    docstring). The arena is cut into the pieces between every range's ends, so each piece
    is wholly inside or outside each range."""
    cuts = sorted({e for x in launches for lo, hi in x.reads + x.writes for e in (lo, hi)})

    def pieces(spans: tuple[tuple[int, int], ...]) -> set[int]:
        out: set[int] = set()
        for lo, hi in spans:
            if hi > lo:
                out.update(range(bisect.bisect_left(cuts, lo), bisect.bisect_left(cuts, hi)))
        return out

    writer: dict[int, int] = {}  # piece -> the last launch that wrote it
    readers: dict[int, list[int]] = {}  # piece -> the launches that read it since
    out: list[tuple[int, ...]] = []
    for j, x in enumerate(launches):
        r, w = pieces(x.reads), pieces(x.writes)
        deps: set[int] = set()
        for q in r | w:
            if q in writer:
                deps.add(writer[q])
        for q in w:
            deps.update(readers.get(q, ()))
        deps.discard(j)
        out.append(tuple(sorted(deps)))
        for q in r - w:
            readers.setdefault(q, []).append(j)
        for q in w:
            writer[q] = j
            readers[q] = []
    return out


# Streams a step's graph is spread over (1: the plain chain of launches). Measured on the H200
# (benchmarks/gpu_launches.py --streams 1,4,8, batch 8, graph replay ms): resnet18 1.641 /
# 1.635 / 1.636, mobilenet_v2 1.437 / 1.484 / 1.577, the UNet 0.905 / 0.926 / 0.928,
# squeezenet1_0 0.983 / 0.802 / 0.824: branches gain (squeezenet's fire modules), chains of
# small kernels lose a little to the cross-stream edges; 4 is the best of the three overall.
MAX_STREAMS = 4


def assign_streams(deps: Sequence[Sequence[int]], streams: int = MAX_STREAMS
                   ) -> list[tuple[int, tuple[int, ...]]]:
    """Per launch, (its stream, the launches on other streams it waits for): a launch goes on
    the stream whose last launch is its latest dependency, else on a new stream, else (all in
    use) on the stream idle longest -- which orders it after that stream's last launch too,
    an edge more than needed, never one less. A dependency already implied is not waited for:
    one the stream's earlier launches follow (the stream's order), or one that another
    dependency follows (waiting for the later one waits for both)."""
    last: list[int] = []  # stream -> its last launch
    before: list[int] = []  # launch -> bit set of every launch it follows, through any chain
    out: list[tuple[int, tuple[int, ...]]] = []
    for j, ds in enumerate(deps):
        on = [s for s in range(len(last)) if last[s] in ds]
        if on:
            s = max(on, key=lambda s: last[s])
        elif len(last) < max(1, streams):
            s = len(last)
            last.append(-1)
        else:
            s = min(range(len(last)), key=lambda s: last[s])
        prev = last[s]
        implied = before[prev] | 1 << prev if prev >= 0 else 0
        reach = 0
        for d in ds:
            reach |= before[d]
        waits = tuple(d for d in ds if not (implied | reach) >> d & 1)
        mine = implied
        for d in waits:
            mine |= before[d] | 1 << d
        before.append(mine)
        out.append((s, waits))
        last[s] = j
    return out


def random_order(deps: Sequence[Sequence[int]], rng: random.Random) -> list[int]:
    """A random order of the launches that respects ``deps`` (for tests: any such order must
    compute the same bits)."""
    waiting = [len(set(ds)) for ds in deps]
    users: list[list[int]] = [[] for _ in deps]
    for j, ds in enumerate(deps):
        for d in set(ds):
            users[d].append(j)
    ready = [j for j, n in enumerate(waiting) if n == 0]
    order: list[int] = []
    while ready:
        j = ready.pop(rng.randrange(len(ready)))
        order.append(j)
        for u in users[j]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return order
