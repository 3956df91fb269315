"""What every export format shares: which instances are exported and as what, the command line (always
`InstanceSpec.argv()`, the one place vtui builds it), secrets as references, and names that the target
accepts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from vtui.core import flagspec
from vtui.core.model import SECRET_FLAGS, InstanceSpec, Layout
from vtui.layouts.keys import SECRET_ENV
from vtui.layouts.text import has_vars

__all__ = [
    "IMAGE",
    "ExportError",
    "ExportFile",
    "ExportResult",
    "Exported",
    "dns_name",
    "exported_instances",
]

# vLLM's official OpenAI-server image, of the vLLM whose flags vtui validates against (its entrypoint is
# `vllm serve`, so a container's arguments start with the model).
IMAGE_REPOSITORY = "vllm/vllm-openai"
IMAGE_TAG = f"v{flagspec.VLLM_VERSION}"
IMAGE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"


class ExportError(Exception):
    """Nothing could be exported (the user's choice left nothing, or a name is unknown)."""


@dataclass(frozen=True)
class ExportFile:
    name: str  # a file name (no folder): what `-o DIR` writes
    text: str


@dataclass(frozen=True)
class ExportResult:
    files: tuple[ExportFile, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exported:
    """One instance as the target runs it: `spec` is plain vLLM (a sim instance becomes the vLLM it
    simulates: its `sim-*` flags dropped, `engine = "vllm"`), with its secrets off the flags."""

    spec: InstanceSpec
    original: InstanceSpec
    # env name -> the variable it is read from (`VLLM_API_KEY` for flags.api-key; an env entry that
    # looks secret, like HF_TOKEN, keeps its own name): written as references, never as values
    secrets: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # the layout's env without the secrets
    notes: tuple[str, ...] = ()

    @property
    def simulated(self) -> bool:
        return self.original.engine == "sim"

    def args(self, host: str | None = None) -> list[str]:
        """`vllm serve`'s arguments after `vllm serve` (model first): what a container passes to the
        image's entrypoint. `host`: the bind address inside the container."""
        spec = self.spec if host is None else replace(self.spec, host=host)
        return spec.argv()[len(spec.executable()) :]

    def per_replica_gpus(self) -> int:
        sets = self.original.replica_gpu_sets()
        return len(sets[0]) if sets else len(self.spec.gpus)


def exported_instances(layout: Layout, only: Iterable[str] | None = None) -> tuple[list[Exported], list[str]]:
    """The instances to export (all, or `only`), and warnings. An attached server (engine = "external")
    is skipped with a warning: it runs elsewhere already. A sim instance is exported as the vLLM it
    simulates, said in a note. Values still holding an unset `${VAR}` are warned about."""
    wanted = list(only) if only else layout.names()
    unknown = [n for n in wanted if n not in layout.names()]
    if unknown:
        raise ExportError(f"no instance named {', '.join(unknown)} (instances: {', '.join(layout.names())})")
    out: list[Exported] = []
    warnings: list[str] = []
    for spec in layout.instances:
        if spec.name not in wanted:
            continue
        if spec.engine == "external":
            warnings.append(f'{spec.name}: skipped: engine = "external" ({spec.url}) already runs elsewhere')
            continue
        out.append(_exported(spec, warnings))
    if not out:
        raise ExportError('nothing to export (only attached servers, engine = "external", were chosen)')
    return out, warnings


def _exported(spec: InstanceSpec, warnings: list[str]) -> Exported:
    notes: list[str] = []
    flags = dict(spec.flags)
    secrets = {var: var for flag, var in SECRET_FLAGS.items() if flag in flags}
    if spec.engine == "sim":
        dropped = sorted(f for f in flags if f in flagspec.SIM_FLAGS)
        flags = {k: v for k, v in flags.items() if k not in flagspec.SIM_FLAGS}
        notes.append(
            'simulated in the layout (engine = "sim"): exported as the vLLM it simulates'
            + (f"; the sim's own flags left out: {', '.join(dropped)}" if dropped else "")
        )
    env = {}
    for name, value in spec.env.items():
        if SECRET_ENV.search(name):
            secrets[name] = name
        else:
            env[name] = value
    plain = replace(spec, engine="vllm", command=spec.command if spec.engine == "vllm" else None, flags=flags)
    for label, value in (("model", spec.model), *((f"env.{k}", v) for k, v in env.items())):
        if has_vars(value):
            warnings.append(
                f"{spec.name}: {label} is {value!r}: its variable is unset, so the reference is written"
            )
    return Exported(spec=plain, original=spec, secrets=secrets, env=env, notes=tuple(notes))


_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def dns_name(name: str, taken: set[str]) -> str:
    """`name` as an RFC 1035 label (lower case, digits, '-', at most 63, starting with a letter: what every
    Kubernetes API server takes for a Service, not only those from 1.36 on), unique among `taken`."""
    base = _NOT_DNS.sub("-", name.lower()).strip("-")[:55] or "vllm"
    if not base[0].isalpha():
        base = f"vllm-{base}"[:55]
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    taken.add(candidate)
    return candidate


def unique_names(names: Iterable[str]) -> dict[str, str]:
    """Each name -> its `dns_name`, unique across all of them, in order: `a.b`, `a_b` and `A-B` become
    `a-b`, `a-b-2` and `a-b-3`. Taken over the whole layout, so an instance's name does not depend on
    which others are exported with it (`--only`)."""
    taken: set[str] = set()
    return {name: dns_name(name, taken) for name in names}
