"""Importing python-statemachine classes: structure, callback table, and running the import."""

from __future__ import annotations

from typing import Any

import pytest
from statemachine import HistoryState, State, StateChart

from statecharts import MachineDefinitionError
from statecharts.testing.interop import from_python_statemachine
from statecharts.testing.properties import assert_properties


class Order(StateChart):  # type: ignore[misc]
    class shopping(State.Compound):
        browsing = State(initial=True)
        cart = State()
        h = HistoryState(type="deep")
        add = browsing.to(cart, cond="in_stock", on="add_item")
        back = cart.to(browsing)

    class fulfilment(State.Parallel):
        class payment(State.Compound):
            pending = State(initial=True)
            paid = State(final=True)
            pay = pending.to(paid, unless="fraud")

        class shipping(State.Compound):
            packing = State(initial=True)
            shipped = State(final=True)
            ship = packing.to(shipped)

    done = State(final=True)
    checkout = shopping.to(fulfilment, cond=["has_items", "logged_in"])
    resume = fulfilment.to(shopping.h)
    done_state_fulfilment = fulfilment.to(done)

    def __init__(self, **kwargs: Any) -> None:
        self.added: list[int] = []
        super().__init__(**kwargs)

    def in_stock(self, quantity: int = 1) -> bool:
        return quantity > 0

    def add_item(self, quantity: int = 1) -> None:
        self.added.append(quantity)

    def fraud(self) -> bool:
        return False

    def has_items(self) -> bool:
        return True

    def logged_in(self) -> bool:
        return True

    def on_enter_done(self) -> None:
        self.added.append(-1)


def test_structure_is_imported() -> None:
    imported = from_python_statemachine(Order)
    config = imported.config
    assert config["id"] == "Order" and config["initial"] == "shopping"
    shopping = config["states"]["shopping"]
    assert shopping["initial"] == "browsing"
    assert shopping["states"]["h"] == {"type": "history", "history": "deep"}
    assert shopping["states"]["browsing"]["on"]["add"] == [
        {"target": "#Order.shopping.cart", "guard": "in_stock", "actions": ["add_item"]}
    ]
    fulfilment = config["states"]["fulfilment"]
    assert fulfilment["type"] == "parallel" and "initial" not in fulfilment
    assert fulfilment["onDone"] == [{"target": "#Order.done"}]
    assert fulfilment["on"]["resume"] == [{"target": "#Order.shopping.h"}]
    assert config["states"]["done"]["type"] == "final"


def test_callback_table_names_every_callback() -> None:
    imported = from_python_statemachine(Order)
    rows = {(c.name, c.role, c.kind) for c in imported.callbacks}
    assert rows == {
        ("in_stock", "cond", "guard"),
        ("add_item", "on", "action"),
        ("has_items", "cond", "guard"),
        ("logged_in", "cond", "guard"),
        ("fraud", "unless", "guard"),
        ("on_enter_done", "enter (by name)", "action"),
    }
    table = imported.table().splitlines()
    assert table[0].split() == ["callback", "role", "becomes", "used", "at"]
    assert any(
        line.startswith("fraud")
        and "states.fulfilment.states.payment.states.pending.on.pay[0].guard" in line
        for line in table
    )


def test_imported_machine_runs_with_the_original_callbacks() -> None:
    imported = from_python_statemachine(Order)
    model = Order()
    machine = imported.create_machine(bind=model)
    snapshot, effects = machine.initial_transition()
    snapshot, effects = machine.transition(snapshot, {"type": "add", "quantity": 3})
    assert snapshot.value == {"shopping": "cart"}
    for effect in effects:  # user actions are effects; run them as a runtime would
        machine.implementations.actions[effect.type](effect.context, effect.event)
    assert model.added == [3]
    snapshot, _ = machine.transition(snapshot, {"type": "add", "quantity": 0})
    assert snapshot.value == {"shopping": "cart"}  # no 'add' from cart
    for event in ("checkout", "pay", "ship"):
        snapshot, effects = machine.transition(snapshot, event)
    assert snapshot.status == "done"
    assert [e.type for e in effects] == ["on_enter_done"]
    assert_properties(machine, "determinism", "persistence", "all_states_reachable")


def test_guard_combinations_and_missing_implementations() -> None:
    imported = from_python_statemachine(Order)
    checkout = imported.config["states"]["shopping"]["on"]["checkout"][0]["guard"]
    assert (checkout.type, checkout.children) == ("and", ("has_items", "logged_in"))
    pay = imported.config["states"]["fulfilment"]["states"]["payment"]["states"]["pending"]
    assert (pay["on"]["pay"][0]["guard"].type, pay["on"]["pay"][0]["guard"].children) == (
        "not",
        ("fraud",),
    )
    with pytest.raises(MachineDefinitionError, match="no guard 'in_stock'"):
        imported.create_machine()


def test_not_a_statemachine_class() -> None:
    with pytest.raises(ValueError, match="is not a python-statemachine class"):
        from_python_statemachine(int)
