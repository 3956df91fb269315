"""The fleet table's rows as data: the columns and their widths for a terminal width, one row's values
for an instance (`row_data`), the session's ALL row and a replica group's router row. No drawing here:
`fleet.py` turns these rows into cells and strips."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vtui.core.flagvalues import world_size
from vtui.core.state import Phase, State
from vtui.core.vllm_memory import default_max_num_seqs
from vtui.telemetry.metrics import MetricsSample
from vtui.telemetry.replica_group import imbalance, merged_percentiles
from vtui.ui import fmt, planning
from vtui.ui.store import InstanceView, Store

PHASE_SHORT = {
    Phase.SPAWNED: "spawned",
    Phase.LOADING_WEIGHTS: "weights",
    Phase.PROFILING: "profile",
    Phase.KV_CACHE: "kv alloc",
    Phase.CAPTURING_GRAPHS: "graphs",
    Phase.API_UP: "api up",
}
STATE_ORDER = {s: i for i, s in enumerate(State)}
STATE_LABEL = {State.UNREACHABLE: "NO ANSWER"}  # a state whose name is wider than the STATE column (9)
TREND_EVERY_S = 3.0  # the trend column is recomputed at most this often (its rows repaint less)


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    width: int  # minimum cells
    priority: int  # lower is kept first on a narrow terminal
    right: bool = True
    flex: int = 0  # takes spare width (the KV bar, the trend), up to max_width
    max_width: int = 0


COLUMNS: tuple[Column, ...] = (
    Column("name", "NAME", 8, 0, right=False),
    Column("state", "STATE", 9, 0, right=False),
    Column("phase", "UP/PHASE", 11, 1, right=False),
    Column("gpu", "GPU", 5, 3, right=False),
    Column("port", "PORT", 5, 6),
    Column("kv", "KV cache", 8, 0, right=False, flex=1, max_width=24),
    Column("kvpct", "KV%", 5, 0),
    Column("kvtok", "KV tokens", 13, 4),
    Column("run", "RUN/MAX", 9, 0),
    Column("wait", "WAIT", 4, 1),
    Column("ptps", "P tok/s", 7, 2),
    Column("gtps", "G tok/s", 7, 1),
    Column("ttft50", "TTFT50", 6, 4),
    Column("ttft95", "TTFT95", 6, 2),
    Column("itl95", "ITL95", 6, 5),
    Column("pre", "PRE/s", 5, 5),
    Column("hit", "HIT", 4, 5),
    Column("trend", "G tok/s trend", 8, 3, right=False, flex=3, max_width=300),
)
HOST_COLUMN = Column("host", "HOST", 5, 0, right=False)  # only with `vtui --host`: each row's machine
BY_KEY = {c.key: c for c in (*COLUMNS, HOST_COLUMN)}
SORTABLE = [
    c.key for c in (COLUMNS[0], HOST_COLUMN, *COLUMNS[1:]) if c.key not in ("trend", "kv")
]  # `kv` sorts as `kvpct`
LOCAL = "local"  # the HOST cell of this machine's instances
HOST_LOST = "host lost"


def layout_columns(width: int, name_width: int, host_width: int = 0) -> list[tuple[Column, int]]:
    """The columns shown at `width` cells (one space between columns) and their widths; the HOST
    column only when `host_width` (other hosts are shown)."""
    columns = (COLUMNS[0], HOST_COLUMN, *COLUMNS[1:]) if host_width else COLUMNS
    widths = {c.key: (max(c.width, name_width) if c.key == "name" else c.width) for c in columns}
    widths["host"] = max(HOST_COLUMN.width, host_width)
    chosen: set[str] = set()
    used = 2  # the selection marker and its space
    for col in sorted(columns, key=lambda c: c.priority):
        need = widths[col.key] + 1
        if used + need <= width:
            chosen.add(col.key)
            used += need
    spare = max(0, width - used)
    flex = [c for c in columns if c.key in chosen and c.flex]
    total = sum(c.flex for c in flex)
    for col in flex:  # the KV bar first up to its cap, the rest to the trend
        add = min(col.max_width - widths[col.key], spare * col.flex // total if total else 0)
        widths[col.key] += max(0, add)
    spare = max(0, width - 2 - sum(widths[k] + 1 for k in chosen))
    for col in flex[::-1]:  # rounding and capped columns: what is left goes to the last flex column
        add = min(col.max_width - widths[col.key], spare)
        widths[col.key] += max(0, add)
        spare -= max(0, add)
    return [(c, widths[c.key]) for c in columns if c.key in chosen]


def gpu_list(indices: tuple[int, ...]) -> str:
    """`0-3` for a run of GPUs, else as fmt.gpus (`0,2`, `cpu`)."""
    ordered = sorted(indices)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return fmt.gpus(ordered)


def max_seqs(view: InstanceView, store: Store) -> tuple[int | None, bool]:
    """The instance's max-num-seqs and whether it is vLLM's default (the flag is unset)."""
    spec = view.spec
    if spec is None:
        return None, False
    value = spec.flags.get("max-num-seqs")
    if isinstance(value, int) and not isinstance(value, bool):
        return value, False
    gib = planning.gpu_memory_gib(spec, store.layout.session, store.gpu)
    return default_max_num_seqs(gib, planning.device_of(spec, store.gpu), world_size(spec.flags)), True


@dataclass
class RowData:
    """What one row shows (an instance, or the session's total)."""

    name: str
    state: State | None = None
    label: str = ""  # the NAME cell when it is not `name` (another host's instance: its own name)
    host: str = ""  # the HOST cell (with `vtui --host`)
    host_lost: bool = False  # that host's link is down: the row shows the last known state
    phase: str = ""
    phase_style: str = ""  # "", "bad", "warn", "muted"
    gpu: str = ""
    port: int | None = None
    kv: float | None = None
    kv_used: float | None = None
    kv_cap: float | None = None
    running: float | None = None
    max_seqs: int | None = None
    default_seqs: bool = False
    waiting: float | None = None
    ptps: float | None = None
    gtps: float | None = None
    ttft50: float | None = None
    ttft95: float | None = None
    itl95: float | None = None
    pre: float | None = None
    hit: float | None = None
    trend: tuple[float | None, ...] = ()
    model: str = ""
    state_label: str = ""  # the ALL row's "2/3 up"
    aggregate: bool = False  # a router's row: its group's totals (left out of the session's ALL row)

    def sort_value(self, key: str) -> object:
        return {
            "name": self.name,
            "host": self.host,
            "state": STATE_ORDER.get(self.state, 99) if self.state else 99,
            "phase": self.phase,
            "gpu": self.gpu,
            "port": self.port,
            "kvpct": self.kv,
            "kvtok": self.kv_used,
            "run": self.running,
            "wait": self.waiting,
            "ptps": self.ptps,
            "gtps": self.gtps,
            "ttft50": self.ttft50,
            "ttft95": self.ttft95,
            "itl95": self.itl95,
            "pre": self.pre,
            "hit": self.hit,
        }.get(key, self.name)


def row_data(view: InstanceView, store: Store, now: float, trend_points: int) -> RowData:
    st, spec, s = view.status, view.spec, view.sample
    row = RowData(view.name, state=view.state)
    if store.hosts:
        link = store.host_of(view)
        row.host = st.host if st is not None and st.host else LOCAL
        if st is not None and st.host:
            row.label = view.name.split(":", 1)[-1]
        if link is not None and not link.connected:
            row.host_lost, row.phase, row.phase_style = True, HOST_LOST, "bad"
            if spec is not None:
                row.gpu, row.port, row.model = gpu_list(spec.gpus), spec.port, spec.model
            return row  # the last known state; no figures (they are not coming)
    if spec is not None:
        row.gpu, row.port, row.model = gpu_list(spec.gpus), spec.port, spec.model
        row.max_seqs, row.default_seqs = max_seqs(view, store)
    if st is not None:
        state = view.state
        if state == State.STARTING:
            rank = st.phase.rank + 1 if st.phase is not None else 0
            row.phase = f"{rank}/{len(Phase)} {PHASE_SHORT[st.phase] if st.phase else 'spawning'}"
        elif state == State.BACKOFF and st.next_restart_at is not None:
            row.phase = f"retry {fmt.duration(max(0.0, st.next_restart_at - now))}"
        elif state in (State.READY, State.UNHEALTHY):
            if view.runtime_problems:
                row.phase, row.phase_style = "KV SHORT", "bad"  # the detail screen says why and the fix
            else:
                up = now - st.started_at if st.started_at is not None else None
                row.phase = f"up {fmt.uptime(up)}"
        elif state in (State.FAILED, State.CRASHED) and view.problems:
            row.phase, row.phase_style = f"{len(view.problems)} problem", "warn"
        if st.restarts and row.phase_style == "" and len(row.phase) < 8:
            row.phase += f" r{st.restarts}"
        if st.operation is not None and state is not State.STARTING:  # its operation queue: what runs
            row.phase = st.operation + (f" ({st.waiting} waits)" if st.waiting else "")
    if s is not None and view.state in (State.READY, State.UNHEALTHY):
        row.kv, row.kv_cap = s.kv_usage, s.kv_capacity_tokens
        row.kv_used = (
            s.kv_usage * s.kv_capacity_tokens if s.kv_usage is not None and s.kv_capacity_tokens else None
        )
        row.running, row.waiting = s.running, s.waiting
        row.ptps, row.gtps = s.prompt_tps, s.generation_tps
        row.ttft50, row.ttft95 = s.ttft.p50, s.ttft.p95
        row.itl95, row.pre, row.hit = s.itl.p95, s.preemptions_per_s, s.prefix_hit_rate
        if trend_points:
            history = view.history
            start = max(0, len(history) - trend_points)
            row.trend = tuple(history[i].generation_tps for i in range(start, len(history)))
    return row


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _sum_trends(trends: list[tuple[float | None, ...]]) -> tuple[float | None, ...]:
    """The trends summed point by point, aligned at their newest end (None where none is known)."""
    width = max((len(t) for t in trends), default=0)
    sums = [0.0] * width
    known = [False] * width
    for trend in trends:
        offset = width - len(trend)
        for i, value in enumerate(trend, offset):
            if value is not None:
                sums[i] += value
                known[i] = True
    return tuple(total if k else None for total, k in zip(sums, known, strict=True))


def all_row(rows: list[RowData]) -> RowData:
    """The session: sums of load and throughput, the worst latency, the KV of all instances together."""
    ready = sum(1 for r in rows if r.state in (State.READY, State.UNHEALTHY))
    used, cap = _sum(r.kv_used for r in rows), _sum(r.kv_cap for r in rows if r.kv_used is not None)
    weights = [(r.hit, r.ptps or 0.0) for r in rows if r.hit is not None]
    total_w = sum(w for _, w in weights)
    hit = (
        sum(h * w for h, w in weights) / total_w
        if total_w
        else (sum(h for h, _ in weights) / len(weights) if weights else None)
    )
    trend = _sum_trends([r.trend for r in rows])
    gpus: set[tuple[str, int]] = set()  # (host, index): GPU 0 of two hosts is two GPUs
    for r in rows:
        for part in r.gpu.split(","):
            if "-" in part:
                low, high = part.split("-")
                gpus.update((r.host, i) for i in range(int(low), int(high) + 1))
            elif part.isdigit():
                gpus.add((r.host, int(part)))
    return RowData(
        "ALL",
        state_label=f"{ready}/{len(rows)} up",
        gpu=str(len(gpus)) if gpus else "",
        kv=used / cap if used is not None and cap else None,
        kv_used=used,
        kv_cap=cap,
        running=_sum(r.running for r in rows),
        max_seqs=int(sum(r.max_seqs for r in rows if r.max_seqs)) or None,
        waiting=_sum(r.waiting for r in rows),
        ptps=_sum(r.ptps for r in rows),
        gtps=_sum(r.gtps for r in rows),
        ttft50=_max(r.ttft50 for r in rows),
        ttft95=_max(r.ttft95 for r in rows),
        itl95=_max(r.itl95 for r in rows),
        pre=_sum(r.pre for r in rows),
        hit=hit,
        trend=trend,
    )


def group_row(router: RowData, group: str, store: Store, rows: dict[str, RowData]) -> None:
    """Fill a router's row with its replica group's numbers (the group's ALL row): sums as the session's
    ALL row, TTFT/ITL from the merged histograms, the imbalance check or "N/M up" as its phase."""
    names = [
        n
        for n, v in store.views.items()
        if v.spec is not None and v.spec.group == group and v.spec.engine != "router"
    ]
    members = [rows[n] for n in names if n in rows]
    total = all_row(members)
    for key in (
        "kv",
        "kv_used",
        "kv_cap",
        "running",
        "max_seqs",
        "waiting",
        "ptps",
        "gtps",
        "pre",
        "hit",
        "trend",
    ):
        setattr(router, key, getattr(total, key))
    router.gpu, router.aggregate = total.gpu, True
    ready: dict[str, MetricsSample] = {}
    for n in names:
        view = store.views[n]
        if view.sample is not None and view.state in (State.READY, State.UNHEALTHY):
            ready[n] = view.sample
    ttft, itl = merged_percentiles(ready.values(), "ttft"), merged_percentiles(ready.values(), "itl")
    router.ttft50, router.ttft95, router.itl95 = ttft.p50, ttft.p95, itl.p95
    if router.state in (State.READY, State.UNHEALTHY):
        odd = imbalance(ready)
        router.phase, router.phase_style = (odd.short, "warn") if odd else (total.state_label, "")
        own = store.views[router.name].sample if router.name in store.views else None
        errors = own.router.get("errors_per_s") if own is not None else None
        if errors:  # it answered errors within its window (vllm_router_request_errors_total)
            router.phase, router.phase_style = f"err {fmt.rate(errors)}/s", "bad"


def router_line(view: InstanceView, store: Store) -> str | None:
    """A router's own figures (vllm-router's `vllm_router_*`, rates over the sample's window): requests
    through it, each replica's share of what it handed out, errors and retries, and the totals since
    it started; None for any other instance or before its first scrape."""
    s, spec = view.sample, view.spec
    if s is None or not s.router or spec is None:
        return None
    host = view.status.host if view.status else None
    names = {
        v.spec.base_url: v.name
        for v in store.views.values()
        if v.spec is not None and v.spec.group == spec.group and (v.status.host if v.status else None) == host
    }
    figures = s.router
    parts = [f"routed {fmt.rate(figures.get('requests_per_s'))} req/s"]
    handed = sum(s.routed.values())
    for url in sorted(s.routed, key=lambda u: names.get(u, u)):
        share = f" ({s.routed[url] / handed:.0%})" if handed > 0 else ""
        parts.append(f"{names.get(url, url)} {fmt.rate(s.routed[url])}{share}")
    parts.append(f"errors {fmt.rate(figures.get('errors_per_s'))}/s")
    parts.append(f"retries {fmt.rate(figures.get('retries_per_s'))}/s")
    totals = (figures.get(f"{k}_total") for k in ("requests", "errors", "retries"))
    parts.append("since start {} req, {} err, {} retries".format(*(fmt.num(t) for t in totals)))
    return ", ".join(parts)
