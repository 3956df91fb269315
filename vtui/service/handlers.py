"""The session service's socket API: the handler of each route of `schema.ROUTES`, answering a status
and a JSON object. Each body and query is checked against its route's schema first: an unknown or
ill-typed field, or a flag value the layout would refuse, is a 400 naming it; an unknown route or
instance a 404 (checked by name: no KeyError becomes a 404), a known path asked with another method a
405; a refusal a 409 (a preflight, a sleep that does not apply, `core.refusals.OperationConflict`: another
operation runs on the instance). Nothing else maps to a 4xx: an exception of ours is a 500 with an id,
logged with its traceback."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
import traceback
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vtui.core.events import Event, Notice
from vtui.core.model import InstanceSpec
from vtui.core.refusals import OperationConflict, PreflightError, RestartReverted, attached_refusal
from vtui.core.runstate import masked
from vtui.service.api import API_VERSION, VTUI_VERSION, handover_command
from vtui.service.schema import (
    ANY_VERSION,
    MAX_LOG_LINES,
    BadRequest,
    NotFound,
    check_flags,
    check_request,
    query_int,
)
from vtui.service.service_base import ServiceContext, log
from vtui.service.wire import point_of
from vtui.supervisor.attached import Attached
from vtui.supervisor.logfile import read_older, read_tail
from vtui.supervisor.replicas import members
from vtui.supervisor.supervision import SleepRefused, kill_marked

SLOW_S = 1.0  # a GET that takes longer is logged too


class Routes:
    """The handlers of the socket API's routes, on the service that holds them (`ServiceContext`)."""

    def __init__(self, service: ServiceContext) -> None:
        self.service = service
        self.supervisor = service.supervisor
        self.session = service.session

    async def handle(
        self, method: str, target: str, body: dict[str, Any], api: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One request: its answer's status and JSON object. Input that does not fit is a 4xx naming what
        is wrong (`schema`); a request of another API version (`api`, from its header; None: a client
        that names none, curl) is a 400 unless it only looks or hands the session over; anything else
        raised is a bug of ours: a 500 whose id is logged with the traceback. Each POST (what acts), and
        any request that took over a second, is logged with its status and how long it took: the session
        log says what was asked and when."""
        began = time.monotonic()
        status, answer = await self._answer(method, target, body, api)
        took = time.monotonic() - began
        if method == "POST" or took > SLOW_S:
            log(f"{method} {target[:200]}: {status} after {took:.1f} s")
        return status, answer

    async def _answer(
        self, method: str, target: str, body: dict[str, Any], api: int | None
    ) -> tuple[int, dict[str, Any]]:
        try:
            url = urlsplit(target)
            query = {k: v[-1] for k, v in parse_qs(url.query, max_num_fields=20).items()}
            route = check_request(method, url.path, query, body)
            if api is not None and api != API_VERSION and (method, url.path) not in ANY_VERSION:
                raise BadRequest(
                    f"API version {api} asked of a supervisor of API {API_VERSION} (vtui {VTUI_VERSION}): "
                    f"`{handover_command(self.session)}` replaces it, the instances keep running"
                )
            handler = getattr(self, route.handler)
            return 200, await handler(body if method == "POST" else query)
        except BadRequest as exc:
            return exc.status, {"error": str(exc), "problems": exc.problems}
        except PreflightError as exc:
            return 409, {"error": "preflight", "problems": list(exc.problems)}
        except (SleepRefused, OperationConflict) as exc:
            return 409, {"error": str(exc), "problems": [str(exc)]}
        except RestartReverted as exc:  # the flags that run are the ones before
            return 409, {"error": str(exc), "problems": [str(exc)], "flags": masked(exc.flags)}
        except Exception as exc:  # noqa: BLE001 — a bug: said, logged with its id, the supervisor carries on
            error_id = secrets.token_hex(4)
            log(f"error {error_id}: {method} {target[:200]}: {exc!r}\n{traceback.format_exc().rstrip()}")
            return 500, {"error": f"internal error {error_id}: {exc!r}"[:500], "error_id": error_id}

    # -- the routes (`schema.ROUTES`): a GET's handler gets the query, a POST's the body ---------------
    async def _status_route(self, query: dict[str, str]) -> dict[str, Any]:
        brief = query.get("brief") == "1"
        if not brief:
            await self.service.gpu_watch.fresh()  # the sampler rests unwatched: a sample of now
        return self.service.status(brief=brief)

    async def _start_route(self, body: dict[str, Any]) -> dict[str, Any]:
        names = self._known(body.get("names"))
        self._refuse_unresolved(names if names is not None else self.supervisor.layout.names())
        self.service.bring_up_attached(names)  # watched until `down`, keeping the supervisor up
        await self.supervisor.start(names, force=bool(body.get("force")))
        return {"ok": True}

    async def _sleep_route(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._one_name(body)
        await self.supervisor.sleep(name, body.get("level", 1))
        return {"ok": True, "state": self.supervisor.instances[name].state.value}

    async def _wake_route(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._one_name(body)
        await self.supervisor.wake(name)
        return {"ok": True, "state": self.supervisor.instances[name].state.value}

    async def _wait_route(self, body: dict[str, Any]) -> dict[str, Any]:
        names = self._known(body.get("names"))
        states = await self.supervisor.wait_settled(names, timeout=body.get("timeout"))
        return {"states": {n: s.value for n, s in states.items()}}

    async def _stop_route(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._stop(self._known(body.get("names")), body.get("grace"))

    async def _logs_route(self, query: dict[str, str]) -> dict[str, Any]:
        return await self._logs(query.get("name", ""), query_int(query, "n", 50, MAX_LOG_LINES))

    async def _older_logs_route(self, body: dict[str, Any]) -> dict[str, Any]:
        """{name, n, before}: the n lines before `before` (a log view's scrollback)."""
        return await self._logs(body["name"], body.get("n", 50), body["before"])

    async def _events_route(self, query: dict[str, str]) -> dict[str, Any]:
        return {"events": self.service.events.last(query_int(query, "n", 200, 1 << 30))}

    async def _pids_route(self, query: dict[str, str]) -> dict[str, Any]:
        return {"pids": await asyncio.to_thread(self.service.pids)}

    async def _history_route(self, query: dict[str, str]) -> dict[str, Any]:
        samples = self.service.samples_of(query.get("name", ""))
        n = query_int(query, "n", len(samples), 1 << 30)
        samples = samples[-n:] if n > 0 else []
        if query.get("fields") == "points" and samples:  # a dashboard's backfill: plots' figures
            return {"samples": [point_of(s) for s in samples[:-1]], "latest": samples[-1]}
        return {"samples": samples}

    async def _shutdown_route(self, body: dict[str, Any]) -> dict[str, Any]:
        self.service.spawn(self.service.shutdown(stop_instances=bool(body.get("stop"))))
        return {"ok": True}

    async def _tune_start_route(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.service.tunes.start(self._one_name(body), body["plan"])

    async def _tune_status_route(self, query: dict[str, str]) -> dict[str, Any]:
        return await self.service.tunes.status(query["name"])

    async def _tune_cancel_route(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.service.tunes.cancel(self._one_name(body))

    async def _feed_route(self, query: dict[str, str]) -> dict[str, Any]:
        raise BadRequest("GET /feed is a stream: ask it on a connection of its own")  # transport answers it

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
            unknown = [
                n
                for n in names
                if n not in self.supervisor.instances and not members(self.supervisor.layout, n)
            ]
            if unknown:
                raise NotFound(f"no instance named {', '.join(unknown)} in session {self.session}"[:500])
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
        return {"ok": True, "layout_path": await self.service.apply_layout(layout, flags, path)}

    async def _stop(self, names: list[str] | None, grace: float | None) -> dict[str, Any]:
        asked = (
            self.supervisor.resolve(names)
            if names is not None
            else [st.name for st in self.supervisor.status()]
        )
        instances = self.supervisor.instances
        attached = [n for n in asked if isinstance(instances.get(n), Attached)]  # watched, never stopped
        wanted = [n for n in asked if n not in attached]
        self.service.bring_up_attached(attached, up=False)  # left running; no longer keeps the supervisor up
        notices: list[str] = []  # what the stop had to say (the drain's count, requests cut, SIGKILL
        # needed), for the answer

        def collect(event: Event) -> None:
            if isinstance(event, Notice) and event.instance in wanted:
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
        unset = tuple(body.get("unset") or [])
        check_flags(set_flags, self.service.flag_table, "set")
        if isinstance(inst, Attached):
            raise BadRequest(attached_refusal(inst.spec, "restart"), 409)

        def change(spec: InstanceSpec) -> InstanceSpec:  # on the flags it runs with when its turn comes
            return spec.with_flags(set_flags, unset)

        flags = await self.supervisor.restart(
            name,
            change=change if (set_flags or unset) else None,
            label=body.get("label") or "restart",
            fallback=bool(body.get("fallback")),
        )
        return {"ok": True, "flags": masked(flags)}

    async def _set_pending(self, body: dict[str, Any]) -> dict[str, Any]:
        """A dashboard's flag edits of one instance, not yet applied (`flags`: the whole set as edited;
        null clears them; `base`: the flags they were made from): checked as the layout's flags are,
        kept (masked), persisted with the state, and sent to every feed (`_edits_changed`)."""
        name = self._one_name(body)
        flags = body.get("flags")
        if flags is not None:
            check_flags(flags, self.service.flag_table)
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
