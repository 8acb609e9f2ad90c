"""Run inside a fresh venv with the crypto extra: a durable run whose input holds a secret, on
a SQLite file at argv[1], with payloads sealed by a key ring; prints JSON: the run's status and
output read back with the key, and whether the secret's text is anywhere in the database's
files, with the ring and (the control: the scan can find it) without one."""

import json
import os
import sys
from pathlib import Path

from persistence import KeyRing, Runtime, Worker, open_store
from statecharts import assign, create_machine

SECRET = "4111-1111-1111-1111"
MACHINE = create_machine(
    {
        "id": "card",
        "initial": "charging",
        "context": lambda input: {"card": input["card"]},
        "states": {
            "charging": {
                "invoke": {
                    "src": "charge",
                    "input": lambda c, e: c["card"],
                    "onDone": {
                        "target": "paid",
                        "actions": assign({"last4": lambda c, e: e["output"]}),
                    },
                }
            },
            "paid": {"type": "final"},
        },
        "output": lambda c, e: {"last4": c["last4"]},
    },
    actors={"charge": lambda card: card[-4:]},
)


def run(path: str, ring: KeyRing | None) -> tuple[dict[str, object], bool]:
    store = open_store(f"sqlite:///{path}", migrate=True)
    runtime = Runtime(store, machines=[MACHINE], codec=ring)
    run_id = runtime.start("card", input={"card": SECRET})
    Worker(runtime).run_until_idle()
    record = runtime.get(run_id)
    stored = b"".join(Path(f).read_bytes() for f in (path, f"{path}-wal") if os.path.exists(f))
    store.close()
    return {
        "status": record.status,
        "output": record.snapshot.get("output"),
    }, SECRET.encode() in stored


def main(path: str) -> None:
    sealed, found = run(path, KeyRing([("k1", os.urandom(32))]))
    _, found_in_clear = run(f"{path}.clear", None)
    print(json.dumps({**sealed, "secret_stored": found, "in_clear_found": found_in_clear}))


if __name__ == "__main__":
    main(sys.argv[1])
