"""The per-instance flag history on disk: `state_dir()/history/<session>.<instance>.json`, the last
FLAG_HISTORY flag sets with what each produced (KV tokens, max concurrency, bench summary).

Blocking helpers: the App calls them from workers only (read at start, atomic write after a change).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, fields
from pathlib import Path

from vtui.core import paths
from vtui.core.atomic import atomic_write_text
from vtui.ui.store import FLAG_HISTORY, FlagRecord

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
