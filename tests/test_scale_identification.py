"""The scale of θ on a board of battles alone: the judges' discriminations a_j, weighted by their verdicts.

Only a_j·(θ_a − θ_b) is seen, so the fit fixes a mean of log a_j at 0.  An unweighted mean let a judge with a
handful of verdicts — its log a_j mostly its prior — set a fifth of the scale of a five-judge board: every
interval grew in proportion to |θ| (the ends of the board most), though nothing about the models was less
known (docs/design-notes.md, "Scale of θ").  Boards are simulated with a known truth and cut with the real
ingest, as in tests/test_ranking_recovery.py.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from biasboard.ranking import ModelConfig, fit_bias_aware
from biasboard.ranking.bias_table import PRIOR_SELECTED, judge_prior_var
from biasboard.ranking.data import build_dataset
from biasboard.ranking.fit import solve_bias_aware
from biasboard.ranking.model import DISC, POS
from biasboard.ranking.oracle import true_scale
from biasboard.ranking.problem import bias_aware_problem
from biasboard.ranking.reference import Reference, fit_with_reference
from biasboard.ranking.reference_rating import discrimination_row
from biasboard.ranking.solver import newton_factor
from biasboard.ranking.stream import TableBuckets, stream_dataset
from biasboard.schemas.cells import conform_pair_cells
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days, truth
from biasboard.transforms.cells import merge_batches, partial_cells

from tests.test_judge_blocks import TOL, _assert_judge_variances, _both, _same_tables
from tests.test_ranking_model import _cells
from tests.test_ranking_recovery import FAST

#: The judge cut to a few verdicts (the last by name of the simulator's five).
SPARSE = "mistral-sim-judge-1"


def _board(seed: int, sparse_verdicts: int | None):
    """(cells, truth) of 20 models and five judges, ~2,400 verdicts each, the fifth cut to its first
    ``sparse_verdicts`` (None: left out)."""
    config = SimulationConfig(days=1, battles=12_000, models=20, judges=5, seed=seed)
    parts, kept = [], 0
    for _, battles, _ in simulate_days(config):
        sparse = pc.equal(battles["judge"], SPARSE).to_numpy(zero_copy_only=False)
        keep = ~sparse
        take = np.flatnonzero(sparse)[: max(0, (sparse_verdicts or 0) - kept)]
        keep[take] = True
        kept += take.size
        parts.append(partial_cells(battles.filter(keep), FamilyMap.with_user_rules()))
    return merge_batches(parts).cells, truth(config)


def _ends(fit, tr) -> np.ndarray:
    """The four models at the ends of the true order (two best, two worst)."""
    theta = {m["model"]: m["theta"] for m in tr["models"]}
    order = np.argsort([theta[m] for m in fit.models])
    return np.r_[order[:2], order[-2:]]


def test_a_judge_with_ten_verdicts_leaves_the_intervals_at_the_ends_as_they_were():
    """Adding a judge with 10 verdicts widened the end models' 95% intervals by 17–33% on these three boards (by
    43% over 120 seeds of 15,000 battles: 0.297 → 0.426 logits, the middle's 0.263 → 0.264; docs/design-notes.md);
    now they stay within 1% of the four-judge board's."""
    ratios = []
    for seed in range(3):
        (cells, tr), (sparse_cells, _) = _board(seed, None), _board(seed, 10)
        fits = [fit_bias_aware(c, config=FAST) for c in (cells, sparse_cells)]
        assert all(f.converged for f in fits) and fits[0].models == fits[1].models
        ends = _ends(fits[0], tr)
        without, with_sparse = (float(np.mean(f.ci_high[ends] - f.ci_low[ends])) for f in fits)
        ratios.append(with_sparse / without)
    assert max(ratios) < 1.01, ratios


def test_the_scale_is_the_verdict_weighted_geometric_mean_of_the_discriminations():
    """Σ_j w_j log â_j = 0 with w_j the judge's share of the pair verdicts; the sparse judge's share is ~0.1%."""
    cells, tr = _board(0, 10)
    fit = fit_bias_aware(cells, config=FAST)
    disc = fit.bias.filter((pl.col("effect") == "discrimination") & (pl.col("judge") != "*"))
    data = build_dataset(cells)
    verdicts = dict(zip(data.judges, data.judge_sums("n"), strict=True))
    w = np.array([verdicts[j] for j in disc["judge"]]) / sum(verdicts.values())
    assert w[disc["judge"].to_list().index(SPARSE)] < 0.005
    assert abs(float(w @ np.log(disc["estimate"].to_numpy()))) < 1e-8
    assert abs(float(np.mean(np.log(disc["estimate"].to_numpy())))) > 1e-3  # not the unweighted mean
    judges = {j["judge"]: j for j in tr["judges"]}
    assert true_scale(cells, judges) == pytest.approx(np.exp(w @ np.log([judges[j]["a"] for j in disc["judge"]])))


def test_the_judge_blocked_solver_centres_with_the_same_weights():
    """Dense and judge-blocked fits of the board with the sparse judge agree to 1e-8 (core, θ covariance, judge
    variances): the blocked step solves for the effective log a_j under wᵀt = 0 (ranking/arrowhead.py)."""
    data = build_dataset(_board(1, 10)[0])
    assert np.ptp(data.judge_sums("n")) > 1000  # weights far from equal
    (pd, sd, cd), (_, sb, cb) = _both(data)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    theta = pd.layout.theta
    assert np.max(np.abs(cd[theta, theta] - cb.block(theta))) < TOL
    _assert_judge_variances(pd, cd, cb)


def test_a_reference_rater_with_ten_verdicts_leaves_the_references_scale_as_it_was():
    """A reference of two raters, one cut to 10 verdicts: the reference's discrimination a_r (what its rating φ
    divides its length preference by) is the raters' geometric mean weighted by their verdicts, as the board's
    scale is.  Unweighted, the 10-verdict rater (its log a_r mostly its prior) set half of it: a_r moved from 0.947
    to 1.027 and from 0.796 to 0.900 on these boards against the first rater alone (up to 28% over 20 seeds), φ by
    up to 0.024 logits; now within 0.2% and 0.003."""
    for seed in (0, 4):
        data = build_dataset(_board(seed, 10)[0])
        first = next(j for j in data.judges if j != SPARSE)
        fits = [
            fit_with_reference(data, reference=Reference("judges", raters), config=FAST)
            for raters in ((first,), (first, SPARSE))
        ]
        alone, pooled = (f.own_effects["discrimination"]["estimate"] for f in fits)
        assert pooled == pytest.approx(alone, rel=0.002), (seed, alone, pooled)
        phi = [f.corrected.rating - f.corrected.rating.mean() for f in fits]
        assert np.max(np.abs(phi[0] - phi[1])) < 0.003, seed


def test_the_references_discrimination_row_weighs_its_raters_by_their_verdicts():
    """discrimination_row · core = Σ_r s_r log a_r over the reference raters, s_r each one's share of their verdicts."""
    data = build_dataset(_board(1, 10)[0])
    raters = frozenset(data.judges[:2]) | {SPARSE}
    problem = bias_aware_problem(data, FAST)
    solution = solve_bias_aware(problem, FAST)
    log_a = problem.spec.effective_map() @ solution.core
    log_a = log_a[problem.layout.eff_block(DISC)]
    verdicts = data.judge_sums("n") * np.array([j in raters for j in data.judges])
    expected = float(verdicts @ log_a / verdicts.sum())
    assert discrimination_row(problem, raters) @ solution.core == pytest.approx(expected, abs=1e-12)
    assert abs(expected - float(np.mean(log_a[[data.judges.index(j) for j in raters]]))) > 1e-3  # not unweighted


#: Known discriminations: judge-0 at 1, the three others at 1.5 (no other judge effect, no ties).
KNOWN_A = np.array([1.0, 1.5, 1.5, 1.5])
KNOWN_THETA = np.linspace(-1.5, 1.5, 10)
#: Only the discriminations act: the other effects off, so the fit's model is the simulation's.
ONLY_DISC = replace(FAST, disabled=frozenset(("*", e) for e in ("position", "length", "affinity")))
FIXED = frozenset({("judge-0", "discrimination")})


def _known_a_cells(
    seed: int,
    a: np.ndarray = KNOWN_A,
    verdicts: int | np.ndarray = 5000,
    per_cell: int = 20,
    selves: tuple[int, ...] = (),
) -> pa.Table:
    """Pair cells of judges j with P(a beats b) = σ(a_j (θ_a − θ_b)), ``verdicts`` each (or per judge) in cells of
    ``per_cell``; the judges ``selves`` judge self-battles only (a model against itself: even odds, whatever a_j)."""
    rng = np.random.default_rng(seed)
    cells = verdicts // per_cell
    j = np.repeat(np.arange(a.size), cells)
    x = rng.integers(0, KNOWN_THETA.size, j.size)
    y = (x + rng.integers(1, KNOWN_THETA.size, j.size)) % KNOWN_THETA.size
    y = np.where(np.isin(j, selves), x, y)
    n = np.full(j.size, per_cell)
    win = rng.binomial(n, 1 / (1 + np.exp(-a[j] * (KNOWN_THETA[x] - KNOWN_THETA[y]))))
    zeros, none = np.zeros(j.size, np.int64), [None] * j.size
    return conform_pair_cells(
        pa.table(
            {
                "judge": [f"judge-{k}" for k in j],
                "judge_family": ["x"] * j.size,
                "model_a": [f"m{k:02d}" for k in x],
                "model_b": [f"m{k:02d}" for k in y],
                "family_a": ["f"] * j.size,
                "family_b": ["f"] * j.size,
                "len_bin": np.full(j.size, 10, np.int16),
                "order_known": np.ones(j.size, bool),
                "category": none,
                "language": none,
                "n": n,
                "win_a": win,
                "win_b": n - win,
                "tie": zeros,
                "tie_bothbad": zeros,
                "n_len": zeros,
                "sum_x": np.zeros(j.size),
                "sum_x2": np.zeros(j.size),
                "sum_loglen_a": np.zeros(j.size),
                "sum_loglen_b": np.zeros(j.size),
            }
        )
    )


def _fit_known(data, config: ModelConfig) -> tuple[np.ndarray, np.ndarray, float]:
    """(centred θ, a_j, the negative log-likelihood without the prior) at the MAP."""
    problem = bias_aware_problem(data, config)
    solution = solve_bias_aware(problem, config)
    assert solution.converged
    objective = problem.objective()
    f = objective.evaluate(solution.core, solution.diag, derivatives=False).f
    theta = solution.core[problem.layout.theta]
    log_a = (problem.spec.effective_map() @ solution.core)[problem.layout.eff_block(DISC)]
    return theta - theta.mean(), np.exp(log_a), f - objective.prior_value(solution.core, solution.diag)


def test_a_judge_whose_discrimination_is_fixed_sets_the_scale_and_the_others_stay_free():
    """judge-0's a fixed at 1 (discrimination off) beside three judges of true a = 1.5.  Its verdicts set θ's scale,
    so the truth the fit estimates is θ itself and a = 1.5 for the others.  Centring the others' verdict-weighted
    mean of log a_j at 0 as well forced them to ~1: θ's slope on the truth was 1.34, their a_j 0.98–1.03, and the
    likelihood 82 nats below the all-on fit's (5 seeds, docs/design-notes.md).  Now it is the all-on model in
    another gauge: the same likelihood (to the priors' pull), θ on judge-0's scale."""
    for seed in (0, 1):
        data = build_dataset(_known_a_cells(seed))
        theta, a, nll = _fit_known(data, replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED))
        _, a_all, nll_all = _fit_known(data, ONLY_DISC)
        assert a[0] == 1.0
        assert np.abs(a[1:] - 1.5).max() < 0.15, a
        assert np.polyfit(KNOWN_THETA, theta, 1)[0] == pytest.approx(1.0, abs=0.08)
        assert abs(nll - nll_all) < 0.5, (nll, nll_all)
        assert a[1:] / a[0] == pytest.approx(a_all[1:] / a_all[0], rel=0.02)  # the all-on fit's ratios


def test_a_lone_free_discrimination_beside_a_fixed_judge_is_measured_against_it():
    """Two judges, judge-0's a fixed at 1: judge-1's a (true 1.5) is identified against it.  It was fixed at 1 too,
    as if it were the board's only judge."""
    data = build_dataset(_known_a_cells(2, a=KNOWN_A[:2]))
    _, a, _ = _fit_known(data, replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED))
    assert a[0] == 1.0 and a[1] == pytest.approx(1.5, abs=0.15), a


def test_a_fixed_judge_of_self_battles_alone_leaves_the_scale_to_the_free_judges():
    """judge-0's a fixed at 1, but it judged only self-battles (θ_a − θ_b = 0: its verdicts say nothing of θ's scale)
    beside three judges of true a = 1.5.  It was taken to set the scale all the same: the free log a_j uncentred,
    θ's scale left to the priors (slope on the truth 1.35, a_j 1.10–1.18, where nothing measures either).  The
    free judges' verdict-weighted mean sets it, as without the fixed judge: the truth is θ·1.5 and a_j = 1."""
    cells = _known_a_cells(0, selves=(0,))
    config = replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED)
    data = build_dataset(cells)
    assert not bias_aware_problem(data, config).spec.scale_set_by_fixed_judge
    streamed = stream_dataset(TableBuckets(cells, 120))  # a history too big to hold: its per-judge sums on disk
    try:
        assert not bias_aware_problem(streamed, config).spec.scale_set_by_fixed_judge
        assert streamed.judge_sums("n_versus") == pytest.approx([0, 5000, 5000, 5000])
    finally:
        streamed.stream.close()
    theta, a, _ = _fit_known(data, config)
    assert a[0] == 1.0 and np.abs(a[1:] - 1.0).max() < 0.1, a
    assert np.polyfit(KNOWN_THETA, theta, 1)[0] == pytest.approx(1.5, abs=0.1)
    judges = {f"judge-{j}": {"a": float(v)} for j, v in enumerate(KNOWN_A)}
    assert true_scale(cells, judges, config) == pytest.approx(1.5)  # the free judges' mean, as the fit's


def test_the_fit_names_the_judge_whose_fixed_discrimination_sets_the_scale():
    """The report and the warnings read a discrimination of 1 as the judges' average unless told otherwise; with
    judge-0's a fixed at 1 it is judge-0's.  The fit names it (``diagnostics["scale_judges"]``), and names none when
    nothing is fixed or the fixed judge judged self-battles alone (it sets no scale then)."""
    fixed = replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED)
    data = build_dataset(_known_a_cells(0))
    assert fit_bias_aware(data, config=fixed).diagnostics["scale_judges"] == ["judge-0"]
    assert "scale_judges" not in fit_bias_aware(data, config=ONLY_DISC).diagnostics
    selves = build_dataset(_known_a_cells(0, selves=(0,)))
    assert "scale_judges" not in fit_bias_aware(selves, config=fixed).diagnostics


def test_the_oracle_scale_follows_a_fixed_judge():
    """``true_scale`` with the fit's config: the fixed judge's a (1) sets the scale, not the verdicts' mean (1.36)."""
    cells = _known_a_cells(0)
    judges = {f"judge-{j}": {"a": float(v)} for j, v in enumerate(KNOWN_A)}
    assert true_scale(cells, judges) == pytest.approx(1.5**0.75)
    assert true_scale(cells, judges, FAST) == pytest.approx(1.5**0.75)  # nothing fixed
    assert true_scale(cells, judges, replace(FAST, disabled=FIXED)) == pytest.approx(1.0)
    every = replace(FAST, disabled=frozenset({("*", "discrimination")}))  # every a_j fixed: no free one to measure
    assert true_scale(cells, judges, every) == pytest.approx(1.5**0.75)


def test_the_judge_blocked_solver_leaves_the_scale_to_a_fixed_judge_as_the_dense_one_does():
    """Dense and judge-blocked fits with judge-0's a fixed agree to 1e-8 (core, θ covariance, judge variances), on
    cells with ties and lengths (every judge effect measured)."""
    data = build_dataset(_cells(np.random.default_rng(3), models=8, judges=5, cells=500))
    (pd, sd, cd), (_, sb, cb) = _both(data, profile=False, disabled=FIXED)
    assert pd.spec.scale_set_by_fixed_judge and pd.spec.disc_centring() is None
    assert len(pd.prior.gauges) == 1  # the free log a_j's common mean: a rank-one term across every judge's block
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    theta = pd.layout.theta
    assert np.max(np.abs(cd[theta, theta] - cb.block(theta))) < TOL
    _assert_judge_variances(pd, cd, cb)


def test_a_judge_of_self_battles_alone_has_no_weight_in_the_scale():
    """Every a_j free; judge-0 judged only self-battles (its a_j is the prior's: nothing measures it) beside three
    judges of true a = 1.5.  Weighted by all its verdicts it took a quarter of the scale: θ's slope on the truth 1.47,
    against the oracle's 1.36 (the same flaw's share).  Weighted by its battles of two different models it weighs 0,
    and the scale is the three measured judges' (slope 1.5, the oracle's too)."""
    cells = _known_a_cells(0, selves=(0,))
    data = build_dataset(cells)
    spec = bias_aware_problem(data, ONLY_DISC).spec
    on, weights = spec.disc_centring()
    assert weights[list(on).index(0)] == 0.0
    theta, _, _ = _fit_known(data, ONLY_DISC)
    assert np.polyfit(KNOWN_THETA, theta, 1)[0] == pytest.approx(1.5, abs=0.1)
    judges = {f"judge-{j}": {"a": float(v)} for j, v in enumerate(KNOWN_A)}
    assert true_scale(cells, judges) == pytest.approx(1.5)


def test_the_free_discriminations_beside_a_fixed_judge_shrink_toward_their_own_mean():
    """judge-0's a fixed at 1 beside three judges of true a = 1.5, 1,000 verdicts each, 40 seeds.  Each free log a_j's
    prior N(0, 0.3²) pulled it toward the fixed judge's 0: log a_j 0.058 low on average, θ stretched by 1.050, their
    95% intervals covering 0.877 and θ's 0.926 (400 seeds).  They now shrink toward their own common mean
    (``Priors.discrimination_mean_sd``, :func:`~biasboard.ranking.problem.free_discrimination_mean`): +0.007, θ's
    slope 0.999, covering 0.931 and 0.939 (docs/design-notes.md, "Scale of θ")."""
    config = replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED)
    errors, slopes = [], []
    for seed in range(40):
        theta, a, _ = _fit_known(build_dataset(_known_a_cells(seed, verdicts=1000)), config)
        errors.append(np.log(a[1:] / 1.5))
        slopes.append(np.polyfit(KNOWN_THETA, theta, 1)[0])
    assert abs(float(np.mean(errors))) < 0.02, np.mean(errors)
    assert float(np.mean(slopes)) == pytest.approx(1.0, abs=0.015)


def test_only_a_board_with_a_fixed_judge_has_the_free_discriminations_common_mean():
    """The common mean's term is one gauge of negative κ over the free judges' ρ_j where a fixed judge sets θ's
    scale; a board without one keeps the prior it had (no gauge), so its fit is unchanged."""
    data = build_dataset(_known_a_cells(0, verdicts=1000))
    assert bias_aware_problem(data, ONLY_DISC).prior.gauges == ()
    problem = bias_aware_problem(data, replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED))
    ((at, kappa),) = problem.prior.gauges
    assert list(at - problem.layout.block(DISC).start) == [1, 2, 3]
    sd2, sd_mu2 = 0.3**2, 2.0**2
    assert kappa == pytest.approx(-1.0 / (sd2 * (3 + sd2 / sd_mu2)))
    # a likelihood profile frees θ and the profiled deviations, not the free a_j's common mean (it was replaced)
    assert problem.profile_prior(POS).gauges[0] is problem.prior.gauges[0]


def test_the_blocked_fit_with_a_fixed_judge_publishes_the_dense_tables():
    """Ratings, bootstrap, bias table and profile ranges agree between the solvers with judge-0's a fixed: the free
    log a_j's common mean is a rank-one term of negative κ in the blocked path (Woodbury), kept under a profile's
    own gauges (:meth:`~biasboard.ranking.problem.Problem.profile_prior`)."""
    data = build_dataset(_cells(np.random.default_rng(3), models=7, judges=6, cells=400))
    _same_tables(data, lambda r: 1e-6, disabled=FIXED)


def test_the_blocked_hessian_product_keeps_the_free_discriminations_common_mean():
    """sᵀHs from the blocked Hessian's product equals −gᵀs − μ‖s‖² from its solve of (H + μI)s = −g with judge-0's
    a fixed: the product counts the common mean's negative-κ term as the factorisation does (it counted only
    positive κ, a profile's stiff gauge, and was off by κ(Σ_free s)²)."""
    data = build_dataset(_cells(np.random.default_rng(6), models=7, judges=9, cells=400))
    config = ModelConfig(judge_solver="blocked", disabled=FIXED)
    problem = bias_aware_problem(data, config)
    assert problem.prior.gauges and problem.prior.gauges[0][1] < 0
    core = solve_bias_aware(problem, config).core + np.random.default_rng(0).normal(0.0, 0.05, problem.layout.n_core)
    ev = problem.objective().evaluate(core, np.zeros(0))
    for mu in (0.0, 0.3, 30.0):
        s, _ = newton_factor(ev, np.ones(core.size, bool), mu).solve(ev.g, np.zeros(0))
        curvature = float(s @ ev.H.matvec(s))
        assert abs(curvature - (-float(ev.g @ s) - mu * float(s @ s))) < 1e-9 * abs(curvature), mu


def _discrimination_rows(data, config: ModelConfig) -> pl.DataFrame:
    """The bias table's per-judge discrimination rows, in judge order."""
    bias = fit_bias_aware(data, config=config).bias
    return bias.filter((pl.col("effect") == "discrimination") & (pl.col("judge") != "*")).sort("judge")


def test_a_lone_free_discrimination_beside_a_fixed_judge_is_identified_by_its_own_verdicts():
    """judge-0's a fixed at 1 (1,000 verdicts) beside judge-1 (true a = 1.5, 60 verdicts): judge-1's log a_j has prior
    N(0, 0.3² + 2²) — its common mean's N(0, 2²) is all its own — and its 60 verdicts set it (over 200 simulated
    boards its estimate followed its truth with slope 1.1, posterior variance 0.136).  Measured against 0.3² alone it
    was "prior-selected" on every one of them; now identified, by both solvers."""
    data = build_dataset(_known_a_cells(4, a=KNOWN_A[:2], verdicts=np.array([1000, 60])))
    for solver in ("dense", "blocked"):
        config = replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED, judge_solver=solver)
        row = _discrimination_rows(data, config).row(1, named=True)
        assert row["judge"] == "judge-1" and row["ci_low"] < 1.5 < row["ci_high"], row
        assert row["identified"] and row["note"] == "", (solver, row)


def test_a_free_judge_of_self_battles_alone_beside_a_fixed_judge_stays_prior_selected():
    """Beside a fixed judge and two measured free judges, a free judge of self-battles alone has its a_j from the
    others' common mean: its posterior variance (σ² plus that mean's) is below half its marginal prior's
    (σ² + sd_μ²), but nothing of its own moved it, so it is measured against σ² given the others and stays
    prior-selected; the measured judges are identified."""
    cells = _known_a_cells(0, verdicts=1000, selves=(3,))
    rows = _discrimination_rows(build_dataset(cells), replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED))
    assert rows["identified"].to_list() == [False, True, True, False]  # judge-0's a is fixed (not enabled)
    assert rows["note"][3] == PRIOR_SELECTED


def test_the_free_discriminations_prior_variance_is_given_the_other_free_judges():
    """Beside a fixed judge, each of n free log a_j is measured against Var(ρ_j | the other free ρ_k) =
    σ²(n + r)/(n + r − 1), r = σ²/sd_μ² (the prior precision's diagonal, its common mean's gauge included): σ² + sd_μ²
    for a lone free judge, toward σ² as n grows.  Without a fixed judge the centred formula is unchanged."""
    sd2, r = 0.3**2, 0.3**2 / 2.0**2
    fixed = replace(ONLY_DISC, disabled=ONLY_DISC.disabled | FIXED)
    for a in (KNOWN_A[:2], KNOWN_A):
        data = build_dataset(_known_a_cells(0, a=a, verdicts=100))
        n = a.size - 1
        prior_var = judge_prior_var(bias_aware_problem(data, fixed))[DISC]
        assert prior_var[0] == 0.0 and prior_var[1:] == pytest.approx(sd2 * (n + r) / (n + r - 1), rel=1e-12)
    centred = judge_prior_var(bias_aware_problem(build_dataset(_known_a_cells(0, verdicts=100)), ONLY_DISC))[DISC]
    assert centred == pytest.approx(sd2 * (1 - 2 / 4 + 4 / 16))
