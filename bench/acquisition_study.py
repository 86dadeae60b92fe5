"""Study: recall of the true top-k against the judge budget, for five acquisition strategies.

A **frozen** simulated judge (Xu et al.'s main protocol: one cached verdict per *ordered* pair, so
asking again returns the same answer) with a position bias γ and a length bias β (per unit of log
length ratio, with model lengths that are *spurious*: uncorrelated with quality) judges M models.
Every strategy starts from the same warm-up (a random cycle through all models, both orders), then
acquires ``--batch`` pairs (both orders each) at a time from the posterior of the current fit,
refits, and so on until every ordered pair has been asked.  The fit is either the naive
Bradley–Terry (what arenas publish) or the bias-aware model; the same fit drives acquisition and the
reported top-k (its MAP ratings), so "with and without bias correction" changes both.

Strategies: ``topk`` (Xu et al.'s rule), ``dopt`` (D-optimal), ``thompson``, ``roundrobin``,
``random`` — all from :func:`biasboard.plan.select_comparisons`, the same function
``biasboard plan`` calls.  Printed and written: mean recall ± SE over seeds per budget, the paired
difference topk − other (wins/ties/losses over seeds), and the share of acquired pairs that touch the
true k-th or (k+1)-th model (Xu et al.'s boundary-targeting mechanism).  Reported as measured; the
document says where the top-k rule does not win.

    python bench/acquisition_study.py            # M=20, k=5, 20 seeds: several minutes on 2 cores
    python bench/acquisition_study.py --smoke    # M=10, k=3, 2 seeds: seconds; writes to a temp folder

Writes ``acquisition.csv``, ``evidence-acquisition.svg`` and ``evidence-acquisition.md`` to ``--out``
(default ``docs/`` for a full run).  Needs only the project's own dependencies (the plot is
hand-written SVG).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

os.environ.setdefault("NO_GCE_CHECK", "true")

from biasboard.plan import STRATEGIES, posterior_from_fit, select_comparisons
from biasboard.ranking import ModelConfig, NaiveConfig, fit_bias_aware, fit_naive
from biasboard.ranking.rank_stats import top_k_recall
from biasboard.report.svg import esc, nice_ticks
from biasboard.schemas.battle import BATTLE_SCHEMA
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, draw_parameters, verdict_probabilities
from biasboard.transforms.cells import partial_cells

FITS = ("naive", "corrected")
COLOURS = {"topk": "#d9792b", "dopt": "#5b7db8", "thompson": "#2a9d5b", "roundrobin": "#8e6bb8", "random": "#9aa3ad"}


@dataclass(frozen=True)
class Study:
    models: int
    k: int
    theta_sd: float  # spread of true quality (logits)
    seeds: int
    batch: int  # pairs per acquisition round (2 × batch comparisons)
    gamma: float  # position effect of the frozen judge
    beta: float  # length effect, per unit of ln(len_a / len_b)
    len_model_sd: float
    draws: int


FULL = Study(models=20, k=5, theta_sd=1.0, seeds=20, batch=4, gamma=0.4, beta=1.0, len_model_sd=0.5, draws=1000)
SMOKE = Study(models=10, k=3, theta_sd=1.0, seeds=2, batch=3, gamma=0.4, beta=1.0, len_model_sd=0.5, draws=300)


# ------------------------------------------------------------------------------------------- the judge


@dataclass(frozen=True)
class FrozenJudge:
    """One verdict per ordered pair, drawn once; ``cells`` holds them as single-battle pair cells."""

    theta: np.ndarray
    names: tuple[str, ...]
    cells: pl.DataFrame  # one row per ordered pair, columns of the cells contract + _a, _b indices
    truth_top: np.ndarray


def frozen_judge(study: Study, seed: int) -> FrozenJudge:
    """Draw the truth (the project's simulator) and cache every ordered pair's verdict and lengths."""
    config = SimulationConfig(
        models=study.models,
        judges=1,
        seed=seed,
        theta_sd=study.theta_sd,
        gamma0=study.gamma,
        sd_u=0.0,
        beta0=study.beta,
        sd_beta=0.0,
        lambda0=0.0,
        sd_lambda=0.0,
        disc_sd=0.0,
        len_model_sd=study.len_model_sd,
        corr_length=0.0,
        battles=1,
        days=1,
    )
    params = draw_parameters(config)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 99]))
    m = study.models
    a, b = np.nonzero(~np.eye(m, dtype=bool))
    n = a.size
    prompt = rng.integers(0, config.prompts, n)

    def log_len(model: np.ndarray) -> np.ndarray:
        return params.mu[model] + params.prompt_len[prompt] + rng.normal(0.0, config.len_noise_sd, n)

    len_a = np.maximum(1, np.rint(np.exp(log_len(a)))).astype(np.int64)
    len_b = np.maximum(1, np.rint(np.exp(log_len(b)))).astype(np.int64)
    judge = np.zeros(n, dtype=np.int64)
    p_a, p_b, _ = verdict_probabilities(params, judge, a, b, len_a, len_b)
    u = rng.random(n)
    winner = np.where(u < p_a, "model_a", np.where(u < p_a + p_b, "model_b", "tie"))
    names = params.model_names
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    given = {
        "battle_id": [f"q{i}" for i in range(n)],
        "ts": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
        "judge": [str(params.judge_names[0])] * n,
        "model_a": names[a].tolist(),
        "model_b": names[b].tolist(),
        "winner": winner.tolist(),
        "prompt_id": [f"p{p}" for p in prompt],
        "len_a": len_a,
        "len_b": len_b,
    }
    # Every other column of the schema (families, order, style counts, labels, ...) is absent: null, as in a log
    # that does not record it — so a column added to the schema later does not break the study.
    battles = pa.table({f.name: given.get(f.name, pa.nulls(n, f.type)) for f in BATTLE_SCHEMA}, schema=BATTLE_SCHEMA)
    cells = pl.from_arrow(partial_cells(battles, FamilyMap.with_user_rules()).cells)
    index = {name: i for i, name in enumerate(names.tolist())}
    cells = cells.with_columns(
        pl.col("model_a").replace_strict(index, return_dtype=pl.Int64).alias("_a"),
        pl.col("model_b").replace_strict(index, return_dtype=pl.Int64).alias("_b"),
    )
    if cells["n"].sum() != n or cells.height != n:
        raise RuntimeError("frozen judge: expected one cell per ordered pair")
    truth_top = np.argsort(-params.theta)[: study.k]
    return FrozenJudge(params.theta, tuple(names.tolist()), cells, truth_top)


# ------------------------------------------------------------------------------------------- one run


def fit(kind: str, cells: pl.DataFrame, study: Study, seed: int):
    data = cells.drop("_a", "_b")
    if kind == "naive":
        return fit_naive(data, config=NaiveConfig(k=study.k, seed=seed, posterior_draws=study.draws))
    return fit_bias_aware(data, config=ModelConfig(k=study.k, seed=seed, posterior_draws=study.draws, profile=False))


def ratings_in_truth_order(result, names: tuple[str, ...]) -> np.ndarray:
    """The fit's ratings indexed like the truth (a model never compared gets −inf: it is not in any top-k)."""
    out = np.full(len(names), -np.inf)
    for i, name in enumerate(result.models):
        out[names.index(name)] = result.rating[i]
    return out


def run_one(judge: FrozenJudge, study: Study, strategy: str, kind: str, seed: int, budgets: list[int]) -> dict:
    """Acquire until every ordered pair is asked; at each budget: recall of the true top-k, and the share of
    the pairs acquired so far that include the true k-th or (k+1)-th model."""
    m = study.models
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    cycle = rng.permutation(m)
    asked = np.zeros((m, m), dtype=bool)
    for i in range(m):
        a, b = cycle[i], cycle[(i + 1) % m]
        asked[a, b] = asked[b, a] = True
    boundary = set(np.argsort(-judge.theta)[study.k - 1 : study.k + 1].tolist())
    touched = acquired = 0
    recall: dict[int, float] = {}
    share: dict[int, float] = {}
    cell_a = judge.cells["_a"].to_numpy()
    cell_b = judge.cells["_b"].to_numpy()
    total = m * (m - 1)
    step = 0
    while True:
        n_asked = int(asked.sum())
        result = fit(kind, judge.cells.filter(asked[cell_a, cell_b]), study, seed)
        for budget in budgets:
            if budget not in recall and n_asked >= budget:
                recall[budget] = top_k_recall(ratings_in_truth_order(result, judge.names), judge.theta, study.k)
                share[budget] = touched / acquired if acquired else float("nan")
        if n_asked >= min(total, max(budgets)):
            break
        posterior = posterior_from_fit(result)
        sel = select_comparisons(
            posterior,
            2 * study.batch,
            strategy,
            counts=_counts(asked, posterior, judge),
            repeat=False,
            seed=seed * 1000 + step,
            draws=study.draws,
        )
        step += 1
        if sel.n_units == 0:
            break
        for a_post, b_post in zip(sel.first, sel.second, strict=True):
            a = judge.names.index(posterior.models[a_post])
            b = judge.names.index(posterior.models[b_post])
            asked[a, b] = asked[b, a] = True
            acquired += 1
            touched += bool({a, b} & boundary)
    return {"recall": recall, "boundary_share": share}


def _counts(asked: np.ndarray, posterior, judge: FrozenJudge) -> np.ndarray:
    """Ordered comparisons already asked, indexed like the posterior's models."""
    order = np.array([judge.names.index(name) for name in posterior.models])
    return asked[np.ix_(order, order)].astype(float)


# ------------------------------------------------------------------------------------------- output


def summarise(rows: pl.DataFrame) -> pl.DataFrame:
    return (
        rows.group_by("fit", "strategy", "budget")
        .agg(
            pl.col("recall").mean().alias("recall_mean"),
            (pl.col("recall").std() / pl.len().sqrt()).alias("recall_se"),
            pl.len().alias("seeds"),
        )
        .sort("fit", "strategy", "budget")
    )


def paired(rows: pl.DataFrame) -> pl.DataFrame:
    """topk − other per (fit, budget, seed): mean difference, SE, and wins/ties/losses over seeds."""
    top = rows.filter(pl.col("strategy") == "topk").select("fit", "budget", "seed", pl.col("recall").alias("r_top"))
    other = rows.filter(pl.col("strategy") != "topk")
    joined = other.join(top, on=["fit", "budget", "seed"]).with_columns((pl.col("r_top") - pl.col("recall")).alias("d"))
    return (
        joined.group_by("fit", "strategy", "budget")
        .agg(
            pl.col("d").mean().alias("diff_mean"),
            (pl.col("d").std() / pl.len().sqrt()).alias("diff_se"),
            (pl.col("d") > 1e-12).sum().alias("wins"),
            (pl.col("d").abs() <= 1e-12).sum().alias("ties"),
            (pl.col("d") < -1e-12).sum().alias("losses"),
        )
        .sort("fit", "strategy", "budget")
    )


def line_chart(summary: pl.DataFrame, study: Study) -> str:
    """Two panels (naive, corrected): mean recall vs budget, one line per strategy, ±1 SE whiskers."""
    pw, ph, ml, mt, mb, gap = 360, 250, 52, 34, 46, 30
    width = ml + 2 * pw + gap + 150
    height = mt + ph + mb
    budgets = sorted(summary["budget"].unique().to_list())
    x0, x1 = min(budgets), max(budgets)
    lo = max(0.0, float((summary["recall_mean"] - summary["recall_se"].fill_null(0)).min()) - 0.05)
    yt = [t for t in nice_ticks(lo, 1.0, 5) if 0.0 <= t <= 1.0]
    y0, y1 = yt[0], max(yt[-1], 1.0)
    xt = nice_ticks(x0, x1, 6)
    xt = [t for t in xt if x0 <= t <= x1]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="system-ui, sans-serif" font-size="12">',
        f"<title>{esc(f'Top-{study.k} recall against budget, {study.models} models')}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for p, kind in enumerate(FITS):
        left = ml + p * (pw + gap)

        def sx(v, left=left):
            return left + (v - x0) / (x1 - x0) * pw

        def sy(v):
            return mt + (1 - (v - y0) / (y1 - y0)) * ph

        parts.append(
            f'<text x="{left + pw / 2}" y="{mt - 12}" text-anchor="middle" font-weight="bold">{esc(kind)} fit</text>'
        )
        for t in yt:
            parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#e3e6ea"/>')
            if p == 0:
                parts.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:.1f}</text>')
        for t in xt:
            parts.append(
                f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{mt + ph}" y2="{mt + ph + 4}" stroke="#6b7580"/>'
            )
            parts.append(f'<text x="{sx(t):.1f}" y="{mt + ph + 17}" text-anchor="middle">{t:g}</text>')
        parts.append(f'<rect x="{left}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#6b7580"/>')
        parts.append(
            f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">comparisons asked (budget)</text>'
        )
        for strategy in STRATEGIES:
            sub = summary.filter((pl.col("fit") == kind) & (pl.col("strategy") == strategy)).sort("budget")
            if sub.height == 0:
                continue
            colour = COLOURS[strategy]
            pts = " ".join(f"{sx(b):.1f},{sy(r):.1f}" for b, r in zip(sub["budget"], sub["recall_mean"], strict=True))
            dash = ' stroke-dasharray="5 3"' if strategy in ("roundrobin", "random") else ""
            wide = "2.6" if strategy == "topk" else "1.6"
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{wide}"{dash}/>')
            for b, r, se in zip(sub["budget"], sub["recall_mean"], sub["recall_se"].fill_null(0.0), strict=True):
                parts.append(
                    f'<line x1="{sx(b):.1f}" x2="{sx(b):.1f}" y1="{sy(max(y0, r - se)):.1f}" '
                    f'y2="{sy(min(y1, r + se)):.1f}" stroke="{colour}" stroke-opacity="0.6"/>'
                )
    parts.append(
        f'<text transform="translate(14 {mt + ph / 2}) rotate(-90)" text-anchor="middle">'
        f"recall of the true top {study.k}</text>"
    )
    lx = ml + 2 * pw + gap + 16
    for i, strategy in enumerate(STRATEGIES):
        y = mt + 14 + 20 * i
        dash = ' stroke-dasharray="5 3"' if strategy in ("roundrobin", "random") else ""
        parts.append(
            f'<line x1="{lx}" x2="{lx + 24}" y1="{y - 4}" y2="{y - 4}" stroke="{COLOURS[strategy]}" '
            f'stroke-width="2.4"{dash}/>'
        )
        parts.append(f'<text x="{lx + 30}" y="{y}">{esc(strategy)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _fmt(x, digits: int = 2) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown(
    study: Study,
    summary: pl.DataFrame,
    diffs: pl.DataFrame,
    boundary: pl.DataFrame,
    seconds: float,
    command: str,
    svg_name: str,
) -> str:
    budgets = sorted(summary["budget"].unique().to_list())
    lines = [
        "# Evidence: top-k-aware acquisition against four baselines",
        "",
        f"Generated by `{command}` in {seconds:.0f} s ({dt.date.today().isoformat()}); do not edit by hand.",
        "",
        f"Setup: {study.models} models (θ ~ N(0, {study.theta_sd}²)), top k = {study.k}, {study.seeds} seeds "
        "(each its own truth and judge). One frozen judge: one cached verdict per ordered pair "
        "(Xu et al.'s main protocol), "
        f"position effect γ = {study.gamma}, length effect β = {study.beta} per unit of log length ratio, model "
        f"lengths spurious (corr(θ, length) = 0, SD of model mean log length {study.len_model_sd}), Davidson ties. "
        f"Every run starts from the same warm-up ({study.models} pairs, a random cycle, both orders = "
        f"{2 * study.models} comparisons), then acquires {study.batch} pairs × 2 orders per round from the current "
        f"fit's Laplace posterior and refits, never re-asking a pair. `naive` = Bradley–Terry with ties as half "
        "wins; `corrected` = the bias-aware model (position, length, ties). The last budget is the full matrix: "
        "every strategy ends with the same data there.",
        "",
        f"![recall of the true top-{study.k} against budget]({svg_name})",
        "",
        "## Mean recall of the true top-k (± SE over seeds)",
        "",
        "| fit | strategy | " + " | ".join(str(b) for b in budgets) + " |",
        "|---|---|" + "---|" * len(budgets),
    ]
    for kind in FITS:
        for strategy in STRATEGIES:
            sub = summary.filter((pl.col("fit") == kind) & (pl.col("strategy") == strategy))
            cells = {r["budget"]: f"{_fmt(r['recall_mean'])} ± {_fmt(r['recall_se'])}" for r in sub.to_dicts()}
            lines.append(f"| {kind} | {strategy} | " + " | ".join(cells.get(b, "—") for b in budgets) + " |")
    lines += [
        "",
        "## Paired difference topk − other (mean ± SE; wins/ties/losses over seeds)",
        "",
        "| fit | vs | " + " | ".join(str(b) for b in budgets) + " |",
        "|---|---|" + "---|" * len(budgets),
    ]
    for kind in FITS:
        for strategy in STRATEGIES[1:]:
            sub = diffs.filter((pl.col("fit") == kind) & (pl.col("strategy") == strategy))
            cells = {
                r["budget"]: f"{r['diff_mean']:+.2f} ± {_fmt(r['diff_se'])} ({r['wins']}/{r['ties']}/{r['losses']})"
                for r in sub.to_dicts()
            }
            lines.append(f"| {kind} | {strategy} | " + " | ".join(cells.get(b, "—") for b in budgets) + " |")
    lines += [
        "",
        "## Where the acquired pairs went",
        "",
        "Share of the pairs acquired after the warm-up, up to each budget, that include the true k-th or "
        f"(k+1)-th model (uniform over all pairs: {_uniform_boundary_share(study.models):.2f}; at the full matrix "
        "every strategy has asked every pair).",
        "",
        "| fit | strategy | " + " | ".join(str(b) for b in budgets[1:]) + " |",
        "|---|---|" + "---|" * len(budgets[1:]),
    ]
    for kind in FITS:
        for strategy in STRATEGIES:
            sub = {
                r["budget"]: r["boundary_share"]
                for r in boundary.filter((pl.col("fit") == kind) & (pl.col("strategy") == strategy)).to_dicts()
            }
            lines.append(f"| {kind} | {strategy} | " + " | ".join(_fmt(sub.get(b)) for b in budgets[1:]) + " |")
    lines += ["", "## Reading", "", *verdict(summary, diffs, budgets), ""]
    return "\n".join(lines)


def _uniform_boundary_share(m: int) -> float:
    pairs = m * (m - 1) / 2
    with_boundary = 2 * (m - 2) + 1
    return with_boundary / pairs


def verdict(summary: pl.DataFrame, diffs: pl.DataFrame, budgets: list[int]) -> list[str]:
    """Plain sentences computed from the tables: where topk leads, ties and loses (by > 2 SE of the difference)."""
    out = []
    inner = budgets[:-1]  # the full matrix is the same data for everyone
    for kind in FITS:
        for strategy in STRATEGIES[1:]:
            sub = diffs.filter(
                (pl.col("fit") == kind) & (pl.col("strategy") == strategy) & pl.col("budget").is_in(inner)
            ).to_dicts()
            ahead = [r["budget"] for r in sub if r["diff_mean"] > max(2 * (r["diff_se"] or 0), 0)]
            behind = [r["budget"] for r in sub if r["diff_mean"] < min(-2 * (r["diff_se"] or 0), 0)]
            mean = float(np.mean([r["diff_mean"] for r in sub]))
            text = f"- {kind} fit, topk vs {strategy}: mean difference over budgets {mean:+.3f}; "
            text += f"ahead by more than 2 SE at {ahead or 'no budget'}"
            text += f"; behind by more than 2 SE at {behind}" if behind else "; never behind by more than 2 SE"
            out.append(text + ".")
    for kind in FITS:
        sub = summary.filter((pl.col("fit") == kind) & pl.col("budget").is_in(inner[1:]))
        best = sub.group_by("budget").agg(pl.col("strategy").sort_by("recall_mean", descending=True).first())
        leaders = best["strategy"].value_counts().sort("count", descending=True).to_dicts()
        counts = ", ".join(f"{r['strategy']} {r['count']}" for r in leaders)
        out.append(
            f"- {kind} fit: highest mean recall after the warm-up and before the full matrix "
            f"({len(inner) - 1} budgets): {counts}."
        )
    full = budgets[-1]
    final = summary.filter(pl.col("budget") == full).group_by("fit").agg(pl.col("recall_mean").mean())
    for r in final.sort("fit").to_dicts():
        out.append(
            f"- Full matrix ({full} comparisons), {r['fit']} fit: recall {r['recall_mean']:.3f} "
            "(every strategy holds the same data here)."
        )
    return out


# ------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny study (seconds)")
    parser.add_argument("--seeds", type=int, default=None, help="override the number of seeds")
    parser.add_argument("--out", default=None, help="output folder (default: docs/, or a temp folder with --smoke)")
    args = parser.parse_args(argv)
    study = SMOKE if args.smoke else FULL
    if args.seeds:
        study = Study(**{**study.__dict__, "seeds": args.seeds})
    out = (
        Path(args.out)
        if args.out
        else (
            Path(tempfile.mkdtemp(prefix="acq-smoke-")) if args.smoke else Path(__file__).resolve().parents[1] / "docs"
        )
    )
    out.mkdir(parents=True, exist_ok=True)
    m = study.models
    total = m * (m - 1)
    warm = 2 * m
    budgets = sorted(
        {warm, *np.linspace(warm, total, 8 if not args.smoke else 5).round(-1).astype(int).tolist(), total}
    )
    budgets = [b for b in budgets if warm <= b <= total]
    started = time.perf_counter()
    rows = []
    for seed in range(study.seeds):
        judge = frozen_judge(study, seed)
        for kind in FITS:
            for strategy in STRATEGIES:
                res = run_one(judge, study, strategy, kind, seed, budgets)
                for budget, r in res["recall"].items():
                    rows.append(
                        {
                            "fit": kind,
                            "strategy": strategy,
                            "seed": seed,
                            "budget": budget,
                            "recall": r,
                            "boundary_share": res["boundary_share"][budget],
                        }
                    )
        print(f"seed {seed + 1}/{study.seeds} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    seconds = time.perf_counter() - started
    table = pl.DataFrame(rows)
    summary = summarise(table)
    diffs = paired(table)
    boundary = table.group_by("fit", "strategy", "budget").agg(pl.col("boundary_share").mean())
    table.write_csv(out / "acquisition.csv")
    svg_name = "evidence-acquisition.svg"
    (out / svg_name).write_text(line_chart(summary, study), encoding="utf-8")
    command = (
        "python bench/acquisition_study.py"
        + (" --smoke" if args.smoke else "")
        + (f" --seeds {args.seeds}" if args.seeds else "")
    )
    doc = markdown(study, summary, diffs, boundary, seconds, command, svg_name)
    (out / "evidence-acquisition.md").write_text(doc, encoding="utf-8")
    print(doc)
    print(f"\nwritten to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
