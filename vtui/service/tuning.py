"""Tunes as jobs of the session supervisor (`vtui.tune.job`): `POST /tune` starts one (a client's plan),
`GET /tune` answers its progress, `POST /tune/cancel` stops it (it restores the original flags), and
every step goes to the feed as `{"type": "tune", "instance", "tune"}`. The job runs in a worker thread;
each of its restarts is `Supervisor.restart` on the service's loop (the instance's operation queue,
label "tune trial" / "tune restore", with fallback), each bench step runs in the worker's own loop, so
the load it makes never slows the supervisor's. One tune per instance; a running tune keeps the
supervisor up (`idle.IdleWatch`, through `Tunes.running`) and a shutdown cancels it and waits for its
restore. `Tunes` is the session service's part that holds the jobs; `handlers.Routes` answers the routes
through it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vtui.core.flagspec import FlagTable
from vtui.core.instance import Instance
from vtui.core.masking import MASK, masked
from vtui.core.refusals import OperationSuperseded, PreflightError, RestartReverted, attached_refusal
from vtui.core.state import State
from vtui.service.broadcast import Broadcaster
from vtui.service.schema import BadRequest, NotFound, check_flags
from vtui.supervisor.attached import Attached
from vtui.supervisor.handle import ProcessHandle
from vtui.supervisor.logfile import read_tail
from vtui.supervisor.supervisor import Supervisor
from vtui.telemetry.flagsave import FlagSave, save_instance_flags

if TYPE_CHECKING:
    from vtui.tune.job import TuneJob

T = TypeVar("T")

READY_TIMEOUT_S = 1800.0  # a trial's wait for READY after its restart (a big model on a GPU box)
SHUTDOWN_WAIT_S = 600.0  # a shutdown waits this long for running tunes' restores


class ServiceOps:
    """`vtui.tune.job.JobOps` on the service's own supervisor, called from the job's worker thread."""

    def __init__(
        self,
        supervisor: Supervisor,
        flags: Callable[[], FlagTable | None],
        name: str,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.supervisor, self.flags, self.name, self.loop = supervisor, flags, name, loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _inst(self) -> Instance[ProcessHandle]:
        return self.supervisor.instances[self.name]

    def running(self) -> tuple[dict[str, object], str]:
        async def look() -> tuple[dict[str, object], str]:
            inst = self._inst()
            flags: dict[str, object] = {k: v for k, v in masked(inst.spec.flags).items() if v != MASK}
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
        self._call(self.supervisor.start([self.name]))

    def restart(self, changes: Mapping[str, object], unset: list[str], label: str) -> None:
        from vtui.tune.runner import InstanceStopped
        from vtui.tune.search import StartFailed

        sup = self.supervisor
        try:
            check_flags(changes, self.flags(), "set")
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


class Tunes:
    """The session's tune jobs (instance -> its last job, live or ended) and their tasks."""

    def __init__(
        self,
        supervisor: Supervisor,
        session: str,
        feed: Broadcaster,
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
        flags: Callable[[], FlagTable | None],
        log: Callable[[str], None],
        layout_path: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.supervisor = supervisor
        self.session = session
        self._log = log
        self.feed = feed
        self._spawn = spawn
        self._flags = flags  # the layout's flag table now (a new layout replaces it)
        self._layout_path = layout_path  # the file `--save` writes (a new layout may move it)
        self.jobs: dict[str, TuneJob] = {}  # instance -> its last tune job
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    @property
    def running(self) -> bool:
        """A tune runs (between a trial's stop and its start nothing else may keep the supervisor up)."""
        return any(job.live for job in self.jobs.values())

    def live(self, name: str) -> TuneJob | None:
        job = self.jobs.get(name)
        return job if job is not None and job.live else None

    async def start(self, name: str, plan: Any) -> dict[str, Any]:
        """`POST /tune` of a known instance (`name`, checked by the route)."""
        from vtui.tune.job import TuneJob, plan_problem

        inst = self.supervisor.instances[name]
        if isinstance(inst, Attached):
            raise BadRequest(attached_refusal(inst.spec, "tune"), 409)
        if self.live(name) is not None:
            raise BadRequest(
                f"a tune of {name} is running: `vtui tune {name} --attach` follows it, `--cancel` stops it",
                409,
            )
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
            ServiceOps(self.supervisor, self._flags, name, loop),
            plan,
            session=self.session,
            instance=name,
            base_url=inst.spec.base_url,
            api_key=str(key) if isinstance(key, str) and key else None,
            publish=lambda doc: self._publish(loop, name, doc),
            engine=inst.spec.engine,
            model=inst.spec.model,
            save_flags=lambda flags: self._save(name, flags),
        )
        self.jobs[name] = job
        self._tasks[name] = self._spawn(self._run(name, job))
        self._log(f"tune of {name} started")
        return {"ok": True, "tune": job.snapshot}

    def _save(self, name: str, flags: Mapping[str, object]) -> FlagSave:
        """A tune's `--save`, from its thread: the applied flags into the session's layout file."""
        path = self._layout_path()
        outcome = save_instance_flags(Path(path) if path else None, name, flags)
        self._log(
            f"tune of {name}: "
            + (f"flags saved to {outcome.saved}" if outcome.saved else "; ".join(outcome.problems))
        )
        return outcome

    async def _run(self, name: str, job: Any) -> None:
        try:
            doc = await asyncio.to_thread(job.run)
            self._log(f"tune of {name}: {doc.get('state')}: {doc.get('message')}")
        except BaseException as exc:  # noqa: BLE001 — logged; the job restored what it could
            self._log(f"tune of {name} ended with {exc!r}")
        finally:
            self._tasks.pop(name, None)

    def _publish(self, loop: asyncio.AbstractEventLoop, name: str, doc: dict[str, Any]) -> None:
        """From the job's thread: the document as it is now, to every feed."""
        message = {"type": "tune", "instance": name, "tune": doc}
        loop.call_soon_threadsafe(self.feed.broadcast, message)

    async def status(self, name: str) -> dict[str, Any]:
        """`GET /tune` of `name`: this supervisor's job, else the last one recorded on disk."""
        from vtui.tune import progress

        if name not in self.supervisor.instances:
            raise NotFound(f"no instance named {name[:200]} in session {self.session}")
        job = self.jobs.get(name)
        if job is not None:
            return {"tune": job.snapshot, "live": job.live}
        doc = await asyncio.to_thread(progress.read, progress.progress_path(self.session, name))
        return {"tune": doc, "live": False}

    def cancel(self, name: str) -> dict[str, Any]:
        """`POST /tune/cancel`: answered at once; the job puts the original flags back."""
        job = self.live(name)
        if job is None:
            raise BadRequest(f"no tune of {name} is running", 409)
        job.cancel()
        return {"ok": True, "tune": job.snapshot}

    async def end(self) -> None:
        """A shutdown: every running tune is cancelled, and its restore waited for."""
        for job in self.jobs.values():
            if job.live:
                job.cancel()
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT_S)
