"""The current screen as plain text lines (tests and debugging read the screen like a user would)."""

from __future__ import annotations

from textual.app import App

from vtui.ui.textual_private import screen_strips


def screen_text(app: App) -> str:
    strips = screen_strips(app.screen)
    return "\n".join(strip.text.rstrip() for strip in strips)
