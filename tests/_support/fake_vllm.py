"""A fake vLLM install for the flag-schema tests: a real argparse parser in a package named `vllm` (vtui's
dump script runs unchanged against it), with flags vLLM 0.32 lacks and without some it has."""

from __future__ import annotations

import sys
from pathlib import Path

FAKE_PARSER = """
import argparse
def make_arg_parser(parser):
    group = parser.add_argument_group("SchedulerConfig")
    group.add_argument("--max-num-seqs", type=int, default=None, help="Maximum number of sequences.")
    group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, help="TP size.")
    group.add_argument("--performance-mode", choices=["balanced", "throughput", "latency"],
                       default="balanced", help="A flag vLLM 0.32 does not have.")
    group.add_argument("--fancy-new-flag", type=int, default=3, help="Nor this one.")
    return parser
"""


MOVED_CLI = """
import argparse
from vllm.frontend.serving.cli_args import make_arg_parser
def main():
    parser = argparse.ArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="subparser")
    serve = sub.add_parser("serve")
    serve.add_argument("model_tag", nargs="?")
    make_arg_parser(serve)
    parser.parse_args()
"""


def make_moved_vllm(root: Path, version: str = "0.99.1") -> Path:
    """A vLLM laid out the way RFC #54653 proposes (modules under vllm/frontend/, no shims): only the
    `vllm` console script's entry point leads to the serve parser."""
    site = root / "site"
    (site / "vllm" / "frontend" / "serving").mkdir(parents=True)
    for package in ("vllm", "vllm/frontend", "vllm/frontend/serving"):
        (site / package / "__init__.py").write_text("")
    (site / "vllm" / "frontend" / "serving" / "cli_args.py").write_text(FAKE_PARSER)
    (site / "vllm" / "frontend" / "cli.py").write_text(MOVED_CLI)
    dist = site / f"vllm-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("[console_scripts]\nvllm = vllm.frontend.cli:main\n")
    return _bin(root, site)


def _bin(root: Path, site: Path) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    vllm = bin_dir / "vllm"
    vllm.write_text(f"#!{python}\nraise SystemExit('the fake vLLM serves nothing')\n")
    vllm.chmod(0o755)
    return vllm


def make_fake_vllm(root: Path, version: str = "0.99.0") -> Path:
    """root/bin/{python,vllm} and root/site/vllm/...: a vLLM install as far as vtui can tell."""
    site = root / "site"
    (site / "vllm" / "entrypoints" / "launchers").mkdir(parents=True)
    (site / "vllm" / "utils").mkdir(parents=True)
    for package in ("vllm", "vllm/entrypoints", "vllm/entrypoints/launchers", "vllm/utils"):
        (site / package / "__init__.py").write_text("")
    (site / "vllm" / "_version.py").write_text(f'__version__ = version = "{version}"\n')
    (site / "vllm" / "entrypoints" / "launchers" / "cli_args.py").write_text(FAKE_PARSER)
    (site / "vllm" / "utils" / "argparse_utils.py").write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n"
    )
    return _bin(root, site)


# vLLM 0.33's switches (vllm/utils/argparse_utils.py EnableDisableAction, described here in its effect, not
# copied): `--enable-x` pairs with `--disable-x`; `--no-enable-x` still parses but leaves option_strings
# (so the help), and the action lists the spellings that set False in `negative_option_strings`.
PARSER_033 = """
import argparse
class EnableDisable(argparse.BooleanOptionalAction):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        given = list(option_strings)
        inverse = ["--disable-" + s[len("--enable-"):] for s in given if s.startswith("--enable-")]
        self.negative_option_strings = {s for s in self.option_strings if s not in given} | set(inverse)
        self.option_strings = [*self.option_strings, *inverse]  # all registered with the parser
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.negative_option_strings)
def make_arg_parser(parser):
    group = parser.add_argument_group("CacheConfig")
    switch = group.add_argument("--enable-prefix-caching", action=EnableDisable, default=None,
                                help="Whether to enable prefix caching.")
    switch.option_strings = ["--enable-prefix-caching", "--disable-prefix-caching"]  # what help shows
    group.add_argument("--max-num-seqs", type=int, default=None, help="Maximum number of sequences.")
    group.add_argument("--watchdog-config", type=str, default=None, help="New in 0.33.")
    return parser
"""


def make_vllm_033(root: Path, version: str = "0.33.0") -> Path:
    """A vLLM laid out as 0.33 is: make_arg_parser in vllm/entrypoints/common/cli_args.py (0.32's
    vllm/entrypoints/launchers/cli_args.py is gone), switches as enable/disable pairs."""
    site = root / "site"
    (site / "vllm" / "entrypoints" / "common").mkdir(parents=True)
    (site / "vllm" / "utils").mkdir(parents=True)
    for package in ("vllm", "vllm/entrypoints", "vllm/entrypoints/common", "vllm/utils"):
        (site / package / "__init__.py").write_text("")
    (site / "vllm" / "_version.py").write_text(f'__version__ = version = "{version}"\n')
    (site / "vllm" / "entrypoints" / "common" / "cli_args.py").write_text(PARSER_033)
    (site / "vllm" / "utils" / "argparse_utils.py").write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n"
    )
    return _bin(root, site)


# vLLM 0.34's new flags as its parser declares them (vllm/config/cache.py CacheConfig: the extensible
# KV cache switch, gpu_memory_utilization now None by default) beside a few 0.32 ones.
PARSER_034 = PARSER_033.replace(
    '    group.add_argument("--watchdog-config", type=str, default=None, help="New in 0.33.")\n',
    '    group.add_argument("--max-model-len", type=int, default=None, help="Model context length.")\n'
    '    group.add_argument("--gpu-memory-utilization", type=float, default=None, help="Fraction.")\n'
    '    switch = group.add_argument("--enable-extensible-kv-cache", action=EnableDisable, default=None,\n'
    '                                help="New in 0.34.")\n'
    '    switch.option_strings = ["--enable-extensible-kv-cache", "--disable-extensible-kv-cache"]\n'
    '    group.add_argument("--cache-aware-admission-window", type=int, default=None, help="New in 0.34.")\n',
)

# `vllm serve` of the fake 0.34: records its command line, then serves with vtui's simulated engine
# (which parses 0.32's flags: the 0.34-only ones are dropped after being recorded).
SERVE_034 = """
import os, sys
args = sys.argv[1:]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "argv.log"), "a") as log:
    log.write(" ".join(args) + "\\n")
if args[:1] != ["serve"]:
    raise SystemExit("the fake vLLM 0.34 only serves")
new = ("--enable-extensible-kv-cache", "--disable-extensible-kv-cache", "--no-enable-extensible-kv-cache",
       "--cache-aware-admission-window")
rest, skip = [], False
for arg in args[1:]:
    if skip:
        skip = False
        continue
    if arg in new:
        skip = arg == "--cache-aware-admission-window"
        continue
    rest.append(arg)
os.execv(@PYTHON@, [@PYTHON@, "-m", "vtui.sim", *rest, "--sim-startup-scale", "0"])
"""


def make_vllm_034(root: Path, version: str = "0.34.0") -> Path:
    """A vLLM 0.34 as far as vtui can tell (0.33's layout, the parser with 0.34's new flags) whose
    `vllm serve` runs vtui's simulated engine; root/bin/argv.log gets each command line it was given."""
    site = root / "site"
    (site / "vllm" / "entrypoints" / "common").mkdir(parents=True)
    (site / "vllm" / "utils").mkdir(parents=True)
    for package in ("vllm", "vllm/entrypoints", "vllm/entrypoints/common", "vllm/utils"):
        (site / package / "__init__.py").write_text("")
    (site / "vllm" / "_version.py").write_text(f'__version__ = version = "{version}"\n')
    (site / "vllm" / "entrypoints" / "common" / "cli_args.py").write_text(PARSER_034)
    (site / "vllm" / "utils" / "argparse_utils.py").write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n"
    )
    vllm = _bin(root, site)
    python = vllm.parent / "python"
    vllm.write_text(f"#!{python}\n" + SERVE_034.replace("@PYTHON@", repr(sys.executable)))
    return vllm
