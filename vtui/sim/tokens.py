"""How the sim counts tokens: the one home of it.

With the optional `tokenizers` package (the `tokens` extra) and a local `tokenizer.json` -- in the model
folder given as the model (or `--tokenizer`), or in the Hugging Face cache's snapshot of that model id --
the sim counts with the model's own tokenizer (`TokenizerCounter`). It never downloads. Otherwise it
estimates (`EstimateCounter`): CHARS_PER_TOKEN (5) characters a token for ASCII letters, digits and
whitespace, OTHER_CHARS_PER_TOKEN (1.25) for any other character: punctuation and symbols, which the
tokenizers mostly keep one a token, and CJK and other scripts.

Calibration of the estimate (benchmarks/bench_sim_tokens.py; the tokenizers' sources and every figure in
benchmarks/README.md), 2026-12-04: five real vocabularies -- Qwen2's (Qwen2.5's and Qwen3's too; 151,643
tokens), Llama 3's (128,000), Mistral v0.3's (32,768), Llama 2's as Phi-3 uses it (32,000) and GPT-2's
(50,257, a baseline) -- on benchmarks/token_samples/ (61 short texts: English prose, code, chat with JSON,
Chinese). Their characters a token: prose 4.35-4.78, code 2.76-3.56, chat with JSON 2.43-2.94, Chinese
0.74 (Llama 2) to 1.58 (Qwen2), so no one rate fits: the former 4 characters a token, any character,
erred by 21 %, 22 %, 32 % and 71 % per text on those (the mean over the four served vocabularies, not
GPT-2). Weighing two kinds of characters instead, the rates with the least mean error over the four, every
kind of text weighing alike (`--fit`, a grid of 3-7 by 1-2), are 5 and 1.25: 8.0 % on prose, 13.2 % on
code, 15.1 % on chat with JSON, 26.2 % on Chinese (7.9 % against Llama 3, 28.5 % Qwen2, 25.6 % Mistral,
42.9 % Llama 2: one rate cannot fit vocabularies that far apart there). Against the tiny test model's
1,300-token BPE it errs 49-73 %: a toy vocabulary; that is why the sim uses a real tokenizer when it can.

Completion tokens are the engine's generation steps, one word of `WORDS` each; the text is not tokenized
again (with the tiny model's tokenizer, 3 of the 24 words take more than one token).

Chat prompts: a model with ChatML's `<|im_start|>` token is counted on the ChatML rendering (exact for
ChatML templates, such as the tiny model's); any other model, and the estimate, add 4 tokens a message
and 3 for the generation prompt to the messages' contents.
"""

from __future__ import annotations

import os
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

# The sim's generated tokens: one word each (each one token in the tiny test model's tokenizer but
# " we", " request" and " serve", and in Qwen2's, Llama 3's, Mistral's and GPT-2's but " vLLM"; see
# benchmarks/bench_sim_tokens.py)
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
CHARS_PER_TOKEN = 5.0  # the estimate's rate for ASCII letters and digits, and whitespace
OTHER_CHARS_PER_TOKEN = 1.25  # for any other character: punctuation, symbols, CJK, other scripts
_UNIT = 1000  # the estimate weighs characters in thousandths of a token
_WORD_CHARS = frozenset(string.ascii_letters + string.digits)
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
    """Characters weighed: 1/CHARS_PER_TOKEN of a token for an ASCII letter or digit or a whitespace,
    1/OTHER_CHARS_PER_TOKEN for any other character. A token ends at each character that brings the
    running weight to a whole number of tokens or past it; the characters after the last such make one
    more (and an empty text one). Ids made up from the characters."""

    kind = "estimate"

    def __init__(
        self, chars_per_token: float = CHARS_PER_TOKEN, other_chars_per_token: float = OTHER_CHARS_PER_TOKEN
    ) -> None:
        if min(chars_per_token, other_chars_per_token) < 1:
            raise ValueError("the estimate's rates are at least 1 character a token")
        self._word = round(_UNIT / chars_per_token)
        self._other = round(_UNIT / other_chars_per_token)
        self.source = (
            f"an estimate: {chars_per_token:g} characters a token for ASCII letters, digits and whitespace,"
            f" {other_chars_per_token:g} for any other character"
        )

    def pieces(self, text: str) -> list[str]:
        out: list[str] = []
        start = weight = 0
        end = _UNIT  # the running weight at which the current token ends
        for i, char in enumerate(text):
            weight += self._word if char in _WORD_CHARS or char.isspace() else self._other
            if weight >= end:  # a character weighs at most a token: it ends one at most
                out.append(text[start : i + 1])
                start, end = i + 1, end + _UNIT
        if start < len(text) or not out:
            out.append(text[start:])
        return out

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
