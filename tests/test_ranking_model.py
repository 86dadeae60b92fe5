"""The likelihood's derivatives and the sharded solver: finite differences, shard invariance, cold-start convergence."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
from biasboard.ranking import ModelConfig, build_dataset, fit_bias_aware, fit_naive
from biasboard.ranking.data import PairArrays, ScoreArrays
from biasboard.ranking.model import AFF, DISC, LEN, POS, TIE, Layout, Shard, Spec, davidson_terms
from biasboard.ranking.problem import bias_aware_problem
from biasboard.ranking.solver import Objective, Prior, _trial
from biasboard.schemas.cells import SCORE_CELLS_SCHEMA, conform_pair_cells


def _random_problem(naive: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    m, judges, prompts, cats, n_cells, n_scores = 6, 3, 4, 4, 80, 25
    a, b, j = rng.integers(0, m, n_cells), rng.integers(0, m, n_cells), rng.integers(0, judges, n_cells)
    wa, wb, t = (rng.poisson(lam, n_cells).astype(float) for lam in (3, 3, 1))
    ones = np.ones(n_cells)
    pairs = PairArrays(
        a,
        b,
        j,
        wa,
        wb,
        t,
        0 * t,
        wa + wb + t,
        rng.normal(size=n_cells),
        rng.integers(-1, 2, n_cells).astype(float),
        ones,
        ones,
        ones,
        ones,
        (rng.random(n_cells) < 0.7).astype(float),
    )  # 30% of cells with the shown order unknown
    scores = ScoreArrays(
        rng.integers(0, judges, n_scores),
        rng.integers(0, m, n_scores),
        rng.integers(0, prompts, n_scores),
        rng.poisson(2, (n_scores, cats)).astype(float),
    )
    if naive:
        lay = Layout(m, 0, naive=True)
        spec = Spec(lay, np.zeros((6, 0)))
        prior = Prior(np.zeros(m), np.zeros(m), np.zeros(0), np.zeros(0), gauges=((np.arange(m), 1.0),))
        return Objective(spec, [Shard(pairs)], prior), rng
    lay = Layout(m, judges, cats - 1, prompts)
    masks = np.ones((6, judges))
    masks[1, 2] = 0.0  # one judge without a length effect: the map must zero it
    spec = Spec(lay, masks, x_scale=1.3, w_pair=1.2, w_ord=0.8)
    prior = Prior(rng.normal(size=lay.n_core) * 0.1, np.full(lay.n_core, 0.3), np.zeros(prompts), np.full(prompts, 0.5))
    return Objective(spec, [Shard(pairs, scores)], prior), rng


@pytest.mark.parametrize("naive", [False, True])
def test_gradient_and_hessian_match_finite_differences(naive):
    objective, rng = _random_problem(naive)
    n_core = objective.spec.layout.n_core
    n_diag = objective.spec.layout.n_prompts
    x = rng.normal(size=n_core + n_diag) * 0.5

    def f_and_g(v):
        ev = objective.evaluate(v[:n_core], v[n_core:])
        return ev.f, np.concatenate([ev.g, ev.g_diag])

    ev = objective.evaluate(x[:n_core], x[n_core:])
    hess = np.zeros((n_core + n_diag,) * 2)
    hess[:n_core, :n_core] = ev.H
    hess[:n_core, n_core:] = ev.B
    hess[n_core:, :n_core] = ev.B.T
    hess[n_core:, n_core:] = np.diag(ev.H_diag)
    _, grad = f_and_g(x)
    eps = 1e-6
    eye = np.eye(x.size)
    fd_grad = np.array([(f_and_g(x + eps * e)[0] - f_and_g(x - eps * e)[0]) / (2 * eps) for e in eye])
    fd_hess = np.array([(f_and_g(x + eps * e)[1] - f_and_g(x - eps * e)[1]) / (2 * eps) for e in eye])
    assert np.max(np.abs(fd_grad - grad)) < 1e-5 * max(1.0, np.max(np.abs(grad)))
    assert np.max(np.abs(fd_hess - hess)) < 1e-5 * max(1.0, np.max(np.abs(hess)))
    assert np.allclose(hess, hess.T)


def _cells(rng: np.random.Generator, models=8, judges=3, cells=300):
    """Random pair cells in the contract's schema (several length bins per pair, some self-battles)."""
    fams = ["openai", "anthropic", "meta"]
    a = rng.integers(0, models, cells)
    b = np.where(rng.random(cells) < 0.05, a, rng.integers(0, models, cells))
    j = rng.integers(0, judges, cells)
    theta = np.linspace(-1, 1, models)
    x = rng.normal(0, 0.5, cells)
    n = rng.integers(1, 30, cells)
    p = 1 / (1 + np.exp(-(theta[a] - theta[b] + 0.3 * x - 0.2)))
    ties = rng.binomial(n, 0.2)
    win_a = rng.binomial(n - ties, p)
    bothbad = rng.binomial(ties, 0.3)
    loglen_b = rng.normal(5, 0.3, cells)
    return conform_pair_cells(
        pa.table(
            {
                "judge": [f"judge-{k}" for k in j],
                "judge_family": [fams[k % 3] for k in j],
                "model_a": [f"m{k}" for k in a],
                "model_b": [f"m{k}" for k in b],
                "family_a": [fams[k % 3] for k in a],
                "family_b": [fams[k % 3] for k in b],
                "len_bin": np.arange(cells, dtype=np.int16) % 21,
                "order_known": np.ones(cells, dtype=bool),
                "category": [None] * cells,
                "language": [None] * cells,
                "n": n,
                "win_a": win_a,
                "win_b": n - ties - win_a,
                "tie": ties - bothbad,
                "tie_bothbad": bothbad,
                "n_len": n,
                "sum_x": x * n,
                "sum_x2": (x**2 + 0.01) * n,
                "sum_loglen_a": (loglen_b + x) * n,
                "sum_loglen_b": loglen_b * n,
            }
        )
    )  # the style columns are left to conform_pair_cells: no style counts


def _score_cells(rng: np.random.Generator, models=8, judges=3, prompts=5, rows=200):
    return pa.table(
        {
            "judge": [f"judge-{k}" for k in rng.integers(0, judges, rows)],
            "judge_family": ["openai"] * rows,
            "model": [f"m{k}" for k in rng.integers(0, models, rows)],
            "family": ["meta"] * rows,
            "prompt_id": [f"p{k}" for k in rng.integers(0, prompts, rows)],
            "score": rng.integers(1, 6, rows),
            "n": rng.integers(1, 5, rows),
        },
        schema=SCORE_CELLS_SCHEMA,
    )


def test_bias_aware_answer_does_not_depend_on_shard_count():
    rng = np.random.default_rng(3)
    cells, scores = _cells(rng), _score_cells(rng)
    config = ModelConfig(profile=False, posterior_draws=200)
    fits = [fit_bias_aware(cells, scores, config=config, shards=s) for s in (1, 4, 16)]
    for fit in fits:
        assert fit.converged and fit.rel_grad < 1e-8
    for other in fits[1:]:
        assert np.max(np.abs(other.rating - fits[0].rating)) < 1e-9
        assert np.max(np.abs(other.se - fits[0].se)) < 1e-9
        est = other.bias["estimate"].to_numpy() - fits[0].bias["estimate"].to_numpy()
        assert np.nanmax(np.abs(est)) < 1e-9


def test_naive_answer_does_not_depend_on_shard_count():
    cells = _cells(np.random.default_rng(4))
    fits = [fit_naive(cells, shards=s) for s in (1, 4, 16)]
    for other in fits[1:]:
        assert np.max(np.abs(other.rating - fits[0].rating)) < 1e-9


def test_days_merge_by_group_by_sum_gives_the_same_fit():
    """Cells split over two 'days' (same keys in both) fit exactly like the merged table."""
    cells = _cells(np.random.default_rng(5))
    day1 = cells.slice(0, 200)
    day2 = cells.slice(150)  # overlapping rows: their counts add up
    both = pa.concat_tables([cells.slice(0, 200), cells.slice(150)])
    config = ModelConfig(profile=False, posterior_draws=100)
    split = fit_bias_aware([day1, day2], config=config)
    merged = fit_bias_aware(both, config=config)
    assert np.max(np.abs(split.rating - merged.rating)) < 1e-12
    assert split.n_battles.sum() > fit_bias_aware(cells, config=config).n_battles.sum()


def test_cold_start_converges_with_every_effect_and_scores():
    rng = np.random.default_rng(6)
    fit = fit_bias_aware(_cells(rng), _score_cells(rng), config=ModelConfig(posterior_draws=100))
    assert fit.converged
    assert fit.rel_grad < 1e-8
    assert fit.iterations < 60


def _textbook_terms(eff: np.ndarray, pairs: PairArrays, spec: Spec) -> dict[str, np.ndarray | float]:
    """The Davidson cell terms written out plainly (as davidson_terms computed them before it worked in place)."""
    lay = spec.layout
    theta = eff[lay.theta]
    blk = [eff[lay.eff_block(t)] for t in range(lay.n_blocks)]
    j, wgt, n = pairs.j, spec.w_pair, pairs.n
    xs = pairs.x / spec.x_scale
    q = np.exp(blk[DISC])[j] * (theta[pairs.a] - theta[pairs.b])
    eta = q + blk[POS][j] * pairs.pos + blk[LEN][j] * xs + blk[AFF][j] * pairs.ds
    psi = blk[TIE][j]
    half = 0.5 * eta
    top = np.maximum(np.abs(half), psi)
    e_a, e_b, e_t = np.exp(half - top), np.exp(-half - top), np.exp(psi - top)
    total = e_a + e_b + e_t
    log_norm = top + np.log(total)
    p_a, p_b, p_t = e_a / total, e_b / total, e_t / total
    diff = p_a - p_b
    return {
        "q": q,
        "f": -wgt * float(np.sum(pairs.win_a * half - pairs.win_b * half + pairs.tie * psi - n * log_norm)),
        "g_eta": wgt * (-0.5 * (pairs.win_a - pairs.win_b) + 0.5 * n * diff),
        "g_psi": wgt * (n * p_t - pairs.tie),
        "h_eta": wgt * 0.25 * n * ((p_a + p_b) - diff * diff),
        "h_eta_psi": wgt * (-0.5) * n * diff * p_t,
        "h_psi": wgt * n * p_t * (1.0 - p_t),
    }


@pytest.mark.parametrize("scale", [0.5, 30.0, 600.0])
def test_davidson_terms_equal_the_textbook_formula(scale):
    """The in-place davidson_terms gives the plain formula's values (to 1e-12 relative), also where η and ψ are
    extreme (|η|/2, |ψ| up to ~1,000: no overflow, no NaN), with and without its Hessian pieces."""
    objective, rng = _random_problem(False, seed=3)
    spec, pairs = objective.spec, objective.shards[0].pairs
    assert pairs is not None
    lay = spec.layout
    eff = rng.normal(size=lay.n_eff) * scale
    eff[lay.eff_block(DISC)] = rng.normal(size=lay.n_judges) * 0.3  # a_j = e^L: keep it finite
    eff[lay.eff_block(TIE)] = rng.normal(size=lay.n_judges) * scale  # ψ as extreme as η
    want = _textbook_terms(eff, pairs, spec)
    for hessian in (False, True):
        tm = davidson_terms(eff, pairs, spec, hessian)
        if not hessian:
            tm.add_hessian(pairs.n, spec.w_pair)
        got = {"q": tm.q, "f": tm.f, "g_eta": tm.g_eta, "g_psi": tm.g_psi}
        got |= {"h_eta": tm.h_eta, "h_eta_psi": tm.h_eta_psi, "h_psi": tm.h_psi}
        for name, value in want.items():
            assert np.all(np.isfinite(got[name])), name
            np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=0, err_msg=name)
        assert tm.acts == tuple(t == DISC or bool(np.any(row)) for t, row in zip(lay.eta_effects, tm.z, strict=True))
    # Kept for the Hessian (for_hessian: no g_psi, the probabilities' difference made again): the same bits.
    kept = davidson_terms(eff, pairs, spec, False).for_hessian()
    assert kept.g_psi.size == 0 and kept.probs is not None and kept.probs[3] is None
    kept.add_hessian(pairs.n, spec.w_pair)
    for name in ("h_eta", "h_eta_psi", "h_psi"):
        assert np.array_equal(getattr(kept, name), getattr(tm, name)), name


def test_a_trial_step_that_overflows_is_rejected_without_numpy_warnings():
    """A Newton step that overshoots (a judge's discrimination exp(800)) makes the objective non-finite and the solver
    rejects it by ``np.isfinite(f)``.  Evaluated bare, numpy also warned 'overflow encountered in exp', and the
    refresh printed those lines for slices that converged (Position-Bias-Analyzer MT-Bench, --slices category:
    the reasoning slice's profile likelihood); the solver's trial evaluations now keep quiet about it."""
    cells = _cells(np.random.default_rng(4), models=5, judges=3, cells=200)
    problem = bias_aware_problem(build_dataset(cells), ModelConfig(profile=False))
    core, diag = problem.zeros()
    core[problem.layout.block(DISC)] = [800.0, -800.0, 0.0]  # (the mean is the gauge: centred away)
    with pytest.warns(RuntimeWarning, match="overflow"), np.errstate(invalid="ignore"):  # (and NaN after it)
        problem.objective().evaluate(core, diag, hessian=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not np.isfinite(_trial(problem.objective(), core, diag, hessian=False).f)
