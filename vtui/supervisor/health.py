"""The one /health probe of an instance, launched or attached, http or https (`HealthProbe`): it
decides which client GETs the URL and says what came back as a `Probe` (a status, or why none).

- the fast fetcher where one is given and takes the URL (the session supervisor's lean keep-alive
  client, `service.probes.LeanFetch`: plain http, no key to send);
- else httpx: for an instance vtui launched, plain http to its own process (no TLS state, no
  proxies); for an attached server, TLS verified, the environment's proxies, its API key as a bearer
  token.

The supervisor's launched instances are probed through the launcher's `health` (the seam tests fake),
which `OsLauncher` answers with its `HealthProbe`; attached servers through the same `HealthProbe`.
"""

from __future__ import annotations

import contextlib

from vtui.core.model import InstanceSpec
from vtui.supervisor.attached import Probe, is_attached, no_answer
from vtui.telemetry.scrape import Fetch, FetchFailed, HttpxFetch

__all__ = ["HealthProbe"]


class HealthProbe:
    """GET /health of any instance (see the module's docstring); one client of each kind per event
    loop, kept (keep-alive; the CA bundle is loaded once)."""

    def __init__(self, *, timeout: float = 2.0, fast: Fetch | None = None) -> None:
        self.timeout = timeout
        self.fast = fast
        self.own = HttpxFetch(verify=False, trust_env=False, max_keepalive=64)  # our own processes
        self.attached = HttpxFetch()  # someone else's server: TLS verified, proxies as configured

    def fetcher(self, spec: InstanceSpec) -> Fetch:
        """Which client GETs `spec`'s /health."""
        key = spec.api_key if is_attached(spec) else None
        if self.fast is not None and self.fast.handles(spec.health_url, key):
            return self.fast
        return self.attached if is_attached(spec) else self.own

    async def probe(self, spec: InstanceSpec) -> Probe:
        """The status /health answered, or None and why no answer came."""
        key = spec.api_key if is_attached(spec) else None
        try:
            answer = await self.fetcher(spec).get(spec.health_url, timeout=self.timeout, api_key=key)
        except FetchFailed as exc:
            if exc.timed_out:
                return Probe(None, f"no answer within {self.timeout:g} s")
            return Probe(None, no_answer(exc.__cause__ or exc))
        return Probe(answer.status)

    async def healthy(self, spec: InstanceSpec) -> bool:
        """/health answered 200 (connection refused while vLLM is still starting is normal)."""
        return (await self.probe(spec)).status == 200

    async def aclose(self) -> None:
        """Close the running loop's clients (the fast fetcher's pool is its owner's)."""
        for fetch in (self.own, self.attached):
            with contextlib.suppress(Exception):
                await fetch.aclose()
