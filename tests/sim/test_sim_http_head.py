"""The sim's HTTP answers follow RFC 9110 like uvicorn's: HEAD wherever GET is, GET's headers and no body
(a body after a HEAD would be read as the next answer on a keep-alive connection), 405 with `allow`."""

from __future__ import annotations

import http.client


def _conn(sim) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)


def test_head_has_gets_headers_and_no_body_on_one_keep_alive_connection(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "512")
    conn = _conn(sim)
    try:
        for path in ("/metrics", "/health", "/version", "/v1/models"):
            conn.request("GET", path)
            got = conn.getresponse()
            body = got.read()
            assert got.status == 200, path
            conn.request("HEAD", path)
            head = conn.getresponse()
            assert head.status == 200, path
            assert head.read() == b"", path
            assert head.getheader("content-type") == got.getheader("content-type"), path
            if path != "/metrics":  # the metrics change between two scrapes; their length with them
                assert int(head.getheader("content-length")) == len(body), path
            else:
                assert int(head.getheader("content-length")) > 1000
        # the connection is still in step: a GET after the HEADs reads its own answer
        conn.request("GET", "/version")
        after = conn.getresponse()
        assert after.status == 200 and b"version" in after.read()
    finally:
        conn.close()
    assert '"HEAD /health HTTP/1.1" 200 OK' in sim.text()


def test_head_where_get_is_not_allowed_is_405_with_allow(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "512")
    conn = _conn(sim)
    try:
        for method in ("GET", "HEAD"):
            conn.request(method, "/v1/completions")
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 405 and resp.getheader("allow") == "POST", method
            assert (body == b"") == (method == "HEAD"), method
        conn.request("HEAD", "/no/such/path")
        missing = conn.getresponse()
        assert missing.status == 404 and missing.read() == b""
    finally:
        conn.close()
