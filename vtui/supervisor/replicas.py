"""`replicas = N`: the one place a layout entry becomes the instances the supervisor runs.

`supervised(layout)` turns every entry with `replicas > 1` into `NAME-0` … `NAME-(N-1)` (ports `port`,
`port + 1`, …; each its own GPU set: `replica_gpus`, else `gpus` split in equal sets, else the GPUs with
the most free memory that no other instance lists) plus `NAME-router`, the vllm-router on `router_port`
(engine "router", run by `supervisor.routerproc`). `RouterHub` keeps each router's workers equal to the READY
(or UNHEALTHY) replicas of its group through vllm-router's `/add_worker` and `/remove_worker`, and is
the drain's `Router` hook (`stop_routing`: a replica about to stop leaves before its requests drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vtui.core.flagspec import int_flag
from vtui.core.model import WORKER_STARTUP_TIMEOUT_S, InstanceSpec, Layout, router_spec
from vtui.core.state import State

if TYPE_CHECKING:  # imported where used: `vtui check` and preflight import this module, not httpx
    import httpx

RECONCILE_EVERY_S = 5.0  # the membership is compared with the router's /list_workers this often
ROUTER_TIMEOUT_S = 5.0
ROUTED = (State.READY, State.UNHEALTHY)  # replica states its router routes to


def router_installed() -> bool:
    """vllm-router's Rust router (the `vllm_router_rs` module its wheel ships) is importable here."""
    return importlib.util.find_spec("vllm_router_rs") is not None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _int_flag(spec: InstanceSpec, name: str) -> int:
    value = int_flag(spec.flags.get(name))
    return value if value is not None and value > 0 else 1


def gpus_per_replica(spec: InstanceSpec) -> int:
    """GPUs one replica needs: tensor × pipeline parallel size (data parallel runs inside one replica)."""
    return (
        _int_flag(spec, "tensor-parallel-size")
        * _int_flag(spec, "pipeline-parallel-size")
        * _int_flag(spec, "data-parallel-size")
    )


def data_parallel_alternative(spec: InstanceSpec) -> str | None:
    """`vtui check`'s note for a vLLM replica group: the one-process alternative, vLLM's own
    `--data-parallel-size`, and what each way gives up. None where it does not apply: no replicas, not
    a vLLM server vtui launches (the sim runs no data-parallel ranks), or data parallel already asked for
    inside each replica."""
    if spec.replicas <= 1 or spec.engine != "vllm" or _int_flag(spec, "data-parallel-size") > 1:
        return None
    n, per = spec.replicas, gpus_per_replica(spec)
    front = " behind vllm-router" if spec.router_port is not None else ""
    return (
        f"{spec.name}: replicas = {n} runs {n} vLLM servers of {per} GPU(s) each{front}. One server can "
        f"own all {n * per} instead: replicas = 1 with flags.data-parallel-size = {n} (vLLM's "
        f"--data-parallel-size; {n * per} GPUs in gpus). vLLM's own front end then balances requests across "
        f"its {n} engine ranks on one port, no router needed, and a mixture-of-experts model can share its "
        "experts across the ranks (--enable-expert-parallel). What it gives up: it is one process, so a "
        "crashed rank stops and restarts the whole server, and there is no rolling restart; replicas are "
        "separate processes, one restarting while the others serve."
    )


def choose_gpus(
    spec: InstanceSpec, free_memory: Mapping[int, int], taken: set[int]
) -> tuple[tuple[int, ...], ...] | None:
    """Each replica's GPUs chosen by free memory: the GPUs no other instance lists, most free first (ties
    by index), dealt out in consecutive sets of `gpus_per_replica`. None when they are too few."""
    per = gpus_per_replica(spec)
    candidates = sorted((g for g in free_memory if g not in taken), key=lambda g: (-free_memory[g], g))
    if len(candidates) < per * spec.replicas:
        return None
    chosen = candidates[: per * spec.replicas]
    return tuple(tuple(sorted(chosen[i * per : (i + 1) * per])) for i in range(spec.replicas))


# The states in which an instance's `/metrics` is scraped (a sleeping vLLM still answers it).
SCRAPE_STATES = frozenset({State.READY, State.UNHEALTHY, State.ASLEEP, State.WAKING})


def scrape_url(spec: InstanceSpec, state: State) -> str | None:
    """The URL whose `/metrics` vtui scrapes for `spec` in `state` (None: none now): the one rule of the
    session supervisor's scrape loops (the only ones: the dashboard is its client), a router's on its
    Prometheus port."""
    return metrics_base(spec) if state in SCRAPE_STATES else None


def metrics_base(spec: InstanceSpec) -> str | None:
    """The URL whose `/metrics` vtui scrapes for `spec`: a router's Prometheus port (its own
    `vllm_router_*` series; its main port's /metrics forwards to one worker at a time), else its URL."""
    if spec.engine != "router":
        return spec.base_url
    port = spec.flags.get("prometheus-port")
    if not isinstance(port, int) or isinstance(port, bool):
        return None
    host = spec.flags.get("prometheus-host")
    return f"http://{host if isinstance(host, str) and host else '127.0.0.1'}:{port}"


def supervised(
    layout: Layout,
    *,
    free_memory: Mapping[int, int] | None = None,
    keep: Mapping[str, InstanceSpec] | None = None,
    port_for_metrics: Callable[[], int] = free_port,
) -> Layout:
    """The layout as the supervisor runs it: replica groups expanded (see the module doc), other
    entries unchanged. `free_memory` (GPU index → free bytes, from NVML or the simulated GPUs) chooses
    the GPUs of a group that lists none; `keep`: specs already supervised by these names, whose GPU
    sets and router Prometheus port stay (a re-read layout does not move a replica)."""
    keep = keep or {}
    if not any(s.replicas > 1 for s in layout.instances):
        return layout
    taken = {g for s in layout.instances if s.replicas <= 1 for g in s.gpus}
    taken |= {g for s in layout.instances if s.replicas > 1 for sets in s.replica_gpus for g in sets}
    taken |= {g for s in layout.instances if s.replicas > 1 for g in s.gpus}
    out: list[InstanceSpec] = []
    for entry in layout.instances:
        if entry.replicas <= 1:
            out.append(entry)
            continue
        sets: tuple[tuple[int, ...], ...] = ()
        if not entry.replica_gpus and not entry.gpus:
            names = [f"{entry.name}-{i}" for i in range(entry.replicas)]
            kept = [keep[n].gpus if n in keep else () for n in names]
            if all(kept):
                sets = tuple(kept)
            elif any(kept) and free_memory:  # a grown group: its replicas keep their GPUs, the new ones
                held = {g for gpus in kept for g in gpus}  # take GPUs nobody holds
                more = choose_gpus(replace(entry, replicas=kept.count(())), free_memory, taken | held)
                fresh = iter(more or ())
                sets = tuple(gpus or next(fresh) for gpus in kept) if more else ()
            elif free_memory:
                sets = choose_gpus(entry, free_memory, taken) or ()
            taken |= {g for group in sets for g in group}
        out.extend(entry.replica_specs(sets))
        if entry.router_port is not None:
            old = keep.get(f"{entry.name}-router")
            port = old.flags.get("prometheus-port") if old is not None else None
            if entry.router_metrics_port is not None:
                port = entry.router_metrics_port  # the layout's: a Prometheus scrape config can name it
            out.append(router_spec(entry, port if isinstance(port, int) else port_for_metrics()))
    return replace(layout, instances=tuple(out))


def members(layout: Layout, group: str) -> list[str]:
    """The names a group name stands for: its replicas, then its router."""
    return [s.name for s in layout.instances if s.group == group]


@dataclass(frozen=True)
class Change:
    router: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    error: str | None = None


def _url(spec: InstanceSpec) -> str:
    return spec.base_url


class RouterHub:
    """Keeps each router's workers equal to its group's READY replicas. `reconcile` (async) compares
    the router's `/list_workers` with the wanted set and adds / removes the difference; the supervisor
    calls it after every state change of a group member and every few seconds. `stop_routing` (sync,
    from the stop's thread) removes a replica at once."""

    def __init__(
        self,
        specs: Callable[[], Mapping[str, tuple[InstanceSpec, State]]],
        notify: Callable[[str, str, str], None],
    ) -> None:
        self._specs = specs  # name -> (spec, state), the supervisor's current view
        self._notify = notify  # (instance, level, text)
        self._stopping: set[str] = set()  # replicas whose stop asked the router to forget them
        self._locks: dict[str, asyncio.Lock] = {}
        self.workers: dict[
            str, tuple[str, ...]
        ] = {}  # group -> the replicas its router routes to (last seen)
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    # -- who is who ----------------------------------------------------------------------------
    def _router_of(self, group: str) -> tuple[InstanceSpec, State] | None:
        for spec, state in self._specs().values():
            if spec.engine == "router" and spec.group == group:
                return spec, state
        return None

    def wanted(self, group: str) -> dict[str, str]:
        """url -> replica name of the group's replicas that should get requests: READY, or UNHEALTHY (a
        missed /health under load: the router's own health check judges that one), and not stopping."""
        return {
            _url(spec): spec.name
            for spec, state in self._specs().values()
            if spec.group == group
            and spec.engine != "router"
            and state in ROUTED
            and spec.name not in self._stopping
        }

    def groups(self) -> list[str]:
        return sorted({s.group for s, _ in self._specs().values() if s.engine == "router" and s.group})

    # -- the drain hook --------------------------------------------------------------------------
    def stop_routing(self, key: str) -> None:
        """`supervisor.drain.Router`: the replica `key` (session/name) gets nothing new from its router."""
        name = key.split("/", 1)[-1]
        found = self._specs().get(name)
        if found is None or found[0].group is None or found[0].engine == "router":
            return
        self._stopping.add(name)
        router = self._router_of(found[0].group)
        if router is None or router[1] is not State.READY:
            return
        known = self.workers.get(found[0].group, ())
        self.workers[found[0].group] = tuple(n for n in known if n != name)
        import httpx

        try:
            httpx.post(
                f"{router[0].base_url}/remove_worker",
                params={"url": _url(found[0])},
                timeout=ROUTER_TIMEOUT_S,
                trust_env=False,
            )
        except httpx.HTTPError as exc:
            self._notify(name, "warning", f"{router[0].name}: /remove_worker {name} failed: {exc!r}")

    def started(self, name: str) -> None:
        """A replica launched again: it may be routed to once READY."""
        self._stopping.discard(name)

    # -- reconcile ---------------------------------------------------------------------------------
    def _http(self) -> httpx.AsyncClient:
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(timeout=WORKER_STARTUP_TIMEOUT_S + 5, trust_env=False)
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            with contextlib.suppress(Exception):
                await client.aclose()

    async def reconcile(self, group: str) -> Change | None:
        """Bring the group's router to the wanted workers; None when the router is not READY."""
        lock = self._locks.setdefault(group, asyncio.Lock())
        async with lock:
            router = self._router_of(group)
            if router is None or router[1] is not State.READY:
                self.workers.pop(group, None)
                return None
            spec = router[0]
            client = self._http()
            import httpx

            try:
                response = await client.get(f"{spec.base_url}/list_workers", timeout=ROUTER_TIMEOUT_S)
                have = set(response.json().get("urls") or [])
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                return Change(spec.name, (), (), f"/list_workers failed: {exc!r}")
            want = self.wanted(group)
            added, removed, errors = [], [], []
            for url in sorted(have - set(want)):
                try:
                    r = await client.post(f"{spec.base_url}/remove_worker", params={"url": url})
                    if r.status_code == 200:
                        removed.append(url)
                    else:
                        errors.append(f"/remove_worker {url}: {r.status_code} {r.text[:200]}")
                except httpx.HTTPError as exc:
                    errors.append(f"/remove_worker {url}: {exc!r}")
            for url in sorted(set(want) - have):
                try:
                    r = await client.post(f"{spec.base_url}/add_worker", params={"url": url})
                    if r.status_code == 200:
                        added.append(want[url])
                    else:
                        errors.append(f"/add_worker {want[url]}: {r.status_code} {r.text[:200]}")
                except httpx.HTTPError as exc:
                    errors.append(f"/add_worker {want[url]}: {exc!r}")
            names = {_url(s): s.name for s, _ in self._specs().values()}
            now_urls = (have - set(removed)) | {u for u, n in want.items() if n in added}
            self.workers[group] = tuple(sorted(names.get(u, u) for u in now_urls))
            change = Change(
                spec.name,
                tuple(added),
                tuple(names.get(u, u) for u in removed),
                "; ".join(errors) or None,
            )
            if change.added or change.removed:
                parts = [f"+{', '.join(change.added)}" if change.added else ""]
                parts.append(f"-{', '.join(change.removed)}" if change.removed else "")
                now = ", ".join(self.workers[group]) or "none"
                self._notify(
                    spec.name, "info", f"{spec.name}: workers {' '.join(p for p in parts if p)} → {now}"
                )
            if change.error:
                self._notify(spec.name, "warning", f"{spec.name}: {change.error}")
            return change


def describe(spec: InstanceSpec, hub: RouterHub) -> dict[str, Any]:
    """A replica's or router's place in its group for the status clients get (`vtui ps --json`): its
    group, its role, and a router's workers (the replicas it routes to); {} for a plain instance."""
    if spec.group is None:
        return {}
    if spec.engine == "router":
        return {"group": spec.group, "role": "router", "workers": list(hub.workers.get(spec.group, ()))}
    return {"group": spec.group, "role": "replica"}
