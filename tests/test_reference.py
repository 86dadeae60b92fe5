"""Correcting toward a trusted reference, gated (issue 10): simulated judges with a known truth."""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.ranking.config import STYLE_EFFECTS, ModelConfig
from biasboard.ranking.data import build_dataset, with_judge
from biasboard.ranking.diagnostics import is_model_difference
from biasboard.ranking.fit import bootstrap_replicates, fit_bias_aware, solve_bias_aware
from biasboard.ranking.gate import holm, run_gate
from biasboard.ranking.problem import bias_aware_problem
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.ranking.reference import (
    ANCHOR_JUDGE,
    GATED_OFF_ZERO_REFERENCE_NOTE,
    ZERO_REFERENCE_EXCESS_NOTE,
    Reference,
    ReferenceSettings,
    fit_with_reference,
)
from biasboard.ranking.reference_rating import reference_map, typical_length, typical_style
from biasboard.ranking.uncertainty import centre_within, percentile_interval
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.schemas.summary import zero_reference_effect
from biasboard.simulate import SimulationConfig, draw_parameters, simulate_days
from biasboard.transforms.anchors import read_anchors
from biasboard.transforms.cells import partial_cells

FAMILIES = FamilyMap.with_user_rules()
ANCHORS = Reference("anchors", (ANCHOR_JUDGE,))


def simulated(**overrides):
    config = SimulationConfig(**{"battles": 16_000, "models": 16, "judges": 4, "days": 1, **overrides})
    cells = [partial_cells(battles, FAMILIES).cells for _, battles, _ in simulate_days(config)]
    return cells, draw_parameters(config)


def anchor_rows(params, k: int, seed: int, *, beta: float = 0.0, gamma: float = 0.0) -> pl.DataFrame:
    """K verdicts of a Bradley–Terry rater on uniform pairs, shown in a random order, with lengths drawn
    like the simulator's (model mean + noise): position ``gamma``, length ``beta`` per unit log ratio."""
    rng = np.random.default_rng(seed)
    m = len(params.model_names)
    a = rng.integers(0, m, k)
    b = (a + rng.integers(1, m, k)) % m
    log_a = params.mu[a] + rng.normal(0.0, 0.4, k)
    log_b = params.mu[b] + rng.normal(0.0, 0.4, k)
    len_a = np.maximum(1, np.round(np.exp(log_a))).astype(np.int64)
    len_b = np.maximum(1, np.round(np.exp(log_b))).astype(np.int64)
    eta = params.theta[a] - params.theta[b] + gamma + beta * (np.log(len_a) - np.log(len_b))
    first = rng.random(k) < 1.0 / (1.0 + np.exp(-eta))
    return pl.DataFrame(
        {
            "battle_id": [f"anchor-{seed}-{i}" for i in range(k)],
            "ts": ["2024-01-01T00:00:00Z"] * k,
            "judge": ["trusted"] * k,
            "model_a": params.model_names[a],
            "model_b": params.model_names[b],
            "winner": np.where(first, "model_a", "model_b"),
            "len_a": len_a,
            "len_b": len_b,
        }
    )


def anchor_cells(rows: pl.DataFrame) -> pl.DataFrame:
    from biasboard.transforms.anchors import as_anchor_rows

    return pl.from_arrow(partial_cells(as_anchor_rows(rows), FAMILIES).cells)


def tau_vs_truth(fit, params) -> float:
    index = {m: i for i, m in enumerate(params.model_names)}
    return kendall_tau_b(fit.rating, params.theta[[index[m] for m in fit.models]])


def test_holm_adjusts_step_down() -> None:
    assert holm(np.array([0.01, 0.04, 0.03])) == pytest.approx([0.03, 0.06, 0.06])


def test_perfect_anchors_enable_every_real_effect_and_keep_tau() -> None:
    cells, params = simulated(seed=21, gamma0=-0.3, sd_u=0.1)
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 2000, 1)))
    gate = fit.gate.decisions
    truth = {"position": params.gamma, "length": params.beta, "affinity": params.lam}
    index = {name: j for j, name in enumerate(params.judge_names)}
    for row in gate.iter_rows(named=True):
        if abs(truth[row["effect"]][index[row["judge"]]]) >= 0.1:
            assert row["enabled"], row
    assert tau_vs_truth(fit.corrected, params) >= tau_vs_truth(fit.all_on, params) - 0.01
    assert tau_vs_truth(fit.corrected, params) > tau_vs_truth(fit.naive, params)
    # The leaderboard counts the judges' battles only, never the anchors.
    assert fit.corrected.n_battles.sum() == pytest.approx(fit.naive.n_battles.sum())


NO_BIAS = dict(gamma0=0.0, sd_u=0.0, beta0=0.0, sd_beta=0.0, lambda0=0.0, sd_lambda=0.0)


def test_no_bias_enables_nothing() -> None:
    # Family-wise level 0.05 over the three effects: a clean seed enables nothing.  (bench/reference_study.py
    # measures the rate over many seeds.)
    enabled = 0
    for seed in (31, 32, 33):
        cells, params = simulated(seed=seed, **NO_BIAS)
        fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 500, seed)))
        enabled += int(fit.gate.decisions["enabled"].any())
        assert fit.gate.disabled <= fit.config.disabled
        # anything else left off is the reference's own length, zero unless its verdicts say otherwise
        assert fit.config.disabled - fit.gate.disabled <= {(ANCHOR_JUDGE, "length")}
        if (ANCHOR_JUDGE, "length") in fit.config.disabled:
            own = fit.own_effects["length"]
            assert own["applied"] == 0.0 and own["ci_low"] <= 0.0 <= own["ci_high"]
    assert enabled == 0


def test_length_shared_with_the_reference_is_kept() -> None:
    # Judges and anchors share a length preference of 0.4 per e-fold: nothing of it is a bias, so the
    # published board keeps it (what the reference concludes), unlike the zero reference.
    shared = dict(NO_BIAS, beta0=0.4, len_model_sd=0.6, seed=41)
    cells, params = simulated(**shared)
    anchors = anchor_cells(anchor_rows(params, 3000, 2, beta=0.4))
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchors)
    length = fit.own_effects["length"]
    assert length["ci_low"] <= 0.4 <= length["ci_high"]
    rows = fit.gate.decisions.filter(pl.col("effect") == "length")
    assert not rows["enabled"].any() or (rows["excess"].abs() < 0.1).all()
    zero = fit_with_reference(cells, reference=Reference(), config=ModelConfig())

    def length_slope(board) -> float:
        index = {m: i for i, m in enumerate(params.model_names)}
        idx = [index[m] for m in board.models]
        design = np.column_stack([np.ones(len(idx)), params.theta[idx], params.mu[idx]])
        return float(np.linalg.lstsq(design, board.rating, rcond=None)[0][2])

    # What the reference concludes on typical answers: θ + 0.4·μ.  The zero reference removes it.
    assert length_slope(fit.corrected) == pytest.approx(0.4, abs=0.1)
    assert length_slope(zero.corrected) < 0.2


def test_reference_effects_recovered() -> None:
    cells, params = simulated(seed=51)
    anchors = anchor_cells(anchor_rows(params, 4000, 3, beta=0.3, gamma=0.25))
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchors)
    for effect, truth in (("position", 0.25), ("length", 0.3)):
        own = fit.own_effects[effect]
        assert own["ci_low"] <= truth <= own["ci_high"], (effect, own)
    assert fit.own_effects["affinity"]["estimate"] == 0.0  # the anchors have no family of their own
    # Judges' excesses over the reference: their own length effect minus 0.3.
    excess = fit.gate.decisions.filter(pl.col("effect") == "length")
    truth = dict(zip(params.judge_names, params.beta - 0.3, strict=True))
    for row in excess.iter_rows(named=True):
        assert abs(row["excess"] - truth[row["judge"]]) < 3 * row["se"] + 0.05, row


def test_named_judges_as_reference() -> None:
    cells, params = simulated(seed=61, judges=5, human_judges=2)
    humans = [name for name, h in zip(params.judge_names, params.judge_human, strict=True) if h]
    fit = fit_with_reference(cells, reference=Reference("judges", tuple(humans)))
    assert fit.k > 0 and set(fit.gate.decisions["judge"]) == set(params.judge_names) - set(humans)
    with pytest.raises(InputError, match="no battles by judge"):
        fit_with_reference(cells, reference=Reference("judges", ("nobody",)))


def test_prior_selected_effect_is_not_applied_by_default() -> None:
    # Length constant within each model and correlated with quality: the length split is prior-selected.
    flat = dict(NO_BIAS, len_noise_sd=0.0, len_prompt_sd=0.0, corr_length=0.6, len_mean=3000.0, seed=71)
    cells, _ = simulated(**flat)
    fit = fit_with_reference(cells, reference=Reference())
    assert ("*", "length") in fit.config.disabled
    (entry,) = [u for u in fit.unidentified if u["effect"] == "length"]
    assert not entry["applied"] and "kendall_tau" in entry["if_applied"]
    forced = fit_with_reference(cells, reference=Reference(), settings=ReferenceSettings(apply_unidentified=True))
    assert ("*", "length") not in forced.config.disabled
    assert forced.unidentified and forced.unidentified[0]["applied"]


def test_gate_memory_does_not_grow_with_anchors() -> None:
    cells, params = simulated(seed=81, battles=6000, models=10)
    peaks = []
    for k in (200, 20_000):
        data = build_dataset([*(pl.from_arrow(c) for c in cells), anchor_cells(anchor_rows(params, k, 4))])
        config = ModelConfig(reference=frozenset({ANCHOR_JUDGE}), profile=False)
        problem = bias_aware_problem(data, config)
        fit = fit_bias_aware(data, config=config)
        tracemalloc.start()
        run_gate(problem, fit, frozenset({ANCHOR_JUDGE}), k)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0] + 100_000, peaks


def test_typical_length_is_centred_and_clipped() -> None:
    cells, _ = simulated(seed=91, len_model_sd=2.0)
    data = build_dataset(cells)
    x = typical_length(data, 1.5)
    assert np.abs(x).max() <= 1.5
    assert np.isclose(typical_length(data, None).mean(), 0.0)


def test_anchors_are_kept_per_id(tmp_path) -> None:
    _, params = simulated(seed=5, battles=200)
    rows = anchor_rows(params, 50, 9)
    repeated = pl.concat([rows, rows.with_columns((pl.col("battle_id") + "-again").alias("battle_id"))])
    folder = tmp_path / "anchors" / "day=2024-01-01"
    folder.mkdir(parents=True)
    repeated.write_parquet(folder / "a.parquet")
    rows.head(5).write_parquet(folder / "b.parquet")  # the same ids again: duplicates, counted once
    anchors = read_anchors(str(tmp_path / "anchors"))
    assert anchors.k == 100
    assert anchors.counts.rejected == {"duplicate_battle_id": 5}
    assert anchors.cells["n"].sum() == 100
    assert set(anchors.cells["judge"]) == {ANCHOR_JUDGE}
    assert anchors.raters == ("trusted",)


def test_anchor_raters_are_named_through_the_aliases(tmp_path) -> None:
    """``--aliases`` renamed the anchors' models but not their raters' names: a rater named ``gpt4`` in one file and
    ``gpt-4`` in another, one judge under ``{"gpt4": "gpt-4"}``, were two raters (the audit, which reads the anchors'
    judges through the same map, saw one).  The verdicts are the anchor rater's either way."""
    _, params = simulated(seed=5, battles=200)
    rows = anchor_rows(params, 6, 9)
    rows = rows.with_columns(pl.Series("judge", ["gpt4", " gpt4", "gpt-4", "gpt-4", "other", "gpt4"], pl.String))
    folder = tmp_path / "anchors" / "day=2024-01-01"
    folder.mkdir(parents=True)
    rows.write_parquet(folder / "a.parquet")
    aliases = AliasMap.parse('{"gpt4": "gpt-4"}', "aliases.json")
    assert read_anchors(str(tmp_path / "anchors"), aliases=aliases).raters == ("gpt-4", "other")
    assert read_anchors(str(tmp_path / "anchors")).raters == ("gpt-4", "gpt4", "other")


def test_anchors_without_a_rater_are_rejected_as_the_audit_rejects_them(tmp_path) -> None:
    """Null and blank raters: the audit (which reads the anchors with their raters) rejected them as missing:judge
    while the fit, attributing every row to the anchor rater first, counted them."""
    _, params = simulated(seed=5, battles=200)
    rows = anchor_rows(params, 6, 9)
    rows = rows.with_columns(pl.Series("judge", ["trusted", None, "", "  ", "trusted", "trusted"], pl.String))
    folder = tmp_path / "anchors" / "day=2024-01-01"
    folder.mkdir(parents=True)
    rows.write_parquet(folder / "a.parquet")
    anchors = read_anchors(str(tmp_path / "anchors"))
    assert anchors.k == 3 and anchors.counts.read == 6
    assert anchors.counts.rejected == {"missing:judge": 3}
    assert anchors.cells["n"].sum() == 3


def test_never_enables_below_ten_verdicts() -> None:
    cells, params = simulated(seed=3, battles=4000, models=8, beta0=1.0)
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 9, 1)))
    assert fit.k == 9 and not fit.gate.decisions["enabled"].any()
    assert "only 9 reference verdicts" in fit.gate.decisions["reason"][0]


def test_agreement_with_anchors_improves_when_a_length_bias_is_removed() -> None:
    cells, params = simulated(seed=23, beta0=1.0, sd_beta=0.0, len_model_sd=0.5)
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 3000, 7)))
    rows = {row["judge"]: row for row in fit.agreement}
    assert set(params.judge_names) | {"naive board", "published board"} == set(rows)
    for judge in params.judge_names:
        assert rows[judge]["log_loss_corrected"] < rows[judge]["log_loss_uncorrected"], rows[judge]
    assert rows["published board"]["log_loss_uncorrected"] < rows["naive board"]["log_loss_uncorrected"]
    assert 0.5 < rows["published board"]["accuracy_uncorrected"] <= 1.0


def biased_against_humans(seed: int, **overrides):
    """:func:`biased_battles` as cells."""
    battles, params = biased_battles(seed, **overrides)
    return [partial_cells(b, FAMILIES).cells for b in battles], params


def biased_battles(seed: int, judges: int = 4, humans: int = 1, human_length: float = 0.0, **overrides):
    """Battles whose LLM judges prefer the first position by 0.5 and longer answers by 1.0 per e-fold more than the
    human pools do (the pools: no position effect, ``human_length``; no affinity anywhere), with the parameters:
    each LLM judge's bias relative to the humans is known."""
    config = SimulationConfig(
        **{"battles": 16_000, "models": 12, "judges": judges, "human_judges": humans, "days": 1, "seed": seed,
           "len_model_sd": 0.5, "lambda0": 0.0, "sd_lambda": 0.0, **overrides}
    )  # fmt: skip
    params = draw_parameters(config)
    human = params.judge_human
    beta = np.where(human, human_length, human_length + 1.0)
    params = dataclasses.replace(params, gamma=np.where(human, 0.0, 0.5), beta=beta)
    return [battles for _, battles, _ in simulate_days(config, params)], params


def test_agreement_with_a_reference_judge_improves_when_its_biases_are_removed() -> None:
    # --reference JUDGE had no agreement table (it was made for anchors only): the human pool's verdicts are what the
    # LLM judges' fitted verdicts predict, with their own position and length effects and with the pool's in their
    # place.  Measured (seeds 24, 25): log loss 0.627-0.695 uncorrected, 0.548-0.571 corrected, accuracy 62-69% ->
    # 72-73%; the boards 0.589/0.562 naive, 0.560/0.546 published.
    cells, params = biased_against_humans(seed=24)
    (pool,) = params.judge_names[params.judge_human].tolist()
    fit = fit_with_reference(cells, reference=Reference("judges", (pool,)))
    rows = {row["judge"]: row for row in fit.summary()["agreement"]}
    llms = set(params.judge_names[~params.judge_human].tolist())
    assert set(rows) == llms | {"naive board", "published board"}  # the reference is not scored against itself
    for judge in llms:
        row = rows[judge]
        assert row["log_loss_corrected"] < row["log_loss_uncorrected"] - 0.04, row
        assert row["accuracy_corrected"] >= row["accuracy_uncorrected"], row
    assert rows["published board"]["log_loss_uncorrected"] < rows["naive board"]["log_loss_uncorrected"]
    assert not fit.notes  # every judge listed


def test_reference_rating_intervals_come_from_its_replicates_with_bootstrap() -> None:
    # With --bootstrap the published board's intervals are the replicates' (issue 11, item 5), also when the rating
    # is the reference's φ with a length term (φ ≠ θ).  Before, they fell back to the delta method's and the
    # replicates served only the bias table.  φ is evaluated exactly at each replicate's core (not linear in a_r).
    cells, params = simulated(seed=42, battles=6000, models=10, beta0=0.5, sd_beta=0.0, len_model_sd=0.6)
    anchors = anchor_cells(anchor_rows(params, 3000, 8, beta=0.5))
    fit = fit_with_reference(cells, reference=ANCHORS, config=ModelConfig(bootstrap=12), anchor_cells=anchors)
    board = fit.corrected
    assert fit.own_effects["length"].get("applied") is None  # the anchors' length is supported: φ ≠ θ
    assert board.uncertainty == "bootstrap" and board.boot_theta.shape == (12, len(board.models))
    # The same replicates refit apart from the reference fit, φ at each by the MAP's own map.
    data = with_judge(build_dataset(cells), anchors.to_arrow())  # as the fit codes them: the anchors last
    config = fit.config
    problem = bias_aware_problem(data, config)
    solution = solve_bias_aware(problem, config)
    cores = bootstrap_replicates(problem, solution, 12, 1, config.seed, config.tol, config.max_iter).cores
    phis = np.array([reference_map(problem, core, config.reference, config.length_clip)[0] for core in cores])
    expected = centre_within(phis)
    np.testing.assert_allclose(board.boot_theta, expected, rtol=0, atol=1e-9)
    low, high = percentile_interval(expected)
    np.testing.assert_allclose(board.ci_low, low, rtol=0, atol=1e-9)
    np.testing.assert_allclose(board.ci_high, high, rtol=0, atol=1e-9)
    # φ's replicates, not θ's: θ's differ by the length term, which moves the longest model's by ~β·x̄.
    thetas = centre_within(cores[:, problem.layout.theta])
    assert np.abs(thetas - expected).max() > 0.1
    # Their spread is the delta method's to within a bootstrap of 12: the same uncertainty, two estimates.
    ratio = expected.std(axis=0, ddof=1) / board.se
    assert 0.4 < float(np.median(ratio)) < 2.0, ratio


def test_reference_rating_bootstrap_warnings_name_the_published_intervals() -> None:
    # The warning of ratings outside their own bootstrap intervals was made on θ's intervals, and kept when the
    # published board became φ's: it named 1 model where 2 of the published ratings were outside their intervals.
    # (Seed 45: on seed 42's board one rating is outside since the scale of θ weighs the judges by their verdicts.)
    cells, params = simulated(seed=45, battles=6000, models=10, beta0=0.5, sd_beta=0.0, len_model_sd=0.6)
    anchors = anchor_cells(anchor_rows(params, 3000, 8, beta=0.5))
    config = ModelConfig(bootstrap=3, profile=False)
    board = fit_with_reference(cells, reference=ANCHORS, config=config, anchor_cells=anchors).corrected
    assert board.uncertainty == "bootstrap"
    rows = zip(board.models, board.rating, board.ci_low, board.ci_high, strict=True)
    outside = [m for m, r, lo, hi in rows if r < lo or r > hi]
    assert len(outside) >= 2
    (warning,) = [w for w in board.diagnostics["warnings"] if "outside their own bootstrap intervals" in w]
    assert f"{len(outside)} of {len(board.models)} published ratings" in warning
    assert f"({', '.join(outside)})" in warning


def _count_replicate_runs(monkeypatch) -> list[int]:
    """Each bootstrap run of a reference fit (the naive board's included), as its number of replicates."""
    from biasboard.ranking import fit as fit_module

    runs: list[int] = []
    real = fit_module.bootstrap_replicates

    def counted(problem, solution, replicates, *args, **kwargs):
        runs.append(replicates)
        return real(problem, solution, replicates, *args, **kwargs)

    monkeypatch.setattr(fit_module, "bootstrap_replicates", counted)
    return runs


def test_replicates_are_made_for_the_published_board_only(monkeypatch) -> None:
    # The gate switches corrections off, so the published board is refit without them: the all-on board it replaced
    # (compared by its ratings only) no longer pays for replicates (before: naive, all on, published).
    runs = _count_replicate_runs(monkeypatch)
    cells, params = simulated(seed=42, battles=6000, models=10, beta0=0.5, sd_beta=0.0, len_model_sd=0.6)
    anchors = anchor_cells(anchor_rows(params, 3000, 8, beta=0.5))
    fit = fit_with_reference(cells, reference=ANCHORS, config=ModelConfig(bootstrap=4), anchor_cells=anchors)
    assert fit.gate.disabled and runs == [4, 4]  # the naive board's, the published board's
    assert fit.all_on.uncertainty == "laplace" and fit.corrected.uncertainty == "bootstrap"


def test_a_board_the_gate_keeps_whole_gets_its_replicates_after_the_gate(monkeypatch) -> None:
    # Nothing switched off: the all-on board is published, its replicates added once the gate has said so, from
    # its kept solution (no refit); φ's replicates are those of the same replicates refit apart.
    runs = _count_replicate_runs(monkeypatch)
    cells, params = simulated(
        seed=61, judges=4, human_judges=1, battles=12000, models=10,
        gamma0=-0.5, sd_u=0.3, beta0=0.6, sd_beta=0.3, lambda0=0.5, sd_lambda=0.2,
    )  # fmt: skip
    human = next(n for n, h in zip(params.judge_names, params.judge_human, strict=True) if h)
    fit = fit_with_reference(cells, reference=Reference("judges", (human,)), config=ModelConfig(bootstrap=6))
    assert not fit.config.disabled and fit.own_effects["length"].get("applied") is None  # all on; φ ≠ θ
    assert runs == [6, 6] and fit.corrected.uncertainty == fit.all_on.uncertainty == "bootstrap"
    np.testing.assert_array_equal(fit.corrected.ci_low, fit.all_on.ci_low)  # one board, published and all on
    config = fit.config
    problem = bias_aware_problem(build_dataset(cells), config)
    cores = bootstrap_replicates(
        problem, solve_bias_aware(problem, config), 6, 1, config.seed, config.tol, config.max_iter
    ).cores
    phis = np.array([reference_map(problem, core, config.reference, config.length_clip)[0] for core in cores])
    np.testing.assert_allclose(fit.corrected.boot_theta, centre_within(phis), rtol=0, atol=1e-9)
    own = fit.bias.filter((pl.col("judge") == human) & (pl.col("effect") == "length"))
    assert own["boot_ci_low"].is_finite().all()  # the reference's own rows: the replicates' intervals


# --------------------------------------------------------------------------- style, relative to the reference


def styled_humans_and_llms(human: tuple[float, ...], llm: tuple[float, ...], seed: int, **overrides):
    """LLM judges (three by default) and one human pool with style counts; the pool's and the LLMs' style effects
    (header, list, bold) as given, no length effect; (cells, parameters, the pool's name)."""
    config = SimulationConfig(
        **{"battles": 30_000, "models": 16, "judges": 4, "human_judges": 1, "days": 1, "style": True, "sd_style": 0.0,
           "beta0": 0.0, "sd_beta": 0.0, "seed": seed, **overrides}
    )  # fmt: skip
    params = draw_parameters(config)
    effects = np.where(params.judge_human[:, None], np.asarray(human), np.asarray(llm))
    params = dataclasses.replace(params, style_effect=effects)
    cells = [partial_cells(battles, FAMILIES).cells for _, battles, _ in simulate_days(config, params)]
    (pool,) = params.judge_names[params.judge_human].tolist()
    return cells, params, pool


def style_slopes(board, data, params) -> np.ndarray:
    """The board's coefficients on each model's typical style differences, θ held (least squares)."""
    index = {m: i for i, m in enumerate(data.models)}
    truth = dict(zip(params.model_names.tolist(), params.theta, strict=True))
    rows = [index[m] for m in board.models]
    design = np.column_stack([np.ones(len(rows)), [truth[m] for m in board.models], typical_style(data)[rows]])
    return np.linalg.lstsq(design, board.rating, rcond=None)[0][2:]


def test_style_shared_with_the_reference_is_kept() -> None:
    # Judges and the human pool share their style preferences: nothing of them is a bias, so the published
    # board keeps them (what the pool concludes on each model's typical answers); the zero reference
    # (LMArena's style control) removes them.  Measured on seeds 1 and 2: header slopes 0.48 and 0.53
    # with the pool as reference, 0.04 and 0.03 with the zero reference.
    shared = (0.5, 0.3, 0.3)
    cells, params, pool = styled_humans_and_llms(shared, shared, seed=1)
    fit = fit_with_reference(cells, reference=Reference("judges", (pool,)))
    for effect, truth in zip(STYLE_EFFECTS, shared, strict=True):
        own = fit.own_effects[effect]
        assert own["ci_low"] <= truth <= own["ci_high"], (effect, own)
        rows = fit.gate.decisions.filter(pl.col("effect") == effect)
        assert rows.height == 3 and (not rows["enabled"].any() or (rows["excess"].abs() < 0.1).all()), rows
    zero = fit_with_reference(cells, reference=Reference())
    data = build_dataset(cells)
    kept, removed = style_slopes(fit.corrected, data, params), style_slopes(zero.corrected, data, params)
    assert kept[0] > 0.3 and abs(removed[0]) < 0.15, (kept, removed)
    assert kept.sum() > removed.sum() + 0.5, (kept, removed)


def test_style_excess_over_the_reference_is_corrected() -> None:
    # The pool has no style preference, the LLM judges a strong one: the gate corrects each judge's excess
    # (its own effect minus the pool's), and the board carries no style.
    human, llm = (0.0, 0.0, 0.0), (0.8, 0.5, 0.5)
    cells, params, pool = styled_humans_and_llms(human, llm, seed=2)
    fit = fit_with_reference(cells, reference=Reference("judges", (pool,)))
    for k, effect in enumerate(STYLE_EFFECTS):
        rows = fit.gate.decisions.filter(pl.col("effect") == effect)
        assert rows["enabled"].all(), rows
        for row in rows.iter_rows(named=True):
            assert abs(row["excess"] - (llm[k] - human[k])) < 3 * row["se"] + 0.05, row
        # The pool's own preference is not told from zero, so it is taken as zero (not added to the ratings),
        # and the bias table gives each judge's effect against zero: its whole preference.
        own = fit.own_effects[effect]
        assert own["ci_low"] <= 0.0 <= own["ci_high"] and own["applied"] == 0.0, (effect, own)
        table = fit.bias.filter((pl.col("effect") == effect) & pl.col("judge").is_in(rows["judge"].to_list()))
        assert table.height == 3 and (table["ci_low"] <= llm[k]).all() and (table["ci_high"] >= llm[k]).all(), table
    slopes = style_slopes(fit.corrected, build_dataset(cells), params)
    assert np.abs(slopes).max() < 0.15, slopes


def test_typical_style_is_each_models_mean_signed_difference() -> None:
    cells, params, _ = styled_humans_and_llms((0.0,) * 3, (0.0,) * 3, seed=3)
    data = build_dataset(cells)
    s = typical_style(data)
    assert s.shape == (len(data.models), 3) and np.abs(s).max() < 1.0
    # Models with more headers on average than the pool show a positive mean difference against their opponents.
    index = {m: i for i, m in enumerate(params.model_names.tolist())}
    log_mean = params.style_log_mean[[index[m] for m in data.models]]
    for k in range(3):
        assert np.corrcoef(s[:, k], log_mean[:, k])[0, 1] > 0.9
    assert not typical_style(build_dataset(simulated(seed=5, battles=500)[0])).any()  # no style counts: zeros


def _styled_battles(headers: dict[str, int], pairs: list[tuple[str, str]]) -> pa.Table:
    """One battle per ``pairs`` entry (each model's answers with ``headers[model]`` headers, no lists or bold)."""
    from biasboard.schemas.battle import STYLE_COUNT_COLUMNS

    from tests.conftest import battle_table

    n = len(pairs)
    counts = {c: [0] * n for c in STYLE_COUNT_COLUMNS}
    counts["header_count_a"] = [headers[a] for a, _ in pairs]
    counts["header_count_b"] = [headers[b] for _, b in pairs]
    return battle_table(
        n,
        judge=["judge-1"] * n,
        model_a=[a for a, _ in pairs],
        model_b=[b for _, b in pairs],
        winner=["model_a", "model_b"] * (n // 2) + ["model_a"] * (n % 2),
        family_a=["fam-x"] * n,
        family_b=["fam-x"] * n,
        judge_family=["fam-judge"] * n,
        **counts,
    )


def test_typical_style_differences_are_the_pairs_mean_differences() -> None:
    # By hand: A and B answer with 10 headers, C with none, every pair met equally (both orders).  A pair's mean
    # d is 0 for A-B and 1 for A-C and B-C, so what the reference concludes on typical answers differs by δ·1
    # between A and C.  Each model's mean d against its opponents (A: ½, C: −1) put 1.5 between them: φ
    # carried the reference's style preference M/(M − 1) times over (here 3/2).
    pairs = [p for x, y in (("A", "B"), ("A", "C"), ("B", "C")) for p in ((x, y), (y, x))] * 10
    data = build_dataset([partial_cells(_styled_battles({"A": 10, "B": 10, "C": 0}, pairs), FAMILIES).cells])
    s = dict(zip(data.models, typical_style(data)[:, 0], strict=True))
    assert s["A"] - s["C"] == pytest.approx(1.0) and s["B"] - s["C"] == pytest.approx(1.0)
    assert s["A"] - s["B"] == pytest.approx(0.0, abs=1e-12) and sum(s.values()) == pytest.approx(0.0, abs=1e-12)
    # Simulated (16 models): the differences of typical style match the pairs' mean differences, slope 1 (it was
    # M/(M − 1) = 1.067 with each model's mean against its opponents).
    cells, _, _ = styled_humans_and_llms((0.0,) * 3, (0.0,) * 3, seed=3)
    data = build_dataset(cells)
    pairs_ = data.pairs
    keep = (pairs_.a != pairs_.b) & (pairs_.n_style > 0)
    a, b, w, d = pairs_.a[keep], pairs_.b[keep], pairs_.n_style[keep], pairs_.style[keep, 0]
    m = len(data.models)
    total, count = np.zeros((m, m)), np.zeros((m, m))
    np.add.at(total, (a, b), w * d)
    np.add.at(total, (b, a), -w * d)
    np.add.at(count, (a, b), w)
    np.add.at(count, (b, a), w)
    upper = np.triu_indices(m, 1)
    met = count[upper] > 0
    mean_d = (total[upper] / np.where(count[upper] > 0, count[upper], 1.0))[met]
    s = typical_style(data)[:, 0]
    slope = np.polyfit(mean_d, (s[:, None] - s[None, :])[upper][met], 1)[0]
    assert abs(slope - 1.0) < 0.02, slope


def test_agreement_with_styled_anchors_counts_the_style_excess() -> None:
    # The human pool's verdicts, with their style counts, are the anchors; the LLM judges reward a style the pool
    # does not.  With each judge's excess removed (the anchors' effects in its place) its verdicts predict the
    # anchors' better, and the anchors' own style preference is told from zero (so it is not applied).
    cells, _, pool = styled_humans_and_llms((0.0, 0.0, 0.0), (1.0, 0.8, 0.8), seed=4)
    frames = [pl.from_arrow(c) for c in cells]
    judged = [f.filter(pl.col("judge") != pool) for f in frames]
    anchors = pl.concat([f.filter(pl.col("judge") == pool) for f in frames]).with_columns(judge=pl.lit(ANCHOR_JUDGE))
    fit = fit_with_reference(judged, reference=ANCHORS, anchor_cells=anchors)
    assert all(fit.own_effects[e]["ci_low"] <= 0.0 <= fit.own_effects[e]["ci_high"] for e in STYLE_EFFECTS)
    rows = {row["judge"]: row for row in fit.agreement if "sim-judge" in row["judge"]}
    assert len(rows) == 3
    for row in rows.values():  # measured: 0.067-0.104 nats better (0.005 when style was left out of both)
        assert row["log_loss_corrected"] < row["log_loss_uncorrected"] - 0.03, row


def test_anchors_without_style_counts_leave_style_against_zero_without_a_refit() -> None:
    # Battles with style counts, anchors without: the anchors have no style of their own, so the judges' style is
    # measured against zero, and nothing is switched off (or refitted) to say so.
    cells, params, _ = styled_humans_and_llms((0.5, 0.3, 0.3), (0.5, 0.3, 0.3), seed=8, battles=8000, models=10)
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 2000, 3)))
    for effect in STYLE_EFFECTS:
        assert fit.own_effects[effect]["source"].startswith("no data of the reference"), fit.own_effects[effect]
        assert (ANCHOR_JUDGE, effect) not in fit.config.disabled
    header = fit.bias.filter((pl.col("effect") == "header") & ~pl.col("judge").is_in([ANCHOR_JUDGE, "*"]))
    assert header["note"].str.starts_with("the judge's own effect").all(), header  # whole effects, said so
    overall = fit.bias.filter((pl.col("effect") == "header") & (pl.col("judge") == "*"))["note"].item()
    assert overall.startswith("the judges' mean, not the reference's"), overall  # the zero reference's, said so


def test_the_global_rows_under_a_reference_are_the_references_own_effects_and_say_so() -> None:
    """With a reference the '*' row of an effect the rating keeps the reference's own of is that effect (the global
    coefficient is the reference's), not the judges' population mean it is without a reference: it carried no word
    (or only the profile's), under a label, "all judges (global)", and a README that called it the population mean."""
    cells, _, pool = styled_humans_and_llms((0.6, 0.0, 0.0), (1.2, 0.5, 0.5), seed=3, battles=10_000, models=10)
    fit = fit_with_reference(cells, reference=Reference("judges", (pool,)), config=ModelConfig(profile=False))
    own = fit.own_effects
    assert own["header"].get("applied") is None and own["header"]["ci_high"] < 1.0, own["header"]  # kept, not 1.2
    star = {r["effect"]: r for r in fit.bias.filter(pl.col("judge") == "*").iter_rows(named=True)}
    kept = [e for e in ("position", "length", "affinity", *STYLE_EFFECTS) if not zero_reference_effect(own[e])]
    assert {"position", "header"} <= set(kept) and "affinity" not in kept, kept  # a human pool has no family
    for effect in kept:
        assert star[effect]["estimate"] == pytest.approx(own[effect]["estimate"]), effect
        assert star[effect]["note"].startswith("the reference's own effect"), (effect, star[effect]["note"])
    for effect in {"affinity", *STYLE_EFFECTS} - set(kept):
        assert star[effect]["note"].startswith("the judges' mean, not the reference's"), star[effect]["note"]
    none = fit_with_reference(cells, config=ModelConfig(profile=False))
    assert not none.bias.filter(pl.col("note").str.starts_with("the reference's own effect")).height  # population means


def test_excess_rows_carry_no_bootstrap_interval_of_the_whole_effect() -> None:
    # The bias table's replicate intervals are of each judge's whole effect; an excess row (its estimate the excess
    # over the reference) must not show them — they did not even contain the excess (measured: claude's position
    # excess 0.137 beside a bootstrap interval [-0.297, -0.106]).  The reference's own rows keep theirs.
    cells, params = simulated(seed=61, judges=5, human_judges=2, battles=8000, models=10)
    humans = [n for n, h in zip(params.judge_names, params.judge_human, strict=True) if h]
    fit = fit_with_reference(cells, reference=Reference("judges", (humans[0],)), config=ModelConfig(bootstrap=20))
    relative = fit.bias.filter(
        pl.col("note").str.contains("excess over the reference|tied to the reference")
        & (pl.col("note") != ZERO_REFERENCE_EXCESS_NOTE)
    )
    assert relative.height > 0 and relative["boot_ci_low"].is_nan().all() and relative["boot_ci_high"].is_nan().all()
    # Where the reference's own effect is taken as zero a judge's row is its whole effect: its replicates' interval
    # is its own, and kept.
    whole = fit.bias.filter(pl.col("note") == ZERO_REFERENCE_EXCESS_NOTE)
    assert whole["boot_ci_low"].is_finite().all() and whole["boot_ci_high"].is_finite().all(), whole
    own = fit.bias.filter((pl.col("judge") == humans[0]) & pl.col("effect").is_in(["position", "length"]))
    assert own.height == 2 and (own["boot_ci_low"] <= own["estimate"]).all() and own["boot_ci_high"].is_finite().all()


def test_where_the_reference_has_no_effect_the_table_says_so_on_its_rows_and_the_global_row() -> None:
    """An effect the reference's verdicts carry no data for (a human pool has no family: no affinity) or cannot tell
    from zero is taken as zero: its own rows said "disabled by configuration" and the '*' row — the reference's
    effect wherever it has one — read as the reference's, identified, while every rating applied zero."""
    cells, params = simulated(seed=61, judges=4, human_judges=1, battles=12000, models=10, beta0=0.6, sd_beta=0.3)
    human = next(n for n, h in zip(params.judge_names, params.judge_human, strict=True) if h)
    fit = fit_with_reference(cells, reference=Reference("judges", (human,)), config=ModelConfig(profile=False))
    zero = [e for e, v in fit.own_effects.items() if v.get("ci_low") is None or v.get("applied") == 0.0]
    kept = [e for e, v in fit.own_effects.items() if e not in zero and e != "discrimination"]
    assert "affinity" in zero and kept
    notes = {(r["judge"], r["effect"]): r["note"] for r in fit.bias.iter_rows(named=True)}
    for effect in zero:
        assert notes[human, effect].startswith("reference: " + fit.own_effects[effect]["source"][:20])
        assert notes["*", effect].startswith("the judges' mean, not the reference's"), notes["*", effect]
        # The other judges' rows are their own effects (their excess over a zero): said as the excess rows say theirs.
        others = fit.bias.filter(
            (pl.col("effect") == effect) & ~pl.col("judge").is_in([human, "*"]) & pl.col("enabled")
        )
        assert others.height and (others["note"] == ZERO_REFERENCE_EXCESS_NOTE).all(), others
    for effect in kept:
        assert not notes["*", effect].startswith("the judges' mean"), (effect, notes["*", effect])


def _gate_minus_bias_table(fit) -> float:
    """The largest difference between the gate's excess and the bias table's for a (judge, effect) the board
    corrects."""
    gate = fit.gate.decisions.filter("enabled").select("judge", "effect", "excess")
    table = gate.join(fit.corrected.bias.select("judge", "effect", "estimate"), on=["judge", "effect"])
    assert table.height == gate.height > 0
    return float((table["excess"] - table["estimate"]).abs().max())


def test_the_gate_and_the_bias_table_differ_only_where_a_correction_is_off() -> None:
    """Why one excess had two values in a report (QA: −0.111 in the gate table, −0.108 in the bias table): the gate
    tests in the fit with every correction on, the bias table is the published fit's.  With nothing switched off
    they are one fit and agree to the last digit (anchors with a length preference of their own, which the board
    keeps); with the judges' length excesses tied to the reference (a human pool), the position and affinity excesses
    the board corrects move, though the data are the same, and so they do where the anchors' own length, which their
    verdicts cannot tell from zero, is taken as zero after the gate (the gate tests against the anchors' estimate)."""
    cells, params = simulated(seed=21, gamma0=-0.3, sd_u=0.1, battles=6000, models=8, judges=3)
    fit = fit_with_reference(
        cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 2000, 1, beta=-0.4))
    )
    assert not fit.gate.disabled and not fit.unidentified and fit.own_effects["length"].get("applied") is None
    assert _gate_minus_bias_table(fit) < 1e-12
    fit = fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchor_cells(anchor_rows(params, 2000, 1)))
    assert not fit.gate.disabled and fit.own_effects["length"]["applied"] == 0.0
    assert _gate_minus_bias_table(fit) > 1e-3
    cells, params = simulated(seed=61, battles=6000, models=8, judges=4, human_judges=1)
    humans = tuple(name for name, human in zip(params.judge_names, params.judge_human, strict=True) if human)
    fit = fit_with_reference(cells, reference=Reference("judges", humans))
    assert {effect for _, effect in fit.gate.disabled} == {"length"}
    assert _gate_minus_bias_table(fit) > 1e-3


def test_a_prior_selected_global_correction_is_named_for_every_judge_not_by_its_star() -> None:
    """The global effect's judge is ``*`` in the fit's tables; the warning a user reads (console, summary, report)
    said "affinity correction of * is prior-selected" (AlpacaEval's real-layout folder), where the report's bias
    table calls the same row "all judges (global)"."""
    from types import SimpleNamespace

    from biasboard.transforms.snapshot import reference_warnings

    entry = {"applied": False, "effect": "affinity", "judge": "*", "if_applied": {"kendall_tau": 1.0}}
    named = {**entry, "judge": "gpt-4"}
    lines = reference_warnings(SimpleNamespace(gate=None, own_effects={}, unidentified=[entry, named]))  # type: ignore[arg-type]
    assert lines[0].startswith("affinity correction of all judges (global) is prior-selected"), lines
    assert lines[1].startswith("affinity correction of gpt-4 is prior-selected"), lines


def test_the_reference_is_described_as_the_fit_used_it() -> None:
    """A pattern matching two pools said "g* (2 judges, pooled as one rater ...)" without naming them, and two named
    judges "(pooled as one rater)", as if nothing of theirs was their own.  Several judges are one rater for the
    shared effects and keep their own discrimination (two a_j, their verdict-weighted geometric mean the rating's
    a_r)."""
    cells, params = biased_against_humans(seed=26, battles=4000, models=8, humans=2)
    pools = sorted(params.judge_names[params.judge_human].tolist())
    assert pools == ["human-pool-1", "human-pool-2"]
    both = fit_with_reference(cells, reference=Reference.parse("human-pool-*", False), config=ModelConfig(k=3))
    assert both.summary()["description"] == (
        "judges: human-pool-* (the 2 judges matching 'human-pool-*', human-pool-1 and human-pool-2, together: one "
        "rater for position, length and affinity, each judge with its own discrimination (the reference's: their "
        "geometric mean, weighted by their verdicts) and tie propensity)"
    )
    listed = fit_with_reference(cells, reference=Reference.parse(",".join(pools), False), config=ModelConfig(k=3))
    assert listed.summary()["description"].startswith("judges: human-pool-1, human-pool-2 (the 2 judges together: ")
    one = fit_with_reference(cells, reference=Reference.parse(pools[0], False), config=ModelConfig(k=3))
    assert one.summary()["description"] == "judge: human-pool-1"
    assert "pooled" not in one.summary()["description"]
    # The gate's warning names them too (it said "reference judges (N verdicts)", plural for one judge, no name).
    from biasboard.transforms.snapshot import reference_warnings

    assert reference_warnings(one)[0].startswith(f"reference judge human-pool-1 ({one.k:,} verdicts): the gate")
    # ... the judges a pattern matched, not the pattern (it said "reference judge claude-sim-judge-[1]"), and a
    # voter pool by its count
    said = f"reference judges human-pool-1, human-pool-2 ({both.k:,} verdicts): the gate"
    assert reference_warnings(both)[0].startswith(said)
    bracket = fit_with_reference(cells, reference=Reference.parse("human-pool-[1]", False), config=ModelConfig(k=3))
    assert reference_warnings(bracket)[0].startswith(f"reference judge human-pool-1 ({bracket.k:,} verdicts): the gate")
    voters = dataclasses.replace(both, raters=tuple(f"human-pool-{i}" for i in range(1, 8)))
    assert reference_warnings(voters)[0].startswith(f"reference 7 judges matching human-pool-* ({both.k:,} verdicts)")
    matched = Reference.parse("human-pool-1*", False)
    assert matched.describe(matched.resolve(params.judge_names.tolist()), ["position"]) == (
        "judge: human-pool-1 (the one judge matching 'human-pool-1*')"
    )


def test_an_affinity_that_is_each_models_own_property_is_not_applied_whatever_the_number_of_judges() -> None:
    """One judge's battles split among voter-judges of its family: the affinity covariate is then the same function of
    the model for every judge, collinear with θ.  At 1–10 judges its profile was flat and it was left off; at 100 and
    1,000 the judges' discriminations (which multiply θ's differences, not the covariate) made the profile rise 6.8
    and 63.5 nats, and +6.0 (true 0.41) was applied: gpt models moved 900 points.  Now it is prior-selected, not
    applied, at every count; judges of two families (whose own-family models differ) still identify it."""
    config = SimulationConfig(battles=6000, models=30, judges=1, days=1, seed=21)
    battles = pa.concat_tables([b for _, b, _ in simulate_days(config)])
    for voters in (3, 300):
        judge = pa.array([f"crowd/v{i % voters}" for i in range(battles.num_rows)])
        split = battles.set_column(battles.schema.get_field_index("judge"), "judge", judge)
        cells = partial_cells(split, FAMILIES).cells
        data = build_dataset(cells)
        assert is_model_difference(data, np.ones(len(data.judges), bool))
        fit = fit_with_reference(cells, reference=Reference())
        assert ("*", "affinity") in fit.config.disabled, voters
        (entry,) = [u for u in fit.unidentified if u["effect"] == "affinity"]
        assert not entry["applied"]
        # the all-on board's bias table agrees (it said identified=True beside its "prior-selected" note at 300
        # voters: the profile's range is wide there, from the judges' discriminations)
        row = fit.all_on.bias.filter((pl.col("judge") == "*") & (pl.col("effect") == "affinity")).row(0, named=True)
        assert row["note"].startswith("prior-selected") and row["identified"] is False, row
    cells, _ = simulated(seed=5, judges=4)  # judges of several families
    data = build_dataset(cells)
    assert len(set(data.judge_families)) > 1
    assert not is_model_difference(data, np.ones(len(data.judges), bool))


def test_a_reference_whose_own_effect_is_undetermined_does_not_make_the_gate_correct_the_judges() -> None:
    """Every judge, the human pool too, prefers length alike (β 0.3); 300 of the pool's verdicts leave its own length
    undetermined.  It was taken as zero *before* the gate, which then tested the judges against an exact 0 and
    enabled every length correction at Holm p 1.5e-13: the board lost the length preference the reference has
    (its coefficient on the models' mean log length −0.001).  The gate now tests the excesses over the reference's
    estimate with its uncertainty: none is supported, the reference's undetermined length is still taken as zero in
    its rating, and the judges' shared preference stays in the ratings (coefficient 0.31, as with all the pool's
    verdicts)."""
    config = SimulationConfig(battles=20_000, models=8, judges=4, human_judges=1, days=1, seed=2, sd_u=0.0,
                              sd_beta=0.0, lambda0=0.0, sd_lambda=0.0)  # fmt: skip
    params = draw_parameters(config)
    battles = pl.concat([pl.from_arrow(b) for _, b, _ in simulate_days(config)])
    (human,) = [name for name, h in zip(params.judge_names, params.judge_human, strict=True) if h]
    few = pl.concat([battles.filter(pl.col("judge") != human), battles.filter(pl.col("judge") == human).head(300)])
    fit = fit_with_reference(partial_cells(few.to_arrow(), FAMILIES).cells, reference=Reference("judges", (human,)))
    length = fit.gate.decisions.filter(pl.col("effect") == "length")
    assert length.height == 3 and not length["enabled"].any(), length
    assert fit.own_effects["length"]["applied"] == 0.0
    judges = fit.corrected.bias.filter((pl.col("effect") == "length") & ~pl.col("judge").is_in([human, "*"]))
    assert judges.height == 3 and (judges["note"] == GATED_OFF_ZERO_REFERENCE_NOTE).all()  # not "by configuration"
    sides = [few.select(model=f"model_{s}", log_length=pl.col(f"len_{s}").log()) for s in "ab"]
    mean_log_length = dict(pl.concat(sides).group_by("model").agg(pl.col("log_length").mean()).iter_rows())
    theta = dict(zip(params.model_names, params.theta, strict=True))
    models = list(fit.corrected.models)
    design = np.column_stack([[theta[m] for m in models], [mean_log_length[m] for m in models], np.ones(len(models))])
    kept = np.linalg.lstsq(design, fit.corrected.rating, rcond=None)[0][1]
    assert 0.2 < kept < 0.45, kept


def _crowd_and_openai_judges(
    judges: tuple[tuple[str, float, int], ...] = (("gpt-4", 1.0, 6000),),
) -> tuple[pa.Table, dict[str, float], list[str]]:
    """Battles of a crowd (family human: no model of its own family; 6,000 verdicts) and OpenAI judges, each
    (name, own-family preference, verdicts), on random pairs of 15 models, 5 of them OpenAI's: (battles, true θ,
    models)."""
    import datetime as dt

    rng = np.random.default_rng(0)
    models = [f"gpt-{i}" for i in range(5)] + [f"llama-{i}" for i in range(5)] + [f"mistral-{i}" for i in range(5)]
    theta = dict(zip(models, rng.normal(0, 1, len(models)), strict=True))
    rows = []
    for judge, lam, verdicts in (("crowd", 0.0, 6000), *judges):
        for k in range(verdicts):
            a, b = rng.choice(models, 2, replace=False)
            p = 1 / (1 + np.exp(-(theta[a] - theta[b] + lam * (a.startswith("gpt") - b.startswith("gpt")))))
            rows.append((f"{judge}:{k}", judge, a, b, "model_a" if rng.random() < p else "model_b"))
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    battles = pa.table(
        {
            "battle_id": [r[0] for r in rows],
            "ts": pa.array([ts] * len(rows), pa.timestamp("us", "UTC")),
            "judge": [r[1] for r in rows],
            "model_a": [r[2] for r in rows],
            "model_b": [r[3] for r in rows],
            "winner": [r[4] for r in rows],
            "judge_family": ["human" if r[1] == "crowd" else "openai" for r in rows],
        }
    )
    return battles, theta, models


def test_an_llm_judges_affinity_beside_a_judge_of_no_family_on_the_same_pairs_is_identified_and_applied() -> None:
    """A crowd (family human: no model of its own family) and an OpenAI judge on the same pairs: θ is pinned by the
    crowd, so the judge's excess on OpenAI models is its affinity, measurable.  is_model_difference read only the
    weighing judge's cells, called it a model's own property and left it off: the OpenAI models were rated 0.53
    logits too high (true affinity +1.0, estimated +1.09 with a 150-nat profile), and LLMFAO's crowd + GPT-4 +
    GPT-3.5 board lost its affinity correction the same way."""
    battles, theta, models = _crowd_and_openai_judges()
    cells = partial_cells(battles, FAMILIES).cells
    problem = bias_aware_problem(build_dataset(cells), ModelConfig())
    from biasboard.ranking.model import AFF

    assert not is_model_difference(problem.data, problem.spec.masks[AFF] > 0)
    fit = fit_with_reference(cells, reference=Reference())
    assert ("*", "affinity") not in fit.config.disabled
    rating = dict(zip(fit.corrected.models, fit.corrected.rating, strict=True))
    error = [rating[m] - theta[m] for m in models]
    gpt_excess = np.mean(error[:5]) - np.mean(error[5:])
    assert abs(gpt_excess) < 0.15, gpt_excess  # measured: +0.533 before, -0.031 after


def test_with_a_reference_of_no_family_a_judges_whole_affinity_is_weighed_against_its_whole_prior() -> None:
    """With the crowd as reference (it has no affinity of its own), the OpenAI judge's excess is its whole affinity,
    global coefficient and deviation: weighed against the deviation's prior alone (SD 0.25), a strong one whose
    likelihood still rises where the prior stops it read as barely informed and was left out of the gate's test
    (LLMFAO's GPT-4: +1.34, SE 0.25, z 5.4, uncorrected).  Against the whole effect's prior it is tested and
    corrected.  (Beside a second OpenAI judge, informed: alone, an uninformed excess is tested anyway.)"""
    battles, _, _ = _crowd_and_openai_judges((("gpt-4", 6.0, 300), ("gpt-3.5", 0.0, 6000)))
    fit = fit_with_reference(partial_cells(battles, FAMILIES).cells, reference=Reference("judges", ("crowd",)))
    decisions = fit.gate.decisions.filter(pl.col("effect") == "affinity")
    gpt4 = decisions.filter(pl.col("judge") == "gpt-4").row(0, named=True)
    assert gpt4["z"] > 5 and gpt4["group_df"] == 2, gpt4
    assert gpt4["enabled"] and "barely inform" not in gpt4["reason"], gpt4
    assert ("gpt-4", "affinity") not in fit.config.disabled


@pytest.mark.slow
def test_bench_reference_voters_prints_every_gate_group(tmp_path):
    """``bench/reference_voters.py --smoke`` prints each of the gate's test groups: the other pool's voters and the LLM
    judges are tested apart for every effect (``gate.judge_pools``), and one row per effect showed the pool's group
    alone — the LLM judges' position and length decisions were not printed."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "reference_voters.py"
    done = subprocess.run(
        [sys.executable, str(script), "--smoke", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    groups = re.findall(r"^  gate (\w+)( \(human-pool-2/\*\))? +([\d,]+) judges", done.stdout, re.M)
    assert ("position", " (human-pool-2/*)", "500") in groups, done.stdout
    assert ("position", "", "2") in groups, done.stdout  # the two LLM judges, a group of their own
    assert ("affinity", "", "2") in groups, done.stdout


def test_a_graded_only_model_rated_at_the_pools_mean_length_is_said() -> None:
    """Under a reference with a length preference, φ adds β_r·x̄_m, x̄_m read from the battles' lengths.  A model
    graded but never in a battle has none (its grades' lengths are not stored), so its φ takes the pool's mean
    length (x̄ = 0) while its neighbours take their own: published without a word.  Said now, naming the models."""
    from tests.test_ranking_model import _cells, _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=8, rows=400)
    config = ModelConfig(profile=False, posterior_draws=200)
    fit = fit_with_reference(battles, grades, reference=Reference.parse("judge-0", False), config=config)
    assert fit.own_effects["length"]["ci_low"] > 0  # a length preference φ keeps
    said = [w for w in fit.corrected.diagnostics["warnings"] if "mean length" in w]
    assert said == [
        "reference rating: m6, m7 have no answer length in any battle (graded only, or lengths missing), so their "
        "rating takes the reference's length preference at the pool's mean length, not at their own (a grade's "
        "length is not stored)"
    ], said
    plain = fit_with_reference(battles, reference=Reference.parse("judge-0", False), config=config)
    assert not [w for w in plain.corrected.diagnostics["warnings"] if "mean length" in w]
