"""The session service's socket API: one route per request (`handle`), each answering a status and a
JSON object; bad input is a 400 naming what is wrong, a refusal a 409, an unknown instance a 404."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vtui.core.attached import Attached
from vtui.core.events import Event, Notice
from vtui.core.logfile import read_older, read_tail
from vtui.core.notify import Notifier
from vtui.core.preflight import PreflightError
from vtui.core.runstate import masked
from vtui.core.supervision import SleepRefused, kill_marked
from vtui.service.service_base import ServiceBase, log
from vtui.service.wire import point_of


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.problems = list(problems)


class HandlerMixin(ServiceBase):
    async def handle(self, method: str, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        route = (method, url.path)
        try:
            if route == ("GET", "/status"):
                return 200, self.status(brief=query.get("brief") == "1")
            if route == ("POST", "/layout"):
                return 200, await self._set_layout(body)
            if route == ("POST", "/start"):
                names = self._names(body)
                self._refuse_unresolved(names if names is not None else self.supervisor.layout.names())
                self._bring_up_attached(names)  # watched until `down`, keeping the supervisor up
                await self.supervisor.start(names, force=bool(body.get("force")))
                return 200, {"ok": True}
            if route == ("POST", "/sleep"):
                name = self._one_name(body)
                level = body.get("level", 1)
                if level not in (1, 2) or isinstance(level, bool):
                    raise _BadRequest(400, f"level: expected 1 or 2, got {level!r}")
                await self.supervisor.sleep(name, level)
                return 200, {"ok": True, "state": self.supervisor.instances[name].state.value}
            if route == ("POST", "/wake"):
                name = self._one_name(body)
                await self.supervisor.wake(name)
                return 200, {"ok": True, "state": self.supervisor.instances[name].state.value}
            if route == ("POST", "/wait"):
                states = await self.supervisor.wait_settled(self._names(body), timeout=body.get("timeout"))
                return 200, {"states": {n: s.value for n, s in states.items()}}
            if route == ("POST", "/stop"):
                return 200, await self._stop(self._names(body), body.get("grace"))
            if route == ("POST", "/restart"):
                return 200, await self._restart(body)
            if route == ("POST", "/pending"):
                return 200, await self._set_pending(body)
            if route == ("GET", "/logs"):
                return 200, await self._logs(query)
            if route == ("POST", "/logs"):  # {name, n, before}: the n lines before `before` (scrollback)
                return 200, await self._logs(
                    {"name": str(body.get("name", "")), "n": str(body.get("n", 50))}, body
                )
            if route == ("GET", "/events"):
                n = int(query.get("n", 200))
                return 200, {"events": self.events.last(n)}
            if route == ("GET", "/pids"):
                return 200, {"pids": await asyncio.to_thread(self._pids)}
            if route == ("GET", "/history"):
                samples = list(self.samples.get(query.get("name", ""), ()))
                n = int(query.get("n", len(samples)))
                samples = samples[-n:] if n > 0 else []
                if query.get("fields") == "points" and samples:  # a dashboard's backfill: plots' figures
                    return 200, {"samples": [point_of(s) for s in samples[:-1]], "latest": samples[-1]}
                return 200, {"samples": samples}
            if route == ("POST", "/shutdown"):
                self._spawn(self.shutdown(stop_instances=bool(body.get("stop"))))
                return 200, {"ok": True}
        except _BadRequest as exc:
            return exc.status, {"error": str(exc), "problems": exc.problems or [str(exc)]}
        except PreflightError as exc:
            return 409, {"error": "preflight", "problems": list(exc.problems)}
        except SleepRefused as exc:
            return 409, {"error": str(exc), "problems": [str(exc)]}
        except KeyError as exc:
            message = exc.args[0] if exc.args else str(exc)
            return 404, {"error": str(message), "problems": [str(message)]}
        except (ValueError, TypeError) as exc:
            return 400, {"error": str(exc), "problems": [str(exc)]}
        return 404, {"error": f"no route {method} {url.path}"}

    def status(self, brief: bool = False) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "session": self.session,
            "supervisor_pid": os.getpid(),
            "layout_path": self.layout_path,
            "started_at": self.started_at,
        }
        if not brief:
            answer["instances"] = self._statuses()
            answer["flag_history"] = self.flag_history
            answer["gpu"] = self.last_gpu
            answer["gpu_sampling"] = self.gpu  # the feed carries GPU samples (clients run no sampler)
            answer["pending"] = self.supervisor.pending_edits()  # dashboards' unapplied flag edits
            answer["pending_conflicts"] = {  # their flags another client changed too (core.pending)
                name: [c.to_dict() for c in conflicts]
                for name, conflicts in self.supervisor.pending_conflicts().items()
            }
        return answer

    def _one_name(self, body: dict[str, Any]) -> str:
        name = body.get("name")
        if not isinstance(name, str):
            raise _BadRequest(400, "name: expected an instance name")
        if name not in self.supervisor.instances:
            raise KeyError(f"no instance named {name} in session {self.session}")
        return name

    def _names(self, body: dict[str, Any]) -> list[str] | None:
        names = body.get("names")
        if names is None:
            return None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _BadRequest(400, "names: expected a list of instance names")
        return names

    async def _set_layout(self, body: dict[str, Any]) -> dict[str, Any]:
        from vtui.layouts import LayoutError, load_layout

        path = body.get("path")
        if not isinstance(path, str):
            raise _BadRequest(400, "path: expected the layout file's path")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise _BadRequest(400, "env: expected an object of strings")
        # The values of the layout's ${VAR}s as the requesting command sees them (a supervisor started
        # earlier, by `ps` in another shell, may lack them); its instances inherit them too.
        os.environ.update({str(k): v for k, v in env.items()})
        try:
            from vtui.telemetry.flagschema import layout_flags

            flags = await asyncio.to_thread(layout_flags, path)  # the instances' own vLLMs' flags
            layout = await asyncio.to_thread(partial(load_layout, path, unset_ok=True, flags=flags))
        except LayoutError as exc:
            raise _BadRequest(400, f"{path} does not validate", [str(p) for p in exc.problems]) from exc
        except OSError as exc:
            raise _BadRequest(400, f"{path}: {exc.strerror or exc}") from exc
        if layout.session.name != self.session:
            raise _BadRequest(409, f"{path} is session {layout.session.name}, not {self.session}")
        self.supervisor.set_layout(layout)
        if self.notifier is not None:
            self.notifier.close(wait=0)
        self.notifier = Notifier.from_session(layout.session, log=log)
        self._file_names = set(self.supervisor.resolve(layout.names()))
        self.layout_path = str(layout.path) if layout.path else path
        self._write_registration()
        await self._configure_exporter()
        self._broadcast_status()
        return {"ok": True, "layout_path": self.layout_path}

    async def _stop(self, names: list[str] | None, grace: float | None) -> dict[str, Any]:
        asked = (
            self.supervisor.resolve(names)
            if names is not None
            else [st.name for st in self.supervisor.status()]
        )
        instances = self.supervisor.instances
        attached = [n for n in asked if isinstance(instances.get(n), Attached)]  # watched, never stopped
        wanted = [n for n in asked if n not in attached]
        self._bring_up_attached(attached, up=False)  # left running; no longer keeps the supervisor up
        notices: list[str] = []  # what the stop had to say (requests cut, SIGKILL needed), for the answer

        def collect(event: Event) -> None:
            if isinstance(event, Notice) and event.level != "info" and event.instance in wanted:
                notices.append(event.text)

        unsubscribe = self.supervisor.subscribe(collect)
        try:
            await self.supervisor.stop(wanted, grace=grace)
        finally:
            unsubscribe()
        # The launcher's stop ends each tree; make sure nothing marked as one of them outlived it.
        leftovers: list[int] = []
        for name in wanted:
            leftovers += await asyncio.to_thread(kill_marked, f"{self.session}/{name}")
        urls = {n: instances[n].spec.base_url for n in attached}
        return {"stopped": wanted, "leftovers": leftovers, "notices": notices, "attached": urls}

    def _refuse_unresolved(self, names: list[str]) -> None:
        from vtui.layouts import unresolved

        layout = self.supervisor.layout
        # a replica's ${VAR}s are its group's entry's
        asked = set(names) | {s.group for s in layout.instances if s.name in names and s.group}
        missing = {n: v for n, v in unresolved(layout).items() if n in asked}
        if missing:
            problems = [
                f"{name}: {', '.join('${' + v + '}' for v in found)} not set in the supervisor's environment "
                "(run `vtui up` from a shell where it is set)"
                for name, found in missing.items()
            ]
            raise _BadRequest(400, problems[0], problems)

    async def _restart(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str):
            raise _BadRequest(400, "name: expected an instance name")
        inst = self.supervisor.instances.get(name)
        if inst is None:
            raise KeyError(f"no instance named {name} in session {self.session}")
        self._refuse_unresolved([name])
        set_flags = body.get("set") or {}
        unset = body.get("unset") or []
        if not isinstance(set_flags, dict) or not isinstance(unset, list):
            raise _BadRequest(400, "set: expected an object of flags, unset: a list of flag names")
        spec = inst.spec.with_flags(set_flags, tuple(unset)) if (set_flags or unset) else None
        await self.supervisor.restart(name, spec)
        return {"ok": True, "flags": masked(self.supervisor.instances[name].spec.flags)}

    async def _set_pending(self, body: dict[str, Any]) -> dict[str, Any]:
        """A dashboard's flag edits of one instance, not yet applied (`flags`: the whole set as edited;
        null clears them; `base`: the flags they were made from): kept (masked), persisted with the
        state, and sent to every feed (`_edits_changed`)."""
        name = self._one_name(body)
        await self.supervisor.set_pending(name, body.get("flags"), body.get("base"))  # a bad value: a 400
        edits = self.supervisor.edits
        conflicts = [c.to_dict() for c in edits.conflicts(name)]
        return {"ok": True, "name": name, "flags": edits.get(name), "conflicts": conflicts}

    async def _logs(self, query: dict[str, str], body: dict[str, Any] | None = None) -> dict[str, Any]:
        name = query.get("name", "")
        inst = self.supervisor.instances.get(name)
        if inst is None:
            raise KeyError(f"no instance named {name} in session {self.session}")
        if isinstance(inst, Attached):
            raise _BadRequest(
                400,
                f"{name} is an attached server ({inst.spec.base_url}): its log is where it runs, vtui has none",
            )
        n = int(query.get("n", 50))
        path = inst.log_path
        if body is not None:
            before = body.get("before")
            if not isinstance(before, list) or not before or not all(isinstance(x, str) for x in before):
                raise _BadRequest(400, "before: expected the log lines to read back from (a list of strings)")
            older = await asyncio.to_thread(read_older, path, before, n) if path is not None else None
            return {"name": name, "lines": older or [], "found": older is not None}
        lines = await asyncio.to_thread(read_tail, path, n) if path is not None and path.exists() else []
        return {"name": name, "log_path": str(path) if path else None, "lines": lines}
