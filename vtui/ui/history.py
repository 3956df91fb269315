"""The per-instance flag history on disk: `state_dir()/history/<session>.<instance>.json`, the last
FLAG_HISTORY flag sets with what each produced (KV tokens, max concurrency, bench summary).

Blocking helpers, called from workers only, and `HistoryFiles`, the App's part that runs them: the files
read once per layout, each instance's file rewritten after its history changed.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import asdict, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from vtui.core import paths
from vtui.core.atomic import atomic_write_text
from vtui.ui.messages import HistoryLoaded
from vtui.ui.store import FLAG_HISTORY, FlagRecord

if TYPE_CHECKING:
    from textual.worker import Worker

    from vtui.ui.app import VtuiApp

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def history_path(session: str, instance: str) -> Path:
    def safe(text: str) -> str:
        return _UNSAFE.sub("_", text).strip(".") or "_"

    return paths.state_dir() / "history" / f"{safe(session)}.{safe(instance)}.json"


def dumps(records: list[FlagRecord]) -> str:
    return (
        json.dumps(
            {
                "kind": "vtui-flag-history",
                "version": 1,
                "entries": [asdict(r) for r in records[-FLAG_HISTORY:]],
            },
            indent=1,
            default=str,
        )
        + "\n"
    )


def load(path: Path) -> list[FlagRecord]:
    """The records of one history file ([] when missing or unreadable: history is a convenience)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    names = {f.name for f in fields(FlagRecord)}
    out = []
    for entry in doc.get("entries", []) if isinstance(doc, dict) else []:
        if isinstance(entry, dict) and isinstance(entry.get("flags"), dict):
            out.append(FlagRecord(**{k: v for k, v in entry.items() if k in names}))
    return out[-FLAG_HISTORY:]


def load_all(session: str, names: list[str]) -> dict[str, list[FlagRecord]]:
    return {name: load(history_path(session, name)) for name in names}


def save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


class HistoryFiles:
    """The flag history of the App's store on disk: read once per layout (a HistoryLoaded follows, which
    the App merges into the store), written after each change; nothing is written before the files were
    read, nor before the first frame."""

    def __init__(self, app: VtuiApp) -> None:
        self._app = app
        self._lock = asyncio.Lock()
        self._saved: dict[str, int] = {}  # instance -> history_rev last written
        self.ready = False  # the files were read (HistoryLoaded handled)
        self._drawn = False  # the start's rewrite of every file waits for the first frame

    def load(self) -> Worker[None]:
        """Read the files of the store's session and instances (at start, and for a layout opened)."""
        store = self._app.store
        self.ready, self._saved = False, {}
        return self._app.run_worker(
            partial(self._read, store.layout.session.name, store.names()),
            name="_load_history",
            group="history",
            exit_on_error=False,
        )

    async def _read(self, session: str, names: list[str]) -> None:
        records = await asyncio.to_thread(load_all, session, names)
        self._app.post_message(HistoryLoaded(session, records))

    def loaded(self) -> None:
        """The files were read and merged into the store: write what changed since."""
        self.ready = True
        self.persist()

    def first_frame_drawn(self) -> None:
        self._drawn = True
        self.persist()

    def persist(self) -> None:
        """Write the history of each instance of this machine whose history changed since written."""
        if not self.ready or not self._drawn:
            return
        store = self._app.store
        session = store.layout.session.name
        for name, view in store.views.items():
            if view.status is not None and view.status.host is not None:
                continue  # another host's instance: its flag history is that host's
            if self._saved.get(name) != view.history_rev:
                self._saved[name] = view.history_rev
                self._write(history_path(session, name), dumps(list(view.flag_history)))

    def _write(self, path: Path, text: str) -> Worker[None]:
        return self._app.run_worker(
            partial(self._save, path, text), name="_write_history", group="history", exit_on_error=False
        )

    async def _save(self, path: Path, text: str) -> None:
        async with self._lock:  # in order: a later snapshot is never overwritten by an earlier one
            try:
                await asyncio.to_thread(save, path, text)
            except OSError as exc:
                self._app.notify(f"could not save the flag history {path}: {exc}", severity="warning")
