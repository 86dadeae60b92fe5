"""Style control on simulated battles with known style effects: recovery, coverage, and what removing style buys.

Per seed: battles with header/list/bold counts (``SimulationConfig(style=True)``; the models' header
propensity anti-correlated with θ, judges rewarding all three features) → cells through the real
ingest function → the bias-aware fit with style effects (the published, style-removed board) and
without (``ModelConfig(style=False)``: style kept) and the naive board.  Prints, side by side from one
run: the mean error and SD of each per-judge style effect against its truth, the share of 95% Laplace
intervals covering the truth, and Kendall τ-b against the true θ of the three boards.

Usage::

    .venv/bin/python bench/style_study.py            # 20 seeds × 24k battles
    .venv/bin/python bench/style_study.py --smoke    # 2 seeds × 8k battles (seconds)
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from biasboard.ranking import ModelConfig, build_dataset, fit_bias_aware, fit_naive
from biasboard.ranking.config import STYLE_EFFECTS
from biasboard.ranking.rank_stats import kendall_tau_b
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 seeds × 8k battles")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--battles", type=int, default=BASE.battles)
    args = parser.parse_args()
    seeds, battles = (2, 8_000) if args.smoke else (args.seeds, args.battles)
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
