"""Profile likelihoods: ``full`` (warm-started along the profile path) against the cold solve of every point it
replaced, and ``fast`` (the quadratic (Wald) profile from the centre's factorisation) against ``full``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.ranking import ModelConfig, diagnostics
from biasboard.ranking.data import build_dataset
from biasboard.ranking.diagnostics import _reprior, _solve_point, profile_ranges
from biasboard.ranking.fit import fit_bias_aware, solve_bias_aware
from biasboard.ranking.model import AFF, LEN, POS
from biasboard.ranking.problem import bias_aware_problem
from biasboard.schemas.errors import InputError

from tests.test_ranking_model import _cells


def _problem(solver: str, seed: int = 7, judges: int = 4):
    data = build_dataset(
        _cells(
            np.random.default_rng(seed),
            models=8 if judges == 4 else 7,
            judges=judges,
            cells=600 if judges == 4 else 400,
        )
    )
    config = ModelConfig(judge_solver=solver)
    problem = bias_aware_problem(data, config)
    return problem, solve_bias_aware(problem, config), config


@pytest.mark.parametrize(
    ("solver", "seed", "judges"), [("dense", 7, 4), ("dense", 11, 4), ("blocked", 7, 4), ("dense", 3, 6)]
)
def test_path_profiles_equal_the_cold_solves(solver, seed, judges):
    """The warm-started path gives every profile value the cold Newton solves give (to the fit's tolerance), within
    its own tolerance (1e-10 · |log L|, ~1e-7 nats here; 1e-6 asserted).  Seed 3 with 6 judges has two local optima
    at affinity ĉ + Δ (different discriminations, 11 nats apart): a Newton iteration that wanders from the warm
    start finds the worse one, the cold solve (and so the path) the better one."""
    problem, solution, config = _problem(solver, seed, judges)
    path = profile_ranges(problem, solution, config)
    cold = profile_ranges(problem, solution, config, cold=True)
    assert path.keys() == cold.keys() == {"position", "length", "affinity"}
    for name, info in cold.items():
        assert path[name]["grid"] == info["grid"], name
        np.testing.assert_allclose(path[name]["loglik"], info["loglik"], rtol=0, atol=1e-6, err_msg=name)
        assert path[name]["note"] == info["note"], name


def test_a_point_the_warm_start_cannot_reach_by_descent_is_solved_cold(monkeypatch):
    """When the warm-started Newton gives a point up (forced here for ĉ + Δ of every effect), that point is the
    cold solve's value, the others stay the path's."""
    problem, solution, config = _problem("dense")
    cold = profile_ranges(problem, solution, config, cold=True)
    given_up = []

    def give_up_plus(objective, core, diag, free, *args, **kwargs):
        index = int(np.flatnonzero(~free)[0])  # the profiled level
        if core[index] > solution.core[index] + 1e-9:
            given_up.append(index)
            return None
        return _solve_point(objective, core, diag, free, *args, **kwargs)

    monkeypatch.setattr(diagnostics, "_solve_point", give_up_plus)
    path = profile_ranges(problem, solution, config)
    assert set(given_up) == {problem.layout.glob(t) for t in (POS, LEN, AFF)}
    for name, info in cold.items():
        np.testing.assert_allclose(path[name]["loglik"], info["loglik"], rtol=0, atol=1e-6, err_msg=name)
        assert path[name]["loglik"][2] == info["loglik"][2], name  # the cold solve itself


def test_the_profile_objective_at_the_map_needs_no_pass_over_the_cells():
    """The MAP's evaluation with the profile's prior swapped in equals the profile objective evaluated there."""
    problem, solution, _ = _problem("dense")
    for t in (POS, LEN, AFF):
        objective = problem.objective(prior=problem.profile_prior(t))
        got = _reprior(solution.evaluation, problem.prior, objective.prior, solution.core, solution.diag)
        want = objective.evaluate(solution.core, solution.diag)
        assert got is not None
        assert got.f == pytest.approx(want.f, rel=1e-12) and got.loglik == want.loglik
        np.testing.assert_allclose(got.g, want.g, rtol=1e-9, atol=1e-9 * np.abs(want.g).max())
        np.testing.assert_allclose(got.H, want.H, rtol=1e-9, atol=1e-9 * np.abs(want.H).max())
        np.testing.assert_allclose(got.H_diag, want.H_diag, rtol=1e-12)


def test_the_extrapolated_value_stops_within_the_tolerance():
    """A point stopped at a loose tolerance: its value (log L there plus the quadratic model's change for the next
    Newton step) is within that tolerance of the value solved to the fit's tolerance, though log L at the point
    itself is not."""
    problem, solution, _ = _problem("dense")
    t = LEN
    objective = problem.objective(prior=problem.profile_prior(t))
    free = np.ones(problem.layout.n_core, bool)
    free[problem.layout.glob(t)] = False
    core = diagnostics._profile_start(problem, solution, t, float(solution.core[problem.layout.glob(t)]) + 0.3)
    exact = _solve_point(objective, core, solution.diag, free, 1e-12)
    loose = _solve_point(objective, core, solution.diag, free, 1e-3)
    assert exact is not None and loose is not None
    at_point = objective.evaluate(loose.core, loose.diag, derivatives=False).loglik
    assert abs(loose.loglik - exact.loglik) <= 1e-3
    assert abs(loose.loglik - exact.loglik) < abs(at_point - exact.loglik)


def test_a_profile_point_that_does_not_converge_is_said():
    """A profile fit that stops before converging (forced: one iteration) publishes its value with a warning that it
    is only a lower bound; converged profiles carry no such warning."""
    problem, solution, config = _problem("dense")
    assert not any("converge" in info.get("warning", "") for info in profile_ranges(problem, solution, config).values())
    stopped = profile_ranges(problem, solution, replace(config, max_iter=1), cold=True)
    for name, info in stopped.items():
        assert "did not converge in 1 iterations" in info["warning"], name
        assert "lower bound" in info["warning"], name


def test_a_profile_point_that_does_not_converge_does_not_make_its_effect_prior_selected():
    """The non-convergence warning shared the key of the prior-selected verdict, so an effect identified by thousands
    of nats whose profile point stopped short was published prior-selected: not identified in the bias table (its
    note still saying "identified by the comparisons") and listed as an unidentified correction, left off the board."""
    from biasboard.ranking.fit import publish_bias_aware
    from biasboard.ranking.reference import unidentified_effects

    problem, solution, config = _problem("dense")
    stopped = profile_ranges(problem, solution, replace(config, max_iter=1), cold=True)
    for name, info in stopped.items():
        assert "did not converge" in info["warning"] and info["range_nats"] > 100, name
    fit = publish_bias_aware(problem, solution, config, profiles=stopped)
    rows = fit.bias.filter(pl.col("judge") == "*", pl.col("effect").is_in(list(stopped)))
    assert rows.height == len(stopped) and rows["identified"].all()
    assert unidentified_effects(problem, fit, frozenset()) == set()
    assert not any(info["prior_selected"] for info in stopped.values())


@pytest.mark.parametrize("cold", [False, True])
def test_profiles_in_forked_processes_equal_the_serial_ones(cold, monkeypatch):
    """The effects' profiles are independent pieces: run in two forked processes (and chosen by the environment)
    they give the serial run's values and verdicts bit for bit, in the same order."""
    problem, solution, config = _problem("dense")
    serial = profile_ranges(problem, solution, config, cold=cold, workers=1)
    assert list(profile_ranges(problem, solution, config, cold=cold, workers=2).items()) == list(serial.items())
    monkeypatch.setenv("BIASBOARD_PROFILE_WORKERS", "2")
    assert profile_ranges(problem, solution, config, cold=cold) == serial
    monkeypatch.setenv("BIASBOARD_PROFILE_WORKERS", "0")
    with pytest.raises(InputError, match="BIASBOARD_PROFILE_WORKERS must be a whole number"):
        profile_ranges(problem, solution, config, cold=cold)


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_fast_profiles_agree_with_full_ones(solver):
    problem, solution, config = _problem(solver)
    full = profile_ranges(problem, solution, config)
    fast = profile_ranges(problem, solution, replace(config, diagnostics="fast"))
    assert full.keys() == fast.keys() and full
    for name, info in full.items():
        got = fast[name]
        # The quadratic approximation is not the profile: it promises the same verdict and the size.
        assert 0.5 * info["range_nats"] <= got["range_nats"] <= 2.0 * info["range_nats"] + 0.01, name
        assert got["note"].split(":")[0] == info["note"].split(":")[0], name  # same identification verdict
        assert got["grid"] == info["grid"]


def test_diagnostics_off_skips_the_profiles():
    data = build_dataset(_cells(np.random.default_rng(8), models=6, judges=3, cells=300))
    fit = fit_bias_aware(data, config=ModelConfig(diagnostics="off", posterior_draws=100))
    assert fit.diagnostics["profile_likelihood"] == {}
    with pytest.raises(ValueError, match="diagnostics"):
        ModelConfig(diagnostics="some")


def test_refresh_takes_diagnostics_and_judge_pool(tmp_path):
    """The refresh hooks: --diagnostics off publishes no profiles; --judge-pool fits one judge per pool."""
    import json

    from biasboard.pipelines.refresh import RefreshOptions, refresh
    from biasboard.simulate import SimulationConfig, write_simulation

    logs = write_simulation(SimulationConfig(battles=3000, models=6, judges=3, days=1, seed=3), tmp_path / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(tmp_path / "state"),
        str(tmp_path / "out"),
        [],
        RefreshOptions(k=3, audit=False, diagnostics="off", judge_pool="prefix:-sim"),
    )
    assert outcome.published is not None
    summary = json.loads((tmp_path / "out" / "snapshots" / outcome.published.snapshot_id / "summary.json").read_text())
    assert summary["diagnostics"]["profile_likelihood"] == {}
    model_options = json.loads(
        (tmp_path / "out" / "snapshots" / outcome.published.snapshot_id / "manifest.json").read_text()
    )
    assert "prefix:-sim" in json.dumps(model_options)
    import polars as pl

    bias = pl.read_parquet(tmp_path / "out" / "snapshots" / outcome.published.snapshot_id / "bias.parquet")
    judges = set(bias["judge"].to_list()) - {"*"}
    assert judges and not any("-sim" in judge for judge in judges)  # one judge per pool (family prefix)


def _refreshed(tmp_path, diagnostics: str) -> tuple[Path, dict]:
    """(snapshot folder, its summary.json) of a refresh of a small simulation with ``--diagnostics``."""
    import json

    from biasboard.pipelines.refresh import RefreshOptions, refresh
    from biasboard.simulate import SimulationConfig, write_simulation

    logs = write_simulation(SimulationConfig(battles=3000, models=6, judges=3, days=1, seed=3), tmp_path / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(tmp_path / "state"),
        str(tmp_path / "out"),
        [],
        RefreshOptions(k=3, audit=False, diagnostics=diagnostics),
    )
    assert outcome.published is not None
    snapshot = tmp_path / "out" / "snapshots" / outcome.published.snapshot_id
    return snapshot, json.loads((snapshot / "summary.json").read_text())


def test_diagnostics_off_is_said_not_left_as_an_empty_check(tmp_path):
    """--diagnostics off: the summary says the check was not run, the bias table's global rows say what their
    "identified" then means, and the report says so where the identifiability sentences would be (it said nothing,
    and the global effects read "identified" with no note, as if their profiles had been measured)."""
    from biasboard.ranking.bias_table import NO_PROFILE_NOTE

    snapshot, summary = _refreshed(tmp_path, "off")
    assert summary["diagnostics"]["profiles"] == "off" and summary["diagnostics"]["identifiability"] == {}
    bias = pl.read_parquet(snapshot / "bias.parquet")
    globals_ = bias.filter(pl.col("judge") == "*", pl.col("effect").is_in(["position", "length", "affinity"]))
    assert globals_.height == 3 and (globals_["note"] == NO_PROFILE_NOTE).all()
    assert "The identifiability check was not run (--diagnostics off)" in (snapshot / "report.html").read_text()


def test_a_fast_profile_is_published_as_the_approximation_it_is(tmp_path):
    """--diagnostics fast: summary.json, the bias table and the report say the ranges are the quadratic approximation's
    (its ``method`` was dropped on the way into summary.json, so a fast range read as a solved profile's)."""
    snapshot, summary = _refreshed(tmp_path, "fast")
    profiles = summary["diagnostics"]["profile_likelihood"]
    assert profiles
    for name, info in profiles.items():
        assert info["method"] == diagnostics.FAST_METHOD, name
        assert diagnostics.FAST_METHOD in summary["diagnostics"]["identifiability"][name]["message"], name
    bias = pl.read_parquet(snapshot / "bias.parquet").filter(pl.col("judge") == "*", pl.col("effect").is_in(profiles))
    assert bias.height == len(profiles) and all(diagnostics.FAST_METHOD in note for note in bias["note"])
    page = (snapshot / "report.html").read_text()
    assert page.count("quadratic (Wald) approximation") >= 2 * len(profiles)  # the bias table and the sentences


@pytest.mark.parametrize(("solver", "mode"), [("dense", "full"), ("dense", "fast"), ("blocked", "fast")])
def test_a_judge_the_likelihood_cannot_see_leaves_the_profile_as_it_was(solver, mode):
    """A judge whose every battle has a zero length covariate (both answers equally long: a sparse voter, say)
    has a length deviation the likelihood does not see.  Freed in the profile it used to absorb the deviations'
    sum-to-zero gauge, which left the common level unidentified: the length profile came out flat (0.0 nats, a
    'prior-selected' verdict) — or, its Hessian singular, ``fast`` fell back to cold solves (50 s instead of 2 s
    at 50k voter-judges).  It keeps its prior now: the profile is the four judges' (658 nats; 655 here)."""
    four = _cells(np.random.default_rng(7), models=8, judges=4, cells=600)
    silent = _cells(np.random.default_rng(8), models=8, judges=1, cells=40)
    silent = silent.set_column(silent.schema.get_field_index("judge"), "judge", pa.array(["silent"] * 40))
    silent = silent.set_column(silent.schema.get_field_index("sum_x"), "sum_x", pa.array(np.zeros(40)))
    config = ModelConfig(judge_solver=solver, diagnostics=mode)
    ranges = []
    for cells in ([four], [four, silent]):
        problem = bias_aware_problem(build_dataset(cells), config)
        solution = solve_bias_aware(problem, config)
        ranges.append(profile_ranges(problem, solution, config)["length"]["range_nats"])
    without, with_silent = ranges
    assert without > 600
    assert abs(with_silent - without) < 0.01 * without, ranges
