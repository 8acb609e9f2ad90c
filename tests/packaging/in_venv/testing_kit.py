"""Run inside a fresh venv with the ``testing`` extra: the test kit's Hypothesis properties
check a machine (pytest is not installed there: the kit needs only Hypothesis), and a broken
machine is caught. Prints one JSON line."""

import importlib.util
import json

from statecharts import assign, create_machine
from statecharts.testing.properties import PropertyViolation, assert_properties

CONFIG = {
    "id": "counter",
    "initial": "low",
    "context": {"n": 0},
    "states": {
        "low": {"on": {"INC": {"target": "high", "actions": assign({"n": lambda c, e: 1})}}},
        "high": {
            "on": {
                "RESET": {"target": "low", "actions": assign({"n": lambda c, e: 0})},
                "STOP": "done",
            }
        },
        "done": {"type": "final"},
    },
}
assert_properties(create_machine(CONFIG))
stuck = {**CONFIG, "states": {**CONFIG["states"], "high": {"on": {"STOP": "high"}}}}
try:
    assert_properties(create_machine(stuck), "final_always_reachable")
    caught = False
except PropertyViolation:
    caught = True
print(
    json.dumps(
        {"caught": caught, "pytest_installed": importlib.util.find_spec("pytest") is not None}
    )
)
