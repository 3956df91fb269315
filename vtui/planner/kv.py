"""vLLM V1's KV-cache arithmetic (as in vLLM 0.32 `v1/core/kv_cache_utils.py`), reproduced so a plan's
token count equals what the engine logs for the same KV budget, to the block.

What vLLM does, and what this module mirrors:
- Each attention layer has a page: `block_size × kv_heads_per_gpu × (head_dim + head_dim_v) × dtype`
  bytes (MLA: one latent `kv_lora_rank + qk_rope_head_dim` per token, no V, not split by TP).
  `kv_heads_per_gpu = max(1, kv_heads // tp)`: TP beyond the KV head count replicates heads.
- Layers are grouped (one group when all layers are alike; hybrid sliding/full models get
  `group_size` layers per group, padded). One block = one page in every layer of the widest group:
  `bytes_per_block = group_size × page`; `num_blocks = available_bytes // bytes_per_block`
  (the smallest across pipeline stages).
- A request at max_model_len needs, per group, `cdiv(L, block_size)` blocks (full attention) or
  `cdiv(min(window - 1 + in_flight_tokens, L), block_size) + 1` (sliding window); the sum over groups
  is one request's blocks. `max_concurrency = num_blocks / that`, and the logged
  "KV cache size: N tokens" is `int(max_concurrency × L)` — equal to `num_blocks × block_size` only
  when L is a whole number of blocks on a model without sliding layers.
- Fit check: one request must fit in `available − bytes_per_block` (the null block is held back);
  the longest length that fits is found by the same binary search vLLM uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtui.planner.config import ModelConfig


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Group:
    """One KV-cache group: its kind, and how many of its layers sit on each pipeline stage."""

    kind: str  # "full" | "sliding"
    layers_per_stage: tuple[int, ...]


@dataclass(frozen=True)
class KVLayout:
    """Per-GPU KV geometry of a model under a given parallel split and cache dtype."""

    page_bytes: int  # one block of one layer on one GPU
    block_size: int
    groups: tuple[Group, ...]
    window: int | None
    kv_heads_per_gpu: int
    layers_per_gpu: int  # attention layers on the busiest stage
    bytes_per_token_per_layer: int

    @property
    def bytes_per_block(self) -> int:
        """vLLM's divisor: pages of the widest group on the busiest stage."""
        return max(max(g.layers_per_stage) for g in self.groups) * self.page_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token costs on one GPU, across its layers (full-attention view)."""
        return self.bytes_per_token_per_layer * self.layers_per_gpu


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """vLLM's default pipeline split: equal shares, the remainder to the stages before the last."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def _grouped_layers(types: list[str]) -> list[tuple[str, list[int]]]:
    """vLLM's hybrid grouping: buckets by kind, split into groups of `group_size` layers."""
    buckets: dict[str, list[int]] = {}
    for index, kind in enumerate(types):
        buckets.setdefault(kind, []).append(index)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)
    groups: list[tuple[str, list[int]]] = []
    for kind, layers in buckets.items():
        n_groups = cdiv(len(layers), group_size)
        groups += [(kind, layers[i::n_groups]) for i in range(n_groups)]
    return groups


def kv_layout(
    model: ModelConfig,
    *,
    tp: int = 1,
    pp: int = 1,
    block_size: int = 16,
    kv_dtype_bytes: float = 2,
    hybrid_manager: bool = True,
    kv_bytes_per_token_override: int | None = None,
) -> KVLayout:
    """The per-GPU KV geometry. `kv_bytes_per_token_override` is per layer (fp8_ds_mla: 656)."""
    if model.is_mla:
        kv_heads = 1
        per_token = kv_bytes_per_token_override or int(
            ((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) * kv_dtype_bytes
        )
    else:
        kv_heads = max(1, model.num_kv_heads // tp)
        per_token = kv_bytes_per_token_override or int(kv_heads * 2 * model.head_dim * kv_dtype_bytes)
    types = list(model.layer_types) or ["full"] * model.num_layers
    window = model.sliding_window
    if not hybrid_manager and "full" in types:
        types = ["full"] * len(types)  # --disable-hybrid-kv-cache-manager: sliding layers kept whole
    if "sliding" not in types:
        window = None
    stages = pp_partition(len(types), pp)
    bounds = [sum(stages[:i]) for i in range(pp + 1)]
    groups = []
    for kind, layers in _grouped_layers(types):
        per_stage = tuple(sum(1 for x in layers if bounds[s] <= x < bounds[s + 1]) for s in range(pp))
        groups.append(Group(kind, per_stage))
    return KVLayout(
        page_bytes=block_size * per_token,
        block_size=block_size,
        groups=tuple(groups),
        window=window,
        kv_heads_per_gpu=kv_heads,
        layers_per_gpu=max(stages),
        bytes_per_token_per_layer=per_token,
    )


def blocks_per_request(layout: KVLayout, max_model_len: int, in_flight_tokens: int) -> int:
    """Blocks one request at `max_model_len` holds, summed over groups (vLLM's admission bound)."""
    total = 0
    for group in layout.groups:
        if group.kind == "sliding" and layout.window:
            tokens = min(layout.window - 1 + in_flight_tokens, max_model_len)
            total += cdiv(tokens, layout.block_size) + 1
        else:
            total += cdiv(max_model_len, layout.block_size)
    return total


@dataclass(frozen=True)
class KVCapacity:
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int  # what vLLM logs: int(max_concurrency × max_model_len)
    block_tokens: int  # num_blocks × block_size: token slots in whole blocks
    fits: bool
    estimated_max_model_len: int  # longest length (≤ limit) one request can have in this budget


def capacity(
    layout: KVLayout,
    available_bytes: int,
    max_model_len: int,
    *,
    in_flight_tokens: int,
    len_limit: int | None = None,
) -> KVCapacity:
    """Blocks, concurrency and logged tokens for a per-GPU KV budget, exactly as vLLM computes them."""
    bpb = layout.bytes_per_block
    num_blocks = max(0, available_bytes) // bpb
    per_req = blocks_per_request(layout, max_model_len, in_flight_tokens)
    conc = num_blocks / per_req if per_req else 0.0
    check = available_bytes - bpb

    def fits(length: int) -> bool:
        return bpb * blocks_per_request(layout, length, in_flight_tokens) <= check

    limit = max(len_limit or max_model_len, 1)
    best = 0
    if fits(1):
        lo, hi, best = 1, limit, 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if fits(mid):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
    return KVCapacity(
        num_blocks=num_blocks,
        blocks_per_request=per_req,
        max_concurrency=conc,
        kv_cache_tokens=int(conc * max_model_len),
        block_tokens=num_blocks * layout.block_size,
        fits=available_bytes > 0 and fits(max_model_len),
        estimated_max_model_len=best,
    )
