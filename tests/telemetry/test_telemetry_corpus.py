"""A real-world corpus: startup logs and /metrics payloads pasted into public issue threads, with the damage
pastes do, each labelled by hand with the facts it states and where it came from. The test reports the
share of facts read right (`pytest -s` prints it; `python tests/telemetry/test_telemetry_corpus.py` lists
every miss) and keeps it at 99 % or more.

A case is one file: a TOML header (source, url, version, engine, gpus, damage, [facts]), a line `---`,
then the excerpt as pasted. Logs are read by `parse_startup`, payloads by `sample_of`.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from vtui.telemetry.metrics import sample_of
from vtui.telemetry.startup_log import StartupFacts, parse_startup

CORPUS = Path(__file__).with_name("corpus")
GOAL = 0.99
_HEADER_KEYS = {"source", "url", "version", "engine", "gpus", "damage", "facts", "note"}


@dataclass(frozen=True)
class Case:
    path: Path
    meta: dict[str, object]
    facts: dict[str, object]
    text: str


def load(kind: str) -> list[Case]:
    cases = []
    for path in sorted((CORPUS / kind).iterdir()):
        header, sep, text = path.read_text(encoding="utf-8").partition("\n---\n")
        assert sep, f"{path.name}: no '---' line after the header"
        meta = tomllib.loads(header)
        assert set(meta) <= _HEADER_KEYS, f"{path.name}: unknown header keys {set(meta) - _HEADER_KEYS}"
        for key in ("source", "url", "version", "facts"):
            assert key in meta, f"{path.name}: header lacks {key}"
        facts = meta.pop("facts")
        assert isinstance(facts, dict) and facts, f"{path.name}: no facts labelled"
        cases.append(Case(path, meta, facts, text))
    return cases


def same(want: object, got: object) -> bool:
    """Equal, floats to the log's own rounding (a figure printed 0.93 in one line and 0.9273 in another);
    the label "none" means the reader must report nothing (never 0)."""
    if want == "none":
        return got is None
    if isinstance(want, float) or isinstance(got, float):
        if not isinstance(got, int | float) or isinstance(got, bool):
            return False
        return math.isclose(float(want), float(got), rel_tol=5e-3, abs_tol=5e-3)  # type: ignore[arg-type]
    return want == got


def _field(got: object, key: str) -> object:
    """A fact's value; `ttft.p50` reads a percentile of a latency histogram."""
    for part in key.split("."):
        got = getattr(got, part)
    return got


def read(case: Case) -> object:
    if case.path.parent.name == "logs":
        return parse_startup(case.text.splitlines())
    return sample_of(case.text)


def misses(cases: list[Case]) -> tuple[int, list[tuple[Case, str, object, object]]]:
    total, wrong = 0, []
    for case in cases:
        got = read(case)
        for key, want in case.facts.items():
            total += 1
            value = _field(got, key)
            if not same(want, value):
                wrong.append((case, key, want, value))
    return total, wrong


def report(kind: str) -> str:
    cases = load(kind)
    total, wrong = misses(cases)
    by_version = Counter(_minor(str(c.meta["version"])) for c in cases)
    by_engine = Counter(str(c.meta.get("engine", "?")) for c in cases)
    lines = [
        f"{kind}: {len(cases)} cases, {total} facts, {total - len(wrong)} read right "
        f"({100 * (total - len(wrong)) / total:.1f} %)",
        "  by version: " + ", ".join(f"{v} {n}" for v, n in sorted(by_version.items(), key=_vkey)),
        "  by engine: " + ", ".join(f"{e} {n}" for e, n in sorted(by_engine.items())),
    ]
    lines += [f"  miss {c.path.name}: {k} = {w!r}, read {g!r}" for c, k, w, g in wrong]
    return "\n".join(lines)


def _minor(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else version


def _vkey(item: tuple[str, int]) -> tuple[int, ...]:
    digits = [int(p) for p in item[0].replace("x", "0").split(".") if p.isdigit()]
    return tuple(digits) or (999,)


@pytest.mark.parametrize("kind", ["logs", "metrics"])
def test_corpus_is_labelled_and_cited(kind: str) -> None:
    cases = load(kind)
    assert len(cases) >= {"logs": 150, "metrics": 25}[kind]
    for case in cases:
        assert "#" in str(case.meta["source"]) or "/blob/" in str(case.meta["url"]), case.path.name
        assert str(case.meta["url"]).startswith("https://"), case.path.name
        fields = StartupFacts.__dataclass_fields__ if kind == "logs" else sample_of("").__dataclass_fields__
        unknown = {key.split(".")[0] for key in case.facts} - set(fields)
        assert not unknown, f"{case.path.name}: not a fact the reader gives: {unknown}"
        assert len(case.text.splitlines()) <= 80, f"{case.path.name}: keep excerpts short"


@pytest.mark.parametrize("kind", ["logs", "metrics"])
def test_corpus_facts_read_right(kind: str) -> None:
    total, wrong = misses(load(kind))
    print("\n" + report(kind))
    assert (total - len(wrong)) / total >= GOAL, report(kind)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    for kind in ("logs", "metrics"):
        print(report(kind))
