"""Why an action is refused, in one sentence each, for the supervisor that refuses it and the clients
that grey the key beforehand: `PreflightError` (a start refused before anything was launched),
`attached_refusal` (an attached server is never started, stopped or restarted), `sleep_problem` (sleep
mode needs the layout's opt-in and a loopback bind), `OperationConflict` and `OperationSuperseded` (another
operation of the instance runs or waits, or a stop came first: `supervisor.opqueue`). No I/O."""

from __future__ import annotations

import ipaddress

from vtui.core.model import InstanceSpec

__all__ = [
    "OperationConflict",
    "OperationSuperseded",
    "PreflightError",
    "RestartReverted",
    "attached_refusal",
    "loopback",
    "sleep_problem",
]


class PreflightError(RuntimeError):
    """The start was refused; nothing was launched. `problems` holds one line per reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class OperationConflict(RuntimeError):
    """The request cannot run now because of another operation of the same instance (HTTP 409)."""


class OperationSuperseded(OperationConflict):
    """The request was accepted, then a stop of the instance came first: it did not run (in full)."""


class RestartReverted(RuntimeError):
    """A restart's new flags did not reach READY, and the instance went back to the flags before."""

    def __init__(self, text: str, flags: dict[str, object]) -> None:
        super().__init__(text)
        self.flags = flags


def attached_refusal(spec: InstanceSpec, verb: str) -> str:
    """The one sentence every refusal of `verb` on an attached server says."""
    return (
        f'{spec.name} is an attached server (engine = "external", {spec.base_url}): vtui watches it '
        f"but never starts, stops or restarts it, so it cannot {verb} it; do that where it runs"
    )


def loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: only such a bind may expose vLLM's dev-mode routes (/sleep)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sleep_problem(spec: InstanceSpec) -> str | None:
    """Why `spec` cannot sleep (None: it can): sleep mode needs the layout's opt-in and a loopback bind,
    since VLLM_SERVER_DEV_MODE opens /sleep, /wake_up and other dev routes to whoever reaches the port."""
    if spec.engine == "external":
        return attached_refusal(spec, "put to sleep or wake")
    if not loopback(spec.host):
        return (
            f'instance "{spec.name}": sleep mode is allowed only on a loopback bind (host = "127.0.0.1"), '
            f"not {spec.host}: VLLM_SERVER_DEV_MODE opens dev routes to anyone who reaches the port"
        )
    if not spec.sleep_mode:
        return (
            f'instance "{spec.name}": sleep mode is off; set sleep_mode = true on it in the layout '
            "(and restart it: the engine needs VLLM_SERVER_DEV_MODE=1 from its start)"
        )
    return None
