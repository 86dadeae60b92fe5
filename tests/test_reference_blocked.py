"""``--reference`` with the judge-blocked solver (issue 11: arena logs name each voter as a judge).

The gate, the relative bias table and the reference rating need covariances across judges; the blocked
solver has no dense covariance, so they come from its factorisation (``arrowhead.row_covariance``).  They
must equal the dense path's on a case both solvers run, stay O(J) in memory, and work end to end on a
refresh whose reference is a pool of voters named by a pattern.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
import scipy.stats  # noqa: F401  (imported before tracing: the gate imports it on first use)
from biasboard.ranking import reference as ref_module
from biasboard.ranking.arrowhead import BlockCovariance, row_covariance
from biasboard.ranking.composite import godambe_covariance
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.data import build_dataset
from biasboard.ranking.fit import fit_bias_aware, solve_bias_aware
from biasboard.ranking.gate import GATE_COLUMNS, LISTED_JUDGES, GateResult, excess_vectors, run_gate, wald_group
from biasboard.ranking.gate import row_covariance as gate_rows
from biasboard.ranking.problem import bias_aware_problem
from biasboard.ranking.reference import (
    Reference,
    fit_with_reference,
    own_effects,
    relative_bias,
    unidentified_effects,
    with_rating,
)
from biasboard.ranking.reference_rating import discrimination_row, reference_map
from biasboard.schemas.errors import InputError
from biasboard.simulate import SimulationConfig, simulate_days
from biasboard.transforms.cells import partial_cells

from tests.test_judge_blocks import _graded_tables
from tests.test_reference import (
    ANCHORS,
    FAMILIES,
    anchor_cells,
    anchor_rows,
    biased_battles,
    simulated,
    styled_humans_and_llms,
)

REL = 1e-8


def _close(x: np.ndarray, y: np.ndarray, rel: float = REL) -> bool:
    x, y = np.asarray(x, float), np.asarray(y, float)
    assert np.array_equal(np.isnan(x), np.isnan(y))
    ok = ~np.isnan(x)
    return bool(np.all(np.abs(x[ok] - y[ok]) <= rel * np.maximum(1.0, np.abs(x[ok]))))


@pytest.fixture(scope="module")
def humans_and_llms():
    cells, params = simulated(seed=61, judges=6, human_judges=2, battles=8000, models=10)
    humans = [n for n, h in zip(params.judge_names, params.judge_human, strict=True) if h]
    return cells, humans


def test_reference_with_the_blocked_solver_equals_the_dense_path(humans_and_llms):
    cells, humans = humans_and_llms
    _assert_blocked_equals_dense(cells, humans[0])


def test_style_relative_to_the_reference_with_the_blocked_solver_equals_the_dense_path():
    # The human pool shares the header preference and has none for bold: both kinds of style reference.
    cells, _, pool = styled_humans_and_llms((0.5, 0.3, 0.0), (0.5, 0.6, 0.4), seed=7, battles=8000, models=10)
    fits = _assert_blocked_equals_dense(cells, pool)
    own = fits["dense"].own_effects
    assert own["header"].get("applied") is None and own["bold"]["applied"] == 0.0, own


def _assert_blocked_equals_dense(cells, reference: str) -> dict:
    """Both solvers' reference fits, asserted equal (decisions identical, numbers to :data:`REL`)."""
    fits = {
        s: fit_with_reference(cells, reference=Reference("judges", (reference,)), config=ModelConfig(judge_solver=s))
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    gd, gb = d.gate.decisions, b.gate.decisions
    # Gate decisions identical; the evidence behind them equal to 1e-8.
    assert gd.select("judge", "effect", "enabled", "group_df").equals(
        gb.select("judge", "effect", "enabled", "group_df")
    )
    assert gd["enabled"].any() and not gd["enabled"].all()  # both outcomes occur in this case
    for col in ("excess", "se", "group_chi2", "group_p", "group_p_holm"):
        assert _close(gd[col].to_numpy(), gb[col].to_numpy()), col
    # z and ½z² are ratios of those two: a 1e-9 difference in an SE of 0.05 is 2e-8 of z (measured with style
    # excesses), so they are checked as what each fit derives them from, on the SE and excess compared above.
    for g in (gd, gb):
        assert np.array_equal(g["z"].to_numpy(), (g["excess"] / g["se"]).to_numpy())
        assert np.array_equal(g["gain_nats"].to_numpy(), (0.5 * g["z"] * g["z"]).to_numpy())
    assert d.config.disabled == b.config.disabled and d.unidentified == b.unidentified
    # The published (reference-relative) bias table and the reference rating.
    assert d.bias.select("judge", "effect", "enabled", "identified", "note").equals(
        b.bias.select("judge", "effect", "enabled", "identified", "note")
    )
    for col in ("estimate", "ci_low", "ci_high"):
        assert _close(d.bias[col].to_numpy(), b.bias[col].to_numpy()), col
    for board in ("corrected", "all_on"):
        for name in ("rating", "se", "ci_low", "ci_high", "p_top_k"):
            assert _close(getattr(getattr(d, board), name), getattr(getattr(b, board), name)), (board, name)
    for effect, own in d.own_effects.items():
        for key in ("estimate", "ci_low", "ci_high"):
            if own[key] is not None:
                assert _close(own[key], b.own_effects[effect][key]), (effect, key)
    return fits


def test_anchors_with_the_blocked_solver_equal_the_dense_path():
    cells, params = simulated(seed=23, battles=6000, models=8, beta0=1.0, sd_beta=0.0, len_model_sd=0.5)
    anchors = anchor_cells(anchor_rows(params, 1500, 7))
    fits = {
        s: fit_with_reference(cells, reference=ANCHORS, anchor_cells=anchors, config=ModelConfig(judge_solver=s))
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    assert d.gate.decisions.select("judge", "effect", "enabled").equals(
        b.gate.decisions.select("judge", "effect", "enabled")
    )
    for col in ("excess", "se", "group_chi2"):
        assert _close(d.gate.decisions[col].to_numpy(), b.gate.decisions[col].to_numpy()), col
    assert _close(d.corrected.ci_low, b.corrected.ci_low) and len(d.agreement) == len(b.agreement) > 0
    for row_d, row_b in zip(d.agreement, b.agreement, strict=True):
        assert row_d["judge"] == row_b["judge"]
        assert _close(row_d["log_loss_uncorrected"], row_b["log_loss_uncorrected"])


def test_row_covariance_is_the_inverse_hessian(humans_and_llms):
    """The blocked row covariance against Σ built column by column from the factor's own solves: the
    judges' excesses (two groups: tied to the reference, and a whole effect), the reference's mean log a_r
    (through the centring constraint), globals and θ."""
    cells, humans = humans_and_llms
    data = build_dataset(cells)
    reference = frozenset({humans[0]})
    config = ModelConfig(judge_solver="blocked", reference=reference)
    problem = bias_aware_problem(data, config)
    solution = solve_bias_aware(problem, config)
    factor = solution.factor
    assert factor is not None and len(factor.U)  # the centring of log a_j: a Woodbury constraint
    n = problem.layout.n_core
    sigma = np.array([factor.full_solve(e) for e in np.eye(n)])
    sigma = 0.5 * (sigma + sigma.T)
    for t in (0, 1, 2):  # position and length tied to the reference; affinity (humans have none): whole effect
        _, rows, _ = excess_vectors(problem, t, reference)
        want = (rows @ (rows @ sigma).T).astype(float)
        got = row_covariance(factor, rows)
        assert np.max(np.abs(got.dense() - want)) < 1e-10 * np.abs(want).max()
        assert np.max(np.abs(got.diagonal() - np.diag(want))) < 1e-10 * np.abs(want).max()
        d = rows @ solution.core
        w_blocked, df = got.wald(d)
        w_dense, df_dense = wald_group(d, want)
        assert df == df_dense and abs(w_blocked - w_dense) < 1e-8 * w_dense
    mixed = sp.vstack(
        [sp.eye(12, n, format="csr"), sp.csr_matrix(discrimination_row(problem, reference)), rows]
    ).tocsr()
    want = mixed @ (mixed @ sigma).T
    assert np.max(np.abs(row_covariance(factor, mixed).dense() - want)) < 1e-10 * np.abs(want).max()


def _reference_steps(problem, fit, reference: frozenset[str], k: int) -> None:
    """What a reference fit does beyond the fits themselves: gate, identified-only check, relative bias
    table, reference rating and the reference's own effects."""
    gate = run_gate(problem, fit, reference, k)
    unidentified_effects(problem, fit, reference, frozenset(gate.disabled))
    relative_bias(problem, fit, reference)
    phi, jac = reference_map(problem, fit.state.core, reference, 1.5)
    assert jac is not None
    with_rating(fit, phi, jac, fit.n_battles, 200, 0)
    own_effects(problem, fit, reference)


def _split_voters(battles, voters: int, rng: np.random.Generator):
    """Each human-pool battle re-labelled as cast by one of ``voters`` voters of its pool (``pool/vK``)."""
    frame = pl.from_arrow(battles)
    voter = pl.Series(rng.integers(0, voters, frame.height)).cast(pl.String)
    human = pl.col("judge").str.starts_with("human-pool")
    return frame.with_columns(
        pl.when(human).then(pl.col("judge") + "/v" + voter).otherwise(pl.col("judge")).alias("judge")
    ).to_arrow()


def _voters(n: int, seed: int = 3):
    """Cells of two LLM judges and one human pool split into ``n`` voters (``human-pool-1/vK``)."""
    rng = np.random.default_rng(seed)
    config = SimulationConfig(battles=12 * n, models=8, judges=3, human_judges=1, days=1, seed=seed)
    return build_dataset(
        [partial_cells(_split_voters(battles, n, rng), FAMILIES).cells for _, battles, _ in simulate_days(config)]
    )


def _reference_peak(n: int) -> tuple[int, int]:
    data = _voters(n)
    llms = frozenset(j for j in data.judges if "/" not in j)
    reference = frozenset(j for j in data.judges if j.startswith("human-pool-1/"))
    config = ModelConfig(reference=reference, profile=False, judge_solver="blocked")
    problem = bias_aware_problem(data, config)
    fit = fit_bias_aware(data, config=config)
    tracemalloc.start()
    try:
        _reference_steps(problem, fit, reference, 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(llms) == 2
    return len(data.judges), peak


def test_profiles_with_a_voter_pool_as_reference_free_the_llm_judges_only(monkeypatch):
    """Under a reference the deviations' prior is the wide excess prior; a profile still frees only the judges
    whose battles pin their deviation against the model's ordinary deviation prior (the LLM judges), so the
    other pool's 500 voters keep their prior and every profile point is solved along the path.  Measured before:
    the voters counted as pinned against the excess prior, 3 of 4 far points fell back to cold fits (2.9 s
    against 0.5 s now)."""
    from biasboard.ranking import diagnostics

    rng = np.random.default_rng(3)
    config = SimulationConfig(battles=20_000, models=12, judges=4, human_judges=2, days=1, seed=3)
    data = build_dataset(
        [partial_cells(_split_voters(b, 500, rng), FAMILIES).cells for _, b, _ in simulate_days(config)]
    )
    reference = frozenset(j for j in data.judges if j.startswith("human-pool-1/"))
    cold, informed = [], []
    profile_cold, is_informed = diagnostics._profile_cold, diagnostics._informed

    def recorded_informed(*args):
        informed.append(is_informed(*args))
        return informed[-1]

    monkeypatch.setattr(diagnostics, "_profile_cold", lambda *a, **k: cold.append(a[3]) or profile_cold(*a, **k))
    monkeypatch.setattr(diagnostics, "_informed", recorded_informed)
    monkeypatch.setenv("BIASBOARD_PROFILE_WORKERS", "1")  # the points in this process, where the patches are
    fit = fit_bias_aware(data, config=ModelConfig(reference=reference, judge_solver="blocked"))
    llms = np.array(["/" not in j for j in data.judges])
    assert informed and all(np.array_equal(free, free & llms) for free in informed)  # voters never freed
    assert cold == []
    profiles = fit.diagnostics["profile_likelihood"]
    assert all(profiles[e]["range_nats"] > 100 and "warning" not in profiles[e] for e in profiles), profiles


def test_the_board_applying_prior_selected_corrections_is_fit_for_its_ratings_only(monkeypatch):
    """The board that applies the prior-selected corrections is only compared with the published one (τ, rank
    moves): it is fit without bootstrap replicates or profiles (measured: 10.0 → 6.1 s of a 3,000-voter
    reference fit with 10 replicates), and the comparison is the one the full fit gives.  The all-on board, which
    the gate replaced, is published without replicates too: they are made for the published board only."""
    import dataclasses

    from biasboard.ranking import fit as fit_module
    from biasboard.ranking import reference as ref_module
    from biasboard.simulate import draw_parameters

    config = SimulationConfig(battles=20_000, models=20, judges=4, human_judges=2, days=1, seed=3, sd_beta=0.0)
    params = draw_parameters(config)
    gamma = params.gamma.copy()
    gamma[params.judge_names.tolist().index("human-pool-2")] += 1.0  # the other pool's voters: a position excess
    params = dataclasses.replace(params, gamma=gamma)
    rng = np.random.default_rng(0)
    data = build_dataset(
        [partial_cells(_split_voters(b, 1000, rng), FAMILIES).cells for _, b, _ in simulate_days(config, params)]
    )
    configs = []
    publish = fit_module.publish_bias_aware

    def spy(problem, solution, config, **kwargs):
        configs.append(config)
        return publish(problem, solution, config, **kwargs)

    monkeypatch.setattr(ref_module, "publish_bias_aware", spy)  # every board of the reference fit is published here
    fit = fit_with_reference(data, reference=Reference.parse("human-pool-1/*", False), config=ModelConfig(bootstrap=3))
    assert fit.unidentified and fit.gate.disabled and len(configs) == 3  # all on, published, the comparison
    assert [(c.profiles, c.bootstrap) for c in configs] == [("full", 0), ("full", 3), ("off", 0)]
    refit = fit_module.fit_bias_aware
    full = refit(data, config=dataclasses.replace(configs[2], profile=True, diagnostics="full", bootstrap=3))
    np.testing.assert_allclose(refit(data, config=configs[2]).rating, full.rating, rtol=0, atol=1e-10)


def test_reference_steps_memory_is_linear_in_the_judges():
    """The reference's own steps on a voter fit, 1,000 → 4,000 voter-judges: the traced peak grows ~4x (a
    J × J matrix would grow 16x, and at 4,000 judges one alone is 128 MB)."""
    (j_small, small), (j_large, large) = _reference_peak(1000), _reference_peak(4000)
    assert j_large > 3.5 * j_small
    assert large < 6 * small, (small, large)
    assert large < j_large**2 * 8 / 4, large


def test_the_summary_lists_the_largest_excesses_of_a_large_group():
    rng = np.random.default_rng(0)
    n = 3 * LISTED_JUDGES
    z = rng.normal(size=n)
    rows = {c: np.ones(n) for c in ("excess", "se", "gain_nats", "group_chi2", "group_p", "group_p_holm")}
    frame = pl.DataFrame(
        {"judge": [f"v{i}" for i in range(n)], "effect": ["length"] * n, "enabled": [False] * n, **rows, "z": z}
    ).with_columns(group_df=pl.lit(n), reason=pl.lit("tied"))
    small = frame.head(3).with_columns(effect=pl.lit("position"), enabled=pl.lit(True))
    gate = GateResult(
        pl.concat([small, frame], how="diagonal").select(list(GATE_COLUMNS)),
        frozenset((f"v{i}", "length") for i in range(n)),
        100,
        0.05,
    )
    out = gate.to_json()
    listed = [r for r in out["decisions"] if r["effect"] == "length"]
    top = {f"v{i}" for i in np.argsort(-np.abs(z))[:LISTED_JUDGES]}
    assert {r["judge"] for r in listed[:-1]} == top and listed[-1]["judge"] == f"({n - LISTED_JUDGES} more judges)"
    assert listed[-1]["excess"] is None and listed[-1]["enabled"] is False
    assert [r["judge"] for r in out["decisions"] if r["effect"] == "position"] == ["v0", "v1", "v2"]
    assert {judge for judge, _ in out["disabled"]} == top and "of 153 (judge, effect) decisions" in out["method"]


def test_agreement_with_a_pool_of_voters_as_reference(monkeypatch):
    """``--reference 'human-pool-1/*'``: every verdict of the pool's voters is what the other judges predict, with
    the pool's shared coefficients (its length preference 0.4 here) as the corrected rows' effects; its voters are
    not scored, and of the 102 other judges the 50 with the most battles are (the LLM judges among them).
    Measured (seed 5): LLM judges 0.670/0.694 → 0.573/0.576 nats; the other pool's voters, which have no bias
    relative to the reference, are a test group of their own (:func:`~biasboard.ranking.gate.judge_pools`) and
    stay tied (0.575 both; they were corrected with the LLM judges' group, 0.604 → 0.575)."""
    battles, params = biased_battles(seed=5, human_length=0.4, judges=4, humans=2)
    rng = np.random.default_rng(5)
    cells = [partial_cells(_split_voters(b, 100, rng), FAMILIES).cells for b in battles]
    fit = fit_with_reference(cells, reference=Reference.parse("human-pool-1/*", False))
    assert fit.n_raters == 100 and fit.own_effects["length"].get("applied") is None  # the pool's 0.4: applied
    rows = {row["judge"]: row for row in fit.agreement}
    judges = [name for name in rows if name not in ("naive board", "published board")]
    assert len(judges) == LISTED_JUDGES and not any(name.startswith("human-pool-1/") for name in judges)
    assert any(note.startswith("agreement with the reference judges: the 50 judges") for note in fit.notes)
    llms = params.judge_names[~params.judge_human].tolist()
    for llm in llms:
        assert rows[llm]["log_loss_corrected"] < rows[llm]["log_loss_uncorrected"] - 0.04, rows[llm]
    voters = [name for name in judges if name.startswith("human-pool-2/")]
    assert voters
    mean = {key: np.mean([rows[v][f"log_loss_{key}"] for v in voters]) for key in ("corrected", "uncorrected")}
    assert mean["corrected"] == mean["uncorrected"], mean  # tied: nothing of theirs is corrected
    assert not fit.gate.decisions.filter(pl.col("judge").str.starts_with("human-pool-2/"))["enabled"].any()
    assert rows["published board"]["log_loss_uncorrected"] < rows["naive board"]["log_loss_uncorrected"]
    # The yardstick is the pool's: a zero reference in its place predicts the pool's verdicts worse.
    real = ref_module.reference_effects
    monkeypatch.setattr(ref_module, "reference_effects", lambda problem, core: 0.0 * real(problem, core))
    zero = {row["judge"]: row for row in fit_with_reference(cells, reference=fit.reference).agreement}
    for judge in llms:
        assert rows[judge]["log_loss_corrected"] < zero[judge]["log_loss_corrected"], judge


def test_reference_patterns_select_voters():
    judges = ("gpt-judge", "human-pool-1/v0", "human-pool-1/v1", "human-pool-2/v0")
    ref = Reference.parse("human-pool-1/*", False)
    assert ref.kind == "judges" and ref.has_patterns
    assert ref.resolve(judges) == {"human-pool-1/v0", "human-pool-1/v1"}
    assert Reference.parse("human-pool-1/*,gpt-judge", False).resolve(judges) == {
        "gpt-judge",
        "human-pool-1/v0",
        "human-pool-1/v1",
    }
    with pytest.raises(InputError, match="no judge matches human-pool-3/"):
        Reference.parse("human-pool-3/*", False).resolve(judges)
    assert "the 3 judges matching 'human-pool-1/*'" in ref.describe(["human-pool-1/v0", "human-pool-1/v1", "v2"])


def test_a_judge_named_with_glob_characters_is_named_literally_first():
    """``--reference 'judge[1]'`` was always a pattern, which matches ``judge1`` and never the judge ``judge[1]``
    itself: a judge of that exact name is that judge; with no such judge the name is still a pattern."""
    judges = ("judge[1]", "judge1", "judge*", "judge2", "human-pool-1/v0")
    assert Reference.parse("judge[1]", False).resolve(judges) == {"judge[1]"}
    assert Reference.parse("judge*", False).resolve(judges) == {"judge*"}
    assert Reference.parse("judge[1],judge?", False).resolve(judges) == {"judge[1]", "judge1", "judge2", "judge*"}
    assert Reference.parse("judge[12]", False).resolve(judges) == {"judge1", "judge2"}  # no such judge: a pattern
    assert Reference.parse("judge[1]", False).resolve(("judge1", "judge2")) == {"judge1"}
    with pytest.raises(InputError, match=re.escape("no judge matches judge[3]")):
        Reference.parse("judge[3]", False).resolve(judges)
    # The summary's description: one rater is not "pooled" ("judges: judge[1] (1 judges, pooled as one rater ...)")
    assert Reference.parse("judge[1]", False).describe(["judge[1]"]) == "judge: judge[1]"
    assert Reference.parse("gpt-judge", False).describe(["gpt-judge"]) == "judge: gpt-judge"
    one = Reference.parse("judge[13]", False).describe(["judge1"])
    assert one == "judge: judge1 (the one judge matching 'judge[13]')"
    assert (
        Reference.parse("judge?", False)
        .describe(["judge1", "judge2", "judge*"])
        .startswith(
            "judges: judge? (the 3 judges matching 'judge?', judge*, judge1 and judge2, together: one rater for "
        )
    )
    assert Reference.parse("a,b", False).describe(["a", "b"]).startswith("judges: a, b (the 2 judges together: ")


def test_refresh_with_a_voter_pool_as_reference(tmp_path):
    """End to end: a log whose human pools are split into voters (≥ 256 judges: the blocked solver), refreshed
    with ``--reference 'human-pool-1/*'``: the gate decides over the other pool's voters and the LLM judges."""
    from biasboard.pipelines.refresh import RefreshOptions, refresh
    from biasboard.simulate import write_simulation

    voters = 160

    def relabel(day, chunk, battles):
        return _split_voters(battles, voters, np.random.default_rng(chunk + 17 * day.toordinal()))

    config = SimulationConfig(battles=12_000, models=8, judges=5, human_judges=2, days=2, seed=5)
    sim = write_simulation(config, tmp_path / "sim", relabel=relabel)
    options = RefreshOptions(audit=False, diagnostics="off", reference="human-pool-1/*")
    outcome = refresh(
        str(sim / "battles" / "day=*" / "*.parquet"), str(tmp_path / "st"), str(tmp_path / "o"), [], options
    )
    reference = outcome.summary.reference
    assert reference is not None and reference.gate is not None
    n_reference = int(re.search(r"\(the (\d+) judges matching 'human-pool-1/\*' together", reference.description)[1])
    snapshot = Path(outcome.published.path) if outcome.published is not None else None
    assert snapshot is not None
    bias = pl.read_parquet(snapshot / "bias.parquet").filter(pl.col("effect") == "position", pl.col("judge") != "*")
    others = bias.filter(~pl.col("judge").str.starts_with("human-pool-1/"))
    assert n_reference > 100 and others.height > 100 + 3  # the other pool's voters and the three LLM judges
    assert n_reference + others.height >= 256  # the judge-blocked solver
    # The summary lists, per effect and test group (the other pool's voters; the LLM judges), the 50 judges with the
    # largest |z| and one row for the rest.
    rows = [row for row in reference.gate.decisions if row["effect"] == "position"]
    assert not any(r["judge"].startswith("human-pool-1/") for r in rows)
    pool = [r for r in rows if r["reason"].startswith("position (human-pool-2/*)")]
    llm = [r for r in rows if not r["reason"].startswith("position (human-pool-2/*)")]
    assert len(pool) == LISTED_JUDGES + 1 and len(llm) == 3 and len(rows) == len(pool) + len(llm)
    rest = int(re.fullmatch(r"\((\d+) more judges\)", pool[-1]["judge"]).group(1))
    assert rest + LISTED_JUDGES + len(llm) == others.height and pool[-1]["enabled"] == pool[0]["enabled"]
    assert reference.own_effects["length"]["ci_low"] is not None
    excess = "excess over the reference (the judge's bias relative to it)"
    tied = "tied to the reference: no excess corrected"
    assert set(others["note"]) <= {excess, tied}  # every judge of the group, listed or not
    summary = json.loads((snapshot / "summary.json").read_text())
    assert summary["reference"]["kind"] == "judges" and summary["reference"]["judges"] == ["human-pool-1/*"]


def test_voters_of_another_pool_do_not_drown_the_llm_judges_excesses_in_the_gate() -> None:
    """A voter pool as the reference, the other pool split into voters too: each of those few-battle voters' excess is
    its prior's, and the joint test over thousands of them (χ² 2,377 on 2,503 df, p = 1) left the LLM judges' clear
    position and length excesses (z up to 8.4) uncorrected, where the same battles with the other pool as one judge
    corrected them.  A voter pool is now a test group of its own (and the test weighs the excesses the judges'
    battles inform): the LLM judges are corrected with the other pool split or not."""
    config = SimulationConfig(battles=30_000, models=10, judges=5, human_judges=2, days=1, seed=3)
    battles = [b for _, b, _ in simulate_days(config)]
    pool = Reference.parse("human-pool-1/*", False)
    decisions = {}
    for split_other in (False, True):
        rng = np.random.default_rng(0)
        relabelled = []
        for b in battles:
            frame = pl.from_arrow(_split_voters(b, 600, rng))
            if not split_other:  # the other pool back to one judge
                frame = frame.with_columns(pl.col("judge").str.replace(r"^human-pool-2/v\\d+$", "human-pool-2"))
            relabelled.append(partial_cells(frame.to_arrow(), FAMILIES).cells)
        fit = fit_with_reference(build_dataset(relabelled), reference=pool, config=ModelConfig(profile=False))
        llm = fit.gate.decisions.filter(~pl.col("judge").str.starts_with("human-pool"))
        decisions[split_other] = sorted(set(llm.filter(pl.col("enabled"))["effect"].to_list()))
        if split_other:  # the other pool's voters are a test group of their own
            voters = fit.gate.decisions.filter(pl.col("judge").str.starts_with("human-pool-2/"))
            assert voters.height and voters["reason"].str.contains(r"\(human-pool-2/\*\)").all()
    assert "position" in decisions[False] and decisions[True] == decisions[False], decisions


def test_godambe_rows_of_a_weighted_blocked_fit_are_the_dense_sandwichs():
    """At ω = 0.8 (grades) the blocked fit's joint covariance of the judges' excesses is the sandwich H_w⁻¹ J H_w⁻¹'s
    — the dense fit's covariance, on the same core — in its dense, diagonal and Woodbury Wald forms; the Laplace
    rows' differ."""
    pairs, grades = _graded_tables(5)
    data = build_dataset(pairs, grades)
    reference = frozenset({"judge-0"})
    fits = {}
    for solver in ("dense", "blocked"):
        config = ModelConfig(judge_solver=solver, reference=reference, omega=0.8)
        problem = bias_aware_problem(data, config)
        solution = solve_bias_aware(problem, config)
        fits[solver] = (problem, solution, godambe_covariance(problem, solution))
    dense = fits["dense"][2]
    problem, solution, blocked = fits["blocked"]  # (the same core as the dense fit's, to 1e-8)
    assert isinstance(blocked, BlockCovariance) and blocked.factor is not None
    for t in (0, 1, 2):
        _, rows, _ = excess_vectors(problem, t, reference)
        want = np.asarray(rows @ (rows @ dense).T)
        got = gate_rows(blocked, rows)
        scale = np.abs(want).max()
        assert np.max(np.abs(got.dense() - want)) < 1e-8 * scale
        assert np.max(np.abs(got.diagonal() - np.diag(want))) < 1e-8 * scale
        d = rows @ solution.core
        w_blocked, df = got.wald(d)
        w_dense, df_dense = wald_group(d, want)
        assert df == df_dense and abs(w_blocked - w_dense) < 1e-7 * w_dense
        laplace = row_covariance(blocked.factor, rows).diagonal()
        assert np.max(np.abs(laplace / np.diag(want) - 1.0)) > 0.02  # the sandwich, not H_w⁻¹


def test_reference_fit_of_a_weighted_blocked_fit_equals_the_dense_path():
    """ω = 0.8 with grades and a reference judge: the gate's evidence, the relative bias table, both boards (the
    reference rating's φ) and the reference's own effects agree between the solvers (the blocked gate tested the
    Laplace rows: SEs 0.07 and χ² 5.9 apart)."""
    pairs, grades = _graded_tables(5)
    fits = {
        s: fit_with_reference(
            pairs, grades, reference=Reference("judges", ("judge-0",)), config=ModelConfig(judge_solver=s, omega=0.8)
        )
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    gd, gb = d.gate.decisions, b.gate.decisions
    assert gd.select("judge", "effect", "enabled", "group_df").equals(
        gb.select("judge", "effect", "enabled", "group_df")
    )
    for col in ("excess", "se", "group_chi2", "group_p", "group_p_holm"):
        assert _close(gd[col].to_numpy(), gb[col].to_numpy()), col
    for col in ("estimate", "ci_low", "ci_high"):
        assert _close(d.bias[col].to_numpy(), b.bias[col].to_numpy()), col
    for board in ("corrected", "all_on"):
        assert getattr(d, board).uncertainty == getattr(b, board).uncertainty == "godambe"
        for name in ("rating", "se", "ci_low", "ci_high"):
            assert _close(getattr(getattr(d, board), name), getattr(getattr(b, board), name)), (board, name)
    for effect, own in d.own_effects.items():
        for key in ("estimate", "ci_low", "ci_high"):
            if own[key] is not None:
                assert _close(own[key], b.own_effects[effect][key]), (effect, key)


def test_the_gate_of_a_weighted_fit_names_the_godambe_covariance_it_tests_with():
    """At ω ≠ 0.5 with grades the gate's Wald tests read the Godambe sandwich (:func:`row_covariance`), but the
    summary's method, which the report prints above the gate table, said "threshold from the posterior covariance".
    Its ½z² is then half a Wald χ²(1), no gain in nats of any likelihood: the column was ``gain_nats`` all the same."""
    pairs, grades = _graded_tables(5)
    for omega, godambe in ((0.8, True), (0.5, False)):
        fitted = fit_with_reference(
            pairs, grades, reference=Reference("judges", ("judge-0",)), config=ModelConfig(omega=omega)
        )
        summary = fitted.gate.to_json()
        method = summary["method"]
        assert ("threshold from the Godambe (sandwich) covariance of the ω-weighted likelihood" in method) == godambe
        assert ("threshold from the posterior covariance" in method) != godambe
        decisions = fitted.gate.decisions
        half, other = ("half_z2", "gain_nats") if godambe else ("gain_nats", "half_z2")
        assert half in decisions.columns and other not in decisions.columns
        assert all(half in row and other not in row for row in summary["decisions"])
        assert np.array_equal(decisions[half].to_numpy(), (0.5 * decisions["z"] ** 2).to_numpy())
