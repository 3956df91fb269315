"""A restart's label and fallback over the socket API: the dashboard's client (`RemoteSupervisor.restart`)
sends them, the handler hands them to the supervisor, and a restart that went back to the old flags
comes back to the client as `RestartReverted` with the flags that run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.refusals import PreflightError, RestartReverted
from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.service.handlers import Routes
from vtui.service.remote import RemoteSupervisor

SPEC = InstanceSpec("a", "m", 8000, engine="sim", flags={"gpu-memory-utilization": 0.9, "max-num-seqs": 8})


class _Instance:
    spec = SPEC


class _Supervisor:
    def __init__(self, raises: BaseException | None = None) -> None:
        self.instances = {"a": _Instance()}
        self.layout = Layout(SessionSpec("s"), (SPEC,))
        self.raises = raises
        self.asked: list[dict[str, Any]] = []

    async def restart(self, name: str, *, change: Any, label: str, fallback: bool) -> dict[str, Any]:
        new = change(SPEC) if change is not None else SPEC
        self.asked.append({"name": name, "flags": dict(new.flags), "label": label, "fallback": fallback})
        if self.raises is not None:
            raise self.raises
        return dict(new.flags)


class _Service:
    """What the route handlers ask of the session service, for /restart."""

    def __init__(self, raises: BaseException | None) -> None:
        self.supervisor = _Supervisor(raises)
        self.session = "s"
        self.flag_table = None


class _Handlers(Routes):
    def __init__(self, raises: BaseException | None = None) -> None:
        super().__init__(_Service(raises))  # type: ignore[arg-type]


async def test_the_handler_passes_label_and_fallback_and_answers_a_way_back_with_the_flags() -> None:
    ok = _Handlers()
    body = {"name": "a", "set": {"gpu-memory-utilization": 0.92}, "label": "fix", "fallback": True}
    status, answer = await ok.handle("POST", "/restart", body)
    assert status == 200 and answer["flags"]["gpu-memory-utilization"] == 0.92
    assert ok.supervisor.asked == [  # type: ignore[attr-defined]
        {
            "name": "a",
            "flags": {"gpu-memory-utilization": 0.92, "max-num-seqs": 8},
            "label": "fix",
            "fallback": True,
        }
    ]
    plain = _Handlers()
    assert (await plain.handle("POST", "/restart", {"name": "a"}))[0] == 200
    assert plain.supervisor.asked[0]["label"] == "restart" and not plain.supervisor.asked[0]["fallback"]  # type: ignore[attr-defined]

    back = _Handlers(
        RestartReverted("a: the new flags did not reach READY (OOM); it went back", dict(SPEC.flags))
    )
    status, answer = await back.handle("POST", "/restart", body)
    assert status == 409 and answer["flags"] == dict(SPEC.flags) and "did not reach READY" in answer["error"]


class _Client(RemoteSupervisor):
    """The dashboard's client, attached, its HTTP answered here (what the session supervisor answers)."""

    def __init__(self, status: int, answer: dict[str, Any]) -> None:
        super().__init__(Layout(SessionSpec("s"), (SPEC,)), start_on_demand=False)
        self._attached = asyncio.Event()
        self._statuses["a"] = InstanceStatus(
            "a", SPEC, State.READY, 1, 0.0, None, 0, None, None, False, None, None
        )
        self.answer = (status, answer)
        self.sent: list[tuple[str, dict[str, Any] | None]] = []

    async def _http(
        self, method: str, target: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        self.sent.append((target, body))
        return self.answer


async def test_the_client_sends_label_and_fallback_and_raises_the_way_back() -> None:
    new = SPEC.with_flags({"gpu-memory-utilization": 0.92})
    ok = _Client(200, {"ok": True, "flags": dict(new.flags)})
    assert await ok.restart("a", new, label="fix", fallback=True) == dict(new.flags)
    assert ok.sent == [
        (
            "/restart",
            {
                "name": "a",
                "label": "fix",
                "fallback": True,
                "set": {"gpu-memory-utilization": 0.92},
                "unset": [],
            },
        )
    ]
    plain = _Client(200, {"ok": True, "flags": dict(SPEC.flags)})
    await plain.restart("a")
    assert plain.sent == [("/restart", {"name": "a"})]  # the defaults are the route's: not sent

    back = _Client(409, {"error": "a: the new flags did not reach READY (OOM)", "flags": dict(SPEC.flags)})
    with pytest.raises(RestartReverted, match="did not reach READY") as caught:
        await back.restart("a", new, label="fix", fallback=True)
    assert caught.value.flags == dict(SPEC.flags)

    refused = _Client(409, {"error": "preflight", "problems": ["GPU 0 has 1.00 GiB free"]})
    with pytest.raises(PreflightError) as said:
        await refused.restart("a", new, label="fix", fallback=True)
    assert said.value.problems == ["GPU 0 has 1.00 GiB free"]
