"""Grades-only boards against a known truth: how well their 95% intervals cover, Laplace next to bootstrap.

Per seed: single grades (1-10) of 8 models by 3 graders of severity −0.8, 0, +0.8 (each model graded mostly by
"its" grader, so a mean grade mixes quality and severity) on 40 prompts of varying difficulty, drawn from the
partial-credit model the fit assumes (:func:`biasboard.simulate.simulator.sample_grades`), coded by the ingest's
own cell function, fit as ``refresh --scores`` fits them (``fit_leaderboards`` on score cells alone).  Printed,
side by side from one run, per board size and difficulty spread: the share of the corrected board's 95%
intervals that hold the true (centred) θ and severity — the Laplace intervals, and with ``--bootstrap B`` the
percentile intervals of B replicates on the same fits — with their binomial standard errors, and the slope of the
fitted θ on the true θ (1: no shrinkage).  Beside the published percentile interval, two other readings of the same
replicates (the basic interval and the bias-shifted percentiles, :func:`other_intervals`) and what sets them apart:
the slope of the replicates' mean minus the fit on the fit, and the replicates' SD over the Laplace SE.

What it measures (``docs/design-notes.md``, ordinal-only boards): the bootstrap's coverage on small boards, and
the reach of the prompt-difficulty prior (``Priors.difficulty_sd``) when difficulties vary more than it allows.

Usage::

    .venv/bin/python bench/grades_study.py                  # 50 seeds; 300, 600, 1500 grades; B = 100 (minutes)
    .venv/bin/python bench/grades_study.py --smoke          # 3 seeds, B = 20 (seconds)
    .venv/bin/python bench/grades_study.py --difficulty-sd 1.5 --prior-sd 1 5   # a wider difficulty spread
"""

from __future__ import annotations

import argparse
import datetime as dt
import time

import numpy as np
import polars as pl
from biasboard.ranking import ModelConfig
from biasboard.ranking.config import Priors
from biasboard.ranking.fit import fit_leaderboards
from biasboard.ranking.uncertainty import percentile_interval
from biasboard.schemas.battle import SCORE_SCHEMA
from biasboard.schemas.families import FamilyMap
from biasboard.simulate.simulator import sample_grades
from biasboard.transforms.cells import partial_score_cells

SEVERITY = np.array([-0.8, 0.0, 0.8])
MODELS, PROMPTS, CATEGORIES, OWN = 8, 40, 10, 0.7


def simulate_grades(seed: int, n: int, difficulty_sd: float) -> tuple[pl.DataFrame, np.ndarray]:
    """``n`` grades with their truth: (rows, true θ by model index)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, 0.7, MODELS)
    difficulty = rng.normal(0.0, difficulty_sd, PROMPTS)
    thresholds = np.linspace(-2.0, 2.0, CATEGORIES - 1)
    model = rng.integers(0, MODELS, n)
    home = model % SEVERITY.size
    judge = np.where(rng.random(n) < OWN, home, (home + rng.integers(1, SEVERITY.size, n)) % SEVERITY.size)
    prompt = rng.integers(0, PROMPTS, n)
    score = sample_grades(theta[model] - difficulty[prompt] - SEVERITY[judge], thresholds, rng).astype(np.float64)
    rows = pl.DataFrame(
        {
            "score_id": [f"s{i}" for i in range(n)],
            "ts": [dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)] * n,
            "judge": [f"judge-{j}" for j in judge],
            "model": [f"m{m:02d}" for m in model],
            "prompt_id": [f"p{p:03d}" for p in prompt],
            "score": score,
            "len": pl.Series([None] * n, dtype=pl.Int64),
            "family": pl.Series([None] * n, dtype=pl.String),
            "judge_family": pl.Series([None] * n, dtype=pl.String),
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    return rows, theta


def covered(low: np.ndarray, high: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return (low <= truth) & (truth <= high)


def share(hits: list[np.ndarray]) -> str:
    """Coverage ± its binomial standard error."""
    flat = np.concatenate(hits) if hits else np.zeros(0, bool)
    if not flat.size:
        return "-"
    p = float(flat.mean())
    return f"{p:.3f} ± {np.sqrt(p * (1 - p) / flat.size):.3f}"


def other_intervals(rating: np.ndarray, replicates: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Two other readings of the same replicates, beside the published percentile interval: the *basic* interval
    (the percentiles reflected about the fit, 2θ̂ − q) and the percentiles of the replicates shifted so that their
    mean is the fit (the bootstrap's estimate of the bias taken out).  Both are what one would switch to were the
    percentile interval's shortfall only the replicates' outward bias."""
    low, high = percentile_interval(replicates)
    shifted = percentile_interval(replicates - (replicates.mean(axis=0) - rating))
    return (2 * rating - high, 2 * rating - low), shifted


def study(seeds: int, n: int, difficulty_sd: float, prior_sd: float, bootstrap: int) -> dict[str, str]:
    laplace, boot, sev_laplace, sev_boot, fitted, true = [], [], [], [], [], []
    basic, shifted, boot_bias, boot_sd, laplace_sd = [], [], [], [], []
    for seed in range(seeds):
        rows, theta = simulate_grades(seed, n, difficulty_sd)
        cells = partial_score_cells(rows.select(SCORE_SCHEMA.names), FamilyMap.with_user_rules()).cells
        config = ModelConfig(diagnostics="off", bootstrap=bootstrap, seed=seed, priors=Priors(difficulty_sd=prior_sd))
        _, board = fit_leaderboards(None, cells, config=config)
        truth = np.array([theta[int(m[1:])] for m in board.models])
        truth -= truth.mean()
        laplace.append(covered(board.rating - 1.959964 * board.se, board.rating + 1.959964 * board.se, truth))
        if bootstrap:
            boot.append(covered(board.ci_low, board.ci_high, truth))
            replicates = board.boot_theta
            for hits, (low, high) in zip((basic, shifted), other_intervals(board.rating, replicates), strict=True):
                hits.append(covered(low, high, truth))
            boot_bias.append(replicates.mean(axis=0) - board.rating)
            boot_sd.append(replicates.std(axis=0, ddof=1))
            laplace_sd.append(board.se)
        fitted.append(board.rating)
        true.append(truth)
        severity = board.bias.filter(pl.col("effect") == "severity").sort("judge")
        sev_truth = np.array([SEVERITY[int(j.rsplit("-", 1)[1])] for j in severity["judge"]])
        sev_truth -= sev_truth.mean()
        sev_laplace.append(covered(severity["ci_low"].to_numpy(), severity["ci_high"].to_numpy(), sev_truth))
        if bootstrap:
            lo, hi = severity["boot_ci_low"].to_numpy(), severity["boot_ci_high"].to_numpy()
            sev_boot.append(covered(lo, hi, sev_truth))
    slope = float(np.polyfit(np.concatenate(true), np.concatenate(fitted), 1)[0])
    return {
        "grades": f"{n:,}",
        "difficulty SD (true / prior)": f"{difficulty_sd:g} / {prior_sd:g}",
        "θ Laplace": share(laplace),
        "θ bootstrap": share(boot),
        "severity Laplace": share(sev_laplace),
        "severity bootstrap": share(sev_boot),
        "θ slope": f"{slope:.3f}",
        "θ basic": share(basic),
        "θ bias-shifted": share(shifted),
        "replicates' bias slope": _slope(fitted, boot_bias) if bootstrap else "-",
        "replicates' SD / Laplace SE": _ratio(boot_sd, laplace_sd) if bootstrap else "-",
    }


def _slope(fitted: list[np.ndarray], bias: list[np.ndarray]) -> str:
    """The slope of the replicates' mean minus the fit on the fit: 0 when the replicates are centred on it."""
    return f"{float(np.polyfit(np.concatenate(fitted), np.concatenate(bias), 1)[0]):.3f}"


def _ratio(num: list[np.ndarray], den: list[np.ndarray]) -> str:
    """The median ratio of the replicates' SD to the Laplace SE over every model of every seed."""
    return f"{float(np.median(np.concatenate(num) / np.concatenate(den))):.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--grades", type=int, nargs="+", default=[300, 600, 1500], help="grades per board")
    parser.add_argument("--bootstrap", type=int, default=100, help="replicates per fit (0: Laplace only)")
    parser.add_argument("--difficulty-sd", type=float, default=0.5, help="the true prompts' difficulty SD")
    parser.add_argument("--prior-sd", type=float, nargs="+", default=[1.0], help="Priors.difficulty_sd to fit with")
    parser.add_argument("--smoke", action="store_true", help="3 seeds, 300 grades, B = 20: seconds")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seeds, args.grades, args.bootstrap = 3, [300], 20
    start = time.perf_counter()
    rows = [
        study(args.seeds, n, args.difficulty_sd, prior, args.bootstrap) for n in args.grades for prior in args.prior_sd
    ]
    table = pl.DataFrame(rows)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, tbl_hide_dataframe_shape=True):
        print(table)
    print(
        f"{args.seeds} seeds per row, 95% intervals, {MODELS} models, {SEVERITY.size} graders, {PROMPTS} prompts; "
        f"bootstrap B = {args.bootstrap}; {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
