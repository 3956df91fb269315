"""Scroll bars drawn in whole cells.

Textual draws the ends of a scroll bar's thumb with eighth-block glyphs (`▁`…`▇`, `▏`…`▉`) for a
smoother position. Beside text they read as stray block characters at the screen's right edge (and in
any text capture of the screen: tmux, a copied screen), so the views that scroll long text (the detail
screen, the log view) draw their thumbs as whole cells, in colour only. Textual's documented way:
a `ScrollBarRender` subclass set as one scroll bar's `renderer`.
"""

from __future__ import annotations

from typing import ClassVar

from textual.scrollbar import ScrollBarRender
from textual.widget import Widget

__all__ = ["WholeCellScrollBarRender", "whole_cell_scrollbars"]


class WholeCellScrollBarRender(ScrollBarRender):
    """The thumb's ends as blanks: Textual skips a blank end glyph, so the thumb covers whole cells."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * len(ScrollBarRender.VERTICAL_BARS)
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * len(ScrollBarRender.HORIZONTAL_BARS)


def whole_cell_scrollbars(widget: Widget) -> None:
    """Both of the widget's scroll bars in whole cells (call once it is mounted)."""
    for bar in (widget.vertical_scrollbar, widget.horizontal_scrollbar):
        bar.renderer = WholeCellScrollBarRender  # type: ignore[misc]  # per instance, as Textual documents
