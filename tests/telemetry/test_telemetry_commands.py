"""`vtui diagnose` and `vtui metrics` through the real CLI dispatcher: exact JSON shapes, text output,
stdin, URLs and unreadable input."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vtui.cli import main
from vtui.commands.metrics import JSON_KEYS
from vtui.telemetry.startup_log import FACT_KEYS

FIXTURES = Path(__file__).parent / "fixtures"


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_diagnose_json_shape(capsys) -> None:
    out = _json(capsys, ["diagnose", str(FIXTURES / "failures" / "max_model_len_too_big.log"), "--json"])
    assert set(out) == {"facts", "problems"}
    assert set(out["facts"]) <= set(FACT_KEYS)
    assert out["facts"]["max_model_len"] == 4096
    assert out["problems"] == [
        {
            "kind": "max_model_len_above_model",
            "message": "User-specified max_model_len (4096) is greater than the derived max_model_len "
            "(max_position_embeddings=2048.0 or model_max_length=None in model's config.json)",
            "fix": {"max-model-len": 2048},
        }
    ]


def test_diagnose_json_healthy_v0(capsys) -> None:
    out = _json(capsys, ["diagnose", str(FIXTURES / "logs" / "v0_0.7.3_tp2.log"), "--json"])
    assert out["problems"] == []
    assert out["facts"]["engine"] == "V0" and out["facts"]["num_gpu_blocks"] == 62627


def test_diagnose_text_and_stdin(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((FIXTURES / "failures" / "unknown_flag.log").read_text()))
    assert main(["diagnose", "-"]) == 0
    text = capsys.readouterr().out
    assert "problem: unknown_flag" in text and "unrecognized arguments: --foo-bar 3" in text
    assert main(["diagnose", str(FIXTURES / "logs" / "v1_cuda_oom_graphs.log")]) == 0
    assert "fix: --enforce-eager" in capsys.readouterr().out


def test_diagnose_missing_file(capsys, tmp_path) -> None:
    assert main(["diagnose", str(tmp_path / "nope.log")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_metrics_json_shape(capsys) -> None:
    out = _json(capsys, ["metrics", str(FIXTURES / "metrics_busy.txt"), "--json"])
    assert list(out) == list(JSON_KEYS)
    assert out == {
        "running": 8.0,
        "waiting": 8.0,
        "kv_usage": pytest.approx(0.0009766817238432424),
        "kv_capacity_tokens": 1048576,
        "prompt_tokens_total": 65.0,
        "generation_tokens_total": 426.0,
        "preemptions_total": 0.0,
        "prefix_cache_queries_total": 65.0,
        "prefix_cache_hits_total": 0.0,
        "block_size": 128,
        "sleep_state": "awake",
        "sleep_level": 0,
        "engines": 1,
        "vllm_names": "v1",
    }


def test_metrics_excerpt_yields_what_it_can(capsys, monkeypatch) -> None:
    excerpt = (
        'vllm:num_requests_running{engine="0"} 3\nvllm:gpu_cache_usage_perc{engine="0"} 0.5\nvllm:broken{'
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(excerpt))
    out = _json(capsys, ["metrics", "-", "--json"])
    assert out["running"] == 3.0 and out["kv_usage"] == 0.5 and out["vllm_names"] == "v0"
    assert out["waiting"] is None and out["kv_capacity_tokens"] is None


def test_metrics_text(capsys) -> None:
    assert main(["metrics", str(FIXTURES / "metrics_v1_0.10_dp2.txt")]) == 0
    text = capsys.readouterr().out
    assert (
        "mixed (2 engines)" in text
        and "16 / 2" in text
        and "end-to-end p50/p95/p99 (s)     -- / -- / --" in text
    )


def test_metrics_url(capsys) -> None:
    body = (FIXTURES / "metrics_idle.txt").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/metrics"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        for source in (url, url + "/metrics"):
            out = _json(capsys, ["metrics", source, "--json"])
            assert out["running"] == 0.0 and out["vllm_names"] == "v1"
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_unreachable_url(capsys) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert main(["metrics", f"http://127.0.0.1:{port}", "--timeout", "1"]) == 1
    assert "ConnectError" in capsys.readouterr().err
