"""The dashboard's LeanCompositor (`vtui.ui.compositor`): a partial update writes exactly what Textual's
own compositor writes for the same dirty regions, while rendering only the widgets the update can show."""

from __future__ import annotations

from textual._compositor import Compositor
from textual.geometry import Region

from vtui.ui.compositor import LeanCompositor
from vtui.ui.messages import MetricsArrived
from vtui.ui.widgets.instance_table import FleetTable


async def test_a_partial_update_writes_what_textuals_compositor_writes(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await fake.start()
        for name, kv in zip(["qwen", "llama", "embed"], [0.4, 0.7, 0.1], strict=False):
            app.post_message(MetricsArrived(h.metrics(name, kv_usage=kv)))
        for _ in range(3):
            await pilot.pause()
        app.repaint()
        await pilot.pause()
        screen = app.screen
        lean = screen._compositor
        assert isinstance(lean, LeanCompositor)
        stock = Compositor()
        stock.reflow(screen, screen.size)
        table = screen.query_one(FleetTable)
        fleet = table.region
        rendered: list[str] = []
        for regions in (
            [Region(0, fleet.y + 1, screen.size.width, 2)],  # a fleet repaint
            [Region(0, fleet.y, 30, 1), Region(0, screen.size.height - 3, screen.size.width, 1)],
        ):
            outputs = []
            for compositor in (stock, lean):
                compositor._dirty_regions.clear()  # a fresh reflow marks the whole screen
                compositor._dirty_regions.update(regions)
                update = compositor.render_update(screen_stack=[])
                assert update is not None
                outputs.append(update.render_segments(app.console))
            assert outputs[0] == outputs[1]
            rendered.append(outputs[1])
        assert all(rendered)

        # the update of a fleet line renders the fleet and what is behind it, not the GPU panel or footer
        seen: list[str] = []
        for widget in list(lean.visible_widgets):
            original = widget.render_lines

            def spy(crop, _w=widget, _o=original):
                seen.append(type(_w).__name__)
                return _o(crop)

            widget.render_lines = spy  # type: ignore[method-assign]
        lean._dirty_regions.clear()
        lean._dirty_regions.add(Region(0, fleet.y + 1, 20, 1))
        lean.render_update(screen_stack=[])
        assert "FleetTable" in seen and "GpuPanel" not in seen and "LeanFooter" not in seen, seen
