"""How the sim counts tokens (vtui.sim.tokens): the model's tokenizer when `tokenizers` and a local
tokenizer.json are there, else the estimate; and the counts reach usage's checks, /tokenize and
/detokenize."""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vtui.sim import tokens
from vtui.sim.openai import Params, parse, tokenize


def _tokenizer_json(folder: Path) -> Path:
    """A word-level tokenizer.json of a few words and ChatML's markers, built with `tokenizers`."""
    lib = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "<|im_start|>": 3, "<|im_end|>": 4, "user": 5}
    vocab["assistant"] = 6
    tok = lib.Tokenizer(lib.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = lib.pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.decoder = lib.decoders.WordPiece()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


def test_estimate_when_no_tokenizer_json_is_found(tmp_path: Path) -> None:
    counter = tokens.load(str(tmp_path))  # a model folder without tokenizer.json
    assert counter.kind == "estimate" and "5 characters a token" in counter.source
    # ASCII letters, digits and whitespace: 5 characters a token
    assert counter.pieces("hello world 2025") == ["hello", " worl", "d 202", "5"]
    # any other character (punctuation, symbols, CJK): 1.25 characters a token
    assert counter.pieces("你好世界大") == ["你好", "世", "界", "大"]
    assert len(counter.encode("{}[]:")) == 4
    assert counter.pieces('{"a": 1}') == ['{"', 'a"', ":", " 1}"]
    assert len(counter.encode("")) == 1
    assert (
        counter.chat([{"role": "user", "content": "abcd"}])
        == 1 + tokens.PER_MESSAGE + tokens.GENERATION_PROMPT
    )
    # the rule before the calibration (benchmarks/bench_sim_tokens.py compares with it)
    assert tokens.EstimateCounter(4, 4).pieces("abcdefghi") == ["abcd", "efgh", "i"]
    with pytest.raises(ValueError):
        tokens.EstimateCounter(5, 0.5)


@given(st.text())
def test_the_estimate_is_the_weight_of_the_characters(text: str) -> None:
    pieces = tokens.ESTIMATE.pieces(text)
    assert "".join(pieces) == text and (all(pieces) or pieces == [""])
    word = sum(c.isspace() or (c.isascii() and c.isalnum()) for c in text)
    weight = word / Fraction(tokens.CHARS_PER_TOKEN) + (len(text) - word) / Fraction(
        tokens.OTHER_CHARS_PER_TOKEN
    )
    assert math.floor(weight) <= len(pieces) <= max(1, math.ceil(weight))


def test_estimate_without_the_tokenizers_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tokenizer_json(tmp_path)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    assert tokens.load(str(tmp_path)).kind == "estimate"


def test_tokenizer_json_of_a_model_folder_and_of_the_hf_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    assert tokens.find_tokenizer_json(str(folder)) == folder / "tokenizer.json"
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    repo = hub / "models--org--name"
    for snap in ("aaa", "bbb"):
        (repo / "snapshots" / snap).mkdir(parents=True)
        (repo / "snapshots" / snap / "tokenizer.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa\n")
    assert tokens.find_tokenizer_json("org/name") == repo / "snapshots" / "aaa" / "tokenizer.json"
    assert tokens.find_tokenizer_json("org/other") is None
    assert tokens.find_tokenizer_json("plain-name") is None


def test_counts_with_the_models_tokenizer(tmp_path: Path) -> None:
    _tokenizer_json(tmp_path)
    counter = tokens.load(str(tmp_path))
    assert counter.kind == "tokenizer" and counter.source == str(tmp_path / "tokenizer.json")
    assert counter.encode("hello world hello") == [1, 2, 1]  # 17 characters: the estimate says 4
    assert counter.decode([1, 2]) == "hello world"
    # ChatML rendering, newlines dropped by this tokenizer: <|im_start|> user hello <|im_end|> <|im_start|>
    # assistant
    assert counter.chat([{"role": "user", "content": "hello"}]) == 6


def test_a_saved_truncation_or_padding_is_ignored(tmp_path: Path) -> None:
    lib = pytest.importorskip("tokenizers")
    path = _tokenizer_json(tmp_path)
    tok = lib.Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=2)
    tok.enable_padding(length=8)
    tok.save(str(path))
    assert tokens.load(str(tmp_path)).encode("hello world hello") == [1, 2, 1]  # vLLM counts it all


def test_usage_checks_use_the_counter(tmp_path: Path) -> None:
    _tokenizer_json(tmp_path)
    counter = tokens.load(str(tmp_path))
    params = parse({"prompt": "hello world hello", "max_tokens": 4}, False, 5, counter)
    assert isinstance(params, Params)
    assert params.prompts[0].length == 3 and params.max_tokens == [2]  # capped to the context
    estimated = parse({"prompt": "hello world hello", "max_tokens": 4}, False, 5)
    assert isinstance(estimated, Params) and estimated.max_tokens == [1]  # 17 characters: 4 estimated
    too_long = parse({"prompt": "hello " * 6}, False, 5, counter)
    assert isinstance(too_long, bytes) and b"at least 6 input tokens" in too_long


def test_tokenize_and_detokenize_answer_with_the_counter(tmp_path: Path) -> None:
    _tokenizer_json(tmp_path)
    counter = tokens.load(str(tmp_path))
    status, body = tokenize(True, json.dumps({"prompt": "world hello"}).encode(), counter, 100)
    assert status == 200 and json.loads(body) | {"max_model_len": 0} == {
        "count": 2,
        "max_model_len": 0,
        "tokens": [2, 1],
        "token_strs": None,
    }
    status, body = tokenize(False, json.dumps({"tokens": [2, 1]}).encode(), counter, 100)
    assert (status, json.loads(body)) == (200, {"prompt": "world hello"})
