"""The seeds' advice on a flag set: which rules fire, and `vtui check` printing them."""

from __future__ import annotations

from vtui.cli import main
from vtui.core.advice import flag_advice


def test_each_rule_fires_on_its_flag_only():
    assert flag_advice({"gpu-memory-utilization": 0.9, "max-num-seqs": 64}) == []
    assert flag_advice({"gpu-memory-utilization": 0.95}) == []  # the edge itself is fine
    [util] = flag_advice({"gpu-memory-utilization": 0.97})
    assert util.startswith("--gpu-memory-utilization 0.97 is above 0.95") and "0.90" in util
    [eager] = flag_advice({"enforce-eager": True})
    assert "CUDA graphs off" in eager and "long run" in eager
    assert flag_advice({"enforce-eager": False}) == []
    [fp8] = flag_advice({"kv-cache-dtype": "fp8_e4m3"})
    assert fp8.startswith("--kv-cache-dtype fp8_e4m3") and "quality" in fp8
    assert flag_advice({"kv-cache-dtype": "auto"}) == []
    assert (
        len(flag_advice({"gpu-memory-utilization": 0.99, "enforce-eager": True, "kv-cache-dtype": "fp8"}))
        == 3
    )


def test_check_prints_the_advice_and_still_passes(tmp_path, capsys):
    path = tmp_path / "a.toml"
    path.write_text(
        '[session]\nname = "adv"\n\n[[instance]]\nname = "big"\nengine = "sim"\nmodel = "Qwen/Qwen3-8B"\n'
        "port = 18777\n\n[instance.flags]\ngpu-memory-utilization = 0.98\n"
    )
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "advice: big: --gpu-memory-utilization 0.98 is above 0.95" in out and ": OK:" in out
