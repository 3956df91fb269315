"""The UI's pure parts: formatting, presets, flag diff, keymap overrides, the store's flag history."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vtui.core.state import State
from vtui.core.supervision import InstanceStatus
from vtui.ui import fmt
from vtui.ui.keymap import load_user_keymap
from vtui.ui.presets import preset_flags
from vtui.ui.screens.dialogs import flag_diff
from vtui.ui.screens.flags import consistency_problem
from vtui.ui.store import LOG_LINES, Store
from vtui.ui.widgets.gpu_panel import gpu_text, instance_marks


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
    assert store.dirty and not view.can_rollback()
    store.apply_statuses([_status(bad, State.FAILED, last_good_spec=spec, last_error="boom")])
    assert view.can_rollback() and view.needs_diagnosis
    assert [r.outcome for r in view.flag_history][-2:] == ["ready", "failed"]
    assert view.flag_history[-1].error == "boom"
    store.add_logs("qwen", [str(i) for i in range(LOG_LINES + 10)])
    assert len(view.logs) == LOG_LINES  # bounded


def test_gpu_panel_marks_and_no_driver(h):
    assert instance_marks(["qwen", "qwen2", "q"]) == {"qwen": "q", "qwen2": "w", "q": "a"}
    assert "no NVIDIA driver" in gpu_text(h.gpu_sample(False), [], 80).plain
    text = gpu_text(h.gpu_sample(), ["qwen", "llama", "embed"], 100).plain
    assert "GPU2" in text and "l" * 5 in text and "+=other" in text


def test_the_cards_sparkline_draws_the_same_cells_as_textuals_renderable():
    import random

    from rich.color import Color
    from rich.console import Console
    from rich.style import Style
    from textual.renderables.sparkline import Sparkline
    from textual.strip import Strip

    from vtui.ui.widgets.instance_card import spark_strips

    console = Console(width=80, force_terminal=True, color_system="truecolor")
    base, pad = Style(color="#e0e0e0", bgcolor="#1e1e1e"), Style(bgcolor="#1e1e1e")
    low, high = Color.parse("#203040"), Color.parse("#0178d4")
    options = console.options.update(width=16, height=2, no_wrap=True, overflow="crop")
    rng = random.Random(7)
    for _ in range(200):
        data = [
            rng.choice([0.0, rng.uniform(0, 2000)]) for _ in range(rng.choice([1, 2, 3, 5, 16, 17, 39, 40]))
        ]
        plot = Sparkline(data, width=16, height=2, min_color=low, max_color=high)
        want = [
            Strip(line).extend_cell_length(16, pad).simplify()
            for line in console.render_lines(plot, options, style=base, pad=False)
        ][:2]
        got = [strip.simplify() for strip in spark_strips(data, 16, 2, low, high, base, pad)]
        assert [list(s) for s in got] == [list(s) for s in want], data
