"""The asyncio runtime: same semantics, invoked work runs concurrently."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statecharts import ActorStoppedError, assign, create_machine, from_async, from_callable
from statecharts.async_actor import create_async_actor, wait_for_async


def test_async_children_run_concurrently_and_report_back() -> None:
    """Two invoked coroutines that each wait for the other can only finish if the runtime
    runs them at the same time; a plain function runs in a worker thread meanwhile."""
    events: dict[str, asyncio.Event] = {}

    async def meet(input: Any) -> int:
        events[input["me"]].set()
        await events[input["other"]].wait()
        return int(input["n"])

    def branch(name: str, src: str, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "initial": "w",
            "states": {
                "w": {
                    "invoke": {
                        "src": src,
                        "input": data,
                        "onDone": {
                            "target": "ok",
                            "actions": assign({name: lambda c, e: e["output"]}),
                        },
                    }
                },
                "ok": {"type": "final"},
            },
        }

    machine = create_machine(
        {
            "initial": "loading",
            "context": {},
            "states": {
                "loading": {
                    "type": "parallel",
                    "states": {
                        "a": branch("a", "meet", {"me": "a", "other": "b", "n": 1}),
                        "b": branch("b", "meet", {"me": "b", "other": "a", "n": 2}),
                        "c": branch("c", "sync", {"n": 3}),
                    },
                    "onDone": "done",
                },
                "done": {"type": "final"},
            },
        },
        actors={"meet": from_async(meet), "sync": from_callable(lambda input: input["n"])},
    )

    async def main() -> Any:
        events.update(a=asyncio.Event(), b=asyncio.Event())
        actor = create_async_actor(machine).start()
        return await wait_for_async(actor, lambda s: s.status == "done", timeout=5000)

    snapshot = asyncio.run(main())
    assert snapshot.context == {"a": 1, "b": 2, "c": 3}


def test_after_timer_on_the_asyncio_clock() -> None:
    machine = create_machine({"initial": "a", "states": {"a": {"after": {20: "b"}}, "b": {}}})

    async def main() -> str:
        actor = create_async_actor(machine).start()
        snapshot = await wait_for_async(actor, lambda s: s.matches("b"), timeout=2000)
        return str(snapshot.value)

    assert asyncio.run(main()) == "b"


def test_async_actor_drops_a_late_event_and_raises_in_strict_mode() -> None:
    machine = create_machine({"initial": "z", "states": {"z": {"type": "final"}}})

    async def main() -> None:
        create_async_actor(machine).start().send("LATE")  # dropped, as in XState
        with pytest.raises(ActorStoppedError, match=r"has ended \(done\)"):
            create_async_actor(machine, strict=True).start().send("LATE")

    asyncio.run(main())
