"""Randomness read in bulk (`persistence.stores.randomness`) for run ids and payload nonces:
ids as random and as well formed as `uuid.uuid4()`'s, never the same twice, not even across a
fork, nonces never repeated; both read from the operating system a few hundred at a time,
where `uuid4()` and `os.urandom` make one system call each."""

from __future__ import annotations

import os
import threading
import uuid
import warnings
from pathlib import Path

import pytest

from persistence import KeyRing, open_store
from persistence.runtime import Runtime
from persistence.stores import randomness
from persistence.stores.randomness import BYTES_PER_READ
from persistence.stores.run_ids import new_run_id
from statecharts import create_machine

KEY = ("k1", bytes(range(32)))


def _counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the reads of the operating system's randomness from now on."""
    reads: list[int] = []
    urandom = os.urandom

    def counted(n: int) -> bytes:
        reads.append(n)
        return urandom(n)

    monkeypatch.setattr(randomness.os, "urandom", counted)
    return reads


def test_ids_are_version_4_uuids_never_drawn_twice() -> None:
    ids = [new_run_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    for text in ids[::997]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_threads_drawing_at_once_get_distinct_ids() -> None:
    drawn: list[list[str]] = [[] for _ in range(8)]

    def draw(into: list[str]) -> None:
        into.extend(new_run_id() for _ in range(2_000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for ids in drawn for i in ids]
    assert len(set(every)) == len(every) == 16_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_never_hands_out_its_parents_next_id() -> None:
    """The parent has read bytes ahead; the child must not hand out the same ids from them."""
    new_run_id()
    read, write = os.pipe()
    with warnings.catch_warnings():  # (3.12+: a fork beside pytest's threads is warned of)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.write(write, new_run_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert uuid.UUID(child).version == 4
    assert child != new_run_id()


def test_a_batch_start_reads_randomness_a_few_times_not_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`start_many` of 1,000 runs on SQLite: the runs' ids take a handful of reads of the
    operating system's randomness (each read lets go of the GIL, and getting it back can
    wait for the interpreter's switch interval while other threads work)."""
    machine = create_machine({"id": "idle", "initial": "waiting", "states": {"waiting": {}}})
    store = open_store(f"sqlite:///{tmp_path}/runs.db", migrate=True)
    try:
        runtime = Runtime(store, machines=[machine])
        runtime.start("idle")  # (warm: what a first start sets up is not counted)
        reads = _counted_reads(monkeypatch)
        ids = runtime.start_many("idle", [None] * 1_000)
        assert len(set(ids)) == 1_000
        assert {runtime.get(i).state for i in ids[::100]} == {"waiting"}
        assert len(reads) <= 1_000 * 16 // BYTES_PER_READ + 2, len(reads)
    finally:
        store.close()


def test_sealed_payloads_take_distinct_nonces_read_a_few_times_not_once_per_seal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AES-GCM must never see one nonce twice under a key: 1,000 seals, 1,000 nonces, and a
    handful of reads for them (each read lets go of the GIL, as above)."""
    ring = KeyRing([KEY])
    reads = _counted_reads(monkeypatch)
    runs = [new_run_id() for _ in range(1_000)]
    sealed = [ring.seal({"i": i}, run, "snapshot") for i, run in enumerate(runs)]
    assert len({envelope["n"] for envelope in sealed}) == 1_000
    assert len(reads) <= 1_000 * (12 + 16) // BYTES_PER_READ + 2, len(reads)
    assert [ring.open(e, run, "snapshot") for e, run in zip(sealed, runs, strict=True)] == [
        {"i": i} for i in range(1_000)
    ]
