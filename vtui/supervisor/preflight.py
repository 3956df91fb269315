"""Checks before any start, so a refusal costs nothing: ports already taken (naming the holder), GPU
indices absent, GPU sets overlapping, instances without gpus piling onto GPU 0, too few CPU cores for
the vLLM instances (sims need none of their own), a public bind address, the extra ports of data
parallel (a port per rank and the DP supervisor's); and, per launch, `gpu_memory_check`: the GPUs'
free memory against what gpu-memory-utilization will ask.

Problems refuse the start (one clear line each); warnings and notes are reported and the start goes on.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vtui.core import flagspec
from vtui.core.backends import pin_vars, pinned_by_env
from vtui.core.flagvalues import dp_ports
from vtui.core.gpu import GpuSample, GpuSources, instance_gpu_indices, instance_gpus
from vtui.core.model import InstanceSpec, Layout
from vtui.core.vllm_memory import MemoryRule, memory_rule

__all__ = ["PreflightResult", "gpu_memory_check", "instance_gpu_indices", "preflight"]

GIB = 1 << 30


@dataclass(frozen=True)
class PreflightResult:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def port_holder(port: int) -> str | None:
    """Who listens on `port`: "pid 123 (python3 -m http.server)" — or None when nobody can be named."""
    import psutil  # here: `vtui check` imports this module, and needs psutil only for a port held

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, PermissionError, OSError):
        return None
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                cmd = " ".join(proc.cmdline()) or proc.name()
            except psutil.Error:
                cmd = "?"
            if len(cmd) > 80:
                cmd = cmd[:77] + "..."
            return f"pid {conn.pid} ({cmd})"
    return None


def port_in_use(host: str, port: int) -> bool:
    """Binding fails with EADDRINUSE (works without the rights to list other users' sockets)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def layout_gpus(layout: Layout, nvml: Any = None) -> GpuSources:
    """The GPU sources a layout's instances run on (`sim.gpuview.gpu_sources`); `nvml`: a stand-in
    for pynvml (tests)."""
    from vtui.sim.gpuview import gpu_sources

    machine = None
    if nvml is not None:
        from vtui.telemetry.gpu import NvmlSource

        machine = NvmlSource(nvml)
    return gpu_sources(lambda: layout, machine)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def port_problem(spec: InstanceSpec) -> str | None:
    """Why `spec` cannot bind its port now (it is in use, by whom), or None."""
    host = "0.0.0.0" if spec.host in ("", "0.0.0.0") else spec.host
    if not port_in_use(host, spec.port):
        return None
    holder = port_holder(spec.port)
    who = f"by {holder}" if holder else "(holder not visible: try as root or `ss -ltnp`)"
    return f'instance "{spec.name}": port {spec.port} is already in use {who}'


def preflight(
    layout: Layout,
    names: Iterable[str] | None = None,
    *,
    running: Iterable[str] = (),
    nvml: Any = None,
    cpu_count: int | None = None,
    gpus: GpuSources | None = None,
    ports_freed: Iterable[int] = (),
) -> PreflightResult:
    """Check starting `names` (default: all) while `running` instances of the layout keep running.
    GPUs: as `gpus` shows them (default: `layout_gpus`), each instance on the source it runs on.
    `ports_freed`: ports held now by what a restart stops first (not "in use" for its new start)."""
    freed = set(ports_freed)
    wanted = list(names) if names is not None else layout.names()
    if any(s.replicas > 1 for s in layout.instances):  # as the supervisor runs them (supervisor.replicas)
        from vtui.supervisor.replicas import supervised

        groups = {s.name for s in layout.instances if s.replicas > 1}
        layout = supervised(layout)
        wanted = [s.name for s in layout.instances if s.name in wanted or s.group in groups & set(wanted)]
    live = set(running)
    launched = [s for s in layout.instances if s.engine != "external"]  # attached servers: only watched
    to_start = [s for s in launched if s.name in wanted and s.name not in live]
    result = PreflightResult()
    if not to_start:
        return result
    # what the layout takes (check, export) before this supervisor runs it (none today)
    unsupported = [reason for spec in to_start if (reason := spec.not_supervised_yet())]
    if unsupported:
        return PreflightResult(problems=unsupported)
    if any(spec.engine == "router" for spec in to_start):
        from vtui.supervisor.replicas import router_installed

        if not router_installed():
            routed = sorted({f'"{s.group}"' for s in to_start if s.engine == "router"})
            result.problems.append(
                f"instance {', '.join(routed)}: replicas behind a router need vllm-router, not installed "
                f"for {sys.executable}: pip install 'vtui[router]' (or vllm-router)"
            )
    for spec in to_start:
        host = "0.0.0.0" if spec.host in ("", "0.0.0.0") else spec.host
        taken = port_problem(spec) if spec.port not in freed else None
        if taken:
            result.problems.append(taken)
        result.problems.extend(_dp_port_problems(spec, host, layout))
        if spec.gpus and spec.flags.get("device-ids") is not None:
            # vLLM 0.32 (engine/arg_utils.py, _resolve_device_ids): with CUDA_VISIBLE_DEVICES set, the
            # --device-ids values are indices into the visible set, not physical GPUs
            pin = pin_vars(spec.backend)[0] if pin_vars(spec.backend) else "its backend's variable"
            result.problems.append(
                f'instance "{spec.name}": sets both gpus (vtui pins them with {pin}) and '
                "device-ids, which vLLM then reads as indices into those GPUs; keep one of the two"
            )
        if spec.host in ("0.0.0.0", "::", ""):
            result.warnings.append(
                f'instance "{spec.name}": binds {spec.host or "all addresses"}, reachable '
                'from other machines (use host = "127.0.0.1" to keep it local)'
            )
    sources = gpus if gpus is not None else layout_gpus(layout, nvml)
    samples: dict[int, GpuSample] = {}  # each source asked at most once

    def sample_for(spec: InstanceSpec) -> GpuSample:
        source = sources.for_instance(spec)
        if id(source) not in samples:
            samples[id(source)] = source.sample()
        return samples[id(source)]

    skipped: set[str] = set()
    for spec in to_start:
        if not spec.gpus:
            continue
        sample = sample_for(spec)
        if not sample.available:
            skipped.add(sample.reason or "no GPUs")
            continue
        count = len(sample.gpus)
        missing = [g for g in spec.gpus if g < 0 or g >= count]
        if missing:
            have = f"GPUs 0-{count - 1}" if count else "no GPUs"
            kind = "the simulated box" if sample.simulated else "this machine"
            result.problems.append(
                f'instance "{spec.name}": GPU {", ".join(map(str, missing))} not present ({kind} has {have})'
            )
    for why in sorted(skipped):
        result.notes.append(f"GPU checks skipped: {why}")
    active = [s for s in launched if s.name in live] + to_start
    if not layout.session.allow_gpu_sharing:
        result.problems.extend(_overlaps(active, {s.name for s in to_start}))
    unpinned = [
        s for s in active if not s.gpus and pinned_by_env(s.backend, s.env) is None and s.engine != "router"
    ]
    if (
        len(unpinned) >= 2
        and any(s in to_start for s in unpinned)
        and (any(s.engine == "sim" for s in unpinned) or len(sources.machine.sample().gpus) > 0)
    ):
        names = ", ".join(f'"{s.name}"' for s in unpinned)
        result.warnings.append(
            f"instances {names} set no gpus, so all run on GPU 0 (vLLM and the sim take "
            "the first visible GPU) and start one after another; give each its own "
            "gpus = [N] to spread them"
        )
    cores = cpu_count if cpu_count is not None else _cpu_count()
    engines = [s for s in active if s.engine == "vllm"]  # a sim is one light process: no cores of its own
    want = sum(2 + len(s.gpus) for s in engines)
    if want > cores:
        result.warnings.append(
            f"too few CPU cores: {len(engines)} instance(s) want {want} (2 + GPUs each), "
            f"this machine has {cores}"
        )
    return result


def _dp_port_problems(spec: InstanceSpec, host: str, layout: Layout) -> list[str]:
    """Data parallel with --data-parallel-multi-port-external-lb: the ports of ranks 1.. (port + rank) and
    the DP supervisor's (/readyz; 9256 unless --data-parallel-supervisor-port) must be free, and not
    another instance's port."""
    rank_ports, supervisor = dp_ports(spec.flags, spec.port)
    extra = [(p, f"data-parallel rank {p - spec.port}") for p in rank_ports[1:]]
    if supervisor is not None:
        extra.append((supervisor, "data-parallel supervisor (/readyz)"))
    others = {}
    for other in layout.instances:
        if other.name != spec.name:
            for p in (*dp_ports(other.flags, other.port)[0], dp_ports(other.flags, other.port)[1]):
                if p is not None:
                    others[p] = other.name
    problems = []
    for port, role in extra:
        if port in others:
            problems.append(
                f'instance "{spec.name}": port {port} ({role}) is also instance "{others[port]}"\'s'
            )
        elif port_in_use(host, port):
            holder = port_holder(port)
            who = f"by {holder}" if holder else "(holder not visible: try as root or `ss -ltnp`)"
            problems.append(f'instance "{spec.name}": port {port} ({role}) is already in use {who}')
    return problems


def _overlaps(specs: list[InstanceSpec], new: set[str]) -> list[str]:
    lines = []
    for i, a in enumerate(specs):
        for b in specs[i + 1 :]:
            shared = sorted(set(a.gpus) & set(b.gpus))
            if shared and (a.name in new or b.name in new):
                gpus = ", ".join(map(str, shared))
                lines.append(
                    f'instances "{a.name}" and "{b.name}" both use GPU {gpus} '
                    "(set session.allow_gpu_sharing = true to share)"
                )
    return lines


# -- free GPU memory before a start -----------------------------------------------------------------


def target_memory_rule(spec: InstanceSpec, backend: str = "cuda") -> MemoryRule:
    """The memory rule of the vLLM an instance runs (`core.vllm_memory.memory_rule`): the release of the
    flag schema its layout was loaded with (`flagschema.known_schema`, no I/O; the sim plays 0.32),
    with that parser's default utilization; an unread schema: the bundled 0.32 default's rule."""
    from vtui.telemetry.flagschema import known_schema

    schema = known_schema(spec.engine, spec.command)
    table = schema.flags if schema is not None else flagspec.BUILTIN_FLAGS
    default = table["gpu-memory-utilization"].default if "gpu-memory-utilization" in table else None
    version = schema.vllm_version if schema is not None else flagspec.VLLM_VERSION
    return memory_rule(spec.flags, version, backend, default_utilization=default)


def gpu_memory_check(
    spec: InstanceSpec,
    sample: GpuSample | None,
    *,
    force: bool = False,
    ignore_pids: Iterable[int] = (),
    rule: MemoryRule | None = None,
) -> PreflightResult:
    """Whether the GPUs `spec` will use have the memory its --gpu-memory-utilization asks, by vLLM 0.32's
    own start check (`request_memory` in v1/worker/utils.py: free memory on the device at startup must be
    at least ceil(utilization × total), else "Free memory on device … is less than desired GPU memory
    utilization"; it holds with --kv-cache-memory-bytes too). Free = total − used as `sample` shows it:
    NVML's (telemetry.gpu.GpuSampler.sample_once()) for vLLM, the simulated registry's
    (sim.gpuview.SimulatedGpus) for `vtui sim`. A shortfall is a problem naming the holders by pid and
    vtui instance (a warning instead when `force`). `ignore_pids`: processes about to go (the instance's
    own previous tree). No usable sample: a note, nothing refused. Call it just before each launch (after
    a shared GPU's stagger), when the other instances' memory is what the new one will find.
    `rule`: the target vLLM's (default `target_memory_rule`): from 0.34 an extensible KV cache (CUDA,
    ROCm) is sized from what is free after warmup and vLLM skips this check (`request_memory` in
    v1/worker/utils.py), so vtui skips it too."""
    result = PreflightResult()
    if sample is None or not sample.available:
        why = sample.reason if sample is not None else "no GPU sample"
        result.notes.append(f'instance "{spec.name}": GPU memory not checked ({why})')
        return result
    rule = rule or target_memory_rule(spec)
    if not rule.checks_free_memory:
        result.notes.append(f'instance "{spec.name}": GPU memory not checked: {rule.describe()}')
        return result
    utilization = rule.utilization
    gone = set(ignore_pids)
    view = instance_gpus(spec, sample, leaving=gone)
    if not view.available:
        result.notes.append(f'instance "{spec.name}": GPU memory not checked ({view.reason})')
        return result
    for index in view.indices:
        free, total = view.free[index], view.total[index]
        if free is None or total is None:
            result.notes.append(f'instance "{spec.name}": GPU {index} memory not known: not checked')
            continue
        requested = math.ceil(total * utilization)
        if free >= requested:
            continue
        holders = [p for p in sample.processes_on(index) if p.pid not in gone]
        named = ", ".join(
            f"pid {p.pid} ({f'instance {p.instance!r}' if p.instance else 'not a vtui instance'}"
            + (f", {p.used_memory / GIB:.2f} GiB" if p.used_memory is not None else "")
            + ")"
            for p in sorted(holders, key=lambda p: -(p.used_memory or 0))
        )
        line = (
            f'instance "{spec.name}": GPU {index} has {free / GIB:.2f} GiB free of '
            f"{total / GIB:.2f} GiB, less than gpu-memory-utilization {utilization:g} asks "
            f"({requested / GIB:.2f} GiB); held by {named or 'processes NVML does not list'}"
        )
        if force:
            result.warnings.append(line + "; starting anyway (forced)")
        else:
            result.problems.append(line + "; stop them, lower gpu-memory-utilization, or force the start")
    return result
