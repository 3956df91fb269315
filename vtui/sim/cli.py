"""`vtui sim MODEL [vllm serve flags] [--sim-…]`: start the simulated engine. Startup prints vLLM 0.32's log
lines with its KV arithmetic; a failed start prints vLLM's wording and exits 1; an unknown flag exits 2."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import time

from vtui.core import vllm_memory
from vtui.sim import args as simargs
from vtui.sim import device, logfmt, models
from vtui.sim.gpus import RegistrySleep
from vtui.sim.gpuview import registry_free
from vtui.sim.memory import GIB, GpuRegistry, KvPlan, physical_gpus, plan_kv, weight_dtype

HELP = "run the simulated vLLM engine (same flags as `vllm serve`, plus --sim-…)"
PASS_THROUGH = True
VERSION = "0.32.0"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments are vLLM's own, parsed by `run` (PASS_THROUGH)."""


class StartFailed(Exception):
    """A start failure already reported in vLLM's words."""


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _bind(host: str | None, port: int) -> socket.socket:
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio only sets TCP_NODELAY on sockets whose protocol is TCP, and without it the
    # first SSE chunk on a reused connection waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
    return sock


def _defaults(a: argparse.Namespace, shape: models.ModelShape) -> None:
    if a.max_model_len is None:
        a.max_model_len = shape.max_position
    if a.enable_chunked_prefill is None:
        a.enable_chunked_prefill = True
    if a.enable_prefix_caching is None:
        a.enable_prefix_caching = True
    if a.max_num_seqs is None:
        a.max_num_seqs = vllm_memory.default_max_num_seqs(a.sim_gpu_memory_gib)
    if a.max_num_batched_tokens is None:
        a.max_num_batched_tokens = vllm_memory.default_max_num_batched_tokens(
            a.sim_gpu_memory_gib, chunked_prefill=a.enable_chunked_prefill, max_model_len=a.max_model_len
        )
    if a.block_size is None:
        a.block_size = 16


def _engine_failure(
    log: logfmt.VllmLog,
    message: str,
    line: int = 157,
    func: str = "__init__",
    call: str = "kv_cache_config = self._initialize_kv_caches(vllm_config)",
) -> StartFailed:
    log.line(
        "EngineCore",
        "ERROR",
        "core.py:1510",
        logfmt.ENGINE_TRACE.format(line=line, func=func, call=call, error=message),
    )
    log.raw("Process EngineCore:", sys.stderr)
    log.raw(f"Traceback (most recent call last):\n{message}", sys.stderr)
    log.raw(logfmt.ENGINE_FAILED_TRACE, sys.stderr)
    return StartFailed(message)


def start(
    a: argparse.Namespace,
    log: logfmt.VllmLog,
    registry: GpuRegistry,
    holder: list[int],
    sleep_out: list | None = None,
):
    """The slow part of `vllm serve`, in its log lines. Returns (shape, plan) or raises StartFailed.
    `sleep_out` receives the memory a sleep frees (the engine's SleepMemory)."""
    scale = max(0.0, a.sim_startup_scale)
    log.banner(a.model, VERSION)
    log.api("api_utils.py:286", f"non-default args: {simargs.non_default(a)}")
    shape = models.resolve(a.model, a.sim_params)
    if shape is None:
        if models.start_refusal(a.model, a.sim_params):
            log.raw(logfmt.HF_TRACE.format(model=a.model), sys.stderr)
            raise StartFailed("HFValidationError")
        shape = models.shape_for_params(a.model, 8e9)
        log.api(
            "sim.py:1",
            f"vtui sim: unknown model {a.model!r}, simulating 8B parameters (see --sim-params)",
            "WARNING",
        )
    _sleep(0.8 * scale)
    log.api("model.py:733", f"Resolved architecture: {shape.architecture}")
    derived = shape.max_position
    if (
        a.max_model_len
        and a.max_model_len > derived
        and os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1"
    ):
        msg = (
            f"User-specified max_model_len ({a.max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={float(derived)} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
            "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
            "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
            "array out-of-bounds error."
        )
        log.raw(logfmt.MODEL_CONFIG_TRACE.format(message=msg), sys.stderr)
        raise StartFailed(msg)
    _defaults(a, shape)
    log.api("model.py:2152", f"Using max model len {a.max_model_len}")
    tp, pp = a.tensor_parallel_size, a.pipeline_parallel_size
    if shape.heads % tp:
        msg = f"Total number of attention heads ({shape.heads}) must be divisible by tensor parallel size ({tp})."
        log.raw(logfmt.MODEL_CONFIG_TRACE.format(message=msg), sys.stderr)
        raise StartFailed(msg)
    if not a.enable_chunked_prefill and a.max_num_batched_tokens < a.max_model_len:
        msg = (
            f"max_num_batched_tokens ({a.max_num_batched_tokens}) is smaller than max_model_len "
            f"({a.max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
        log.raw(
            logfmt.MODEL_CONFIG_TRACE.format(message=msg).replace("ModelConfig", "SchedulerConfig"),
            sys.stderr,
        )
        raise StartFailed(msg)
    if a.max_num_batched_tokens > 8192 and a.enable_chunked_prefill:
        log.api(
            "scheduler.py:258",
            f"Chunked prefill is enabled with max_num_batched_tokens={a.max_num_batched_tokens}.",
        )
    if a.enforce_eager:
        log.api(
            "vllm.py:1703",
            "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. "
            "This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none and "
            "--kernel_config.enable_jit_warmup=False",
            "WARNING",
        )
    gpus = physical_gpus(tp * pp, a.sim_num_gpus)
    if len(gpus) < tp * pp:
        msg = f"please set tensor_parallel_size ({tp * pp}) to less than max local gpu count ({len(gpus)})"
        log.raw(logfmt.API_TRACE_HEAD + f"\nAssertionError: {msg}", sys.stderr)
        raise StartFailed(msg)
    _sleep(0.6 * scale)
    mem, snap = _open_device(a, log, holder, tp * pp) if a.sim_device == "cuda" else (None, None)
    if a.sim_engine_child and mem is None:
        from vtui.sim import child

        proc = child.spawn()
        holder.append(proc.pid)
        log.engine_pid = proc.pid
    dtype = weight_dtype(shape, a.dtype)
    log.engine(
        "core.py:133",
        (
            f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{a.model}', speculative_config=None, "
            f"tokenizer='{a.model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            f"trust_remote_code={a.trust_remote_code}, dtype=torch.{dtype}, max_seq_len={a.max_model_len}, "
            f"download_dir=None, load_format=auto, tensor_parallel_size={tp}, pipeline_parallel_size={pp}, "
            f"data_parallel_size={a.data_parallel_size}, quantization={a.quantization}, enforce_eager={a.enforce_eager}, "
            f"kv_cache_dtype={a.kv_cache_dtype}, device_config=cuda, seed={a.seed}, "
            f"served_model_name={(a.served_model_name or [a.model])[0]}, "
            f"enable_prefix_caching={a.enable_prefix_caching}, enable_chunked_prefill={a.enable_chunked_prefill}"
        ),
    )
    dev_index, dev = device.tightest(snap) if snap else (0, None)
    plan = plan_kv(
        shape,
        gpu_bytes=dev.total if dev else int(a.sim_gpu_memory_gib * GIB),
        utilization=a.gpu_memory_utilization,
        tp=tp,
        pp=pp,
        dtype=a.dtype,
        quantization=a.quantization,
        kv_cache_dtype=a.kv_cache_dtype,
        block_size=a.block_size,
        max_model_len=a.max_model_len,
        max_num_batched_tokens=a.max_num_batched_tokens,
        max_num_seqs=a.max_num_seqs,
        kv_cache_memory_bytes=a.kv_cache_memory_bytes,
        num_gpu_blocks_override=a.num_gpu_blocks_override,
        cpu_offload_gib=a.cpu_offload_gb,
    )
    owner = holder[0] if holder else os.getpid()
    with registry.locked():
        free = registry_free(registry, gpus, plan.total_bytes, owner) if dev is None else dev.free
        if free < plan.requested_bytes:
            msg = (
                f"ValueError: Free memory on device cuda:{dev_index} ({free / GIB:.2f}/{plan.total_bytes / GIB:.2f} GiB) "
                f"on startup is less than desired GPU memory utilization ({a.gpu_memory_utilization}, "
                f"{plan.requested_bytes / GIB:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory "
                "used by other processes."
            )
            log.line("Worker", "ERROR", "multiproc_executor.py:953", "WorkerProc failed to start.\n" + msg)
            raise _engine_failure(
                log,
                "Exception: WorkerProc initialization failed due to an exception in a "
                "background process. See stack trace for root cause.",
                144,
                "__init__",
                "self.model_executor = executor_class(vllm_config)",
            )
        claim = (
            plan.requested_bytes
            if a.kv_cache_memory_bytes is None
            else (
                plan.weights_bytes
                + plan.activation_bytes
                + plan.non_torch_bytes
                + max(0, plan.available_bytes)
            )
        )
        if mem is None:  # real memory is its own registry
            registry.claim(owner, gpus, claim)
            if sleep_out is not None:
                tagged = {"weights": plan.weights_bytes, "kv_cache": max(0, plan.available_bytes)}
                sleep_out.append(RegistrySleep(registry, owner, gpus, claim, tagged, plan.total_bytes))
        elif sleep_out is not None:
            sleep_out.append(device.DeviceSleep(mem))
    log.engine("gpu_model_runner.py:3447", f"Starting to load model {a.model}...")
    load_s = min(3.0, 0.3 + plan.weights_bytes / GIB / 12.0) * scale
    _sleep(load_s)
    if mem is not None:  # the weights are on the GPU once loaded
        _cuda(log, mem.allocate, "weights", plan.weights_bytes)
    if plan.weights_bytes > free:
        msg = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {min(plan.weights_bytes, 2 * GIB) / GIB:.2f} GiB. "
            f"GPU 0 has a total capacity of {plan.total_bytes / GIB:.2f} GiB of which {max(0, free) / GIB:.2f} GiB is free."
        )
        raise _engine_failure(log, msg, 144, "__init__", "self.model_executor = executor_class(vllm_config)")
    log.engine("default_loader.py:501", f"Loading weights took {load_s * 0.8 + 0.01:.2f} seconds")
    log.engine(
        "gpu_model_runner.py:3537",
        f"Model loading took {plan.weights_bytes / GIB:.4f} GiB memory and {load_s + 0.05:.6f} seconds",
    )
    init_t0 = time.monotonic()
    if not a.enforce_eager:
        _sleep(0.5 * scale)
        log.engine("monitor.py:34", f"torch.compile takes {0.5 * scale + 3.1:.2f} s in total")
    _sleep(0.3 * scale)
    with registry.locked() if mem is not None else contextlib.nullcontext():  # profile + KV as one step
        if mem is not None and snap is not None:
            _cuda(log, mem.allocate, "activation", plan.activation_bytes)
            plan = device.charge_others(plan, device.others_growth(snap, mem.info()))
        log.engine("gpu_worker.py:298", f"Available KV cache memory: {plan.available_bytes / GIB:.2f} GiB")
        _check_kv(a, plan, log)
        if mem is not None:
            _cuda(log, mem.allocate, "kv_cache", device.kv_bytes(plan))
        log.engine(
            "kv_cache_utils.py:2327",
            f"GPU KV cache size: {plan.tokens:,} tokens, Maximum concurrency "
            f"for {a.max_model_len:,} tokens per request: {plan.max_concurrency:.2f}x",
        )
    if not a.enforce_eager:
        _sleep(0.4 * scale)
        n = 67
        log.raw(
            f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| {n}/{n} [00:0{int(2 * scale)}<00:00, 30.12it/s]",
            sys.stderr,
        )
        log.engine(
            "gpu_model_runner.py:4417",
            f"Graph capturing finished in {max(1, int(2 * scale))} secs, took 0.45 GiB",
        )
    log.engine(
        "core.py:402",
        f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - init_t0 + 1.2 * scale:.2f} s",
    )
    return shape, plan


def _open_device(a: argparse.Namespace, log: logfmt.VllmLog, holder: list[int], count: int):
    """--sim-device cuda: the CUDA memory holder (in the engine-core child with --sim-engine-child) and
    vLLM's start snapshot of the visible GPUs; a clear failure when torch or CUDA is missing."""
    mem = None
    try:
        mem = device.open_memory(count, engine_child=a.sim_engine_child)
        if a.sim_engine_child:
            holder.append(mem.pid)
            log.engine_pid = mem.pid
        return mem, mem.open()
    except device.DeviceUnavailable as exc:
        log.line("EngineCore", "ERROR", "sim.py:1", f"RuntimeError: {exc}", sys.stderr)
        raise StartFailed(str(exc)) from exc


def _cuda(log: logfmt.VllmLog, allocate, tag: str, nbytes: int) -> None:
    try:
        allocate(tag, nbytes)
    except device.CudaOutOfMemory as exc:
        raise _engine_failure(
            log, str(exc), 144, "__init__", "self.model_executor = executor_class(vllm_config)"
        ) from exc
    except device.DeviceUnavailable as exc:
        raise _engine_failure(log, f"RuntimeError: {exc}") from exc


def _check_kv(a: argparse.Namespace, plan: KvPlan, log: logfmt.VllmLog) -> None:
    doc = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    if plan.available_bytes <= 0 or plan.num_blocks == 0:
        raise _engine_failure(
            log,
            (
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite "
                f"its name). {doc}"
            ),
        )
    needed = plan.needed_bytes(a.max_model_len)
    if needed > plan.fit_budget and not a.num_gpu_blocks_override:
        estimated = plan.estimated_max_len()
        est = (
            f"Based on the available memory, the estimated maximum model length is {estimated}. "
            if estimated > 0
            else ""
        )
        raise _engine_failure(
            log,
            (
                f"ValueError: To serve at least one request with the model's max seq len ({a.max_model_len}), "
                f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({plan.available_bytes / GIB:.2f} GiB). {est}Try increasing `gpu_memory_utilization` (which also "
                f"controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. {doc}"
            ),
        )


def run(argv: list[str]) -> int:
    a = simargs.parse(list(argv))
    from vtui.sim.serve import serve

    log = logfmt.VllmLog(os.getpid(), os.getpid())
    registry = GpuRegistry()
    holder: list[int] = []

    def _term(signum: int, frame: object) -> None:
        raise SystemExit(0)

    old = signal.signal(signal.SIGTERM, _term)
    sock = None
    try:
        try:
            sock = _bind(a.host, a.port)
        except OSError as exc:
            log.banner(a.model, VERSION)
            log.api("api_utils.py:286", f"non-default args: {simargs.non_default(a)}")
            log.raw(logfmt.PORT_TRACE if exc.errno == 98 else f"OSError: {exc}", sys.stderr)
            return 1
        try:
            sleep_memory: list = []
            shape, plan = start(a, log, registry, holder, sleep_memory)
        except StartFailed:
            return 1
        signal.signal(signal.SIGTERM, old)
        return asyncio.run(serve(a, shape, plan, log, sock, sleep_memory[0] if sleep_memory else None))
    finally:
        if sock is not None:
            sock.close()
        for pid in holder:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        registry.release(holder[0] if holder else os.getpid())
