"""An attached server (engine = "external") in the dashboard: the keys that do not apply to a server
vtui only watches (start, stop, restart, rollback, logs, flags, presets, sleep) are greyed and out of the
palette, in every state; details and bench stay."""

from __future__ import annotations

from dataclasses import replace

from vtui.core.model import InstanceSpec
from vtui.core.state import State
from vtui.testing.fake_supervisor import FakeSupervisor
from vtui.ui.actions import INSTANCE_ACTIONS
from vtui.ui.commands import palette_entries

from .conftest import NOW


async def test_attached_server_offers_only_what_applies(app_factory, layout) -> None:
    ext = InstanceSpec(
        name="gpu2",
        model="Qwen/Qwen3-8B",
        port=8000,
        host="gpu2.lan",
        engine="external",
        url="http://gpu2.lan:8000",
    )
    fake = FakeSupervisor(replace(layout, instances=(ext, *layout.instances)), clock=lambda: NOW - 60)
    app = app_factory(fake, autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(3):
            await pilot.pause()
        dash = app.screen
        assert dash.selected_name() == "gpu2"
        for state in (State.STOPPED, State.READY, State.UNHEALTHY, State.UNREACHABLE):
            fake.set_state("gpu2", state)
            for _ in range(3):
                await pilot.pause()
            allowed = {e.action for e in INSTANCE_ACTIONS if dash.check_action(e.action, ()) is True}
            offered = {t for t, _, _ in palette_entries(app) if t.endswith(" gpu2")}
            assert allowed == ({"detail", "bench"} if state is State.READY else {"detail"}), state
            assert offered == {f"instance: {e.verb} gpu2" for e in INSTANCE_ACTIONS if e.action in allowed}


def test_the_fleet_table_names_the_unreachable_state_within_its_column() -> None:
    from vtui.ui.widgets.instance_table import RowData, layout_columns, row_cells
    from vtui.ui.widgets.palette import PLAIN

    cols = layout_columns(200, 8)
    cells = row_cells(RowData("gpu2", state=State.UNREACHABLE), cols, PLAIN, is_all=False)
    state = next(cell for (col, _), cell in zip(cols, cells, strict=True) if col.key == "state")
    assert "".join(text for text, _ in state).strip() == "NO ANSWER"
