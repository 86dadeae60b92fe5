"""A correction the gate supports but the data do not identify (prior-selected) is said to be left off as such."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.ranking import ModelConfig, fit_bias_aware
from biasboard.ranking.problem import DISABLED_NOTE
from biasboard.ranking.reference import (
    PRIOR_SELECTED_TIED_NOTE,
    TIED_ROW_NOTE,
    WITHHELD_NOTE,
    Reference,
    ReferenceSettings,
    fit_with_reference,
    withheld_notes,
)
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days
from biasboard.transforms.cells import partial_cells
from biasboard.transforms.snapshot import reference_warnings, weak_reference_warning

FAMILIES = FamilyMap.with_user_rules()
HUMAN = Reference("judges", ("human-pool-1",))


def cells_with_a_two_verdict_judge() -> list[pa.Table]:
    """A simulation's battles with two of gpt-sim-judge-1's verdicts given by a judge of its own, 'tiny-judge'."""
    config = SimulationConfig(battles=16_000, models=8, judges=4, human_judges=1, days=1, seed=2)
    ((_, battles, _),) = list(simulate_days(config))
    judge = np.array(battles.column("judge").to_pylist(), dtype=object)
    judge[np.flatnonzero(judge == "gpt-sim-judge-1")[:2]] = "tiny-judge"
    column = pa.array(judge.tolist(), pa.string())
    battles = battles.set_column(battles.schema.get_field_index("judge"), "judge", column)
    return [partial_cells(battles, FAMILIES).cells]


def test_a_prior_selected_correction_the_gate_supports_is_not_counted_as_corrected_nor_noted_as_the_gates() -> None:
    cells = cells_with_a_two_verdict_judge()
    fit = fit_with_reference(cells, reference=HUMAN)
    withheld = {(e["judge"], e["effect"]) for e in fit.unidentified if not e["applied"]}
    assert withheld, "the two-verdict judge's excesses are prior-selected"
    gate = fit.gate.decisions
    supported = {(j, e) for j, e, on in gate.select("judge", "effect", "enabled").iter_rows() if on}
    assert withheld <= supported  # the gate supports them; the identified-only rule leaves them off
    bias = fit.bias
    for judge, effect in withheld:
        row = bias.filter((pl.col("judge") == judge) & (pl.col("effect") == effect)).row(0, named=True)
        # It read "tied to the reference: no excess corrected", identified, beside the gate's "enabled".
        assert row["note"] == PRIOR_SELECTED_TIED_NOTE and row["identified"] is False and row["enabled"] is False
    others = bias.filter(pl.col("note") == TIED_ROW_NOTE)
    assert not {(j, e) for j, e in others.select("judge", "effect").iter_rows()} & withheld
    (warning,) = [w for w in reference_warnings(fit) if "the gate corrected" in w]
    # It said "the gate corrected 12 of 12" of a board that applied 10.
    assert f"corrected {len(supported) - len(withheld)} of {gate.height}" in warning
    assert f"{len(withheld)} more it supports are prior-selected and not applied" in warning


def test_applied_anyway_with_apply_unidentified_they_are_counted_and_read_as_excesses() -> None:
    fit = fit_with_reference(
        cells_with_a_two_verdict_judge(), reference=HUMAN, settings=ReferenceSettings(apply_unidentified=True)
    )
    assert fit.unidentified and all(e["applied"] for e in fit.unidentified)
    assert not (fit.bias["note"] == PRIOR_SELECTED_TIED_NOTE).any()
    supported = fit.gate.decisions["enabled"].sum()
    (warning,) = [w for w in reference_warnings(fit) if "the gate corrected" in w]
    assert f"corrected {supported} of" in warning and "prior-selected" not in warning


def one_judge_cells() -> list[pa.Table]:
    """One simulated judge: its affinity is constant within each model, so its profile is flat (prior-selected)."""
    config = SimulationConfig(battles=4000, models=8, judges=1, days=1, seed=3)
    ((_, battles, _),) = list(simulate_days(config))
    return [partial_cells(battles, FAMILIES).cells]


def test_a_prior_selected_effect_left_off_without_a_reference_says_so_not_disabled_by_configuration() -> None:
    """The flat profile leaves affinity off the published board.  Its rows read "disabled for every judge" /
    "disabled by configuration" and the moves table "switched off by the gate or the configuration" on a refresh
    given no flag (AlpacaEval 2), while the warnings said prior-selected."""
    fit = fit_with_reference(one_judge_cells(), reference=Reference("none", ()))
    assert [(e["judge"], e["effect"], e["applied"]) for e in fit.unidentified] == [("*", "affinity", False)]
    rows = fit.bias.filter(pl.col("effect") == "affinity")
    assert rows.height == 2 and (rows["note"] == WITHHELD_NOTE).all() and not rows["enabled"].any()
    assert fit.corrected.diagnostics["attribution"]["left_out"] == {"affinity": WITHHELD_NOTE}
    # The other effects' rows keep their notes: position and length are identified and applied.
    assert not (fit.bias.filter(pl.col("effect") != "affinity")["note"] == WITHHELD_NOTE).any()


def test_a_switch_the_caller_asked_for_keeps_its_note() -> None:
    off = ModelConfig(disabled=frozenset({("*", "affinity")}), profile=False)
    fit = fit_bias_aware(one_judge_cells(), config=off)
    withheld = {("*", "affinity")}

    def notes(f) -> dict[str, str]:
        return dict(f.bias.filter(pl.col("effect") == "affinity").select("judge", "note").iter_rows())

    assert set(notes(withheld_notes(fit, withheld)).values()) == {WITHHELD_NOTE}
    judge_asked = withheld_notes(fit, withheld, frozenset({("gpt-sim-judge-1", "affinity")}))
    assert notes(judge_asked) == {"*": WITHHELD_NOTE, "gpt-sim-judge-1": DISABLED_NOTE}
    everyone_asked = withheld_notes(fit, withheld, frozenset(withheld))
    assert notes(everyone_asked) == notes(fit) and everyone_asked.diagnostics == fit.diagnostics


def test_a_reference_whose_verdicts_barely_follow_the_comparisons_is_warned_of() -> None:
    """A reference that agrees with the comparisons by little more than chance (here: every verdict of the human pool
    flipped) has a discrimination a_r near 0, and its rating divides its own preferences by a_r: the board was
    reordered by ten times the reference's length preference with no warning.  Warned; the unflipped pool is not."""
    config = SimulationConfig(battles=12_000, models=8, judges=3, human_judges=1, days=1, seed=5)
    ((_, battles, _),) = list(simulate_days(config))
    plain = fit_with_reference([partial_cells(battles, FAMILIES).cells], reference=HUMAN)
    assert not [w for w in reference_warnings(plain) if "only weakly" in w]
    human = pl.from_arrow(battles)["judge"] == "human-pool-1"
    winner = pl.from_arrow(battles)["winner"]
    flipped = winner.replace({"model_a": "model_b", "model_b": "model_a"})
    column = pa.array(pl.select(pl.when(human).then(flipped).otherwise(winner)).to_series().to_list(), pa.string())
    battles = battles.set_column(battles.schema.get_field_index("winner"), "winner", column)
    fit = fit_with_reference([partial_cells(battles, FAMILIES).cells], reference=HUMAN)
    disc = fit.own_effects["discrimination"]
    assert disc["ci_high"] < 0.25, disc
    (warning,) = [w for w in reference_warnings(fit) if "only weakly" in w]
    assert warning.startswith("the reference's verdicts follow the comparisons' quality order only weakly"), warning


def test_a_judge_of_grades_alone_is_not_scored_against_the_reference() -> None:
    """A judge that only grades (``--scores``) gave no pairwise verdict, so its position, length and discrimination
    are the prior's.  The agreement table scored those prior guesses as the judge's fitted verdicts ("grader-only
    63.1% -> 66.5%" in a refresh: a correction of nothing it said)."""
    from biasboard.transforms.cells import partial_score_cells

    config = SimulationConfig(battles=8_000, models=6, judges=3, human_judges=1, days=1, seed=4, scores=0.3)
    ((_, battles, scores),) = list(simulate_days(config))
    grader = np.array(scores.column("judge").to_pylist(), dtype=object)
    grader[grader == "gpt-sim-judge-1"] = "grader-only"
    scores = scores.set_column(scores.schema.get_field_index("judge"), "judge", pa.array(grader.tolist(), pa.string()))
    fit = fit_with_reference(
        [partial_cells(battles, FAMILIES).cells], [partial_score_cells(scores, FAMILIES).cells], reference=HUMAN
    )
    scored = {row["judge"] for row in fit.agreement}
    assert "grader-only" not in scored
    assert {"gpt-sim-judge-1", "claude-sim-judge-1"} <= scored  # the judges of battles are scored


def test_the_weak_reference_warning_names_the_grades_scale_beside_grades() -> None:
    """With grades beside the battles the grades set θ's scale and the judges' discriminations are free, so a_r's 1
    is the grades' scale; the warning said "1 is the judges' geometric mean, weighted by their verdicts" there too."""
    from biasboard.transforms.cells import partial_score_cells

    config = SimulationConfig(battles=12_000, models=8, judges=3, human_judges=1, days=1, seed=5, scores=0.3)
    ((_, battles, scores),) = list(simulate_days(config))
    human = pl.from_arrow(battles)["judge"] == "human-pool-1"
    winner = pl.from_arrow(battles)["winner"]
    flipped = winner.replace({"model_a": "model_b", "model_b": "model_a"})
    column = pa.array(pl.select(pl.when(human).then(flipped).otherwise(winner)).to_series().to_list(), pa.string())
    battles = battles.set_column(battles.schema.get_field_index("winner"), "winner", column)
    fit = fit_with_reference(
        [partial_cells(battles, FAMILIES).cells], [partial_score_cells(scores, FAMILIES).cells], reference=HUMAN
    )
    (warning,) = [w for w in reference_warnings(fit) if "only weakly" in w]
    assert "judges' geometric mean" not in warning and "(1 is the grades' scale)" in warning, warning


def test_the_weak_reference_warning_names_the_judge_whose_fixed_discrimination_sets_the_scale() -> None:
    """With a judge's a fixed at 1 setting θ's scale (``diagnostics["scale_judges"]``), a_r's 1 is that judge's
    discrimination; the warning said "1 is the judges' geometric mean, weighted by their verdicts" there too."""
    weak = {"discrimination": {"estimate": 0.1, "ci_low": 0.05, "ci_high": 0.2}}

    def fitted(scale_judges: list[str] | None) -> SimpleNamespace:
        diagnostics = {} if scale_judges is None else {"scale_judges": scale_judges}
        return SimpleNamespace(own_effects=weak, graded_scale=False, corrected=SimpleNamespace(diagnostics=diagnostics))

    (warning,) = weak_reference_warning(fitted(["judge-0"]))
    assert "(1 is the discrimination of judge-0, fixed at 1)" in warning and "geometric mean" not in warning
    (warning,) = weak_reference_warning(fitted(None))
    assert "(1 is the judges' geometric mean, weighted by their verdicts)" in warning
