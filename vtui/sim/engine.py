"""The simulated engine core: runs the scheduler on the event loop, one step at a time, each step lasting
what a GPU would take (a roofline-style cost model scaled by --sim-speed), and logs vLLM's periodic stats
line. Also the built-in background load generator (--sim-load) so dashboards move.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from vtui.sim.logfmt import VllmLog
from vtui.sim.scheduler import Request, Scheduler, StepPlan

HBM_BYTES_PER_S = 3.0e12
FLOPS_PER_S = 6.0e14
LINK_BYTES_PER_S = 3.0e11


@dataclass(frozen=True)
class StepCost:
    """Seconds per engine step from the work in it: weights and KV streamed from memory, prefill compute,
    per-step overhead (more without CUDA graphs), tensor-parallel all-reduces."""

    weights_bytes: float  # per GPU
    params_per_gpu: float
    kv_bytes_per_token: float  # per GPU
    layers: int
    hidden: int
    tp: int
    eager: bool
    speed: float = 1.0

    def seconds(self, plan: StepPlan) -> float:
        tokens = plan.prefill_tokens + plan.decode_seqs
        if tokens == 0:
            return 0.0
        memory = (self.weights_bytes + plan.context_tokens * self.kv_bytes_per_token) / HBM_BYTES_PER_S
        efficiency = tokens / (tokens + 256.0)
        compute = 2.0 * self.params_per_gpu * tokens / (FLOPS_PER_S * efficiency)
        overhead = 0.0012 + (self.layers * 25e-6 if self.eager else 0.0)
        if self.tp > 1:
            overhead += self.layers * 2 * (6e-6 + tokens * self.hidden * 2 / LINK_BYTES_PER_S)
        return (max(memory, compute) + overhead) / self.speed


class Engine:
    def __init__(
        self,
        scheduler: Scheduler,
        cost: StepCost,
        log: VllmLog | None = None,
        log_stats: bool = True,
        stats_interval: float = 10.0,
    ) -> None:
        self.scheduler = scheduler
        self.cost = cost
        self.log = log
        self.log_stats = log_stats
        self.stats_interval = stats_interval
        self._wake = asyncio.Event()
        self._closed = False
        self._last_stats = (time.monotonic(), 0.0, 0.0, 0.0, 0.0)
        self._last_logged_busy = False

    def add(self, req: Request) -> None:
        self.scheduler.add(req)
        self._wake.set()

    def abort(self, req: Request) -> None:
        self.scheduler.abort(req, time.monotonic())

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        sched = self.scheduler
        while not self._closed:
            if not sched.has_work():
                self._wake.clear()
                await self._wake.wait()
                continue
            plan = sched.schedule(time.monotonic())
            seconds = self.cost.seconds(plan)
            if seconds > 0.0005:
                await asyncio.sleep(seconds)
            else:
                await asyncio.sleep(0)
            sched.complete(plan, time.monotonic())

    async def stats_loop(self) -> None:
        """vLLM's `Engine 000: Avg prompt throughput …` line every interval while there is activity."""
        m = self.scheduler.metrics
        while not self._closed:
            await asyncio.sleep(self.stats_interval)
            now = time.monotonic()
            prompt = m.get("vllm:prompt_tokens_total")
            gen = m.get("vllm:generation_tokens_total")
            queries = m.get("vllm:prefix_cache_queries_total")
            hits = m.get("vllm:prefix_cache_hits_total")
            t0, p0, g0, q0, h0 = self._last_stats
            self._last_stats = (now, prompt, gen, queries, hits)
            busy = prompt > p0 or gen > g0 or self.scheduler.has_work()
            if not self.log_stats or self.log is None or not (busy or self._last_logged_busy):
                continue
            self._last_logged_busy = busy
            dt = max(1e-9, now - t0)
            hit_rate = 100.0 * (hits - h0) / (queries - q0) if queries > q0 else 0.0
            self.log.api(
                "loggers.py:335",
                (
                    f"Engine 000: Avg prompt throughput: {(prompt - p0) / dt:.1f} tokens/s, "
                    f"Avg generation throughput: {(gen - g0) / dt:.1f} tokens/s, "
                    f"Running: {len(self.scheduler.running)} reqs, Waiting: {len(self.scheduler.waiting)} reqs, "
                    f"GPU KV cache usage: {100.0 * self.scheduler.kv_usage():.1f}%, "
                    f"Prefix cache hit rate: {hit_rate:.1f}%"
                ),
            )


def prompt_hashes(key: str, prompt_len: int, block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of a prompt whose token i is derived from `key`'s characters."""
    out: list[int] = []
    prev = 0
    chars_per_token = 4
    for b in range(prompt_len // block_size):
        chunk = key[b * block_size * chars_per_token : (b + 1) * block_size * chars_per_token]
        prev = hash((prev, chunk if chunk else b))
        out.append(prev)
    return tuple(out)


class LoadGenerator:
    """`--sim-load N`: up to N concurrent synthetic clients with a shared system prompt, varying prompt and
    answer lengths and a slow wave in concurrency, submitted straight to the engine."""

    def __init__(
        self, engine: Engine, clients: int, max_model_len: int, block_size: int, seed: int = 0
    ) -> None:
        self.engine = engine
        self.clients = clients
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.rng = random.Random(seed)
        self.count = 0

    async def client(self, index: int) -> None:
        rng = self.rng
        system = "You are a helpful assistant. " * 40
        while True:
            phase = (time.monotonic() / 60.0 + index / max(1, self.clients)) % 1.0
            if phase > 0.75:  # this client rests for a quarter of each minute: the load breathes
                await asyncio.sleep(1.0 + rng.random())
                continue
            prompt_len = min(self.max_model_len // 2, int(rng.lognormvariate(6.0, 0.8)) + 32)
            max_tokens = max(1, min(self.max_model_len - prompt_len - 1, int(rng.lognormvariate(5.0, 0.7))))
            self.count += 1
            key = system + f"user {index} question {self.count}" * 50
            done = asyncio.get_running_loop().create_future()

            def on_output(req: Request, n: int, reason: str | None, done: asyncio.Future = done) -> None:
                if reason and not done.done():
                    done.set_result(reason)

            req = Request(
                f"load-{self.count}",
                prompt_len,
                max_tokens,
                time.monotonic(),
                block_hashes=prompt_hashes(key, prompt_len, self.block_size),
                on_output=on_output,
            )
            self.engine.add(req)
            await done
            await asyncio.sleep(rng.random() * 0.5)

    async def run(self) -> None:
        await asyncio.gather(*(self.client(i) for i in range(self.clients)))
