"""A harness that misbehaves on purpose, for the fuzzer's own tests (never run by a campaign).

Payloads: ``{"action": "ok" | "refuse" | "raise" | "sleep" | "alloc" | "abort" | "warn"}``.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any, Callable


def generate(rng: random.Random) -> dict[str, Any]:
    """One of the ``ok`` / ``refuse`` actions."""
    return {"action": rng.choice(["ok", "refuse"])}


def _sleep_forever() -> None:
    while True:
        time.sleep(0.05)


def _allocate_bomb() -> None:
    import numpy as np

    np.ones(50 << 30, dtype=np.uint8)  # 50 GiB


def _raise_value_error() -> None:
    raise ValueError("synthetic crash")


def execute(payload: dict[str, Any]) -> str:
    """Do what the payload says."""
    action = payload.get("action")
    if action == "refuse":
        from gradc.errors import VerifyError

        raise VerifyError("synthetic refusal")
    table: dict[str, Callable[[], None]] = {
        "sleep": _sleep_forever, "alloc": _allocate_bomb, "raise": _raise_value_error,
        "abort": lambda: os.kill(os.getpid(), signal.SIGSEGV),
    }
    if action in table:
        table[action]()
    return "ok"


def reduce(payload: dict[str, Any], test: Callable[[Any], bool]) -> dict[str, Any]:
    """Nothing to reduce."""
    return payload


def files(payload: dict[str, Any]) -> tuple[str, bytes | None, dict[str, Any]]:
    """The whole payload in the JSON file."""
    return ".json", None, payload


def load(data: bytes | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The payload as stored."""
    return meta
