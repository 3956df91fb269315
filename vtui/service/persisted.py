"""What the session service keeps across supervisors, in `<session>.service.json` next to the run
records: each instance's startup facts and flag history, the attached servers brought up (`vtui up`) and
not taken down since, and the dashboards' pending flag edits (held by the supervisor's `PendingEdits`,
saved here). A successor loads it back; a file that cannot be read is an empty state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from vtui.core.atomic import atomic_write_text
from vtui.core.pending import PendingEdits
from vtui.core.runstate import masked

FLAG_HISTORY = 50  # flag sets kept per instance


class ServiceState:
    def __init__(
        self,
        path: Path,
        edits: PendingEdits,
        spawn: Callable[[Coroutine[Any, Any, Any]], Any],
        log: Callable[[str], None],
    ) -> None:
        self.path = path
        self.edits = edits
        self._spawn = spawn
        self._log = log
        self.facts: dict[str, dict[str, Any]] = {}
        self.flag_history: dict[str, list[dict[str, Any]]] = {}
        self.attached_up: set[str] = set()  # attached servers brought up and not down since

    def load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.facts = {k: v for k, v in (data.get("facts") or {}).items() if isinstance(v, dict)}
        self.flag_history = {k: list(v) for k, v in (data.get("flag_history") or {}).items()}
        self.attached_up = {n for n in data.get("attached_up") or () if isinstance(n, str)}
        for problem in self.edits.load(data.get("pending")):  # dashboards' unapplied edits
            self._log(f"{self.path}: {problem} (left out)")

    def save(self) -> None:
        """Written off the loop, atomically (a reader never sees half a file)."""
        data = {
            "facts": self.facts,
            "flag_history": self.flag_history,
            "attached_up": sorted(self.attached_up),
            "pending": self.edits.state(),  # with the flags each was made from
        }
        self._spawn(asyncio.to_thread(atomic_write_text, self.path, json.dumps(data), 0o600))

    # -- the flag history: each launch's flags and what became of it ------------------------------------
    def launched(self, name: str, at: float, flags: Mapping[str, Any]) -> None:
        history = self.flag_history.setdefault(name, [])
        history.append({"at": at, "flags": masked(flags), "outcome": None})
        del history[:-FLAG_HISTORY]
        self.save()

    def ended(self, name: str, outcome: str, save: bool = True) -> None:
        """The last launch's outcome, where it has none yet."""
        history = self.flag_history.setdefault(name, [])
        if history and history[-1]["outcome"] is None:
            history[-1]["outcome"] = outcome
            if save:
                self.save()

    def set_attached_up(self, names: set[str], up: bool) -> None:
        changed = names - self.attached_up if up else names & self.attached_up
        if changed:
            self.attached_up = self.attached_up | changed if up else self.attached_up - changed
            self.save()
