"""Every export format of every shipped layout (and of a fleet layout with replicas, an attached server
and secrets) validates with a well-kept validator: compose against the compose-spec schema, manifests
with kubernetes-validate, Helm values against the production-stack chart's own values.schema.json,
units with `systemd-analyze verify`, vLLM configs read the way vLLM's own config-file reader does."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from vtui.cli import main
from vtui.core import flagspec
from vtui.core.model import SECRET_FLAGS
from vtui.export import FORMATS, export_layout
from vtui.layouts import builtin_layout, builtin_names, load_layout

SCHEMAS = Path(__file__).with_name("schemas")
K8S_VERSION = "1.33.0"
FLEET = """
[session]
name = "Fleet One"

[defaults]
model = "Qwen/Qwen3-8B"

[[instance]]
name = "remote"
engine = "external"
url = "http://gpu2.lan:8000"
api_key = "${VTUI_EXPORT_KEY}"

[[instance]]
name = "small.model"
port = 8100
replicas = 2
router_port = 9000
gpus = [0, 1]
env.HF_TOKEN = "${VTUI_EXPORT_HF}"
env.HF_HUB_OFFLINE = "1"

[instance.flags]
api-key = "${VTUI_EXPORT_KEY}"
max-model-len = "8k"
compilation-config = { level = 3 }
enable-prefix-caching = false
served-model-name = "small $HOME 100%"

[[instance]]
name = "pinned"
model = "/models/qwen3 32b"
port = 8200
replicas = 2
replica_gpus = [[2, 3], [4, 5]]
restart = "never"
flags.tensor-parallel-size = 2
"""
SECRET_VALUES = ("key-s3cret-value", "hf-s3cret-value")


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("VTUI_EXPORT_KEY", SECRET_VALUES[0])
    monkeypatch.setenv("VTUI_EXPORT_HF", SECRET_VALUES[1])
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET, encoding="utf-8")
    return load_layout(path)


def _layouts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("VTUI_TINY_MODEL", "/models/tiny-llama")
    return [load_layout(builtin_layout(name)) for name in builtin_names()]


# -- the validators ------------------------------------------------------------------------------------


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text(encoding="utf-8"))


def _validate_compose(text: str) -> None:
    jsonschema.Draft7Validator(_schema("compose-spec.json")).validate(yaml.safe_load(text))


def _validate_kubernetes(text: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises ValidationError
    return docs


def _known_keys(value: object, schema: dict, where: str) -> None:
    """The chart's schema leaves additionalProperties open: every key written must still be one it
    declares (a misspelt `replicaCnt` would pass the schema and be ignored by the chart)."""
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            assert key in schema["properties"], f"{where}.{key}: not a key of the chart's values"
            _known_keys(item, schema["properties"][key], f"{where}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _known_keys(item, schema["items"], f"{where}[{i}]")


def _validate_helm(text: str) -> dict:
    values = yaml.safe_load(text)
    schema = _schema("production-stack-values.schema.json")
    jsonschema.Draft202012Validator(schema).validate(values)
    _known_keys(values, schema, "values")
    return values


def _vllm_config_args(config: dict) -> list[str]:
    """vLLM 0.32's FlexibleArgumentParser.load_config_file (vllm/utils/argparse_utils.py), restated:
    true -> --key, false -> --no-key, a list -> --key items…, a table -> --key JSON, else --key str."""
    args: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            args.append(f"--{key}" if value else f"--no-{key}")
        elif isinstance(value, list):
            args += [f"--{key}", *(str(v) for v in value)]
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value)]
        else:
            args += [f"--{key}", str(value)]
    return args


def _validate_vllm_config(layout, files) -> None:
    by_name = {f.name: f for f in files}
    for spec in layout.instances:
        if spec.engine == "external":
            continue
        for replica in spec.replica_specs():
            config = yaml.safe_load(by_name[f"{replica.name}.yaml"].text)
            for key in config:
                assert key == "model" or flagspec.flag_spec(key) is not None, key
            model = config.pop("model")
            assert model == replica.model
            flags = {k: v for k, v in replica.flags.items() if k not in flagspec.SIM_FLAGS}
            plain = replace(replica, engine="vllm", command=None, flags=flags)  # a sim: the vLLM it simulates
            want = plain.argv()[3:]  # what vtui runs, after `vllm serve MODEL`
            assert _vllm_config_args(config) == want
            assert not any(f in config for f in SECRET_FLAGS)


def _validate_systemd(files, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    for file in files:
        lines = []
        for line in file.text.splitlines():
            if line.startswith("ExecStart="):
                # verify checks the executable exists: the same arguments, behind one that does here
                line = f"ExecStart={fake} " + line.split(" ", 1)[1]
            lines.append(line)
        (units / file.name).write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(p) for p in units.iterdir())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def _validate(fmt: str, layout, tmp_path: Path) -> None:
    files = export_layout(layout, fmt).files
    if fmt == "compose":
        _validate_compose(files[0].text)
    elif fmt == "kubernetes":
        _validate_kubernetes(files[0].text)
    elif fmt == "helm-production-stack":
        _validate_helm(files[0].text)
    elif fmt == "systemd":
        _validate_systemd(files, tmp_path)
    else:
        _validate_vllm_config(layout, files)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_validates_for_every_shipped_layout(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layouts = _layouts(monkeypatch)
    assert {layout.session.name for layout in layouts} >= {"demo", "latency", "throughput", "vllm-cpu"}
    for i, layout in enumerate(layouts):
        folder = tmp_path / str(i)
        folder.mkdir()
        _validate(fmt, layout, folder)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_validates_for_a_fleet_with_secrets(fmt: str, fleet, tmp_path: Path) -> None:
    _validate(fmt, fleet, tmp_path)
    result = export_layout(fleet, fmt)
    text = "".join(f.text for f in result.files)
    for secret in SECRET_VALUES:
        assert secret not in text, f"{fmt} wrote a secret's value"
    assert any("remote: skipped" in w for w in result.warnings)
    assert "gpu2.lan" not in text


# -- the validators catch a fault (else the tests above prove nothing) ------------------------------------


def test_the_validators_reject_broken_output(fleet) -> None:
    compose = yaml.safe_load(export_layout(fleet, "compose").files[0].text)
    service = next(iter(compose["services"].values()))
    service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] = 0
    with pytest.raises(jsonschema.ValidationError):
        _validate_compose(yaml.safe_dump(compose))
    doc = yaml.safe_load_all(export_layout(fleet, "kubernetes").files[0].text).__next__()
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pth"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    values = yaml.safe_load(export_layout(fleet, "helm-production-stack").files[0].text)
    values["servingEngineSpec"]["modelSpec"][0]["replicaCount"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_schema("production-stack-values.schema.json")).validate(values)
    values["servingEngineSpec"]["modelSpec"][0]["replicaCnt"] = 2
    with pytest.raises(AssertionError):
        _known_keys(values, _schema("production-stack-values.schema.json"), "values")


# -- what each format says ------------------------------------------------------------------------------


def test_compose_replicas_gpus_ports_and_secret_references(fleet) -> None:
    compose = yaml.safe_load(export_layout(fleet, "compose").files[0].text)
    services = compose["services"]
    assert list(services) == ["small-model-0", "small-model-1", "pinned-0", "pinned-1"]
    devices = [
        s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in services.values()
    ]
    assert devices == [["0"], ["1"], ["2", "3"], ["4", "5"]]
    assert [s["ports"] for s in services.values()] == [
        ["127.0.0.1:8100:8100"],
        ["127.0.0.1:8101:8101"],
        ["127.0.0.1:8200:8200"],
        ["127.0.0.1:8201:8201"],
    ]
    small = services["small-model-1"]
    assert small["environment"]["VLLM_API_KEY"] == "${VLLM_API_KEY:?export VLLM_API_KEY}"
    assert small["environment"]["HF_TOKEN"] == "${HF_TOKEN:?export HF_TOKEN}"
    assert "--api-key" not in small["command"]
    assert small["command"][small["command"].index("--served-model-name") + 1] == "small $$HOME 100%"
    assert small["command"][small["command"].index("--host") + 1] == "0.0.0.0"
    assert small["ipc"] == "host" and small["healthcheck"]["test"][-1].endswith(":8101/health')")
    assert services["pinned-0"]["restart"] == "no"
    assert "/models/qwen3 32b:/models/qwen3 32b:ro" in services["pinned-0"]["volumes"]


def test_kubernetes_replicas_gpus_probes_and_secret_ref(fleet) -> None:
    docs = _validate_kubernetes(export_layout(fleet, "kubernetes").files[0].text)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Deployment", "small-model"),
        ("Service", "small-model"),
        ("Deployment", "pinned"),
        ("Service", "pinned"),
    ]
    small, pinned = docs[0], docs[2]
    assert small["spec"]["replicas"] == 2
    container = small["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert pinned["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": 2
    }
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    key = next(e for e in container["env"] if e["name"] == "VLLM_API_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "fleet-one-secrets", "key": "VLLM_API_KEY"}
    assert container["args"][:5] == ["Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "8100"]


def test_helm_values_map_flags_and_keep_prefix_caching(fleet) -> None:
    values = _validate_helm(export_layout(fleet, "helm-production-stack").files[0].text)
    spec = values["servingEngineSpec"]
    small, pinned = spec["modelSpec"]
    assert (small["name"], small["replicaCount"], small["requestGPU"]) == ("small-model", 2, 1)
    assert small["vllmConfig"]["maxModelLen"] == 8000  # "8k", read the way vLLM reads it
    assert small["vllmConfig"]["enablePrefixCaching"] is False
    assert "--compilation-config" in small["vllmConfig"]["extraArgs"]
    assert "--api-key" not in small["vllmConfig"]["extraArgs"]
    assert pinned["vllmConfig"]["tensorParallelSize"] == 2 and pinned["requestGPU"] == 2
    default = flagspec.flag_spec("enable-prefix-caching").default  # None: vLLM's choice, on
    assert pinned["vllmConfig"]["enablePrefixCaching"] is (True if default is None else bool(default))
    assert spec["vllmApiKey"] == {"secretName": "fleet-one-secrets", "secretKey": "VLLM_API_KEY"}
    assert small["env"][-1]["valueFrom"]["secretKeyRef"]["key"] == "HF_TOKEN"


def test_systemd_units_pin_gpus_and_read_secrets_from_a_file(fleet) -> None:
    files = {f.name: f.text for f in export_layout(fleet, "systemd").files}
    assert sorted(files) == sorted(
        f"vllm-fleet-one-{n}.service" for n in ("small-model-0", "small-model-1", "pinned-0", "pinned-1")
    )
    unit = files["vllm-fleet-one-small-model-1.service"]
    assert (
        "Environment=CUDA_VISIBLE_DEVICES=1\n" in unit and "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID" in unit
    )
    assert "EnvironmentFile=/etc/vtui/vllm-fleet-one-small-model-1.env" in unit
    assert '"small $$HOME 100%%"' in unit and "--port 8101" in unit
    assert "Restart=never" not in files["vllm-fleet-one-pinned-0.service"]
    assert "Restart=no" in files["vllm-fleet-one-pinned-0.service"]


# -- the command ----------------------------------------------------------------------------------------


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def test_cli_stdout_output_folder_only_and_errors(fleet, tmp_path: Path) -> None:
    path = str(fleet.path)
    code, out, err = _run(["export", path, "--to", "kubernetes", "--only", "pinned"])
    assert code == 0 and 'name: "pinned"' in out and "small-model" not in out
    code, out, err = _run(["export", path, "--to", "systemd", "-o", str(tmp_path / "units")])
    assert code == 0 and out == ""
    assert len(list((tmp_path / "units").glob("*.service"))) == 4
    target = tmp_path / "compose.yaml"
    code, _, _ = _run(["export", path, "--to", "compose", "-o", str(target)])
    assert code == 0 and "services:" in target.read_text()
    code, _, err = _run(["export", path, "--to", "vllm-config", "-o", str(target)])
    assert code == 2 and "-o must name a folder" in err
    code, _, err = _run(["export", path, "--to", "compose", "--only", "nope"])
    assert code == 2 and "no instance named nope" in err
    code, _, err = _run(["export", path, "--to", "compose", "--only", "remote"])
    assert code == 2 and "nothing to export" in err


def test_cli_exports_with_the_secrets_unset(fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exporting starts nothing and writes no secret: an unset `${VAR}` is no error."""
    monkeypatch.delenv("VTUI_EXPORT_KEY")
    monkeypatch.delenv("VTUI_EXPORT_HF")
    code, out, err = _run(["export", str(fleet.path), "--to", "kubernetes"])
    assert code == 0, err
    _validate_kubernetes(out)
    assert "VTUI_EXPORT" not in out and "secretKeyRef" in out


COLLIDING = """
[session]
name = "7 boxes"

[[instance]]
name = "a.b"
model = "org/m"
port = 8001

[[instance]]
name = "a_b"
model = "org/m"
port = 8002

[[instance]]
name = "A-B"
model = "org/m"
port = 8003

[[instance]]
name = "9000-chat"
model = "org/m"
port = 8004
"""


def test_names_that_read_alike_never_collide_and_stay_put_under_only(tmp_path: Path) -> None:
    """Was: a.b, a_b and A-B all became the unit vllm-…-a-b.service (the last one written won)."""
    path = tmp_path / "colliding.toml"
    path.write_text(COLLIDING)
    layout = load_layout(path)
    units = [f.name for f in export_layout(layout, "systemd").files]
    assert len(units) == len(set(units)) == 4
    alone = [f.name for f in export_layout(layout, "systemd", only=["A-B"]).files]
    assert alone == [units[2]]  # the same name whichever instances are exported
    text = export_layout(layout, "systemd", only=["a_b"]).files[0].text
    assert "# a_b: named a-b-2" in text
    compose = yaml.safe_load(export_layout(layout, "compose").files[0].text)
    assert len(compose["services"]) == 4


def test_kubernetes_names_start_with_a_letter() -> None:
    """A Service name must be an RFC 1035 label (a letter first) on API servers before 1.36."""
    layout = load_layout_text(COLLIDING)
    docs = list(yaml.safe_load_all(export_layout(layout, "kubernetes").files[0].text))
    names = [d["metadata"]["name"] for d in docs if d and d.get("kind") in ("Service", "Deployment")]
    assert names and all(re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", n) and len(n) <= 63 for n in names)
    assert "vllm-9000-chat" in names
    services = [d["metadata"]["name"] for d in docs if d and d.get("kind") == "Service"]
    assert len(services) == len(set(services)) == 4


def load_layout_text(text: str):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layout.toml"
        path.write_text(text)
        return load_layout(path)
