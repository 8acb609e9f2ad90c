"""Issue 44: the idempotency key a call receives is unique per actor (two actors of one machine
on a simulated clock collided as ``order:order.charging@0#1``) and provider-safe (32 hex
characters by default; ``keyLength`` per call site), on the in-memory and the async actor."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from statecharts import MachineDefinitionError, SimulatedClock, create_actor, create_machine
from statecharts.async_actor import AsyncActor
from statecharts.idempotency import idempotency_key
from statecharts.logic import from_callable

SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


def order_machine(keys: list[str], invoke: dict[str, Any]) -> Any:
    def charge(input: Any, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if len(keys) % 2 and "retry" in invoke:
            raise ConnectionError("timeout")  # every other call: the retry tries again
        return "ch_1"

    return create_machine(
        {
            "id": "order",
            "initial": "charging",
            "states": {
                "charging": {
                    "invoke": {"id": "charge", "src": "charge", "onDone": "paid", **invoke}
                },
                "paid": {"type": "final"},
            },
        },
        actors={"charge": from_callable(charge)},
    )


@pytest.mark.parametrize(
    "invoke", [{}, {"retry": {"max_attempts": 2, "initial_interval": 0}}], ids=["plain", "retried"]
)
def test_two_actors_of_one_machine_on_a_simulated_clock_get_different_keys(
    invoke: dict[str, Any],
) -> None:
    keys: list[str] = []
    machine = order_machine(keys, invoke)
    for _ in range(2):
        clock = SimulatedClock()
        actor = create_actor(machine, clock=clock).start()
        clock.advance(10)
        assert actor.get_snapshot().value == "paid"
    first, second = (keys[: len(keys) // 2], keys[len(keys) // 2 :])
    assert set(first).isdisjoint(second)
    if "retry" in invoke:  # a retried call keeps its key across its attempts
        assert len(set(first)) == 1 and len(first) == 2
    assert all(len(k) == 32 and SAFE.match(k) for k in keys)


def test_key_length_per_call_site_and_its_bad_values_name_the_path() -> None:
    keys: list[str] = []
    create_actor(order_machine(keys, {"keyLength": 40})).start()
    assert len(keys[0]) == 40 and SAFE.match(keys[0])
    for bad in (8, 65, "40", True):
        with pytest.raises(
            MachineDefinitionError,
            match=r"states\.charging\.invoke\.keyLength: 'keyLength' is a whole "
            r"number from 16 to 64",
        ):
            order_machine([], {"keyLength": bad})


def test_the_async_actor_gives_keys_of_the_same_form_per_actor() -> None:
    keys: list[str] = []
    machine = order_machine(keys, {})

    async def run() -> None:
        for _ in range(2):
            actor = AsyncActor(machine).start()
            while actor.get_snapshot().value != "paid":
                await asyncio.sleep(0.001)

    asyncio.run(run())
    assert len(set(keys)) == 2 and all(len(k) == 32 and SAFE.match(k) for k in keys)


def test_the_key_function_is_deterministic_and_bounded() -> None:
    assert idempotency_key("run-1", "order.charging@0#1") == idempotency_key(
        "run-1", "order.charging@0#1"
    )
    assert idempotency_key("run-1", "x") != idempotency_key("run-2", "x")
    assert len(idempotency_key("s", "c", 64)) == 64
    with pytest.raises(ValueError, match="16 to 64"):
        idempotency_key("s", "c", 15)
