"""Every use of Textual's private API in vtui, in one place (tests/ui/test_ui_textual_private.py fails,
naming the attribute, when a Textual release drops one; no other vtui module touches Textual's private
names). pyproject.toml bounds textual below its next major for them. Each is kept because no public API
does the job:

- `textual._compositor.Compositor` and its `_get_renders(crop)`, overridden by `CropRendersCompositor`:
  the dashboard's compositor (vtui.ui.compositor.LeanCompositor) renders only the widgets a partial
  update can show; Textual has no public hook for which widgets a repaint renders.
- `Screen._compositor`, set by `use_compositor` (the dashboard installs that compositor) and read by
  `screen_strips` (its `render_strips()`: the screen as lines of text, for vtui.ui.textdump; Textual's
  only public export of a screen is an SVG).
- `App._refresh_notifications` (Textual calls it after each `notify`, an expiry and a screen resume) and
  `App._notifications` (the live ones), overridden by `NoticeRoutingApp`: notifications go to the
  screens' notice line instead of toasts over the data; no public hook tells the app that the live
  notifications changed.
- `Footer._bindings_ready`, set by `mark_footer_ready`: Footer composes no keys until it is set, and its
  public `bindings_changed` also schedules the recompose per call that vtui.ui.widgets.footer.LeanFooter
  exists to batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from textual._compositor import Compositor
from textual.app import App
from textual.geometry import Region
from textual.notifications import Notification
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Footer

__all__ = [
    "PRIVATE_API",
    "CropRendersCompositor",
    "NoticeRoutingApp",
    "mark_footer_ready",
    "missing_private_api",
    "screen_strips",
    "use_compositor",
]

_R = TypeVar("_R")

Renders = Iterable[tuple[Region, Region, list[Strip]]]


class CropRendersCompositor(Compositor):
    """Textual's compositor, whose partial updates (a crop) render what `renders_within(crop)` yields."""

    def _get_renders(self, crop: Region | None = None) -> Renders:
        if not crop:
            yield from super()._get_renders(crop)
            return
        yield from self.renders_within(crop)

    def renders_within(self, crop: Region) -> Renders:
        return super()._get_renders(crop)


def use_compositor(screen: Screen, compositor: Compositor) -> None:
    """Make `compositor` the screen's (call in its __init__, before it is mounted)."""
    screen._compositor = compositor


def screen_strips(screen: Screen) -> list[Strip]:
    """The screen as its compositor draws it, one strip per line."""
    return screen._compositor.render_strips()


class NoticeRoutingApp(App[_R]):
    """An App whose notifications go to its `notice_router` first, a callable given the live ones (the
    unexpired notifications, oldest first) that answers whether it showed them: Textual's toasts show
    them when it did not, or when there is no router."""

    notice_router: Callable[[list[Notification]], bool] | None = None

    def _refresh_notifications(self) -> None:
        router = self.notice_router
        if router is None or not router(list(self._notifications)):
            super()._refresh_notifications()

    def refresh_notifications(self) -> None:
        """Route the live notifications again (e.g. when the next one expires)."""
        self._refresh_notifications()


def mark_footer_ready(footer: Footer) -> None:
    footer._bindings_ready = True


def _instance_attribute(factory: Callable[[], Any], name: str) -> Callable[[], bool]:
    return lambda: name in vars(factory())


def _class_attribute(owner: type, name: str) -> Callable[[], bool]:
    return lambda: name in {n for cls in owner.__mro__ for n in vars(cls)}


# (what, check it is there): every private name above, checked by tests/ui/test_ui_textual_private.py
PRIVATE_API: tuple[tuple[str, Callable[[], bool]], ...] = (
    ("textual._compositor.Compositor._get_renders", _class_attribute(Compositor, "_get_renders")),
    ("textual._compositor.Compositor.render_strips", _class_attribute(Compositor, "render_strips")),
    ("textual.screen.Screen()._compositor", _instance_attribute(Screen, "_compositor")),
    ("textual.app.App._refresh_notifications", _class_attribute(App, "_refresh_notifications")),
    ("textual.app.App()._notifications", _instance_attribute(App, "_notifications")),
    ("textual.widgets.Footer._bindings_ready", _class_attribute(Footer, "_bindings_ready")),
)


def missing_private_api() -> list[str]:
    """The private names vtui uses that this Textual lacks."""
    return [what for what, present in PRIVATE_API if not present()]
