"""Simulation study: does the bias-aware hybrid recover the true ranking better than naive aggregation?

Two studies, both on data from the project's simulator (:mod:`biasboard.simulate`), turned into
cells by the SAME per-batch function the ingest uses (:func:`biasboard.transforms.cells.partial_cells`),
and fit by the ranking core:

1. **Design grid** (Katoch et al. 2026, §5): 30 models, 4 LLM judges with position, length and same-family biases,
   the six tournament designs × ordinal shares 10/50/90% of a fixed budget of observations, 50 trials
   each.  Kendall τ-b against the true θ for: naive win rate and naive Bradley–Terry (pairwise part),
   mean score (ordinal part), the hybrid *without* bias terms (both parts, the same model minus the
   judge effects: isolates what the correction adds beyond using more data), the bias-aware hybrid,
   and the **oracle** — the hybrid with every judge effect fixed at its true value
   (:func:`biasboard.ranking.oracle.fit_oracle`: τ on a finite sample saturates at the
   oracle's, so an estimator is judged next to it).  Coefficient
   recovery (RMSE, 95% CI coverage) of the per-judge position, length and affinity effects.
2. **corr(θ, length) sweep** (Xu et al. 2026): pairwise only, uniform design, the default and a strong length
   bias (β₀ = 0.3, 1.0); the gain
   τ(bias-aware) − τ(naive BT) as the true correlation between quality and mean response length grows,
   and where it crosses zero — once with answer lengths that vary within a model (the simulator's
   default: the length effect is then partly identified by within-model variation) and once with
   lengths constant per model (Xu et al.'s unidentified case: the prior alone splits θ from β).

Writes ``docs/evidence/simulation_*.csv`` (summaries), ``simulation_trials.parquet`` (every trial),
``simulation_*.png`` (when matplotlib is installed; it is a bench-only dependency) and the
``simulation-*`` sections of ``docs/evidence.md``.

    python bench/simulation_study.py                 # full study (≈10 CPU-minutes: ≈5-8 min on 2 cores)
    python bench/simulation_study.py --smoke         # seconds: a few trials, for CI-like checks (temp folder)
    python bench/simulation_study.py --trials 10     # a quicker full-grid pass
"""

from __future__ import annotations

import os

# One BLAS thread per worker process: the fits are small dense problems, and two workers on two cores
# must not each spawn a thread pool.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from biasboard.ranking import ModelConfig, fit_bias_aware, fit_naive  # noqa: E402
from biasboard.ranking.config import SWITCHABLE  # noqa: E402
from biasboard.ranking.oracle import fit_oracle  # noqa: E402
from biasboard.ranking.rank_stats import kendall_tau_b, spearman, top_k_recall  # noqa: E402
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, SCORE_CELLS_SCHEMA  # noqa: E402
from biasboard.schemas.families import FamilyMap  # noqa: E402
from biasboard.simulate import DESIGNS, SimulationConfig, simulate_days, truth  # noqa: E402
from biasboard.transforms.cells import merge_batches, partial_cells, partial_score_cells  # noqa: E402
from evidence_sections import markdown_table, replace_section, revision, study_outputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIXES: tuple[float, ...] = (0.1, 0.5, 0.9)
SWEEP_CORRS: tuple[float, ...] = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)
#: Length bias β₀ per unit log length ratio in the sweep: the simulator's default, and a strong one (with a
#: between-model SD of 0.35 in mean log length, β₀ = 1 shifts apparent quality by ≈0.35 logit).  Xu et al. (2026):
#: the crossing point moves with the size of the bias, so one value would be a misleading threshold.
SWEEP_BETAS: tuple[float, ...] = (0.3, 1.0)
TOP_K = 10

#: Estimators in table order; "oracle" is the ceiling, not a competitor.
GRID_ESTIMATORS: tuple[str, ...] = ("win_rate", "naive_bt", "mean_score", "hybrid_no_bias", "bias_aware", "oracle")
SWEEP_ESTIMATORS: tuple[str, ...] = ("win_rate", "naive_bt", "bias_aware", "oracle")
LABELS = {
    "win_rate": "naive win rate",
    "naive_bt": "naive BT",
    "mean_score": "mean score",
    "hybrid_no_bias": "hybrid, no bias terms",
    "bias_aware": "bias-aware hybrid",
    "oracle": "oracle (judge effects = truth)",
}
#: Fit options of the study: no profile likelihoods (diagnostics, not needed for τ) and few posterior
#: draws (top-k probabilities are not scored here) keep a trial well under a second.
STUDY_FIT = ModelConfig(profile=False, posterior_draws=50)
NO_BIAS_FIT = replace(STUDY_FIT, disabled=frozenset(("*", effect) for effect in SWITCHABLE))


@dataclass(frozen=True)
class Trial:
    """One simulated data set and everything needed to rebuild it."""

    study: str  # "grid" | "sweep"
    design: str
    ordinal_share: float
    corr_length: float
    within_model_length: bool
    trial: int
    observations: int
    seed: int
    beta0: float = 0.3  # the simulator's default length bias; the sweep also runs a strong one

    def config(self) -> SimulationConfig:
        share = self.ordinal_share
        battles = max(1, round(self.observations * (1.0 - share)))
        common = dict(
            battles=battles,
            models=30,
            judges=4,
            days=1,
            design=self.design,
            seed=self.seed,
            prompts=200,
            corr_length=self.corr_length,
            scores=share / (1.0 - share) if share > 0 else 0.0,
            chunk_rows=max(1000, 4 * self.observations),
        )
        common["beta0"] = self.beta0
        if self.study == "sweep" and not self.within_model_length:
            common["len_noise_sd"] = 0.0  # every answer of a model equally long: β not identified
        return SimulationConfig(**common)


# ------------------------------------------------------------------------------------------ data → cells


def simulated_cells(config: SimulationConfig) -> tuple[pa.Table, pa.Table | None]:
    """Simulate and aggregate with the ingest's own per-batch function and monoid merge."""
    family_map = FamilyMap.with_user_rules()
    pair_parts, score_parts = [], []
    for _day, battles, scores in simulate_days(config):
        pair_parts.append(partial_cells(battles, family_map))
        if scores is not None:
            score_parts.append(partial_score_cells(scores, family_map))
    pairs = merge_batches(pair_parts, PAIR_CELLS_SCHEMA)
    scores = merge_batches(score_parts, SCORE_CELLS_SCHEMA) if score_parts else None
    assert pairs.counts.conserved
    return pairs.cells, (scores.cells if scores is not None and scores.cells.num_rows else None)


def win_rates(pair_cells: pa.Table) -> dict[str, float]:
    """Share of battles won per model, ties as half wins, self-battles excluded (the naive leaderboard)."""
    frame = pl.from_arrow(pair_cells).filter(pl.col("model_a") != pl.col("model_b"))
    ties = pl.col("tie") + pl.col("tie_bothbad")
    side_a = frame.select(pl.col("model_a").alias("model"), (pl.col("win_a") + 0.5 * ties).alias("w"), "n")
    side_b = frame.select(pl.col("model_b").alias("model"), (pl.col("win_b") + 0.5 * ties).alias("w"), "n")
    totals = pl.concat([side_a, side_b]).group_by("model").agg(pl.col("w").sum(), pl.col("n").sum())
    return dict(zip(totals["model"].to_list(), (totals["w"] / totals["n"]).to_list(), strict=True))


def mean_scores(score_cells: pa.Table) -> dict[str, float]:
    """Average grade per model (Katoch et al.'s 'simple score averaging')."""
    frame = pl.from_arrow(score_cells)
    means = frame.group_by("model").agg(((pl.col("score") * pl.col("n")).sum() / pl.col("n").sum()).alias("mean"))
    return dict(zip(means["model"].to_list(), means["mean"].to_list(), strict=True))


# ------------------------------------------------------------------------------------------------ trials


def _scored(estimate: dict[str, float], theta: dict[str, float]) -> dict[str, float]:
    names = sorted(theta)
    fill = float(np.mean(list(estimate.values()))) if estimate else 0.0
    est = np.array([estimate.get(n, fill) for n in names])  # a model never seen ties at the mean
    tru = np.array([theta[n] for n in names])
    return {
        "tau": kendall_tau_b(est, tru),
        "spearman": spearman(est, tru),
        "top_k_recall": top_k_recall(est, tru, TOP_K),
    }


def _recovery(bias: pl.DataFrame, true: dict) -> list[dict]:
    """Per (judge, effect): estimate, truth, and whether the 95% CI covers the truth."""
    key = {"position": "gamma", "length": "beta", "affinity": "lambda"}
    rows = []
    for j in true["judges"]:
        for effect, truth_key in key.items():
            hit = bias.filter((pl.col("judge") == j["judge"]) & (pl.col("effect") == effect) & pl.col("enabled"))
            if hit.height != 1:
                continue
            row = hit.row(0, named=True)
            value = float(j[truth_key])
            rows.append(
                {
                    "judge": j["judge"],
                    "effect": effect,
                    "estimate": row["estimate"],
                    "truth": value,
                    "covered": bool(row["ci_low"] <= value <= row["ci_high"]),
                    "ci_width": row["ci_high"] - row["ci_low"],
                }
            )
    return rows


def run_trial(trial: Trial) -> tuple[list[dict], list[dict], float]:
    """Simulate one data set, fit every estimator; (estimator rows, recovery rows, CPU seconds).

    CPU time, not wall time: on a shared machine the wall time of a trial measures the neighbours.
    """
    start = time.process_time()
    config = trial.config()
    true = truth(config)
    theta = {m["model"]: m["theta"] for m in true["models"]}
    pair_cells, score_cells = simulated_cells(config)
    estimates: dict[str, dict[str, float]] = {"win_rate": win_rates(pair_cells)}
    naive = fit_naive(pair_cells)
    estimates["naive_bt"] = dict(zip(naive.models, naive.rating.tolist(), strict=True))
    if score_cells is not None:
        estimates["mean_score"] = mean_scores(score_cells)
        no_bias = fit_bias_aware(pair_cells, score_cells, config=NO_BIAS_FIT)
        estimates["hybrid_no_bias"] = dict(zip(no_bias.models, no_bias.rating.tolist(), strict=True))
    aware = fit_bias_aware(pair_cells, score_cells, config=STUDY_FIT)
    estimates["bias_aware"] = dict(zip(aware.models, aware.rating.tolist(), strict=True))
    by_judge = {j["judge"]: j for j in true["judges"]}
    models, oracle_theta = fit_oracle(pair_cells, by_judge, score_cells, config=STUDY_FIT)
    estimates["oracle"] = dict(zip(models, oracle_theta.tolist(), strict=True))
    base = {
        "study": trial.study,
        "design": trial.design,
        "ordinal_share": trial.ordinal_share,
        "corr_length": trial.corr_length,
        "within_model_length": trial.within_model_length,
        "beta0": trial.beta0,
        "trial": trial.trial,
        "seed": trial.seed,
        "observations": trial.observations,
        "corr_realised": true["global"]["corr_theta_length"],
    }
    rows = []
    # Convergence of the estimators that are iterative fits with a flag (win rate and mean score are closed
    # forms; the core's oracle returns ratings only): None where it does not apply.
    converged = {"naive_bt": naive.converged, "bias_aware": aware.converged}
    if score_cells is not None:
        converged["hybrid_no_bias"] = no_bias.converged
    for name, estimate in estimates.items():
        rows.append({**base, "estimator": name, **_scored(estimate, theta), "converged": converged.get(name)})
    recovery = [{**base, **r} for r in _recovery(aware.bias, true)] if trial.study == "grid" else []
    return rows, recovery, time.process_time() - start


def plan_trials(
    designs: tuple[str, ...],
    mixes: tuple[float, ...],
    sizes: tuple[int, ...],
    trials: int,
    corrs: tuple[float, ...],
    sweep_trials: int,
    sweep_observations: int,
) -> list[Trial]:
    """Every trial of both studies, with a distinct, reproducible seed each."""
    out: list[Trial] = []
    for design in designs:
        for mix in mixes:
            for size in sizes:
                for t in range(trials):
                    seed = 10_000 * DESIGNS.index(design) + 1_000 * round(10 * mix) + t + 100_000 * size
                    out.append(Trial("grid", design, mix, 0.0, True, t, size, seed))
    for b, beta0 in enumerate(SWEEP_BETAS):
        for c, corr in enumerate(corrs):
            for within in (True, False):
                for t in range(sweep_trials):
                    seed = 3_000_000 + 100_000 * b + 10_000 * c + 1_000 * int(within) + t
                    out.append(Trial("sweep", "uniform", 0.0, corr, within, t, sweep_observations, seed, beta0))
    return out


def run_all(trials: list[Trial], workers: int) -> tuple[pl.DataFrame, pl.DataFrame, float]:
    """Run the trials (in ``workers`` processes); per-estimator rows, recovery rows, summed trial CPU seconds."""
    rows: list[dict] = []
    recovery: list[dict] = []
    busy = 0.0
    # Longest first (hybrid trials with many scores) so the two workers finish together.
    order = sorted(trials, key=lambda t: -t.observations * (1.0 + t.ordinal_share))
    start = time.perf_counter()
    step = max(1, len(order) // 10)

    def collect(results) -> None:
        nonlocal busy
        for done, (r, rec, sec) in enumerate(results, 1):
            rows.extend(r)
            recovery.extend(rec)
            busy += sec
            if done % step == 0:
                print(f"  {done}/{len(order)} trials, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    if workers <= 1:
        collect(map(run_trial, order))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            collect(pool.map(run_trial, order, chunksize=1))
    return pl.DataFrame(rows), pl.DataFrame(recovery) if recovery else pl.DataFrame(), busy


# -------------------------------------------------------------------------------------------- summaries


def _mean_se(col: str) -> list[pl.Expr]:
    return [pl.col(col).mean().alias(col), (pl.col(col).std() / pl.len().sqrt()).alias(f"{col}_se")]


def grid_summary(rows: pl.DataFrame) -> pl.DataFrame:
    grid = rows.filter(pl.col("study") == "grid")
    return (
        grid.group_by("observations", "design", "ordinal_share", "estimator")
        .agg(
            *_mean_se("tau"),
            *_mean_se("top_k_recall"),
            pl.len().alias("trials"),
            (~pl.col("converged")).sum().alias("not_converged"),
        )
        .sort("observations", "design", "ordinal_share", "estimator")
    )


def recovery_summary(recovery: pl.DataFrame) -> pl.DataFrame:
    if recovery.is_empty():
        return recovery
    return (
        recovery.group_by("observations", "design", "effect")
        .agg(
            ((pl.col("estimate") - pl.col("truth")) ** 2).mean().sqrt().alias("rmse"),
            (pl.col("estimate") - pl.col("truth")).mean().alias("bias"),
            pl.col("covered").mean().alias("coverage"),
            pl.col("ci_width").median().alias("median_ci_width"),
            pl.len().alias("n"),
        )
        .sort("observations", "design", "effect")
    )


def sweep_summary(rows: pl.DataFrame) -> pl.DataFrame:
    sweep = rows.filter(pl.col("study") == "sweep")
    if sweep.is_empty():
        return sweep
    wide = sweep.pivot(on="estimator", index=["beta0", "corr_length", "within_model_length", "trial"], values="tau")
    wide = wide.with_columns(
        (pl.col("bias_aware") - pl.col("naive_bt")).alias("gain"),
        (pl.col("oracle") - pl.col("naive_bt")).alias("oracle_gain"),
    )
    return (
        wide.group_by("beta0", "corr_length", "within_model_length")
        .agg(
            *_mean_se("naive_bt"),
            *_mean_se("bias_aware"),
            *_mean_se("oracle"),
            *_mean_se("gain"),
            *_mean_se("oracle_gain"),
            pl.len().alias("trials"),
        )
        .sort("beta0", "within_model_length", "corr_length", descending=[False, True, False])
    )


def crossing_point(corrs: np.ndarray, gains: np.ndarray) -> float | None:
    """First corr where the mean gain turns from positive to ≤ 0 (linear interpolation); None if never."""
    for i in range(1, len(corrs)):
        if gains[i - 1] > 0 >= gains[i]:
            c0, c1, g0, g1 = corrs[i - 1], corrs[i], gains[i - 1], gains[i]
            return float(c0 + (c1 - c0) * g0 / (g0 - g1))
    return None


# ------------------------------------------------------------------------------------------------ output


def grid_markdown(summary: pl.DataFrame) -> str:
    """One table of mean τ ± SE per budget of observations."""
    present = [e for e in GRID_ESTIMATORS if e in set(summary["estimator"].to_list())]
    header = ["design", "ordinal share", *(LABELS[e] for e in present), "trials"]
    tables = []
    for (size,), by_size in summary.group_by("observations", maintain_order=True):
        rows = []
        for (design, share), part in by_size.group_by("design", "ordinal_share", maintain_order=True):
            by = {r["estimator"]: r for r in part.iter_rows(named=True)}
            cells = [f"{by[e]['tau']:.3f} ± {by[e]['tau_se']:.3f}" if e in by else "—" for e in present]
            rows.append([design, f"{share:.0%}", *cells, by[present[0]]["trials"]])
        tables.append(f"**{size} observations per trial**\n\n" + markdown_table(header, rows))
    return "\n\n".join(tables)


def gain_markdown(rows: pl.DataFrame) -> str:
    """Paired per-trial differences in τ, averaged over designs and trials, per budget and ordinal share."""
    grid = rows.filter(pl.col("study") == "grid")
    wide = grid.pivot(on="estimator", index=["observations", "design", "ordinal_share", "trial"], values="tau")
    diffs = {
        "bias-aware − naive BT": pl.col("bias_aware") - pl.col("naive_bt"),
        "bias-aware − hybrid no bias (the correction)": pl.col("bias_aware") - pl.col("hybrid_no_bias"),
        "hybrid no bias − naive BT (the extra data)": pl.col("hybrid_no_bias") - pl.col("naive_bt"),
        "oracle − bias-aware (left on the table)": pl.col("oracle") - pl.col("bias_aware"),
    }
    agg = (
        wide.group_by("observations", "ordinal_share")
        .agg(
            *[e.mean().alias(k) for k, e in diffs.items()],
            *[(e.std() / pl.len().sqrt()).alias(k + "_se") for k, e in diffs.items()],
            pl.len().alias("n"),
        )
        .sort("observations", "ordinal_share")
    )
    out = []
    for r in agg.iter_rows(named=True):
        out.append(
            [
                r["observations"],
                f"{r['ordinal_share']:.0%}",
                *[f"{r[k]:+.3f} ± {r[k + '_se']:.3f}" for k in diffs],
                r["n"],
            ]
        )
    return markdown_table(["observations", "ordinal share", *diffs, "trials"], out)


def recovery_markdown(summary: pl.DataFrame) -> str:
    keys = ("observations", "design", "effect", "rmse", "bias", "coverage", "median_ci_width", "n")
    rows = [[r[k] for k in keys] for r in summary.iter_rows(named=True)]
    header = [
        "observations",
        "design",
        "effect",
        "RMSE",
        "mean error",
        "95% CI coverage",
        "median CI width",
        "judge-trials",
    ]
    return markdown_table(header, rows)


def sweep_markdown(summary: pl.DataFrame) -> tuple[str, dict[str, float | None]]:
    rows, crossings = [], {}
    for (beta0, within), part in summary.group_by("beta0", "within_model_length", maintain_order=True):
        label = f"β₀ = {beta0:g}, length {'varies within model' if within else 'constant per model'}"
        part = part.sort("corr_length")
        crossings[label] = crossing_point(part["corr_length"].to_numpy(), part["gain"].to_numpy())
        for r in part.iter_rows(named=True):
            rows.append(
                [
                    f"{beta0:g}",
                    "varies within model" if within else "constant per model",
                    f"{r['corr_length']:.2f}",
                    r["naive_bt"],
                    r["bias_aware"],
                    r["oracle"],
                    f"{r['gain']:+.3f} ± {r['gain_se']:.3f}",
                    f"{r['oracle_gain']:+.3f}",
                    r["trials"],
                ]
            )
    table = markdown_table(
        [
            "β₀",
            "length",
            "corr(θ, length)",
            "τ naive BT",
            "τ bias-aware",
            "τ oracle",
            "gain (bias-aware − naive)",
            "oracle − naive",
            "trials",
        ],
        rows,
    )
    return table, crossings


def plot(summary: pl.DataFrame, sweep: pl.DataFrame, out_dir: Path) -> list[Path]:
    """Two PNGs (grid panels, sweep); [] when matplotlib is not installed (bench-only dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: plots skipped (pip install matplotlib into the bench venv)")
        return []
    written = []
    designs = [d for d in DESIGNS if d in set(summary["design"].to_list())]
    shares = sorted(set(summary["ordinal_share"].to_list()))
    if designs:
        fig, axes = plt.subplots(
            len(designs),
            len(shares),
            figsize=(3.6 * len(shares), 2.7 * len(designs)),
            squeeze=False,
            sharey=True,
            sharex=True,
        )
        for row, design in enumerate(designs):
            for col, share in enumerate(shares):
                ax = axes[row, col]
                part = summary.filter((pl.col("design") == design) & (pl.col("ordinal_share") == share))
                for est in GRID_ESTIMATORS:
                    line = part.filter(pl.col("estimator") == est).sort("observations")
                    if line.is_empty():
                        continue
                    style = {"color": "black", "linestyle": "--"} if est == "oracle" else {}
                    ax.errorbar(
                        line["observations"],
                        line["tau"],
                        yerr=line["tau_se"],
                        marker="o",
                        ms=3,
                        capsize=2,
                        label=LABELS[est],
                        **style,
                    )
                ax.set_xscale("log")
                ax.set_title(f"{design}, {share:.0%} ordinal", fontsize=9)
                ax.grid(alpha=0.3)
                if col == 0:
                    ax.set_ylabel("Kendall τ vs truth")
                if row == len(designs) - 1:
                    ax.set_xlabel("observations per trial")
        axes[0, 0].legend(fontsize=6, loc="lower right")
        fig.tight_layout()
        path = out_dir / "simulation_grid.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    if not sweep.is_empty():
        betas = sorted(set(sweep["beta0"].to_list()))
        fig, axes = plt.subplots(1, len(betas), figsize=(5.6 * len(betas), 4.0), squeeze=False, sharey=True)
        for ax, beta0 in zip(axes[0], betas, strict=True):
            part_b = sweep.filter(pl.col("beta0") == beta0)
            for (within,), part in part_b.group_by("within_model_length", maintain_order=True):
                part = part.sort("corr_length")
                label = "length varies within model" if within else "length constant per model"
                line = ax.errorbar(
                    part["corr_length"],
                    part["gain"],
                    yerr=part["gain_se"],
                    marker="o",
                    capsize=3,
                    label=f"bias-aware − naive BT ({label})",
                )
                ax.plot(
                    part["corr_length"],
                    part["oracle_gain"],
                    linestyle=":",
                    marker=".",
                    color=line[0].get_color(),
                    label=f"oracle − naive BT ({label})",
                )
            ax.axhline(0.0, color="black", linewidth=0.8)
            ax.set_xlabel("corr(θ, mean log length)")
            ax.set_title(f"length bias β₀ = {beta0:g}")
            ax.grid(alpha=0.3)
        axes[0, 0].set_ylabel("Δ Kendall τ vs truth")
        axes[0, 0].legend(fontsize=7)
        fig.suptitle("Where correction stops helping (Xu et al.'s sweep)")
        fig.tight_layout()
        path = out_dir / "simulation_sweep.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write_outputs(rows: pl.DataFrame, recovery: pl.DataFrame, out_dir: Path, evidence: Path, meta: dict) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows.write_parquet(out_dir / "simulation_trials.parquet")  # per-trial rows: ~20k, compact as Parquet
    grid = grid_summary(rows)
    rec = recovery_summary(recovery)
    sweep = sweep_summary(rows)
    grid.write_csv(out_dir / "simulation_grid.csv")
    if not rec.is_empty():
        rec.write_csv(out_dir / "simulation_recovery.csv")
    if not sweep.is_empty():
        sweep.write_csv(out_dir / "simulation_sweep.csv")
    pngs = plot(grid, sweep, out_dir)
    rel = os.path.relpath(out_dir, evidence.parent)

    run = (
        "## Simulation study: how it was run\n\n"
        f"Mode `{meta['mode']}` at revision {meta['revision']}: {meta['grid_trials']} design-grid trials "
        f"({meta['trials']} per design × "
        f"ordinal share × budget; budgets {meta['sizes']} observations = pairwise battles + ordinal grades), "
        f"{meta['sweep_trials']} sweep trials ({meta['sweep_observations']} battles each). "
        f"Wall time {meta['wall']:.0f} s with {meta['workers']} worker process(es) on a machine shared with other "
        f"jobs (load average at the end {meta['load']:.1f}); the trials' CPU time sums to {meta['busy']:.0f} s, "
        f"i.e. ≈{meta['busy'] / 2 / 60:.1f} min on two otherwise idle cores. 30 models, 4 LLM judges of 4 families "
        "(simulator defaults: γ₀ = −0.165, SD(u_j) = 0.337, β₀ = 0.3 per unit log length ratio, λ₀ = 0.4, "
        "discrimination log-SD 0.2, Davidson ties), 200 prompts, corr(θ, length) = 0 in the grid. "
        "Data → cells with `transforms.cells.partial_cells` / `partial_score_cells`; fits by the ranking core "
        "(`fit_naive`, `fit_bias_aware` with profile likelihoods off). Per-trial rows: "
        f"[`simulation_trials.parquet`]({rel}/simulation_trials.parquet)."
    )
    replace_section(evidence, "simulation-run", run)

    grid_body = (
        "## Simulation: Kendall τ vs truth by tournament design and ordinal share (Katoch et al. 2026, §5)\n\n"
        "Mean ± standard error over trials. *hybrid, no bias terms* is the same pairwise + ordinal model with "
        "every judge effect switched off: the gap between it and the bias-aware hybrid is what the correction "
        "adds; the gap between naive BT and it is what the extra (ordinal) data adds. The oracle fixes every "
        "judge effect at its true value: no estimator can be expected to beat it on the same data.\n\n"
        "Paired differences (same trials), averaged over the six designs:\n\n"
        + gain_markdown(rows)
        + "\n\n"
        + grid_markdown(grid)
    )
    if any(p.name == "simulation_grid.png" for p in pngs):
        grid_body += f"\n\n![Kendall τ vs truth by design]({rel}/simulation_grid.png)"
    replace_section(evidence, "simulation-grid", grid_body)

    if not rec.is_empty():
        replace_section(
            evidence,
            "simulation-recovery",
            "## Simulation: recovery of the per-judge bias coefficients (bias-aware hybrid)\n\n"
            "Per-judge total effects (position γ_j, length β_j per unit log length ratio, affinity λ_j) against "
            "the truth, pooled over judges, ordinal shares and trials; coverage of the 95% Laplace CI.\n\n"
            + recovery_markdown(rec),
        )
    crossings: dict[str, float | None] = {}
    if not sweep.is_empty():
        table, crossings = sweep_markdown(sweep)
        lines = [
            f"- length {k}: "
            + (
                f"gain crosses zero at corr ≈ {v:.2f}"
                if v is not None
                else "gain does not cross zero in the range swept"
            )
            for k, v in crossings.items()
        ]
        body = (
            "## Simulation: corr(θ, length) sweep — where correction stops helping (Xu et al. 2026)\n\n"
            "Pairwise only, uniform design, two length biases: β₀ = 0.3 (the simulator's default) and β₀ = 1.0 "
            "(strong). *oracle − naive* is what a perfect correction would gain: where it is near zero the bias "
            "barely reorders the models (length tracks quality), so there is nothing to win. "
            "*constant per model*: every answer "
            "of a model has the same length, so the length effect is not identified from comparisons and the "
            "prior splits apparent quality into θ and β (Xu et al.'s setting); *varies within model*: the "
            "simulator's per-answer length noise (SD 0.4 in log length) identifies β from within-model "
            "variation.\n\n" + table + "\n\n" + "\n".join(lines)
        )
        if any(p.name == "simulation_sweep.png" for p in pngs):
            body += f"\n\n![Correction gain vs corr(θ, length)]({rel}/simulation_sweep.png)"
        replace_section(evidence, "simulation-sweep", body)
    return {"grid": grid, "recovery": rec, "sweep": sweep, "crossings": crossings, "plots": pngs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few trials: seconds, for CI-like checks")
    parser.add_argument("--trials", type=int, default=50, help="trials per design × ordinal share (default 50)")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 3000, 10000],
        help="budgets of battles + grades per grid trial (default 1000 3000 10000)",
    )
    parser.add_argument("--sweep-trials", type=int, default=30, help="trials per β₀ × corr × length setting")
    parser.add_argument("--sweep-observations", type=int, default=3000, help="battles per sweep trial")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out-dir", type=Path, help="CSV/PNG folder (default docs/evidence; --smoke: a temp folder)")
    parser.add_argument(
        "--evidence", type=Path, help="page to update (default docs/evidence.md; --smoke: a temp folder's)"
    )
    args = parser.parse_args(argv)
    args.out_dir, args.evidence = study_outputs(ROOT, args.smoke, args.out_dir, args.evidence, "simulation-study")

    designs, mixes, corrs = DESIGNS, MIXES, SWEEP_CORRS
    if args.smoke:
        designs, mixes, corrs = ("uniform", "hubspoke"), (0.5,), (0.0, 0.9)
        args.trials, args.sweep_trials = 3, 3
        args.sizes, args.sweep_observations = [1500], 1500
    trials = plan_trials(
        designs, mixes, tuple(args.sizes), args.trials, corrs, args.sweep_trials, args.sweep_observations
    )
    code_revision = revision(ROOT)  # before the run: the workers use the code imported now
    start = time.perf_counter()
    rows, recovery, busy = run_all(trials, args.workers)
    wall = time.perf_counter() - start
    meta = {
        "mode": "smoke" if args.smoke else "full",
        "trials": args.trials,
        "grid_trials": sum(t.study == "grid" for t in trials),
        "sweep_trials": sum(t.study == "sweep" for t in trials),
        "sizes": ", ".join(str(s) for s in args.sizes),
        "sweep_observations": args.sweep_observations,
        "workers": args.workers,
        "wall": wall,
        "busy": busy,
        "load": os.getloadavg()[0],
        "revision": code_revision,
    }
    result = write_outputs(rows, recovery, args.out_dir, args.evidence, meta)
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_width_chars=200):
        print(result["grid"].select("observations", "design", "ordinal_share", "estimator", "tau", "tau_se"))
        if not result["sweep"].is_empty():
            print(
                result["sweep"].select(
                    "beta0", "corr_length", "within_model_length", "naive_bt", "bias_aware", "oracle", "gain", "gain_se"
                )
            )
        if not result["recovery"].is_empty():
            print(result["recovery"])
    print(f"crossings: {result['crossings']}")
    print(
        f"{len(trials)} trials in {wall:.1f} s wall ({busy:.1f} s of trial CPU time, {args.workers} worker(s), "
        f"load average {meta['load']:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
