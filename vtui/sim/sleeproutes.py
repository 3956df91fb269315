"""vLLM 0.32's sleep-mode routes (entrypoints/serve/dev/sleep), there only with VLLM_SERVER_DEV_MODE=1:
POST /sleep?level=0|1|2&mode=abort|wait|keep, POST /wake_up[?tags=…], GET /is_sleeping, with vLLM's
answers and its 400s for a bad query parameter. The engine sleeps and wakes (vtui.sim.engine)."""

from __future__ import annotations

import json
from collections.abc import Callable

from vtui.sim.engine import PAUSE_MODES, Engine, WakeFailed
from vtui.sim.openai import error_body
from vtui.sim.wire import Reply

# the routes and the method each allows
ROUTES = {"/sleep": "POST", "/wake_up": "POST", "/is_sleeping": "GET"}


def _query_error(kind: str, name: str, msg: str, value: str, ctx: dict | None = None) -> bytes:
    """vLLM 0.32's 400 answer to a bad query parameter (its validation handler over FastAPI's error)."""
    item: dict = {"type": kind, "loc": f"query.{name}", "msg": msg, "input": value}
    if ctx:
        item["ctx"] = ctx
    return error_body(f"1 validation error:\n  {item!r}", "Bad Request", 400, f"query.{name}")


async def answer(
    engine: Engine, path: str, query: dict[str, list[str]], log_raw: Callable[[str], None]
) -> Reply:
    """The answer to one of `ROUTES` (its method checked), its query string parsed."""
    if path == "/is_sleeping":
        return 200, json.dumps({"is_sleeping": engine.is_sleeping()}).encode()
    if path == "/wake_up":
        tags = query.get("tags") or None
        log_raw(f"INFO:     wake up the engine with tags: {tags}")
        try:
            awake = await engine.wake_up(tags)
        except WakeFailed as exc:
            return 500, error_body(str(exc), "InternalServerError", 500)
        return 200, json.dumps({"status": "awake" if awake else "sleeping", "tags": tags}).encode()
    raw_level = (query.get("level") or ["1"])[-1]
    mode = (query.get("mode") or ["abort"])[-1]
    try:
        level = int(raw_level)
    except ValueError:
        return 400, _query_error(
            "int_parsing",
            "level",
            "Input should be a valid integer, unable to parse string as an integer",
            raw_level,
        )
    if level < 0 or level > 2:
        kind, op, bound = (
            ("greater_than_equal", "greater", 0) if level < 0 else ("less_than_equal", "less", 2)
        )
        return 400, _query_error(
            kind,
            "level",
            f"Input should be {op} than or equal to {bound}",
            raw_level,
            {"ge" if level < 0 else "le": bound},
        )
    if mode not in PAUSE_MODES:
        return 400, _query_error(
            "literal_error",
            "mode",
            "Input should be 'abort', 'wait' or 'keep'",
            mode,
            {"expected": "'abort', 'wait' or 'keep'"},
        )
    await engine.sleep(level, mode)
    return 200, json.dumps({"status": "sleeping", "level": level}).encode()
