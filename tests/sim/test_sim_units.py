"""Unit tests of the sim's pieces: the scheduler (KV accounting, preemption, token budget, prefix hits),
vLLM's KV arithmetic, the flag table against the real `--help=all`, and the Prometheus formatting."""

from __future__ import annotations

from vtui.sim.args import build_parser, human_int, options, parse
from vtui.sim.memory import GIB, plan_kv
from vtui.sim.metrics import buckets_1_2_5, fmt
from vtui.sim.models import resolve
from vtui.sim.scheduler import Request, Scheduler


def make(num_blocks=64, block_size=16, seqs=8, budget=256, caching=False, chunked=True, mml=2048):
    return Scheduler(
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        max_model_len=mml,
        chunked_prefill=chunked,
        prefix_caching=caching,
    )


def drive(s: Scheduler, steps: int = 10_000) -> int:
    t = 0.0
    for _ in range(steps):
        if not s.has_work():
            break
        plan = s.schedule(t)
        assert plan.prefill_tokens + plan.decode_seqs <= s.max_num_batched_tokens
        assert len(s.running) <= s.max_num_seqs
        assert 0 <= s.pool.used <= s.pool.num_blocks and s.pool.free >= 0
        t += 0.01
        s.complete(plan, t)
    return s.pool.used


def test_scheduler_frees_every_block_and_respects_budget():
    s = make()
    for i in range(20):
        s.add(Request(f"r{i}", prompt_len=100 + i * 7, max_tokens=30, arrival=0.0))
    assert drive(s) == 0
    assert s.pool.free == s.pool.num_blocks
    assert s.metrics.get("vllm:generation_tokens_total") == 20 * 30
    assert s.metrics.get("vllm:request_success_total", "length") == 20


def test_chunked_prefill_splits_a_long_prompt_across_steps():
    s = make(budget=64)
    s.add(Request("long", prompt_len=200, max_tokens=2, arrival=0.0))
    plans = []
    while s.has_work():
        plan = s.schedule(0.0)
        plans.append(plan.prefill_tokens)
        s.complete(plan, 0.0)
    assert plans[:4] == [64, 64, 64, 8]


def test_preemption_when_blocks_run_out():
    s = make(num_blocks=12, block_size=16, seqs=8, budget=512)
    for i in range(4):
        s.add(Request(f"r{i}", prompt_len=40, max_tokens=60, arrival=0.0))
    assert drive(s) == 0
    assert s.metrics.get("vllm:num_preemptions_total") > 0
    assert s.metrics.get("vllm:request_success_total", "length") == 4


def test_streaming_order_one_token_at_a_time():
    seen: list[tuple[int, str | None]] = []
    s = make()
    s.add(
        Request(
            "a",
            prompt_len=20,
            max_tokens=5,
            arrival=0.0,
            on_output=lambda r, n, reason: seen.append((r.output_len, reason)),
        )
    )
    drive(s)
    assert seen == [(1, None), (2, None), (3, None), (4, None), (5, "length")]


def test_prefix_cache_hits_on_shared_prompt_blocks():
    s = make(caching=True)
    hashes = tuple(range(1, 7))
    s.add(Request("a", prompt_len=100, max_tokens=2, arrival=0.0, block_hashes=hashes))
    drive(s)
    s.add(Request("b", prompt_len=100, max_tokens=2, arrival=0.0, block_hashes=hashes))
    drive(s)
    assert s.metrics.get("vllm:prefix_cache_hits_total") == 6 * 16
    assert s.metrics.get("vllm:prefix_cache_queries_total") == 200


def test_abort_frees_blocks():
    s = make()
    req = Request("a", prompt_len=100, max_tokens=50, arrival=0.0)
    s.add(req)
    s.complete(s.schedule(0.0), 0.0)
    assert s.pool.used > 0
    s.abort(req, 1.0)
    assert s.pool.used == 0 and not s.running


def test_kv_arithmetic_matches_vllm_formula():
    shape = resolve("meta-llama/Llama-3.1-8B-Instruct")
    common = dict(
        gpu_bytes=80 * GIB,
        utilization=0.9,
        pp=1,
        dtype="auto",
        quantization=None,
        block_size=16,
        max_model_len=8192,
        max_num_batched_tokens=8192,
        max_num_seqs=256,
    )
    p1 = plan_kv(shape, tp=1, kv_cache_dtype="auto", **common)
    assert p1.bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert (
        p1.available_bytes == p1.requested_bytes - p1.weights_bytes - p1.activation_bytes - p1.non_torch_bytes
    )
    assert p1.num_blocks == p1.available_bytes // (p1.bytes_per_token * 16)
    assert p1.tokens == p1.num_blocks * 16
    assert plan_kv(shape, tp=1, kv_cache_dtype="fp8", **common).bytes_per_token == p1.bytes_per_token // 2
    assert plan_kv(shape, tp=2, kv_cache_dtype="auto", **common).bytes_per_token == p1.bytes_per_token // 2
    assert plan_kv(shape, tp=16, kv_cache_dtype="auto", **common).bytes_per_token == 2 * 32 * 1 * 128 * 2
    fixed = plan_kv(shape, tp=1, kv_cache_dtype="auto", kv_cache_memory_bytes=GIB, **common)
    assert fixed.available_bytes == GIB and fixed.tokens == GIB // (p1.bytes_per_token * 16) * 16
    # vLLM holds one block back in the fit check (kv_cache_utils): the estimate fits GIB minus one block
    block = 16 * p1.bytes_per_token
    est = fixed.estimated_max_len()
    assert fixed.needed_bytes(est) <= GIB - block < fixed.needed_bytes(est + 16)


def test_sim_accepts_every_vllm_serve_option():
    """The sim's parser is built from vtui's flag schema (which tests/layout keeps in sync with the
    real `--help=all`): every option, alias and --no- form parses."""
    from vtui.core.flagspec import BUILTIN_FLAGS

    names = [n for spec_names, _ in options() for n in spec_names]
    assert len(options()) == len(BUILTIN_FLAGS) >= 300
    parser_opts = set(build_parser()._option_string_actions)
    assert set(names) <= parser_opts


def test_vllm_flag_forms():
    a = parse(["m", "-tp", "2", "--no-enable-prefix-caching", "--max-model-len", "1K", "--api-key", "a", "b"])
    assert (a.tensor_parallel_size, a.enable_prefix_caching, a.max_model_len, a.api_key) == (
        2,
        False,
        1024,
        ["a", "b"],
    )
    assert human_int("1k") == 1000 and human_int("2M") == 2 * 1024**2


def test_prometheus_number_format_and_buckets():
    assert fmt(1795972084.8675904) == "1.7959720848675904e+09"
    assert fmt(8.0) == "8.0" and fmt(float("inf")) == "+Inf"
    assert buckets_1_2_5(512) == (1, 2, 5, 10, 20, 50, 100, 200, 500)


def test_cost_model_moves_in_the_seeds_directions():
    from vtui.sim.engine import StepCost
    from vtui.sim.scheduler import StepPlan

    cost = StepCost(16e9, 8e9, 131072, 32, 4096, tp=1, eager=False)

    def step(prefill: int, decode: int, context: int = 0) -> float:
        return cost.seconds(StepPlan([], prefill, decode, context, 0))

    # bigger batched-token budget: more prefill tokens per second ...
    assert 65536 / step(65536, 0) > 4096 / step(4096, 0)
    # ... but decodes that share the step with a big prefill chunk wait longer (tail latency)
    assert step(65536, 64) > step(4096, 64) > step(0, 64)
    # more sequences: more decode tokens per second (memory-bound steps amortise the weights)
    assert 256 / step(0, 256, 256 * 1000) > 32 / step(0, 32, 32 * 1000)
    # eager mode and tensor parallelism change the step time
    assert StepCost(16e9, 8e9, 131072, 32, 4096, tp=1, eager=True).seconds(
        StepPlan([], 0, 8, 8000, 0)
    ) > step(0, 8, 8000)


def test_sim_memory_uses_the_shared_vllm_tables() -> None:
    """The sim's dtype, quantized-weight bytes and overheads are core.vllm_memory's (the planner's too)."""
    from vtui.core import vllm_memory
    from vtui.sim.memory import weight_dtype

    tiny = resolve("vtui/tiny-llama")
    assert tiny is not None and tiny.dtype == "float32"
    assert weight_dtype(tiny, "auto") == "bfloat16"  # vLLM >= 0.7 casts float32 checkpoints to bf16
    assert weight_dtype(tiny, "half") == "float16"
    shape = resolve("Qwen/Qwen3-8B")
    assert shape is not None
    common = dict(gpu_bytes=80 * GIB, utilization=0.9, pp=1, dtype="auto", kv_cache_dtype="auto")
    common |= dict(block_size=16, max_model_len=8192, max_num_batched_tokens=8192, max_num_seqs=1024)
    for tp in (1, 4):
        p = plan_kv(shape, tp=tp, quantization=None, **common)
        assert p.non_torch_bytes == vllm_memory.non_torch_bytes(tp, 1)
        assert p.activation_bytes == vllm_memory.activation_peak_bytes(
            hidden=shape.hidden,
            intermediate=shape.intermediate,
            vocab=shape.vocab,
            tp=tp,
            act_bytes=2,
            max_num_batched_tokens=8192,
            max_num_seqs=1024,
        )
    awq = plan_kv(shape, tp=1, quantization="awq", **common)
    assert awq.weights_bytes < plan_kv(shape, tp=1, quantization=None, **common).weights_bytes / 2


def test_a_stop_string_is_found_where_vllm_finds_it() -> None:
    """`stop_point`: the first token after which the text holds a stop string (across tokens too), the
    text kept before it (or through it), the first of the strings found winning; None when the words,
    which repeat every len(WORDS) tokens, never hold it."""
    from vtui.sim.completions import stop_point
    from vtui.sim.tokens import WORDS

    text = "".join(WORDS[(5 + i) % len(WORDS)] for i in range(6))
    span = WORDS[(5 + 2) % len(WORDS)][-2:] + WORDS[(5 + 3) % len(WORDS)][:2]  # across tokens 3 and 4
    at = text.index(span)
    assert stop_point(5, (span,), 100, False) == (4, span, at)
    assert stop_point(5, (span,), 100, True) == (4, span, at + len(span))
    assert stop_point(5, (span,), 3, False) is None  # not within the tokens it may generate
    first = WORDS[(5 + 1) % len(WORDS)].strip()
    assert stop_point(5, ("never there", first), 100, False)[:2] == (2, first)  # type: ignore[index]
    assert stop_point(5, ("\x00",), 10_000, False) is None
