"""The simulated engine core: runs the scheduler on the event loop, one step at a time, each step lasting
what a GPU would take (a roofline-style cost model scaled by --sim-speed), and logs vLLM's periodic stats
line; vLLM 0.32's sleep mode (sleep levels 0-2, wake by tags, the sleep-state gauge). Also the built-in
background load generator (--sim-load) so dashboards move.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from vtui.sim.gpus import WakeFailed
from vtui.sim.logfmt import VllmLog
from vtui.sim.scheduler import Request, Scheduler, StepPlan

HBM_BYTES_PER_S = 3.0e12
FLOPS_PER_S = 6.0e14
LINK_BYTES_PER_S = 3.0e11
PCIE_BYTES_PER_S = 2.5e10  # weights offloaded to / restored from host RAM at sleep level 1
LOAD_BYTES_PER_S = 12 * 2**30  # weights reloaded at a level-2 wake: the sim's model-load rate (cli.py)
SLEEP_TAGS = ("weights", "kv_cache")  # vLLM 0.32 executor's SLEEP_TAGS
__all__ = ["WakeFailed"]  # re-exported: the sim's server answers it
PAUSE_MODES = ("abort", "wait", "keep")  # vLLM 0.32's PauseMode


class SleepMemory(Protocol):
    """Where a sleeping engine's memory goes: the simulated GPU registry, or real CUDA allocations."""

    def release(self, tags: frozenset[str]) -> int:
        """Free the allocations of these tags (per GPU); the bytes freed."""
        ...

    def restore(self, tags: frozenset[str]) -> None:
        """Allocate them again; raises WakeFailed when the GPU no longer has the room."""
        ...

    def in_use(self) -> int:
        """Bytes still held per GPU."""
        ...


@dataclass(frozen=True)
class SleepCost:
    """Seconds a sleep or a wake takes: level 1 copies the weights to host RAM and back over PCIe, level 2
    drops them and reloads them at the model-load rate; the KV cache is dropped and re-allocated (no copy).
    Scaled by --sim-startup-scale (0: instant)."""

    weights_bytes: int
    scale: float = 1.0

    def sleep_seconds(self, level: int) -> float:
        copy = self.weights_bytes / PCIE_BYTES_PER_S if level == 1 else 0.0
        return (0.02 + copy) * self.scale if level >= 1 else 0.0

    def wake_seconds(self, tags: frozenset[str], level: int) -> float:
        if not tags:
            return 0.0
        rate = PCIE_BYTES_PER_S if level == 1 else LOAD_BYTES_PER_S
        weights = self.weights_bytes / rate if "weights" in tags else 0.0
        return (0.02 + weights) * self.scale


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
        self.memory: SleepMemory | None = None  # None: no --enable-sleep-mode, a sleep frees nothing
        self.sleep_cost = SleepCost(0, 0.0)
        self.paused: str | None = None  # vLLM's pause state: None, "new" (adds held) or "all" (no steps)
        self.held: deque[Request] = deque()  # requests added while paused: scheduled once awake
        self.sleeping_tags: set[str] = set()
        self.sleep_level = 0
        self._asleep_gauge = False  # what vllm:engine_sleep_state shows (set at sleep, cleared at full wake)

    def add(self, req: Request) -> None:
        if self.paused is not None:  # vLLM: every pause mode queues new adds until the resume
            self.held.append(req)
            return
        self.scheduler.add(req)
        self._wake.set()

    # -- sleep mode -----------------------------------------------------------------------------
    def is_sleeping(self) -> bool:
        """vLLM's EngineCore.is_sleeping: the scheduler is paused or the executor holds sleeping tags."""
        return self.paused is not None or bool(self.sleeping_tags)

    def sleep_state(self) -> dict[str, float]:
        """The vllm:engine_sleep_state gauge: awake, weights_offloaded (level 1), discard_all (level 2)."""
        asleep = self._asleep_gauge
        return {
            "awake": 0.0 if asleep else 1.0,
            "weights_offloaded": 1.0 if asleep and self.sleep_level == 1 else 0.0,
            "discard_all": 1.0 if asleep and self.sleep_level == 2 else 0.0,
        }

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        """vLLM 0.32's EngineCore.sleep: pause the scheduler (abort: finish every request as `abort`; wait:
        let the running ones finish; keep: leave them queued), drop the prefix cache at level >= 1, then
        (level >= 1) free the weights and the KV cache. New requests wait until the wake."""
        if level not in (0, 1, 2):
            raise ValueError(f"Invalid sleep level: {level}")
        if mode not in PAUSE_MODES:
            raise ValueError(f"Invalid pause mode: {mode}")
        sched = self.scheduler
        now = time.monotonic()
        if self.paused is None:
            self.paused = "all" if mode == "keep" else "new"
        if mode == "abort":
            for req in [*sched.running, *sched.waiting]:
                if req in sched.running:
                    sched.running.remove(req)
                else:
                    sched.waiting.remove(req)
                sched._finish(req, "abort", now)
        elif mode == "wait":
            while sched.has_work() and not self._closed:
                await asyncio.sleep(0.005)
        if level >= 1:
            for req in list(sched.running):  # kept requests lose their KV: recomputed after the wake
                sched.running.remove(req)
                sched._preempt(req)
            sched.reset_prefix_cache()
        self._asleep_gauge = True
        self.sleep_level = level
        if level < 1:
            return
        if "weights" in self.sleeping_tags:
            self._log("abstract.py:384", "Executor is already sleeping.", "WARNING")
            return
        started = time.perf_counter()
        await asyncio.sleep(self.sleep_cost.sleep_seconds(level))
        freed = self.memory.release(frozenset(SLEEP_TAGS)) if self.memory else 0
        in_use = self.memory.in_use() if self.memory else 0
        self.sleeping_tags |= set(SLEEP_TAGS)
        self._log(
            "gpu_worker.py:330",
            f"Sleep mode freed {freed / 2**30:.2f} GiB memory, {in_use / 2**30:.2f} GiB memory is still in use.",
        )
        self._log("abstract.py:390", f"It took {time.perf_counter() - started:.6f} seconds to fall asleep.")

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        """vLLM 0.32's EngineCore.wake_up: re-allocate the tags (all when None; "scheduling" only resumes);
        the scheduler resumes, and the held requests run, once nothing sleeps. True when fully awake."""
        if tags is not None and "scheduling" in tags:
            tags = [t for t in tags if t != "scheduling"]
        if tags is None or tags:
            await self._wake_executor(tags)
        fully_awake = not self.sleeping_tags
        if fully_awake:
            self.paused = None
            self._asleep_gauge = False
            self.sleep_level = 0
            while self.held:
                self.scheduler.add(self.held.popleft())
            self._wake.set()
        return fully_awake

    async def _wake_executor(self, tags: list[str] | None) -> None:
        if not self.sleeping_tags:
            self._log("abstract.py:397", "Executor is not sleeping.", "WARNING")
            return
        for tag in tags or ():
            if tag not in self.sleeping_tags:
                self._log(
                    "abstract.py:402", f"Tag {tag} is not in sleeping tags {self.sleeping_tags}", "WARNING"
                )
                return
        waking = frozenset(tags) if tags else frozenset(self.sleeping_tags)
        started = time.perf_counter()
        await asyncio.sleep(self.sleep_cost.wake_seconds(waking, self.sleep_level))
        if self.memory:
            self.memory.restore(waking)
        self._log(
            "abstract.py:410",
            f"It took {time.perf_counter() - started:.6f} seconds to wake up tags "
            f"{tags if tags is not None else set(SLEEP_TAGS)}.",
        )
        self.sleeping_tags -= waking

    def _log(self, where: str, message: str, level: str = "INFO") -> None:
        if self.log is not None:
            self.log.engine(where, message, level)

    def abort(self, req: Request) -> None:
        self.scheduler.abort(req, time.monotonic())

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        sched = self.scheduler
        while not self._closed:
            if not sched.has_work() or self.paused == "all" or self.sleeping_tags:
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
