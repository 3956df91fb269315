"""The current screen as plain text lines (tests and debugging read the screen like a user would)."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)
