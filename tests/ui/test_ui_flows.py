"""Pilot flows on the fake supervisor: retune, crash + diagnosis, rollback, save, quit, help, logs."""

from __future__ import annotations

from pathlib import Path

import tomllib

from vtui.core.model import Layout, SessionSpec
from vtui.core.state import State
from vtui.ui.messages import MetricsArrived
from vtui.ui.screens.dashboard import DashboardScreen
from vtui.ui.screens.detail import DetailScreen
from vtui.ui.screens.dialogs import DiffScreen, QuitScreen
from vtui.ui.screens.flags import FlagEditorScreen
from vtui.ui.screens.help import HelpScreen
from vtui.ui.screens.logs import LogScreen
from vtui.ui.textdump import screen_text

DATA = Path(__file__).parent / "data"
OOM_LINES = [
    "INFO 01-01 12:00:00 [core.py:1] Loading weights took 3.2 seconds",
    "ERROR 01-01 12:00:05 [core.py:2] EngineCore failed to start.",
    "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (2.00 GiB). Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
]


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


async def test_dashboard_shows_instances_metrics_and_dashes(fake, app_factory, h):
    app = app_factory(fake)
    async with app.run_test(size=(149, 30)) as pilot:
        await settle(pilot)
        app.post_message(MetricsArrived(h.metrics("qwen")))
        await settle(pilot)
        app.repaint()  # the render timer's pass (samples wait for it; state changes do not)
        await settle(pilot)
        text = screen_text(app)
        lines = text.splitlines()
        rows = {ln[2:].split()[0]: ln for ln in lines if ln[2:].startswith(("qwen", "llama"))}
        qwen = rows["qwen"].split()
        assert qwen[:5] == [">", "qwen", "READY", "up", "1h02m"]
        at = qwen.index("12.5k/20.5k")  # KV tokens, then the load, throughput and latency columns
        assert qwen[at - 1 : at + 11] == [
            "61%", "12.5k/20.5k", "12/256", "3", "1234", "567", "120ms", "450ms", "40ms", "0.0", "45%",
            qwen[at + 10],
        ]  # fmt: skip
        assert "--/128" in rows["llama"]  # llama has no sample yet: dashes, never zeros
        assert "GPU0" in text and "qwen      76.0 GiB" in text


async def test_an_invalid_flag_stays_marked_when_the_focus_moves_on(fake, app_factory):
    """The box of an invalid value keeps its red tint after tab: Textual's own validation (none here)
    cleared the mark on blur while the error line still listed the flag."""
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        box = app.screen.query_one("#flag-max-num-seqs")
        box.focus()
        box.value = "many"
        await settle(pilot)
        assert box.has_class("-invalid")
        await pilot.press("tab")
        await settle(pilot)
        assert app.focused is not box and box.has_class("-invalid")
        assert "expected an integer" in screen_text(app)


async def test_edit_flag_then_restart_shows_new_value(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, FlagEditorScreen)
        box = app.screen.query_one("#flag-max-num-seqs")
        box.value = "many"
        await settle(pilot)
        assert "expected an integer" in screen_text(app)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert isinstance(app.screen, FlagEditorScreen)  # invalid: nothing restarts
        box.value = "64"
        await settle(pilot)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert "--max-num-seqs: 256 -> 64" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, 5)
        assert isinstance(app.screen, DashboardScreen)
        assert (
            "restart",
            "qwen",
            {
                "tensor-parallel-size": 2,
                "max-num-seqs": 64,
                "max-model-len": 8192,
                "gpu-memory-utilization": 0.9,
            },
        ) in fake.calls
        assert " --/64 " in screen_text(app)  # RUN/MAX: restarted, no sample yet
        assert app.store.dirty and "unsaved" in screen_text(app)


async def test_crash_shows_state_and_diagnosis_then_one_key_fix(fake, app_factory):
    lines = (DATA / "max_model_len_too_big.log").read_text().splitlines()
    app = app_factory(fake)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        fake.crash("qwen", lines)
        await settle(pilot, 6)
        if pending := [w for w in app.workers if w.group == "diagnosis"]:
            await app.workers.wait_for_complete(pending)
        await settle(pilot)
        text = screen_text(app)
        assert "FAILED" in text and "max_model_len" in text and "problem(s) diagnosed" in text
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        assert "Diagnosis" in text and "press 1: restart with --max-model-len 2048" in text
        await pilot.press("1")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen) and "--max-model-len: 8192 -> 2048" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, 5)
        view = app.store.views["qwen"]
        assert view.state == State.READY and view.spec.flags["max-model-len"] == 2048
        assert "no problems found" in screen_text(app)


async def test_rollback_restores_last_good_flags(fake, app_factory, layout):
    spec = layout.instance("llama")
    fake._fail = lambda s: OOM_LINES if s.flags.get("max-num-seqs") == 4096 else None
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        dash = app.screen
        assert dash.check_action("rollback", ()) is None  # greyed: nothing to roll back
        app.control.restart_instance("llama", spec.with_flags({"max-num-seqs": 4096}))
        await settle(pilot, 5)
        assert app.store.views["llama"].state == State.FAILED
        await pilot.press("j")  # select llama
        await settle(pilot)
        assert dash.selected_name() == "llama"
        assert dash.check_action("rollback", ()) is True
        await pilot.press("b")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen) and "--max-num-seqs: 4096 -> 128" in screen_text(app)
        await pilot.press("enter")
        await settle(pilot, 5)
        view = app.store.views["llama"]
        assert view.state == State.READY and view.spec.flags["max-num-seqs"] == 128
        outcomes = [(r.flags.get("max-num-seqs"), r.outcome, r.note) for r in view.flag_history]
        assert outcomes[-2:] == [(4096, "failed", None), (128, "ready", "rollback")]
        # through the supervisor's queue as a "rollback"; FAILED: no flags it serves with to go back to
        assert fake.restarts[-1] == ("llama", "rollback", False)
        assert "llama: rolled back to the flags before the last change" in screen_text(app)


async def test_rollback_undoes_a_change_that_worked(fake, app_factory, layout):
    """`b` after a successful restart: back to the flags before it, after a diff the user confirms (and
    escape restarts nothing)."""
    spec = layout.instance("qwen")
    before = dict(spec.flags)
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        dash = app.screen
        assert dash.selected_name() == "qwen" and dash.check_action("rollback", ()) is None
        app.control.restart_instance("qwen", spec.with_flags({"max-num-seqs": 8}))
        await settle(pilot, 5)
        view = app.store.views["qwen"]
        assert view.state == State.READY and view.spec.flags["max-num-seqs"] == 8
        assert dash.check_action("rollback", ()) is True
        await pilot.press("b")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert f"--max-num-seqs: 8 -> {before['max-num-seqs']}" in screen_text(app)
        await pilot.press("escape")  # no: nothing restarted
        await settle(pilot, 4)
        assert view.spec.flags["max-num-seqs"] == 8 and not isinstance(app.screen, DiffScreen)
        await pilot.press("b")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot, 5)
        assert view.state == State.READY and dict(view.spec.flags) == before
        assert view.flag_history[-1].note == "rollback"
        assert fake.restarts[-1] == ("qwen", "rollback", True)  # serving: back to 8 if `before` fails


async def test_save_layout_writes_current_flags(fake, app_factory, tmp_path):
    app = app_factory(fake)
    target = tmp_path / "saved.toml"
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        app.control.restart_instance("embed", fake.layout.instance("embed").with_flags({"max-num-seqs": 32}))
        await settle(pilot)
        await pilot.press("ctrl+s")  # no path yet: save as
        await settle(pilot)
        app.screen.query_one("#path-input").value = str(target)
        await pilot.press("enter")
        await settle(pilot, 8)
        if pending := [w for w in app.workers if w.group == "layout"]:
            await app.workers.wait_for_complete(pending)
        await settle(pilot)
        doc = tomllib.loads(target.read_text())
        embed = [i for i in doc["instance"] if i["name"] == "embed"][0]
        assert embed["flags"]["max-num-seqs"] == 32
        assert not app.store.dirty and str(target) in screen_text(app)
        # Saved again to the same file, it is edited in place: the user's comments stay.
        target.write_text("# my notes on this box\n" + target.read_text())
        app.control.restart_instance("embed", fake.layout.instance("embed").with_flags({"max-num-seqs": 48}))
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot, 8)
        if pending := [w for w in app.workers if w.group == "layout"]:
            await app.workers.wait_for_complete(pending)
        text = target.read_text()
        assert text.startswith("# my notes on this box\n")
        embed = [i for i in tomllib.loads(text)["instance"] if i["name"] == "embed"][0]
        assert embed["flags"]["max-num-seqs"] == 48
        # Save as onto an existing file asks first.
        await pilot.press("S")
        await settle(pilot)
        other = tmp_path / "other.toml"
        other.write_text("keep me")
        app.screen.query_one("#path-input").value = str(other)
        await pilot.press("enter")
        await settle(pilot)
        assert "Overwrite it?" in getattr(app.screen, "question", "")
        await pilot.press("n")
        await settle(pilot, 4)
        assert other.read_text() == "keep me"


async def test_quit_defaults_to_leaving_instances_running(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("enter")
        await settle(pilot, 5)
    assert fake.closed_with is False
    assert all(s.state == State.READY for s in fake.status())


async def test_quit_can_stop_instances(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("q", "s")
        await settle(pilot, 5)
    assert fake.closed_with is True
    assert all(s.state == State.STOPPED for s in fake.status())


async def test_help_is_generated_from_live_bindings_and_user_keymap(fake, app_factory, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"instance.restart" = "ctrl+t"\n"nope.nothing" = "z"\n')
    app = app_factory(fake, keymap_path=keys)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")  # stop qwen (asked first): now "stop" no longer applies, "start" does
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot, 4)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        rows = {r[2]: r for r in app.screen.rows}
        assert rows["instance.restart"][0] == "^t"
        assert rows["instance.stop"][3] is False and rows["instance.start"][3] is True
        assert any("unknown binding id" in p for p in app.keymap_problems)
        await pilot.press("escape")
        await pilot.press("ctrl+t")  # the remapped key restarts (once confirmed)
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot, 4)
        assert ("restart", "qwen", None) in fake.calls


async def test_palette_entries_are_noun_verb(fake, app_factory):
    from vtui.ui.commands import palette_entries

    app = app_factory(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        titles = [t for t, _, _ in palette_entries(app)]
        assert "instance: restart qwen" in titles and "layout: save as..." in titles
        assert "instance: start qwen" not in titles  # running: start does not apply
        assert all(": " in t for t in titles)


async def test_logs_filter_highlight_and_first_error(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        fake.emit_logs(
            "qwen",
            [f"INFO line {i}" for i in range(200)]
            + ["WARNING slow", "ERROR boom"]
            + [f"INFO after {i}" for i in range(50)],
        )
        await pilot.press("l")
        await settle(pilot)
        assert isinstance(app.screen, LogScreen)
        await pilot.press("e")
        await settle(pilot)
        log = app.screen.query_one("#log")
        assert log.scroll_y == app.screen._shown.index("ERROR boom") or "ERROR boom" in screen_text(app)
        await pilot.press("slash")
        await settle(pilot)
        app.screen.query_one("#log-filter").value = "after 4"
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen._shown == ["INFO after 4"] + [f"INFO after {i}" for i in range(40, 50)]
        fake.emit_logs("qwen", ["INFO after 41 more", "INFO unrelated"])
        await settle(pilot)
        assert app.screen._shown[-1] == "INFO after 41 more"


async def test_no_gpu_state(fake, app_factory, h):
    app = app_factory(fake, gpu=h.gpu_sample(available=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "no NVIDIA driver" in screen_text(app)


async def test_preset_a_scaled_to_gpus(fake, app_factory):
    app = app_factory(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        await pilot.press("enter")
        await settle(pilot, 5)
        flags = fake.layout.instance("qwen").flags
        assert flags["max-num-seqs"] == 256 and flags["max-num-batched-tokens"] == 32768
        assert flags["tensor-parallel-size"] == 2 and flags["enable-chunked-prefill"] is True
        assert app.store.views["qwen"].flag_history[-1].note == "preset A"


async def test_open_layout_switches_session_and_leaves_old_instances_running(fake, app_factory, tmp_path, h):
    from vtui.layouts import save_layout
    from vtui.testing.fake_supervisor import FakeSupervisor

    other = tmp_path / "other.toml"
    layout = h.demo_layout()
    save_layout(Layout(SessionSpec("other"), (layout.instance("embed"),)), other)
    made = []

    def factory(new_layout):
        made.append(FakeSupervisor(new_layout))
        return made[-1]

    app = app_factory(fake, supervisor_factory=factory)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        app.screen.query_one("#path-input").value = str(other)
        await pilot.press("enter")
        await settle(pilot, 8)
        if pending := [w for w in app.workers if w.group == "layout"]:
            await app.workers.wait_for_complete(pending)
        await settle(pilot, 6)
        assert made and app.supervisor is made[-1]
        assert app.store.names() == ["embed"] and "other" in screen_text(app)
    assert fake.closed_with is False  # the old session's instances were left running


COMMENTED_LAYOUT = """\
# my box: keep every line of this
[session]
name = "box"   # the title

[[instance]]
name = "embed"   # the small one
model = "org/embed"
engine = "sim"
port = 8101
[instance.flags]
max-num-seqs = 16   # enough for the batch job
# the next one is the big one

[[instance]]
name = "chat"
model = "org/chat"
engine = "sim"
port = 8102
"""


async def test_ctrl_s_adds_a_flag_keeping_comments_and_a_key_added_by_hand(app_factory, tmp_path):
    """ctrl+s into the file the session came from: a flag added (the case tomlkit 0.15 broke) keeps
    every comment, and a key the user added to the file by hand meanwhile is kept, not undone."""
    from vtui.layouts import load_layout
    from vtui.testing.fake_supervisor import FakeSupervisor

    path = tmp_path / "box.toml"
    path.write_text(COMMENTED_LAYOUT)
    fake = FakeSupervisor(load_layout(path), clock=lambda: 0.0)
    app = app_factory(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        by_hand = COMMENTED_LAYOUT.replace("port = 8102\n", "port = 8102\nmax_restarts = 7   # by hand\n")
        path.write_text(by_hand)
        embed = fake.layout.instance("embed")
        app.control.restart_instance("embed", embed.with_flags({"max-model-len": 2048, "max-num-seqs": 24}))
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot, 8)
        if pending := [w for w in app.workers if w.group == "layout"]:
            await app.workers.wait_for_complete(pending)
        text = path.read_text()
    for line in by_hand.splitlines():
        if "#" in line and "max-num-seqs" not in line:
            assert line in text.splitlines()
    assert "max-num-seqs = 24   # enough for the batch job" in text
    assert "max-num-seqs = 24   # enough for the batch job\nmax-model-len = 2048\n# the next one" in text
    saved = load_layout(path)
    assert saved.instance("chat").restart.max_restarts == 7
    assert saved.instance("embed").flags["max-model-len"] == 2048
