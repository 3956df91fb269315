"""Weights hash in baselines: content hash of a local model's weight files, the HF cache's blob names
used without reading, nothing for hub names or models too large to read; what else differs from a
baseline is named."""

from __future__ import annotations

import hashlib

from vtui.bench.baseline import context_differences, weights_fingerprint


def _combined(pairs: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{n}\t{s}\n" for n, s in sorted(pairs.items())).encode()).hexdigest()


def test_a_local_folder_is_hashed_by_content(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights-1")
    fp = weights_fingerprint(str(tmp_path))
    assert fp == {
        "sha256": _combined({"model.safetensors": hashlib.sha256(b"weights-1").hexdigest()}),
        "files": 1,
        "method": "content",
    }
    (tmp_path / "model.safetensors").write_bytes(b"weights-2")
    assert weights_fingerprint(str(tmp_path))["sha256"] != fp["sha256"]  # other weights, other hash


def test_hf_cache_links_use_the_blob_names_without_reading(tmp_path):
    blobs = tmp_path / "models--org--m" / "blobs"
    snap = tmp_path / "models--org--m" / "snapshots" / ("c" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    names = {"model-00001-of-00002.safetensors": "a" * 64, "model-00002-of-00002.safetensors": "b" * 64}
    for name, sha in names.items():
        (blobs / sha).write_bytes(b"content that does not match the name")  # read it and the hash differs
        (snap / name).symlink_to(blobs / sha)
    fp = weights_fingerprint(str(snap))
    assert fp == {"sha256": _combined(names), "files": 2, "method": "hf-cache-names"}


def test_no_hash_for_hub_names_empty_folders_or_too_much_to_read(tmp_path):
    assert weights_fingerprint("Qwen/Qwen3-8B") is None
    assert weights_fingerprint(str(tmp_path)) is None
    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    assert weights_fingerprint(str(tmp_path), limit=99) is None
    assert weights_fingerprint(str(tmp_path), limit=100) is not None


def test_context_differences_name_weights_version_and_flags():
    base = {
        "model": "/m",
        "weights_sha256": "aa",
        "vllm_version": "0.32.0",
        "flags": {"max-num-seqs": 8, "enforce-eager": True},
    }
    now = {
        "model": "/m",
        "weights_sha256": "bb",
        "vllm_version": "0.32.0",
        "flags": {"max-num-seqs": 4, "max-model-len": 512, "enforce-eager": True},
    }
    assert context_differences(now, base) == [
        "weights (sha256): baseline aa, now bb",
        "flags: max-model-len (unset) -> 512, max-num-seqs 8 -> 4",
    ]
    assert context_differences(base, base) == []
    assert context_differences({"flags": {}}, {"weights_sha256": "aa", "flags": {}}) == []  # unknown: no note
