"""Battles whose shown order is unknown are counted: they inform θ and the other effects, never position.

Simulated with a known truth: the project's simulator draws battles with a strong position effect, then
half of them lose their order — they are *listed* in an order unrelated to the one the judge saw (here the
worst case: always the reverse, so the listed-first model is the one shown second), as a log without the
shown order would list them.  Cells come from the real ingest function, as in the pipeline.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.audit import audit
from biasboard.ranking import ModelConfig, fit_bias_aware
from biasboard.ranking.data import build_dataset
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days, truth
from biasboard.transforms.cells import merge_cells, partial_cells

FAST = ModelConfig(profile=False, posterior_draws=200, length_clip=None)
SWAP = {"model_a": "model_b", "model_b": "model_a"}


def _battles(seed: int) -> tuple[pl.DataFrame, dict]:
    config = SimulationConfig(days=1, battles=24_000, models=12, judges=3, seed=seed, self_battles=0.0, gamma0=-0.6)
    (_, battles, _), *_ = list(simulate_days(config))
    frame = pl.from_arrow(battles)
    assert isinstance(frame, pl.DataFrame)
    return frame, truth(config)


def _relisted_unknown(frame: pl.DataFrame) -> pl.DataFrame:
    """Odd rows lose their order: listed in reverse of the shown order, flagged ``order_known`` = false."""
    odd = pl.int_range(pl.len()) % 2 == 1
    swapped = {
        "model_a": pl.when(odd).then("model_b").otherwise("model_a"),
        "model_b": pl.when(odd).then("model_a").otherwise("model_b"),
        "len_a": pl.when(odd).then("len_b").otherwise("len_a"),
        "len_b": pl.when(odd).then("len_a").otherwise("len_b"),
        "family_a": pl.when(odd).then("family_b").otherwise("family_a"),
        "family_b": pl.when(odd).then("family_a").otherwise("family_b"),
        "winner": pl.when(odd).then(pl.col("winner").replace(SWAP)).otherwise("winner"),
    }
    return frame.with_columns(**swapped, order_known=pl.when(odd).then(False).otherwise(None))


def _cells(frame: pl.DataFrame) -> pa.Table:
    return partial_cells(frame.to_arrow(), FamilyMap.with_user_rules()).cells


def _position(fit) -> dict[str, float]:
    rows = fit.bias.filter(pl.col("effect") == "position")
    return dict(zip(rows["judge"].to_list(), rows["estimate"].to_list(), strict=True))


def _position_width(fit) -> dict[str, float]:
    rows = fit.bias.filter(pl.col("effect") == "position")
    return dict(zip(rows["judge"].to_list(), (rows["ci_high"] - rows["ci_low"]).to_list(), strict=True))


def _tau(fit, tr: dict) -> float:
    theta = {m["model"]: m["theta"] for m in tr["models"]}
    return kendall_tau_b(fit.rating, np.array([theta[m] for m in fit.models]))


@pytest.mark.parametrize("seed", [3, 11])
def test_half_unknown_order_recovers_theta_and_position_from_the_known_half(seed):
    frame, tr = _battles(seed)
    relisted = _relisted_unknown(frame)
    mixed = fit_bias_aware(_cells(relisted), config=FAST)
    known_half = fit_bias_aware(_cells(relisted.filter(pl.col("order_known").is_null())), config=FAST)
    # The same relisted rows taken at face value: the reversed half pulls γ toward zero.
    naive_order = fit_bias_aware(_cells(relisted.drop("order_known")), config=FAST)
    everything = fit_bias_aware(_cells(frame), config=FAST)
    assert mixed.converged and known_half.converged

    # Every battle is counted: the flagged half sits in its own cells, none is dropped.
    cells = pl.from_arrow(_cells(relisted))
    assert cells.filter(~pl.col("order_known"))["n"].sum() == frame.height // 2
    assert cells["n"].sum() == frame.height

    # θ: the unknown-order half still informs it — as well as the fully known data does, better than half.
    assert _tau(mixed, tr) >= _tau(known_half, tr) - 0.02
    assert _tau(mixed, tr) >= _tau(everything, tr) - 0.05
    assert _tau(mixed, tr) >= 0.85
    mixed_se = np.median(mixed.ci_high - mixed.ci_low)
    assert mixed_se < 0.85 * np.median(known_half.ci_high - known_half.ci_low)  # more data, narrower CIs

    # γ comes only from the known half: close to the known-half fit and to the truth, unlike face value.
    true_gamma = {j["judge"]: j["gamma"] for j in tr["judges"]}
    gamma, gamma_known, gamma_face = _position(mixed), _position(known_half), _position(naive_order)
    width, width_known = _position_width(mixed), _position_width(known_half)
    for judge, value in true_gamma.items():
        # Not identical: the better θ of the mixed fit moves γ a little, well inside the known half's CI.
        assert abs(gamma[judge] - gamma_known[judge]) < 0.25 * width_known[judge], (judge, gamma, gamma_known)
        assert abs(gamma[judge] - value) < width[judge], (judge, gamma[judge], value)  # within ≈ 2 SE of the truth
        # The unknown half adds (almost) nothing to what is known about γ: its CI is not narrower.
        assert width[judge] > 0.9 * width_known[judge], (judge, width, width_known)
    face_error = np.mean([abs(gamma_face[j] - v) for j, v in true_gamma.items()])
    mixed_error = np.mean([abs(gamma[j] - v) for j, v in true_gamma.items()])
    assert face_error > 3 * mixed_error and face_error > 0.2, (face_error, mixed_error)


def test_a_judge_with_no_battle_of_known_order_has_no_position_effect():
    """AlpacaEval 1's annotators record no shown order, the weighted annotator does: the others' position rows were
    the population's estimate, marked identified (the global level is learned from the judge that has data).  A
    judge none of whose battles has a known order has no position effect: off, with the reason."""
    frame, _ = _battles(3)
    unknown = frame["judge"].unique().sort()[0]
    relisted = frame.with_columns(order_known=pl.when(pl.col("judge") == unknown).then(False).otherwise(None))
    rows = fit_bias_aware(_cells(relisted), config=FAST).bias.filter(pl.col("effect") == "position")
    off = rows.filter(pl.col("judge") == unknown).row(0, named=True)
    assert (off["enabled"], off["identified"], off["note"]) == (False, False, "no battle with a known shown order")
    others = rows.filter(~pl.col("judge").is_in([unknown, "*"]))
    assert others["enabled"].all() and others["identified"].all() and others.height == 2


def test_cells_without_the_column_read_as_known_order():
    frame, _ = _battles(5)
    cells = _cells(frame.head(3000))
    old = cells.drop_columns(["order_known"])  # cells stored before the column existed
    assert merge_cells([old]).equals(merge_cells([cells]))
    assert np.all(build_dataset(old).pairs.pos == 1.0)
    assert old.num_rows and PAIR_CELLS_SCHEMA.field("order_known").type == pa.bool_()


def test_order_known_values_null_text_and_numbers():
    frame, _ = _battles(5)
    head = frame.head(6).with_columns(order_known=pl.Series(["false", None, "true", "0", "FALSE", "1"]))
    cells = pl.from_arrow(_cells(head))
    assert cells.filter(~pl.col("order_known"))["n"].sum() == 3
    assert cells["n"].sum() == 6  # every battle counted, none dead-lettered


def test_the_audit_reads_position_only_from_battles_whose_order_is_known():
    frame, _ = _battles(7)
    relisted = _relisted_unknown(frame)
    mixed = audit(relisted).judges.sort("judge")
    known = audit(relisted.filter(pl.col("order_known").is_null())).judges.sort("judge")
    face = audit(relisted.drop("order_known")).judges.sort("judge")
    for column in ("slot_n", "slot_first_share", "slot_second_share"):
        assert mixed[column].to_list() == known[column].to_list()
        assert mixed[column].to_list() != face[column].to_list()
