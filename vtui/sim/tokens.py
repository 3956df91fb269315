"""How the sim counts tokens: the one home of it.

With the optional `tokenizers` package (the `tokens` extra) and a local `tokenizer.json` -- in the model
folder given as the model (or `--tokenizer`), or in the Hugging Face cache's snapshot of that model id --
the sim counts with the model's own tokenizer (`TokenizerCounter`). It never downloads. Otherwise it
estimates (`EstimateCounter`): one token per `CHARS_PER_TOKEN` characters.

Calibration of the estimate (benchmarks/bench_sim_tokens.py, figures in benchmarks/README.md): the only
tokenizer present on the build machine is the tiny test model's (a byte-level BPE of 1,300 tokens trained
on a few paragraphs), which takes 1.5-1.8 characters a token on English prose and code, and so says
nothing about a real vocabulary of 32k-200k tokens. The estimate keeps 4 characters a token, the usual
figure for those on English text; the benchmark prints its error against every tokenizer it finds
locally. Against the tiny one (2026-12-04): 1.74 characters a token on prose, 1.45 on Python; the
estimate's mean error per paragraph 55.6 % and 62.1 % (a token a word, what the sim once did: 69.6 % and
82.3 %). That is why the sim uses a real tokenizer when it can.

Completion tokens are the engine's generation steps, one word of `WORDS` each; the text is not tokenized
again (with the tiny model's tokenizer, 3 of the 24 words take more than one token).

Chat prompts: a model with ChatML's `<|im_start|>` token is counted on the ChatML rendering (exact for
ChatML templates, such as the tiny model's); any other model, and the estimate, add 4 tokens a message
and 3 for the generation prompt to the messages' contents.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

# The sim's generated tokens: one word each (each one token in the tiny test model's tokenizer but
# " we", " request" and " serve"; see benchmarks/bench_sim_tokens.py)
WORDS = [
    " the",
    " model",
    " token",
    " of",
    " a",
    " cache",
    " and",
    " GPU",
    " is",
    " to",
    " batch",
    " in",
    " vLLM",
    " memory",
    " fast",
    " we",
    " request",
    " with",
    " block",
    " serve",
    ".",
    ",",
    " it",
    " for",
]
CHARS_PER_TOKEN = 4
PER_MESSAGE = 4  # role markers around each message, when the chat template cannot be rendered
GENERATION_PROMPT = 3


class Counter(Protocol):
    kind: str  # "tokenizer" or "estimate"
    source: str  # what it read (the tokenizer.json's path) or how it estimates

    def encode(self, text: str, special: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def pieces(self, text: str) -> list[str]:
        """The prompt's tokens as texts (what `echo` with logprobs shows)."""
        ...

    def chat(self, messages: Sequence[Any]) -> int:
        """Tokens of a chat prompt with its generation prompt."""
        ...


def _contents(messages: Sequence[Any]) -> list[tuple[str, str]]:
    return [
        (str(m.get("role", "user")), str(m.get("content", "") or "")) for m in messages if isinstance(m, dict)
    ]


class EstimateCounter:
    """One token per CHARS_PER_TOKEN characters (at least one); ids made up from the characters."""

    kind = "estimate"

    def __init__(self) -> None:
        self.source = f"{CHARS_PER_TOKEN} characters a token"

    def pieces(self, text: str) -> list[str]:
        step = CHARS_PER_TOKEN
        return [text[i : i + step] for i in range(0, len(text), step)] or [""]

    def encode(self, text: str, special: bool = True) -> list[int]:
        return [sum(piece.encode()) % 32000 for piece in self.pieces(text)]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(WORDS[t % len(WORDS)] for t in ids)

    def chat(self, messages: Sequence[Any]) -> int:
        text = "".join(content for _, content in _contents(messages))
        return len(self.encode(text)) + PER_MESSAGE * len(messages) + GENERATION_PROMPT


class TokenizerCounter:
    """The model's own tokenizer (a `tokenizers.Tokenizer` read from its tokenizer.json)."""

    kind = "tokenizer"

    def __init__(self, path: Path, tok: Any) -> None:
        self.source = str(path)
        self._tok = tok  # a tokenizers.Tokenizer
        # a tokenizer.json may carry the truncation or padding its last user set (a saved one can say
        # "max_length": 50); vLLM counts the whole prompt
        self._tok.no_truncation()
        self._tok.no_padding()
        self._chatml = self._tok.token_to_id("<|im_start|>") is not None

    def encode(self, text: str, special: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=special).ids)

    def decode(self, ids: Sequence[int]) -> str:
        size = self._tok.get_vocab_size(with_added_tokens=True)
        return str(self._tok.decode([i for i in ids if 0 <= i < size], skip_special_tokens=False))

    def pieces(self, text: str) -> list[str]:
        ids = self.encode(text)
        return [self.decode([i]) for i in ids] or [""]

    def chat(self, messages: Sequence[Any]) -> int:
        parts = _contents(messages)
        if self._chatml:
            rendered = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in parts)
            return len(self.encode(rendered + "<|im_start|>assistant\n", special=False))
        content = sum(len(self.encode(c, special=False)) for _, c in parts)
        return content + PER_MESSAGE * len(messages) + GENERATION_PROMPT + len(self.encode("", special=True))


def hf_hub() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "huggingface" / "hub"


def find_tokenizer_json(model: str) -> Path | None:
    """The local tokenizer.json of `model`: in the folder it names, else in the Hugging Face cache's
    snapshot of that model id (the one refs/main points at, else the newest). Never downloads."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        found = folder / "tokenizer.json"
        return found if found.is_file() else None
    if model.count("/") != 1:
        return None
    repo = hf_hub() / ("models--" + model.replace("/", "--"))
    try:
        ref = (repo / "refs" / "main").read_text().strip()
    except OSError:
        ref = ""
    if ref and (repo / "snapshots" / ref / "tokenizer.json").is_file():
        return repo / "snapshots" / ref / "tokenizer.json"
    snapshots = sorted(
        (p for p in (repo / "snapshots").glob("*/tokenizer.json") if p.is_file()),
        key=lambda p: p.stat().st_mtime,
    )
    return snapshots[-1] if snapshots else None


def load(model: str, tokenizer: str | None = None) -> Counter:
    """The model's tokenizer when `tokenizers` is installed and a local tokenizer.json is found; else
    the estimate."""
    path = find_tokenizer_json(tokenizer or model)
    if path is None:
        return EstimateCounter()
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the `tokens` extra is not installed
        return EstimateCounter()
    try:
        return TokenizerCounter(path, Tokenizer.from_file(str(path)))
    except Exception:  # noqa: BLE001 — tokenizers raises its own untyped errors on a file it cannot read
        return EstimateCounter()


ESTIMATE = EstimateCounter()
