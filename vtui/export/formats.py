"""The export formats: each turns the chosen instances of a layout into the files that run them on
another engine. Every command line is `InstanceSpec.argv()`; secrets are references (`${VAR}` for
compose, an EnvironmentFile for systemd, a Secret for Kubernetes and the Helm chart), never values."""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Callable, Iterable

from vtui.core.backends import pinning_env
from vtui.core.model import Layout
from vtui.export.common import (
    IMAGE,
    IMAGE_REPOSITORY,
    IMAGE_TAG,
    Exported,
    ExportFile,
    ExportResult,
    dns_name,
    exported_instances,
    unique_names,
)
from vtui.export.yamltext import dump_documents, dump_yaml

__all__ = ["FORMATS", "export_layout", "supervisor_unit"]


def _header(layout: Layout, what: str) -> list[str]:
    source = layout.path.name if layout.path else "(unsaved)"
    return [f"{what}: exported by vtui from layout {source} (session {layout.session.name!r})."]


def _notes(item: Exported) -> list[str]:
    return [f"{item.original.name}: {note}" for note in item.notes]


def _secret_name(layout: Layout) -> str:
    return dns_name(f"{layout.session.name}-secrets", set())


# -- vllm serve --config ---------------------------------------------------------------------------


def vllm_config(layout: Layout, items: list[Exported]) -> list[ExportFile]:
    """One `vllm serve --config FILE.yaml` file per instance (and per replica): keys are vLLM's flag
    names, as vLLM's own config-file reader takes them (true: --flag, false: --no-flag, a list: the
    flag with each item, the model under `model`)."""
    files = []
    for item in items:
        for replica in item.spec.replica_specs():
            config: dict[str, object] = {"model": replica.model, "host": replica.host, "port": replica.port}
            for name, value in replica.flags.items():
                if name not in item.secrets and name != "api-key":
                    config[name] = value
            env = _env_line(item, replica.gpus)
            comments = [
                *_header(layout, f"vLLM config for {replica.name}"),
                *_notes(item),
                f"Run: {env}vllm serve --config {replica.name}.yaml",
            ]
            if item.secrets:
                comments.append(f"The API key is not in this file: export {', '.join(item.secrets)} first.")
            files.append(ExportFile(f"{replica.name}.yaml", dump_yaml(config, comments)))
    return files


def _env_line(item: Exported, gpus: Iterable[int]) -> str:
    parts = [f"{k}={v}" for k, v in pinning_env(item.spec.backend, list(gpus)).items()]
    return " ".join(parts) + " " if parts else ""


# -- docker compose ----------------------------------------------------------------------------------


def _compose_text(text: str) -> str:
    return text.replace("$", "$$")  # a literal `$` in compose is `$$` (else it interpolates)


def compose(layout: Layout, items: list[Exported]) -> list[ExportFile]:
    """One compose file: a service per instance (and per replica) on vLLM's image, its GPUs reserved
    by device id, its port published on the layout's address, a health check on /health, `ipc: host`
    (vLLM's docs: PyTorch shares memory between processes through /dev/shm)."""
    services: dict[str, object] = {}
    names = unique_names(r.name for spec in layout.instances for r in spec.replica_specs())
    comments = _header(layout, "docker compose file")
    for item in items:
        comments += _notes(item)
        policy = item.spec.restart
        restart = {"never": "no", "always": "always"}.get(
            policy.mode, f"on-failure:{policy.max_restarts}" if policy.max_restarts else "on-failure"
        )
        for replica in item.spec.replica_specs():
            service: dict[str, object] = {
                "image": IMAGE,
                "command": [_compose_text(a) for a in item.args(host="0.0.0.0")],
            }
            bind = replica.host if replica.host not in ("0.0.0.0", "::", "") else ""
            if ":" in bind:
                bind = f"[{bind}]"  # an IPv6 address, bracketed as compose's short syntax wants
            published = f"{bind}:{replica.port}:{replica.port}" if bind else f"{replica.port}:{replica.port}"
            service["ports"] = [published]
            service["ipc"] = "host"
            env: dict[str, object] = {_k: _compose_text(v) for _k, v in item.env.items()}
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # inside the container the reserved GPUs are 0..n-1
            for name, var in item.secrets.items():
                env[name] = "${" + var + ":?export " + var + "}"
            service["environment"] = env
            volumes = ["${HF_HOME:-~/.cache/huggingface}:/root/.cache/huggingface"]
            if replica.model.startswith(("/", "~")):
                volumes.append(f"{_compose_text(replica.model)}:{_compose_text(replica.model)}:ro")
            service["volumes"] = volumes
            if replica.gpus:
                service["deploy"] = {
                    "resources": {
                        "reservations": {
                            "devices": [
                                {
                                    "driver": "nvidia",
                                    "device_ids": [str(g) for g in replica.gpus],
                                    "capabilities": ["gpu"],
                                }
                            ]
                        }
                    }
                }
            probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{replica.port}/health')"
            service["healthcheck"] = {
                "test": ["CMD", "python3", "-c", probe],
                "interval": "10s",
                "timeout": "5s",
                "retries": 3,
                "start_period": f"{int(policy.start_timeout) or 1800}s",
            }
            service["restart"] = restart
            services[names.get(replica.name) or dns_name(replica.name, set())] = service
    doc = {"name": dns_name(layout.session.name, set()), "services": services}
    return [ExportFile("compose.yaml", dump_yaml(doc, comments))]


# -- systemd -------------------------------------------------------------------------------------------


def _unit_word(text: str) -> str:
    """One ExecStart=/Environment= word: quoted when needed; `%` and `$` escaped (systemd expands them)."""
    text = text.replace("%", "%%").replace("$", "$$")
    if text and not re.search(r'[\s"\'\\;]', text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd(layout: Layout, items: list[Exported]) -> list[ExportFile]:
    """One service unit per instance (and per replica): ExecStart is the exact command vtui runs, the
    environment vtui adds (GPU pinning) and the layout's, secrets from an EnvironmentFile."""
    files = []
    session = dns_name(layout.session.name, set())
    # unit names as DNS labels, unique across the layout (a.b, a_b and A-B would all be a-b), the same
    # whichever instances are exported
    words = unique_names(r.name for spec in layout.instances for r in spec.replica_specs())
    for item in items:
        policy = item.spec.restart
        for replica in item.spec.replica_specs():
            word = words.get(replica.name) or dns_name(replica.name, set())
            unit = f"vllm-{session}-{word}"
            lines = [f"# {line}" for line in _header(layout, f"systemd unit {unit}.service")]
            if word != dns_name(replica.name, set()):
                lines.append(
                    f"# {replica.name}: named {word}, as another instance's name reads the same in a unit name"
                )
            lines += [f"# {line}" for line in _notes(item)]
            lines += [
                "[Unit]",
                f"Description=vLLM {replica.name} ({replica.model}) on port {replica.port}",
                "After=network-online.target",
                "Wants=network-online.target",
                f"StartLimitBurst={policy.max_restarts + 1}",
                f"StartLimitIntervalSec={int(max(60.0, policy.backoff_max * (policy.max_restarts + 1)))}",
                "",
                "[Service]",
                "Type=exec",
            ]
            pins = pinning_env(item.spec.backend, replica.gpus)
            lines += [f"Environment={k}={v}" for k, v in pins.items()]
            lines += [f"Environment={_unit_word(f'{k}={v}')}" for k, v in item.env.items()]
            if item.secrets:
                lines.append(
                    f"# {', '.join(item.secrets)}: one NAME=value line each in this file (mode 0600)"
                )
                lines.append(f"EnvironmentFile=/etc/vtui/{unit}.env")
            argv = replica.argv()
            if not os.path.isabs(argv[0]):
                # vtui runs it through PATH; systemd looks only in /usr/local/bin, /usr/bin, …
                found = shutil.which(argv[0])
                if found:
                    argv[0] = found
                else:
                    lines.append(f"# {argv[0]} was not found on PATH here: write its full path")
            lines.append("ExecStart=" + " ".join(_unit_word(a) for a in argv))
            restart = {"never": "no", "always": "always"}.get(policy.mode, "on-failure")
            lines += [
                f"Restart={restart}",
                f"RestartSec={policy.backoff_initial:g}",
                "KillMode=control-group",  # vLLM's EngineCore and workers go with it
                "TimeoutStopSec=30",
                "",
                "[Install]",
                "WantedBy=multi-user.target",
            ]
            files.append(ExportFile(f"{unit}.service", "\n".join(lines) + "\n"))
    return files


def supervisor_unit(
    layout: Layout,
    unit: str,
    argv: list[str],
    env: dict[str, str],
    env_file: str,
    log_file: str,
    variables: Iterable[str] = (),
) -> ExportFile:
    """A systemd *user* unit that keeps the session's supervisor itself running (`vtui sessions
    install-unit`): the supervisor's own command line (`argv`, which waits for the session's lock and
    never exits idle), the environment it needs (`env`: PATH and vtui's folders, never a secret), the
    layout's `${VAR}`s (`variables`, named in a comment) from `env_file` (optional: a leading `-`), its output appended to its usual log.
    KillMode=process: a stop or a restart of the unit ends the supervisor alone; the instances run on in
    their own sessions and the next supervisor re-adopts them, as after a `kill -9`."""
    lines = [f"# {line}" for line in _header(layout, f"systemd user unit {unit}")]
    lines += [
        "# Keeps the session supervisor running: restarted when it dies (kill -9, a crash), started at",
        "# login (at boot too, with `loginctl enable-linger`). Remove it with `vtui sessions remove-unit`.",
        "[Unit]",
        f"Description=vtui session supervisor of {layout.session.name}",
        "After=default.target",
        "StartLimitIntervalSec=300",
        "StartLimitBurst=10",
        "",
        "[Service]",
        "Type=exec",
    ]
    lines += [f"Environment={_unit_word(f'{k}={v}')}" for k, v in sorted(env.items())]
    names = sorted(set(variables))
    if names:
        lines.append(f"# the layout's ${{VAR}}s ({', '.join(names)}): one NAME=value line each (mode 0600)")
    lines += [
        f"EnvironmentFile=-{_unit_word(env_file)}",
        "ExecStart=" + " ".join(_unit_word(a) for a in argv),
        "Restart=on-failure",
        "RestartSec=2",
        "KillMode=process",
        "TimeoutStopSec=30",
        f"StandardOutput=append:{_unit_word(log_file)}",
        f"StandardError=append:{_unit_word(log_file)}",
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return ExportFile(unit, "\n".join(lines) + "\n")


# -- Kubernetes -------------------------------------------------------------------------------------


def _k8s_env(item: Exported, secret_name: str) -> list[dict[str, object]]:
    env: list[dict[str, object]] = [{"name": k, "value": v} for k, v in item.env.items()]
    env.append({"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"})
    for name, var in item.secrets.items():
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": var}}})
    return env


def kubernetes(layout: Layout, items: list[Exported]) -> list[ExportFile]:
    """A Deployment (replicas = the layout's) and a Service per instance, GPUs as `nvidia.com/gpu`
    requests and limits, startup/readiness/liveness probes on /health, /dev/shm as memory."""
    docs: list[dict[str, object]] = []
    names = unique_names(spec.name for spec in layout.instances)  # the same whichever are exported
    secret_name = _secret_name(layout)
    comments = _header(layout, "Kubernetes manifests")
    for item in items:
        comments += _notes(item)
        if item.secrets:
            comments.append(
                f"{item.original.name}: reads {', '.join(item.secrets)} from Secret {secret_name!r} "
                f"(kubectl create secret generic {secret_name} --from-literal=NAME=…)"
            )
        name = names.get(item.original.name) or dns_name(item.original.name, set())
        labels = {
            "app.kubernetes.io/name": "vllm",
            "app.kubernetes.io/instance": name,
            "app.kubernetes.io/part-of": dns_name(layout.session.name, set()),
            "app.kubernetes.io/managed-by": "vtui-export",
        }
        port = item.spec.port
        container: dict[str, object] = {
            "name": "vllm",
            "image": IMAGE,
            "args": item.args(host="0.0.0.0"),
            "ports": [{"name": "http", "containerPort": port}],
            "env": _k8s_env(item, secret_name),
        }
        gpus = item.per_replica_gpus()
        if gpus:
            container["resources"] = {
                "requests": {"nvidia.com/gpu": gpus},
                "limits": {"nvidia.com/gpu": gpus},
            }
        probe = {"httpGet": {"path": "/health", "port": "http"}}
        start = item.spec.restart.start_timeout or 1800.0
        container["startupProbe"] = {
            **probe,
            "periodSeconds": 10,
            "failureThreshold": max(1, math.ceil(start / 10)),
        }
        container["readinessProbe"] = {**probe, "periodSeconds": 5, "failureThreshold": 2}
        container["livenessProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 3}
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": item.original.replicas,
                    "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [container],
                            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                        },
                    },
                },
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "selector": {"app.kubernetes.io/instance": name},
                    "ports": [{"name": "http", "port": port, "targetPort": "http"}],
                },
            }
        )
    return [ExportFile("vllm.k8s.yaml", dump_documents(docs, comments))]


# -- the vLLM production-stack Helm chart ---------------------------------------------------------------

# vllmConfig's own keys (the chart renders each as its flag); every other flag goes to extraArgs
_CHART_FLAGS = {
    "tensor-parallel-size": ("tensorParallelSize", int),
    "max-model-len": ("maxModelLen", int),
    "max-num-seqs": ("maxNumSeqs", int),
    "gpu-memory-utilization": ("gpuMemoryUtilization", float),
    "dtype": ("dtype", str),
    "enable-chunked-prefill": ("enableChunkedPrefill", bool),
    "enable-prefix-caching": ("enablePrefixCaching", bool),
}


def helm_production_stack(layout: Layout, items: list[Exported]) -> list[ExportFile]:
    """Values for vllm-project/production-stack's chart: one servingEngineSpec.modelSpec entry per
    instance on vLLM's image; replicas as replicaCount; the flags as vllmConfig keys and extraArgs."""
    from vtui.core import flagspec

    specs: list[dict[str, object]] = []
    names = unique_names(spec.name for spec in layout.instances)
    comments = _header(
        layout, "values for the vLLM production-stack Helm chart (vllm-project/production-stack)"
    )
    secret_name = _secret_name(layout)
    api_key = False
    for item in items:
        comments += _notes(item)
        config: dict[str, object] = {}
        mapped: list[str] = []
        for flag, (key, kind) in _CHART_FLAGS.items():
            if flag not in item.spec.flags:
                continue
            value = item.spec.flags[flag]
            try:
                config[key] = flagspec.parse_human_int(str(value)) if kind is int else kind(value)
            except (TypeError, ValueError):
                continue  # "8k" the chart would quote as is: leave it to extraArgs
            mapped.append(flag)
        if "enablePrefixCaching" not in config:
            # the chart writes --no-enable-prefix-caching unless told; vLLM's default (None: its own
            # choice, on for generative models) is kept as true
            spec = flagspec.flag_spec("enable-prefix-caching")
            default = spec.default if spec is not None else None
            config["enablePrefixCaching"] = True if default is None else bool(default)
            comments.append(
                f"{item.original.name}: enablePrefixCaching written as "
                f"{str(config['enablePrefixCaching']).lower()} (the chart turns it off when unset)"
            )
        rest = item.spec.with_flags(unset=mapped)
        extra = rest.argv()[len(rest.executable()) + 5 :]  # after MODEL --host H --port P
        if extra:
            config["extraArgs"] = extra
        env: list[dict[str, object]] = [{"name": k, "value": v} for k, v in item.env.items()]
        for name, var in item.secrets.items():
            if var == "VLLM_API_KEY":
                api_key = True
                continue
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": var}}})
        gpus = item.per_replica_gpus()
        entry: dict[str, object] = {
            "name": names.get(item.original.name) or dns_name(item.original.name, set()),
            "repository": IMAGE_REPOSITORY,
            "tag": IMAGE_TAG,
            "modelURL": item.spec.model,
            "replicaCount": item.original.replicas,
            "requestCPU": 2 + gpus,  # what vtui's preflight counts per vLLM: 2 cores + one per GPU
            "requestMemory": "16Gi",
            "requestGPU": gpus,
            "vllmConfig": config,
        }
        if env:
            entry["env"] = env
        specs.append(entry)
    serving: dict[str, object] = {"modelSpec": specs}
    if api_key:
        serving["vllmApiKey"] = {"secretName": secret_name, "secretKey": "VLLM_API_KEY"}
        comments.append(f"The API key is read from Secret {secret_name!r}, key VLLM_API_KEY.")
    comments.append("requestMemory is a starting value: size it for your model.")
    return [ExportFile("values.yaml", dump_yaml({"servingEngineSpec": serving}, comments))]


FORMATS: dict[str, Callable[[Layout, list[Exported]], list[ExportFile]]] = {
    "vllm-config": vllm_config,
    "compose": compose,
    "systemd": systemd,
    "kubernetes": kubernetes,
    "helm-production-stack": helm_production_stack,
}


def export_layout(layout: Layout, fmt: str, only: Iterable[str] | None = None) -> ExportResult:
    """The files of format `fmt` for the layout's instances (all, or `only`)."""
    items, warnings = exported_instances(layout, only)
    return ExportResult(tuple(FORMATS[fmt](layout, items)), tuple(warnings))
