"""Machines for the diagram tests: together they use every construct a diagram can show.

``EXAMPLES`` maps a golden-file name to a function building a fresh machine (fresh each time, so
determinism tests compare two independent builds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecharts import Machine, and_, assign, create_machine, not_, or_, state_in


def _noop(*_: Any, **__: Any) -> None:
    return None


def _true(*_: Any, **__: Any) -> bool:
    return True


def _false(*_: Any, **__: Any) -> bool:
    return False


def _actor(*_: Any, **__: Any) -> None:
    return None


def invoice() -> Machine:
    """An order-to-invoice workflow: guards, delays, invoked work with retries, error paths."""
    return create_machine(
        {
            "id": "invoice_workflow",
            "initial": "waiting_for_payment",
            "context": {"attempts": 0},
            "on": {"CANCEL": {"target": ".cancelled", "actions": "notify_customer"}},
            "states": {
                "waiting_for_payment": {
                    "on": {
                        "PAYMENT_RECEIVED": [
                            {
                                "target": "creating_invoice",
                                "guard": "is_payment_valid",
                                "actions": "record_payment",
                            },
                            {"target": "payment_rejected"},
                        ],
                    },
                    "after": {"300000": "payment_timed_out"},
                },
                "creating_invoice": {
                    "entry": "log_start",
                    "invoke": {
                        "id": "create",
                        "src": "create_invoice",
                        "retry": {
                            "max_attempts": 4,
                            "initial_interval": 1000,
                            "backoff": "exponential",
                            "coefficient": 2.0,
                        },
                        "onFinalFailure": "fail_run",
                        "onDone": {"target": "sending_invoice"},
                        "onError": {"target": "invoice_failed"},
                    },
                },
                "sending_invoice": {
                    "invoke": {
                        "src": "send_email",
                        "description": "email the invoice",
                        "retry": {
                            "max_attempts": 10,
                            "initial_interval": 2000,
                            "backoff": "linear",
                            "max_interval": 10000,
                        },
                        "onFinalFailure": "fail_run",
                        "onDone": "done",
                    },
                },
                "payment_rejected": {
                    "always": [
                        {"target": "waiting_for_payment", "guard": "can_retry_payment"},
                        {"target": "cancelled"},
                    ]
                },
                "payment_timed_out": {"type": "final"},
                "invoice_failed": {"type": "final"},
                "cancelled": {"type": "final", "description": "Cancelled by the customer"},
                "done": {"type": "final"},
            },
        },
        guards={"is_payment_valid": _true, "can_retry_payment": _true},
        actions={"notify_customer": _noop, "record_payment": _noop, "log_start": _noop},
        actors={"create_invoice": _actor, "send_email": _actor},
    )


def constructs() -> Machine:
    """Nesting, parallel regions, shallow and deep history, onDone, wildcards, named delays,
    guard combinators, stateIn, targetless and reentering transitions, exit actions."""
    return create_machine(
        {
            "id": "order_fulfilment",
            "initial": "editing",
            "states": {
                "editing": {
                    "initial": "draft",
                    "description": "Customer edits the order",
                    "states": {
                        "draft": {
                            "on": {
                                "SUBMIT": {
                                    "target": "review",
                                    "guard": and_("has_items", not_("is_order_locked")),
                                }
                            }
                        },
                        "review": {
                            "on": {
                                "BACK": "draft",
                                "APPROVE": {
                                    "target": "#order_fulfilment.fulfilling",
                                    "description": "Manager approves",
                                },
                            }
                        },
                        "resume": {"type": "history", "target": "draft"},
                    },
                    "on": {"UPDATE_ADDRESS": {"actions": ["save_address"]}},
                },
                "fulfilling": {
                    "type": "parallel",
                    "exit": "close_ticket",
                    "states": {
                        "packing": {
                            "initial": "picking",
                            "states": {
                                "picking": {"on": {"PICKED": "packed"}},
                                "packed": {"type": "final"},
                            },
                        },
                        "billing": {
                            "initial": "charging",
                            "states": {
                                "charging": {
                                    "invoke": {
                                        "src": "charge_card",
                                        "retry": {
                                            "max_attempts": 3,
                                            "initial_interval": 30000,
                                            "backoff": "fixed",
                                            "jitter": "full",
                                            "total_timeout": 600000,
                                        },
                                        "onFinalFailure": "skip",
                                        "onDone": "charged",
                                    },
                                    "on": {"CARD_DECLINED": "charge_failed"},
                                },
                                "charged": {"type": "final"},
                                "charge_failed": {"type": "final", "tags": ["error"]},
                            },
                        },
                        "history_all": {"type": "history", "history": "deep"},
                    },
                    "onDone": "shipped",
                },
                "shipped": {
                    "after": {"DELIVERY_WINDOW": "delivered"},
                    "on": {
                        "order.*": {"actions": "log_order_event"},
                        "CONFIRM": {
                            "target": "delivered",
                            "guard": or_("isSignedFor", state_in("#order_fulfilment.shipped")),
                        },
                        "RESEND": {
                            "target": "shipped",
                            "reenter": True,
                            "guard": {"type": "is_within_limit", "params": {"limit": 3}},
                        },
                        "IGNORED": {},
                    },
                },
                "delivered": {"type": "final"},
            },
            "on": {"*": {"actions": assign({"seen": True})}, "REOPEN": ".editing.resume"},
        },
        guards={
            "has_items": _true,
            "is_order_locked": _false,
            "isSignedFor": _true,
            "is_within_limit": _true,
        },
        actions={"save_address": _noop, "close_ticket": _noop, "log_order_event": _noop},
        actors={"charge_card": _actor},
        delays={"DELIVERY_WINDOW": 172800000},
    )


def parallel_root() -> Machine:
    """A machine whose root is parallel (no start dot at the top)."""
    return create_machine(
        {
            "id": "light_and_fan",
            "type": "parallel",
            "on": {"RESET": {"target": [".light.off", ".fan.stopped"]}},
            "states": {
                "light": {
                    "initial": "off",
                    "states": {"off": {"on": {"TOGGLE": "on"}}, "on": {"on": {"TOGGLE": "off"}}},
                },
                "fan": {
                    "initial": "stopped",
                    "states": {
                        "stopped": {"on": {"FAN_ON": "spinning"}},
                        "spinning": {"after": {"1500": "stopped"}, "on": {"FAN_OFF": "stopped"}},
                    },
                },
            },
        },
    )


def restarts() -> Machine:
    """A compound state's own arrows that lead back inside it (restart, jump to an inner
    step), and arrows from an inner step to the whole state."""
    return create_machine(
        {
            "id": "form_wizard",
            "initial": "wizard",
            "states": {
                "wizard": {
                    "initial": "name",
                    "states": {
                        "name": {"on": {"NEXT": "address"}},
                        "address": {"on": {"NEXT": "confirm", "START_OVER": "#form_wizard.wizard"}},
                        "confirm": {"type": "final"},
                    },
                    "on": {
                        "RESET": {"target": "wizard", "reenter": True},
                        "EDIT_ADDRESS": ".address",
                    },
                    "onDone": "submitted",
                },
                "submitted": {"type": "final"},
            },
        },
    )


EXAMPLES: dict[str, Callable[[], Machine]] = {
    "restarts": restarts,
    "invoice": invoice,
    "constructs": constructs,
    "parallel_root": parallel_root,
}
