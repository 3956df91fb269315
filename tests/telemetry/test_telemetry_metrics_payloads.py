"""`vtui metrics` on any payload that holds a vLLM family (fixtures/payloads/, cut from real 0.10 and 0.32
payloads): JSON with nulls for what is absent, exit 2 only when no vLLM family is there at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vtui.cli import main
from vtui.commands.metrics import JSON_KEYS
from vtui.telemetry.metrics import sample_of
from vtui.telemetry.promtext import vllm_families

PAYLOADS = Path(__file__).parent / "fixtures" / "payloads"


def _json(capsys, name: str) -> dict:
    assert main(["metrics", "--json", str(PAYLOADS / name)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == set(JSON_KEYS)
    return out


def _nulls_but(out: dict, *keys: str) -> None:
    assert {k for k, v in out.items() if v is not None} == set(keys)


def test_cache_config_info_only_of_two_engines(capsys) -> None:
    out = _json(capsys, "cache_config_info_dp2.prom")
    lines = (PAYLOADS / "cache_config_info_dp2.prom").read_text().splitlines()
    blocks = [int(line.split('num_gpu_blocks="')[1].split('"')[0]) for line in lines]
    assert out["kv_capacity_tokens"] == sum(blocks) * 16  # summed over engine="0" and engine="1"
    assert out["engines"] == 2 and out["block_size"] == 16
    _nulls_but(out, "kv_capacity_tokens", "block_size", "engines")


def test_a_truncated_info_line_gives_the_labels_it_holds(capsys) -> None:
    out = _json(capsys, "cache_config_info_truncated.prom")
    assert out["block_size"] == 16 and out["engines"] == 1
    assert out["kv_capacity_tokens"] is None  # num_gpu_blocks was cut away


def test_iteration_tokens_histogram_only(capsys) -> None:
    out = _json(capsys, "iteration_tokens_only.prom")
    assert all(v is None for v in out.values())
    assert "vllm:iteration_tokens_total" in vllm_families(
        (PAYLOADS / "iteration_tokens_only.prom").read_text()
    )


def test_help_and_type_lines_without_samples(capsys) -> None:
    out = _json(capsys, "help_type_only.prom")
    assert all(v is None for v in out.values())


def test_sleep_state_of_two_engines(capsys) -> None:
    out = _json(capsys, "sleep_dp2.prom")
    assert (out["sleep_state"], out["sleep_level"], out["engines"]) == ("weights_offloaded", 1, 2)
    _nulls_but(out, "sleep_state", "sleep_level", "engines")
    assert main(["metrics", str(PAYLOADS / "sleep_dp2.prom")]) == 0
    assert "weights_offloaded / 1" in capsys.readouterr().out


def test_sleep_level_only(capsys) -> None:
    out = _json(capsys, "sleep_level_only.prom")
    assert (out["sleep_state"], out["sleep_level"]) == ("discard_all", 2)


def test_engines_in_different_states_are_mixed() -> None:
    text = (PAYLOADS / "sleep_dp2.prom").read_text()
    text = text.replace(
        'engine="1",model_name="<model-dir>",sleep_state="awake"} 0.0', 'engine="1",x="awake"} 1.0'
    )
    text = text.replace('engine="1",model_name="<model-dir>",sleep_state="weights_offloaded"} 1.0', "")
    sample = sample_of(text.replace('x="awake"', 'sleep_state="awake"'))
    assert (sample.sleep_state, sample.sleep_level) == ("mixed", 1)


def test_an_awake_server_says_so(fixture_text) -> None:
    sample = sample_of(fixture_text("metrics_idle.txt"))
    assert (sample.sleep_state, sample.sleep_level, sample.engines) == ("awake", 0, 1)


def test_prefix_queries_without_hits(capsys) -> None:
    out = _json(capsys, "prefix_queries_only.prom")
    assert out["prefix_cache_queries_total"] == 5120.0 and out["prefix_cache_hits_total"] is None
    assert sample_of((PAYLOADS / "prefix_queries_only.prom").read_text()).prefix_hit_rate is None


@pytest.mark.parametrize("text", ["process_cpu_seconds_total 1.5\n", "# HELP python_info x\n", ""])
def test_no_vllm_family_is_exit_2(capsys, tmp_path, text: str) -> None:
    path = tmp_path / "payload.txt"
    path.write_text(text)
    assert main(["metrics", str(path)]) == 2
    assert "no vLLM metrics" in capsys.readouterr().err
