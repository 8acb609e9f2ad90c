"""Every thread's stack on a signal: what `kill -USR1` shows of a worker that seems stuck.

Python's `faulthandler.register(signal, all_threads=True)` walks the other threads' frames
inside the C signal handler, without the GIL, so a thread that starts or ends meanwhile can
crash the process (CPython issue 116008). A worker starts and ends threads as it works: one
killed by SIGSEGV just after a SIGUSR1 in a run of the suite, and a process whose threads
came and went died within 33 signals sent 10 ms apart. Here the signal runs a Python-level
handler, which Python calls in the main thread between bytecodes (a lock or I/O wait is
interrupted for it): the stacks are read from `sys._current_frames()` holding the GIL, so no
frame is freed under it, and written as faulthandler writes them, each thread's name added.
"""

from __future__ import annotations

import signal
import sys
import threading
import traceback
from types import FrameType
from typing import TextIO


def show_stacks_on(signum: int) -> None:
    """On `signum`, write every thread's stack to stderr and go on. Call from the main thread
    (Python installs signal handlers there only)."""

    def show(_signum: int, frame: FrameType | None) -> None:
        write_stacks(sys.stderr, frame)

    signal.signal(signum, show)


def write_stacks(out: TextIO, interrupted: FrameType | None = None) -> None:
    """Every thread's stack, most recent call first, the calling thread's from `interrupted`
    (the frame a signal interrupted) if given."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    current = threading.get_ident()
    lines: list[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == current:
            if interrupted is None:
                continue  # (this function's own frames say nothing)
            frame = interrupted
        name = names.get(ident, "?")
        mark = "Current thread" if ident == current else "Thread"
        lines.append(f'{mark} 0x{ident:016x} "{name}" (most recent call first):\n')
        for entry in reversed(traceback.extract_stack(frame)):
            lines.append(f'  File "{entry.filename}", line {entry.lineno} in {entry.name}\n')
        lines.append("\n")
    out.write("".join(lines))
    out.flush()
