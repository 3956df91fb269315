"""`vtui tune`'s control helpers: the settings recorded for a resume, and `--restore` (the original
flags of a tune whose supervisor was killed mid-tune, put back through the new supervisor). The tune
itself runs in the session supervisor (`vtui.tune.job`, `service.tuning`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vtui.commands._tune_setup import NOT_RESUMED, TuneSetup, bench_config
from vtui.tune import progress


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of a tune, as recorded for a resume."""
    return {k: v for k, v in vars(args).items() if k not in NOT_RESUMED and not callable(v)}


def restore_only(setup: TuneSetup, args: argparse.Namespace) -> int:
    from vtui.tune.runner import SupervisorRunner

    doc = dict(setup.previous or {})
    runner = SupervisorRunner(setup.session.client, setup.name, bench_config(setup, args), defaults={})
    runner.apply(setup.original, exact=True, label="tune restore")
    doc.update(state="aborted", message="original flags restored (--restore)", current=None)
    progress.write(setup.progress_file, doc)
    print(f"{setup.name}: running with its original flags again", file=sys.stderr)
    return 0
