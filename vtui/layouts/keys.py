"""The layout schema's key tables (which keys each table takes, engines, restart modes, limits) and the
value rules that need no `Checker`: names, hosts, URLs, the session's notification and exporter keys,
and the did-you-mean and quoting of messages."""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import urllib.parse
from collections.abc import Iterable

from vtui.core.backends import BACKENDS as PIN_VARS

TOP_KEYS = ("session", "defaults", "instance")
NOTIFY_KEYS = ("on_event", "webhook", "on_event_cooldown")  # supervisor.notify: tell someone about events
EXPORTER_KEYS = ("metrics_port", "metrics_host")  # service.exporter: the session's Prometheus /metrics
SESSION_KEYS = ("name", "allow_gpu_sharing", "gpu_hour_price", "gpu_memory_gib", *NOTIFY_KEYS, *EXPORTER_KEYS)
INSTANCE_KEYS = (
    "name",
    "model",
    "engine",
    "gpus",
    "port",
    "host",
    "env",
    "flags",
    "command",
    "restart",
    "max_restarts",
    "backoff",
    "backoff_max",
    "start_stagger",
    "start_timeout",
    "url",
    "api_key",
    "replicas",
    "router_port",
    "router_metrics_port",
    "replica_gpus",
    "restart_unhealthy_after",
    "restart_stuck_after",
    "sleep_mode",
    "idle_sleep_after",
    "force_start",
    "backend",
)
POLICY_SECONDS = ("restart_unhealthy_after", "restart_stuck_after", "idle_sleep_after")  # 0: off
SECONDS_KEYS = ("backoff", "backoff_max", "start_stagger", "start_timeout", *POLICY_SECONDS)
PER_INSTANCE_KEYS = ("name", "port", "url", "router_port", "router_metrics_port", "replica_gpus")
DEFAULT_KEYS = tuple(k for k in INSTANCE_KEYS if k not in PER_INSTANCE_KEYS)
ENGINES = ("vllm", "sim", "external")
BACKENDS = tuple(PIN_VARS)  # core.backends: which variables pin an instance's gpus
# What an attached server (engine = "external") takes: the rest is about launching one.
EXTERNAL_KEYS = ("name", "engine", "url", "api_key", "model")
MAX_REPLICAS = 64
RESTART_MODES = ("never", "on-failure", "always")
TOP_LEVEL_FLAGS = ("host", "port", "model")  # set as the instance's own keys, never in flags
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
MAX_NAME = 64  # an instance name lands in file names (logs, run records) and the VTUI_INSTANCE marker
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def valid_host(host: str) -> bool:
    """An IP address (v4 or v6) or a DNS name (RFC 1123 labels, 253 characters at most)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_DNS_LABEL.match(label) for label in name.split("."))


def name_problem(value: object) -> str | None:
    """Why `value` cannot be an instance name, None when it can."""
    if not isinstance(value, str) or not _NAME.match(value):
        return f"expected a name of letters, digits, '_', '.', '-' (starting with a letter or digit); got {q(value)}"
    if len(value) > MAX_NAME:
        return f"a name is at most {MAX_NAME} characters (it lands in file names); got {len(value)}"
    return None


def split_url(url: str) -> tuple[str, int]:
    """(host, port) of an attached server's URL (checked by `url_problem`); 80/443 when not written."""
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be an attached server's base URL (http(s)://host[:port], no path), or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc}): {q(url)}"
    if parts.scheme not in ("http", "https"):
        return f'expected http:// or https://, like "http://gpu2:8000", got {q(url)}'
    if parts.username or parts.password:
        return 'credentials do not go in the URL; set api_key = "${VLLM_API_KEY}"'
    if not parts.hostname or not valid_host(parts.hostname):
        return f"expected a host (an IP address or a DNS name) in the URL, got {q(url)}"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f'expected the server\'s base URL (no path), like "http://gpu2:8000", got {q(url)}'
    if port == 0:
        return f"expected a port 1-65535 in the URL, got {q(url)}"
    return None


SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)


def did_you_mean(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f'; did you mean "{close[0]}"?' if close else ""


def q(value: object) -> str:
    """A value as the user wrote it in TOML: strings quoted, booleans lower case; a long one cut short."""
    if isinstance(value, str):
        if len(value) > 80:
            return json.dumps(value[:40], ensure_ascii=False) + f"… ({len(value)} characters)"
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (list, int, float)):
        text = json.dumps(value, default=str)  # dates and times (TOML has them) as written
        return text if len(text) <= 80 else f"{text[:40]}… ({len(text)} characters)"
    return repr(value)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def exporter_value(key: str, value: object) -> tuple[object, str | None]:
    """`[session] metrics_port` / `metrics_host`'s value, or the problem with it (service.exporter)."""
    if key == "metrics_port":
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
            return value, None
        return (
            None,
            f"expected a TCP port 1-65535 for the session's Prometheus /metrics, e.g. 9400, got {q(value)}",
        )
    if isinstance(value, str) and (value in ("0.0.0.0", "::") or valid_host(value)):
        return value, None
    return (
        None,
        f'expected an IP address or a host name to bind /metrics to, like "127.0.0.1", got {q(value)}',
    )


def notify_value(key: str, value: object) -> tuple[object, str | None]:
    """A [session] notification key's normalised value, or the problem with it (supervisor.notify)."""
    if key == "on_event":
        if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            return tuple(value), None
        return (
            None,
            f'expected a command as a non-empty list of strings, e.g. ["notify-send", "vtui"], got {q(value)}',
        )
    if key == "webhook":
        if isinstance(value, str) and re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            return value, None
        return None, f"expected an http:// or https:// URL, got {q(value)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:  # on_event_cooldown
        return float(value), None
    return None, f"expected a number of seconds >= 0 (0: no cooldown), got {q(value)}"
