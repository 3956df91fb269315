"""What crosses the socket comes back equal: every event kind, an instance snapshot (secrets masked),
a metrics sample, a GPU sample, startup facts; and both supervisors satisfy the `SupervisorApi` seam."""

from __future__ import annotations

import json
from pathlib import Path

from vtui.core.api import SupervisorApi
from vtui.core.events import LogLines, Notice, PhaseChanged, ProcessExited, StateChanged
from vtui.core.model import InstanceSpec, Layout, SessionSpec
from vtui.core.state import Phase, State
from vtui.core.status import InstanceStatus
from vtui.service.remote import RemoteSupervisor
from vtui.service.wire import (
    decode_event,
    decode_facts,
    decode_gpu,
    decode_sample,
    decode_status,
    encode_event,
    encode_facts,
    encode_gpu,
    encode_sample,
    encode_status,
)
from vtui.supervisor.supervisor import Supervisor
from vtui.telemetry.gpu import GpuInfo, GpuProcess, GpuSample
from vtui.telemetry.metrics import MetricsSample, Percentiles, RankSample, sample_of
from vtui.telemetry.startup_log import parse_startup


def test_every_event_kind_round_trips() -> None:
    events = [
        StateChanged("a", State.STARTING, State.READY, 12.5, Phase.API_UP, "why"),
        StateChanged("a", State.STOPPED, State.STARTING, 1.0),
        PhaseChanged("a", Phase.KV_CACHE, 2.0),
        LogLines("a", ("one", "two")),
        ProcessExited("a", 42, -9, 3.0),
        Notice(None, "warning", "careful"),
    ]
    assert [decode_event(encode_event(e)) for e in events] == events


def test_a_status_round_trips_with_the_secret_masked() -> None:
    spec = InstanceSpec("a", "m", 8000, gpus=(1,), flags={"max-num-seqs": 8, "api-key": "s3cret"})
    st = InstanceStatus("a", spec, State.BACKOFF, None, None, 5.0, 2, "boom", Path("/x.log"), True, spec, 9.0)
    data = encode_status(st, in_layout=False)
    assert "s3cret" not in str(data) and data["in_layout"] is False
    back = decode_status(data)
    assert back.spec.flags["api-key"] == "***" and back.spec.flags["max-num-seqs"] == 8
    assert back == InstanceStatus(
        "a", back.spec, State.BACKOFF, None, None, 5.0, 2, "boom", Path("/x.log"), True, back.spec, 9.0
    )


def test_samples_and_facts_round_trip() -> None:
    sample = MetricsSample(
        "a", 3.0, running=2, waiting_by_reason={"capacity": 1.0}, ttft=Percentiles(0.1, 0.2, 0.3)
    )
    assert decode_sample(encode_sample(sample)) == sample
    gpu = GpuSample(
        True, None, (GpuInfo(0, "H200", 1, 2, 3.0, 4.0, 5.0, 6.0),), (GpuProcess(0, 7, 8, "a"),), 1.0
    )
    assert decode_gpu(encode_gpu(gpu)) == gpu
    facts = parse_startup(["INFO 01-01 vllm_version 0.32", "GPU KV cache size: 1,234 tokens"])
    assert decode_facts(encode_facts(facts)) == facts


def test_a_data_parallel_sample_round_trips_through_json() -> None:
    """Per-engine ranks (a data-parallel server) cross the socket as JSON too."""
    text = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_v1_0.10_dp2.txt").read_text()
    sample = sample_of(text, "a", 1.0)
    assert len(sample.ranks) == 2 and isinstance(sample.ranks[0], RankSample)
    assert decode_sample(json.loads(json.dumps(encode_sample(sample)))) == sample


def test_decoded_samples_share_what_is_alike_and_history_drops_the_histograms() -> None:
    """A dashboard holds 600 samples an instance: decoding gives what is empty the shared defaults and
    every sample one tuple of bucket bounds; the history keeps the plotted figures alone (HistoryPoint)
    while the newest sample is kept whole."""
    from vtui.telemetry.metrics import NO_PERCENTILES, HistoryPoint
    from vtui.ui.store import Store

    busy = (Path(__file__).parents[1] / "telemetry" / "fixtures" / "metrics_busy.txt").read_text()
    sample = sample_of(busy, "a", 1.0)
    assert sample.windowed  # the fixture has TTFT and ITL histograms
    a, b = (decode_sample(json.loads(json.dumps(encode_sample(sample)))) for _ in range(2))
    assert a == sample and b == sample
    assert a.windowed["ttft"][0] is b.windowed["ttft"][0]
    assert a.instance is b.instance
    empty = decode_sample(json.loads(json.dumps(encode_sample(MetricsSample("b", 2.0)))))
    assert empty == MetricsSample("b", 2.0)
    assert empty.ttft is NO_PERCENTILES and empty.waiting_by_reason is MetricsSample("c", 0).waiting_by_reason
    assert not hasattr(a, "__dict__")  # slotted: no per-sample dict

    store = Store(Layout(SessionSpec("s"), (InstanceSpec("a", "m", 8000, engine="sim"),)))
    store.add_sample(a)
    view = store.views["a"]
    assert view.sample is a and view.sample.windowed  # the newest sample whole: the fleet merges it
    point = HistoryPoint(1.0, a.kv_usage, a.running, a.waiting, a.prompt_tps, a.generation_tps,
                         a.ttft.p95, a.preemptions_total)  # fmt: skip
    assert view.history[-1] == point == view.long_history[-1] and a.ttft.p95 is not None
    # a newly attached dashboard's backfill: the points, then the newest sample whole (the last point too)
    from vtui.telemetry.metrics import HistoryBackfill

    store = Store(Layout(SessionSpec("s"), (InstanceSpec("a", "m", 8000, engine="sim"),)))
    earlier = tuple(HistoryPoint(t, 0.5) for t in (-20.0, -19.5, -10.0))
    store.add_backfill(HistoryBackfill("a", earlier, a))
    view = store.views["a"]
    assert list(view.history) == [*earlier, point] and view.sample is a
    assert [p.at for p in view.long_history] == [-20.0, -10.0, 1.0]  # one each 10 s
    assert store.add_backfill(HistoryBackfill("gone", earlier, a)) is None


def test_both_supervisors_satisfy_the_seam() -> None:
    layout = Layout(SessionSpec("s"), (InstanceSpec("a", "m", 8000),), path=Path("/nowhere.toml"))
    assert isinstance(Supervisor(layout), SupervisorApi)
    assert isinstance(RemoteSupervisor(layout), SupervisorApi)


def test_a_followed_supervisors_gpus_are_a_gpu_source() -> None:
    """The feed's GPU samples make the follower's `gpus` (core.gpu.FedSource): another host's GPUs for
    `instance_gpus`, the same rule as the local ones."""
    from vtui.core.gpu import GpuInfo, GpuSample, instance_gpus
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.service.remote import RemoteSupervisor
    from vtui.service.wire import encode_gpu

    spec = InstanceSpec(name="q", model="m", port=1, gpus=(1,))
    remote = RemoteSupervisor(Layout(SessionSpec(name="far"), (spec,)))
    assert not instance_gpus(spec, remote.gpus).available
    gib = 1 << 30
    gpus = tuple(GpuInfo(i, "H100", (10 + i) * gib, 80 * gib, None, None, None, None) for i in range(2))
    remote._on_message({"type": "gpu", "sample": encode_gpu(GpuSample(True, None, gpus, (), 5.0, "nvml"))})
    view = instance_gpus(spec, remote.gpus)
    assert view.available and view.free == {1: 69 * gib}
