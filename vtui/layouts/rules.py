"""The layout schema's rules: per-key checks, `${VAR}` expansion and cross-instance checks.

`Checker` collects every problem and warning (line, dotted key, message) instead of stopping at the
first, and returns only valid, normalised values so later checks still run on the rest.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from vtui.core import flagspec
from vtui.layouts.text import LineIndex, expand_vars, has_vars

TOP_KEYS = ("session", "defaults", "instance")
NOTIFY_KEYS = ("on_event", "webhook", "on_event_cooldown")  # core.notify: tell someone about events
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
    "replica_gpus",
    "restart_unhealthy_after",
    "restart_stuck_after",
    "sleep_mode",
    "idle_sleep_after",
    "force_start",
)
POLICY_SECONDS = ("restart_unhealthy_after", "restart_stuck_after", "idle_sleep_after")  # 0: off
SECONDS_KEYS = ("backoff", "backoff_max", "start_stagger", "start_timeout", *POLICY_SECONDS)
PER_INSTANCE_KEYS = ("name", "port", "url", "router_port", "replica_gpus")
DEFAULT_KEYS = tuple(k for k in INSTANCE_KEYS if k not in PER_INSTANCE_KEYS)
ENGINES = ("vllm", "sim", "external")
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


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Checker:
    """Collects problems/warnings for one file, and the `${VAR}` templates its values came from (they go
    onto the `Layout`, so saving writes the references back)."""

    def __init__(
        self, file: str, text: str, unset_ok: bool = False, flags: flagspec.FlagTable | None = None
    ) -> None:
        self.file = file
        self.flags = flags  # the vllm serve flags to check against (None: the bundled 0.32 schema)
        # True for commands that start nothing (down, ps, logs): an unset `${VAR}` (a secret's, typically)
        # is left as written instead of being a problem, since stopping and listing never need it
        self.unset_ok = unset_ok
        self.unresolved: set[str] = set()  # dotted keys left as written (unset_ok)
        self.index = LineIndex(text)
        # (instance name or "" for [defaults], key path) -> (expanded value, raw template)
        self.templates: dict[tuple[str, tuple], tuple[str, str]] = {}
        self.problems: list[tuple[int | None, str, str]] = []
        self.warnings: list[tuple[int | None, str, str]] = []
        self._bad: set[str] = set()

    q = staticmethod(q)

    def problem(self, key: str, message: str) -> None:
        self.problems.append((self.index.line_of(key), key, message))
        self._bad.add(key)

    def warn(self, key: str, message: str) -> None:
        self.warnings.append((self.index.line_of(key), key, message))

    def unknown(self, dotted: str, word: str, options: Iterable[str]) -> None:
        self.problem(dotted, "unknown key" + did_you_mean(word, options))

    def bad_keys(self, prefix: str) -> set[str]:
        return {k[len(prefix) + 1 :].split(".")[0] for k in self._bad if k.startswith(prefix + ".")}

    # -- per table ---------------------------------------------------------------------------------
    def table_fields(
        self, prefix: str, raw: object, allowed: tuple[str, ...], scope: str
    ) -> dict[str, object]:
        """The valid, normalised keys of one [defaults] or [[instance]] table."""
        if not isinstance(raw, dict):
            self.problem(prefix, "expected a table")
            return {}
        out: dict[str, object] = {}
        for key, value in raw.items():
            dotted = f"{prefix}.{key}"
            if key not in allowed:
                if key in PER_INSTANCE_KEYS:
                    self.problem(dotted, f'"{key}" differs per instance; set it in each [[instance]]')
                else:
                    self.unknown(dotted, key, allowed)
                continue
            ok, normalised = self._field(prefix, key, value, scope)
            if ok:
                out[key] = normalised
        return out

    def _expand(self, dotted: str, scope: str, path: tuple, text: str) -> str | None:
        if not has_vars(text):
            return text
        expanded, missing = expand_vars(text)
        if missing and self.unset_ok:
            self.unresolved.add(dotted)
            self.templates[(scope, path)] = (text, text)
            return text
        if missing:
            names = ", ".join("${" + name + "}" for name in dict.fromkeys(missing))
            self.problem(dotted, f"undefined environment variable {names} (export it before running vtui)")
            return None
        self.templates[(scope, path)] = (expanded, text)
        return expanded

    def _field(self, prefix: str, key: str, value: object, scope: str) -> tuple[bool, object]:
        dotted = f"{prefix}.{key}"
        bad = self.problem
        if key == "name":
            problem = name_problem(value)
            if problem is None:
                return True, value
            bad(dotted, problem)
        elif key == "host":
            if isinstance(value, str) and valid_host(value):
                return True, value
            shown = q(value) if not isinstance(value, str) or len(value) <= 80 else q(value[:40]) + "…"
            bad(
                dotted,
                f"expected an IP address or a DNS name (like 127.0.0.1, ::1, gpu-box.lan), got {shown}",
            )
        elif key == "model":
            if isinstance(value, str) and value.strip():
                expanded = self._expand(dotted, scope, (key,), value)
                return expanded is not None, expanded
            bad(dotted, f"expected a non-empty string, got {q(value)}")
        elif key == "engine":
            if value in ENGINES:
                return True, value
            bad(
                dotted,
                f'expected "vllm", "sim" or "external", got {q(value)}' + did_you_mean(str(value), ENGINES),
            )
        elif key == "restart":
            if value in RESTART_MODES:
                return True, value
            bad(
                dotted,
                "expected one of never, on-failure, always; got "
                + q(value)
                + did_you_mean(str(value), RESTART_MODES),
            )
        elif key in ("port", "router_port"):
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
                return True, value
            bad(dotted, f"expected a port number 1-65535, got {q(value)}")
        elif key == "max_restarts":
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return True, value
            bad(dotted, f"expected a whole number >= 0, got {q(value)}")
        elif key in ("sleep_mode", "force_start"):
            if isinstance(value, bool):
                return True, value
            bad(dotted, f"expected true or false, got {q(value)}")
        elif key in SECONDS_KEYS:
            positive = key in ("backoff", "backoff_max")
            if _number(value) and (value > 0 if positive else value >= 0):  # type: ignore[operator]
                return True, float(value)  # type: ignore[arg-type]
            hint = {"start_timeout": " (0: no limit)"}.get(key, " (0: off)" if key in POLICY_SECONDS else "")
            bad(dotted, f"expected seconds {'> 0' if positive else '>= 0'}{hint}, got {q(value)}")
        elif key == "gpus":
            return self._gpus(dotted, value)
        elif key == "replicas":
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_REPLICAS:
                return True, value
            bad(dotted, f"expected a number of copies 1-{MAX_REPLICAS}, got {q(value)}")
        elif key == "replica_gpus":
            return self._replica_gpus(dotted, value)
        elif key == "url":
            return self._url(dotted, value, scope)
        elif key == "api_key":
            if not isinstance(value, str) or not value:
                bad(dotted, f'expected a string like "${{VLLM_API_KEY}}", got {q(value)}')
                return False, None
            expanded = self._expand(dotted, scope, (key,), value)
            if expanded is not None and not has_vars(value):
                self.warn(dotted, 'API key written literally; use "${VLLM_API_KEY}" and export it')
            return expanded is not None, expanded
        elif key == "command":
            return self._command(dotted, value, scope)
        elif key == "env":
            return self._env(dotted, value, scope)
        elif key == "flags":
            return self._flags(prefix, value, scope)
        return False, None

    def _gpus(self, dotted: str, value: object) -> tuple[bool, object]:
        if not isinstance(value, list):
            self.problem(dotted, f"expected a list of GPU indices like [0, 1], got {q(value)}")
            return False, None
        if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in value):
            self.problem(dotted, f"expected GPU indices (whole numbers >= 0), got {q(value)}")
            return False, None
        duplicates = sorted({g for g in value if value.count(g) > 1})
        if duplicates:
            self.problem(dotted, f"GPU {', '.join(map(str, duplicates))} listed twice")
            return False, None
        return True, list(value)

    def _replica_gpus(self, dotted: str, value: object) -> tuple[bool, object]:
        if not (isinstance(value, list) and value and all(isinstance(v, list) and v for v in value)):
            self.problem(
                dotted, f"expected one list of GPU indices per replica, like [[0], [1]], got {q(value)}"
            )
            return False, None
        flat = [g for group in value for g in group]
        if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in flat):
            self.problem(dotted, f"expected GPU indices (whole numbers >= 0), got {q(value)}")
            return False, None
        duplicates = sorted({g for g in flat if flat.count(g) > 1})
        if duplicates:
            self.problem(dotted, f"GPU {', '.join(map(str, duplicates))} given to two replicas")
            return False, None
        return True, [list(group) for group in value]

    def _url(self, dotted: str, value: object, scope: str) -> tuple[bool, object]:
        if not isinstance(value, str) or not value:
            self.problem(dotted, f'expected a URL like "http://gpu2:8000", got {q(value)}')
            return False, None
        expanded = self._expand(dotted, scope, ("url",), value)
        if expanded is None or dotted in self.unresolved:
            return expanded is not None, expanded
        problem = url_problem(expanded)
        if problem:
            self.problem(dotted, problem)
            return False, None
        return True, expanded.rstrip("/")

    def _command(self, dotted: str, value: object, scope: str) -> tuple[bool, object]:
        if not (isinstance(value, list) and value and all(isinstance(p, str) and p for p in value)):
            self.problem(
                dotted, f'expected a list of strings like ["~/venvs/vllm/bin/vllm", "serve"], got {q(value)}'
            )
            return False, None
        parts = [self._expand(dotted, scope, ("command", i), part) for i, part in enumerate(value)]
        return None not in parts, parts

    def _env(self, dotted: str, value: object, scope: str) -> tuple[bool, object]:
        if not isinstance(value, dict):
            self.problem(dotted, f'expected a table of NAME = "value", got {q(value)}')
            return False, None
        out: dict[str, str] = {}
        for name, item in value.items():
            key = f"{dotted}.{name}"
            if not isinstance(item, str):
                hint = f' (quote it: "{item}")' if _number(item) else ""
                self.problem(key, f"expected a string, got {q(item)}{hint}")
                continue
            expanded = self._expand(key, scope, ("env", name), item)
            if expanded is not None:
                out[name] = expanded
                if SECRET_ENV.search(name) and item and not has_vars(item):
                    self.warn(key, f'looks like a secret written literally; use "${{{name}}}" and export it')
        return True, out

    def _flags(self, prefix: str, value: object, scope: str) -> tuple[bool, object]:
        dotted = f"{prefix}.flags"
        if not isinstance(value, dict):
            self.problem(dotted, f"expected a table of vllm serve flags, got {q(value)}")
            return False, None
        out: dict[str, object] = {}
        for name, item in value.items():
            key = f"{dotted}.{name}"
            if name in TOP_LEVEL_FLAGS:
                self.problem(key, f'set "{name}" with the top-level key {prefix}.{name}, not in flags')
                continue
            canonical = flagspec.canonical_name(name, self.flags)
            if canonical is None or name.startswith("-"):
                hint = flagspec.suggest(name, self.flags)
                if hint and name.lstrip("-").startswith("no-") and hint == name.lstrip("-")[3:]:
                    self.problem(key, f"unknown flag; write {hint} = false instead")
                else:
                    self.problem(
                        key,
                        "unknown flag"
                        + (f'; did you mean "{hint}"?' if hint else " (not a vllm serve option)"),
                    )
                continue
            if canonical != name:
                self.problem(key, f'"{name}" is an alias; write "{canonical}"')
                continue
            item = self._expand_flag(key, scope, name, item)
            if item is None:
                continue
            if key in self.unresolved:
                out[name] = item  # `${VAR}` as written: nothing to validate until it is set
                continue
            problem = flagspec.validate_flag(name, item, self.flags)
            if problem:
                self.problem(key, problem)
                continue
            spec = flagspec.flag_spec(name, self.flags)
            if spec is not None and spec.type == "json" and isinstance(item, (dict, list)):
                item = json.dumps(item, separators=(",", ":"))  # vLLM reads JSON text; argv needs a string
            out[name] = item
            raw = value[name]
            if name == "api-key" and not any(has_vars(r) for r in (raw if isinstance(raw, list) else [raw])):
                self.warn(key, 'API key written literally; use "${VLLM_API_KEY}" and export it')
        return True, out

    def _expand_flag(self, key: str, scope: str, name: str, item: object) -> object:
        if isinstance(item, str):
            return self._expand(key, scope, ("flags", name), item)
        if isinstance(item, list):
            parts = [
                self._expand(key, scope, ("flags", name, i), p) if isinstance(p, str) else p
                for i, p in enumerate(item)
            ]
            return None if any(p is None for p in parts) else parts
        return item

    # -- one instance, its own keys against its engine ------------------------------------------------
    def instance_shape(self, key: str, own: Mapping[str, object], fields: dict[str, object]) -> None:
        """An attached server takes only a url (its host and port come from it); replicas take their
        keys only with replicas > 1. `own`: the keys the [[instance]] sets itself; `fields`: merged with
        [defaults], completed here (an external's host and port, from its url)."""
        engine = fields.get("engine", "vllm")
        if engine == "external":
            for name in own:
                if name in ("host", "port"):
                    self.problem(f"{key}.{name}", f'engine = "external" takes its {name} from url; drop it')
                elif name not in EXTERNAL_KEYS:
                    value = own[name]
                    first = next(iter(value), None) if isinstance(value, dict) else None
                    self.problem(
                        f"{key}.{name}" + (f".{first}" if first is not None else ""),
                        'does not apply to engine = "external" (a server vtui attaches to, never starts)'
                        + did_you_mean(name, [k for k in EXTERNAL_KEYS if k not in own]),
                    )
            url = fields.get("url")
            if isinstance(url, str) and f"{key}.url" not in self.unresolved:
                fields["host"], fields["port"] = split_url(url)
            for launched in ("gpus", "flags", "env", "command", "replicas", "replica_gpus", "router_port"):
                fields.pop(launched, None)  # inherited from [defaults]: about launching, not attaching
            return
        for name in ("url", "api_key"):
            if name in own:
                hint = (
                    ' (the server\'s own key: flags.api-key = "${VLLM_API_KEY}")' if name == "api_key" else ""
                )
                self.problem(f"{key}.{name}", f'only for engine = "external"{hint}')
        replicas = fields.get("replicas", 1)
        if not isinstance(replicas, int) or replicas <= 1:
            for name in ("router_port", "replica_gpus"):
                if name in own:
                    self.problem(f"{key}.{name}", "only with replicas > 1")
            return
        listed = fields.get("replica_gpus")
        if isinstance(listed, list):
            if "gpus" in fields:
                self.problem(f"{key}.replica_gpus", "set gpus or replica_gpus, not both")
            elif len(listed) != replicas:
                self.problem(
                    f"{key}.replica_gpus", f"lists {len(listed)} GPU set(s) for replicas = {replicas}"
                )
        gpus = fields.get("gpus")
        if isinstance(gpus, list) and gpus and len(gpus) % replicas:
            self.problem(
                f"{key}.gpus",
                f"{len(gpus)} GPU(s) do not split into replicas = {replicas} equal sets; list them per "
                "replica with replica_gpus = [[0], [1]]",
            )
        port = fields.get("port")
        if isinstance(port, int) and port + replicas - 1 > 65535:
            self.problem(f"{key}.replicas", f"replica ports {port}..{port + replicas - 1} go past 65535")

    # -- across instances ------------------------------------------------------------------------
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
            if _number(backoff) and _number(cap) and cap < backoff:  # type: ignore[operator]
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
    """A [session] notification key's normalised value, or the problem with it (core.notify)."""
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
