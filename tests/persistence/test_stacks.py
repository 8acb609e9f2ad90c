"""Every thread's stack on SIGUSR1 (`persistence.stacks`, what `statecharts worker` installs):
a process whose threads start and end all the time takes hundreds of the signals and goes
on, each answered with the stacks. Python's `faulthandler.register(SIGUSR1,
all_threads=True)`, which the worker used before, died of SIGSEGV within 33 signals in the
same process (CPython issue 116008). The worker's own answer to SIGUSR1 is tested with a real
worker in test_fault_injection."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import threading
import time

import pytest

from persistence.stacks import write_stacks

SIGNALS = 300

CHURNING = """
import signal, sys, threading, time
from persistence.stacks import show_stacks_on

show_stacks_on(signal.SIGUSR1)

def churn():
    while True:
        threads = [threading.Thread(target=sum, args=(range(100),)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

for n in range(2):
    threading.Thread(target=churn, name=f"churn-{n}", daemon=True).start()
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 on this platform")
def test_a_process_whose_threads_come_and_go_survives_every_sigusr1() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", CHURNING],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        for _ in range(SIGNALS):
            process.send_signal(signal.SIGUSR1)
            time.sleep(0.01)
            assert process.poll() is None, f"died of {process.returncode} after a SIGUSR1"
    finally:
        process.kill()
        _, stderr = process.communicate(timeout=30)
    # (signals that arrive while one waits for the main thread are merged into it)
    assert stderr.count('"MainThread" (most recent call first)') >= 1
    assert '"churn-0" (most recent call first)' in stderr
    assert "in churn" in stderr


def test_the_stacks_name_each_thread_and_read_most_recent_call_first() -> None:
    ready, done = threading.Event(), threading.Event()

    def parked_in_a_wait() -> None:
        ready.set()
        done.wait(30)

    thread = threading.Thread(target=parked_in_a_wait, name="parked")
    thread.start()
    ready.wait(30)
    out = io.StringIO()
    try:
        write_stacks(out)
    finally:
        done.set()
        thread.join()
    text = out.getvalue()
    block = text[text.index('"parked" (most recent call first):') :].split("\n\n")[0]
    functions = [line.rsplit(" in ", 1)[1] for line in block.splitlines()[1:]]
    assert functions[0] == "wait" and "parked_in_a_wait" in functions
    assert functions.index("parked_in_a_wait") < functions.index("run")
    assert "write_stacks" not in text  # (the calling thread's own frames are left out)
