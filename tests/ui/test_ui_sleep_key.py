"""The dashboard's `z` (instance.sleep_toggle): sleeps a READY instance with sleep_mode, wakes an ASLEEP
one, and is greyed for an instance without sleep_mode."""

from __future__ import annotations

import dataclasses

from vtui.core.state import State
from vtui.testing.fake_supervisor import FakeSupervisor


async def settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause()


async def test_z_sleeps_then_wakes_and_is_greyed_without_sleep_mode(app_factory, layout):
    layout = layout.replace_instance(dataclasses.replace(layout.instance("qwen"), sleep_mode=True))
    fake = FakeSupervisor(layout)
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        dash = app.screen
        assert dash.selected_name() == "qwen" and dash.check_action("sleep_toggle", ()) is True
        await pilot.press("z")
        await settle(pilot)
        assert ("sleep", "qwen", 1) in fake.calls and app.store.views["qwen"].state == State.ASLEEP
        await pilot.press("z")
        await settle(pilot)
        assert ("wake", "qwen") in fake.calls and app.store.views["qwen"].state == State.READY
        await pilot.press("j")  # llama: no sleep_mode
        await settle(pilot)
        assert dash.selected_name() == "llama" and dash.check_action("sleep_toggle", ()) is None
