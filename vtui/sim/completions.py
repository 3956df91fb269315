"""The generating routes of the sim's server: /v1/completions and /v1/chat/completions (SSE streaming
with usage, or one JSON body) and /v1/responses (text in, one message out, over a chat completion). A
request becomes one engine request per prompt and sample; the engine's steps are the tokens, words of
`WORDS` chosen from a per-choice seed; a stop string ends a choice where vLLM's detokenizer would
(`stop_point`). Request checks and body shapes are vLLM 0.32's (vtui.sim.openai)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable

from vtui.sim import wire
from vtui.sim.engine import Engine, prompt_hashes
from vtui.sim.openai import (
    Params,
    body,
    chat_choice,
    chat_logprobs,
    completion_choice,
    completion_logprobs,
    error_body,
    fingerprint,
    json_error,
    missing,
    model_not_found,
    parse,
    usage,
    validation_error,
)
from vtui.sim.scheduler import Request
from vtui.sim.tokens import WORDS
from vtui.sim.wire import Reply, ServerConfig

_WORDS_JSON = [json.dumps(w)[1:-1] for w in WORDS]


class Completions:
    """The generating routes over one engine. Each answers with a `Reply` for the server to write, or
    None when it streamed its answer (status 200) to the writer itself."""

    def __init__(self, cfg: ServerConfig, engine: Engine) -> None:
        self.cfg = cfg
        self.engine = engine

    async def generate(self, chat: bool, raw: bytes, writer: asyncio.StreamWriter) -> Reply | None:
        """/v1/completions and /v1/chat/completions as vLLM 0.32 answers them: one choice per prompt
        and sample (`n`), index in order; a stream's last token chunk carries its finish_reason."""
        try:
            payload = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            return 400, json_error(exc)
        if not isinstance(payload, dict):
            return 400, error_body("Invalid JSON body", "BadRequestError", 400)
        asked = payload.get("model")
        if asked and asked not in self.cfg.served_names:  # vLLM: the served names only, not the model's path
            return 404, model_not_found(str(asked), self.cfg.served_names)
        name = self.cfg.served_names[0]  # vLLM answers with its first served name, whichever alias was asked
        params = parse(payload, chat, self.cfg.max_model_len, self.cfg.counter)
        if isinstance(params, bytes):
            return 400, params
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        n = params.n
        count = len(params.prompts) * n
        texts: list[list[str]] = [[] for _ in range(count)]
        reasons: list[str | None] = [None] * count
        finished = [0]
        obj = "chat.completion.chunk" if chat else "text_completion"
        top = f'"id":"{rid}","object":"{obj}","created":{created},"model":{json.dumps(name)}'
        stream, k = params.stream, params.logprobs
        seeds = [(hash(prompt.key) + j * 7919) & 0xFFFF for prompt in params.prompts for j in range(n)]
        # the simulated model's end of sequence: at a length chosen by the seed (never with ignore_eos)
        eos = [1 << 30 if params.ignore_eos else 8 + (seed * 2654435761) % 600 for seed in seeds]
        plan = [
            (seed, min(end, params.max_tokens[i // n]))
            for i, (seed, end) in enumerate(zip(seeds, eos, strict=True))
        ]
        last_extra = (
            "" if params.include_usage else f',"system_fingerprint":"{fingerprint(self.cfg.version)}"'
        )

        stops = (
            [stop_point(seed, params.stop, limit, params.include_stop) for seed, limit in plan]
            if params.stop
            else []
        )
        hold = max(map(len, params.stop)) - 1 if params.stop and not params.include_stop else 0
        sent = [0] * count  # characters of each choice's text streamed so far (a stop string holds some back)

        def visible(index: int, reason: str | None) -> str:
            """What of the choice's text may be sent: all but the last `hold` characters while it runs (they
            could start a stop string), the text up to its stop string once it ended (vLLM's detokenizer)."""
            text = "".join(texts[index])
            end = stops[index]
            if reason is not None and end is not None and len(texts[index]) == end[0]:
                return text[: end[2]]
            return text if reason is not None or not hold else text[: max(0, len(text) - hold)]

        def stop_reason(index: int, reason: str | None) -> str | None:
            end = stops[index] if stops else None
            return end[1] if reason == "stop" and end is not None and len(texts[index]) == end[0] else None

        def chunk(index: int, seed: int, i: int, token: str | None, reason: str | None) -> str:
            text = "" if token is None else _WORDS_JSON[(seed + i) % len(WORDS)]
            if stops:
                shown = visible(index, reason)
                text, sent[index] = json.dumps(shown[sent[index] :])[1:-1], max(sent[index], len(shown))
            lp = "null"
            if k is not None and token is not None:
                lp = json.dumps(
                    chat_logprobs(seed, i, [token], k)
                    if chat
                    else completion_logprobs(seed, i, [token], k, sum(map(len, texts[index][:-1])))
                )
            fin = "null" if reason is None else f'"{reason}"'
            why = json.dumps(stop_reason(index, reason)) if stops else "null"
            tail = f',"stop_reason":{why}' if reason else ""
            if chat:
                choice = f'"delta":{{"content":"{text}"}},"logprobs":{lp},"finish_reason":{fin}{tail},"token_ids":null'
            else:
                choice = (
                    f'"text":"{text}","logprobs":{lp},"finish_reason":{fin},"stop_reason":{why},'
                    '"prompt_token_ids":null,"token_ids":null'
                )
            extra = last_extra if reason else ""
            return f'data: {{{top},"choices":[{{"index":{index},{choice}}}]{extra}}}\n\n'

        def watcher(index: int, seed: int) -> Callable[[Request, int, str | None], None]:
            def on_output(req: Request, new: int, reason: str | None) -> None:
                i = req.output_len - 1
                token = WORDS[(seed + i) % len(WORDS)] if new else None
                if token is not None:
                    texts[index].append(token)
                if stream:
                    if writer.is_closing():
                        if not done.done():
                            done.set_result("gone")
                        return
                    if new or reason:
                        writer.write(wire.chunk(chunk(index, seed, i, token, reason).encode()))
                if reason:
                    reasons[index] = reason
                    finished[0] += 1
                    if finished[0] == count and not done.done():
                        done.set_result(reason)

            return on_output

        requests: list[Request] = []
        for p, prompt in enumerate(params.prompts):
            for j in range(n):
                seed = seeds[len(requests)]
                stop_at = eos[len(requests)]
                if stops and stops[len(requests)] is not None:
                    stop_at = min(stop_at, stops[len(requests)][0])  # type: ignore[index]
                requests.append(
                    Request(
                        f"{rid}-{p}-{j}" if count > 1 else rid,
                        prompt.length,
                        params.max_tokens[p],
                        time.monotonic(),
                        stop_at=stop_at,
                        block_hashes=prompt_hashes(prompt.key, prompt.length, self.cfg.block_size),
                        on_output=watcher(len(requests), seed),
                        n=n,
                    )
                )
        if stream:
            writer.write(wire.stream_head(self.cfg.counter.kind))
            if chat:
                for index in range(count):
                    first = (
                        f'data: {{{top},"choices":[{{"index":{index},"delta":{{"role":"assistant","content":""}},'
                        '"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
                    )
                    writer.write(wire.chunk(first.encode()))
        for req in requests:
            self.engine.add(req)
        try:
            await done
        except asyncio.CancelledError:
            for req in requests:
                self.engine.abort(req)
            raise
        prompt_tokens = sum(prompt.length for prompt in params.prompts)
        completion_tokens = sum(req.output_len for req in requests)
        if done.result() == "gone":
            for req in requests:
                self.engine.abort(req)
            return None
        if stream:
            tail = ""
            if params.include_usage:
                use = json.dumps(
                    usage(prompt_tokens, completion_tokens, details=False), separators=(",", ":")
                )
                tail = f'data: {{{top},"choices":[],"usage":{use},"system_fingerprint":"{fingerprint(self.cfg.version)}"}}\n\n'
            writer.write(wire.chunk((tail + "data: [DONE]\n\n").encode()) + wire.LAST_CHUNK)
            try:
                await writer.drain()
            except ConnectionError:
                pass
            return None
        ends = [stop_reason(i, reasons[i]) if stops else None for i in range(count)]
        texts_out = [visible(i, reasons[i] or "length") if stops else "".join(texts[i]) for i in range(count)]
        answer = self.answer(
            chat,
            rid,
            created,
            name,
            params,
            texts,
            reasons,
            seeds,
            prompt_tokens,
            completion_tokens,
            texts_out,
            ends,
        )
        return 200, json.dumps(answer).encode()

    def answer(
        self,
        chat: bool,
        rid: str,
        created: int,
        name: str,
        params: Params,
        texts: list[list[str]],
        reasons: list[str | None],
        seeds: list[int],
        prompt_tokens: int,
        completion_tokens: int,
        shown: list[str],
        ends: list[str | None],
    ) -> dict:
        """The one JSON body of a request that did not stream. `shown`: each choice's text (up to its stop
        string); `ends`: the stop string that ended it, if one did."""
        k = params.logprobs
        choices = []
        for index, tokens in enumerate(texts):
            reason = reasons[index] or "length"
            if chat:
                lp = chat_logprobs(seeds[index], 0, tokens, k) if k is not None else None
                choices.append(chat_choice(index, shown[index], lp, reason, ends[index]))
                continue
            prompt = params.prompts[index // params.n]
            echoed = self.cfg.counter.pieces(prompt.text) if params.echo else []
            lp = None
            if k is not None:
                lp = completion_logprobs(seeds[index], 0, echoed + tokens, k, 0, prompt=len(echoed))
            choice = completion_choice(index, "".join(echoed) + shown[index], lp, reason, ends[index])
            if lp is not None and echoed:  # vLLM sends the prompt's logprobs too, keyed by token id
                choice["prompt_logprobs"] = [None] + [
                    {str(sum(piece.encode()) % 32000): {"logprob": v, "rank": 1, "decoded_token": piece}}
                    for piece, v in zip(echoed[1:], lp["token_logprobs"][1 : len(echoed)], strict=True)
                ]
            choices.append(choice)
        return body(
            chat, rid, created, name, choices, usage(prompt_tokens, completion_tokens), self.cfg.version
        )

    async def responses(self, raw: bytes, writer: asyncio.StreamWriter) -> Reply:
        """POST /v1/responses, the basic form: text (or messages) in, one assistant message out; no stream
        (the chat completion it asks for never streams: `generate` answers with its body)."""
        try:
            payload = json.loads(raw) if raw else None
        except json.JSONDecodeError as exc:
            return 400, json_error(exc)
        if payload is None:
            return 400, validation_error(
                [{"type": "missing", "loc": "body", "msg": "Field required", "input": "None"}]
            )
        if not isinstance(payload, dict) or "input" not in payload:
            return 400, validation_error([missing("input", payload or {})])
        given = payload["input"]
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
        chat: dict = {"model": payload.get("model"), "messages": messages}
        if payload.get("max_output_tokens") is not None:
            chat["max_tokens"] = payload["max_output_tokens"]
        for key in ("temperature", "top_p"):
            if payload.get(key) is not None:
                chat[key] = payload[key]
        reply = await self.generate(True, json.dumps(chat).encode(), writer)
        assert reply is not None, "a chat completion without `stream` answers with one body"
        status, done = reply
        if status != 200:
            return reply
        return 200, json.dumps(_response(payload, json.loads(done))).encode()


def stop_point(seed: int, stops: tuple[str, ...], limit: int, include: bool) -> tuple[int, str, int] | None:
    """Where the words of the choice `seed` first hold one of `stops` within `limit` tokens, looked for
    as vLLM's detokenizer does after each token (in the characters it added, and a stop string's length
    before them; the first of `stops` found wins): (tokens generated by then, the stop string, the length
    of the text the answer keeps: up to the stop string, or through it with `include`). None: never. The
    words repeat every len(WORDS) tokens, so looking further than that and one stop string on is vain."""
    longest = max(map(len, stops))
    text = ""
    for i in range(min(limit, len(WORDS) + longest + 1)):
        before = len(text)
        text += WORDS[(seed + i) % len(WORDS)]
        for stop in stops:
            at = text.find(stop, max(0, before + 1 - len(stop)))
            if at >= 0:
                return i + 1, stop, at + len(stop) if include else at
    return None


def _response(payload: dict, done: dict) -> dict:
    """The /v1/responses body of the request `payload`, from the chat completion's body `done`."""
    choice, use = done["choices"][0], done["usage"]
    complete = choice["finish_reason"] != "length"
    return {
        "id": "resp_" + uuid.uuid4().hex[:16],
        "created_at": done["created"],
        "incomplete_details": None if complete else {"reason": "max_output_tokens"},
        "instructions": payload.get("instructions"),
        "metadata": payload.get("metadata"),
        "model": done["model"],
        "object": "response",
        "output": [
            {
                "id": "msg_" + uuid.uuid4().hex[:16],
                "content": [
                    {
                        "annotations": [],
                        "text": choice["message"]["content"],
                        "type": "output_text",
                        "logprobs": None,
                    }
                ],
                "role": "assistant",
                "status": "completed",
                "type": "message",
                "phase": None,
            }
        ],
        "parallel_tool_calls": True,
        "temperature": float(payload.get("temperature", 1.0)),
        "tool_choice": "none",
        "tools": [],
        "top_p": float(payload.get("top_p", 1.0)),
        "background": False,
        "max_output_tokens": payload.get("max_output_tokens"),
        "max_tool_calls": None,
        "previous_response_id": None,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "status": "completed" if complete else "incomplete",
        "text": None,
        "top_logprobs": None,
        "truncation": "disabled",
        "usage": {
            "input_tokens": use["prompt_tokens"],
            "input_tokens_details": {
                "cached_tokens": 0,
                "cache_write_tokens": 0,
                "input_tokens_per_turn": [],
                "cached_tokens_per_turn": [],
            },
            "output_tokens": use["completion_tokens"],
            "output_tokens_details": {
                "reasoning_tokens": 0,
                "tool_output_tokens": 0,
                "output_tokens_per_turn": [],
                "tool_output_tokens_per_turn": [],
            },
            "total_tokens": use["total_tokens"],
        },
        "user": None,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }
