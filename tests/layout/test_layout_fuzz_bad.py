"""Hypothesis over generated, mostly malformed layouts: `vtui check` and `vtui up` answer every one with
exit 2 and `file:line: key: message` (or `file: message`) lines, never a traceback, and start nothing.

The layouts come from two generators: structures near the schema (known and unknown keys, values of every
TOML type, wrong shapes, deep nesting, long strings, odd hosts and names) written with tomli-w, and the
same texts cut and spliced with TOML punctuation (syntax errors). Bounded: see EXAMPLES.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vtui.cli import main
from vtui.layouts.keys import INSTANCE_KEYS, SESSION_KEYS

EXAMPLES = 150  # per test; the pair runs in a few seconds

KEYS = [*INSTANCE_KEYS, "flags", "env", "nmae", "prot", "gpu", "x y", "über"]
FLAG_NAMES = ["max-num-seqs", "tensor-parallel-size", "dtype", "api-key", "served-model-name", "nope-flag"]
WORDS = (
    st.sampled_from(
        [
            "a",
            "",
            " ",
            "..",
            "-x",
            "not a host!!",
            "127.0.0.1",
            "::1",
            "${VTUI_FZ_UNSET}",
            "sim",
            "vllm",
            "always",
        ]
    )
    | st.text(max_size=12)
    | st.builds(lambda n: "n" * n, st.integers(60, 5000))
)
SCALARS = (
    WORDS
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=True)
    | st.booleans()
    | st.just(dt.datetime(2026, 1, 1, 12, 0))
    | st.just(dt.date(2026, 1, 1))
)


VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(WORDS, inner, max_size=3),
    max_leaves=8,
)

INSTANCE = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6) | st.fixed_dictionaries(
    {"name": WORDS, "model": WORDS, "port": st.integers(-5, 70000) | WORDS},
    optional={
        "host": WORDS,
        "engine": WORDS,
        "gpus": st.lists(st.integers(-2, 9), max_size=4) | VALUES,
        "flags": st.dictionaries(st.sampled_from(FLAG_NAMES) | WORDS, VALUES, max_size=3),
        "env": st.dictionaries(WORDS, VALUES, max_size=2),
        "command": st.lists(WORDS, max_size=3) | VALUES,
    },
)
DOCUMENT = st.fixed_dictionaries(
    {},
    optional={
        "session": st.dictionaries(st.sampled_from([*SESSION_KEYS, "nme"]), VALUES, max_size=3) | VALUES,
        "defaults": st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3) | VALUES,
        "instance": st.lists(INSTANCE, max_size=4) | VALUES,
        "extra": VALUES,
    },
)


def _dump(doc: dict, deep: int) -> str:
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):  # not writable as TOML: plain text
        text = repr(doc)
    if deep:  # arrays nested `deep` levels (5000 used to be a RecursionError)
        text += '\n[[instance]]\nname = "d"\ngpus = ' + "[" * deep + "]" * deep + "\n"
    return text


TEXTS = st.builds(_dump, DOCUMENT, st.sampled_from([0, 0, 0, 0, 50, 400, 5000]))
PUNCTUATION = st.sampled_from(
    ["[", "]", "[[", "{", "}", "=", '"', "'", "\n", "#", ".", ",", "\\", "\x00", "\ufeff"]
)


@st.composite
def spliced(draw: st.DrawFn) -> str:
    text = draw(TEXTS)
    cut = draw(st.integers(0, len(text)))
    keep = draw(st.integers(0, len(text)))
    junk = "".join(draw(st.lists(PUNCTUATION | st.text(max_size=3), max_size=4)))
    return text[:cut] + junk + text[keep:]


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def _assert_clear_error_or_valid(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        lines = max(1, text.count("\n") + 1)
        launched = mock.Mock(side_effect=AssertionError("a malformed layout started a process"))
        with mock.patch.object(subprocess, "Popen", launched):
            code, out, err = _run(["check", str(path)])
            assert code in (0, 2), (code, out, err)
            assert "Traceback" not in out + err
            if code == 0:
                return  # a valid layout (the generator makes a few): nothing more to check here
            problems = [line for line in out.splitlines() if not line.startswith("warning: ")]
            assert problems, out
            where = re.compile(rf"^{re.escape(str(path))}(?::(\d+))?: \S.*$")
            for line in problems:
                match = where.match(line)
                assert match, f"not `file:line: key: message`: {line!r}"
                assert match.group(1) is None or 1 <= int(match.group(1)) <= lines, line
                assert len(line) < 600, "a long value is cut short, not echoed whole"
            assert re.search(r"\d+ problems?; nothing was started", err), err
            code, out, err = _run(["up", str(path)])
            assert code == 2 and "Traceback" not in out + err, (code, out, err)
            assert launched.call_count == 0


@_SETTINGS
@given(TEXTS)
def test_generated_layouts_get_a_clear_error(text: str) -> None:
    _assert_clear_error_or_valid(text)


@_SETTINGS
@given(spliced())
def test_spliced_layouts_get_a_clear_error(text: str) -> None:
    _assert_clear_error_or_valid(text)
