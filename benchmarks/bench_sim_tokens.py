"""How far the sim's token estimate is from real tokenizers: for every tokenizer.json found on this
machine (the tiny test model's, and the Hugging Face cache's snapshots; nothing is downloaded), on the
repository's own English prose (README.md, docs/) and Python (vtui/sim/), paragraph by paragraph:

- the characters a token the tokenizer takes (its fit: all characters / all tokens);
- the mean absolute error per paragraph of the sim's estimate (vtui.sim.tokens.CHARS_PER_TOKEN), of
  the fitted ratio, and of one token a word (what the sim once did);
- how many of the sim's generated words (vtui.sim.tokens.WORDS) are one token.

`python benchmarks/bench_sim_tokens.py [--model DIR_OR_ID ...]`. Smoke: the first 20 paragraphs of
README.md, with whatever tokenizer is found (none in the smoke test's environment: it says so).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vtui.sim import tokens  # noqa: E402


def paragraphs(files: list[Path], limit: int | None) -> list[str]:
    out = [p for f in files for p in f.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return out[:limit] if limit else out


def candidates(models: list[str]) -> list[Path]:
    home = Path(os.environ.get("VTUI_TEST_HOME") or Path.home() / ".cache" / "vtui-test")
    found = [tokens.find_tokenizer_json(m) for m in models]
    found.append(tokens.find_tokenizer_json(os.environ.get("VTUI_TINY_MODEL") or str(home / "tiny-llama")))
    hub = tokens.hf_hub()
    found += sorted(hub.glob("models--*/snapshots/*/tokenizer.json")) if hub.is_dir() else []
    return list(dict.fromkeys(p for p in found if p is not None))


def mean_error(texts: list[str], truth: list[int], guess: list[float]) -> float:
    return sum(abs(g - t) / t for g, t in zip(guess, truth, strict=True)) / len(texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], help="a model folder or id (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="paragraphs per kind of text")
    _smoke.tiny(parser, limit=20)
    args = parser.parse_args()
    kinds = {
        "prose": paragraphs([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], args.limit),
        "python": paragraphs(sorted((ROOT / "vtui" / "sim").glob("*.py")), args.limit),
    }
    paths = candidates(args.model)
    if not paths:
        print("no tokenizer.json on this machine: nothing to calibrate against")
        return 0
    for path in paths:
        counter = tokens.load(str(path.parent))
        if counter.kind != "tokenizer":
            print(f"{path}: not readable here (is the `tokens` extra installed?)")
            continue
        single = sum(len(counter.encode(w, special=False)) == 1 for w in tokens.WORDS)
        print(f"{path}: {single}/{len(tokens.WORDS)} of the sim's generated words are one token")
        for kind, texts in kinds.items():
            truth = [len(counter.encode(t, special=False)) for t in texts]
            ratio = sum(map(len, texts)) / sum(truth)
            estimate = [max(1.0, len(t) / tokens.CHARS_PER_TOKEN) for t in texts]
            fitted = [max(1.0, len(t) / ratio) for t in texts]
            words = [float(max(1, len(t.split()))) for t in texts]
            print(
                f"  {kind:6} {len(texts):4} paragraphs, {sum(truth):6} tokens: {ratio:.2f} characters a token;"
                f" mean error per paragraph: estimate ({tokens.CHARS_PER_TOKEN} chars) "
                f"{mean_error(texts, truth, estimate):.1%}, fitted {mean_error(texts, truth, fitted):.1%},"
                f" a token a word {mean_error(texts, truth, words):.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
