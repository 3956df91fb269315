"""Tunes as jobs of the session supervisor (`vtui.tune.job`): `POST /tune` starts one (a client's plan),
`GET /tune` answers its progress, `POST /tune/cancel` stops it (it restores the original flags), and
every step goes to the feed as `{"type": "tune", "instance", "tune"}`. The job runs in a worker thread;
each of its restarts is `Supervisor.restart` on the service's loop (the instance's operation queue,
label "tune trial" / "tune restore", with fallback), each bench step runs in the worker's own loop, so
the load it makes never slows the supervisor's. One tune per instance; a running tune keeps the
supervisor up (`server._busy`) and a shutdown cancels it and waits for its restore."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any

from vtui.core.masking import MASK, masked
from vtui.core.refusals import OperationSuperseded, PreflightError, RestartReverted, attached_refusal
from vtui.core.state import State
from vtui.service.schema import BadRequest, check_flags
from vtui.service.service_base import ServiceBase, log
from vtui.supervisor.attached import Attached
from vtui.supervisor.logfile import read_tail

READY_TIMEOUT_S = 1800.0  # a trial's wait for READY after its restart (a big model on a GPU box)
SHUTDOWN_WAIT_S = 600.0  # a shutdown waits this long for running tunes' restores


class ServiceOps:
    """`vtui.tune.job.JobOps` on the service's own supervisor, called from the job's worker thread."""

    def __init__(self, service: ServiceBase, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.service, self.name, self.loop = service, name, loop

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _inst(self) -> Any:
        return self.service.supervisor.instances[self.name]

    def running(self) -> tuple[dict[str, object], str]:
        async def look() -> tuple[dict[str, object], str]:
            inst = self._inst()
            flags = {k: v for k, v in masked(inst.spec.flags).items() if v != MASK}
            return flags, inst.state.value

        result: tuple[dict[str, object], str] = self._call(look())
        return result

    def last_good(self) -> dict[str, object] | None:
        async def look() -> dict[str, object] | None:
            good = self._inst().last_good_spec
            return None if good is None else {k: v for k, v in masked(good.flags).items() if v != MASK}

        result: dict[str, object] | None = self._call(look())
        return result

    def start(self) -> None:
        self._call(self.service.supervisor.start([self.name]))

    def restart(self, changes: Mapping[str, object], unset: list[str], label: str) -> None:
        from vtui.tune.runner import InstanceStopped
        from vtui.tune.search import StartFailed

        sup = self.service.supervisor
        try:
            check_flags(changes, self.service.flag_table, "set")
        except BadRequest as exc:
            raise StartFailed(str(exc), [{"kind": "bad_flag", "message": str(exc), "fix": None}]) from exc

        async def go() -> State:
            await sup.restart(
                self.name,
                change=lambda spec: spec.with_flags(dict(changes), tuple(unset)),  # type: ignore[arg-type]
                label=label,
                fallback=True,
            )
            states = await sup.wait_settled([self.name], timeout=READY_TIMEOUT_S)
            return states[self.name]

        try:
            state = self._call(go())
        except RestartReverted as exc:  # back on the flags before, which run
            raise StartFailed(str(exc), self._diagnosis(str(exc))) from exc
        except PreflightError as exc:
            problems = [{"kind": "refused_before_launch", "message": p, "fix": None} for p in exc.problems]
            raise StartFailed(exc.problems[0], problems) from exc
        except OperationSuperseded as exc:
            raise InstanceStopped(str(exc)) from exc
        if state is State.STOPPED:
            raise InstanceStopped("stopped")
        if state is not State.READY:
            message = str(self._inst().last_error or state.value)
            raise StartFailed(message, self._diagnosis(message))

    def _diagnosis(self, message: str) -> list[dict[str, object]]:
        from vtui.telemetry.diagnosis import diagnose

        path = self._inst().log_path
        lines = read_tail(path, 400) if path is not None and path.exists() else []
        found = [p.to_json() for p in diagnose(lines, instance=self.name)]
        return found or [{"kind": "start_failed", "message": message, "fix": None}]


class TuneMixin(ServiceBase):
    def _live_tune(self, name: str) -> Any:
        job = self.tunes.get(name)
        return job if job is not None and job.live else None

    async def _tune_start_route(self, body: dict[str, Any]) -> dict[str, Any]:
        from vtui.tune.job import TuneJob, plan_problem

        name = self._one_name(body)
        inst = self.supervisor.instances[name]
        if isinstance(inst, Attached):
            raise BadRequest(attached_refusal(inst.spec, "tune"), 409)
        if self._live_tune(name) is not None:
            raise BadRequest(
                f"a tune of {name} is running: `vtui tune {name} --attach` follows it, `--cancel` stops it",
                409,
            )
        plan = body["plan"]
        problem = plan_problem(plan)
        if problem:
            raise BadRequest(f"plan: {problem}")
        resuming = bool(plan.get("resume"))
        if inst.state is not State.READY and not resuming:
            raise BadRequest(f"{name} is {inst.state.value}: start it first (`vtui up`), then tune it", 409)
        running = {k: v for k, v in masked(inst.spec.flags).items() if v != MASK}
        if not resuming and running != plan["original"]:
            raise BadRequest(f"{name}'s flags changed since the tune was planned: plan it again", 409)
        loop = asyncio.get_running_loop()
        key = inst.spec.flags.get("api-key")
        key = key[0] if isinstance(key, list) and key else key
        job = TuneJob(
            ServiceOps(self, name, loop),
            plan,
            session=self.session,
            instance=name,
            base_url=inst.spec.base_url,
            api_key=str(key) if isinstance(key, str) and key else None,
            publish=lambda doc: self._tune_publish(loop, name, doc),
            engine=inst.spec.engine,
            model=inst.spec.model,
        )
        self.tunes[name] = job
        self._tune_tasks[name] = self._spawn(self._run_tune(name, job))
        log(f"tune of {name} started")
        return {"ok": True, "tune": job.snapshot}

    async def _run_tune(self, name: str, job: Any) -> None:
        try:
            doc = await asyncio.to_thread(job.run)
            log(f"tune of {name}: {doc.get('state')}: {doc.get('message')}")
        except BaseException as exc:  # noqa: BLE001 (logged; the job restored what it could)
            log(f"tune of {name} ended with {exc!r}")
        finally:
            self._tune_tasks.pop(name, None)

    def _tune_publish(self, loop: asyncio.AbstractEventLoop, name: str, doc: dict[str, Any]) -> None:
        """From the job's thread: the document as it is now, to every feed."""
        message = {"type": "tune", "instance": name, "tune": doc}
        loop.call_soon_threadsafe(self._broadcast, message)

    async def _tune_status_route(self, query: dict[str, str]) -> dict[str, Any]:
        """The tune of `name`: this supervisor's job, else the last one recorded on disk."""
        from vtui.tune import progress

        name = query["name"]
        if name not in self.supervisor.instances:
            raise BadRequest(f"no instance named {name[:200]} in session {self.session}", 404)
        job = self.tunes.get(name)
        if job is not None:
            return {"tune": job.snapshot, "live": job.live}
        doc = await asyncio.to_thread(progress.read, progress.progress_path(self.session, name))
        return {"tune": doc, "live": False}

    async def _tune_cancel_route(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._one_name(body)
        job = self._live_tune(name)
        if job is None:
            raise BadRequest(f"no tune of {name} is running", 409)
        job.cancel()
        return {"ok": True, "tune": job.snapshot}

    async def _end_tunes(self) -> None:
        """A shutdown: every running tune is cancelled, and its restore waited for."""
        for job in self.tunes.values():
            if job.live:
                job.cancel()
        tasks = list(self._tune_tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT_S)
