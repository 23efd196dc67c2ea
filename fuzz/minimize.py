"""Test-case reduction: delta debugging over lists, and the driver that keeps a class key.

``ddmin(items, test)`` is Zeller's delta debugging (complement-first): it returns a smaller list
for which ``test`` still holds, 1-minimal when the budget allows. ``Budget`` caps the number of
tests and the wall time a reduction may spend (a hang costs a whole timeout per test).
``minimize(harness, payload, still_fails)`` runs the harness's own ``reduce`` strategy.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


class BudgetExhausted(Exception):
    """The reduction ran out of tests or time."""


class Budget:
    """At most ``tests`` calls of a predicate and ``seconds`` of wall time."""

    def __init__(self, tests: int = 300, seconds: float = 120.0) -> None:
        self.tests = tests
        self.deadline = time.monotonic() + seconds
        self.used = 0

    def wrap(self, test: Callable[[T], bool]) -> Callable[[T], bool]:
        """The predicate, counting calls; raises ``BudgetExhausted`` past the budget."""
        def counted(x: T) -> bool:
            if self.used >= self.tests or time.monotonic() > self.deadline:
                raise BudgetExhausted()
            self.used += 1
            return test(x)
        return counted


def ddmin(items: Sequence[T], test: Callable[[list[T]], bool]) -> list[T]:
    """A small sublist of ``items`` (order kept) for which ``test`` holds.

    ``test(items)`` is assumed to hold. Stops early, keeping the best list so far, when ``test``
    raises ``BudgetExhausted``.
    """
    cur = list(items)
    n = 2
    try:
        while len(cur) >= 2:
            chunk = max(1, len(cur) // n)
            parts = [cur[i:i + chunk] for i in range(0, len(cur), chunk)]
            reduced = False
            for i in range(len(parts)):  # complements first: they drop the most
                rest = [x for j, p in enumerate(parts) if j != i for x in p]
                if rest and test(rest):
                    cur, n, reduced = rest, max(n - 1, 2), True
                    break
            if not reduced:
                for p in parts:
                    if len(p) < len(cur) and test(p):
                        cur, n, reduced = p, 2, True
                        break
            if not reduced:
                if n >= len(cur):
                    break
                n = min(len(cur), n * 2)
    except BudgetExhausted:
        pass
    return cur


def first_success(candidates: Sequence[Any], test: Callable[[Any], bool]) -> Any | None:
    """The first candidate for which ``test`` holds (None if none, or out of budget)."""
    try:
        for c in candidates:
            if test(c):
                return c
    except BudgetExhausted:
        return None
    return None


def minimize(module: Any, payload: Any, still_fails: Callable[[Any], bool],
             budget: Budget | None = None) -> Any:
    """The smallest payload the harness's ``reduce`` finds that still fails the same way."""
    b = budget or Budget()
    counted = b.wrap(still_fails)
    best = [payload]

    def test(p: Any) -> bool:
        ok = counted(p)
        if ok:
            best[0] = p  # a strategy only goes on from a payload that still fails
        return ok

    try:
        return module.reduce(payload, test)
    except BudgetExhausted:
        return best[0]
