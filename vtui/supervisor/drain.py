"""Graceful stop, step one: let the requests in flight finish before the SIGTERM.

vLLM answers a SIGTERM by aborting what it is serving (0.32: `--shutdown-timeout 0`, "mode=abort"):
open streams end early. So a stop first (1) tells the router fronting the instance to send it nothing
new (`Router`: `supervisor.replicas.RouterHub` removes a replica from its vllm-router; `None` skips it) — then (2) waits, up to a budget, until
the instance has no request in flight, and only then signals. What is still in flight when the budget
runs out is cut, and the count is reported.

In flight: `GET /load` (`server_load`: HTTP requests on the generate routes) where it counts — the sim,
and vLLM started with `--enable-server-load-tracking` (without it vLLM's /load always says 0) — else
`vllm:num_requests_running + vllm:num_requests_waiting` from /metrics. Neither needs the API key (vLLM
only guards /v1, /v2 and /inference).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
POLL = 0.25  # seconds between two looks at the in-flight count
LOOK_TIMEOUT = 2.0  # one look's HTTP timeout: an engine busy on every core answers /metrics slowly
FIRST_LOOK_S = 5.0  # how long the first look may keep timing out (even past a shorter budget) before the
# count is "unknown"
MIN_LOOK = 0.25  # the shortest timeout a look gets near the end of its window


class Router(Protocol):
    """What fronts instances (`supervisor.replicas.RouterHub`): told to route nothing new to one before it
    stops. `key`: the instance's `session/name`."""

    def stop_routing(self, key: str) -> None: ...


@dataclass(frozen=True)
class DrainResult:
    at_start: int | None  # requests in flight when the drain began (None: the instance did not say)
    left: int | None  # still in flight when it ended: cut by the stop (None: unknown)
    waited_s: float
    unanswered: bool = False  # every look timed out: the instance was too busy to say (not "none")
    slowest_look_s: float = 0.0  # the longest look, wall clock, from asking to giving up or an answer


class _Slow(Exception):
    """The instance took longer than a look's timeout to answer (busy, not gone)."""


class _NoAnswer(Exception):
    """The connection was refused or dropped: gone, unless its process still runs."""


def in_flight(base_url: str, *, load_endpoint: bool, timeout: float = 1.0) -> int | None:
    """Requests the instance is serving now, or None when it does not answer."""
    try:
        return _look(base_url, load_endpoint=load_endpoint, timeout=timeout)
    except (_Slow, _NoAnswer):
        return None


def _look(base_url: str, *, load_endpoint: bool, timeout: float) -> int | None:
    """in_flight, but a timed-out answer raises _Slow (worth asking again) instead of None (gone).
    `timeout` bounds the whole look, wall clock: httpx's timeouts bound each phase (connect, the wait for
    the headers, each read), and an API server starved of CPU answered slowly in every phase, each just in
    time: one look held a `--grace 2` stop 22.6 s, and with the body read against a deadline the connect
    and header waits still made a drain of 10.6 s. So the look runs in a thread of its own that is given
    up at the deadline (it ends at its own httpx timeouts, a few seconds later, holding nothing)."""
    box: list[int | None | Exception] = []

    def run() -> None:
        try:
            box.append(_ask(base_url, load_endpoint=load_endpoint, timeout=timeout))
        except Exception as exc:  # noqa: BLE001 — handed to the caller, which raises it there
            box.append(exc)

    worker = threading.Thread(target=run, name="vtui-drain-look", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        raise _Slow
    if isinstance(box[0], Exception):
        raise box[0]
    return box[0]


def _ask(base_url: str, *, load_endpoint: bool, timeout: float) -> int | None:
    """One GET of the in-flight count; the body read against `timeout` too (the caller bounds the rest)."""
    deadline = time.monotonic() + timeout
    try:
        path = "/load" if load_endpoint else "/metrics"
        # verify: only https has certificates to check; httpx loads its CA bundle for every client that
        # may verify (19 ms of CPU a look, against 1.4 ms without), which a starved machine pays in seconds
        verify = base_url.startswith("https://")
        with httpx.stream(
            "GET", f"{base_url}{path}", timeout=timeout, trust_env=False, verify=verify
        ) as response:
            if response.status_code != 200:
                return None
            body = bytearray()
            for chunk in response.iter_bytes():
                if time.monotonic() > deadline:
                    raise _Slow
                body += chunk
        text = body.decode("utf-8", errors="replace")
        if load_endpoint:
            return int(json.loads(text)["server_load"])
        return _metrics_in_flight(text)
    except httpx.TimeoutException as exc:
        raise _Slow from exc
    except httpx.TransportError as exc:  # refused or reset: gone, or too busy to accept (drain decides)
        raise _NoAnswer from exc
    except (httpx.HTTPError, OSError, ValueError, KeyError, TypeError):
        return None


def _metrics_in_flight(text: str) -> int | None:
    """running + waiting summed over every series (data-parallel engines); None when both are absent."""
    from vtui.telemetry.promtext import parse_metrics

    snap = parse_metrics(text, frozenset(IN_FLIGHT))
    totals = [snap.total(name) for name in IN_FLIGHT]
    if all(t is None for t in totals):
        return None
    return int(sum(t or 0.0 for t in totals))


def drain(
    base_url: str,
    budget: float,
    *,
    load_endpoint: bool,
    key: str = "",
    router: Router | None = None,
    still_running: Callable[[], bool] = lambda: True,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainResult:
    """Stop routing to the instance, then wait until nothing is in flight, the budget is spent, the
    instance stops answering, or `still_running()` turns False (its process died)."""
    if router is not None:
        router.stop_routing(key)
    start = clock()
    window = max(budget, FIRST_LOOK_S)  # the count is worth a few seconds past a short budget: without
    # it the stop could not say what it cut

    def timeout(until: float) -> float:  # a look ends by the window's end (give or take MIN_LOOK)
        return min(LOOK_TIMEOUT, max(MIN_LOOK, until - (clock() - start)))

    slowest = 0.0

    def look(until: float) -> int | None:
        nonlocal slowest
        began = clock()
        try:
            return _look(base_url, load_endpoint=load_endpoint, timeout=timeout(until))
        finally:
            slowest = max(slowest, clock() - began)

    first: int | None = None
    unanswered = False
    while True:  # a busy engine starves its API server: a slow answer is not "nothing in flight"
        try:
            first = look(window)
            break
        except _Slow:
            if clock() - start >= window or not still_running():
                unanswered = still_running()
                break
        except _NoAnswer:  # its process runs but did not take the connection: it cannot say
            unanswered = still_running()
            break
    count = first
    while count and clock() - start < budget and still_running():
        sleep(min(POLL, max(0.0, budget - (clock() - start))))
        try:
            seen = look(budget)
        except _Slow:
            continue  # no answer in time: keep the last count, the drain goes on
        except _NoAnswer:
            break  # it stopped answering: nothing more to wait for
        if seen is None:
            break  # it stopped answering: nothing more to wait for
        count = seen
    return DrainResult(
        at_start=first,
        left=count,
        waited_s=round(clock() - start, 3),
        unanswered=unanswered,
        slowest_look_s=round(slowest, 3),
    )
