"""The session service's socket API: one route per request (`handle`), each answering a status and a
JSON object. Each body and query is checked against its route's schema first (`schema`): an unknown or
ill-typed field, or a flag value the layout would refuse, is a 400 naming it; an unknown route or
instance a 404, a known path asked with another method a 405, a refusal a 409. Nothing else maps to a
4xx: an exception of ours is a 500, logged."""

from __future__ import annotations

import asyncio
import os
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vtui.core.events import Event, Notice
from vtui.core.runstate import masked
from vtui.service.schema import (
    MAX_LOG_LINES,
    BadRequest,
    NotFound,
    check_flags,
    check_request,
    query_int,
)
from vtui.service.service_base import ServiceBase, log
from vtui.service.wire import point_of
from vtui.supervisor.attached import Attached
from vtui.supervisor.logfile import read_older, read_tail
from vtui.supervisor.notify import Notifier
from vtui.supervisor.preflight import PreflightError
from vtui.supervisor.supervision import SleepRefused, kill_marked


class HandlerMixin(ServiceBase):
    async def handle(self, method: str, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One request: its answer's status and JSON object. Input that does not fit is a 4xx naming what
        is wrong (`schema`); anything else raised is a bug of ours (500, logged)."""
        try:
            url = urlsplit(target)
            query = {k: v[-1] for k, v in parse_qs(url.query, max_num_fields=20).items()}
            check_request(method, url.path, query, body)
            return 200, await self._route(method, url.path, query, body)
        except BadRequest as exc:
            return exc.status, {"error": str(exc), "problems": exc.problems}
        except PreflightError as exc:
            return 409, {"error": "preflight", "problems": list(exc.problems)}
        except SleepRefused as exc:
            return 409, {"error": str(exc), "problems": [str(exc)]}
        except Exception as exc:  # noqa: BLE001 — a bug: said, logged, the supervisor carries on
            log(f"{method} {target[:200]}: {exc!r}")
            return 500, {"error": f"internal error: {exc!r}"[:500]}

    async def _route(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any]
    ) -> dict[str, Any]:
        route = (method, path)
        if route == ("GET", "/status"):
            brief = query.get("brief") == "1"
            if not brief:
                await self._fresh_gpu()  # unwatched, the sampler rests: the answer gets a sample of now
            return self.status(brief=brief)
        if route == ("POST", "/layout"):
            return await self._set_layout(body)
        if route == ("POST", "/start"):
            names = self._known(body.get("names"))
            self._refuse_unresolved(names if names is not None else self.supervisor.layout.names())
            self._bring_up_attached(names)  # watched until `down`, keeping the supervisor up
            await self.supervisor.start(names, force=bool(body.get("force")))
            return {"ok": True}
        if route == ("POST", "/sleep"):
            name = self._one_name(body)
            await self.supervisor.sleep(name, body.get("level", 1))
            return {"ok": True, "state": self.supervisor.instances[name].state.value}
        if route == ("POST", "/wake"):
            name = self._one_name(body)
            await self.supervisor.wake(name)
            return {"ok": True, "state": self.supervisor.instances[name].state.value}
        if route == ("POST", "/wait"):
            names = self._known(body.get("names"))
            states = await self.supervisor.wait_settled(names, timeout=body.get("timeout"))
            return {"states": {n: s.value for n, s in states.items()}}
        if route == ("POST", "/stop"):
            return await self._stop(self._known(body.get("names")), body.get("grace"))
        if route == ("POST", "/restart"):
            return await self._restart(body)
        if route == ("POST", "/pending"):
            return await self._set_pending(body)
        if route == ("GET", "/logs"):
            return await self._logs(query.get("name", ""), query_int(query, "n", 50, MAX_LOG_LINES))
        if route == ("POST", "/logs"):  # {name, n, before}: the n lines before `before` (scrollback)
            return await self._logs(body["name"], body.get("n", 50), body["before"])
        if route == ("GET", "/events"):
            return {"events": self.events.last(query_int(query, "n", 200, 1 << 30))}
        if route == ("GET", "/pids"):
            return {"pids": await asyncio.to_thread(self._pids)}
        if route == ("GET", "/history"):
            samples = list(self.samples.get(query.get("name", ""), ()))
            n = query_int(query, "n", len(samples), 1 << 30)
            samples = samples[-n:] if n > 0 else []
            if query.get("fields") == "points" and samples:  # a dashboard's backfill: plots' figures
                return {"samples": [point_of(s) for s in samples[:-1]], "latest": samples[-1]}
            return {"samples": samples}
        if route == ("POST", "/shutdown"):
            self._spawn(self.shutdown(stop_instances=bool(body.get("stop"))))
            return {"ok": True}
        raise NotFound(f"no route {method} {path}")  # a schema without a handler

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
            raise BadRequest("name: expected an instance name")
        if name not in self.supervisor.instances:
            raise NotFound(f"no instance named {name[:200]} in session {self.session}")
        return name

    def _known(self, names: list[str] | None) -> list[str] | None:
        """`names` (instances or replica groups), or NotFound naming those the session lacks."""
        if names is not None:
            try:
                self.supervisor.resolve(names)
            except KeyError as exc:
                raise NotFound(str(exc.args[0] if exc.args else exc)[:500]) from None
        return names

    async def _set_layout(self, body: dict[str, Any]) -> dict[str, Any]:
        from vtui.layouts import LayoutError, load_layout

        path = body.get("path")
        if not isinstance(path, str):
            raise BadRequest("path: expected the layout file's path")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise BadRequest("env: expected an object of strings")
        # The values of the layout's ${VAR}s as the requesting command sees them (a supervisor started
        # earlier, by `ps` in another shell, may lack them); its instances inherit them too.
        os.environ.update({str(k): v for k, v in env.items()})
        try:
            from vtui.telemetry.flagschema import layout_flags

            flags = await asyncio.to_thread(layout_flags, path)  # the instances' own vLLMs' flags
            layout = await asyncio.to_thread(partial(load_layout, path, unset_ok=True, flags=flags))
        except LayoutError as exc:
            raise BadRequest(f"{path} does not validate", 400, [str(p) for p in exc.problems]) from exc
        except OSError as exc:
            raise BadRequest(f"{path}: {exc.strerror or exc}") from exc
        if layout.session.name != self.session:
            raise BadRequest(f"{path} is session {layout.session.name}, not {self.session}", 409)
        self.supervisor.set_layout(layout)
        self.flag_table = flags
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
            raise BadRequest(problems[0], 400, problems)

    async def _restart(self, body: dict[str, Any]) -> dict[str, Any]:
        """Restart one instance, with flags set and unset first (checked as the layout checks them: a
        flag that would not load is a 400 and nothing restarts)."""
        name = self._one_name(body)
        inst = self.supervisor.instances[name]
        self._refuse_unresolved([name])
        set_flags = body.get("set") or {}
        unset = body.get("unset") or []
        check_flags(set_flags, self.flag_table, "set")
        spec = inst.spec.with_flags(set_flags, tuple(unset)) if (set_flags or unset) else None
        await self.supervisor.restart(name, spec)
        return {"ok": True, "flags": masked(self.supervisor.instances[name].spec.flags)}

    async def _set_pending(self, body: dict[str, Any]) -> dict[str, Any]:
        """A dashboard's flag edits of one instance, not yet applied (`flags`: the whole set as edited;
        null clears them; `base`: the flags they were made from): checked as the layout's flags are,
        kept (masked), persisted with the state, and sent to every feed (`_edits_changed`)."""
        name = self._one_name(body)
        flags = body.get("flags")
        if flags is not None:
            check_flags(flags, self.flag_table)
        try:
            await self.supervisor.set_pending(name, flags, body.get("base"))
        except ValueError as exc:  # the edits of too many instances kept already
            raise BadRequest(str(exc), 409) from None
        edits = self.supervisor.edits
        conflicts = [c.to_dict() for c in edits.conflicts(name)]
        return {"ok": True, "name": name, "flags": edits.get(name), "conflicts": conflicts}

    async def _logs(self, name: str, n: int, before: list[str] | None = None) -> dict[str, Any]:
        inst = self.supervisor.instances.get(name)
        if inst is None:
            raise NotFound(f"no instance named {name[:200]} in session {self.session}")
        if isinstance(inst, Attached):
            raise BadRequest(
                f"{name} is an attached server ({inst.spec.base_url}): its log is where it runs, vtui has none"
            )
        path = inst.log_path
        if before is not None:
            older = await asyncio.to_thread(read_older, path, before, n) if path is not None else None
            return {"name": name, "lines": older or [], "found": older is not None}
        lines = await asyncio.to_thread(read_tail, path, n) if path is not None and path.exists() else []
        return {"name": name, "log_path": str(path) if path else None, "lines": lines}
