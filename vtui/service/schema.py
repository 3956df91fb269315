"""What the socket API accepts: the limits on a request (its body's size, its JSON's depth) and one
declarative schema per route for its body and its query. A request that does not fit is refused with a
one-line message naming the field (`BadRequest`: 400, or the status given); an unknown instance is a
`NotFound` (404). `ROUTES` is the one table of the API: each route's handler and schemas. Flag values
(`/pending`, `/restart`) are checked as the layout checks them (`check_flags`: the same flag table and
`flagspec.validate_flag`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vtui.core import flagspec
from vtui.core.pending import check_edits
from vtui.layouts.errors import shown

MAX_BODY = 4 << 20  # bytes of a request body (the largest real one, /logs' `before` or /pending, is KBs)
MAX_DEPTH = 32  # nesting of a body's JSON (a flag table's JSON value is two or three deep)
MAX_LOG_LINES = 100_000  # `n` of /logs
MAX_NAMES = 10_000  # names in one request


class BadRequest(Exception):
    """A request refused: `status` (400 unless said), a one-line message, and its problems."""

    def __init__(self, message: str, status: int = 400, problems: Iterable[str] = ()) -> None:
        # one line of sane length whatever the request held (a field named "\n", a 5000-character key)
        message = shown(message, 400)
        super().__init__(message)
        self.status = status
        self.problems = [shown(p, 400) for p in problems] or [message]


class NotFound(BadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, 404)


# -- field kinds: each a check returning None or what is wrong ---------------------------------------
Check = Callable[[Any], str | None]


_TYPE_NAMES: dict[type, str] = {dict: "object", list: "list", str: "string", bool: "boolean"}


def _type_name(value: Any) -> str:
    return "null" if value is None else _TYPE_NAMES.get(type(value), type(value).__name__)


def string(value: Any) -> str | None:
    return None if isinstance(value, str) else f"expected a string, got {_type_name(value)}"


def label(value: Any) -> str | None:
    """A short printable word or two: what `ps` and the dashboard show for an operation."""
    if not isinstance(value, str):
        return f"expected a string, got {_type_name(value)}"
    ok = 0 < len(value) <= 32 and value.isprintable()
    return None if ok else "expected 1 to 32 printable characters"


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {_type_name(value)}"


def integer(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"expected an integer, got {_type_name(value)}"
        return None if low <= value <= high else f"expected {low} to {high}, got {value}"

    return check


def seconds(value: Any) -> str | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"expected seconds (a number), got {_type_name(value)}"
    return (
        None if math.isfinite(value) and 0 <= value <= 86400 * 365 else f"expected 0 to a year, got {value}"
    )


def strings(limit: int = MAX_NAMES, empty: bool = True) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"expected a list of strings, got {_type_name(value)}"
        if len(value) > limit:
            return f"at most {limit} items, got {len(value)}"
        return None if value or empty else "expected at least one"

    return check


def string_map(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return "expected an object of strings"
    return None


def flag_map(value: Any) -> str | None:
    try:
        check_edits(value, "")
    except ValueError as exc:
        return str(exc).removeprefix(": ")  # ".flag: why" names the flag (Schema.check)
    return None


def obj(value: Any) -> str | None:
    return None if isinstance(value, dict) else f"expected an object, got {_type_name(value)}"


def optional(check: Check) -> Check:
    def maybe(value: Any) -> str | None:
        return None if value is None else check(value)

    return maybe


@dataclass(frozen=True)
class Schema:
    """A body's fields (name -> check) and which must be there."""

    fields: Mapping[str, Check]
    required: frozenset[str] = frozenset()

    def check(self, body: Mapping[str, Any], what: str = "") -> None:
        for key in body:
            if key not in self.fields:
                raise BadRequest(f"{what}{key}: unknown field (expected {', '.join(self.fields) or 'none'})")
        for key in sorted(self.required - body.keys()):
            raise BadRequest(f"{what}{key}: required")
        for key, value in body.items():
            problem = self.fields[key](value)
            if problem:  # one starting with "." names a part of the field: flags.max-num-seqs: why
                raise BadRequest(f"{what}{key}{problem}" if problem[0] == "." else f"{what}{key}: {problem}")


def _schema(required: Iterable[str] = (), **fields: Check) -> Schema:
    return Schema(fields, frozenset(required))


NAMES = optional(strings())
NAME = string
LABEL = label  # what an operation is called in `ps` ("fix", "rollback", "tune trial")
EMPTY = _schema()


@dataclass(frozen=True)
class Route:
    """One route of the socket API: the `handlers.Routes` method that answers it (called with the query
    and the body once both fit), its body's schema and its query's."""

    handler: str
    body: Schema = EMPTY
    query: Schema = EMPTY


# The one table of the socket API: (method, path) -> its handler and schemas. `GET /feed` is the stream
# (`transport`), answered outside `handlers`.
ROUTES: dict[tuple[str, str], Route] = {
    # session, supervisor pid, layout file, versions; without brief=1 the instance snapshots too
    ("GET", "/status"): Route("_status_route", query=_schema(brief=string)),
    # the log's last n lines (across rotations)
    ("GET", "/logs"): Route("_logs_route", query=_schema(["name"], name=string, n=string)),
    ("GET", "/events"): Route("_events_route", query=_schema(n=string)),  # the recent events
    ("GET", "/pids"): Route("_pids_route"),  # every live process of each running instance
    # the instance's metrics samples (the last n; fields=points: all but the newest cut to a plot's
    # figures, the newest as `latest`)
    ("GET", "/history"): Route(
        "_history_route", query=_schema(["name"], name=string, n=string, fields=string)
    ),
    # NDJSON: a hello (the full status), then events, statuses, samples, facts, pending edits
    ("GET", "/feed"): Route("_feed_route"),
    # run this layout file from now on (same session); env: the values of its ${VAR}s
    ("POST", "/layout"): Route("_set_layout", _schema(["path"], path=string, env=optional(string_map))),
    # preflight + launch, answered once spawned (409: preflight problems, the GPU memory check's
    # included unless force)
    ("POST", "/start"): Route("_start_route", _schema(names=NAMES, force=optional(boolean))),
    # vLLM sleep mode (loopback binds, `sleep_mode = true`; 409: refused) and its wake, answered once
    # READY again
    ("POST", "/sleep"): Route("_sleep_route", _schema(["name"], name=NAME, level=integer(1, 2))),
    ("POST", "/wake"): Route("_wake_route", _schema(["name"], name=NAME)),
    # until each is READY/FAILED/STOPPED/CRASHED for good
    ("POST", "/wait"): Route("_wait_route", _schema(names=NAMES, timeout=optional(seconds))),
    # answered once no process of any named instance is alive
    ("POST", "/stop"): Route("_stop_route", _schema(names=NAMES, grace=optional(seconds))),
    ("POST", "/restart"): Route(
        "_restart",
        _schema(
            ["name"],
            name=NAME,
            set=optional(flag_map),
            unset=optional(strings(500)),
            label=optional(LABEL),  # what ps calls it: "fix", "rollback", "tune trial"
            fallback=optional(boolean),  # wait for READY; back to the flags before if not
        ),
    ),
    # a dashboard's unapplied flag edits of one instance (null clears) made from `base` (default: the
    # flags it runs with): kept masked, persisted, sent on the feed, rebased on a restart
    ("POST", "/pending"): Route(
        "_set_pending", _schema(["name"], name=NAME, flags=optional(flag_map), base=optional(flag_map))
    ),
    # the n lines before `before` (a log view's scrollback)
    ("POST", "/logs"): Route(
        "_older_logs_route",
        _schema(
            ["name", "before"], name=NAME, n=integer(0, MAX_LOG_LINES), before=strings(10_000, empty=False)
        ),
    ),
    # a tune of one instance as a job of this supervisor (`vtui.tune.job`: the client's plan; 409: one
    # runs already, or the instance is not READY), its progress (also on the feed: type "tune"), and
    # its cancel (answered at once; the job puts the original flags back)
    ("POST", "/tune"): Route("_tune_start_route", _schema(["name", "plan"], name=NAME, plan=obj)),
    ("GET", "/tune"): Route("_tune_status_route", query=_schema(["name"], name=string)),
    ("POST", "/tune/cancel"): Route("_tune_cancel_route", _schema(["name"], name=NAME)),
    # end supervision (the instances keep running unless stop: `vtui handover`)
    ("POST", "/shutdown"): Route("_shutdown_route", _schema(stop=optional(boolean))),
}
# What a client of another API version may still ask (`api`): look, and hand the session over.
ANY_VERSION: frozenset[tuple[str, str]] = frozenset({("GET", "/status"), ("POST", "/shutdown")})


def query_int(query: Mapping[str, str], key: str, default: int, high: int) -> int:
    text = query.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{key}: expected an integer, got {text[:40]!r}") from None
    if not 0 <= value <= high:
        raise BadRequest(f"{key}: expected 0 to {high}, got {value}")
    return value


def check_request(method: str, path: str, query: Mapping[str, str], body: Mapping[str, Any]) -> Route:
    """The route asked: 404 for an unknown path, 405 for a known one asked with another method, else 400
    for a body or a query that does not fit its schema."""
    route = ROUTES.get((method, path))
    if route is None:
        allowed = sorted(m for m, p in ROUTES if p == path)
        if allowed:
            raise BadRequest(f"{method} {path}: method not allowed (use {', '.join(allowed)})", 405)
        raise NotFound(f"no route {method} {path[:200]}")
    route.body.check(body)
    route.query.check(query, "query ")
    return route


def depth(value: Any) -> int:
    """How deeply a decoded JSON value nests (iteratively: no recursion on a hostile body)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest


def parse_body(data: bytes) -> dict[str, Any]:
    """A request body as a JSON object (empty: {}), or BadRequest saying why not."""
    if not data:
        return {}
    try:
        value = json.loads(data)
    except RecursionError:
        raise BadRequest(f"bad JSON body: nested deeper than {MAX_DEPTH}") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise BadRequest(f"bad JSON body: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"bad JSON body: expected an object, got {_type_name(value)}")
    if depth(value) > MAX_DEPTH:
        raise BadRequest(f"bad JSON body: nested deeper than {MAX_DEPTH}")
    return value


def check_flags(flags: Mapping[str, Any], table: flagspec.FlagTable | None, what: str = "flags") -> None:
    """Flag values as the layout checks them: known canonical names (not an alias, not a top-level key),
    values of their flag's type and range; a value holding `${VAR}` is left as the layout leaves it."""
    from vtui.layouts.keys import TOP_LEVEL_FLAGS
    from vtui.layouts.text import has_vars

    for name, value in flags.items():
        key = f"{what}.{name}"
        if name in TOP_LEVEL_FLAGS:
            raise BadRequest(f'{key}: set "{name}" with the instance\'s own key, not in flags')
        canonical = flagspec.canonical_name(name, table)
        if canonical is None:
            hint = flagspec.suggest(name, table)
            raise BadRequest(f"{key}: unknown flag" + (f'; did you mean "{hint}"?' if hint else ""))
        if canonical != name:
            raise BadRequest(f'{key}: "{name}" is an alias; write "{canonical}"')
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and has_vars(v) for v in items):
            continue
        problem = flagspec.validate_flag(name, value, table)
        if problem:
            raise BadRequest(f"{key}: {problem}")
