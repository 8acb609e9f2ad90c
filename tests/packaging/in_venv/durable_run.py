"""Run inside a fresh venv: a durable run of a small invoice machine on the store at argv[1].

``durable_run.py URL`` starts a run, lets an invoked call finish, sends APPROVE and drives the
run to its end with a worker, printing the run id. ``durable_run.py URL --read RUN_ID`` (a new
process) reads the run back from the store and prints its status and output as JSON.
"""

import json
import sys

from persistence import Runtime, Worker, open_store
from statecharts import MachineConfig, assign, create_machine

CONFIG: MachineConfig = {
    "id": "invoice",
    "initial": "charging",
    "context": {"charged": 0},
    "states": {
        "charging": {
            "invoke": {
                "src": "charge",
                "input": {"amount": 42},
                "onDone": {
                    "target": "approval",
                    "actions": assign({"charged": lambda ctx, ev: ev["output"]["charged"]}),
                },
            }
        },
        "approval": {"on": {"APPROVE": "paid"}},
        "paid": {"type": "final"},
    },
    "output": lambda ctx, ev: {"charged": ctx["charged"]},
}
MACHINE = create_machine(CONFIG, actors={"charge": lambda data: {"charged": data["amount"]}})


def main(url: str, read: str | None) -> None:
    store = open_store(url, migrate=True)
    runtime = Runtime(store, machines=[MACHINE])
    if read is not None:
        run = runtime.get(read)
        print(json.dumps({"status": run.status, "output": run.snapshot.get("output")}))
    else:
        run_id = runtime.start("invoice", key="invoice-1")
        Worker(runtime).run_until_idle()
        runtime.send(run_id, "APPROVE")
        Worker(runtime).run_until_idle()
        print(run_id)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3] if sys.argv[2:3] == ["--read"] else None)
