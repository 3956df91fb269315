"""A real-world corpus: startup logs and /metrics payloads pasted into public issue threads, with the damage
pastes do, each labelled by hand with the facts it states, what `diagnose` must call it, and where it came
from. The test reports the share of facts and failures read right (`pytest -s` prints it; `python
tests/telemetry/test_telemetry_corpus.py` lists every miss) and keeps it at 99 % or more; each case is also
its own test (`-k vllm-12345`).

A case is one file: a TOML header (source, url, version, engine, platform, gpus, damage, failure, [facts]), a
line `---`, then the excerpt as pasted. Logs are read by `parse_startup` and `diagnose`, payloads by
`sample_of`. `failure` is the kind of the first problem `diagnose` must find ("none": no failure to start,
e.g. a traceback after the server was up); a case without it is not scored on its failure.
"""

from __future__ import annotations

import json
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

from vtui.telemetry.diagnosis import diagnose
from vtui.telemetry.metrics import sample_of
from vtui.telemetry.startup_log import StartupFacts, parse_startup

CORPUS = Path(__file__).with_name("corpus")
GOAL = 0.99
_HEADER_KEYS = {
    "source",
    "url",
    "version",
    "engine",
    "platform",
    "gpus",
    "damage",
    "failure",
    "facts",
    "note",
}
PLATFORMS = {"nvidia", "rocm", "xpu", "tpu", "ascend", "cpu", "cpu-x86", "cpu-arm64", "metal", "other"}


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
        for key in ("source", "url", "version"):
            assert key in meta, f"{path.name}: header lacks {key}"
        facts = meta.pop("facts", {})
        assert isinstance(facts, dict) and (facts or "failure" in meta), f"{path.name}: nothing labelled"
        assert meta.get("platform", "nvidia") in PLATFORMS, f"{path.name}: platform {meta['platform']!r}"
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


def failure_of(case: Case) -> str:
    """The kind of the first problem `diagnose` finds in a log, "none" when it finds none."""
    problems = diagnose(case.text.splitlines(), holders_of_port=lambda _port: [])
    return problems[0].kind if problems else "none"


def case_misses(case: Case) -> tuple[int, list[tuple[str, object, object]]]:
    """How many labels the case has (its facts, and its failure), and those read wrong."""
    got = read(case)
    wrong = []
    for key, want in case.facts.items():
        value = _field(got, key)
        if not same(want, value):
            wrong.append((key, want, value))
    total = len(case.facts)
    if "failure" in case.meta:
        total += 1
        if (kind := failure_of(case)) != case.meta["failure"]:
            wrong.append(("failure", case.meta["failure"], kind))
    return total, wrong


def misses(cases: list[Case]) -> tuple[int, list[tuple[Case, str, object, object]]]:
    total, wrong = 0, []
    for case in cases:
        n, bad = case_misses(case)
        total += n
        wrong += [(case, key, want, value) for key, want, value in bad]
    return total, wrong


def report(kind: str) -> str:
    cases = load(kind)
    total, wrong = misses(cases)
    by_version = Counter(_minor(str(c.meta["version"])) for c in cases)
    by_engine = Counter(str(c.meta.get("engine", "?")) for c in cases)
    by_platform = Counter(str(c.meta.get("platform", "nvidia")) for c in cases)
    failures = Counter(str(c.meta["failure"]) for c in cases if "failure" in c.meta)
    failed_wrong = sum(1 for _c, key, _w, _g in wrong if key == "failure")
    lines = [
        f"{kind}: {len(cases)} cases, {total} labels, {total - len(wrong)} read right "
        f"({100 * (total - len(wrong)) / total:.1f} %)",
        "  by version: " + ", ".join(f"{v} {n}" for v, n in sorted(by_version.items(), key=_vkey)),
        "  by engine: " + ", ".join(f"{e} {n}" for e, n in sorted(by_engine.items())),
    ]
    if kind == "logs":
        lines += [
            "  by platform: " + ", ".join(f"{p} {n}" for p, n in sorted(by_platform.items())),
            f"  failures labelled: {sum(failures.values())}, read wrong {failed_wrong} ("
            + ", ".join(f"{k} {n}" for k, n in sorted(failures.items()))
            + ")",
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
        if kind == "logs":
            assert "failure" in case.meta or "note" in case.meta, f"{case.path.name}: no failure, no note why"


@pytest.mark.parametrize("case", load("logs") + load("metrics"), ids=lambda c: c.path.name)
def test_corpus_case_read_right(case: Case) -> None:
    """Every label of every case: facts, and for a log the failure `diagnose` calls it."""
    _total, wrong = case_misses(case)
    assert not wrong, "; ".join(f"{k} = {w!r}, read {g!r}" for k, w, g in wrong)


@pytest.mark.parametrize("case", load("metrics"), ids=lambda c: c.path.name)
def test_vtui_metrics_gives_json_for_every_payload(case: Case, tmp_path: Path, capsys) -> None:
    """`vtui metrics --json` on each payload as pasted: every key (null where the payload does not say)
    whenever a vLLM family is there; exit 2 only for a paste without one (headers, process metrics)."""
    from vtui.cli import main
    from vtui.commands.metrics import JSON_KEYS
    from vtui.telemetry.promtext import vllm_families

    payload = tmp_path / "metrics.prom"
    payload.write_text(case.text, encoding="utf-8")
    code = main(["metrics", "--json", str(payload)])
    out, err = capsys.readouterr()
    if not vllm_families(case.text):
        assert code == 2 and "no vLLM metrics" in err
        return
    assert code == 0, err
    assert set(json.loads(out)) == set(JSON_KEYS)


@pytest.mark.parametrize("kind", ["logs", "metrics"])
def test_corpus_facts_read_right(kind: str) -> None:
    total, wrong = misses(load(kind))
    print("\n" + report(kind))
    assert (total - len(wrong)) / total >= GOAL, report(kind)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    for kind in ("logs", "metrics"):
        print(report(kind))
