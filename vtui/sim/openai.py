"""vLLM 0.32's OpenAI request checks and answer shapes, without the I/O: what /v1/completions and
/v1/chat/completions accept (and their 400s, in vLLM's words), how `max_tokens` is capped to the context,
prompt lists and `n`, logprobs and echo, and the JSON bodies (keys as vLLM 0.32 sends them); /tokenize
and /detokenize (`tokenize`).

Prompts are counted by a `vtui.sim.tokens.Counter` (the model's tokenizer, or the estimate), and
generated tokens are words of a fixed list (`WORDS`), chosen from a per-choice seed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from vtui.sim.tokens import ESTIMATE, WORDS, Counter

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs


def sanitize(message: str) -> str:
    """vLLM 0.32's sanitize_message over its error texts: file paths become `<path>`."""
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def model_not_found(name: str, served: list[str]) -> bytes:
    message = f"The model `{name}` does not exist. Valid aliases: {', '.join(served)}."
    return error_body(sanitize(message), "NotFoundError", 404, "model")


def error_body(
    message: str, kind: str = "BadRequestError", code: int = 400, param: str | None = None
) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


def param_error(message: str, param: str, value: object = None, show_value: bool = True) -> bytes:
    """vLLM's 400 for a bad request value: `<message> (parameter=<name>, value=<value>)`."""
    tail = f"(parameter={param}, value={value})" if show_value else f"(parameter={param})"
    return error_body(f"{message} {tail}", param=param)


def validation_error(items: list[dict]) -> bytes:
    """vLLM's 400 over FastAPI's request validation error (pydantic's items, one a line)."""
    count = f"{len(items)} validation error{'s' if len(items) > 1 else ''}:"
    message = count + "".join(f"\n  {item!r}" for item in items)
    return error_body(message, "Bad Request", 400, str(items[0]["loc"]))


def missing(name: str, payload: dict) -> dict:
    return {
        "type": "missing",
        "loc": f"body.{name}",
        "msg": "Field required",
        "input": f"<dict of {len(payload)} items>",
    }


def json_error(exc: json.JSONDecodeError) -> bytes:
    return validation_error(
        [
            {
                "type": "json_invalid",
                "loc": f"body.{exc.pos}",
                "msg": "JSON decode error",
                "input": "<dict of 0 items>",
                "ctx": {"error": exc.msg},
            }
        ]
    )


@dataclass
class Prompt:
    key: str  # what the prefix cache and the choice's seed hash
    length: int  # tokens
    text: str  # what `echo` prepends


@dataclass
class Params:
    prompts: list[Prompt]
    max_tokens: list[int]  # per prompt, capped to the context
    n: int = 1
    logprobs: int | None = None  # completions: top-k; chat: top_logprobs (0 when only logprobs=true)
    echo: bool = False
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()  # stop strings: the text ends before the first one generated
    include_stop: bool = False  # include_stop_str_in_output: the text ends after it instead
    extra: dict = field(default_factory=dict)


def _int_field(payload: dict, name: str) -> tuple[int | None, bytes | None]:
    value = payload.get(name)
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None, validation_error(
            [
                {
                    "type": "int_type",
                    "loc": f"body.{name}",
                    "msg": "Input should be a valid integer",
                    "input": value,
                }
            ]
        )
    try:
        number = float(value)
        if number != int(number):
            raise ValueError
        return int(number), None
    except (TypeError, ValueError, OverflowError):
        return None, validation_error(
            [
                {
                    "type": "int_parsing",
                    "loc": f"body.{name}",
                    "msg": "Input should be a valid integer, unable to parse string as an integer",
                    "input": value,
                }
            ]
        )


def _prompts(payload: dict, chat: bool, counter: Counter) -> list[Prompt] | bytes:
    if chat:
        if "messages" not in payload:
            return validation_error([missing("messages", payload)])
        messages = payload["messages"]
        if not isinstance(messages, list):
            return validation_error(
                [
                    {
                        "type": "list_type",
                        "loc": "body.messages",
                        "msg": "Input should be a valid list",
                        "input": messages,
                    }
                ]
            )
        text = "".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        return [Prompt(text, counter.chat(messages), text)]
    raw = payload.get("prompt")
    if raw is not None and not isinstance(raw, str | list):  # pydantic's errors over the prompt's union
        kinds = [
            ("list_type", "list"),
            ("list_type", "list"),
            ("string_type", "string"),
            ("list_type", "list"),
        ]
        return validation_error(
            [
                {
                    "type": kind,
                    "loc": "body.prompt",
                    "msg": f"Input should be a valid {what}",
                    "input": str(raw),
                }
                for kind, what in kinds
            ]
        )
    empty = param_error(
        "Either prompt or prompt_embeds must be provided and non-empty.", "prompt", show_value=False
    )
    if raw is None or raw == "" or raw == []:
        return empty
    if isinstance(raw, str):
        return [Prompt(raw, len(counter.encode(raw)), raw)]
    if isinstance(raw, list) and all(isinstance(t, int) for t in raw):
        return [Prompt(",".join(map(str, raw)), len(raw), counter.decode(raw))]
    out: list[Prompt] = []
    if isinstance(raw, list) and len({type(item) for item in raw}) > 1:  # vLLM: all texts or all token lists
        return validation_error(
            [
                {
                    "type": "int_parsing",
                    "loc": "body.prompt.0",
                    "msg": "Input should be a valid integer, unable to parse string as an integer",
                    "input": raw[0],
                }
            ]
        )
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, str) and item:
                out.append(Prompt(item, len(counter.encode(item)), item))
            elif isinstance(item, list) and item and all(isinstance(t, int) for t in item):
                out.append(Prompt(",".join(map(str, item)), len(item), counter.decode(item)))
            else:
                return empty
    return out or empty


def parse(payload: dict, chat: bool, limit: int, counter: Counter = ESTIMATE) -> Params | bytes:
    """The request's parameters, or vLLM 0.32's 400 body for it (in the order vLLM checks)."""
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    requested, name = None, "max_tokens"
    for candidate in names:
        value, err = _int_field(payload, candidate)
        if err:
            return err
        if value is not None:
            requested, name = value, candidate
            break
    n, err = _int_field(payload, "n")
    if err:
        return err
    prompts = _prompts(payload, chat, counter)
    if isinstance(prompts, bytes):
        return prompts
    temperature = payload.get("temperature")
    if isinstance(temperature, int | float) and temperature < 0:
        return param_error(
            f"temperature must be non-negative, got {float(temperature)}.", "temperature", float(temperature)
        )
    top_p = payload.get("top_p")
    if isinstance(top_p, int | float) and not 0 < top_p <= 1:
        return param_error(f"top_p must be in (0, 1], got {float(top_p)}.", "top_p", float(top_p))
    if n is not None and n < 1:
        return error_body(f"n must be at least 1, got {n}.")
    stop = _stop_field(payload.get("stop"))
    if isinstance(stop, bytes):
        return stop
    logprobs: int | None = None
    if chat:
        top, err = _int_field(payload, "top_logprobs")
        if err:
            return err
        if top is not None and not payload.get("logprobs"):
            return param_error(
                "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs", show_value=False
            )
        if payload.get("logprobs"):
            logprobs = top or 0
    else:
        logprobs, err = _int_field(payload, "logprobs")
        if err:
            return err
    if logprobs is not None and logprobs > MAX_LOGPROBS:
        param = "top_logprobs" if chat else "logprobs"
        return param_error(
            f"Requested sample logprobs of {logprobs}, which is greater than max allowed: {MAX_LOGPROBS}",
            param,
            logprobs,
        )
    if requested is not None and requested > limit:
        return param_error(
            f"{name}={requested} cannot be greater than max_model_len={limit}. Please request fewer output tokens.",
            name,
            requested,
        )
    caps = []
    for prompt in prompts:
        if prompt.length > limit:
            return param_error(
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{prompt.length} input tokens, which exceeds this limit even without any output tokens. Please "
                "reduce the length of the input prompt.",
                "input_tokens",
                prompt.length,
            )
        room = limit - prompt.length
        wanted = requested if requested is not None else (room if chat else 16)
        capped = min(wanted, room)
        if capped < 1:
            return param_error(f"{name} must be at least 1, got {capped}.", name, capped)
        caps.append(capped)
    options = payload.get("stream_options") or {}
    if payload.get("stream_options") is not None and not payload.get("stream"):
        return param_error(
            "Stream options can only be defined when `stream=True`.", "stream_options", show_value=False
        )
    return Params(
        prompts,
        caps,
        n=n or 1,
        logprobs=logprobs,
        echo=bool(payload.get("echo")) and not chat,
        stream=bool(payload.get("stream")),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        ignore_eos=bool(payload.get("ignore_eos")),
        stop=stop,
        include_stop=bool(payload.get("include_stop_str_in_output")),
    )


def _shown(value: object) -> str:
    """A value as pydantic's errors show it in vLLM's 400: containers by their size."""
    if isinstance(value, list | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    return str(value)


def _stop_field(value: object) -> tuple[str, ...] | bytes:
    """`stop`: a string or a list of strings (pydantic's 400 otherwise), none of them empty."""
    if value is None:
        return ()
    if isinstance(value, str):
        stops: tuple[str, ...] = (value,)
    elif isinstance(value, list):
        wrong = [(i, v) for i, v in enumerate(value) if not isinstance(v, str)]
        if wrong:
            return validation_error(
                [
                    {
                        "type": "string_type",
                        "loc": "body.stop",
                        "msg": "Input should be a valid string",
                        "input": _shown(value),
                    }
                ]
                + [
                    {
                        "type": "string_type",
                        "loc": f"body.stop.{i}",
                        "msg": "Input should be a valid string",
                        "input": _shown(v),
                    }
                    for i, v in wrong
                ]
            )
        stops = tuple(value)
    else:
        return validation_error(
            [
                {
                    "type": "string_type",
                    "loc": "body.stop",
                    "msg": "Input should be a valid string",
                    "input": _shown(value),
                },
                {
                    "type": "list_type",
                    "loc": "body.stop",
                    "msg": "Input should be a valid list",
                    "input": _shown(value),
                },
            ]
        )
    if any(not stop for stop in stops):
        return error_body("stop cannot contain an empty string.")
    return stops


def logprob(seed: int, i: int, rank: int = 0) -> float:
    """A made-up log-probability: the sampled token (rank 0) is the likeliest."""
    return -round(0.5 + ((seed * 31 + i * 17) % 300) / 100 + rank * 0.75, 4)


def alternatives(token: str, seed: int, k: int) -> list[str]:
    """The k - 1 runners-up of a sampled token: words other than it."""
    others = [w for w in WORDS if w != token]
    return [others[(seed + r * 5) % len(others)] for r in range(max(0, k - 1))]


def completion_logprobs(
    seed: int, start: int, tokens: list[str], k: int, offset: int, prompt: int = 0
) -> dict:
    """`choices[i].logprobs` of /v1/completions for `tokens` (the first `prompt` of them echo the prompt:
    no logprob, as vLLM's first prompt token has none)."""
    out: dict = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for j, token in enumerate(tokens):
        i = start + j
        out["text_offset"].append(offset)
        offset += len(token)
        out["tokens"].append(token)
        if j == 0 and prompt:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        out["token_logprobs"].append(logprob(seed, i))
        top = {token: logprob(seed, i)} if k else {}
        for rank, word in enumerate(alternatives(token, seed + i, k), 1):
            top[word] = logprob(seed, i, rank)
        out["top_logprobs"].append(top)
    return out


def chat_logprobs(seed: int, start: int, tokens: list[str], k: int) -> dict:
    def entry(token: str, value: float) -> dict:
        return {"token": token, "logprob": value, "bytes": list(token.encode())}

    content = []
    for j, token in enumerate(tokens):
        i = start + j
        top = [entry(token, logprob(seed, i))] if k else []
        top += [
            entry(word, logprob(seed, i, r)) for r, word in enumerate(alternatives(token, seed + i, k), 1)
        ]
        content.append({**entry(token, logprob(seed, i)), "top_logprobs": top})
    return {"content": content}


def fingerprint(version: str) -> str:
    return f"vllm-{version}-" + format(sum(version.encode()) * 2654435761 & 0xFFFFFFFF, "08x")


def usage(prompt_tokens: int, completion_tokens: int, details: bool = True) -> dict:
    out: dict = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if details:
        out |= {"prompt_tokens_details": None, "completion_tokens_details": None}
    return out


def completion_choice(
    index: int, text: str, logprobs: dict | None, reason: str, stop_reason: str | None = None
) -> dict:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": reason,
        "stop_reason": stop_reason,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
    }


def chat_choice(
    index: int, text: str, logprobs: dict | None, reason: str, stop_reason: str | None = None
) -> dict:
    message = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": reason,
        "stop_reason": stop_reason,
        "token_ids": None,
        "routed_experts": None,
    }


def body(
    chat: bool, rid: str, created: int, model: str, choices: list[dict], use: dict, version: str
) -> dict:
    out: dict = {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": fingerprint(version),
        "usage": use,
    }
    if chat:
        out |= {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
    return out | {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def tokenize(encode: bool, raw: bytes, counter: Counter, limit: int) -> tuple[int, bytes]:
    """POST /tokenize ({"prompt"} or {"messages"}) and POST /detokenize ({"tokens"}), vLLM 0.32's shapes:
    the status and the body."""
    try:
        payload = json.loads(raw or b"null")
    except json.JSONDecodeError as exc:
        return 400, json_error(exc)
    if not isinstance(payload, dict):
        payload = {}
    if not encode:
        tokens = payload.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return 400, validation_error([missing("tokens", payload)])
        return 200, json.dumps({"prompt": counter.decode(tokens)}).encode()
    if "prompt" in payload:
        ids = counter.encode(str(payload["prompt"]))
    elif isinstance(payload.get("messages"), list):
        count = counter.chat(payload["messages"])
        ids = (
            counter.encode(
                "".join(str(m.get("content", "")) for m in payload["messages"] if isinstance(m, dict)),
                special=False,
            )
            + [1] * count
        )[:count]  # the count is the template's; the ids the contents'
    else:
        return 400, validation_error([missing("prompt", payload), missing("messages", payload)])
    count = len(ids)
    answer = {"count": count, "max_model_len": limit, "tokens": ids, "token_strs": None}
    return 200, json.dumps(answer).encode()
