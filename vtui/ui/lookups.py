"""What the screens need that is read off the App's loop, in workers: model configs for the planner
(`ModelConfigs`, read from disk once per model) and a failed run's diagnosis (`diagnose`). Each result
comes back as a message (ConfigLoaded, DiagnosisReady) that the App's handler puts in the store."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from vtui.ui.messages import ConfigLoaded, DiagnosisReady
from vtui.ui.store import run_diagnosis

if TYPE_CHECKING:
    from textual.worker import Worker

    from vtui.core.model import InstanceSpec
    from vtui.planner import ModelConfig
    from vtui.ui.app import VtuiApp

ConfigKey = tuple[str, str, str | None]


class ModelConfigs:
    def __init__(self, app: VtuiApp) -> None:
        self._app = app
        self._pending: set[ConfigKey] = set()  # being read: a ConfigLoaded follows

    def get(self, spec: InstanceSpec) -> tuple[ModelConfig | None, str | None] | None:
        """(config or None, reason) when known; None while it is being read (a ConfigLoaded follows)."""
        from vtui.ui import planning

        key = planning.config_key(spec)
        if key in self._app.store.configs:
            return self._app.store.configs[key]
        if key not in self._pending:
            self._pending.add(key)
            self._load(key)
        return None

    def loaded(self, key: ConfigKey) -> None:
        """`key`'s ConfigLoaded was handled: its config is in the store."""
        self._pending.discard(key)

    def _load(self, key: ConfigKey) -> Worker[None]:
        return self._app.run_worker(
            partial(self._read, key), name="_load_config", group="config", exit_on_error=False
        )

    async def _read(self, key: ConfigKey) -> None:
        from vtui.ui import planning

        try:
            config, reason = await asyncio.to_thread(planning.load_config, key)
        except Exception as exc:  # noqa: BLE001 — a config the planner cannot read (any error): shown as the reason
            config, reason = None, f"{key[1]}: {exc}"
        self._app.post_message(ConfigLoaded(key, config, reason))


def diagnose(app: VtuiApp, name: str, lines: list[str], gpus: tuple[int, ...]) -> Worker[None]:
    """Diagnose the run of `name` that ended with `lines` in a worker (a DiagnosisReady follows)."""
    return app.run_worker(
        partial(_diagnose, app, name, lines, gpus), name="_diagnose", group="diagnosis", exit_on_error=False
    )


async def _diagnose(app: VtuiApp, name: str, lines: list[str], gpus: tuple[int, ...]) -> None:
    try:
        own = app.supervisor.pids_of(name)
    except KeyError:  # gone from the layout since it was selected
        own = set()
    facts, problems = await asyncio.to_thread(run_diagnosis, lines, app.store.gpu, gpus, name, own)
    app.post_message(DiagnosisReady(name, facts, problems))
