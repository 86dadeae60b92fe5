"""Top-k-aware acquisition (plan/acquisition.py) and ``biasboard plan`` on a published snapshot."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import itertools
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.pipelines import cli
from biasboard.plan.acquisition import (
    PLAN_COLUMNS,
    POPULATION_JUDGE,
    STRATEGIES,
    JudgedPairs,
    Posterior,
    _believer_update,
    circle_schedule,
    davidson_information,
    judged_names,
    planned_effects,
    posterior_from_fit,
    select_comparisons,
)
from biasboard.ranking import ModelConfig, fit_bias_aware
from biasboard.ranking.reference import ANCHOR_JUDGE, EXCESS_ROW_NOTE, TIED_ROW_NOTE, Reference, fit_with_reference
from biasboard.schemas import summary as S
from biasboard.schemas.battle import BATTLE_SCHEMA, STYLE_COUNT_COLUMNS
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, draw_parameters, simulate_days, write_simulation
from biasboard.transforms import plan as plan_module
from biasboard.transforms import publish
from biasboard.transforms.anchors import as_anchor_rows
from biasboard.transforms.cells import partial_cells
from biasboard.transforms.plan import (
    PLAN_BYTES_PER_JUDGE_PAIR,
    POSTERIOR_FILE,
    PlanTooLarge,
    _shortfall_notes,
    check_plan_size,
    make_plan,
    plan_inputs,
)
from biasboard.transforms.snapshot import CellTotals, judge_pair_counts, planned_judge_pairs
from conftest import PROJECT_ROOT

M, K = 20, 5
#: Clear gaps of 0.8 logits, except the models at ranks 5 and 6 (indices 4, 5), 0.05 apart: they
#: straddle the k-th place and nobody else is in doubt.
THETA = np.concatenate([np.arange(4)[::-1] * 0.8 + 4.0, [0.825, 0.775], -np.arange(14) * 0.8 - 0.8])
BOUNDARY = {4, 5}


def _constructed_posterior() -> Posterior:
    """Known means; the boundary pair is uncertain, and so are the bottom models (a trap for D-optimal)."""
    sd = np.full(M, 0.1)
    sd[[4, 5]] = 0.35
    sd[-4:] = 0.9  # very uncertain, but nowhere near the top 5
    proj = np.eye(M) - 1.0 / M
    cov = proj @ np.diag(sd**2) @ proj
    return Posterior(models=tuple(f"m{i:02d}" for i in range(M)), mean=THETA - THETA.mean(), cov=cov, k=K)


def _units(sel) -> list[frozenset]:
    return [frozenset((int(a), int(b))) for a, b in zip(sel.first, sel.second, strict=True)]


def _boundary_share(sel) -> float:
    return float(np.mean([bool(u & BOUNDARY) for u in _units(sel)]))


def test_topk_concentrates_on_the_boundary_where_dopt_and_roundrobin_do_not():
    post = _constructed_posterior()
    picks = {s: select_comparisons(post, 20, s, seed=3, repeat=False) for s in STRATEGIES}
    topk = picks["topk"]
    assert _units(topk)[0] == frozenset(BOUNDARY)  # the straddling pair comes first
    assert _boundary_share(topk) >= 0.8
    # D-optimal chases the uncertain bottom models; round-robin and random spread evenly.
    bottom = set(range(M - 4, M))
    assert np.mean([bool(u & bottom) for u in _units(picks["dopt"])]) >= 0.5
    assert not any(u & bottom for u in _units(topk))
    for other in ("dopt", "roundrobin", "random"):
        assert _boundary_share(topk) > _boundary_share(picks[other]) + 0.3, other


def test_every_unit_runs_in_both_orders_and_the_budget_holds():
    post = _constructed_posterior()
    for strategy in STRATEGIES:
        for budget in (2, 7, 30):
            frame = select_comparisons(post, budget, strategy, seed=1).to_frame(post)
            assert frame.height == budget - budget % 2
            assert dict(frame.schema) == PLAN_COLUMNS
            first, second = frame[0::2], frame[1::2]
            assert first["model_a"].to_list() == second["model_b"].to_list()
            assert first["model_b"].to_list() == second["model_a"].to_list()
            assert (first["unit"] == second["unit"]).all()
            assert (frame["model_a"] != frame["model_b"]).all()


def test_without_repeats_a_small_pool_runs_out_of_pairs_not_over_budget():
    post = Posterior(models=("a", "b", "c", "d"), mean=np.array([1.0, 0.5, 0.0, -1.5]), cov=np.eye(4) * 0.2, k=2)
    for strategy in STRATEGIES:
        sel = select_comparisons(post, 100, strategy, repeat=False)
        assert sel.n_units == 6  # all C(4, 2) pairs, once each
        assert len(set(_units(sel))) == 6
    counts = np.zeros((4, 4))
    counts[0, 1] = 1  # a vs b was already run once: with repeat=False it is not planned again
    sel = select_comparisons(post, 100, "topk", counts=counts, repeat=False)
    assert frozenset((0, 1)) not in _units(sel) and sel.n_units == 5


def test_topk_on_a_settled_board_plans_across_the_boundary_not_the_first_pair():
    """Every P(top k) 0 or 1 in the draws makes every top-k score 0: the argmax took the first pair, the two models
    at the bottom of the board, reasoned "top-k boundary".  Now the closest pair across the top k by rating."""
    mean = np.array([3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    post = Posterior(models=tuple("abcdef"), mean=mean, cov=np.eye(6) * 1e-6, k=3)
    frame = select_comparisons(post, 2, "topk").to_frame(post)
    assert sorted(frame["model_a"].to_list()) == ["c", "d"] and sorted(frame["model_b"].to_list()) == ["c", "d"]
    assert frame["reason"][0].startswith("top-3 settled in every draw: the closest pair across it")


def test_plans_are_deterministic_by_seed():
    post = _constructed_posterior()
    for strategy in STRATEGIES:
        one = select_comparisons(post, 40, strategy, seed=7).to_frame(post)
        two = select_comparisons(post, 40, strategy, seed=7).to_frame(post)
        assert one.equals(two), strategy
    a = select_comparisons(post, 40, "random", seed=1).to_frame(post)
    b = select_comparisons(post, 40, "random", seed=2).to_frame(post)
    assert not a.equals(b)


def test_roundrobin_serves_the_least_compared_pairs_and_every_model_once_per_round():
    order = circle_schedule(6)
    first_round = [frozenset(np.argwhere(order == p)[0]) for p in range(3)]
    assert set().union(*first_round) == set(range(6))  # each model plays once in the first round
    post = Posterior(models=tuple("abcdef"), mean=np.zeros(6), cov=np.eye(6), k=2)
    counts = np.ones((6, 6)) - np.eye(6)
    counts[2, 4] = 0
    counts[4, 2] = 0
    sel = select_comparisons(post, 2, "roundrobin", counts=counts)
    assert _units(sel) == [frozenset((2, 4))]


def test_believer_update_moves_draws_to_the_conditioned_posterior():
    rng = np.random.default_rng(0)
    m = 5
    root = rng.standard_normal((m, m))
    cov = root @ root.T / m + 0.1 * np.eye(m)
    mean = rng.standard_normal(m)
    draws = mean + rng.standard_normal((200_000, m)) @ np.linalg.cholesky(cov).T
    new_cov, new_draws = _believer_update(cov, draws, mean, 1, 3, w=2.0, rng=rng)
    x = np.zeros(m)
    x[1], x[3] = 1.0, -1.0
    precision = np.linalg.inv(cov) + 2.0 * np.outer(x, x)
    np.testing.assert_allclose(new_cov, np.linalg.inv(precision), atol=1e-10)
    np.testing.assert_allclose(np.cov(new_draws.T), new_cov, atol=0.02)
    np.testing.assert_allclose(new_draws.mean(axis=0), mean, atol=0.02)


def test_davidson_information_is_the_logistic_one_without_ties():
    eta = np.linspace(-3, 3, 13)
    p = 1.0 / (1.0 + np.exp(-eta))
    np.testing.assert_allclose(davidson_information(eta, 0.0), p * (1 - p), atol=1e-12)
    # Between equals with ν = 1: P(a) = P(b) = P(tie) = 1/3, information ¼ · 2/3 (a tie says less than a win).
    assert davidson_information(np.array([0.0]), 1.0)[0] == pytest.approx(1 / 6)


def test_a_judges_position_effect_lowers_the_information_of_a_unit():
    base = dict(
        models=("a", "b", "c"),
        mean=np.array([0.3, 0.0, -0.3]),
        cov=np.eye(3) * 0.5,
        k=1,
        judges=("fair", "biased"),
        discrimination=np.ones(2),
        tie=np.zeros(2),
    )
    post = Posterior(position=np.array([0.0, 2.5]), **base)
    sel = select_comparisons(post, 2, "dopt")
    assert sel.judges[sel.judge[0]] == "fair"  # the unit goes to the judge whose verdicts say more
    only = select_comparisons(post, 2, "dopt", judges=["biased"])
    assert only.judges == ("biased",) and only.info[0] < sel.info[0]
    with pytest.raises(KeyError, match="nobody"):
        select_comparisons(post, 2, "dopt", judges=["nobody"])


def test_posterior_bytes_round_trip():
    post = _constructed_posterior()
    back = Posterior.from_bytes(post.to_bytes())
    assert back.models == post.models and back.k == post.k
    np.testing.assert_array_equal(back.cov, post.cov)
    with pytest.raises(ValueError, match=r"posterior\.npz"):
        Posterior.from_bytes(b"not a zip")


# ------------------------------------------------------------------ a real fit, a real snapshot, the CLI


def _battles(reps: int = 3, seed: int = 0, judge: str = "judge-x") -> pa.Table:
    """Every ordered pair ``reps`` times, verdicts from THETA with a position effect, one judge."""
    rng = np.random.default_rng(seed)
    names = np.array([f"gpt-sim-{i:02d}" for i in range(M)])
    a, b = np.nonzero(~np.eye(M, dtype=bool))
    a, b = np.repeat(a, reps), np.repeat(b, reps)
    n = a.size
    p_a = 1.0 / (1.0 + np.exp(-(THETA[a] - THETA[b] + 0.3)))
    winner = np.where(rng.random(n) < p_a, "model_a", "model_b")
    lengths = rng.integers(200, 400, (2, n))
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
            "judge": [judge] * n,
            "model_a": names[a].tolist(),
            "model_b": names[b].tolist(),
            "winner": winner.tolist(),
            "prompt_id": [f"p{i % 50}" for i in range(n)],
            "len_a": lengths[0],
            "len_b": lengths[1],
            "family_a": ["openai"] * n,
            "family_b": ["openai"] * n,
            "judge_family": ["meta"] * n,
            "order_known": [None] * n,
            "strength": [None] * n,
            "category": [None] * n,
            "language": [None] * n,
            **{c: [None] * n for c in STYLE_COUNT_COLUMNS},  # no style counts
        },
        schema=BATTLE_SCHEMA,
    )


@pytest.fixture(scope="module")
def fitted():
    cells = partial_cells(_battles(), FamilyMap.with_user_rules()).cells
    return fit_bias_aware(cells, config=ModelConfig(k=K, profile=False, posterior_draws=2000))


def _snapshot(out: str, fit, with_posterior: bool = True) -> publish.Published:
    leaderboard = pl.DataFrame({"model": list(fit.models), "rating_corrected": fit.rating, "p_top_k": fit.p_top_k})
    files = publish.snapshot_files(leaderboard, fit.bias, {"k": fit.k}, "<html></html>")
    if with_posterior:
        files.update(plan_inputs(fit))
    return publish.publish_snapshot(out, files, {"inputs": []})


def test_posterior_from_a_real_fit_carries_the_judge_effects(fitted):
    post = posterior_from_fit(fitted)
    assert post.judges == ("judge-x",) and post.k == K
    row = fitted.bias.filter((pl.col("judge") == "judge-x") & (pl.col("effect") == "position"))
    assert post.position[0] == pytest.approx(row["estimate"][0])
    assert 0.0 < post.position[0] < 0.8  # the simulated +0.3 is recovered roughly


def test_plan_on_a_real_fit_targets_the_models_the_fit_is_unsure_about(fitted):
    post = posterior_from_fit(fitted)
    u = fitted.p_top_k * (1 - fitted.p_top_k)
    picks = {s: select_comparisons(post, 20, s, seed=0, repeat=False) for s in ("topk", "roundrobin", "random")}
    touched = {s: np.mean([u[list(unit)].max() for unit in _units(sel)]) for s, sel in picks.items()}
    assert touched["topk"] > 2 * touched["roundrobin"]
    assert touched["topk"] > 2 * touched["random"]
    true_boundary = {fitted.models.index(f"gpt-sim-{i:02d}") for i in BOUNDARY}
    assert frozenset(true_boundary) == _units(picks["topk"])[0]


def test_cli_plans_from_the_latest_snapshot(tmp_path, fitted, capsys):
    out = str(tmp_path / "out")
    published = _snapshot(out, fitted)
    code = cli.main(["plan", "--out", out, "--budget", "24", "--strategy", "topk", "--seed", "2"])
    assert code == 0
    dest = tmp_path / "out" / "plans" / published.snapshot_id
    frame = pl.read_parquet(dest / "plan.parquet")
    assert frame.height == 24 and dict(frame.schema) == PLAN_COLUMNS
    assert pl.read_csv(dest / "plan.csv").select("model_a", "model_b").equals(frame.select("model_a", "model_b"))
    meta = json.loads((dest / "plan.json").read_text())
    assert meta["snapshot_id"] == published.snapshot_id and meta["planned"] == 24 and meta["k"] == K
    assert set(frame["judge"].unique()) == {"judge-x"}
    pairs = set(zip(frame["model_a"], frame["model_b"], strict=True))
    assert all((b, a) in pairs for a, b in pairs)  # both orders of every planned pair
    again = make_plan(out, 24, strategy="topk", seed=2, to=str(tmp_path / "again"))
    assert again.frame.equals(frame)  # same snapshot, same seed: the same plan
    assert "planned 24 comparisons" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path, fitted, capsys):
    out = str(tmp_path / "out")
    assert cli.main(["plan", "--out", out, "--budget", "10"]) == 2
    assert "no snapshot published" in capsys.readouterr().err
    _snapshot(out, fitted, with_posterior=False)
    assert cli.main(["plan", "--out", out, "--budget", "10"]) == 2
    assert POSTERIOR_FILE in capsys.readouterr().err
    _snapshot(str(tmp_path / "good"), fitted)
    assert cli.main(["plan", "--out", str(tmp_path / "good"), "--budget", "10", "--judge", "nobody"]) == 2
    assert "nobody" in capsys.readouterr().err
    with pytest.raises(InputError, match="budget"):
        make_plan(str(tmp_path / "good"), 1)
    meta = io.StringIO()  # the odd budget note is printed, the plan holds budget - 1 rows
    code = cli.main(["plan", "--out", str(tmp_path / "good"), "--budget", "9", "--to", str(tmp_path / "odd")])
    meta.write(capsys.readouterr().out)
    assert code == 0 and "odd" in meta.getvalue()
    assert pl.read_parquet(tmp_path / "odd" / "plan.parquet").height == 8


@pytest.mark.parametrize("name", ["manifest.json", "summary.json"])
def test_a_snapshot_file_cut_short_is_a_one_line_refusal(tmp_path, fitted, capsys, name):
    """plan reads the snapshot's manifest.json and summary.json: either emptied raised json's traceback."""
    out = str(tmp_path / "out")
    (Path(_snapshot(out, fitted).path) / name).write_text("")
    assert cli.main(["plan", "--out", out, "--budget", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biasboard plan: error: ") and name in err and "not JSON" in err and "\n" not in err


def _three_judge_posterior() -> Posterior:
    """Six models, the 3rd and 4th straddling k = 3; judge j1 discriminates best, so greedy loves it."""
    mean = np.array([2.0, 1.2, 0.42, 0.38, -0.6, -1.4])
    sd = np.array([0.1, 0.1, 0.3, 0.3, 0.1, 0.1])
    proj = np.eye(6) - 1.0 / 6
    return Posterior(
        models=tuple(f"m{i}" for i in range(6)),
        mean=mean - mean.mean(),
        cov=proj @ np.diag(sd**2) @ proj,
        k=3,
        judges=("j1", "j2", "j3"),
        position=np.array([0.0, 0.2, -0.2]),
        discrimination=np.array([1.4, 0.9, 0.8]),
        tie=np.array([0.2, 0.3, 0.3]),
    )


def _spread(sel) -> tuple[int, dict[int, int], frozenset]:
    units = _units(sel)
    counts = {u: units.count(u) for u in set(units)}
    judges = {j: int(np.sum(sel.judge == j)) for j in range(len(sel.judges))}
    return max(counts.values()), judges, max(counts, key=counts.get)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_batch_is_spread_over_pairs_and_judges_unless_asked(strategy):
    post = _three_judge_posterior()
    units = 60  # over 15 pairs and 3 judges: at most 4 units per pair, 20 per judge
    most, judges, _ = _spread(select_comparisons(post, 2 * units, strategy, seed=1))
    assert most <= 4
    assert sorted(judges.values()) == [20, 20, 20]
    if strategy in ("topk", "thompson"):  # left alone, the greedy rules pile onto the boundary pair and j1
        most, judges, top = _spread(
            select_comparisons(post, 2 * units, strategy, seed=1, max_pair_share=1.0, max_judge_share=1.0)
        )
        assert most > 4 and top == frozenset({2, 3}) and judges[0] > 20
        most, _, _ = _spread(select_comparisons(post, 2 * units, strategy, seed=1, max_pair_share=0.1))
        assert most <= 6  # 0.1 × 60


def test_a_share_is_never_exceeded_by_rounding():
    """--max-judge-share 0.5 on 15 units let a judge take 8 (53%), --max-pair-share 0.1 a pair 2 (13%): rounded up."""
    post = _three_judge_posterior()
    sel = select_comparisons(post, 30, "topk", seed=1, max_pair_share=0.1, max_judge_share=0.5)
    most, judges, _ = _spread(sel)
    assert most <= 0.1 * 15 and max(judges.values()) <= 0.5 * 15
    one = select_comparisons(post, 30, "topk", seed=1, max_pair_share=0.01)  # below one unit: still one a pair
    assert one.n_units == 15 and _spread(one)[0] == 1


def test_spread_keeps_the_top_k_focus():
    """Capped, topk still spends its units where membership is in doubt: the boundary pair is capped, not lost."""
    sel = select_comparisons(_three_judge_posterior(), 120, "topk", seed=1)
    assert _units(sel).count(frozenset({2, 3})) == 4 == _spread(sel)[0]  # the boundary pair fills its share
    touching = np.mean([bool(u & {2, 3}) for u in _units(sel)])
    assert touching > 0.5
    with pytest.raises(ValueError, match="max_pair_share"):
        select_comparisons(_three_judge_posterior(), 10, "topk", max_pair_share=0.0)


def test_cli_share_flags(tmp_path, fitted, capsys):
    out = str(tmp_path / "out")
    _snapshot(out, fitted)
    assert cli.main(["plan", "--out", out, "--budget", "40", "--max-pair-share", "1.5"]) == 2
    assert "--max-pair-share 1.5" in capsys.readouterr().err
    assert cli.main(["plan", "--out", out, "--budget", "40", "--max-pair-share", "1", "--to", str(tmp_path / "p")]) == 0
    frame = pl.read_parquet(tmp_path / "p" / "plan.parquet")
    assert frame.height == 40


def test_a_snapshot_whose_k_covers_every_model_is_planned_for_the_whole_board(tmp_path, capsys):
    """refresh's default k (10) on a smaller board: with no top-k boundary every topk score was 0 and the plan's
    order arbitrary, while the same k given as --k was refused.  Now dopt plans it, and says why."""
    cells = partial_cells(_battles(), FamilyMap.with_user_rules()).cells
    whole = fit_bias_aware(cells, config=ModelConfig(k=M, profile=False, posterior_draws=500))
    out = str(tmp_path / "out")
    _snapshot(out, whole)
    plan = make_plan(out, 12, strategy="topk", to=str(tmp_path / "p"))
    assert plan.strategy == "dopt" and set(plan.frame["strategy"].unique()) == {"dopt"}
    assert any("no top-k boundary" in note for note in plan.notes)
    assert plan.frame["score"].max() > 0
    assert json.loads((tmp_path / "p" / "plan.json").read_text())["strategy"] == "dopt"
    aimed = make_plan(out, 12, strategy="topk", k=2, to=str(tmp_path / "k2"))  # a boundary given: topk as asked
    assert aimed.strategy == "topk" and not any("no top-k boundary" in note for note in aimed.notes)
    assert cli.main(["plan", "--out", out, "--budget", "12", "--to", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    assert "by dopt from snapshot" in printed and "no top-k boundary" in printed


def test_a_plan_from_a_bootstrap_snapshot_says_its_top_k_probabilities_are_not_the_leaderboards(tmp_path):
    """With --bootstrap the leaderboard's P(top k) are the replicates', the plan's the Laplace posterior's it updates:
    0.51 in the plan against 0.60 on the leaderboard for the same model of the same snapshot, with no word."""
    from biasboard.pipelines.refresh import RefreshOptions, refresh

    logs = write_simulation(SimulationConfig(battles=3000, models=6, judges=2, days=1, seed=5), tmp_path / "logs")
    out = str(tmp_path / "out")
    options = RefreshOptions(k=2, audit=False, diagnostics="off", bootstrap=20)
    assert refresh(str(logs / "battles"), str(tmp_path / "state"), out, [], options).published is not None
    plan = make_plan(out, 8, to=str(tmp_path / "p"))
    assert plan_module.BOOTSTRAP_NOTE in plan.notes
    assert plan_module.BOOTSTRAP_NOTE in json.loads((tmp_path / "p" / "plan.json").read_text())["notes"]
    laplace = str(tmp_path / "laplace")
    fit = fit_bias_aware(partial_cells(_battles(), FamilyMap.with_user_rules()).cells, config=ModelConfig(k=K))
    _snapshot(laplace, fit)
    assert plan_module.BOOTSTRAP_NOTE not in make_plan(laplace, 8, to=str(tmp_path / "q")).notes


def test_the_judge_share_is_a_limit_even_when_every_judge_has_spent_it(tmp_path, fitted):
    """Once every judge held its share, the rest of the batch went to the first judge: with one judge and
    --max-judge-share 0.25 a 40-comparison plan gave it all 40.  Now the plan stops there and says why."""
    _snapshot(str(tmp_path / "out"), fitted)
    plan = make_plan(str(tmp_path / "out"), 40, max_judge_share=0.25, to=str(tmp_path / "p"))
    assert plan.frame.height == 10  # ceil(0.25 × 20 units) = 5 units
    assert any("every judge holds its share" in n and "--max-judge-share" in n for n in plan.notes)
    sel = select_comparisons(_three_judge_posterior(), 120, "topk", seed=1, max_judge_share=0.1)
    assert sel.stopped == "judge_cap" and sorted(np.bincount(sel.judge, minlength=3)) == [6, 6, 6]


def test_a_plan_held_by_the_pair_share_says_so_not_that_repeats_are_off(tmp_path, fitted):
    _snapshot(str(tmp_path / "out"), fitted)
    plan = make_plan(str(tmp_path / "out"), 400, max_pair_share=0.001, to=str(tmp_path / "p"))
    assert plan.frame.height == 2 * M * (M - 1) // 2  # one unit per pair
    assert [n for n in plan.notes if "--max-pair-share" in n] and not [n for n in plan.notes if "repeats" in n]


def test_a_negative_seed_is_a_one_line_error(tmp_path, fitted, capsys):
    _snapshot(str(tmp_path / "out"), fitted)
    assert cli.main(["plan", "--out", str(tmp_path / "out"), "--budget", "10", "--seed", "-1"]) == 2
    assert "--seed must be at least 0, got -1" in capsys.readouterr().err  # the rule refresh and demo use


def test_roundrobin_says_when_it_does_not_know_the_past_counts():
    sel = select_comparisons(_three_judge_posterior(), 4, "roundrobin")
    assert "past comparisons not known" in sel.reasons[0]
    known = select_comparisons(_three_judge_posterior(), 4, "roundrobin", counts=np.ones((6, 6)))
    assert known.reasons[0] == "least compared pair (1 before)"


def test_a_board_of_two_components_is_planned_to_link_them(tmp_path):
    """Each component is centred on its own, so the posterior made a pair across two of them look as well
    measured as one within (0.005 logits²): the plan never aimed at linking them, and its P(top k) mixed the
    components' arbitrary levels.  With the prior's uncertainty on each level, linking pairs come first, and each
    such row's reason says it links them (it said "top-k boundary" alone)."""
    table = _battles()
    group = lambda c: pl.col(c).str.slice(-2).cast(pl.Int64) < M // 2  # noqa: E731
    split = pl.from_arrow(table).filter(group("model_a") == group("model_b")).to_arrow().cast(table.schema)
    cells = partial_cells(split, FamilyMap.with_user_rules()).cells
    fit = fit_bias_aware(cells, config=ModelConfig(k=K, profile=False, posterior_draws=500))
    post = Posterior.from_bytes(posterior_from_fit(fit).to_bytes())
    assert post.n_components == 2
    side = np.asarray(post.component)
    for strategy in ("topk", "dopt"):
        sel = select_comparisons(post, 8, strategy, seed=0)
        assert all(side[a] != side[b] for a, b in zip(sel.first, sel.second, strict=True)), strategy
        assert all(r.startswith("links comparison components") for r in sel.reasons), sel.reasons
    out = str(tmp_path / "out")
    _snapshot(out, fit)
    assert any("2 comparison components" in n for n in make_plan(out, 8, to=str(tmp_path / "p")).notes)


def test_a_refresh_of_a_one_model_board_publishes_and_plans_nothing(tmp_path, capsys):
    """A board of one model (self-battles only) has no comparison to plan: building its posterior raised inside
    the fit and the refresh died with a traceback, even without --plan-budget."""
    n = 6
    rows = pl.DataFrame(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": ["2024-01-01T12:00:00Z"] * n,
            "judge": ["j"] * n,
            "model_a": ["solo"] * n,
            "model_b": ["solo"] * n,
            "winner": ["model_a", "tie"] * (n // 2),
        }
    )
    (tmp_path / "in" / "day=2024-01-01").mkdir(parents=True)
    rows.write_parquet(tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    out = str(tmp_path / "site")
    args = ["refresh", "--input", str(tmp_path / "in"), "--state", str(tmp_path / "state"), "--out", out]
    assert cli.main([*args, "--plan-budget", "4"]) == 0
    latest = (Path(out) / "LATEST").read_text().strip()
    summary = json.loads((Path(out) / "snapshots" / latest / "summary.json").read_text())
    assert any("no battle compares two different models" in w for w in summary["warnings"]), summary["warnings"]
    assert cli.main(["plan", "--out", out, "--budget", "4"]) == 2
    assert "fewer than two models" in capsys.readouterr().err


def test_the_reason_gives_the_two_models_in_the_rows_order():
    """The first pick's P(top k) in its reason are the row's p_top_k_a / p_top_k_b, in that order (they were swapped
    whenever the weaker model came out of the argmax first)."""
    base = _three_judge_posterior()
    flip = np.arange(base.n_models)[::-1]  # the weaker model of the boundary pair first in the argmax's order
    post = Posterior(
        models=base.models, mean=base.mean[flip], cov=base.cov[np.ix_(flip, flip)], k=base.k, judges=base.judges,
        position=base.position, discrimination=base.discrimination, tie=base.tie,
    )  # fmt: skip
    for seed in range(4):
        frame = select_comparisons(post, 2, "topk", seed=seed).to_frame(post)
        row = frame.row(0, named=True)
        assert row["rating_a"] >= row["rating_b"]
        assert f"P(top 3) {row['p_top_k_a']:.2f} / {row['p_top_k_b']:.2f}" in row["reason"]


# ------------------------------------------------------------------ --no-repeat across the history


def _judged(frame: pl.DataFrame) -> set[tuple[str, frozenset]]:
    """(judge, unordered pair) of every battle or planned comparison in ``frame`` (self-battles left out)."""
    rows = frame.filter(pl.col("model_a") != pl.col("model_b")).select("judge", "model_a", "model_b").rows()
    return {(judge, frozenset((a, b))) for judge, a, b in rows}


def test_no_repeat_plans_nothing_the_refreshed_data_already_holds(tmp_path, capsys):
    """A refresh records each judge's judged pairs in posterior.npz, and ``plan --no-repeat`` gives no judge a pair
    it has judged: before, the snapshot held no counts and the plan re-proposed judged (judge, pair)s, whose frozen
    verdicts would come back unchanged.  Measured here: 40 battles of 8 models by 2 judges judge 27 of the 56
    (judge, pair)s; the plan proposes exactly the other 29, once each."""
    sim = write_simulation(SimulationConfig(battles=40, models=8, judges=2, days=1, seed=3), tmp_path / "sim")
    out = str(tmp_path / "out")
    refresh = ["refresh", "--no-audit", "--input", str(sim / "battles"), "--state", str(tmp_path / "state")]
    assert cli.main([*refresh, "--out", out, "--k", "3"]) == 0
    data = _judged(pl.read_parquet(sim / "battles" / "**" / "*.parquet"))
    post = Posterior.from_bytes((Path(publish.resolve_snapshot(out, None)) / POSTERIOR_FILE).read_bytes())
    assert post.judged is not None and int(post.judged.n.sum()) == 40  # the simulation makes no self-battles
    everything = {(j, frozenset(p)) for j in post.judges for p in zip(*np.triu_indices(8, 1), strict=True)}
    assert len(data) < len(everything)

    capsys.readouterr()
    assert cli.main(["plan", "--out", out, "--budget", "1000", "--no-repeat", "--to", str(tmp_path / "p")]) == 0
    assert "note: only" in capsys.readouterr().out
    plan = pl.read_parquet(tmp_path / "p" / "plan.parquet")
    planned = _judged(plan)
    names = {(j, frozenset(post.models[i] for i in pair)) for j, pair in everything}
    assert planned == names - data and plan.height == 2 * len(planned)  # all the rest, each once in both orders
    assert json.loads((tmp_path / "p" / "plan.json").read_text())["past_counts"] is True

    roundrobin = ["--strategy", "roundrobin", "--to", str(tmp_path / "r")]
    assert cli.main(["plan", "--out", out, "--budget", "20", *roundrobin]) == 0
    rr = pl.read_parquet(tmp_path / "r" / "plan.parquet")
    assert rr["reason"][0] == "least compared pair (0 before by these judges)"  # 56 > 40: some pair was never run

    # The plan's ratings are the leaderboard's corrected ratings, on its Elo-like scale: they were θ in logits
    # (0.78 beside the leaderboard's 1135.1 for one AlpacaEval 2 model), one column name, two units.
    board = pl.read_parquet(Path(publish.resolve_snapshot(out, None)) / "leaderboard.parquet")
    corrected = dict(zip(board["model"], board["rating_corrected"], strict=True))
    for model, rating in (
        *zip(rr["model_a"], rr["rating_a"], strict=True),
        *zip(rr["model_b"], rr["rating_b"], strict=True),
    ):
        assert rating == pytest.approx(corrected[model], abs=1e-6)


def test_no_repeat_is_per_judge_and_round_robin_sums_the_judges():
    """A pair judged by j1 is not given to j1 again, but j2's verdict on it is new; round-robin counts both judges'."""
    post = _three_judge_posterior()
    judged = JudgedPairs(judge=np.array([0, 1]), first=np.array([2, 2]), second=np.array([3, 3]), n=np.array([4, 1]))
    post = dataclasses.replace(post, judged=judged)
    counts = post.past_counts(None)
    assert counts.shape == (3, 6, 6) and counts[0, 3, 2] == 4 and counts[1, 2, 3] == 1 and counts[2].sum() == 0
    sel = select_comparisons(post, 200, "topk", counts=counts, repeat=False, max_judge_share=1.0, max_pair_share=1.0)
    given = [(sel.judges[j], frozenset(u)) for j, u in zip(sel.judge, _units(sel), strict=True)]
    assert len(given) == len(set(given)) == 3 * 15 - 2  # every (judge, pair) but the two judged, once
    assert ("j3", frozenset((2, 3))) in given and ("j1", frozenset((2, 3))) not in given
    rr = select_comparisons(post, 2 * 15, "roundrobin", counts=counts)
    assert _units(rr)[-1] == frozenset((2, 3))  # compared 5 times: last
    back = Posterior.from_bytes(post.to_bytes())
    np.testing.assert_array_equal(back.past_counts(["j2"]), post.past_counts(["j2"]))


def test_a_judge_named_twice_is_one_judge_for_no_repeat():
    """``--judge j1 --judge j1 --no-repeat``: j1 was given the pair it had judged and every pair twice."""
    post = _three_judge_posterior()
    judged = JudgedPairs(judge=np.array([0]), first=np.array([2]), second=np.array([3]), n=np.array([4]))
    post = dataclasses.replace(post, judged=judged)
    twice = ["j1", "j1"]
    sel = select_comparisons(post, 200, "roundrobin", judges=twice, counts=post.past_counts(twice), repeat=False)
    assert sel.judges == ("j1",)
    assert sel.n_units == 15 - 1 and len(set(_units(sel))) == sel.n_units
    assert frozenset((2, 3)) not in _units(sel)


def test_no_repeat_never_holds_back_a_new_judge_of_the_population():
    """``'*'`` is a new judge for every verdict: with ``--no-repeat`` it is given pairs the data holds (by any judge)
    and a pair again within the batch, where "any judge" (the pseudo-judge of a board without named judges) is not."""
    post = _three_judge_posterior()
    judged = JudgedPairs(judge=np.array([0, 1]), first=np.array([2, 2]), second=np.array([3, 3]), n=np.array([4, 1]))
    post = dataclasses.replace(post, judged=judged)
    spread = {"max_judge_share": 1.0, "max_pair_share": 1.0}
    new = select_comparisons(post, 200, "topk", judges=["*"], counts=post.past_counts(["*"]), repeat=False, **spread)
    assert new.n_units == 100 and not new.stopped  # every unit planned, pairs again and the judged one among them
    assert frozenset((2, 3)) in _units(new) and len(set(_units(new))) < new.n_units
    anyone = select_comparisons(post, 200, "topk", judges=[""], counts=post.past_counts([""]), repeat=False, **spread)
    assert anyone.n_units == 14 and frozenset((2, 3)) not in _units(anyone)  # each pair once, the judged one never


def test_the_judge_share_does_not_cap_a_new_judge_of_the_population():
    """``--judge '*' --max-judge-share 0.5`` stopped at half the budget ("every judge holds its share"): '*' is a new
    judge for every verdict, with no single judge's biases to spread.  A named judge beside it keeps its cap."""
    post = _three_judge_posterior()
    alone = select_comparisons(post, 40, "topk", judges=["*"], max_judge_share=0.5)
    assert alone.n_units == 20 and not alone.stopped
    both = select_comparisons(post, 40, "topk", judges=["*", "j1"], max_judge_share=0.25)
    assert both.n_units == 20 and _spread(both)[1][both.judges.index("j1")] <= 5


def test_a_posterior_written_before_the_counts_still_plans_and_says_what_no_repeat_covers(tmp_path, fitted, capsys):
    out = str(tmp_path / "out")
    _snapshot(out, fitted)  # plan_inputs without the judged pairs: the posterior.npz of an older refresh
    assert (
        Posterior.from_bytes((Path(publish.resolve_snapshot(out, None)) / POSTERIOR_FILE).read_bytes()).judged is None
    )
    assert cli.main(["plan", "--out", out, "--budget", "10", "--no-repeat"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("--no-repeat avoids repeats within this plan only") == 1, printed
    assert cli.main(["plan", "--out", out, "--budget", "10"]) == 0
    assert "within this plan only" not in capsys.readouterr().out


def test_pooled_voters_have_judged_what_any_of_them_judged():
    judged = {"judge": ["arena/v1", "arena/v2", "gpt"], "model_a": ["a", "b", "a"], "model_b": ["b", "a", "b"]}
    totals = CellTotals(pa.table({}), pa.table({}), 0, pa.table({**judged, "n": [1, 2, 5]}))
    pooled = planned_judge_pairs(totals, "prefix:/").sort("judge", "model_a")
    assert pooled.rows() == [("arena", "a", "b", 1), ("arena", "b", "a", 2), ("gpt", "a", "b", 5)]


def _traced_peak(call: Callable[[], JudgedPairs]) -> tuple[JudgedPairs, int]:
    """``call()``'s result and the peak of the memory traced while it ran (numpy's allocations, Python's)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_judged_pairs_are_coded_holding_a_key_and_a_count_per_row(monkeypatch) -> None:
    """A table of one chunk past :data:`SUM_ROWS` (a big input in one piece, not the refresh's buckets): while its
    slices are summed together, :meth:`JudgedPairs.of_frame` holds two int64 columns of the coded rows, not four and
    their masked copies, and sums them by sorting, not by ``np.unique``'s inverse: its traced peak (numpy's
    allocations) per row (105 bytes a row at first, then 64, 52 now).  The sizes are scaled down together."""
    from biasboard.plan import acquisition

    monkeypatch.setattr(acquisition, "CODE_ROWS", 1 << 14)
    monkeypatch.setattr(acquisition, "SUM_ROWS", 1 << 16)
    rng = np.random.default_rng(2)
    rows = 300_000
    models, judges = [f"m{i}" for i in range(100)], [f"v{i}" for i in range(20_000)]
    frame = pl.DataFrame(
        {
            "judge": rng.choice(judges, rows),
            "model_a": rng.choice(models, rows),
            "model_b": rng.choice(models, rows),
            "n": rng.integers(1, 9, rows),
        }
    ).with_columns(pl.col("judge", "model_a", "model_b").cast(pl.Categorical))
    got, peak = _traced_peak(lambda: JudgedPairs.of_frame(frame, models, judges))
    assert got.n.sum() == frame.filter(pl.col("model_a") != pl.col("model_b")).get_column("n").sum()
    assert peak <= 58 * rows


def test_judged_pairs_of_judge_buckets_are_coded_into_four_int32_columns_without_a_key_per_row(monkeypatch) -> None:
    """The refresh's rows (a chunk per judge bucket, in judge order, summed) are coded a chunk at a time straight
    into the int32 columns ``posterior.npz`` stores: the traced peak (numpy's allocations) is those 16 bytes a row
    and one chunk's keys, not a key and a count of every row first (48.5 bytes a row before, 28.0 now, measured on
    these rows; at bench/scale.py's full 2N, 5.16M rows, that built after the fit set the refresh's peak).  A chunk
    is summed whole though it spans several coding slices (summed a slice at a time, a bucket's unordered rows
    overlapped and every row was summed again: 50 bytes a row)."""
    from biasboard.plan import acquisition

    monkeypatch.setattr(acquisition, "CODE_ROWS", 1 << 12)  # a bucket (~30k rows here) spans several slices
    rng = np.random.default_rng(12)
    voters = sorted(f"pool/voter-{i:05d}" for i in range(20_000))
    models = [f"model-{i:02d}" for i in range(100)]
    names = pl.from_arrow(_random_judged_rows(rng, 300_000, voters, models))
    assert isinstance(names, pl.DataFrame)
    edges = [None, *voters[2_000::2_000], None]
    buckets = []
    for low, high in itertools.pairwise(edges):  # contiguous judge ranges, as the merge cuts them
        bucket = names.filter(
            pl.col("judge") >= low if low is not None else pl.lit(True),
            pl.col("judge") < high if high is not None else pl.lit(True),
        )
        coded = bucket.with_columns(pl.col("judge", "model_a", "model_b").cast(pl.Categorical)).to_arrow()
        buckets.append(judge_pair_counts(coded))
    held = pa.concat_tables(buckets)
    got, peak = _traced_peak(lambda: JudgedPairs.of_frame(held, models, voters))
    assert all(np.asarray(getattr(got, field)).dtype == np.int32 for field in ("judge", "first", "second", "n"))
    assert got.n.size == held.num_rows > 250_000
    assert peak <= 32 * held.num_rows
    by_name = JudgedPairs.of_frame(names, models, voters)  # one chunk of names: the slices summed together
    for field in ("judge", "first", "second", "n"):
        assert np.array_equal(getattr(got, field), getattr(by_name, field)), field


def _random_judged_rows(rng: np.random.Generator, rows: int, voters: list[str], models: list[str]) -> pa.Table:
    """Rows (judge, model_a, model_b, n) of names drawn at random: self-battles and repeats among them."""
    return pa.table(
        {
            "judge": rng.choice(voters, rows),
            "model_a": rng.choice(models, rows),
            "model_b": rng.choice(models, rows),
            "n": rng.integers(1, 9, rows),
        }
    )


def test_judge_pair_counts_keep_dictionary_codes_and_sum_as_by_name():
    """The judged pairs the refresh holds from before the fit to the snapshot are codes over the cells' dictionaries
    (20 bytes a row; as strings ~72, which set the refresh's peak at bench/scale.py's full N), and they sum and plan
    as the names do: self-battles dropped, the same JudgedPairs as from the rows by name."""
    rng = np.random.default_rng(11)
    rows = 20_000
    voters = [f"human-pool-1/voter-{i:05d}" for i in range(5_000)]
    models = [f"model-sim-{i:03d}" for i in range(60)]
    names = _random_judged_rows(rng, rows, voters, models)
    coded = pa.table(
        {c: names.column(c).dictionary_encode() if c != "n" else names.column(c) for c in names.schema.names}
    )
    got = judge_pair_counts(coded)
    keys = ["judge", "model_a", "model_b"]
    assert all(pa.types.is_dictionary(got.schema.field(c).type) for c in keys)
    row_bytes = sum(chunk.indices.nbytes for c in keys for chunk in got.column(c).chunks) + got.column("n").nbytes
    assert row_bytes <= 20 * got.num_rows
    by_name = (
        pl.from_arrow(names)
        .filter(pl.col("model_a") != pl.col("model_b"))
        .select(  # both orders of a pair in one row, the models in name order
            "judge",
            pl.min_horizontal("model_a", "model_b").alias("model_a"),
            pl.max_horizontal("model_a", "model_b").alias("model_b"),
            "n",
        )
        .group_by(keys)
        .agg(pl.col("n").sum())
        .sort(keys)
    )
    ordered = pl.from_arrow(names).filter(pl.col("model_a") != pl.col("model_b")).unique(keys).height
    assert got.num_rows < ordered  # some pairs were judged in both orders: the rows sum them
    assert coded.column("model_a").chunk(0).dictionary.to_pylist() != sorted(models)  # codes not in name order
    assert pl.from_arrow(got).with_columns(pl.col(keys).cast(pl.String)).sort(keys).equals(by_name)
    judges = sorted(set(voters[:4_000]))
    planned = planned_judge_pairs(CellTotals(pa.table({}), pa.table({}), 0, got), None)
    coded_pairs, named_pairs = (JudgedPairs.of_frame(f, models[:50], judges) for f in (planned, by_name))
    for field in ("judge", "first", "second", "n"):
        assert np.array_equal(getattr(coded_pairs, field), getattr(named_pairs, field))


@pytest.mark.parametrize("bucket_order", ["judge order", "reversed"])
def test_judged_pairs_of_judge_buckets_are_coded_from_their_codes_as_by_name(bucket_order: str) -> None:
    """The refresh hands :meth:`JudgedPairs.of_frame` its held rows as they are: a chunk per judge bucket, codes over
    each bucket's dictionaries.  Coded so (each chunk summed alone, and the chunks together only when their keys
    overlap: buckets out of judge order), they are the arrays coded from the same rows by name."""
    rng = np.random.default_rng(4)
    rows = 30_000
    voters = sorted(f"pool/voter-{i:04d}" for i in range(3_000))
    models = [f"model-{i:02d}" for i in range(40)]
    names = _random_judged_rows(rng, rows, voters, models)
    bounds = [voters[1_000], voters[2_000]]  # three buckets of contiguous judge ranges, as the merge cuts them
    judge = pl.from_arrow(names).get_column("judge")
    masks = [judge < bounds[0], (judge >= bounds[0]) & (judge < bounds[1]), judge >= bounds[1]]
    buckets = [judge_pair_counts(names.filter(pa.array(mask.to_numpy()))) for mask in masks]
    held = pa.concat_tables(buckets if bucket_order == "judge order" else buckets[::-1])
    assert held.column("judge").num_chunks == 3
    known = models[:35]  # rows of models the fit does not hold are dropped
    judges = voters[::2]
    by_name = JudgedPairs.of_frame(pl.from_arrow(names), known, judges)
    from_codes = JudgedPairs.of_frame(held, known, judges)
    assert by_name.n.size > 10_000
    for field in ("judge", "first", "second", "n"):
        assert np.array_equal(getattr(from_codes, field), getattr(by_name, field)), field
    assert judged_names(held) == set(voters)


def test_bench_acquisition_study_smoke(tmp_path):
    """``bench/acquisition_study.py --smoke`` runs end to end as a user runs it (it broke unnoticed when the battle
    schema grew style columns) and writes its table and its reading for every strategy."""
    script = PROJECT_ROOT / "bench" / "acquisition_study.py"
    out = subprocess.run(
        [sys.executable, str(script), "--smoke", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for strategy in ("dopt", "thompson", "roundrobin", "random"):
        assert f"naive fit, topk vs {strategy}:" in out.stdout and f"corrected fit, topk vs {strategy}:" in out.stdout
    assert "Full matrix (90 comparisons), corrected fit: recall" in out.stdout
    assert any(tmp_path.iterdir())


def test_the_population_judge_carries_the_global_effects_and_an_unknown_judge_is_named_briefly():
    """``'*'`` plans for a new judge of the population: the fit's global position effect, a = 1 and the global tie
    propensity, whatever the named judges' own are.  A judge the fit does not hold is refused with the first ten
    judges and their number (a board of voter-judges listed all 50,000 in one line), and ``'*'``."""
    judges = tuple(f"pool/v{i}" for i in range(50))
    post = Posterior(
        ("a", "b", "c"),
        np.array([1.0, 0.0, -1.0]),
        np.eye(3) * 0.1,
        1,
        judges,
        np.full(50, 0.9),
        np.full(50, 2.0),
        np.full(50, 0.7),
        global_position=0.25,
        global_tie=0.3,
    )
    names, gamma, disc, nu = post.judge_effects(["*", "pool/v3"])
    assert names == ("*", "pool/v3")
    np.testing.assert_array_equal(gamma, [0.25, 0.9])
    np.testing.assert_array_equal(disc, [1.0, 2.0])
    np.testing.assert_array_equal(nu, [0.3, 0.7])
    with pytest.raises(KeyError) as err:
        post.judge_index(["nobody"])
    said = err.value.args[0]
    assert "pool/v9, ... (50 in all)" in said and "pool/v10" not in said and "'*', a new judge" in said


def test_planning_for_more_judges_than_memory_holds_is_refused_naming_judge():
    """Every judge planned for is weighed for every pair (~72 B per judge and ordered pair): the default, every judge
    of the fit, is ~580 GB with 50,000 voter-judges over 400 models.  Refused in one line; a few named judges plan."""
    m, j = 400, 400  # 400 judges over 400 models: 4.3 GiB, just over the limit
    models = tuple(f"m{i}" for i in range(m))
    judges = tuple(f"voter/{i}" for i in range(j))
    post = Posterior(models, np.linspace(1, -1, m), np.eye(m) * 0.05, 10, judges, np.zeros(j), np.ones(j), np.zeros(j))
    with pytest.raises(PlanTooLarge, match=r"planning for 400 judges over 400 models needs ~4.3 GiB .* --judge"):
        check_plan_size(post, None)
    check_plan_size(post, judges[:10])  # the judges that can be asked: well within


def test_a_refresh_whose_plan_would_not_fit_plans_for_a_new_judge_of_the_population(
    tmp_path, monkeypatch, caplog, capsys
):
    """refresh --plan-budget has no --judge: past the planner's memory (voter-judges; the limit lowered so that two
    judges exceed it) it publishes and plans for ``'*'``, a new judge of the population — what an arena asks next —
    and says so (it wrote no plan before); ``biasboard plan`` without --judge is refused naming ``--judge '*'``, and
    plans with it or with a named judge."""
    write_simulation(SimulationConfig(battles=2000, models=6, judges=2, days=1, seed=3), tmp_path / "sim")
    logs = str(tmp_path / "sim" / "battles")
    out = str(tmp_path / "site")
    monkeypatch.setattr(plan_module, "PLAN_MEMORY_LIMIT", 6 * 6 * PLAN_BYTES_PER_JUDGE_PAIR * 3 // 2)
    args = ["refresh", "--input", logs, "--state", str(tmp_path / "state"), "--out", out, "--plan-budget", "4"]
    assert cli.main(args) == 0
    snapshot_id = (Path(out) / "LATEST").read_text().strip()
    assert "planning for 2 judges over 6 models" in caplog.text and "planned for '*' instead" in caplog.text
    planned = json.loads((Path(out) / "plans" / snapshot_id / "plan.json").read_text())
    assert planned["judges"] == ["*"] and planned["planned"] == 4
    assert "planning for 2 judges over 6 models" in planned["notes"][0]  # the plan says why, not only the log
    assert "planned for '*' instead" in planned["notes"][0]
    assert set(pl.read_parquet(Path(out) / "plans" / snapshot_id / "plan.parquet")["judge"]) == {"*"}
    judge = json.loads((Path(out) / "snapshots" / snapshot_id / "summary.json").read_text())
    one = judge["judges"][0]["judge"]
    assert cli.main(["plan", "--out", out, "--budget", "4"]) == 2
    assert "--judge '*' for a new judge of the population" in capsys.readouterr().err
    assert cli.main(["plan", "--out", out, "--budget", "4", "--judge", one]) == 0
    assert cli.main(["plan", "--out", out, "--budget", "4", "--judge", "*"]) == 0


@pytest.mark.parametrize("named", [True, False])
def test_judged_pairs_are_coded_and_summed_as_by_name(monkeypatch, named: bool) -> None:
    """:meth:`JudgedPairs.of_frame` (names coded through a dict, a slice of rows at a time, summed in numpy) against
    the sums by name in polars: unknown judges and models dropped, self-battles dropped, both orders of a pair
    summed, rows sorted by (judge, first, second); slices smaller than the frame, so rows of a key meet across them."""
    from biasboard.plan import acquisition

    monkeypatch.setattr(acquisition, "CODE_ROWS", 1000)
    rng = np.random.default_rng(5)
    models, judges = [f"m{i}" for i in range(30)], [f"j{i}" for i in range(40)]
    rows = 5_000
    frame = pl.DataFrame(
        {
            "judge": rng.choice([*judges, "stranger"], rows),
            "model_a": rng.choice([*models, "unrated"], rows),
            "model_b": rng.choice(models, rows),
            "n": rng.integers(1, 9, rows),
        }
    )
    got = JudgedPairs.of_frame(frame, models, judges if named else [])
    index = {name: i for i, name in enumerate(models)}
    judge_index = {name: i for i, name in enumerate(judges)}
    expected = (
        frame.filter(pl.col("model_a").is_in(models), pl.col("model_a") != pl.col("model_b"))
        .filter(pl.col("judge").is_in(judges) if named else pl.lit(True))
        .with_columns(
            (pl.col("judge").replace_strict(judge_index, default=-1) if named else pl.lit(-1)).alias("j"),
            pl.min_horizontal(pl.col("model_a").replace_strict(index), pl.col("model_b").replace_strict(index)).alias(
                "first"
            ),
            pl.max_horizontal(pl.col("model_a").replace_strict(index), pl.col("model_b").replace_strict(index)).alias(
                "second"
            ),
        )
        .group_by("j", "first", "second")
        .agg(pl.col("n").sum())
        .sort("j", "first", "second")
    )
    for field, column in (("judge", "j"), ("first", "first"), ("second", "second"), ("n", "n")):
        assert np.asarray(getattr(got, field)).tolist() == expected.get_column(column).to_list(), field


def test_later_picks_say_their_p_top_k_is_after_the_earlier_picks():
    """A pick after the first is chosen on P(top k) as the earlier picks' verdicts would leave it; its reason gave
    those numbers as if they were the row's p_top_k columns (the snapshot's), e.g. 0.53 beside a column of 0.5355 on
    a different model.  The first pick's reason keeps the columns' numbers; the later ones say what theirs are."""
    frame = select_comparisons(_three_judge_posterior(), 8, "topk", seed=0).to_frame(_three_judge_posterior())
    reasons = frame["reason"].unique(maintain_order=True).to_list()
    assert "after the plan's earlier picks" not in reasons[0]
    assert all("P(top 3) after the plan's earlier picks" in r for r in reasons[1:] if r.startswith("top-k"))


def test_a_judge_short_of_its_share_for_want_of_unjudged_pairs_is_named():
    """With --no-repeat a judge that had judged all but 29 pairs got 29 units while the others got their 34, and the
    note said every judge held its share (34 units each)."""
    post = _three_judge_posterior()
    counts = np.zeros((3, 6, 6))
    counts[0] = 1 - np.eye(6)  # j1 has judged every pair but one
    counts[0, 0, 5] = counts[0, 5, 0] = 0
    sel = select_comparisons(post, 60, "topk", counts=counts, repeat=False, max_judge_share=0.2)
    given = np.bincount(sel.judge, minlength=3)
    assert sel.stopped == "judge_cap" and given[0] == 1 and list(given[1:]) == [sel.judge_cap] * 2
    (note,) = _shortfall_notes(sel, 30)
    assert f"holds its share of the batch ({sel.judge_cap} units each), but j1 (1), which has no other" in note


def test_plan_json_keeps_few_judge_names(tmp_path, monkeypatch) -> None:
    """plan.json lists the judges a plan weighed as the snapshot's JSON files list judges: past SUMMARY_JUDGES_MAX
    (a board of voter-judges, every voter weighed) the first of them and their count, not a name per voter (12,682
    names, 329 kB for a 100-comparison plan)."""
    write_simulation(SimulationConfig(battles=2000, models=6, judges=5, days=1, seed=3), tmp_path / "sim")
    out = str(tmp_path / "site")
    args = ["refresh", "--input", str(tmp_path / "sim" / "battles"), "--state", str(tmp_path / "state"), "--out", out]
    assert cli.main([*args, "--diagnostics", "off", "--no-audit"]) == 0
    monkeypatch.setattr(S, "SUMMARY_JUDGES_MAX", 2)
    assert cli.main(["plan", "--out", out, "--budget", "4", "--to", str(tmp_path / "plan")]) == 0
    planned = json.loads((Path(tmp_path) / "plan" / "plan.json").read_text())
    assert len(planned["judges"]) == 2 and planned["judges_count"] == 5


def _reference_board():
    """Battles of five judges (two human pools) that all put the first-shown model ahead by ~0.5 logits."""
    config = SimulationConfig(battles=8000, models=8, judges=5, human_judges=2, days=1, seed=61, gamma0=-0.5, sd_u=0.05)
    battles = [battles for _, battles, _ in simulate_days(config)]
    cells = [partial_cells(day, FamilyMap.with_user_rules()).cells for day in battles]
    return battles, cells, draw_parameters(config)


def test_a_fit_toward_a_reference_plans_with_each_judges_whole_position_effect():
    # Toward the two human pools as reference, the bias table gives the LLM judges' position as their excess over
    # the humans' (0: tied to them), and the plan read that as the whole effect: judges planned for as if they had
    # no position bias at all.
    _, cells, params = _reference_board()
    humans = tuple(name for name, human in zip(params.judge_names, params.judge_human, strict=True) if human)
    toward = posterior_from_fit(fit_with_reference(cells, reference=Reference("judges", humans)).corrected)
    alone = posterior_from_fit(fit_with_reference(cells, reference=Reference()).corrected)
    assert toward.judges == alone.judges
    truth = params.gamma[[list(params.judge_names).index(j) for j in toward.judges]]
    np.testing.assert_allclose(toward.position, truth, atol=0.15)
    np.testing.assert_allclose(toward.position, alone.position, atol=0.15)


def test_the_trusted_anchors_are_not_a_judge_to_plan_for():
    # Fitted as one more rater named "(anchors)", they took an equal share of every plan, and with --no-repeat
    # were given pairs they had already judged (their verdicts are not the battles' judged pairs).
    battles, cells, params = _reference_board()
    first = pl.from_arrow(battles[0]).filter(pl.col("judge") == params.judge_names[0]).head(400)
    anchors = pl.from_arrow(partial_cells(as_anchor_rows(first), FamilyMap.with_user_rules()).cells)
    fit = fit_with_reference(cells, reference=Reference("anchors", (ANCHOR_JUDGE,)), anchor_cells=anchors).corrected
    assert ANCHOR_JUDGE in fit.judges
    post = posterior_from_fit(fit)
    assert ANCHOR_JUDGE not in post.judges and len(post.judges) == 5
    truth = params.gamma[[list(params.judge_names).index(j) for j in post.judges]]
    np.testing.assert_allclose(post.position, truth, atol=0.2)


def test_the_planned_effects_read_by_column_are_the_fits_named_effects():
    # posterior_from_fit reads the bias table by column (FitResult.judges' object per effect set the refresh's peak
    # with 50,000 voter-judges); every judge, estimate and over-reference flag is the named effects' own.
    battles, cells, params = _reference_board()
    humans = tuple(name for name, human in zip(params.judge_names, params.judge_human, strict=True) if human)
    first = pl.from_arrow(battles[0]).filter(pl.col("judge") == params.judge_names[0]).head(400)
    anchors = pl.from_arrow(partial_cells(as_anchor_rows(first), FamilyMap.with_user_rules()).cells)
    fits = [
        fit_with_reference(cells, reference=Reference()).corrected,
        fit_with_reference(cells, reference=Reference("judges", humans)).corrected,
        fit_with_reference(cells, reference=Reference("anchors", (ANCHOR_JUDGE,)), anchor_cells=anchors).corrected,
    ]
    flagged = 0
    for fit in fits:
        effects = planned_effects(fit.bias)
        named = fit.judges
        assert effects.global_position == named["*"].position.estimate
        expected = sorted(j for j in named if j not in ("*", ANCHOR_JUDGE))
        assert effects.judges.get_column("judge").to_list() == expected
        for row in effects.judges.iter_rows(named=True):
            judge = named[row["judge"]]
            for effect in ("position", "discrimination", "tie"):
                value = getattr(judge, effect)
                assert row[effect] == (value.estimate if value is not None else None)
            over = judge.position is not None and judge.position.note in (EXCESS_ROW_NOTE, TIED_ROW_NOTE)
            assert row["over_reference"] == over
            flagged += over
    assert flagged > 0  # the fit toward the human pools flags the LLM judges' rows


def test_a_new_judge_of_the_population_toward_a_reference_takes_the_judges_mean_position_not_the_references():
    # Four LLM judges put the second-shown model ahead by ~0.8 logits; the human pool, the reference, has no position
    # bias.  Toward it, the fit's global position is the pool's own (~0), and '*' (a new judge of the population, the
    # next crowd voter) was planned with it: as if a new judge had none of the bias every judge of the board shows.
    config = SimulationConfig(battles=8000, models=8, judges=5, human_judges=1, days=1, seed=61, gamma0=-0.8, sd_u=0.05)
    params = draw_parameters(config)
    params = dataclasses.replace(params, gamma=np.where(params.judge_human, 0.0, params.gamma))
    cells = [partial_cells(day, FamilyMap.with_user_rules()).cells for _, day, _ in simulate_days(config, params)]
    humans = tuple(name for name, human in zip(params.judge_names, params.judge_human, strict=True) if human)
    toward = posterior_from_fit(fit_with_reference(cells, reference=Reference("judges", humans)).corrected)
    alone = posterior_from_fit(fit_with_reference(cells, reference=Reference()).corrected)
    new_judge = toward.judge_effects([POPULATION_JUDGE])[1][0]
    assert toward.position[toward.judges.index(humans[0])] == pytest.approx(0.0, abs=0.15)  # the reference's own
    assert new_judge == pytest.approx(params.gamma.mean(), abs=0.1)  # the five judges' mean, -0.66
    assert new_judge == pytest.approx(alone.judge_effects([POPULATION_JUDGE])[1][0], abs=0.1)  # as without a reference


def test_roundrobin_counts_each_past_comparison_once():
    # The past counts are symmetric; summed with their transpose each past comparison counted twice while a planned
    # unit counted its two once: a pair compared 3 times, once planned (5), still came before one compared 4 times.
    post = Posterior(models=tuple("abcd"), mean=np.zeros(4), cov=np.eye(4), k=2)
    counts = 10 - 10 * np.eye(4, dtype=np.int64)
    counts[0, 1] = counts[1, 0] = 3
    counts[2, 3] = counts[3, 2] = 4
    sel = select_comparisons(post, 4, "roundrobin", counts=counts, max_pair_share=1.0)
    assert _units(sel) == [frozenset((0, 1)), frozenset((2, 3))]
    assert sel.reasons == ("least compared pair (3 before)", "least compared pair (4 before)")


def test_a_judge_of_grades_alone_is_not_planned_for(tmp_path):
    # On a board of battles and grades, a judge that only grades gave no pairwise verdict: its discrimination and tie
    # propensity are the prior's (a = 1, ν = 1), and the plan weighed them as measured, giving it a quarter of the plan.
    sim = write_simulation(SimulationConfig(battles=600, models=5, judges=3, days=1, scores=0.5, seed=5), tmp_path)
    grades = pl.read_parquet(sim / "scores" / "**" / "*.parquet").with_columns(pl.lit("grader").alias("judge"))
    grades.write_parquet(tmp_path / "grades.parquet")
    out = str(tmp_path / "out")
    inputs = ["--input", str(sim / "battles"), "--scores", str(tmp_path / "grades.parquet")]
    folders = ["--state", str(tmp_path / "st"), "--out", out]
    assert cli.main(["refresh", "--no-audit", *inputs, *folders, "--k", "2", "--plan-budget", "40"]) == 0
    bias = pl.read_parquet(Path(publish.resolve_snapshot(out, None)) / "bias.parquet")
    assert "grader" in bias["judge"].to_list()  # a judge of the fit (its severity)
    post = Posterior.from_bytes((Path(publish.resolve_snapshot(out, None)) / POSTERIOR_FILE).read_bytes())
    assert "grader" not in post.judges and len(post.judges) == 3
    plan = pl.read_parquet(next((tmp_path / "out" / "plans").glob("*/plan.parquet")))
    assert plan.height == 40 and "grader" not in plan["judge"].to_list()


def test_a_refresh_plans_with_its_own_seed(tmp_path):
    # refresh --seed seeds every Monte Carlo part; its --plan-budget plan drew P(top k) with seed 0 whatever the
    # seed, and its plan.json said "seed": 0 beside a snapshot made with another.
    sim = write_simulation(SimulationConfig(battles=300, models=6, judges=2, days=1, seed=8), tmp_path / "sim")
    out = str(tmp_path / "out")
    refresh = ["refresh", "--no-audit", "--input", str(sim / "battles"), "--state", str(tmp_path / "state")]
    assert cli.main([*refresh, "--out", out, "--k", "2", "--seed", "3", "--plan-budget", "20"]) == 0
    made = next((tmp_path / "out" / "plans").glob("*"))
    assert json.loads((made / "plan.json").read_text())["seed"] == 3
    assert cli.main(["plan", "--out", out, "--budget", "20", "--seed", "3", "--to", str(tmp_path / "p")]) == 0
    assert pl.read_parquet(made / "plan.parquet").equals(pl.read_parquet(tmp_path / "p" / "plan.parquet"))


def test_plan_judge_is_named_as_the_fits_judges_are(tmp_path):
    """The fit's judge names are trimmed and composed (NFC) when read; ``plan --judge`` took the name as typed, so a
    decomposed ``"e\u0301"`` (a macOS terminal's paste) or a trailing space named no judge of the fit."""
    composed = "judg\u00e9-x"
    cells = partial_cells(_battles(judge="judge\u0301-x"), FamilyMap.with_user_rules()).cells
    fit = fit_bias_aware(cells, config=ModelConfig(k=K, profile=False, posterior_draws=200))
    assert posterior_from_fit(fit).judges == (composed,)
    out = str(tmp_path / "out")
    _snapshot(out, fit)
    for typed in ("judge\u0301-x", f" {composed}\u200b"):
        to = str(tmp_path / f"plan-{len(typed)}")
        assert cli.main(["plan", "--out", out, "--budget", "4", "--judge", typed, "--to", to]) == 0
        assert set(pl.read_parquet(Path(to) / "plan.parquet")["judge"]) == {composed}
