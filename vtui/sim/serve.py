"""The serving half of the sim: the engine loop, the HTTP server on the socket bound at start, the
background load, vLLM's API-server lines, and a clean exit 0 on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time

from vtui.sim import metrics, tokens
from vtui.sim.engine import Engine, LoadGenerator, SleepCost, SleepMemory, StepCost
from vtui.sim.httpmetrics import HttpMetrics, python_lines
from vtui.sim.logfmt import VllmLog
from vtui.sim.memory import KvPlan
from vtui.sim.models import ModelShape
from vtui.sim.scheduler import Scheduler
from vtui.sim.server import SimServer
from vtui.sim.wire import ServerConfig

ROUTES = [
    "/openapi.json",
    "/docs",
    "/health",
    "/load",
    "/version",
    "/metrics",
    "/tokenize",
    "/detokenize",
    "/v1/models",
    "/ping",
    "/v1/chat/completions",
    "/v1/completions",
]


# vLLM 0.32's CacheConfig labels (values as a CUDA run reports them); the sized ones are overridden.
CACHE_INFO_DEFAULTS = {
    "_block_size_resolved": "True",
    "block_size": "128",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "128",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "True",
    "gpu_memory_utilization": "0.92",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "2048.0",
    "kv_cache_memory_bytes": "1073741824",
    "kv_cache_size_tokens": "1048576",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "8192",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}


def cache_info(a: argparse.Namespace, plan: KvPlan) -> dict[str, str]:
    return {
        **CACHE_INFO_DEFAULTS,
        "block_size": str(a.block_size),
        "effective_attention_block_size": str(a.block_size),
        "cache_dtype": a.kv_cache_dtype,
        "enable_prefix_caching": str(bool(a.enable_prefix_caching)),
        "gpu_memory_utilization": str(a.gpu_memory_utilization),
        "kv_cache_max_concurrency": str(round(plan.max_concurrency, 2)),
        "kv_cache_memory_bytes": str(a.kv_cache_memory_bytes),
        "kv_cache_size_tokens": str(plan.tokens),
        "num_gpu_blocks": str(plan.num_blocks),
        "num_gpu_blocks_override": str(a.num_gpu_blocks_override),
    }


async def serve(
    a: argparse.Namespace,
    shape: ModelShape,
    plan: KvPlan,
    log: VllmLog,
    sock: socket.socket,
    memory: SleepMemory | None = None,
) -> int:
    m = metrics.EngineMetrics(a.max_model_len)
    sched = Scheduler(
        num_blocks=plan.num_blocks,
        block_size=a.block_size,
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        max_model_len=a.max_model_len,
        chunked_prefill=bool(a.enable_chunked_prefill),
        prefix_caching=bool(a.enable_prefix_caching),
        long_prefill_token_threshold=a.long_prefill_token_threshold or 0,
        metrics=m,
    )
    tp, pp = a.tensor_parallel_size, a.pipeline_parallel_size
    cost = StepCost(
        plan.weights_bytes,
        shape.params / (tp * pp),
        plan.bytes_per_token,
        shape.layers,
        shape.hidden,
        tp,
        bool(a.enforce_eager),
        max(1e-6, a.sim_speed),
    )
    engine = Engine(sched, cost, log, log_stats=not a.disable_log_stats, stats_interval=a.sim_stats_interval)
    engine.memory = memory if a.enable_sleep_mode else None  # no cumem allocator: a sleep frees nothing
    engine.sleep_cost = SleepCost(plan.weights_bytes, max(0.0, a.sim_startup_scale))
    dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE", "0").strip() not in ("", "0")
    names = a.served_model_name or [a.model]
    keys = a.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else [])
    info = cache_info(a, plan)
    start_time = time.time()

    def gauges() -> dict[str, float]:
        waiting = float(len(sched.waiting))
        return {
            "vllm:num_requests_running": float(len(sched.running)),
            "vllm:num_requests_waiting": waiting,
            "vllm:num_requests_waiting_by_reason/capacity": waiting,
            **{f"vllm:engine_sleep_state/{k}": v for k, v in engine.sleep_state().items()},
            "vllm:kv_cache_usage_perc": sched.kv_usage(),
        }

    http = HttpMetrics()

    def metrics_text() -> str:
        return metrics.render(
            m,
            names[0],
            gauges,
            info,
            a.sim_metrics_version,
            start_time,
            head=python_lines(),
            tail=http.lines(),
        )

    def raw(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    cfg = ServerConfig(
        names,
        a.model,
        a.max_model_len,
        a.block_size,
        keys,
        "0.32.0",
        access_log=not a.disable_uvicorn_access_log,
        seed=a.seed,
        dev_mode=dev_mode,
        counter=tokens.load(a.model, getattr(a, "tokenizer", None)),
    )
    app = SimServer(cfg, engine, metrics_text, raw, http)
    if dev_mode:
        log.api(
            "__init__.py:44",
            "SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!",
            "WARNING",
        )
    counter = cfg.counter
    how = f"the model's tokenizer ({counter.source})" if counter.kind == "tokenizer" else counter.source
    log.api("serve.py:1", f"vtui sim: counting tokens with {how} [{counter.kind}]")
    log.api("entry.py:136", "Supported tasks: ['generate']")
    host = a.host or "0.0.0.0"
    log.api("entry.py:140", f"Starting vLLM server on http://{host}:{a.port}")
    log.api("launcher.py:186", "Available routes are:")
    for route in ROUTES + (["/sleep", "/wake_up", "/is_sleeping"] if dev_mode else []):
        log.api(
            "launcher.py:195",
            f"Route: {route}, Methods: {'POST' if route.startswith(('/v1/c', '/tok', '/detok', '/sl', '/wa')) else 'GET'}",
        )
    server = await asyncio.start_server(app.handle, sock=sock, backlog=1024, limit=1 << 20)
    raw(f"INFO:     Started server process [{os.getpid()}]")
    raw("INFO:     Waiting for application startup.")
    raw("INFO:     Application startup complete.")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(engine.run()), asyncio.create_task(engine.stats_loop())]
    if a.sim_load > 0:
        gen = LoadGenerator(engine, a.sim_load, a.max_model_len, a.block_size, seed=a.seed)
        tasks.append(asyncio.create_task(gen.run()))
    await stop.wait()
    log.api("launcher.py:254", "[shutdown] API server: shutdown triggered")
    log.api("launcher.py:270", "[shutdown] API server: stopping engine client mode=abort timeout=0s")
    engine.close()
    for task in tasks:
        task.cancel()
    server.close()
    for writer in list(app.connections):
        writer.close()
    log.api("launcher.py:304", "[shutdown] API server: shutting down FastAPI HTTP server")
    raw("INFO:     Shutting down")
    raw("INFO:     Waiting for application shutdown.")
    raw("INFO:     Application shutdown complete.")
    return 0
