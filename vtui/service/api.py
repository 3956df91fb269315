"""The socket API's version, which every answer carries (`vtui-api` and `vtui-version` headers; the
feed's hello and `/status` as `api_version`, `vtui_version`) and every request of vtui's client names
(`vtui-api`). A client that meets a supervisor of another version says so in one line (`client`); one
of another API version is refused, with the command that replaces the supervisor without stopping its
instances (`vtui handover SESSION`). Bump API_VERSION when a route, a body or a feed message changes in
a way the other side could misread. Stdlib only: the CLI's client imports it."""

from __future__ import annotations

from vtui import __version__

__all__ = ["API_HEADER", "API_VERSION", "VERSION_HEADER", "VTUI_VERSION", "handover_command"]

API_VERSION = 1  # 0: a supervisor from before the API had a version (no header)
VTUI_VERSION = __version__
API_HEADER = "vtui-api"
VERSION_HEADER = "vtui-version"


def handover_command(session: str, host: str | None = None) -> str:
    """The command that replaces a session's supervisor with one of this vtui, its instances left
    running and re-adopted (`vtui.commands.handover`); `host`: run there, through ssh."""
    command = f"vtui handover {session}"
    return f"ssh {host} {command}" if host else command
