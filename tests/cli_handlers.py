"""Handlers for the CLI's worker command in tests (imported by module:function)."""

from __future__ import annotations

import os
import signal
from typing import Any

HANDLED: list[tuple[str, str]] = []


def record_then_stop(store: Any, timer: Any) -> None:
    """Records the timer, then asks the worker to stop (as SIGTERM would)."""
    HANDLED.append((timer.run, timer.effect))
    os.kill(os.getpid(), signal.SIGTERM)
