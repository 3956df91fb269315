"""`LeanCompositor`: Textual's compositor, asked to render only the widgets an update can show.

Textual picks the widgets of a partial update by their clip (the region of the container they sit in),
so a one-region repaint of the fleet table also renders every other widget of a screen-sized container
in full (the GPU panel, the footer and its keys, the notice line, the containers themselves) only to
throw their lines away: a quarter of the dashboard's render cost at 8 instances
(`benchmarks/bench_ui_breakdown.py`). This one skips a widget whose visible part (its region within its
clip) misses the update's crop; what is drawn is the same, since lines outside the update's spans are
never used. (Textual's compositor is private API: vtui.ui.textual_private.)
"""

from __future__ import annotations

from textual.geometry import Region

from vtui.ui.textual_private import CropRendersCompositor, Renders

__all__ = ["LeanCompositor"]


class LeanCompositor(CropRendersCompositor):
    def renders_within(self, crop: Region) -> Renders:
        overlaps = crop.overlaps
        for widget, (region, clip) in self.visible_widgets.items():
            visible = region.intersection(clip)
            if not (visible.width and visible.height and overlaps(visible)):
                continue
            if clip.contains_region(region):
                yield region, clip, widget.render_lines(Region(0, 0, region.width, region.height))
            else:
                yield (
                    region,
                    clip,
                    widget.render_lines(
                        Region(visible.x - region.x, visible.y - region.y, visible.width, visible.height)
                    ),
                )
