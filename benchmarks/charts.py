"""The benchmark machines, as XState v5 configs (the same dicts drive this engine and XState).

flat     2-state toggle: ``off <-> on`` on ``toggle``.
hier     ``work`` (compound) > ``p`` (parallel) > ``r1`` {a <-> b on t1}, ``r2`` {c <-> d on t2};
         events alternate t1 / t2, each changing one region's leaf.
reenter  the hier chart; events alternate ``leave`` (work -> idle: exits 6 states) and
         ``enter`` (idle -> work: enters 6 states).
counter  guarded counter: ``INC`` is a targetless transition guarded on the context
         (``count < 10**12``) whose ``assign`` increments ``count``; nothing is exited or entered,
         so no transition-plan cache can skip the guard and the assign.
entry/exit toggle
         the flat toggle with one entry and one exit action (user functions that do nothing)
         on each state: every event runs two actions.
shop     a small shop: guarded ``ADD`` / ``REMOVE`` assigning item count and total from the
         event's price, a guarded ``CHECKOUT``, ``PAY`` and ``CONTINUE`` with assigns, entry and
         exit actions; a 6-event cycle.
invoice  the invoice workflow (``machines/invoice``) with its calls' results sent as events:
         an order assigned from event data, validation by an eventless guard, entry and exit
         actions around each call, a failed call retried once (a guarded re-entering
         transition counting the attempt), the results assigned; a 6-event cycle.

The implementations (guards, assigns, actions) are in ``IMPLEMENTATIONS`` here and written the
same way for XState in ``xstate_bench.mjs``; ``expected`` simulates each chart in plain Python
so every subject is checked against the same final state and context.

Each case also says which events it sends and how to check the final state after ``n`` events,
so every subject (this engine, the Python peers, XState) checks the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FLAT: dict[str, Any] = {
    "id": "toggle",
    "initial": "off",
    "states": {"off": {"on": {"toggle": "on"}}, "on": {"on": {"toggle": "off"}}},
}

HIER: dict[str, Any] = {
    "id": "hier",
    "initial": "work",
    "states": {
        "work": {
            "initial": "p",
            "on": {"leave": "idle"},
            "states": {
                "p": {
                    "type": "parallel",
                    "states": {
                        "r1": {
                            "initial": "a",
                            "states": {"a": {"on": {"t1": "b"}}, "b": {"on": {"t1": "a"}}},
                        },
                        "r2": {
                            "initial": "c",
                            "states": {"c": {"on": {"t2": "d"}}, "d": {"on": {"t2": "c"}}},
                        },
                    },
                }
            },
        },
        "idle": {"on": {"enter": "work"}},
    },
}

#: The guard's bound: far above any event count, so every INC takes the guarded branch.
COUNTER_LIMIT = 10**12

COUNTER: dict[str, Any] = {
    "id": "counter",
    "initial": "counting",
    "context": {"count": 0},
    "states": {
        "counting": {
            "on": {"INC": [{"guard": "notTooMany", "actions": "inc"}, {"target": "done"}]}
        },
        "done": {},
    },
}

TOGGLE_ACTIONS: dict[str, Any] = {
    "id": "lamp",
    "initial": "off",
    "states": {
        "off": {"entry": "enterState", "exit": "exitState", "on": {"toggle": "on"}},
        "on": {"entry": "enterState", "exit": "exitState", "on": {"toggle": "off"}},
    },
}

#: Items the shop's ``inStock`` guard allows in the cart.
SHOP_LIMIT = 100

SHOP: dict[str, Any] = {
    "id": "shop",
    "initial": "browsing",
    "context": {"items": 0, "total": 0, "orders": 0},
    "states": {
        "browsing": {
            "entry": "showCatalog",
            "on": {
                "ADD": {"guard": "inStock", "actions": "addItem"},
                "REMOVE": {"guard": "hasItems", "actions": "removeItem"},
                "CHECKOUT": {"guard": "hasItems", "target": "checkout"},
            },
        },
        "checkout": {
            "entry": "showCart",
            "exit": "hideCart",
            "on": {"PAY": {"target": "paid", "actions": "placeOrder"}, "BACK": "browsing"},
        },
        "paid": {
            "entry": "sendReceipt",
            "on": {"CONTINUE": {"target": "browsing", "actions": "clearCart"}},
        },
    },
}

#: Attempts the invoice's ``canRetry`` guard allows.
INVOICE_ATTEMPTS = 5

INVOICE: dict[str, Any] = {
    "id": "invoice",
    "initial": "pending",
    "context": {
        "orders": 0,
        "amount": 0,
        "customer": None,
        "invoice": None,
        "attempts": 0,
        "sent": 0,
    },
    "states": {
        "pending": {"on": {"ORDER": {"target": "validating", "actions": "takeOrder"}}},
        "validating": {
            "always": [
                {"guard": "orderIsValid", "target": "fetching_customer"},
                {"target": "failed"},
            ]
        },
        "fetching_customer": {
            "entry": "startCall",
            "exit": "endCall",
            "on": {"CUSTOMER": {"target": "creating_invoice", "actions": "rememberCustomer"}},
        },
        "creating_invoice": {
            "entry": "startCall",
            "exit": "endCall",
            "on": {
                "INVOICE_FAILED": [
                    {
                        "guard": "canRetry",
                        "target": "creating_invoice",
                        "reenter": True,
                        "actions": "countAttempt",
                    },
                    {"target": "failed"},
                ],
                "INVOICE_CREATED": {"target": "sending_email", "actions": "rememberInvoice"},
            },
        },
        "sending_email": {
            "entry": "startCall",
            "exit": "endCall",
            "on": {"EMAIL_SENT": {"target": "completed", "actions": "countSent"}},
        },
        "completed": {"on": {"NEXT": {"target": "pending", "actions": "reset"}}},
        "failed": {"on": {"NEXT": {"target": "pending", "actions": "reset"}}},
    },
}

Event = str | dict[str, Any]

#: Events each case sends, cycled: event i is EVENTS[case][i % len].
EVENTS: dict[str, tuple[Event, ...]] = {
    "flat": ("toggle",),
    "hier": ("t1", "t2"),
    "reenter": ("leave", "enter"),
    "counter": ("INC",),
    "entry/exit toggle": ("toggle",),
    "shop": (
        {"type": "ADD", "price": 5},
        {"type": "ADD", "price": 7},
        {"type": "REMOVE", "price": 5},
        "CHECKOUT",
        "PAY",
        "CONTINUE",
    ),
    "invoice": (
        {"type": "ORDER", "amount": 1200},
        {"type": "CUSTOMER", "customer": "c-1"},
        "INVOICE_FAILED",
        {"type": "INVOICE_CREATED", "invoice": "inv-1"},
        "EMAIL_SENT",
        "NEXT",
    ),
}

CONFIGS: dict[str, dict[str, Any]] = {
    "flat": FLAT,
    "hier": HIER,
    "reenter": HIER,
    "counter": COUNTER,
    "entry/exit toggle": TOGGLE_ACTIONS,
    "shop": SHOP,
    "invoice": INVOICE,
}


def _nothing(context: Any, event: Any) -> None:
    return None


def implementations() -> dict[str, dict[str, Any]]:
    """Guards and actions of every chart, for this engine (XState's are the same functions
    written in JavaScript in ``xstate_bench.mjs``)."""
    from statecharts import assign

    return {
        "guards": {
            "notTooMany": lambda context, event: context["count"] < COUNTER_LIMIT,
            "inStock": lambda context, event: context["items"] < SHOP_LIMIT,
            "hasItems": lambda context, event: context["items"] > 0,
            "orderIsValid": lambda context, event: context["amount"] > 0,
            "canRetry": lambda context, event: context["attempts"] < INVOICE_ATTEMPTS,
        },
        "actions": {
            "inc": assign({"count": lambda context, event: context["count"] + 1}),
            "enterState": _nothing,
            "exitState": _nothing,
            "showCatalog": _nothing,
            "showCart": _nothing,
            "hideCart": _nothing,
            "sendReceipt": _nothing,
            "startCall": _nothing,
            "endCall": _nothing,
            # one function per assigned key, as xstate_bench.mjs writes them
            "addItem": assign(
                {
                    "items": lambda context, event: context["items"] + 1,
                    "total": lambda context, event: context["total"] + event["price"],
                }
            ),
            "removeItem": assign(
                {
                    "items": lambda context, event: context["items"] - 1,
                    "total": lambda context, event: context["total"] - event["price"],
                }
            ),
            "placeOrder": assign({"orders": lambda context, event: context["orders"] + 1}),
            "clearCart": assign({"items": 0, "total": 0}),
            "takeOrder": assign(
                {
                    "orders": lambda context, event: context["orders"] + 1,
                    "amount": lambda context, event: event["amount"],
                }
            ),
            "rememberCustomer": assign({"customer": lambda context, event: event["customer"]}),
            "countAttempt": assign({"attempts": lambda context, event: context["attempts"] + 1}),
            "rememberInvoice": assign({"invoice": lambda context, event: event["invoice"]}),
            "countSent": assign({"sent": lambda context, event: context["sent"] + 1}),
            "reset": assign({"customer": None, "invoice": None, "attempts": 0}),
        },
    }


def event_list(case: str, n: int) -> list[Event]:
    """The ``n`` events a run of ``case`` sends, built before the timer starts."""
    events = EVENTS[case]
    return [events[i % len(events)] for i in range(n)]


def expected_value(case: str, n: int) -> Any:
    """The XState state value after ``n`` events of ``case`` from the initial state."""
    if case == "flat":
        return "off" if n % 2 == 0 else "on"
    if case == "hier":
        # t1 is sent ceil(n/2) times, t2 floor(n/2) times
        r1 = "a" if (n + 1) // 2 % 2 == 0 else "b"
        r2 = "c" if n // 2 % 2 == 0 else "d"
        return {"work": {"p": {"r1": r1, "r2": r2}}}
    if case == "reenter":
        return {"work": {"p": {"r1": "a", "r2": "c"}}} if n % 2 == 0 else "idle"
    if case == "counter":
        return "counting"
    if case == "entry/exit toggle":
        return expected_value("flat", n)
    if case in SIMULATED:
        return SIMULATED[case](n)[0]
    raise KeyError(case)


def expected_context(case: str, n: int) -> dict[str, Any] | None:
    """The context after ``n`` events of ``case`` (None: the chart has none to check)."""
    if case == "counter":
        return {"count": n}
    if case in SIMULATED:
        return SIMULATED[case](n)[1]
    return None


def _shop(n: int) -> tuple[str, dict[str, Any]]:
    """The shop chart in plain Python: its state and context after ``n`` events."""
    state, ctx = "browsing", {"items": 0, "total": 0, "orders": 0}
    for event in event_list("shop", n):
        kind = event if isinstance(event, str) else event["type"]
        if state == "browsing" and kind == "ADD" and ctx["items"] < SHOP_LIMIT:
            ctx = {**ctx, "items": ctx["items"] + 1, "total": ctx["total"] + event["price"]}
        elif state == "browsing" and kind == "REMOVE" and ctx["items"] > 0:
            ctx = {**ctx, "items": ctx["items"] - 1, "total": ctx["total"] - event["price"]}
        elif state == "browsing" and kind == "CHECKOUT" and ctx["items"] > 0:
            state = "checkout"
        elif state == "checkout" and kind == "PAY":
            state, ctx = "paid", {**ctx, "orders": ctx["orders"] + 1}
        elif state == "paid" and kind == "CONTINUE":
            state, ctx = "browsing", {**ctx, "items": 0, "total": 0}
    return state, ctx


def _invoice(n: int) -> tuple[str, dict[str, Any]]:
    """The invoice chart in plain Python: its state and context after ``n`` events."""
    state = "pending"
    ctx: dict[str, Any] = {
        "orders": 0,
        "amount": 0,
        "customer": None,
        "invoice": None,
        "attempts": 0,
        "sent": 0,
    }
    for event in event_list("invoice", n):
        kind = event if isinstance(event, str) else event["type"]
        if state == "pending" and kind == "ORDER":
            ctx = {**ctx, "orders": ctx["orders"] + 1, "amount": event["amount"]}
            state = "fetching_customer" if ctx["amount"] > 0 else "failed"
        elif state == "fetching_customer" and kind == "CUSTOMER":
            state, ctx = "creating_invoice", {**ctx, "customer": event["customer"]}
        elif state == "creating_invoice" and kind == "INVOICE_FAILED":
            if ctx["attempts"] < INVOICE_ATTEMPTS:
                ctx = {**ctx, "attempts": ctx["attempts"] + 1}
            else:
                state = "failed"
        elif state == "creating_invoice" and kind == "INVOICE_CREATED":
            state, ctx = "sending_email", {**ctx, "invoice": event["invoice"]}
        elif state == "sending_email" and kind == "EMAIL_SENT":
            state, ctx = "completed", {**ctx, "sent": ctx["sent"] + 1}
        elif state in ("completed", "failed") and kind == "NEXT":
            state, ctx = "pending", {**ctx, "customer": None, "invoice": None, "attempts": 0}
    return state, ctx


SIMULATED: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
    "shop": _shop,
    "invoice": _invoice,
}


def expected_leaves(case: str, n: int) -> frozenset[str]:
    """The names of the active atomic states after ``n`` events (for peers without values)."""
    return frozenset(_leaves(expected_value(case, n)))


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    for child in value.values():
        out.extend(_leaves(child))
    return out
