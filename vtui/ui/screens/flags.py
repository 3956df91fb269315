"""The flag editor: the seeds' knobs plus any flag of the schema, validated as you type, help shown.

Ctrl+R shows the diff of old vs new flags and restarts with them; nothing restarts without the diff.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.timer import Timer
from textual.widgets import Input, Static

from vtui.core.advice import flag_advice
from vtui.core.flagspec import (
    BUILTIN_FLAGS,
    PLAN_FLAGS,
    SEED_FLAGS,
    VLLM_VERSION,
    FlagTable,
    gpus_needed,
    parse_flag_value,
    validate_flag,
)
from vtui.core.masking import MASK, masked
from vtui.core.model import FlagValue, InstanceSpec
from vtui.core.pending import FlagConflict, rebase
from vtui.telemetry.flagschema import FlagSchema, schema_for
from vtui.ui import fmt, planning
from vtui.ui.keymap import FLAG_BINDINGS
from vtui.ui.screens.base import StoreScreen
from vtui.ui.store import Store
from vtui.ui.widgets.footer import LeanFooter
from vtui.ui.widgets.notices import NoticeLine
from vtui.ui.widgets.ordered_input import OrderedInput, after_typing
from vtui.ui.widgets.titlebar import TitleBar


def consistency_problem(spec: InstanceSpec, flags: Mapping[str, object]) -> str | None:
    """tensor x pipeline parallel x the data-parallel ranks must use exactly the pinned GPUs."""
    if not spec.gpus:
        return None
    needed = gpus_needed(flags)
    if needed is not None and needed[0] != len(spec.gpus):
        return (
            f"{needed[1]} = {needed[0]}, but the instance is pinned to "
            f"{len(spec.gpus)} GPU(s) {list(spec.gpus)}"
        )
    return None


def check_value(name: str, text: str, table: FlagTable | None = None) -> tuple[object, str | None]:
    """(typed value, None) for valid editor text, else (text, the flag schema's message)."""
    try:
        value = parse_flag_value(name, text, table)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        return text, message.split(": ", 1)[1] if message.startswith(f"{name}: ") else message
    return value, validate_flag(name, value, table)


def typed_value(name: str, text: str, table: FlagTable | None = None) -> FlagValue:
    """The editor text as the flag's value: typed when the schema parses it, else the text itself."""
    value = check_value(name, text, table)[0]
    return value if isinstance(value, bool | int | float | str | list) else text


def masked_value(name: str, value: FlagValue | None) -> FlagValue | None:
    """A flag's value as kept and sent (a secret masked: `core.masking`)."""
    return None if value is None else masked({name: value})[name]


def help_of(name: str, table: FlagTable = BUILTIN_FLAGS) -> str:
    spec = table.get(name)
    if spec is None:
        return f"--{name}: not a flag of this vLLM"
    extra = f" (choices: {', '.join(spec.choices)})" if spec.choices else ""
    return f"--{name} [{spec.type}, default {fmt.flag_value(spec.default)}]{extra}: {' '.join(spec.help.split())}"


KEEP_AFTER_S = 0.4  # the edits go to the session's owner once typing pauses this long

# The flags that move the KV budget vLLM profiles at startup; editing others (max-num-seqs,
# max-model-len, kv-cache-dtype...) keeps the budget the log gave.
_BUDGET_FLAGS = (
    "gpu-memory-utilization",
    "kv-cache-memory-bytes",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "max-num-batched-tokens",
    "enforce-eager",
    "dtype",
    "quantization",
    "cpu-offload-gb",
)


def flag_box(name: str, value: object) -> OrderedInput:
    """A flag's value box (`name`: the flag; the rows' names are one Static beside the boxes)."""
    default = BUILTIN_FLAGS.get(name)
    return OrderedInput(
        "" if value is None else fmt.flag_value(value),
        placeholder=f"default: {fmt.flag_value(default.default) if default else '--'}",
        classes="flag-value",
        name=name,
        id=f"flag-{name}",
        # the editor's check sets `-invalid` (`FlagEditorScreen._check`); Textual's own validation, with
        # no validators, would clear it on blur while the error line still names the flag
        validate_on=(),
    )


def names_text(names: Iterable[str]) -> str:
    return "\n".join(f"--{name}" for name in names)


class FlagEditorScreen(StoreScreen):
    BINDINGS = [*FLAG_BINDINGS]
    # the first value box takes the focus at once (Textual's default, the first focusable widget, is the
    # flag list, whose focus and blur restyled its ~70 widgets twice on every opening: ~40 ms)
    AUTO_FOCUS = ".flag-value"

    def __init__(self, name: str) -> None:
        super().__init__()
        self.instance = name
        self.errors: dict[str, str] = {}
        self._plan_key: tuple | None = None
        # the bundled schema until the worker has read the instance's own vLLM (cached per version)
        self.schema = FlagSchema(BUILTIN_FLAGS, VLLM_VERSION, "builtin")
        self._kept: dict[str, FlagValue] | None = None  # the edits kept for this instance (not applied)
        self._keep_timer: Timer | None = None
        self._base: dict[str, FlagValue] = {}  # the applied flags the rows were made from
        self._conflicts: tuple[FlagConflict, ...] = ()  # of this editor's rebase (the owner's: the store)

    @property
    def spec(self) -> InstanceSpec:
        return self.app.store.views[self.instance].spec or self.app.store.layout.instance(self.instance)

    def _start_values(self) -> dict[str, FlagValue | None]:
        """What the rows start with: the flags as they run, or the edits kept for this instance (by this
        dashboard before, or by another: the session supervisor holds them). A masked secret in the
        edits is the secret as it runs (secrets are never kept)."""
        running: dict[str, FlagValue | None] = dict(self.spec.flags)
        if self._kept is None:
            return running
        return {name: running.get(name) if value == MASK else value for name, value in self._kept.items()} | {
            name: None for name in running if name not in self._kept
        }

    def compose(self) -> ComposeResult:
        yield TitleBar(f"flags {self.instance}", help_hint=False)
        self._kept = self.app.store.pending.get(self.instance)
        self._base = dict(self.spec.flags)
        values = self._start_values()
        names = list(SEED_FLAGS) + [n for n in self.spec.flags if n not in SEED_FLAGS]
        names += [n for n in values if n not in names]
        with VerticalScroll(id="flag-list"):
            # The rows: one Static of all the names beside one column of value boxes, each a line high.
            # A row each (a Horizontal, its Label, its Input) drew the same screen with nearly three times
            # the widgets, each styled twice, laid out and drawn before the first frame (~25-30 ms of the
            # editor's ~105 ms from key to frame, benchmarks/bench_screen_open.py).
            with Horizontal(id="flag-rows"):
                yield Static(names_text(names), id="flag-names", markup=False)
                with Vertical(id="flag-values"):
                    for name in names:
                        yield flag_box(name, values.get(name))
            with Horizontal(id="flag-add"):
                yield OrderedInput(
                    placeholder="add another flag (name, tab completes)",
                    id="add-name",
                    suggester=SuggestFromList(sorted(BUILTIN_FLAGS), case_sensitive=False),
                )
        yield Static(id="flag-edits")
        yield Static(id="flag-conflicts")
        yield Static(self.schema.label() + " (reading the installed vLLM's…)", id="flag-schema")
        yield Static(id="flag-plan")
        yield Static(id="flag-help")
        yield Static(id="flag-errors")
        yield Static(id="flag-advice")
        yield NoticeLine()
        yield LeanFooter(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one(TitleBar).refresh_from(self.app.store)
        self.query(".flag-value").first(Input).focus()
        self._replan()
        self._show_errors()  # the advice on the flags as they are
        self._show_edits()
        spec = self.spec
        self.run_worker(lambda: self._read_schema(spec), thread=True, exclusive=True, group="flag-schema")

    def _read_schema(self, spec: InstanceSpec) -> None:
        """Worker thread: the instance's vLLM's parser (a subprocess on a version's first read)."""
        schema = schema_for(spec.engine, spec.command)
        self.app.call_from_thread(self._schema_read, schema)

    def _schema_read(self, schema: FlagSchema) -> None:
        self.schema = schema
        self.query_one("#flag-schema", Static).update(schema.label())
        for box in self.query(".flag-value").results(Input):
            self._check(box)
        self._show_errors()

    def refresh_view(self, store: Store, names: Iterable[str] | None = None) -> None:
        self.query_one(TitleBar).refresh_from(store)
        self._follow_applied()
        self._replan()
        self._show_edits()

    def _follow_applied(self) -> None:
        """The instance was restarted with other flags while the editor is open (another client, a
        rollback): the rows take the new flags, with the user's own changes on them (`core.pending`
        rebase); a flag both changed keeps the user's value and is shown as a conflict."""
        applied = dict(self.spec.flags)
        if applied == self._base:
            return
        shown = self._shown_flags()
        done = rebase(shown, self._base, applied)
        had_edits = shown != self._base
        self._conflicts = rebase(
            masked(shown), masked(self._base), masked(applied)
        ).conflicts  # no secret shown
        self._base = applied
        for box in self.query(".flag-value").results(Input):
            value = done.flags.get(box.name or "")
            text = "" if value is None else fmt.flag_value(value)
            if box.value.strip() != text:
                box.value = text
        if had_edits:
            self._keep_edits()

    def _replan(self) -> None:
        """Re-plan KV tokens / concurrency / fit for the edited flags (cheap; skipped when nothing moved)."""
        store = self.app.store
        spec = self.spec
        loaded = self.app.model_configs.get(spec)
        flags = self.edited_flags()
        gpu_gib = planning.gpu_memory_gib(spec, store.layout.session, store.gpu)
        device = planning.device_of(spec, store.gpu)
        key = (
            tuple(sorted((k, repr(flags.get(k))) for k in PLAN_FLAGS)),
            gpu_gib,
            device,
            loaded is not None,
            self._logged_budget(flags),
        )
        if key == self._plan_key:
            return
        self._plan_key = key
        if loaded is None:
            text = planning.plan_text(None, None)
        else:
            config, reason = loaded
            kv, source = self._logged_budget(flags)
            params = planning.plan_params(
                flags,
                gpu_gib,
                device=device,
                kv_memory_bytes=kv,
                kv_source=source,
                vllm_version=None if self.schema.guessed else self.schema.vllm_version,  # its memory rule
            )
            result, why = planning.try_plan(config, params)
            text = planning.plan_text(result, why or reason, flags.get("max-num-seqs"))
        self.query_one("#flag-plan", Static).update(text)

    def _logged_budget(self, flags: Mapping[str, object]) -> tuple[int | None, str | None]:
        """The KV budget the running instance's log gave, while the edits leave what sets it alone
        (memory share, parallel sizes, the profiled batch, graphs, weights): the plan is then exact,
        not an estimate. (None, None) for an instance not started or an edit that moves the budget."""
        view = self.app.store.views.get(self.instance)
        facts = view.facts if view is not None else None
        if facts is None or facts.kv_memory_bytes is None:
            return None, None
        running = self.spec.flags
        if any(flags.get(k) != running.get(k) for k in _BUDGET_FLAGS):
            return None, None
        return facts.kv_memory_bytes, "log (exact)" if facts.kv_memory_exact else "log (0.01 GiB)"

    # -- editing -----------------------------------------------------------------------------------
    def on_descendant_focus(self, event) -> None:
        widget = event.widget
        if isinstance(widget, Input) and widget.name:
            self.query_one("#flag-help", Static).update(help_of(widget.name, self.schema.flags))

    @on(Input.Changed, ".flag-value")
    def _validate(self, event: Input.Changed) -> None:
        name = event.input.name or ""
        self._check(event.input)
        self._show_errors()
        if name in PLAN_FLAGS:
            self._replan()
        if self._conflicts or self.app.store.pending_conflicts.get(self.instance):
            self._show_edits()  # a conflict the user just settled
        self._edited_soon()

    # -- pending edits: kept by the session's owner, shown by every dashboard ------------------------
    def _edited_soon(self) -> None:
        """Hand the edits over once typing pauses (a second dashboard shows them within a second)."""
        if self._keep_timer is not None:
            self._keep_timer.stop()
        self._keep_timer = self.set_timer(KEEP_AFTER_S, self._keep_edits)

    def _keep_edits(self) -> None:
        if self._keep_timer is not None:
            self._keep_timer.stop()
            self._keep_timer = None
        flags = self.edited_flags()
        self._kept = flags if flags != dict(self.spec.flags) else None
        self.app.control.keep_edits(self.instance, self._kept, dict(self.spec.flags))
        self._show_edits()

    def _show_edits(self) -> None:
        text = (
            "[+] unsaved edits, not applied (the session supervisor keeps them): "
            "ctrl+r reviews and applies, ctrl+z discards"
            if self._kept is not None
            else ""
        )
        line = self.query_one("#flag-edits", Static)
        line.update(text)
        line.display = bool(text)  # no blank line without edits
        marks = "\n".join(f"! conflict {c.text()}" for c in self.conflicts())
        box = self.query_one("#flag-conflicts", Static)
        box.update(marks)
        box.display = bool(marks)

    def conflicts(self) -> list[FlagConflict]:
        """The flags the kept edits and a restart since both changed (the owner's rebase, or this
        editor's), while the rows still hold the user's value and the instance runs with the other's."""
        owner = self.app.store.pending_conflicts.get(self.instance, ())
        found = {c.flag: c for c in (*owner, *self._conflicts)}
        if not found:
            return []
        edited, applied = self.edited_flags(), self.spec.flags
        return [
            c
            for _, c in sorted(found.items())
            if masked_value(c.flag, edited.get(c.flag)) == c.mine
            and masked_value(c.flag, applied.get(c.flag)) == c.theirs
        ]

    def _check(self, box: Input) -> None:
        name = box.name or ""
        text = box.value.strip()
        error = check_value(name, text, self._table())[1] if text else None
        if error:
            self.errors[name] = error
        else:
            self.errors.pop(name, None)
        box.set_class(bool(error), "-invalid")

    def _show_errors(self) -> None:
        lines = [f"--{n}: {e}" for n, e in self.errors.items()]
        advice = []
        if not self.errors:
            flags = self.edited_flags()
            if problem := consistency_problem(self.spec, flags):
                lines.append(problem)
            from vtui.core.vllm_memory import memory_rule

            table = self.schema.flags
            default = table["gpu-memory-utilization"].default if "gpu-memory-utilization" in table else None
            rule = (  # a guessed schema's release is not the target's
                None
                if self.schema.guessed
                else memory_rule(flags, self.schema.vllm_version, default_utilization=default)
            )
            advice = flag_advice(flags, rule)  # as the target vLLM reads a utilization
        self.query_one("#flag-errors", Static).update("\n".join(lines))
        self.query_one("#flag-advice", Static).update("\n".join(advice))

    @on(Input.Submitted, "#add-name")
    async def _add_flag(self, event: Input.Submitted) -> None:
        name = event.value.strip().lstrip("-")
        if not name:
            return
        if name not in self.schema.flags:
            self.query_one("#flag-errors", Static).update(f"--{name}: not a flag of this vLLM")
            return
        existing = self.query(f"#flag-{name}")
        if not existing:
            box = flag_box(name, None)
            shown = [b.name or "" for b in self.query(".flag-value").results(Input)]
            self.query_one("#flag-names", Static).update(names_text([*shown, name]))
            await self.query_one("#flag-values").mount(box)
            box.focus()
        else:
            existing.first().focus()
        event.input.value = ""

    def edited_flags(self) -> dict[str, FlagValue]:
        """The flags as edited, on the flags the instance runs with: untouched rows keep their value (and
        type); empty rows are unset. Rows made from flags applied before are rebased onto these."""
        shown = self._shown_flags()
        applied = dict(self.spec.flags)
        return shown if applied == self._base else rebase(shown, self._base, applied).flags

    def _shown_flags(self) -> dict[str, FlagValue]:
        """The rows' flags, on the flags they were made from (`_base`)."""
        flags = dict(self._base)
        for box in self.query(".flag-value").results(Input):
            name = box.name or ""
            text = box.value.strip()
            original = self._base.get(name)
            if not text:
                flags.pop(name, None)
            elif original is not None and text == fmt.flag_value(original):
                continue
            else:
                flags[name] = typed_value(name, text, self._table())
        return flags

    def _table(self) -> FlagTable | None:
        return None if self.schema.source == "builtin" else self.schema.flags

    # -- actions -------------------------------------------------------------------------------------
    def action_back(self) -> None:
        """Back to the dashboard; edits not applied stay kept (`[+] unsaved`), ctrl+z drops them."""
        self._keep_edits()
        self.app.pop_screen()

    def action_discard(self) -> None:
        """Drop the edits: the rows show the flags as they run again."""
        if self._keep_timer is not None:
            self._keep_timer.stop()
            self._keep_timer = None
        running = self.spec.flags
        self._base, self._conflicts = dict(running), ()
        for box in self.query(".flag-value").results(Input):
            value = running.get(box.name or "")
            box.value = "" if value is None else fmt.flag_value(value)
        self._kept = None
        self.app.control.keep_edits(self.instance, None)
        self._show_edits()
        self.notify(f"{self.instance}: flag edits discarded")

    def action_review(self) -> None:
        after_typing(self, self._review)

    def _review(self) -> None:
        """Check every value as it is now (an Input.Changed may still be on its way), then the diff."""
        for box in self.query(".flag-value").results(Input):
            self._check(box)
        self._show_errors()
        if self.errors:
            self.notify("fix the invalid flags first", severity="error")
            return
        flags = self.edited_flags()
        touched = any(
            flags.get(k) != self.spec.flags.get(k)
            for k in (
                "tensor-parallel-size",
                "pipeline-parallel-size",
                "data-parallel-size",
                "data-parallel-size-local",
            )
        )
        if touched and (problem := consistency_problem(self.spec, flags)):
            self.notify(problem, severity="error")
            return
        if flags == dict(self.spec.flags):
            self.notify("no changes")
            return
        new = self.spec.with_flags(flags, unset=[k for k in self.spec.flags if k not in flags])
        self.app.control.review_and_restart(self.instance, new, note="edited", pop=self, clears_edits=True)
