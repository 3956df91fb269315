"""The layout schema's checks across instances: unique names and ports (replicas' and routers' too),
GPU sets and sharing, parallel sizes against the GPUs given, restart timing, exposure. A mixin of
`rules.Checker`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from vtui.core import flagspec
from vtui.layouts.keys import WILDCARD_HOSTS, is_number


class CrossCheck:
    problems: list[tuple[int | None, str, str]]

    if TYPE_CHECKING:  # defined by rules.Checker

        def problem(self, key: str, message: str) -> None: ...

        def warn(self, key: str, message: str) -> None: ...

    def cross_check(self, instances: list[dict[str, object]], allow_gpu_sharing: bool) -> None:
        """Unique names and ports (replicas' and routers' too), GPU sets, parallel sizes vs GPUs,
        restart timing, exposure."""
        names: dict[str, tuple[int, bool]] = {}  # name -> (instance index, a replica's name)
        ports: dict[int, list[tuple[str, int]]] = {}
        gpu_users: dict[int, int] = {}
        for i, fields in enumerate(instances):
            replicas = fields.get("replicas", 1)
            count = replicas if isinstance(replicas, int) and replicas > 1 else 1
            name = fields.get("name")
            if not isinstance(name, str):
                continue
            own = [(name, False)] + [(f"{name}-{r}", True) for r in range(count if count > 1 else 0)]
            if count > 1 and fields.get("router_port") is not None:
                own.append((f"{name}-router", True))
            for n, replica in own:
                if n in names:
                    j, theirs = names[n]
                    if not replica and not theirs:
                        self.problem(f"instance[{i}].name", f'duplicate name "{n}" (also instance[{j}])')
                    else:
                        self.problem(
                            f"instance[{i}].name",
                            f'"{n}" is both an instance and a replica name (instance[{j}]): '
                            f"replicas = N names its copies NAME-0 … NAME-(N-1) and its router "
                            "NAME-router; rename one",
                        )
                    break
            for n, replica in own:
                names.setdefault(n, (i, replica))
        for i, fields in enumerate(instances):
            key = f"instance[{i}]"
            host = str(fields.get("host", "127.0.0.1"))
            port = fields.get("port")
            replicas = fields.get("replicas", 1)
            count = replicas if isinstance(replicas, int) and replicas > 1 else 1
            wanted: list[tuple[str, int]] = []
            if isinstance(port, int):
                first = "url" if fields.get("engine") == "external" else "port"
                wanted += [(first if r == 0 else "replicas", port + r) for r in range(count)]
            router = fields.get("router_port")
            if isinstance(router, int) and count > 1:
                wanted.append(("router_port", router))
                metrics = fields.get("router_metrics_port")
                if isinstance(metrics, int):
                    wanted.append(("router_metrics_port", metrics))
            for field_name, number in wanted:
                clash = next(
                    (
                        j
                        for other_host, j in ports.get(number, [])
                        if host == other_host or host in WILDCARD_HOSTS or other_host in WILDCARD_HOSTS
                    ),
                    None,
                )
                if clash is not None:
                    whose = (
                        "this instance"
                        if clash == i
                        else f'instance[{clash}] ("{instances[clash].get("name", "?")}")'
                    )
                    self.problem(f"{key}.{field_name}", f"port {number} is also used by {whose}")
                    break
                ports.setdefault(number, []).append((host, i))
            if host in WILDCARD_HOSTS:
                self.warn(
                    f"{key}.host",
                    f'"{host}" exposes the server to the network; use "127.0.0.1" unless you mean it',
                )
            if fields.get("engine", "vllm") == "external":
                continue
            if fields.get("engine", "vllm") != "sim":
                for flag in fields.get("flags") or {}:  # type: ignore[attr-defined]
                    if flag in flagspec.SIM_FLAGS:
                        self.problem(
                            f"{key}.flags.{flag}",
                            'an option of the simulated engine; set engine = "sim" or remove it',
                        )
            listed = fields.get("gpus")
            gpus: list[int] = list(listed) if isinstance(listed, list) else []
            sets = fields.get("replica_gpus")
            if isinstance(sets, list) and not gpus:
                gpus = [g for group in sets for g in group]
                before = len(self.problems)
                for group in sets:
                    self._parallel(f"{key}.replica_gpus", fields, list(group), per="replica")
                    if len(self.problems) > before:
                        break
            elif count > 1 and gpus and len(gpus) % count == 0:
                self._parallel(key, fields, gpus[: len(gpus) // count], per="replica")
            elif count == 1:
                self._parallel(key, fields, gpus)
            for gpu in gpus:
                if gpu in gpu_users and not allow_gpu_sharing:
                    j = gpu_users[gpu]
                    self.problem(
                        f"{key}.gpus",
                        f"GPU {gpu} is also used by instance[{j}] "
                        f'("{instances[j].get("name", "?")}"); set '
                        "session.allow_gpu_sharing = true to share it",
                    )
                    break
                gpu_users.setdefault(gpu, i)
            backoff, cap = fields.get("backoff"), fields.get("backoff_max")
            if is_number(backoff) and is_number(cap) and cap < backoff:  # type: ignore[operator]
                self.problem(f"{key}.backoff_max", f"must be >= backoff ({backoff:g}s), got {cap:g}s")

    def _parallel(self, key: str, fields: Mapping[str, object], gpus: list[int], per: str = "") -> None:
        given = fields.get("flags")
        flags: Mapping[str, object] = given if isinstance(given, Mapping) else {}
        needed = flagspec.gpus_needed(flags) if gpus else None
        if needed is not None and needed[0] != len(gpus):
            where = key if key.endswith(".replica_gpus") else f"{key}.gpus"
            self.problem(
                where,
                f"{needed[1]} = {needed[0]}, but {len(gpus)} GPU(s) " + (f"per {per}" if per else "listed"),
            )
