"""The workflows of the thundering-herd load test (`benchmarks/load.py`), loaded by its worker
processes (`--machines benchmarks.load_workflow --limits benchmarks.load_workflow`).

Every run sleeps on a durable timer due at one instant for all of them, then calls the fake
downstream once. The downstream appends one line per call to its own file per process
(`LOAD_LOG_DIR`): the run id, the instant the call started and ended (ns, wall clock, the same
clock in every process on the machine). The load test reads those files to tell how late each
run fired, whether any fired early or twice, and how many calls were in flight at once.
"""

from __future__ import annotations

import os
import time
from typing import Any

from persistence.capacity import Limit
from persistence.outbox import current_run_id
from statecharts import create_machine

LOG_ENV = "LOAD_LOG_DIR"
CALL_MS_ENV = "LOAD_CALL_MS"
IN_FLIGHT = 4
LIMITS = {"downstream": Limit(max_in_flight=IN_FLIGHT)}

_log_fd: int | None = None


def _log() -> int:
    global _log_fd
    if _log_fd is None:
        path = os.path.join(os.environ[LOG_ENV], f"calls-{os.getpid()}.log")
        _log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return _log_fd


def downstream(request: Any) -> str:
    """The fake downstream: takes `LOAD_CALL_MS` and logs the call with its run (one write,
    appended)."""
    started = time.time_ns()
    time.sleep(int(os.environ.get(CALL_MS_ENV, "1")) / 1000)
    ended = time.time_ns()
    os.write(_log(), f"{current_run_id()} {started} {ended}\n".encode())
    return "ok"


def _herd(machine_id: str, limit: str | None) -> Any:
    invoke: dict[str, Any] = {"id": "call", "src": "downstream", "onDone": "done"}
    if limit is not None:
        invoke["limit"] = limit
    return create_machine(
        {
            "id": machine_id,
            "initial": "sleeping",
            "context": lambda input: {"due_at": input["due_at"], "created": input["created"]},
            "states": {
                "sleeping": {"after": {"until_due": "calling"}},
                "calling": {"invoke": invoke},
                "done": {"type": "final"},
            },
        },
        actors={"downstream": downstream},
        # the timer is due at `due_at` exactly: the delay counts from the creation instant
        delays={"until_due": lambda context, event: context["due_at"] - context["created"]},
    )


herd = _herd("herd", None)
limited_herd = _herd("limited_herd", "downstream")
MACHINES = [herd, limited_herd]
