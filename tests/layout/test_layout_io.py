"""Loading, saving (round trip, atomic), `${VAR}` references and the last-used session."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from vtui.core.model import InstanceSpec, Layout, RestartPolicy, SessionSpec
from vtui.layouts import (
    LayoutError,
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

FULL = """\
[session]
name = "full"
allow_gpu_sharing = true
gpu_hour_price = 2.5

[defaults]
model = "${VTUI_TEST_MODEL}"
restart = "always"
max_restarts = 5
backoff = 1
[defaults.env]
HF_HUB_OFFLINE = "1"
[defaults.flags]
max-model-len = 4096
enforce-eager = true

[[instance]]
name = "a"
port = 8001
gpus = [0, 1]
command = ["${VTUI_TEST_HOME_DIR}/venvs/vllm/bin/vllm", "serve"]
env = { HF_TOKEN = "${VTUI_TEST_HF_TOKEN}" }
[instance.flags]
tensor-parallel-size = 2
api-key = "${VTUI_TEST_API_KEY}"
served-model-name = ["a", "alias-a"]
compilation-config = { mode = 3 }
kv-cache-memory-bytes = "64M"

[[instance]]
name = "b"
model = "other/model"
engine = "sim"
port = 8002
gpus = [1]
start_stagger = 0.5
flags.enforce-eager = false
flags.max-num-seqs = 16
"""

SECRETS = {"VTUI_TEST_API_KEY": "sk-very-secret", "VTUI_TEST_HF_TOKEN": "hf_secret_token"}


@pytest.fixture
def full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VTUI_TEST_MODEL", "org/model-8b")
    monkeypatch.setenv("VTUI_TEST_HOME_DIR", "/home/u")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "full.toml"
    path.write_text(FULL, encoding="utf-8")
    return path


def test_load_merges_defaults_and_expands_vars(full: Path) -> None:
    layout = load_layout(full)
    a, b = layout.instances
    assert layout.session == SessionSpec(name="full", allow_gpu_sharing=True, gpu_hour_price=2.5)
    assert a.model == "org/model-8b" and b.model == "other/model"
    assert a.command == ("/home/u/venvs/vllm/bin/vllm", "serve")
    assert a.env == {"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_secret_token"}
    assert a.flags["api-key"] == "sk-very-secret"
    assert a.flags["max-model-len"] == 4096 and b.flags["enforce-eager"] is False
    assert a.flags["compilation-config"] == '{"mode":3}'  # JSON text: what vLLM's argv needs
    assert a.restart == RestartPolicy(mode="always", max_restarts=5, backoff_initial=1.0, backoff_max=60.0)
    assert (b.engine, b.gpus, b.start_stagger, b.host) == ("sim", (1,), 0.5, "127.0.0.1")
    assert "sk-very-secret" not in " ".join(a.argv())  # the key travels in the environment
    assert a.process_env({})["VLLM_API_KEY"] == "sk-very-secret"


def test_round_trip_keeps_var_references_and_never_writes_secrets(full: Path, tmp_path: Path) -> None:
    layout = load_layout(full)
    text = dump_layout(layout)
    for secret in SECRETS.values():
        assert secret not in text
    assert '"${VTUI_TEST_API_KEY}"' in text and '"${VTUI_TEST_MODEL}"' in text
    assert '"${VTUI_TEST_HOME_DIR}/venvs/vllm/bin/vllm"' in text
    save_layout(layout)
    assert load_layout(full) == layout
    copy = tmp_path / "copy.toml"
    copy.write_text(text, encoding="utf-8")
    assert replace(load_layout(copy), path=full) == layout


def test_edited_values_are_saved_and_untouched_references_kept(full: Path) -> None:
    layout = load_layout(full)
    a = layout.instance("a").with_flags({"max-num-seqs": 64}, unset=["max-model-len"])
    edited = layout.replace_instance(a)
    save_layout(edited)
    text = full.read_text(encoding="utf-8")
    assert "sk-very-secret" not in text and "${VTUI_TEST_API_KEY}" in text
    again = load_layout(full)
    assert again.instances == edited.instances  # an unset default flag is not re-inherited
    assert "max-model-len" not in again.instance("a").flags
    assert again.instance("b").flags["max-model-len"] == 4096


def test_saving_depends_only_on_the_layout_not_on_what_was_loaded_since(full: Path, tmp_path: Path) -> None:
    """The `${VAR}` templates travel with the Layout: loading the same file again (here after it was
    rewritten with a literal key) or other files does not change what saving an earlier Layout writes."""
    layout = load_layout(full)
    first = render_layout(layout, tmp_path / "first.toml")
    full.write_text(FULL.replace('"${VTUI_TEST_API_KEY}"', '"sk-very-secret"'), encoding="utf-8")
    load_layout(full)  # under a process-wide table of templates keyed by path, this dropped api-key's
    other = tmp_path / "other.toml"
    other.write_text(FULL.replace("${VTUI_TEST_MODEL}", "x/y"), encoding="utf-8")
    load_layout(other)
    again = render_layout(layout, tmp_path / "again.toml")
    assert again == first
    assert "sk-very-secret" not in again and '"${VTUI_TEST_API_KEY}"' in again
    assert layout.templates[("a", ("flags", "api-key"))] == ("sk-very-secret", "${VTUI_TEST_API_KEY}")


def test_a_changed_secret_value_is_written_as_given(full: Path) -> None:
    layout = load_layout(full)
    edited = layout.replace_instance(layout.instance("a").with_flags({"api-key": "new-literal"}))
    assert 'api-key = "new-literal"' in dump_layout(edited)


def _random_layout(rng: random.Random) -> Layout:
    words = ["x", "qwen", "a b", 'q"uote', "üñí", "back\\slash", "multi\nline", ""]
    instances = []
    for i in range(rng.randint(1, 4)):
        flags: dict[str, object] = {}
        if rng.random() < 0.7:
            flags["max-num-seqs"] = rng.randint(1, 1024)
        if rng.random() < 0.5:
            flags["gpu-memory-utilization"] = round(rng.uniform(0.1, 1.0), 3)
        if rng.random() < 0.5:
            flags["enforce-eager"] = rng.random() < 0.5
        if rng.random() < 0.4:
            flags["served-model-name"] = [rng.choice(words[:2]) + str(i), "alias"]
        env = {f"V{j}": rng.choice(words) for j in range(rng.randint(0, 3))}
        instances.append(
            InstanceSpec(
                name=f"inst-{i}",
                model=rng.choice(words[:5]) or "m",
                port=9000 + i,
                engine=rng.choice(["vllm", "sim"]),
                gpus=(i,) if rng.random() < 0.5 else (),
                host=rng.choice(["127.0.0.1", "localhost"]),
                env=env,
                flags=flags,
                command=("python", "-m", "x") if rng.random() < 0.3 else None,
                restart=RestartPolicy(
                    rng.choice(["never", "on-failure", "always"]),
                    rng.randint(0, 9),
                    rng.choice([0.5, 2.0]),
                    rng.choice([60.0, 120.0]),
                ),
                start_stagger=rng.choice([0.0, 1.5]),
            )
        )
    return Layout(
        session=SessionSpec(name="s" + str(rng.randint(0, 9)), gpu_memory_gib=rng.choice([None, 80.0])),
        instances=tuple(instances),
    )


def test_dump_then_load_is_identity_for_generated_layouts(tmp_path: Path) -> None:
    rng = random.Random(1234)
    path = tmp_path / "gen.toml"
    for _ in range(60):
        layout = replace(_random_layout(rng), path=path)
        save_layout(layout)
        assert load_layout(path) == layout, path.read_text(encoding="utf-8")


def test_failed_replace_leaves_the_old_file_whole(full: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = load_layout(full)
    before = full.read_bytes()
    edited = layout.replace_instance(layout.instance("b").with_flags({"max-num-seqs": 1}))

    def boom(*_args: object) -> None:
        raise OSError("disk yanked")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk yanked"):
        save_layout(edited)
    assert full.read_bytes() == before
    assert [p.name for p in full.parent.iterdir()] == [full.name]  # no temp file left behind


def test_failed_fsync_leaves_the_old_file_whole(full: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = load_layout(full)
    before = full.read_bytes()

    def boom(_fd: int) -> None:
        raise OSError("fsync failed")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="fsync failed"):
        save_layout(layout.replace_instance(layout.instance("a").with_flags({"seed": 1})))
    assert full.read_bytes() == before
    assert [p.name for p in full.parent.iterdir()] == [full.name]


def test_undefined_variable_names_key_and_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VTUI_TEST_NOT_SET", raising=False)
    path = tmp_path / "v.toml"
    path.write_text(
        '[[instance]]\nname = "a"\nmodel = "m"\nport = 1\ncommand = ["${VTUI_TEST_NOT_SET}/vllm", "serve"]\n',
        encoding="utf-8",
    )
    with pytest.raises(LayoutError) as caught:
        load_layout(path)
    assert str(caught.value) == (
        f"{path}:5: instance[0].command: undefined environment variable "
        "${VTUI_TEST_NOT_SET} (export it before running vtui)"
    )


def test_var_default_syntax(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VTUI_TEST_NOT_SET", raising=False)
    path = tmp_path / "v.toml"
    path.write_text(
        '[[instance]]\nname = "a"\nmodel = "${VTUI_TEST_NOT_SET:-org/m}"\nport = 1\n', encoding="utf-8"
    )
    layout = load_layout(path)
    assert layout.instances[0].model == "org/m"
    assert 'model = "${VTUI_TEST_NOT_SET:-org/m}"' in dump_layout(layout)


def test_warnings_for_exposed_host_and_literal_secrets(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text(
        '[[instance]]\nname = "a"\nmodel = "m"\nport = 1\nhost = "0.0.0.0"\n'
        'env.HF_TOKEN = "hf_abc"\nflags.api-key = "sk-1"\n',
        encoding="utf-8",
    )
    layout, warnings = load_layout_with_warnings(path)
    assert layout.instances[0].host == "0.0.0.0"
    assert warnings == [
        f'{path}:5: instance[0].host: "0.0.0.0" exposes the server to the network; use "127.0.0.1" unless you mean it',
        f'{path}:6: instance[0].env.HF_TOKEN: looks like a secret written literally; use "${{HF_TOKEN}}" and export it',
        f'{path}:7: instance[0].flags.api-key: API key written literally; use "${{VLLM_API_KEY}}" and export it',
    ]


def test_last_session_and_resolve(tmp_path: Path) -> None:
    assert last_layout() is None
    with pytest.raises(NoLayoutError, match="pass a layout file"):
        resolve_layout_arg(None)
    path = tmp_path / "s.toml"
    path.write_text("", encoding="utf-8")
    remember_last(path)
    assert last_layout() == path.resolve()
    assert resolve_layout_arg(None) == path.resolve()
    assert resolve_layout_arg(str(path)) == path
    assert split_layout_args(["a", "b"]) == (path.resolve(), ["a", "b"])
    assert split_layout_args([str(path), "a"]) == (path, ["a"])
    with pytest.raises(NoLayoutError, match="no such layout file"):
        resolve_layout_arg(str(tmp_path / "missing.toml"))
    path.unlink()
    assert last_layout() is None
    with pytest.raises(NoLayoutError, match="no longer exists"):
        resolve_layout_arg(None)


def test_unnamed_session_takes_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "night-shift.toml"
    path.write_text('[[instance]]\nname = "a"\nmodel = "m"\nport = 1\n', encoding="utf-8")
    layout = load_layout(path)
    assert layout.session.name == "night-shift"
    assert layout.instances[0].restart == RestartPolicy()
