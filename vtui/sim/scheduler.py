"""A scheduler that behaves like vLLM V1's: continuous batching up to max-num-seqs, a per-step token budget
with chunked prefill, paged KV blocks allocated as requests grow and freed when they end, preemption by
recompute when blocks run out, prefix-cache hits on full prompt blocks. Pure and clock-free: the caller
(`vtui.sim.engine`) decides when a step runs and how long it takes (`StepCost`).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from vtui.sim.metrics import EngineMetrics

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


@dataclass(eq=False)
class Request:
    rid: str
    prompt_len: int
    max_tokens: int
    arrival: float
    stop_at: int = 1 << 30  # output length at which the simulated model emits EOS
    block_hashes: tuple[int, ...] = ()  # chained hashes of the full prompt blocks (prefix caching)
    on_output: Callable[[Request, int, str | None], None] | None = None  # (req, new tokens, finish reason)
    n: int = 1
    # state
    status: str = WAITING
    output_len: int = 0
    num_computed: int = 0
    blocks: list[int | None] = field(default_factory=list)  # cached block hash, or None for private
    registered: int = 0  # prompt blocks already offered to the prefix cache
    cached_tokens: int = 0
    num_preemptions: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finish_reason: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_len + self.output_len


class BlockPool:
    """Paged KV blocks: private blocks, and hashed prompt blocks that outlive their request (LRU evictable)."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.free = num_blocks
        self.used = 0
        self.refs: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()

    def available(self) -> int:
        return self.free + len(self.evictable)

    def take(self, count: int) -> bool:
        if count > self.available():
            return False
        from_free = min(count, self.free)
        self.free -= from_free
        for _ in range(count - from_free):
            victim, _ = self.evictable.popitem(last=False)
            del self.refs[victim]
        self.used += count
        return True

    def touch(self, h: int) -> None:
        refs = self.refs[h]
        if refs == 0:
            del self.evictable[h]
            self.used += 1
        self.refs[h] = refs + 1

    def register(self, h: int) -> bool:
        """Turn one of a request's private blocks into the cached block `h` (False when `h` exists)."""
        if not self.caching or h in self.refs:
            return False
        self.refs[h] = 1
        return True

    def release(self, blocks: list[int | None]) -> None:
        for entry in reversed(blocks):  # tail first, like vLLM, so shared prefixes are evicted last
            if entry is None:
                self.used -= 1
                self.free += 1
            else:
                refs = self.refs[entry] - 1
                self.refs[entry] = refs
                if refs == 0:
                    self.used -= 1
                    self.evictable[entry] = None
        blocks.clear()

    def usage(self) -> float:
        return self.used / self.num_blocks if self.num_blocks else 0.0


@dataclass
class StepPlan:
    scheduled: list[tuple[Request, int]]
    prefill_tokens: int
    decode_seqs: int
    context_tokens: int  # KV tokens read by attention this step
    preempted: int


class Scheduler:
    def __init__(
        self,
        *,
        num_blocks: int,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        chunked_prefill: bool = True,
        prefix_caching: bool = True,
        long_prefill_token_threshold: int = 0,
        metrics: EngineMetrics | None = None,
    ) -> None:
        self.pool = BlockPool(num_blocks, block_size, prefix_caching)
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.chunked_prefill = chunked_prefill
        self.long_prefill = long_prefill_token_threshold
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.metrics = metrics or EngineMetrics(max_model_len)

    # -- requests -------------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, req: Request, now: float) -> None:
        if req.status == FINISHED:
            return
        if req.status == WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        else:
            self.running.remove(req)
        self._finish(req, "abort", now, notify=False)

    # -- one step -------------------------------------------------------------------------------
    def _allocate(self, req: Request, num_new: int) -> bool:
        need = math.ceil((req.num_computed + num_new) / self.block_size) - len(req.blocks)
        if need <= 0:
            return True
        if not self.pool.take(need):
            return False
        req.blocks.extend([None] * need)
        return True

    def _preempt(self, req: Request) -> None:
        self.pool.release(req.blocks)
        req.status = WAITING
        req.num_computed = 0
        req.registered = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        self.metrics.inc("vllm:num_preemptions_total")

    def _prefix_hits(self, req: Request) -> int:
        if not self.pool.caching or req.num_computed:
            return 0
        limit = (req.total_tokens - 1) // self.block_size
        hits = 0
        for h in req.block_hashes[:limit]:
            if h not in self.pool.refs:
                break
            hits += 1
        return hits

    def schedule(self, now: float) -> StepPlan:
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted = 0
        prefill_tokens = decode_seqs = context = 0
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = req.total_tokens - req.num_computed
            if self.long_prefill and num_new > self.long_prefill:
                num_new = self.long_prefill
            num_new = min(num_new, budget)
            while not self._allocate(req, num_new):
                victim = self.running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    break
            else:
                scheduled.append((req, num_new))
                budget -= num_new
                i += 1
                continue
            break
        if not preempted:
            while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
                req = self.waiting[0]
                hits = self._prefix_hits(req)
                num_new = req.total_tokens - hits * self.block_size
                if not self.chunked_prefill and num_new > budget:
                    break
                if self.long_prefill and num_new > self.long_prefill:
                    num_new = self.long_prefill
                num_new = min(num_new, budget)
                hashes = req.block_hashes[:hits]
                for h in hashes:
                    self.pool.touch(h)
                req.blocks = list(hashes)
                req.num_computed = hits * self.block_size
                if not self._allocate(req, num_new):
                    self.pool.release(req.blocks)
                    req.num_computed = 0
                    break
                self.waiting.popleft()
                self.running.append(req)
                req.status = RUNNING
                req.registered = hits
                if req.first_scheduled is None:
                    req.first_scheduled = now
                    req.cached_tokens = hits * self.block_size
                    self.metrics.inc("vllm:prefix_cache_queries_total", req.prompt_len)
                    self.metrics.inc("vllm:prefix_cache_hits_total", req.cached_tokens)
                scheduled.append((req, num_new))
                budget -= num_new
        for req, num_new in scheduled:
            if num_new == 1 and req.num_computed == req.total_tokens - 1:
                decode_seqs += 1
            else:
                prefill_tokens += num_new
            context += req.num_computed + num_new
        return StepPlan(scheduled, prefill_tokens, decode_seqs, context, preempted)

    def complete(self, plan: StepPlan, now: float) -> list[Request]:
        """Apply a finished step: advance computed tokens, sample one token per caught-up request, finish."""
        m = self.metrics
        m.hist["vllm:iteration_tokens_total"].observe(plan.prefill_tokens + plan.decode_seqs)
        itl = m.hist["vllm:inter_token_latency_seconds"]
        finished: list[Request] = []
        generated = 0
        bs = self.block_size
        for req, num_new in plan.scheduled:
            if req.status != RUNNING:
                continue
            req.num_computed += num_new
            if self.pool.caching and req.registered < len(req.block_hashes):
                full = min(req.num_computed, req.prompt_len) // bs
                while req.registered < full and req.registered < len(req.block_hashes):
                    h = req.block_hashes[req.registered]
                    if req.blocks[req.registered] is None and self.pool.register(h):
                        req.blocks[req.registered] = h
                    req.registered += 1
            if req.num_computed < req.total_tokens:
                continue  # mid-prefill chunk
            req.output_len += 1
            generated += 1
            if req.first_token is None:
                req.first_token = now
                m.hist["vllm:time_to_first_token_seconds"].observe(now - req.arrival)
                m.inc("vllm:prompt_tokens_total", req.prompt_len)
                m.inc(
                    "vllm:prompt_tokens_by_source_total", req.prompt_len - req.cached_tokens, "local_compute"
                )
                m.inc("vllm:prompt_tokens_by_source_total", req.cached_tokens, "local_cache_hit")
                m.inc("vllm:prompt_tokens_cached_total", req.cached_tokens)
                m.inc("vllm:prompt_tokens_cached_by_source_total", req.cached_tokens, "device")
            elif req.last_token is not None:
                itl.observe(now - req.last_token)
            req.last_token = now
            reason = None
            if req.output_len >= req.stop_at:
                reason = "stop"
            elif req.output_len >= req.max_tokens or req.total_tokens >= self.max_model_len:
                reason = "length"
            if reason:
                finished.append(req)
                req.finish_reason = reason
            elif req.on_output:
                req.on_output(req, 1, None)
        m.inc("vllm:generation_tokens_total", generated)
        for req in finished:
            self.running.remove(req)
            self._finish(req, req.finish_reason or "length", now)
        return finished

    def _finish(self, req: Request, reason: str, now: float, notify: bool = True) -> None:
        self.pool.release(req.blocks)
        req.status = FINISHED
        req.finish_reason = reason
        m = self.metrics
        m.inc("vllm:request_success_total", 1, reason)
        if reason != "abort":
            h = m.hist
            first_sched = req.first_scheduled if req.first_scheduled is not None else now
            first_tok = req.first_token if req.first_token is not None else now
            h["vllm:e2e_request_latency_seconds"].observe(now - req.arrival)
            h["vllm:request_queue_time_seconds"].observe(first_sched - req.arrival)
            h["vllm:request_inference_time_seconds"].observe(now - first_sched)
            h["vllm:request_prefill_time_seconds"].observe(first_tok - first_sched)
            h["vllm:request_decode_time_seconds"].observe(now - first_tok)
            h["vllm:request_prompt_tokens"].observe(req.prompt_len)
            h["vllm:request_generation_tokens"].observe(req.output_len)
            h["vllm:request_max_num_generation_tokens"].observe(req.max_tokens)
            h["vllm:request_params_max_tokens"].observe(req.max_tokens)
            h["vllm:request_params_n"].observe(req.n)
            h["vllm:request_num_preemptions"].observe(req.num_preemptions)
            h["vllm:request_prefill_kv_computed_tokens"].observe(req.prompt_len - req.cached_tokens)
            if req.output_len > 1:
                h["vllm:request_time_per_output_token_seconds"].observe(
                    (now - first_tok) / (req.output_len - 1)
                )
        if notify and req.on_output:
            req.on_output(req, 1 if reason != "abort" else 0, reason)

    def reset_prefix_cache(self) -> None:
        """Drop every cached prefix block no request holds (vLLM clears the prefix cache at a sleep)."""
        pool = self.pool
        for h in pool.evictable:
            del pool.refs[h]
        pool.free += len(pool.evictable)
        pool.evictable.clear()

    def kv_usage(self) -> float:
        return self.pool.usage()
