"""``biasboard demo``: the main job end to end on generated data, offline, in well under a minute.

    biasboard demo [--workdir DIR] [--battles N --models M --judges J --days D --seed S] [--top N]

Simulates day-partitioned battle logs whose judges have known biases (first-
position preference, verbosity, same-family affinity), runs ``biasboard
refresh`` on them with the local FnApiRunner, and prints the top of the naive
and the corrected leaderboards side by side, Kendall τ between the two (and of
each against the simulator's true qualities), and where the report is.  Without
``--workdir`` the files go to a new temporary folder that is kept, so the
report can be opened afterwards.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from biasboard.pipelines import validation
from biasboard.pipelines.options import defaults_from, options_from
from biasboard.pipelines.refresh import NUMBER_FLAGS as REFRESH_NUMBER_FLAGS
from biasboard.pipelines.refresh import RefreshOptions, refresh, warning_lines
from biasboard.pipelines.validation import NumberRule
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.report.text import fmt, side_by_side_text
from biasboard.schemas.summary import Summary
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.simulate.simulator import FLAG_RULES
from biasboard.transforms import storage

_LOG = logging.getLogger(__name__)

#: Big enough that the corrections are clearly resolved, small enough to run in seconds on two cores.
DEMO = SimulationConfig(
    battles=60_000, models=12, judges=4, days=5, both_orders=True, bad_rows=0.005, corr_length=0.2, seed=2024
)


@dataclass(frozen=True)
class DemoOptions:
    """The demo's options and their defaults (the simulation's are :data:`DEMO`'s)."""

    workdir: str | None = None
    battles: int = DEMO.battles
    models: int = DEMO.models
    judges: int = DEMO.judges
    days: int = DEMO.days
    seed: int = DEMO.seed
    top: int = 10
    k: int = 3
    audit: bool = True


#: The demo's numeric flags, what each accepts and what it sets: the simulation's flags by the simulator's own
#: rules (:data:`~biasboard.simulate.simulator.FLAG_RULES`), the board's by refresh's.
NUMBER_FLAGS: dict[str, tuple[NumberRule, str]] = {
    "--battles": (FLAG_RULES["battles"][1], "battles to simulate"),
    "--models": (FLAG_RULES["models"][1], "models"),
    "--judges": (FLAG_RULES["judges"][1], "judges"),
    "--days": (FLAG_RULES["days"][1], "day partitions"),
    "--seed": (FLAG_RULES["seed"][1], "random seed"),
    "--top": (NumberRule(integer=True, low=1), "rows of each leaderboard to print"),
    "--k": (REFRESH_NUMBER_FLAGS["--k"][1], "top-k for the membership probabilities"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", help="folder for logs/, state/, out/ (default: a new temp folder)")
    for flag, (rule, what) in NUMBER_FLAGS.items():
        parser.add_argument(flag, type=rule.flag_type(flag), help=f"{what} (default %(default)s)")
    parser.add_argument("--no-audit", dest="audit", action="store_false", help="skip the judge audit")
    defaults_from(parser, DemoOptions())


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    job = options_from(DemoOptions, args)
    validation.local_only(job.workdir, "--workdir", "the demo runs in a local folder (default: a new temp folder)")
    workdir = Path(job.workdir) if job.workdir else Path(tempfile.mkdtemp(prefix="biasboard-demo-"))
    validation.writable_folder(str(workdir), "--workdir")
    config = SimulationConfig(
        **{
            **DEMO.__dict__,
            "battles": job.battles,
            "models": job.models,
            "judges": job.judges,
            "days": job.days,
            "seed": job.seed,
        }
    )
    started = time.perf_counter()
    logs = write_simulation(config, workdir / "logs", overwrite=True)
    _LOG.info("demo: simulated %d battles over %d days in %s", config.battles, config.days, logs)
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(workdir / "state"),
        str(workdir / "out"),
        beam_args,
        # The logs are simulated anew every run: a day an earlier demo in this workdir simulated and this one did not
        # is not this demo's (kept, it mixed that run's models into the board and its τ against this truth).
        RefreshOptions(audit=job.audit, k=job.k, drop_missing_days=True),
    )
    if outcome.published is None or outcome.summary is None:
        print(f"job built, not run ({outcome.reason})")
        return 0
    snapshot = outcome.published.path
    board = pl.read_parquet(storage.join(snapshot, "leaderboard.parquet"))
    truth = json.loads((logs / "truth.json").read_text())
    print(side_by_side_text(board, job.top))
    print()
    print(tau_lines(board, outcome.summary, truth))
    for line in warning_lines(outcome.summary):
        print(line)
    print(f"report:   {storage.join(snapshot, 'report.html')}")
    print(f"snapshot: {snapshot}  ({time.perf_counter() - started:.1f} s in all)")
    return 0


def tau_lines(board: pl.DataFrame, summary: Summary, truth: dict) -> str:
    """Kendall τ naive vs corrected, and each against the simulator's true quality θ."""
    theta = {m["model"]: m["theta"] for m in truth.get("models", [])}
    known = board.filter(pl.col("model").is_in(list(theta)))
    true = np.array([theta[m] for m in known["model"].to_list()])
    tau_naive = kendall_tau_b(known["rating_naive"].to_numpy(), true)
    tau_corrected = kendall_tau_b(known["rating_corrected"].to_numpy(), true)
    return (
        f"Kendall tau, naive vs corrected:  {fmt(summary.kendall_tau, 3)}\n"
        f"Kendall tau vs the true quality:  naive {tau_naive:.3f}, corrected {tau_corrected:.3f}"
    )
