"""The simulator: contracts, determinism, designs, exact bad-row counts, and its statistics.

Counts in files are re-derived here independently (pyarrow/polars and plain
Python on small data) and compared with ``truth.json``; the statistical checks
recompute the documented model from ``truth.json`` alone, so a generator that
drifts from the model of :mod:`biasboard.ranking.model` fails them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines.cli import main as cli_main
from biasboard.schemas.battle import BATTLE_SCHEMA, SCORE_SCHEMA, WINNER_VALUES
from biasboard.schemas.deadletter import MAX_RESPONSE_LENGTH
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import (
    BAD_ROW_REASONS,
    DESIGNS,
    FAMILY_PREFIXES,
    SimulationConfig,
    draw_parameters,
    grade_probabilities,
    simulate_days,
    truth,
    write_simulation,
)


def _read_days(root: Path, kind: str) -> dict[str, pa.Table]:
    return {
        path.parent.name.removeprefix("day="): pq.read_table(path)
        for path in sorted((root / kind).glob("day=*/part-00000.parquet"))
    }


def _all_battles(config: SimulationConfig) -> pa.Table:
    return pa.concat_tables([battles for _, battles, _ in simulate_days(config)])


def test_clean_files_follow_the_contracts(tmp_path):
    config = SimulationConfig(battles=3000, models=12, judges=4, human_judges=1, days=3, scores=0.3, seed=3)
    write_simulation(config, tmp_path)
    days = _read_days(tmp_path, "battles")
    assert list(days) == ["2024-01-01", "2024-01-02", "2024-01-03"]
    truth_doc = json.loads((tmp_path / "truth.json").read_text())
    families = {m["model"]: m["family"] for m in truth_doc["models"]}
    judge_families = {j["judge"]: j["family"] for j in truth_doc["judges"]}
    rows = 0
    for day, table in days.items():
        assert table.schema.equals(BATTLE_SCHEMA), table.schema
        rows += table.num_rows
        df = pl.from_arrow(table)
        assert set(df["winner"].unique()) <= set(WINNER_VALUES)
        assert df["len_a"].min() >= 1 and df["len_b"].min() >= 1
        assert df["ts"].dt.date().unique().to_list() == [dt.date.fromisoformat(day)]
        assert df["battle_id"].n_unique() == df.height
        assert (df["family_a"] == df["model_a"].replace_strict(families)).all()
        assert (df["judge_family"] == df["judge"].replace_strict(judge_families)).all()
    assert rows == truth_doc["counts"]["valid"] == 3000
    assert Counter(judge_families.values())["human"] == 1
    scores = _read_days(tmp_path, "scores")
    assert list(scores) == list(days)
    score_df = pl.concat([pl.from_arrow(t) for t in scores.values()])
    assert all(t.schema.equals(SCORE_SCHEMA) for t in scores.values())
    assert score_df.height == truth_doc["counts"]["score_rows"] == 900
    assert score_df["score"].min() >= 1 and score_df["score"].max() <= config.grades
    assert score_df["score"].n_unique() >= config.grades - 2  # the thresholds spread grades over the scale


def test_the_default_family_map_recognises_every_simulated_name():
    """Data without family columns must get the same families from names alone."""
    config = SimulationConfig(models=25, families=len(FAMILY_PREFIXES), judges=12, human_judges=2)
    t = truth(config)
    family_map = FamilyMap.with_user_rules(None)
    named = [(m["model"], m["family"]) for m in t["models"]] + [(j["judge"], j["family"]) for j in t["judges"]]
    assert {family for _, family in named} == {*FAMILY_PREFIXES, "human"}
    assert [(name, family_map.family_of(name)) for name, _ in named] == named


def test_same_seed_same_data_other_seed_other_data():
    config = SimulationConfig(battles=4000, days=2, bad_rows=0.02, scores=0.1, self_battles=0.1, design="swiss")
    first = list(simulate_days(config))
    again = list(simulate_days(config))
    other = list(simulate_days(dataclasses.replace(config, seed=1)))
    for (d1, b1, s1), (d2, b2, s2) in zip(first, again, strict=True):
        assert d1 == d2 and b1.equals(b2) and s1.equals(s2)
    assert truth(config) == truth(config)
    assert not first[0][1].equals(other[0][1])


def _is_missing(value) -> bool:
    return value is None or value == ""


def _parses(text: str) -> bool:
    try:
        dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _defects(row: dict, seen_ids: set[str]) -> list[str]:
    """Every defect of one row, by the dead-letter contract's rules (written here from scratch)."""
    required = ("battle_id", "ts", "judge", "model_a", "model_b", "winner")
    found = [f"missing:{c}" for c in required if _is_missing(row[c])]
    if not _is_missing(row["winner"]) and row["winner"] not in WINNER_VALUES:
        found.append("bad_winner")
    lengths = [row["len_a"], row["len_b"]]
    if any(v is not None and v < 0 for v in lengths):
        found.append("negative_length")
    if any(v is not None and v > MAX_RESPONSE_LENGTH for v in lengths):
        found.append("absurd_length")
    if not _is_missing(row["ts"]) and not _parses(row["ts"]):
        found.append("bad_timestamp")
    if not _is_missing(row["battle_id"]):
        if row["battle_id"] in seen_ids:
            found.append("duplicate_battle_id")
        seen_ids.add(row["battle_id"])
    return found


@pytest.mark.parametrize("both_orders", [False, True])
def test_injected_bad_rows_match_truth_exactly(tmp_path, both_orders):
    config = SimulationConfig(
        battles=2400, days=2, bad_rows=0.05, self_battles=0.05, both_orders=both_orders, seed=11, chunk_rows=1000
    )
    write_simulation(config, tmp_path)
    counts = json.loads((tmp_path / "truth.json").read_text())["counts"]
    found: Counter[str] = Counter()
    valid = 0
    for table in _read_days(tmp_path, "battles").values():
        assert table.schema.field("ts").type == pa.string()
        seen: set[str] = set()  # duplicates repeat an id of the same day
        first_row = True
        for row in table.to_pylist():
            defects = _defects(row, seen)
            assert len(defects) <= 1, (row, defects)  # one defect per bad row, so reasons are unambiguous
            found.update(defects)
            valid += not defects
            if first_row:
                assert not defects
                first_row = False
    assert set(counts["bad_rows"]) == set(BAD_ROW_REASONS)
    assert dict(found) == {k: v for k, v in counts["bad_rows"].items() if v}
    assert all(v > 0 for v in counts["bad_rows"].values())  # every kind is present
    assert valid == counts["valid"] == 2400
    assert valid + sum(found.values()) == counts["rows"]
    days = counts["per_day"]
    assert sum(d["bad"] for d in days.values()) == counts["bad_total"] == sum(found.values())


def test_duplicates_are_exact_repeats_of_an_earlier_row(tmp_path):
    config = SimulationConfig(battles=3000, days=1, bad_rows=0.1, seed=5)
    write_simulation(config, tmp_path)
    df = pl.from_arrow(_read_days(tmp_path, "battles")["2024-01-01"]).with_row_index("row")
    ids = df.filter(pl.col("battle_id").is_not_null() & (pl.col("battle_id") != ""))
    dup_ids = ids.filter(pl.col("battle_id").is_duplicated())
    n_dups = dup_ids.height - dup_ids["battle_id"].n_unique()
    assert n_dups == json.loads((tmp_path / "truth.json").read_text())["counts"]["bad_rows"]["duplicate_battle_id"]
    for _, group in dup_ids.group_by("battle_id"):
        group = group.sort("row")
        assert group.drop("row").n_unique() == 1  # same content, byte for byte


def test_self_battles_are_present_and_counted():
    config = SimulationConfig(battles=20_000, days=2, self_battles=0.1, self_identical=0.5, seed=2)
    df = pl.from_arrow(_all_battles(config))
    counts = truth(config)["counts"]
    self_rows = df.filter(pl.col("model_a") == pl.col("model_b"))
    assert self_rows.height == counts["self_battles"] == 2000
    identical = self_rows.filter(pl.col("len_a") == pl.col("len_b")).height
    # identical-answer checks have equal lengths by construction; two answers rarely tie in length
    assert counts["identical_self_battles"] <= identical < counts["identical_self_battles"] * 1.1


def test_both_orders_rows_come_in_swapped_pairs():
    config = SimulationConfig(battles=5000, days=1, both_orders=True, self_battles=0.02, seed=4)
    df = pl.from_arrow(_all_battles(config))
    first, second = df[0::2], df[1::2]
    assert first.height == second.height == 2500
    for col in ("prompt_id", "judge"):
        assert (first[col] == second[col]).all()
    assert (first["model_a"] == second["model_b"]).all() and (first["model_b"] == second["model_a"]).all()
    assert (first["len_a"] == second["len_b"]).all() and (first["len_b"] == second["len_a"]).all()
    assert df["battle_id"].n_unique() == df.height
    # verdicts are independent draws: order flips happen
    flips = ((first["winner"] == "model_a") & (second["winner"] == "model_a")).sum()
    assert flips > 0


def _design_frame(design: str, **kw) -> tuple[pl.DataFrame, dict]:
    config = SimulationConfig(battles=30_000, models=30, days=1, design=design, seed=8, **kw)
    return pl.from_arrow(_all_battles(config)), truth(config)


def test_hub_designs_put_a_hub_in_every_battle():
    for design, n_hubs in (("hubspoke", 1), ("multihub", 3)):
        df, t = _design_frame(design)
        hubs = t["design"]["hubs"]
        assert len(hubs) == n_hubs
        has_hub = df["model_a"].is_in(hubs) | df["model_b"].is_in(hubs)
        assert has_hub.all()
        assert not (df["model_a"].is_in(hubs) & df["model_b"].is_in(hubs)).all()  # spokes do play
        # the order shown is a fair coin: the hub is first in about half the battles
        if n_hubs == 1:
            assert 0.48 < df["model_a"].is_in(hubs).mean() < 0.52


def _standing_gap(df: pl.DataFrame, t: dict) -> np.ndarray:
    standing = {m["model"]: m["standing"] for m in t["models"]}
    return np.abs(df["model_a"].replace_strict(standing).to_numpy() - df["model_b"].replace_strict(standing).to_numpy())


def test_swiss_and_stratified_pair_close_models_uniform_does_not():
    uniform, tu = _design_frame("uniform")
    swiss, ts = _design_frame("swiss")
    strat, tst = _design_frame("stratified")
    assert _standing_gap(uniform, tu).mean() > 8  # ~ (M+1)/3 for uniform pairs of 30
    assert _standing_gap(swiss, ts).mean() < 2.5  # geometric distances 1, 2, 3 …
    stratum = {m["model"]: m["stratum"] for m in tst["models"]}
    same = strat["model_a"].replace_strict(stratum) == strat["model_b"].replace_strict(stratum)
    n_strata = len(tst["design"]["strata_bounds"]) - 1
    expected = 0.9 + 0.1 / n_strata  # cross-stratum draws land in the same stratum by chance
    assert abs(same.mean() - expected) < 0.02
    for df in (uniform, swiss, strat):
        assert (df["model_a"] != df["model_b"]).all()


def test_popularity_design_follows_its_weights():
    df, t = _design_frame("popularity")
    counts = pl.concat([df["model_a"], df["model_b"]]).value_counts()
    n = dict(zip(counts[:, 0].to_list(), counts["count"].to_list(), strict=True))
    weights = np.array([m["popularity"] for m in t["models"]])
    share = np.array([n.get(m["model"], 0) for m in t["models"]]) / (2 * df.height)
    assert np.corrcoef(weights, share)[0, 1] > 0.95
    assert share.max() / share.min() > 5  # exposure is very unequal


def test_unknown_design_and_bad_settings_are_refused():
    assert "popularity" in DESIGNS
    with pytest.raises(InputError, match="--design"):
        SimulationConfig(design="roundrobin")
    with pytest.raises(InputError, match="--bad-rows"):
        SimulationConfig(bad_rows=1.5)
    with pytest.raises(InputError, match="--human-judges"):
        SimulationConfig(judges=2, human_judges=3)


def _implied(df: pl.DataFrame, t: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P(a), P(b), P(tie) per row from truth.json alone: the model written out again."""
    theta = {m["model"]: m["theta"] for m in t["models"]}
    fam = {m["model"]: m["family"] for m in t["models"]}
    judges = {j["judge"]: j for j in t["judges"]}

    def by_judge(key):
        return df["judge"].replace_strict({k: v[key] for k, v in judges.items()}).to_numpy()

    jf = df["judge"].replace_strict({k: v["family"] for k, v in judges.items()}).to_numpy()
    s = (df["model_a"].replace_strict(fam).to_numpy() == jf).astype(float)
    s -= df["model_b"].replace_strict(fam).to_numpy() == jf
    x = np.log(df["len_a"].to_numpy()) - np.log(df["len_b"].to_numpy())
    dtheta = df["model_a"].replace_strict(theta).to_numpy() - df["model_b"].replace_strict(theta).to_numpy()
    eta = by_judge("a") * dtheta + by_judge("gamma") + by_judge("beta") * x + by_judge("lambda") * s
    nu = by_judge("nu")
    den = np.exp(eta / 2) + np.exp(-eta / 2) + nu
    return np.exp(eta / 2) / den, np.exp(-eta / 2) / den, nu / den


def _within_se(observed: float, p: np.ndarray, k: float = 4.0) -> bool:
    return abs(observed - p.sum()) < k * math.sqrt(np.sum(p * (1 - p)))


def test_verdicts_follow_the_documented_model():
    # Strong position, length and affinity effects so a generator that drops one is caught.
    config = SimulationConfig(
        battles=200_000,
        models=12,
        judges=3,
        days=1,
        self_battles=0.1,
        gamma0=-0.5,
        beta0=0.8,
        lambda0=1.0,
        corr_length=0.5,
        seed=21,
    )
    t = truth(config)
    df = pl.from_arrow(_all_battles(config))
    p_a, p_b, p_tie = _implied(df, t)
    winner = df["winner"].to_numpy()
    assert _within_se((winner == "model_a").sum(), p_a)
    assert _within_se((winner == "model_b").sum(), p_b)
    assert _within_se(np.isin(winner, ["tie", "tie (bothbad)"]).sum(), p_tie)
    # the same check within subsets, where each effect matters most
    longer_first = (df["len_a"] > df["len_b"]).to_numpy()
    assert _within_se((winner[longer_first] == "model_a").sum(), p_a[longer_first])
    self_rows = (df["model_a"] == df["model_b"]).to_numpy()
    assert _within_se((winner[self_rows] == "model_b").sum(), p_b[self_rows])
    # the model without its length term is rejected by the same test (the check has power)
    p_no_len, _, _ = _implied(df.with_columns(len_b=pl.col("len_a")), t)
    assert not _within_se((winner[longer_first] == "model_a").sum(), p_no_len[longer_first])


def test_length_correlates_with_quality_as_set():
    for rho in (0.0, 0.6):
        config = SimulationConfig(battles=60_000, models=25, days=1, corr_length=rho, seed=9)
        t = truth(config)
        assert t["global"]["corr_theta_length"] == pytest.approx(rho, abs=1e-9)
        df = pl.from_arrow(_all_battles(config))
        per_model = (
            pl.concat(
                [
                    df.select(model="model_a", loglen=pl.col("len_a").log()),
                    df.select(model="model_b", loglen=pl.col("len_b").log()),
                ]
            )
            .group_by("model")
            .agg(pl.col("loglen").mean())
        )
        theta = {m["model"]: m["theta"] for m in t["models"]}
        observed = np.corrcoef(per_model["model"].replace_strict(theta).to_numpy(), per_model["loglen"].to_numpy())
        assert observed[0, 1] == pytest.approx(rho, abs=0.05)


def test_scores_follow_the_partial_credit_model():
    config = SimulationConfig(battles=100_000, models=10, judges=3, days=1, scores=0.5, grades=7, seed=13)
    params = draw_parameters(config)
    scores = pl.concat([pl.from_arrow(s) for _, _, s in simulate_days(config, params)])
    t = truth(config, params)
    theta = {m["model"]: m["theta"] for m in t["models"]}
    alpha = {j["judge"]: j["alpha"] for j in t["judges"]}
    delta = np.array(t["prompts"]["delta"])
    loc = (
        scores["model"].replace_strict(theta).to_numpy()
        - delta[scores["prompt_id"].str.slice(1).cast(pl.Int64).to_numpy()]
        - scores["judge"].replace_strict(alpha).to_numpy()
    )
    probs = grade_probabilities(loc, np.array(t["scores"]["tau"]))
    observed = scores["score"].to_numpy()
    for k in (1, 4, 7):
        assert _within_se((observed == k).sum(), probs[:, k - 1])
    # severity shows: the harshest judge grades lowest on average
    by_judge = scores.group_by("judge").agg(pl.col("score").mean())
    harshest = max(alpha, key=alpha.get)
    assert by_judge.sort("score")["judge"][0] == harshest


def test_equal_models_get_lengths_and_verdicts(tmp_path):
    """``theta_sd`` 0 (every model equal: what a judge's biases alone do) is a valid setting, but the length means
    were correlated with θ by dividing by its spread: NaN means, every length written as −2⁶³, every verdict a tie
    and NaN in truth.json (not JSON)."""
    config = SimulationConfig(battles=4_000, models=5, judges=2, days=1, theta_sd=0.0, style=True, seed=2)
    write_simulation(config, tmp_path)
    battles = pl.read_parquet(tmp_path / "battles" / "*" / "*.parquet")
    assert battles["len_a"].min() >= 1 and battles["len_b"].min() >= 1
    assert battles["winner"].value_counts()["winner"].len() == 4
    assert battles["header_count_a"].null_count() == 0

    def no_nan(name):
        raise AssertionError(f"truth.json holds {name}")

    t = json.loads((tmp_path / "truth.json").read_text(), parse_constant=no_nan)
    assert t["global"]["corr_theta_length"] is None
    assert len({round(m["mean_log_length"], 6) for m in t["models"]}) == 5


def test_two_grades_are_as_symmetric_as_more():
    """np.linspace puts one point at the start of the span: two grades had their threshold at −tau_span, 90% top
    grades, where every K ≥ 3 has thresholds symmetric about 0 (the middle grades most, the two ends alike)."""
    for grades in (2, 3, 4):
        config = SimulationConfig(battles=20_000, models=10, judges=2, days=1, scores=1.0, grades=grades, seed=3)
        tau = np.array(truth(config)["scores"]["tau"])
        np.testing.assert_allclose(tau, -tau[::-1], atol=1e-12)
        scores = np.concatenate([s.column("score").to_numpy() for _, _, s in simulate_days(config)])
        shares = np.bincount(scores.astype(np.int64), minlength=grades + 1)[1:] / scores.size
        assert abs(shares[0] - shares[-1]) < 0.05, (grades, shares)


def test_cli_writes_refuses_to_overwrite_and_rejects_bad_flags(tmp_path, capsys):
    out = tmp_path / "sim"
    argv = ["simulate", "--out", str(out), "--battles", "2000", "--days", "2", "--design", "multihub"]
    assert cli_main([*argv, "--bad-rows", "0.01", "--scores", "0.1", "--both-orders", "--self-battles", "0.1"]) == 0
    assert (out / "truth.json").exists()
    assert sorted(p.name for p in (out / "battles").iterdir()) == ["day=2024-01-01", "day=2024-01-02"]
    assert sorted(p.name for p in (out / "scores").iterdir()) == ["day=2024-01-01", "day=2024-01-02"]
    assert cli_main(argv) == 2  # an earlier simulation is not silently mixed with a new one
    assert "--overwrite" in capsys.readouterr().err
    assert cli_main([*argv, "--overwrite", "--seed", "5"]) == 0
    assert not (out / "scores").exists()
    assert json.loads((out / "truth.json").read_text())["seed"] == 5
    assert cli_main([*argv, "--overwrite", "--bad-rows", "1.5"]) == 2
    assert "--bad-rows" in capsys.readouterr().err
    # Category labels for refresh --slices from the command line (only the Python config had them).
    assert cli_main([*argv, "--overwrite", "--categories", "3", "--category-sd", "0.8"]) == 0
    labels = pl.read_parquet(out / "battles" / "*" / "*.parquet")["category"]
    assert labels.null_count() == 0 and labels.n_unique() == 3
    assert json.loads((out / "truth.json").read_text())["settings"]["categories"] == 3


def test_a_simulation_is_refused_into_an_import_folder_even_with_overwrite(tmp_path, capsys):
    """An import's folder was called "a simulation", and --overwrite replaced its battles but kept its manifest and
    dead letters: the next refresh reported the import's rejected rows against the simulated battles."""
    imported = tmp_path / "imp"
    (imported / "battles").mkdir(parents=True)
    (imported / "import_manifest.json").write_text("{}")
    (imported / "import_dead_letters.parquet").write_bytes(b"")
    argv = ["simulate", "--out", str(imported), "--battles", "200", "--days", "1"]
    for flags in ([], ["--overwrite"]):
        assert cli_main([*argv, *flags]) == 2
        assert (
            capsys.readouterr()
            .err.strip()
            .endswith(f"{imported} holds a biasboard import (import_manifest.json), not a simulation; use a new folder")
        )
    assert sorted(p.name for p in imported.iterdir()) == [
        "battles",
        "import_dead_letters.parquet",
        "import_manifest.json",
    ]


def test_days_without_battles_get_no_empty_files(tmp_path):
    config = SimulationConfig(battles=3, days=5, models=3, scores=1.0)
    write_simulation(config, tmp_path)
    assert sorted(_read_days(tmp_path, "battles")) == ["2024-01-01", "2024-01-02", "2024-01-03"]
    assert all(t.num_rows == 1 for t in _read_days(tmp_path, "scores").values())
    assert [d["rows"] for d in truth(config)["counts"]["per_day"].values()] == [1, 1, 1, 0, 0]


def test_a_config_is_checked_by_the_rules_its_flags_are_read_with():
    """A caller's config is refused naming the flag and what it got, as the command line is (one rule each)."""
    with pytest.raises(InputError, match=r"^--seed must be at least 0, got -1$"):
        SimulationConfig(seed=-1)
    with pytest.raises(InputError, match=r"^--hubs must be below --models \(5\), got 5$"):
        SimulationConfig(models=5, hubs=5)
    with pytest.raises(InputError, match=r"^--families must be from 1 to 10, got 11$"):
        SimulationConfig(families=11)


def test_a_models_category_qualities_average_to_its_theta():
    """The category shifts were centred over the models only, so a model's mean over its categories sat up to 0.44
    logits from its ``theta``: the overall board (every category) was 0.22 RMS from truth.json's theta and 0.04 from
    the category means.  Centred both ways, the mean is theta, and each category still has mean 0 over models."""
    config = SimulationConfig(battles=10, models=8, categories=3, category_sd=0.5, seed=1)
    models = truth(config)["models"]
    by_category = np.array([list(m["theta_by_category"].values()) for m in models])
    theta = np.array([m["theta"] for m in models])
    np.testing.assert_allclose(by_category.mean(axis=1), theta, atol=1e-12)
    np.testing.assert_allclose(by_category.mean(axis=0), theta.mean(), atol=1e-12)
    assert np.std(by_category - theta[:, None]) > 0.2  # the categories still differ


def test_truths_formula_names_the_terms_the_verdicts_were_drawn_with():
    """truth.json's ``model.eta`` was the formula without style and categories, also when both were drawn."""
    plain = truth(SimulationConfig(battles=10))["model"]["eta"]
    assert "style" not in plain and "theta_by_category" not in plain
    drawn = truth(SimulationConfig(battles=10, style=True, categories=2))["model"]["eta"]
    assert "style_jk" in drawn and "theta_by_category_a" in drawn


def _first_chunk_peak(battles: int) -> int:
    """Peak bytes Python allocated to make the first chunk of a one-day run of ``battles`` rows."""
    import tracemalloc

    config = SimulationConfig(battles=battles, days=1, chunk_rows=1000, models=5, judges=2)
    params = draw_parameters(config)
    tracemalloc.start()
    try:
        next(simulate_days(config, params))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_first_chunk_memory_does_not_grow_with_the_run():
    # ``simulate --battles 99999999999999`` listed every chunk before writing one: memory grew ~50 MB/s, nothing
    # was written.  The first chunk of a 10⁸-row run (10⁵ chunks) now costs what a 10⁴-row run's does.
    small, huge = _first_chunk_peak(10_000), _first_chunk_peak(100_000_000)
    assert huge < 2 * small, (small, huge)


@pytest.mark.parametrize(
    ("flag", "huge", "allowed", "edge"),
    [
        ("--gamma0", "1e308", "[-20, 20]", "20"),
        ("--beta0", "-1e308", "[-20, 20]", "-20"),
        ("--theta-sd", "1e308", "[0, 20]", "20"),
    ],
)
def test_a_huge_finite_logit_effect_is_refused_in_one_line(tmp_path, capsys, flag, huge, allowed, edge):
    """``--gamma0 1e308`` passed the finite-number check: numpy printed overflow/invalid-value RuntimeWarnings and
    every verdict was a tie.  The logit-scale flags are bounded (±20 is odds of 5·10⁸ to 1) and say so."""
    argv = ["simulate", "--out", str(tmp_path / "sim"), "--battles", "200", "--days", "1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert cli_main([*argv, f"{flag}={huge}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(f"{flag} must be a number in {allowed}, got {float(huge):g}") and len(err.splitlines()) == 1
        assert not (tmp_path / "sim").exists()
        assert cli_main([*argv, f"{flag}={edge}"]) == 0  # the bound itself simulates, without a warning
