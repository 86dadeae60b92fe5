"""Style control on simulated battles with known style effects: recovery, coverage, and what removing style buys.

Per seed: battles with header/list/bold counts (``SimulationConfig(style=True)``; the models' header
propensity anti-correlated with θ, judges rewarding all three features) → cells through the real
ingest function → the bias-aware fit with style effects (the published, style-removed board) and
without (``ModelConfig(style=False)``: style kept) and the naive board.  Prints, side by side from one
run: the mean error and SD of each per-judge style effect against its truth, the share of 95% Laplace
intervals covering the truth, and Kendall τ-b against the true θ of the three boards.

With ``--reference`` the judges are three LLM judges and a human pool, the pool the reference
(``--reference human-pool-1``), in two scenarios: the pool *shares* the LLM judges' style preferences (no
judge has an excess) and the pool has *none* while the judges have strong ones.  Per scenario: how often the
gate enables a style correction, the coverage of the excesses' and of the pool's own effects' 95% intervals,
and Kendall τ-b of the published board and of the zero-reference (style control) board against what the
pool concludes: φ_m = θ_m + Σ_k (δ_rk / a_r)·s̄_mk (a_r on θ's scale, s̄ each model's typical style difference
fitted to its pairs' mean differences, :func:`~biasboard.ranking.reference_rating.typical_style`).  With
``--bootstrap B`` also the
coverage of the published ratings' 95% intervals of φ (centred), from the same fits: the delta method's
(rating ± 1.96 se) and the B replicates' percentiles (what ``refresh --bootstrap`` publishes).

Usage::

    .venv/bin/python bench/style_study.py              # 20 seeds × 24k battles
    .venv/bin/python bench/style_study.py --smoke      # 2 seeds × 8k battles (seconds)
    .venv/bin/python bench/style_study.py --reference  # style relative to a human pool, 20 seeds × 2 scenarios
    .venv/bin/python bench/style_study.py --reference --bootstrap 100   # and φ's interval coverage
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from biasboard.ranking import ModelConfig, build_dataset, fit_bias_aware, fit_naive
from biasboard.ranking.config import STYLE_EFFECTS
from biasboard.ranking.oracle import true_scale
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.ranking.reference import Reference, fit_with_reference
from biasboard.ranking.reference_rating import typical_style
from biasboard.ranking.result import Z95
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig
from biasboard.simulate.simulator import draw_parameters, simulate_days
from biasboard.transforms.cells import merge_cells, partial_cells

BASE = SimulationConfig(
    battles=24_000, models=10, judges=3, days=1, style=True, corr_style=-0.7, style_effects=(0.6, 0.4, 0.3)
)


def one_seed(config: SimulationConfig) -> tuple[np.ndarray, np.ndarray, tuple[float, float, float]]:
    """(errors (judges, 3), covered (judges, 3), τ of the removed, kept and naive boards) of one dataset."""
    params = draw_parameters(config)
    family_map = FamilyMap.with_user_rules()
    cells = merge_cells([partial_cells(b, family_map).cells for _, b, _ in simulate_days(config, params)])
    data = build_dataset(cells)
    removed = fit_bias_aware(data, config=ModelConfig(profile=False))
    kept = fit_bias_aware(data, config=ModelConfig(profile=False, style=False))
    naive = fit_naive(data)
    errors = np.zeros((config.judges, 3))
    covered = np.zeros((config.judges, 3), bool)
    for j, judge in enumerate(params.judge_names.tolist()):
        for k, feature in enumerate(STYLE_EFFECTS):
            effect = getattr(removed.judges[judge], feature)
            lo, hi = effect.conf_int(0.05)
            errors[j, k] = effect.estimate - params.style_effect[j, k]
            covered[j, k] = lo <= params.style_effect[j, k] <= hi
    truth = dict(zip(params.model_names.tolist(), params.theta, strict=True))

    def tau(fit) -> float:
        return kendall_tau_b(np.array([truth[m] for m in fit.models]), fit.rating)

    return errors, covered, (tau(removed), tau(kept), tau(naive))


#: The pool's and the LLM judges' style effects (header, list, bold) in each ``--reference`` scenario.
SCENARIOS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "shared": ((0.6, 0.4, 0.3), (0.6, 0.4, 0.3)),
    "judges only": ((0.0, 0.0, 0.0), (0.8, 0.5, 0.5)),
}


def one_reference_seed(
    config: SimulationConfig, human: tuple, llm: tuple, bootstrap: int = 0
) -> tuple[list[dict], tuple[float, float], tuple[float, float]]:
    """One dataset of three LLM judges and a human pool (the reference), style effects as given, no judge
    deviating from its group: per style effect the gate's decision and the intervals' coverage, the τ of
    the board relative to the pool and of the zero-reference board against what the pool concludes, and the
    share of models whose published 95% interval covers it (the delta method's, the replicates' percentiles;
    NaN without ``bootstrap``).

    A pool's own effect its verdicts cannot tell from zero is taken as zero (``applied`` 0): the judges' whole
    effects are then their excesses, and the truth they are scored against is the judges' effect alone."""
    params = draw_parameters(config)
    effects = np.where(params.judge_human[:, None], np.asarray(human), np.asarray(llm))
    params = dataclasses.replace(params, style_effect=effects)
    family_map = FamilyMap.with_user_rules()
    cells = merge_cells([partial_cells(b, family_map).cells for _, b, _ in simulate_days(config, params)])
    (pool,) = params.judge_names[params.judge_human].tolist()
    r = params.judge_names.tolist().index(pool)
    fit = fit_with_reference(
        cells, reference=Reference("judges", (pool,)), config=ModelConfig(profile=False, bootstrap=bootstrap)
    )
    zero = fit_with_reference(cells, reference=Reference(), config=ModelConfig(profile=False))
    data = build_dataset(cells)
    # What the pool concludes, on the fit's scale: the fit centres log a over the judges weighted by their verdicts,
    # so its θ is the truth times that geometric mean g (oracle.true_scale) and the pool's a_r is its discrimination
    # over g.
    g = true_scale(data, dict(zip(params.judge_names.tolist(), ({"a": a} for a in params.disc), strict=True)))
    a_r = params.disc[r] / g
    index = {m: i for i, m in enumerate(params.model_names.tolist())}
    target = g * params.theta[[index[m] for m in data.models]] + typical_style(data) @ (np.asarray(human) / a_r)
    by_model = dict(zip(data.models, target, strict=True))

    def tau(board) -> float:
        return kendall_tau_b(np.array([by_model[m] for m in board.models]), board.rating)

    records = []
    for k, effect in enumerate(STYLE_EFFECTS):
        own = fit.own_effects[effect]
        kept = own.get("applied") is None
        rows = fit.gate.decisions.filter(fit.gate.decisions["effect"] == effect)
        truth = llm[k] - (human[k] if kept else 0.0)
        lo, hi = (rows["excess"] - 1.96 * rows["se"]).to_numpy(), (rows["excess"] + 1.96 * rows["se"]).to_numpy()
        records.append(
            {
                "null": truth == 0.0,
                "enabled": bool(rows["enabled"].any()),
                "excess_covered": float(np.mean((lo <= truth) & (truth <= hi))),
                "own_covered": own["ci_low"] <= human[k] <= own["ci_high"],
                "own_kept": kept,
            }
        )
    board = fit.corrected
    phi = np.array([by_model[m] for m in board.models])
    phi -= phi.mean()  # the ratings are centred (one comparison component here)
    laplace = float(np.mean(np.abs(board.rating - phi) <= Z95 * board.se))
    boot = float(np.mean((board.ci_low <= phi) & (phi <= board.ci_high))) if bootstrap else float("nan")
    return records, (tau(fit.corrected), tau(zero.corrected)), (laplace, boot)


def reference_study(seeds: int, battles: int, bootstrap: int = 0) -> None:
    config = SimulationConfig(
        battles=battles, models=16, judges=4, human_judges=1, days=1, style=True, sd_style=0.0, beta0=0.0, sd_beta=0.0
    )
    print(f"{seeds} seeds x {battles} battles, {config.models} models, 3 LLM judges + 1 human pool (the reference)")
    print(
        f"{'scenario: pool / LLM judges (header, list, bold)':48} {'enabled':>8} {'if zero':>8} {'excess cov':>10} "
        f"{'own cov':>8} {'own kept':>8} {'τ ref':>6} {'τ zero':>6}"
        + (f" {'φ cov Δ':>8} {'φ cov B':>8}" if bootstrap else "")
    )
    for name, (human, llm) in SCENARIOS.items():
        runs = [one_reference_seed(dataclasses.replace(config, seed=s), human, llm, bootstrap) for s in range(seeds)]
        records = [rec for recs, _, _ in runs for rec in recs]
        taus = np.array([t for _, t, _ in runs])
        phi_cov = np.array([c for _, _, c in runs])
        real = [rec["enabled"] for rec in records if not rec["null"]]
        null = [rec["enabled"] for rec in records if rec["null"]]

        def share(values: list) -> str:
            return f"{np.mean(values):.2f}" if values else "—"

        print(
            f"{name + ': ' + str(human) + ' / ' + str(llm):48} {share(real):>8} {share(null):>8} "
            f"{np.mean([r['excess_covered'] for r in records]):10.3f} {share([r['own_covered'] for r in records]):>8} "
            f"{share([r['own_kept'] for r in records]):>8} {taus[:, 0].mean():6.3f} {taus[:, 1].mean():6.3f}"
            + (f" {phi_cov[:, 0].mean():8.3f} {phi_cov[:, 1].mean():8.3f}" if bootstrap else "")
        )
    print(
        "enabled: share of (seed, style effect) groups the gate corrected where the LLM judges' excess is real; "
        "if zero: where it is zero (false enables; the gate's family-wise level is 0.05 over its six effects); "
        "cov: 95% interval coverage of the excesses and of the pool's own effects; own kept: share of the pool's "
        "own effects told from zero (kept in the rating, else taken as zero and the judges' whole effect is "
        "the excess); τ: Kendall τ-b against what the pool concludes, for the board relative to the pool and "
        "the zero-reference (style control) board"
        + (
            f"; φ cov: share of models whose published 95% interval covers what the pool concludes (centred), "
            f"Δ the delta method's, B the {bootstrap} replicates' percentiles"
            if bootstrap
            else ""
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 seeds × 8k battles")
    parser.add_argument("--reference", action="store_true", help="style relative to a human pool (two scenarios)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--battles", type=int, default=BASE.battles)
    parser.add_argument("--bootstrap", type=int, default=0, help="with --reference: replicates per fit (φ coverage)")
    args = parser.parse_args()
    seeds, battles = (2, 8_000) if args.smoke else (args.seeds, args.battles)
    if args.reference:
        reference_study(seeds, battles, min(args.bootstrap, 10) if args.smoke else args.bootstrap)
        return
    results = [one_seed(dataclasses.replace(BASE, seed=s, battles=battles)) for s in range(seeds)]
    errors = np.stack([r[0] for r in results])
    covered = np.stack([r[1] for r in results])
    taus = np.array([r[2] for r in results])
    print(f"{seeds} seeds x {battles} battles, {BASE.models} models, {BASE.judges} judges")
    print("effect   true(mean)  mean error   SD error   95% CI coverage")
    for k, feature in enumerate(STYLE_EFFECTS):
        print(
            f"{feature:8s} {BASE.style_effects[k]:10.2f} {errors[:, :, k].mean():+11.3f} "
            f"{errors[:, :, k].std():10.3f} {covered[:, :, k].mean():12.3f}"
        )
    print(f"all      coverage {covered.mean():.3f} of {covered.size} intervals")
    print(
        f"Kendall tau vs true theta: style removed {taus[:, 0].mean():.3f}, style kept {taus[:, 1].mean():.3f}, "
        f"naive {taus[:, 2].mean():.3f}; removed > kept in {np.mean(taus[:, 0] > taus[:, 1]):.0%} of seeds"
    )


if __name__ == "__main__":
    main()
