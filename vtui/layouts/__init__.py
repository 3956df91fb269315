"""Layouts: the TOML schema, load/validate (every problem at once, file:line and dotted key), `${VAR}`
handling, in-place edits that keep comments, atomic saves. Imports core, never Textual."""

from vtui.layouts.files import (
    LayoutError,
    LayoutProblem,
    NoLayoutError,
    dump_layout,
    last_layout,
    load_layout,
    load_layout_with_warnings,
    remember_last,
    render_layout,
    resolve_layout_arg,
    save_layout,
    split_layout_args,
)

__all__ = [
    "LayoutError",
    "LayoutProblem",
    "NoLayoutError",
    "dump_layout",
    "last_layout",
    "load_layout",
    "load_layout_with_warnings",
    "remember_last",
    "render_layout",
    "resolve_layout_arg",
    "save_layout",
    "split_layout_args",
]
