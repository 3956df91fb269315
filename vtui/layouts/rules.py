"""The layout schema's rules: per-key checks, `${VAR}` expansion and cross-instance checks.

`Checker` collects every problem and warning (line, dotted key, message) instead of stopping at the
first, and returns only valid, normalised values so later checks still run on the rest.

The key tables and the rules that need no `Checker` are in `layouts.keys`; the checks across instances
in `layouts.crosscheck`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from vtui.core import flagspec
from vtui.core.model import KeyPath
from vtui.layouts.crosscheck import CrossCheck
from vtui.layouts.keys import (
    BACKENDS,
    ENGINES,
    EXTERNAL_KEYS,
    MAX_REPLICAS,
    PER_INSTANCE_KEYS,
    POLICY_SECONDS,
    RESTART_MODES,
    SECONDS_KEYS,
    SECRET_ENV,
    TOP_LEVEL_FLAGS,
    did_you_mean,
    is_number,
    name_problem,
    q,
    split_url,
    url_problem,
    valid_host,
)
from vtui.layouts.text import LineIndex, expand_vars, has_vars


class Checker(CrossCheck):
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
        self.templates: dict[tuple[str, KeyPath], tuple[str, str]] = {}
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

    def _expand(self, dotted: str, scope: str, path: KeyPath, text: str) -> str | None:
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
        elif key == "backend":
            if value in BACKENDS:
                return True, value
            bad(
                dotted,
                f"expected one of {', '.join(BACKENDS)}; got {q(value)}" + did_you_mean(str(value), BACKENDS),
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
        elif key in ("port", "router_port", "router_metrics_port"):
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
            if is_number(value) and (value > 0 if positive else value >= 0):  # type: ignore[operator]
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
                hint = f' (quote it: "{item}")' if is_number(item) else ""
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
                elif isinstance(self.flags, flagspec.GuessedFlags) and not name.startswith("-"):
                    # the table only stands in for the target vLLM's own, which may have the flag
                    expanded = self._expand_flag(key, scope, name, item)
                    if expanded is None:
                        continue  # its `${VAR}` problem is reported
                    kept = _passable(expanded)
                    if kept is None:
                        self.problem(key, f"unknown flag, with a value vllm serve cannot take: {q(item)}")
                        continue
                    out[name] = kept
                    self.warn(
                        key,
                        "unknown flag"
                        + (f' (did you mean "{hint}"?)' if hint else "")
                        + f", passed on as written: {self.flags.why}",
                    )
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
            launched_keys = ("gpus", "flags", "env", "command", "replicas", "replica_gpus", "router_port")
            for launched in (*launched_keys, "router_metrics_port"):
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
            for name in ("router_port", "router_metrics_port", "replica_gpus"):
                if name in own:
                    self.problem(f"{key}.{name}", "only with replicas > 1")
            return
        if "router_metrics_port" in own and fields.get("router_port") is None:
            self.problem(
                f"{key}.router_metrics_port", "only with router_port (the router it is the metrics port of)"
            )
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


def _passable(value: object) -> object:
    """A value of a flag no schema describes as `vllm serve` can take it (`core.model.flag_to_args`): a
    scalar, a list of scalars, or a table as JSON text; None for anything else (a date, nested lists)."""
    plain = (bool, int, float, str)
    if isinstance(value, dict):
        try:
            return json.dumps(value, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
    if isinstance(value, list):
        return value if all(isinstance(p, plain) for p in value) else None
    return value if isinstance(value, plain) else None
