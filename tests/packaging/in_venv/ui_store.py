"""Run inside a fresh venv with the ``ui`` extra: ``ui_store.py URL`` starts one run of the
machine below that waits for APPROVE, and prints its id. The same module is given to
``statecharts ui --machines`` so the UI can draw and act on it."""

import sys

from persistence import Runtime, open_store
from statecharts import create_machine

machine = create_machine(
    {
        "id": "approval",
        "initial": "waiting",
        "states": {"waiting": {"on": {"APPROVE": "approved"}}, "approved": {"type": "final"}},
    }
)

if __name__ == "__main__":
    store = open_store(sys.argv[1], migrate=True)
    print(Runtime(store, machines=[machine]).start("approval"))
    store.close()
