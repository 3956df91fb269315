"""`vtui discover`'s search: vLLM servers on this machine that no vtui session runs.

A process scan (psutil) for `vllm serve …` (and vLLM's `vllm.entrypoints` API servers) and `vtui sim …`,
skipping every process that carries a session's `VTUI_INSTANCE` marker (launched by vtui: some session
supervises it already); then each one's listening TCP ports, probed at `/metrics` for `vllm:` families
(an API server answers there; its other ports are not vLLM's). A server several API-server processes
share (`--api-server-count`) is listed once, by port.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil

__all__ = ["Found", "discover", "kind_of", "model_of", "name_for"]

MARKER = "VTUI_INSTANCE"


@dataclass(frozen=True)
class Found:
    """One unmanaged vLLM server: where it answers and what runs it."""

    url: str
    port: int
    pid: int
    kind: str  # "vllm" or "sim" (vtui's simulated engine)
    model: str | None
    command: str
    families: int  # distinct `vllm:` metric families its /metrics showed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kind_of(cmdline: Sequence[str]) -> str | None:
    """ "vllm" for `vllm serve …` / `python -m vllm.entrypoints…`, "sim" for `vtui sim …` /
    `python -m vtui.sim …`, None for anything else (an EngineCore's title, a client)."""
    words = list(cmdline)
    for i, word in enumerate(words):
        base = os.path.basename(word)
        after = words[i + 1] if i + 1 < len(words) else ""
        if base == "vllm" and after == "serve":
            return "vllm"
        if word.startswith("vllm.entrypoints") and ("serve" in words or "api_server" in word):
            return "vllm"
        if word == "vtui.sim" or (base == "vtui" and after == "sim"):
            return "sim"
    return None


def model_of(cmdline: Sequence[str]) -> str | None:
    """The model a server command line names: `--model X`, else the first word after serve / sim."""
    words = list(cmdline)
    for i, word in enumerate(words):
        if word == "--model" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--model="):
            return word.split("=", 1)[1]
    for i, word in enumerate(words):
        if word in ("serve", "sim", "vtui.sim") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            return words[i + 1]
    return None


def name_for(found: Found, taken: Iterable[str]) -> str:
    """A layout instance name for it: the model's last path part and the port (`qwen3-0.6b-8001`),
    unique among `taken`, valid as an instance name (letters, digits, _ . -; 64 at most)."""
    base = os.path.basename((found.model or found.kind).rstrip("/")) or found.kind
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-._").lower()[:48] or found.kind
    name = f"{slug}-{found.port}"
    used = set(taken)
    n = 2
    candidate = name
    while candidate in used:
        candidate = f"{name}-{n}"
        n += 1
    return candidate


def _managed(proc: psutil.Process) -> bool:
    try:
        return MARKER in proc.environ()
    except (psutil.Error, OSError):
        return False  # another user's process: no session of ours launched it


def _listening(proc: psutil.Process) -> list[tuple[str, int]]:
    try:
        conns = proc.net_connections(kind="inet") if hasattr(proc, "net_connections") else proc.connections()
    except (psutil.Error, OSError):
        return []
    return sorted(
        {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr},
        key=lambda a: a[1],
    )


def _url(ip: str, port: int) -> str:
    if ip in ("0.0.0.0", "", "::"):
        ip = "127.0.0.1"
    return f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}"


def vllm_families(url: str, timeout: float = 2.0) -> int:
    """How many distinct `vllm:` families `url/metrics` shows (0: none, or no answer)."""
    import httpx

    try:
        # plain http (`_url`): no CA bundle to load (19 ms of CPU per client that may verify)
        response = httpx.get(
            f"{url}/metrics", timeout=timeout, trust_env=False, verify=url.startswith("https://")
        )
    except (httpx.HTTPError, OSError):
        return 0
    if response.status_code != 200:
        return 0
    names = set()
    for line in response.text.splitlines():
        if line.startswith("vllm:"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0].removesuffix("_bucket"))
    return len(names)


def discover(timeout: float = 2.0) -> list[Found]:
    """Every unmanaged vLLM (or vtui sim) server on this machine, by port."""
    candidates: list[tuple[psutil.Process, str, list[str]]] = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info.get("cmdline") or []
        except (psutil.Error, OSError):
            continue
        kind = kind_of(cmdline)
        if kind is not None and proc.pid != os.getpid() and not _managed(proc):
            candidates.append((proc, kind, cmdline))
    probes: list[tuple[psutil.Process, str, list[str], str, int]] = []
    seen: set[int] = set()
    for proc, kind, cmdline in candidates:
        for ip, port in _listening(proc):
            if port not in seen:
                seen.add(port)
                probes.append((proc, kind, cmdline, _url(ip, port), port))
    if not probes:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(probes))) as pool:
        counts = list(pool.map(lambda p: vllm_families(p[3], timeout), probes))
    found = [
        Found(url, port, proc.pid, kind, model_of(cmdline), " ".join(cmdline)[:300], count)
        for (proc, kind, cmdline, url, port), count in zip(probes, counts, strict=True)
        if count > 0
    ]
    return sorted(found, key=lambda f: f.port)
