"""Layouts: the TOML schema, load/validate (every problem at once, file:line and dotted key), `${VAR}`
handling, in-place edits that keep comments, atomic saves, the shipped layouts (by name) and the
last-used session. Imports core, never Textual."""

from vtui.layouts.errors import LayoutError, LayoutProblem, NoLayoutError, SaveRefused
from vtui.layouts.files import (
    dump_layout,
    load_layout,
    load_layout_with_warnings,
    referenced_vars,
    render_layout,
    save_layout,
    unresolved,
)
from vtui.layouts.lookup import (
    builtin_layout,
    builtin_names,
    default_layout,
    last_layout,
    remember_last,
    resolve_layout_arg,
    split_layout_args,
)

__all__ = [
    "LayoutError",
    "LayoutProblem",
    "NoLayoutError",
    "SaveRefused",
    "builtin_layout",
    "builtin_names",
    "default_layout",
    "dump_layout",
    "last_layout",
    "load_layout",
    "load_layout_with_warnings",
    "referenced_vars",
    "remember_last",
    "render_layout",
    "resolve_layout_arg",
    "save_layout",
    "split_layout_args",
    "unresolved",
]
