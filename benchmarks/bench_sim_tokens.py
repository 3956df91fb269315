"""How far the sim's token estimate is from real tokenizers: for each tokenizer.json given (a folder of
them, `DIR/tokenizer.json` or `DIR/*/tokenizer.json`, or a model), else each one found on this machine
(the tiny test model's, the Hugging Face cache's snapshots; nothing is downloaded), on the fixed texts of
benchmarks/token_samples/ (English prose, code, chat with JSON, Chinese), text by text:

- the characters a token it takes on each kind of text (all characters / all tokens);
- the mean absolute error per text of the sim's estimate (vtui.sim.tokens.EstimateCounter), of the rule
  before it (4 characters a token, every character alike), and of the tokenizer's own ratio for that kind
  (the best any one ratio can do, knowing the tokenizer);
- how many of the sim's generated words (vtui.sim.tokens.WORDS) are one token.

With `--fit`, the estimate's two rates (vtui.sim.tokens.CHARS_PER_TOKEN for ASCII letters, digits and
whitespace, OTHER_CHARS_PER_TOKEN for any other character) that minimize the mean error over the
tokenizers given (less those named by `--not-fitted`, left out of the mean line too), every kind of text
weighing alike.

`python benchmarks/bench_sim_tokens.py [DIR ...] [--model DIR_OR_ID ...] [--fit [--not-fitted NAME ...]]`.
Smoke: 3 texts of each kind, with whatever tokenizer is found (none in the smoke test's environment: it
says so, after the estimate's own counts).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import _smoke

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "token_samples"
sys.path.insert(0, str(ROOT))

from vtui.sim import tokens  # noqa: E402

BEFORE = (4.0, 4.0)  # the estimate's rates until its calibration: 4 characters a token, any character
FIT_WORD = [3 + 0.25 * i for i in range(17)]  # 3 to 7 characters a token
FIT_OTHER = [1 + 0.05 * i for i in range(21)]  # 1 to 2


def samples(limit: int | None) -> dict[str, list[str]]:
    """benchmarks/token_samples/KIND.txt: texts separated by a line of `%%`."""
    out = {}
    for path in sorted(SAMPLES.glob("*.txt")):
        texts = [t.strip("\n") for t in path.read_text(encoding="utf-8").split("\n%%\n") if t.strip()]
        out[path.stem] = texts[:limit] if limit else texts
    return out


def given(folders: list[Path], models: list[str]) -> list[Path]:
    """The tokenizer.json files of the folders and models given, else those found on this machine."""
    found: list[Path | None] = []
    for folder in folders:
        found += [folder / "tokenizer.json", *sorted(folder.glob("*/tokenizer.json"))]
    found += [tokens.find_tokenizer_json(m) for m in models]
    if found:
        return list(dict.fromkeys(p.resolve() for p in found if p is not None and p.is_file()))
    home = Path(os.environ.get("VTUI_TEST_HOME") or Path.home() / ".cache" / "vtui-test")
    found.append(tokens.find_tokenizer_json(os.environ.get("VTUI_TINY_MODEL") or str(home / "tiny-llama")))
    hub = tokens.hf_hub()
    found += sorted(hub.glob("models--*/snapshots/*/tokenizer.json")) if hub.is_dir() else []
    return list(dict.fromkeys(p.resolve() for p in found if p is not None and p.is_file()))


def name_of(path: Path) -> str:
    if path.parent.parent.name == "snapshots":  # the Hugging Face cache: models--org--name/snapshots/REF
        return path.parents[2].name.removeprefix("models--").replace("--", "/")
    return path.parent.name


def mean_error(truth: list[int], guess: list[int]) -> float:
    return sum(abs(g - t) / t for g, t in zip(guess, truth, strict=True)) / len(truth)


def estimate(kinds: dict[str, list[str]], rates: tuple[float, float]) -> dict[str, list[int]]:
    counter = tokens.EstimateCounter(*rates)
    return {kind: [len(counter.encode(t)) for t in texts] for kind, texts in kinds.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="a folder of tokenizer.json files")
    parser.add_argument("--model", action="append", default=[], help="a model folder or id (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="texts per kind")
    parser.add_argument("--fit", action="store_true", help="search the estimate's rates")
    parser.add_argument(
        "--not-fitted", action="append", default=[], help="a tokenizer left out of --fit and the mean"
    )
    _smoke.tiny(parser, limit=3)
    args = parser.parse_args()
    kinds = samples(args.limit)
    now = (tokens.CHARS_PER_TOKEN, tokens.OTHER_CHARS_PER_TOKEN)
    guess, before = estimate(kinds, now), estimate(kinds, BEFORE)
    print(tokens.ESTIMATE.source)
    for kind, texts in kinds.items():
        chars = sum(map(len, texts))
        print(f"  {kind:9} {len(texts):3} texts {chars:6} characters: {sum(guess[kind]):5} tokens estimated")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("no `tokenizers` package (the `tokens` extra): nothing to calibrate against")
        return 0
    paths = given(args.folders, args.model)
    if not paths:
        print("no tokenizer.json given or on this machine: nothing to calibrate against")
        return 0
    truths: dict[str, dict[str, list[int]]] = {}
    for path in paths:
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 — tokenizers raises its own untyped errors
            print(f"{path}: not readable here: {exc}")
            continue
        counter = tokens.TokenizerCounter(path, tok)
        single = sum(len(counter.encode(w, special=False)) == 1 for w in tokens.WORDS)
        name = name_of(path)
        print(f"{name} (vocabulary {tok.get_vocab_size(with_added_tokens=True)}, {path}):")
        print(f"  {single}/{len(tokens.WORDS)} of the sim's generated words are one token")
        truths[name] = {}
        for kind, texts in kinds.items():
            truth = truths[name][kind] = [len(counter.encode(t, special=False)) for t in texts]
            ratio = sum(map(len, texts)) / sum(truth)
            own = [max(1, round(len(t) / ratio)) for t in texts]
            print(
                f"  {kind:9} {sum(truth):5} tokens, {ratio:.2f} characters a token; mean error per text:"
                f" estimate {mean_error(truth, guess[kind]):.1%},"
                f" before it {mean_error(truth, before[kind]):.1%},"
                f" its own ratio {mean_error(truth, own):.1%}"
            )
    if not truths:
        print("no readable tokenizer.json: nothing to calibrate against")
        return 0
    print("mean error per text, the estimate (before it: 4 characters a token)")
    print(" " * 24 + "".join(f"{kind:>20}" for kind in kinds))
    for name, truth in truths.items():
        cells = [f"{mean_error(t, guess[k]):.1%} ({mean_error(t, before[k]):.1%})" for k, t in truth.items()]
        print(f"{name:24}" + "".join(f"{c:>20}" for c in cells))
    fitted = {n: t for n, t in truths.items() if n not in args.not_fitted}
    if fitted:
        mean = [
            [sum(mean_error(t[k], counts[k]) for t in fitted.values()) / len(fitted) for k in kinds]
            for counts in (guess, before)
        ]
        cells = [f"{g:.1%} ({b:.1%})" for g, b in zip(*mean, strict=True)]
        print(f"{f'mean of {len(fitted)}':24}" + "".join(f"{c:>20}" for c in cells))
    if args.fit and fitted:
        print(f"fit over {', '.join(fitted)} (characters a token:")
        print("  ASCII letters, digits and whitespace / any other character):")
        ranked = []
        for rates in itertools.product(FIT_WORD, FIT_OTHER):
            counts = estimate(kinds, rates)
            errors = [mean_error(t[k], counts[k]) for t in fitted.values() for k in kinds]
            ranked.append((sum(errors) / len(errors), rates))
        ranked.sort()
        for error, (word, other) in ranked[:5]:
            print(f"  {word:.2f} / {other:.2f}: mean error {error:.2%}")
        errors = [mean_error(t[k], guess[k]) for t in fitted.values() for k in kinds]
        print(f"  the estimate's {now[0]:.2f} / {now[1]:.2f}: mean error {sum(errors) / len(errors):.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
