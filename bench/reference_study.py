"""Correcting toward a trusted reference (issue 10): simulation, an independent generator, and LLMFAO.

    python bench/reference_study.py                 # the study; rewrites docs/evidence.md's reference sections
    python bench/reference_study.py --smoke         # seconds: one seed, two anchor counts, no evidence page

What it measures, each against a known truth:

* **the gate** (``ranking/gate.py``) with perfect anchors (an unbiased Bradley–Terry rater on uniform pairs),
  anchors that share the judges' length preference, and anchors biased toward length, at K = 40 … 5,000:
  the share of true effects ≥ 0.1 logits it enables, τ vs truth of the published (gated) board next to the
  ungated one (every correction on), the naive board and the zero reference (style control);
* **false enables** with no bias at all, over many seeds (the family-wise rate the gate's level promises);
* the same on an **independent generator** written here (plain numpy, not the repository's simulator:
  its own lengths, families and verdicts), so the check does not share the simulator's assumptions;
* **LLMFAO** (crowd, GPT-4 and GPT-3.5 on the same pairs): the crowd's verdicts on half of the prompts are
  the reference for a GPT judge; the target is the crowd's naive board on the *other* half, so the
  reference never sees the prompts it is scored on.  τ for naive, zero-reference and crowd-reference, with
  posterior SDs of τ.

Every fit goes through the same core function the refresh job calls
(:func:`biasboard.ranking.reference.fit_with_reference`).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from biasboard.importers.registry import import_path
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.fit import fit_naive
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.ranking.reference import ANCHOR_JUDGE, Reference, fit_with_reference
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, draw_parameters, simulate_days
from biasboard.transforms.anchors import as_anchor_rows
from biasboard.transforms.cells import partial_cells
from evidence_sections import markdown_table, replace_section, revision

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
FAMILIES = FamilyMap.with_user_rules()
ANCHORS = Reference("anchors", (ANCHOR_JUDGE,))
CONFIG = ModelConfig(posterior_draws=500)


# --------------------------------------------------------------------------------------------- generators


@dataclass
class World:
    """A simulated pool: judges' battles as cells, the truth, and what anchors are drawn from."""

    cells: list
    names: np.ndarray  # model names
    theta: np.ndarray
    mu: np.ndarray  # mean log length per model
    judges: list[str]
    effects: dict[str, np.ndarray]  # position/length/affinity per judge (same order as judges)


def repo_world(seed: int, bias: bool, battles: int, models: int, judges: int) -> World:
    """The repository's simulator (biasboard.simulate) at its default biases, or with none."""
    none = dict(gamma0=0.0, sd_u=0.0, beta0=0.0, sd_beta=0.0, lambda0=0.0, sd_lambda=0.0)
    config = SimulationConfig(
        battles=battles, models=models, judges=judges, days=1, seed=seed, **({} if bias else none)
    )
    cells = [partial_cells(b, FAMILIES).cells for _, b, _ in simulate_days(config)]
    p = draw_parameters(config)
    return World(
        cells,
        p.model_names,
        p.theta,
        p.mu,
        list(p.judge_names),
        {"position": p.gamma, "length": p.beta, "affinity": p.lam},
    )


def independent_world(seed: int, bias: bool, battles: int, models: int, judges: int) -> World:
    """A generator written for this study, sharing nothing with biasboard.simulate.

    Quality θ ~ Laplace(0, 0.5) (heavier tails than the simulator's normal); each model's answers have a
    log length drawn from a Student-t(5) around its own mean (mean log lengths uniform on [4.5, 6.5], so
    length is strongly between-model); three families with explicit ``family_*`` columns; each judge has a
    position effect, a length effect per unit of log length ratio and a same-family affinity, drawn
    uniformly (magnitudes 0.15–0.6) with random signs for position.  Verdicts are Bradley–Terry without ties;
    pairs uniform; order random.
    """
    rng = np.random.default_rng(10_000 + seed)
    names = np.array([f"indep-{i:02d}" for i in range(models)])
    fam = np.array(["alpha", "beta", "gamma"])[np.arange(models) % 3]
    judge_fam = np.array(["alpha", "beta", "gamma", "alpha"])[np.arange(judges) % 4]
    judge_names = [f"indep-judge-{j}" for j in range(judges)]
    theta = rng.laplace(0.0, 0.5, models)
    theta -= theta.mean()
    mu = rng.uniform(4.5, 6.5, models)
    scale = 1.0 if bias else 0.0
    gamma = scale * rng.choice([-1.0, 1.0], judges) * rng.uniform(0.15, 0.5, judges)
    beta = scale * rng.uniform(0.15, 0.6, judges)
    lam = scale * rng.uniform(0.15, 0.6, judges)
    j = rng.integers(0, judges, battles)
    a = rng.integers(0, models, battles)
    b = (a + rng.integers(1, models, battles)) % models
    la = mu[a] + 0.4 * rng.standard_t(5, battles)
    lb = mu[b] + 0.4 * rng.standard_t(5, battles)
    len_a = np.maximum(1, np.round(np.exp(la))).astype(np.int64)
    len_b = np.maximum(1, np.round(np.exp(lb))).astype(np.int64)
    same = (fam[a] == judge_fam[j]).astype(float) - (fam[b] == judge_fam[j]).astype(float)
    eta = theta[a] - theta[b] + gamma[j] + beta[j] * (np.log(len_a) - np.log(len_b)) + lam[j] * same
    first = rng.random(battles) < 1.0 / (1.0 + np.exp(-eta))
    frame = pl.DataFrame(
        {
            "battle_id": [f"i{seed}-{i}" for i in range(battles)],
            "ts": ["2024-01-01T00:00:00Z"] * battles,
            "judge": np.array(judge_names)[j],
            "model_a": names[a],
            "model_b": names[b],
            "winner": np.where(first, "model_a", "model_b"),
            "len_a": len_a,
            "len_b": len_b,
            "family_a": fam[a],
            "family_b": fam[b],
            "judge_family": judge_fam[j],
        }
    )
    # mean log length as the cells see it (of the integer lengths)
    mu_obs = np.array([np.log(np.concatenate([len_a[a == m], len_b[b == m]])).mean() for m in range(models)])
    return World(
        [partial_cells(frame, FAMILIES).cells],
        names,
        theta,
        mu_obs,
        judge_names,
        {"position": gamma, "length": beta, "affinity": lam},
    )


GENERATORS = {"biasboard simulator": repo_world, "independent generator": independent_world}


def anchors_of(world: World, k: int, seed: int, beta: float = 0.0) -> pl.DataFrame:
    """Cells of K verdicts by a Bradley–Terry rater with length effect ``beta`` on uniform pairs (no position)."""
    rng = np.random.default_rng(20_000 + seed)
    m = world.names.size
    a = rng.integers(0, m, k)
    b = (a + rng.integers(1, m, k)) % m
    la = world.mu[a] + rng.normal(0.0, 0.4, k)
    lb = world.mu[b] + rng.normal(0.0, 0.4, k)
    len_a = np.maximum(1, np.round(np.exp(la))).astype(np.int64)
    len_b = np.maximum(1, np.round(np.exp(lb))).astype(np.int64)
    eta = world.theta[a] - world.theta[b] + beta * (np.log(len_a) - np.log(len_b))
    first = rng.random(k) < 1.0 / (1.0 + np.exp(-eta))
    rows = pl.DataFrame(
        {
            "battle_id": [f"a{seed}-{i}" for i in range(k)],
            "ts": ["2024-01-01T00:00:00Z"] * k,
            "judge": ["trusted"] * k,
            "model_a": world.names[a],
            "model_b": world.names[b],
            "winner": np.where(first, "model_a", "model_b"),
            "len_a": len_a,
            "len_b": len_b,
        }
    )
    return pl.from_arrow(partial_cells(as_anchor_rows(rows), FAMILIES).cells)


def tau(board, world: World, target: np.ndarray | None = None) -> float:
    index = {m: i for i, m in enumerate(world.names)}
    truth = world.theta if target is None else target
    return kendall_tau_b(board.rating, truth[[index[m] for m in board.models]])


def length_slope(board, world: World) -> float:
    """Coefficient of mean log length in the regression of the board's ratings on (θ, μ): the length kept."""
    index = {m: i for i, m in enumerate(world.names)}
    idx = [index[m] for m in board.models]
    design = np.column_stack([np.ones(len(idx)), world.theta[idx], world.mu[idx]])
    return float(np.linalg.lstsq(design, board.rating, rcond=None)[0][2])


# --------------------------------------------------------------------------------------------- studies


CASES = {"perfect": 0.0, "length-sharing": None, "biased (length 0.8)": 0.8}


def one_run(gen: str, case: str, k: int, seed: int, size: dict) -> dict:
    world = GENERATORS[gen](seed, True, **size)
    shared = float(np.mean(world.effects["length"]))
    beta_r = shared if CASES[case] is None else CASES[case]
    fit = fit_with_reference(
        world.cells, reference=ANCHORS, anchor_cells=anchors_of(world, k, seed, beta_r), config=CONFIG
    )
    zero = fit_with_reference(world.cells, reference=Reference(), config=CONFIG)
    gate = fit.gate.decisions
    index = {name: j for j, name in enumerate(world.judges)}
    excess = np.array(
        [
            world.effects[r["effect"]][index[r["judge"]]] - (beta_r if r["effect"] == "length" else 0.0)
            for r in gate.iter_rows(named=True)
        ]
    )
    real = np.abs(excess) >= 0.1
    enabled = gate["enabled"].to_numpy()
    return {
        "generator": gen,
        "case": case,
        "k": k,
        "seed": seed,
        "enabled_real": float(enabled[real].mean()) if real.any() else float("nan"),
        "enabled_small": float(enabled[~real].mean()) if (~real).any() else float("nan"),
        "tau_naive": tau(fit.naive, world),
        "tau_zero": tau(zero.corrected, world),
        "tau_gated": tau(fit.corrected, world),
        "tau_all_on": tau(fit.all_on, world),
        "tau_ref_target": tau(fit.corrected, world, world.theta + beta_r * world.mu),
        "slope_gated": length_slope(fit.corrected, world),
        "slope_zero": length_slope(zero.corrected, world),
        "beta_r": beta_r,
        "beta_r_hat": fit.own_effects["length"]["estimate"],
    }


def null_run(gen: str, seed: int, k: int, size: dict) -> bool:
    world = GENERATORS[gen](seed, False, **size)
    fit = fit_with_reference(
        world.cells,
        reference=ANCHORS,
        anchor_cells=anchors_of(world, k, seed),
        config=ModelConfig(posterior_draws=200, profile=False),
    )
    return bool(fit.gate.decisions["enabled"].any())


def simulation_section(runs: pl.DataFrame, nulls: pl.DataFrame, size: dict, elapsed: float) -> str:
    agg = (
        runs.group_by("generator", "case", "k")
        .agg(
            pl.len().alias("seeds"),
            *(
                pl.col(c).mean()
                for c in (
                    "enabled_real",
                    "enabled_small",
                    "tau_naive",
                    "tau_zero",
                    "tau_gated",
                    "tau_all_on",
                    "tau_ref_target",
                    "slope_gated",
                    "slope_zero",
                    "beta_r",
                    "beta_r_hat",
                )
            ),
        )
        .sort("generator", "case", "k")
    )
    rows = [
        [
            r["generator"],
            r["case"],
            r["k"],
            r["seeds"],
            r["enabled_real"],
            r["enabled_small"],
            r["tau_naive"],
            r["tau_zero"],
            r["tau_all_on"],
            r["tau_gated"],
            r["tau_gated"] - r["tau_all_on"],
            r["tau_ref_target"],
            r["beta_r"],
            r["beta_r_hat"],
            r["slope_gated"],
            r["slope_zero"],
        ]
        for r in agg.iter_rows(named=True)
    ]
    null_rows = [
        [r["generator"], r["seeds"], r["any_enabled"], r["rate"]]
        for r in nulls.group_by("generator")
        .agg(pl.len().alias("seeds"), pl.col("any").sum().alias("any_enabled"), pl.col("any").mean().alias("rate"))
        .sort("generator")
        .iter_rows(named=True)
    ]
    return (
        "## Reference: the trusted-anchor gate in simulation\n\n"
        f"`python bench/reference_study.py` at revision {revision(ROOT)}, {elapsed:.0f} s. Each run: "
        f"{size['battles']:,} battles, {size['models']} models, {size['judges']} biased judges, plus K anchors from "
        "a Bradley–Terry rater on uniform pairs with lengths drawn like the models' (no position effect). "
        "*perfect*: the anchors have no length effect; *length-sharing*: the anchors' length effect equals the "
        "judges' mean, so the only bias is each judge's excess; *biased*: the anchors prefer length (0.8 per "
        "e-fold), more than the judges. Published board = `fit_with_reference` (gate at level 0.05, "
        "identified-only); *all on* = every correction on (the ungated fit); *zero* = `--reference none`. "
        "τ-b vs the true quality θ, except the column 'vs reference target' (θ + β_r·μ: what the anchors would "
        "conclude). 'length kept' is the coefficient of mean log length when the board is regressed on (θ, μ): "
        "the zero reference removes it, a reference keeps the reference's β_r.\n\n"
        + markdown_table(
            [
                "generator",
                "anchors",
                "K",
                "seeds",
                "share of true excesses ≥ 0.1 enabled",
                "share of excesses < 0.1 enabled",
                "τ naive",
                "τ zero ref",
                "τ all on",
                "τ gated",
                "gated − all on",
                "τ gated vs reference target",
                "β_r true",
                "β_r estimated",
                "length kept (gated)",
                "length kept (zero ref)",
            ],
            rows,
        )
        + "\n\n**No bias at all** (every judge unbiased, perfect anchors, K = 500): runs where the gate enabled "
        "any correction.\n\n" + markdown_table(["generator", "seeds", "runs with any enable", "rate"], null_rows)
    )


# --------------------------------------------------------------------------------------------- LLMFAO


def llmfao_section(draws: int = 300) -> str:
    files = {
        "crowd": "crowd-comparisons.csv",
        "gpt4": "gpt4-crowd-comparisons.csv",
        "gpt3": "gpt3-crowd-comparisons.csv",
    }
    imported = {k: import_path("llmfao", DATA / "llmfao" / v) for k, v in files.items()}
    crowd = pl.from_arrow(imported["crowd"].rows)
    prompts = sorted(crowd["prompt_id"].unique().to_list())
    rng = np.random.default_rng(0)
    half = set(rng.choice(prompts, len(prompts) // 2, replace=False).tolist())
    ref_rows = crowd.filter(pl.col("prompt_id").is_in(list(half)))
    target_rows = crowd.filter(~pl.col("prompt_id").is_in(list(half)))
    target = fit_naive(partial_cells(target_rows, FAMILIES).cells)
    target_rating = dict(zip(target.models, target.rating, strict=True))
    crowd_name = str(ref_rows["judge"][0])

    def tau_and_sd(board) -> tuple[float, float]:
        common = [i for i, m in enumerate(board.models) if m in target_rating]
        goal = np.array([target_rating[board.models[i]] for i in common])
        point = kendall_tau_b(board.rating[common], goal)
        samples = board.posterior_samples(draws, np.random.default_rng(1))[:, common]
        return point, float(np.std([kendall_tau_b(s, goal) for s in samples]))

    rows = []
    for judge in ("gpt4", "gpt3"):
        rows_j = pl.from_arrow(imported[judge].rows)
        cells = [partial_cells(rows_j, FAMILIES).cells]
        zero = fit_with_reference(cells, reference=Reference(), config=CONFIG)
        with_crowd = fit_with_reference(
            [*cells, partial_cells(ref_rows, FAMILIES).cells],
            reference=Reference("judges", (crowd_name,)),
            config=CONFIG,
        )
        anchors = fit_with_reference(
            cells,
            reference=ANCHORS,
            config=CONFIG,
            anchor_cells=pl.from_arrow(partial_cells(as_anchor_rows(ref_rows), FAMILIES).cells),
        )
        crowd_only = fit_naive(partial_cells(ref_rows, FAMILIES).cells)
        enabled = sorted(set(anchors.gate.decisions.filter(pl.col("enabled"))["effect"].to_list()))
        own = anchors.own_effects["length"]
        cells_rows = [
            ("naive (GPT alone)", zero.naive),
            ("zero reference (GPT alone, style control)", zero.corrected),
            ("crowd half as reference judge (pooled with GPT)", with_crowd.corrected),
            ("crowd half as anchors (the published board)", anchors.corrected),
            ("crowd half alone, naive (no GPT)", crowd_only),
        ]
        for label, board in cells_rows:
            t, sd = tau_and_sd(board)
            rows.append(
                [
                    judge,
                    label,
                    f"{t:.3f} (±{sd:.3f})",
                    ", ".join(enabled) or "none" if "anchors" in label else "",
                    f"{own['estimate']:.2f} [{own['ci_low']:.2f}, {own['ci_high']:.2f}]" if "anchors" in label else "",
                ]
            )
    return (
        "## Reference: LLMFAO — the crowd as the reference for a GPT judge\n\n"
        f"Crowd verdicts on a random half of the prompts ({ref_rows.height} verdicts) are the reference; the "
        f"target is the crowd's naive Bradley–Terry board on the other half ({target_rows.height} verdicts), so "
        "the reference never sees the prompts it is scored on. τ-b vs that target, ± the posterior SD of τ "
        f"({draws} posterior draws: a naive board's from its half-win sandwich, the others' Laplace). "
        "'Crowd half as anchors' is what `refresh --anchors` publishes (the crowd half "
        "fitted as one rater, gated, identified-only); 'as reference judge' pools the same verdicts as a judge "
        "named with `--reference`. The last row of each judge is the crowd half alone without any GPT verdict: "
        "a reference-corrected board can only beat it by using the GPT judge's extra pairs.\n\n"
        + markdown_table(
            [
                "GPT judge",
                "board",
                "τ-b vs held-out crowd (± SD)",
                "effects the gate corrected",
                "crowd's own length effect [95% CI]",
            ],
            rows,
        )
    )


# --------------------------------------------------------------------------------------------- MT-Bench


def mtbench_section() -> str:
    """MT-Bench PBA (3 LLM judges, both orders): each judge in turn as the reference for the other two.

    There is no human verdict on these pairs, so no board here is "right": the table shows how much the
    choice of reference moves the board (τ vs the zero reference and vs naive) and each reference's own
    length effect.  AlpacaEval has one judge against one baseline, so it offers no second rater to be a
    reference: only ``none`` applies there.
    """
    battles = pl.from_arrow(
        import_path("pba", DATA / "mtbench-position-bias-analyzer" / "mtbench_judgments_*.jsonl.gz").rows
    )
    cells = [partial_cells(battles, FAMILIES).cells]
    judges = sorted(battles["judge"].unique().to_list())
    zero = fit_with_reference(cells, reference=Reference(), config=CONFIG)
    rows = [
        [
            "none (style control)",
            "—",
            kendall_tau_b(zero.naive.rating, zero.corrected.rating),
            1.0,
            "—",
            ", ".join(f"{u['judge']}:{u['effect']}" for u in zero.unidentified if not u["applied"]) or "none",
        ]
    ]
    for judge in judges:
        fit = fit_with_reference(cells, reference=Reference("judges", (judge,)), config=CONFIG)
        own = fit.own_effects["length"]
        length = (
            (
                f"{own['estimate']:.2f} [{own['ci_low']:.2f}, {own['ci_high']:.2f}]"
                + (" (taken as 0)" if own.get("applied") == 0.0 else "")
            )
            if own["ci_low"] is not None
            else "0"
        )
        on = fit.gate.decisions.filter(pl.col("enabled"))
        rows.append(
            [
                judge,
                length,
                kendall_tau_b(fit.naive.rating, fit.corrected.rating),
                kendall_tau_b(zero.corrected.rating, fit.corrected.rating),
                ", ".join(sorted(set(on["effect"].to_list()))) or "none",
                ", ".join(f"{u['judge']}:{u['effect']}" for u in fit.unidentified if not u["applied"]) or "none",
            ]
        )
    return (
        "## Reference: MT-Bench PBA and AlpacaEval, with and without a reference\n\n"
        f"MT-Bench position-bias-analyzer judgments ({battles.height} battles, {len(judges)} LLM judges, both "
        "orders). No human verdicts exist on these pairs, so each judge in turn is the reference for the others; "
        "τ-b is between boards, not against a truth. AlpacaEval 2 has a single judge against a single baseline: "
        "there is no second rater on the same pairs to serve as a reference, so only `--reference none` applies "
        "there (its section above is that case).\n\n"
        + markdown_table(
            [
                "reference",
                "reference's own length effect [95% CI]",
                "τ-b naive vs corrected",
                "τ-b vs the zero-reference board",
                "effects the gate corrected",
                "prior-selected, not applied",
            ],
            rows,
        )
    )


# --------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one seed, two anchor counts, no page")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--null-seeds", type=int, default=40)
    parser.add_argument("--no-llmfao", action="store_true", help="skip the real-data sections")
    parser.add_argument("--real-only", action="store_true", help="only the real-data sections (LLMFAO, MT-Bench)")
    parser.add_argument("--evidence", type=Path, default=ROOT / "docs" / "evidence.md")
    args = parser.parse_args(argv)
    size = dict(battles=20_000, models=20, judges=4)
    ks = (40, 200, 1000, 5000)
    if args.smoke:
        size, ks, args.seeds, args.null_seeds, args.no_llmfao = (
            dict(battles=4000, models=10, judges=3),
            (40, 2000),
            1,
            2,
            True,
        )
    if args.real_only:
        replace_section(args.evidence, "reference-llmfao", llmfao_section())
        replace_section(args.evidence, "reference-mtbench", mtbench_section())
        return 0
    start = time.perf_counter()
    runs = []
    for gen in GENERATORS:
        for case in CASES:
            for k in ks:
                for seed in range(args.seeds):
                    runs.append(one_run(gen, case, k, seed, size))
                    print(
                        {key: (round(v, 3) if isinstance(v, float) else v) for key, v in runs[-1].items()}, flush=True
                    )
    nulls = [
        {"generator": gen, "seed": s, "any": null_run(gen, 100 + s, 500, size)}
        for gen in GENERATORS
        for s in range(args.null_seeds)
    ]
    frame, null_frame = pl.DataFrame(runs), pl.DataFrame(nulls)
    print(null_frame.group_by("generator").agg(pl.col("any").mean()))
    section = simulation_section(frame, null_frame, size, time.perf_counter() - start)
    if args.smoke:
        print(section)
        return 0
    replace_section(args.evidence, "reference-simulation", section)
    if not args.no_llmfao:
        if not DATA.exists():
            print(f"shared data not found at {DATA.resolve()}", file=sys.stderr)
            return 2
        replace_section(args.evidence, "reference-llmfao", llmfao_section())
        replace_section(args.evidence, "reference-mtbench", mtbench_section())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
