"""The judge audit: hand-checked figures, the monoid, the Beam path and the CLI.

Figures from “Position bias in pairwise judging” and “Judge bias in best-of-N” (docs/references.md).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import pickle
import statistics
from pathlib import Path

import apache_beam as beam
import numpy as np
import polars as pl
import pytest
from biasboard.audit import (
    AuditPartials,
    audit,
    audit_partials,
    cross_tab,
    finish_audit,
    merge_partials,
    order_shard,
    reduce_order_rows,
)
from biasboard.audit.measures import PAIR_KEYS, PAIR_MEASURES, judge_order_sums, order_models_table
from biasboard.schemas.errors import InputError
from biasboard.transforms import snapshot
from biasboard.transforms.snapshot import _pooled_order_models

FIRST, SECOND, TIE, BOTHBAD = "model_a", "model_b", "tie", "tie (bothbad)"


def cr1(clusters: int) -> float:
    """The CR1 small-sample factor G/(G − 1) on a clustered variance (Stata's and statsmodels' default)."""
    return clusters / (clusters - 1)


def battles(rows: list[tuple], columns: tuple[str, ...] = ("judge", "prompt_id", "model_a", "model_b", "winner")):
    return pl.DataFrame(rows, schema=list(columns), orient="row")


def seed001_battles() -> pl.DataFrame:
    """The 400 pairs of “Position bias in pairwise judging”: A/A 154, B/B 138, first-slot both 90, second-slot both 18.

    Verdicts are by slot; "A" is model_x (it sorts first), "B" is model_y.
    """
    rows = []
    kinds = [("A", "A")] * 154 + [("B", "B")] * 138 + [("A", "B")] * 90 + [("B", "A")] * 18
    for i, (a_first, b_first) in enumerate(kinds):
        rows.append(("j", f"p{i}", "A", "B", FIRST if a_first == "A" else SECOND))
        rows.append(("j", f"p{i}", "B", "A", FIRST if b_first == "B" else SECOND))
    return battles(rows)


def test_seed001_cross_tab_flip_rate_and_consistent_win_rate() -> None:
    result = audit(seed001_battles())
    judge = result.judges.row(0, named=True)
    assert judge["order_pairs"] == 400
    np.testing.assert_array_equal(cross_tab(result.order_pairs, "j"), [[154, 90, 0], [18, 138, 0], [0, 0, 0]])
    assert judge["order_flip_rate"] == pytest.approx(108 / 400)  # 27%
    assert judge["order_prefers_first_rate"] == pytest.approx(90 / 400)
    assert judge["order_prefers_second_rate"] == pytest.approx(18 / 400)
    # 800 verdicts: first slot won 154 + 90·2 + 138 ... count by slot directly.
    assert judge["slot_n"] == 800
    assert judge["slot_first"] == 154 + 2 * 90 + 138
    pair = result.order_pairs.row(0, named=True)
    assert pair["averaged_win_rate_x"] == pytest.approx(416 / 800)  # the seed's 52%
    assert pair["consistent_win_rate_x"] == pytest.approx(154 / 292)  # 52.7%
    assert pair["consistent_win_rate_x_se"] == pytest.approx(math.sqrt((154 / 292) * (138 / 292) / 292 * cr1(292)))
    assert round(100 * pair["consistent_win_rate_x_se"], 1) == 2.9
    models = result.order_models.filter(pl.col("model") == "B").row(0, named=True)
    assert models["consistent_win_rate"] == pytest.approx(138 / 292)
    assert models["averaged_win_rate"] == pytest.approx(384 / 800)


def test_identical_answer_check_seed001_counts() -> None:
    rows = [("j", f"p{i}", "m", "m", FIRST) for i in range(58)]
    rows += [("j", f"q{i}", "m", "m", SECOND) for i in range(21)]
    rows += [("j", f"r{i}", "m", "m", TIE) for i in range(20)] + [("j", "s", "m", "m", BOTHBAD)]
    judge = audit(battles(rows)).judges.row(0, named=True)
    assert (judge["identical_n"], judge["identical_first"], judge["identical_second"]) == (100, 58, 21)
    assert judge["identical_tie"] + judge["identical_bothbad"] == 21
    assert judge["identical_declared_share"] == pytest.approx(0.79)
    assert judge["identical_first_share_of_declared"] == pytest.approx(58 / 79)
    assert judge["slot_n"] is None  # self-battles never count as position evidence
    assert judge["order_pairs"] is None


def test_ties_and_repeated_verdicts_in_the_cross_tab() -> None:
    rows = [
        # p1: tie in both orders (consistent); p2: x first → x, y first → tie (a tie flip)
        ("j", "p1", "x", "y", TIE),
        ("j", "p1", "y", "x", BOTHBAD),
        ("j", "p2", "x", "y", FIRST),
        ("j", "p2", "y", "x", TIE),
        # p3: judged twice with x first (x, y) and once with y first (y): expected cross-tab ½ (x,y) + ½ (y,y)
        ("j", "p3", "x", "y", FIRST),
        ("j", "p3", "x", "y", SECOND),
        ("j", "p3", "y", "x", FIRST),
        # p4: only one order — an orphan
        ("j", "p4", "x", "y", SECOND),
    ]
    result = audit(battles(rows))
    tab = cross_tab(result.order_pairs, "j")
    np.testing.assert_allclose(tab, [[0, 0.5, 1], [0, 0.5, 0], [0, 0, 1]])
    judge = result.judges.row(0, named=True)
    assert judge["order_pairs"] == 3
    assert judge["order_consistent"] == pytest.approx(1.5)
    assert judge["order_tie_flip_rate"] == pytest.approx(1 / 3)
    # PBA: 8 verdicts; consistent: p1 both (2), p2 none, p3: x-first "y" agrees with y-first "y" (1 + ½ of the
    # y-first verdict's two partners agree), p4 orphan (1) → 2 + 0 + 1.5 + 1 = 4.5
    assert judge["pba_judgments"] == 8
    assert judge["pba_consistent"] == pytest.approx(4.5)
    assert judge["slot_bothbad"] == 1


def test_pba_orphans_count_as_consistent() -> None:
    rows = [("j", "p1", "x", "y", FIRST), ("j", "p1", "y", "x", SECOND), ("j", "p2", "x", "y", FIRST)]
    judge = audit(battles(rows)).judges.row(0, named=True)
    assert (judge["pba_consistent"], judge["pba_judgments"]) == (3, 3)
    assert judge["order_pairs"] == 1
    assert judge["order_flip_rate"] == 0


def test_pba_rate_is_not_a_perfect_score_when_no_pair_was_judged_in_both_orders() -> None:
    """Every verdict an orphan (one order only, as LLMFAO's files): PBA's rule counted all consistent, 100%."""
    rows = [("j", f"p{i}", "x", "y", FIRST if i % 3 else SECOND) for i in range(6)]
    judge = audit(battles(rows)).judges.row(0, named=True)
    assert (judge["pba_consistent"], judge["pba_judgments"], judge["order_pairs"]) == (6, 6, 0)
    assert judge["pba_consistency_rate"] is None
    assert judge["order_flip_rate"] is None


def test_length_profile() -> None:
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "len_a", "len_b")
    rows = [
        ("j", "p1", "x", "y", FIRST, 300, 100),  # longer won
        ("j", "p2", "x", "y", SECOND, 300, 100),  # shorter won
        ("j", "p3", "x", "y", SECOND, 100, 200),  # longer won
        ("j", "p4", "x", "y", TIE, 100, 200),  # tie with different lengths: disagrees with pick-the-longer
        ("j", "p5", "x", "y", FIRST, 150, 150),  # equal lengths
        ("j", "p6", "x", "y", FIRST, None, 150),  # unknown length: left out
    ]
    judge = audit(battles(rows, cols)).judges.row(0, named=True)
    assert judge["len_n"] == 5
    assert judge["len_mean_chosen"] == pytest.approx((300 + 100 + 200 + 150) / 4)
    assert judge["len_mean_rejected"] == pytest.approx((100 + 300 + 100 + 150) / 4)
    assert judge["len_n_decisive_diff"] == 3
    assert judge["len_longer_win_rate"] == pytest.approx(2 / 3)
    assert judge["len_agreement_pick_longer"] == pytest.approx(2 / 4)


def test_own_family_preference() -> None:
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "family_a", "family_b", "judge_family")
    rows = []
    # Judge "o" (family openai) scores gpt 3 wins of 4 against claude; judge "a" (anthropic) 1 win + 1 tie of 4.
    for i, w in enumerate([FIRST, FIRST, FIRST, SECOND]):
        rows.append(("o", f"p{i}", "gpt", "claude", w, "openai", "anthropic", "openai"))
    for i, w in enumerate([FIRST, TIE, SECOND, SECOND]):
        rows.append(("a", f"p{i}", "gpt", "claude", w, "openai", "anthropic", "anthropic"))
    rows.append(("o", "same", "gpt", "gpt2", FIRST, "openai", "openai", "openai"))  # same family: not counted
    fam = audit(battles(rows, cols)).family
    o = fam.filter(pl.col("judge") == "o").row(0, named=True)
    assert (o["n_self"], o["n_other_judges"]) == (4, 4)
    assert o["win_rate_self"] == pytest.approx(0.75)
    assert o["win_rate_other_judges"] == pytest.approx(1.5 / 4)
    assert o["self_preference"] == pytest.approx(0.75 - 0.375)
    # Every (judge, prompt, pair) holds one battle: clusters of one, so each side's variance is var(score)/n,
    # ties scoring ½ (1, 1, 1, 0: 0.1875; 1, ½, 0, 0: 0.171875), not the binomial p(1 − p); 4 clusters a side.
    expected_se = math.sqrt((0.1875 / 4 + 0.171875 / 4) * cr1(4))
    assert o["self_preference_se"] == pytest.approx(expected_se)
    a = fam.filter(pl.col("judge") == "a").row(0, named=True)
    assert a["win_rate_self"] == pytest.approx(2.5 / 4)  # claude under its own family's judge
    assert a["win_rate_other_judges"] == pytest.approx(1 / 4)


def test_family_table_orders_the_families_of_one_judge_name() -> None:
    """One judge name under several families (a pool of judges of different families): a row per family, in the
    families' order, not polars' group order (which changes from run to run)."""
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "family_a", "family_b", "judge_family")
    families = ["qwen", "openai", "meta", "anthropic", "mistral", "google"]
    rows = [("pool", f"p{i}", f"m-{f}", "other", FIRST, f, "zz", f) for i, f in enumerate(families)]
    fam = audit(battles(rows, cols)).family
    assert fam.select("judge", "judge_family").rows() == [("pool", f) for f in sorted(families)]


def test_clustered_standard_errors_by_hand() -> None:
    """Both orders of a prompt agreeing are one cluster, not two battles: hand-checked sandwich SEs."""
    cols = (
        "judge",
        "prompt_id",
        "model_a",
        "model_b",
        "winner",
        "len_a",
        "len_b",
        "family_a",
        "family_b",
        "judge_family",
    )
    rows = []
    # Judge o (openai): on p0, p1 gpt wins in both orders, on p2 claude does; gpt's answer is the longer one.
    for i, gpt_won in enumerate([True, True, False]):
        rows.append(
            ("o", f"p{i}", "gpt", "claude", FIRST if gpt_won else SECOND, 300, 100, "openai", "anthropic", "openai")
        )
        rows.append(
            ("o", f"p{i}", "claude", "gpt", SECOND if gpt_won else FIRST, 100, 300, "anthropic", "openai", "openai")
        )
    # Judge a (anthropic), one order only, no prompt_id: three clusters of one (gpt won, lost, tied).
    for w in (FIRST, SECOND, TIE):
        rows.append(("a", None, "gpt", "claude", w, 300, 100, "openai", "anthropic", "anthropic"))
    result = audit(battles(rows, cols))
    o = result.judges.filter(pl.col("judge") == "o").row(0, named=True)
    # Longer wins 4 of 6; clusters (n, s) = (2, 2), (2, 2), (2, 0): Σ(s − p n)² = 2·(2/3)² + (4/3)² = 8/3.
    assert o["len_longer_win_rate"] == pytest.approx(4 / 6)
    assert o["len_longer_win_rate_se"] == pytest.approx(math.sqrt(8 / 3 * cr1(3)) / 6)  # 0.333; binomial: 0.192
    fam = result.family.filter(pl.col("judge") == "o").row(0, named=True)
    # Self side as above (0.272); other side: judge a's gpt scores 1, 0, ½ as clusters of one: var = (1/6)/3.
    assert fam["self_preference"] == pytest.approx(4 / 6 - 0.5)
    assert fam["self_preference_se"] == pytest.approx(math.sqrt(8 / 3 / 36 * cr1(3) + 1 / 18 * cr1(3)))


def test_flip_rate_standard_error_with_one_pair_a_prompt() -> None:
    """One pair a prompt, one verdict per order: the binomial over pairs (seed001: 27% of 400). A prompt judged
    twice in one order is one pair of consistent share ½, not two pairs: its SE comes from the shares' spread."""
    judge = audit(seed001_battles()).judges.row(0, named=True)
    assert judge["order_flip_rate_se"] == pytest.approx(math.sqrt(0.27 * 0.73 / 400 * cr1(400)))
    rows = [
        ("j", "p1", "x", "y", FIRST),  # p1: x first → x, x first → y, y first → x: consistent share ½
        ("j", "p1", "x", "y", SECOND),
        ("j", "p1", "y", "x", SECOND),
        ("j", "p2", "x", "y", FIRST),  # p2: consistent
        ("j", "p2", "y", "x", SECOND),
        ("j", "p3", "x", "y", FIRST),  # p3: flipped
        ("j", "p3", "y", "x", FIRST),
    ]
    judge = audit(battles(rows)).judges.row(0, named=True)
    assert judge["order_flip_rate"] == pytest.approx(0.5)
    # Σ c² = ¼ + 1 + 0 over 3 pairs, mean ½: var = (1.25 − 3/4)/9.
    assert judge["order_flip_rate_se"] == pytest.approx(math.sqrt(0.5 / 9 * cr1(3)))  # 0.289


def test_flip_rate_and_consistent_win_rate_standard_errors_take_the_prompt_as_the_cluster() -> None:
    """A judge's verdicts on one prompt are one cluster across the pairs: baseline b meets m1 and m2 on p1..p3, each
    pair in both orders.  p1: both pairs flip; p2: both consistent, b wins; p3: (b, m1) consistent, m1 wins,
    (b, m2) flips.  The per-pair rates keep the prompt-pair as the unit (the cluster restricted to the pair)."""
    outcome = {  # (prompt, opponent): winner with b shown first, winner with the opponent shown first
        ("p1", "m1"): ("b", "m1"),
        ("p1", "m2"): ("b", "m2"),
        ("p2", "m1"): ("b", "b"),
        ("p2", "m2"): ("b", "b"),
        ("p3", "m1"): ("m1", "m1"),
        ("p3", "m2"): ("b", "m2"),
    }
    rows = []
    for (prompt, m), (b_first, m_first) in outcome.items():
        rows.append(("j", prompt, "b", m, FIRST if b_first == "b" else SECOND))
        rows.append(("j", prompt, m, "b", FIRST if m_first == m else SECOND))
    result = audit(battles(rows))
    judge = result.judges.row(0, named=True)
    assert judge["order_flip_rate"] == pytest.approx(0.5)
    # Clusters (N_c, C_c) = (2, 0), (2, 2), (2, 1); consistency ½: Σ (C_c − ½ N_c)² = 2.  The prompt-pair as the
    # unit (before): six pairs, consistent 0, 0, 1, 1, 1, 0 → sqrt(1.5)/6 = 0.204.
    assert judge["order_flip_rate_se"] == pytest.approx(math.sqrt(2 * cr1(3)) / 6)  # 0.289
    base = result.order_models.filter(pl.col("model") == "b").row(0, named=True)
    # b among its consistent pairs: clusters (n, s) = (2, 2) on p2 and (1, 0) on p3, p̂ = 2/3: Σ (s − p̂ n)² = 8/9.
    # Pair as the unit (before): scores 1, 1, 0 → sqrt((2/9)/3) = 0.272.
    assert base["consistent_win_rate"] == pytest.approx(2 / 3)
    assert base["consistent_win_rate_se"] == pytest.approx(math.sqrt(8 / 9 * cr1(2)) / 3)  # 0.444
    m1 = result.order_models.filter(pl.col("model") == "m1").row(0, named=True)
    assert m1["consistent_win_rate_se"] == pytest.approx(0.5 / math.sqrt(2) * math.sqrt(cr1(2)))  # once a prompt
    pair = result.order_pairs.filter(pl.col("model_y") == "m1").row(0, named=True)
    assert pair["flip_rate"] == pytest.approx(1 / 3)
    assert pair["flip_rate_se"] == pytest.approx(math.sqrt((2 / 9) / 3 * cr1(3)))
    assert pair["consistent_win_rate_x_se"] == pytest.approx(0.5 / math.sqrt(2) * math.sqrt(cr1(2)))


def test_consistent_win_rate_standard_error_weighs_a_repeated_prompt_pair_as_one_unit() -> None:
    """Judged twice in one order, a prompt-pair is one unit of weight its consistent share (here ½), not ½ of a
    unit's variance spread over verdict combinations.  p1: x first → x and → y, y first → x (share ½, all of it
    x's); p2: consistent, x wins; p3: flipped; p4: consistent, y wins."""
    rows = [
        ("j", "p1", "x", "y", FIRST),
        ("j", "p1", "x", "y", SECOND),
        ("j", "p1", "y", "x", SECOND),
        ("j", "p2", "x", "y", FIRST),
        ("j", "p2", "y", "x", SECOND),
        ("j", "p3", "x", "y", FIRST),
        ("j", "p3", "y", "x", FIRST),
        ("j", "p4", "x", "y", SECOND),
        ("j", "p4", "y", "x", FIRST),
    ]
    result = audit(battles(rows))
    pair = result.order_pairs.row(0, named=True)
    assert pair["consistent_win_rate_x"] == pytest.approx(1.5 / 2.5)
    # Units (n, s) = (½, ½), (1, 1), (0, 0), (1, 0): Σ (s − 0.6 n)² = 0.56.  Before: var/n over the expected
    # verdict combinations, sqrt((1.5/2.5 − 0.36)/2.5) = 0.310.
    assert pair["consistent_win_rate_x_se"] == pytest.approx(math.sqrt(0.56 * cr1(3)) / 2.5)  # 0.367
    x = result.order_models.filter(pl.col("model") == "x").row(0, named=True)
    assert x["consistent_win_rate_se"] == pytest.approx(math.sqrt(0.56 * cr1(3)) / 2.5)  # one pair: its units
    judge = result.judges.row(0, named=True)
    # Flip rate over 4 pairs, consistent 0.5 + 1 + 0 + 1 = 2.5: Σ C² = 2.25, p̂ = 0.625: (2.25 − 2·0.625·2.5 + 0.625²·4)
    assert judge["order_flip_rate_se"] == pytest.approx(math.sqrt((2.25 - 3.125 + 1.5625) * cr1(4)) / 4)


def test_audit_page_shows_rates_with_one_standard_error() -> None:
    """The page showed bare percentages although the SEs were computed; now x% ± y%, and the note says what ± is."""
    from biasboard.report.audit import render_audit_section

    page = render_audit_section(audit(seed001_battles()))
    assert "27.0% ± 2.2%" in page  # flip rate 108 / 400, SE sqrt(0.27 · 0.73 / 400)
    assert "± is one standard error" in page
    assert (
        "The flip rate, longer-wins, own-family, gold accuracy and consistent win rate SEs are cluster-robust, a "
        "judge&#x27;s verdicts on one prompt (both orders, repeats, every pair, every day unless a note says within a "
        "day) one cluster, with the small-sample factor G/(G − 1)" in page
    )
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "len_a", "len_b", "gold")
    rows = [("j", f"p{i}", "x", "y", w, 300, 100, FIRST) for i, w in enumerate([FIRST, FIRST, SECOND, TIE])]
    page = render_audit_section(audit(battles(rows, cols)).to_json())  # as audit.json holds it
    assert "66.7% ± 33.3%" in page  # longer wins 2 of 3 decisive, prompts apart: sqrt((2/3)(1/3)/3 · 3/2)
    assert "62.5% ± 23.9%" in page  # gold accuracy 1, 1, 0, ½: sqrt(0.171875 / 4 · 4/3)
    assert "± –" not in page  # no pair in both orders: the flip rate is a dash, not "– ± –"


def two_order_replicates(seed: int, kind: str, replicates: int = 400, prompts: int = 60) -> pl.DataFrame:
    """Independent datasets of known truth in one table: replicate r has its own judges o{r} (family F{r}) and
    a{r} (G{r}) and models g{r} (F{r}) and c{r} (G{r}); each judge sees every prompt in both orders.

    ``agree``: a judge gives one verdict per prompt in both orders (gpt wins with 0.6 under o, 0.5 under a).
    ``flip``: on 70% of prompts a judge picks the first-shown answer (the two orders disagree), else as
    ``agree`` with 0.8 under o, 0.5 under a.  Each prompt's g answer is longer with probability ½,
    independent of the verdicts, so the longer answer wins half the decisive battles under every judge.
    The gold label names g's answer the winner, so a judge's gold accuracy is g's win rate under it.
    """
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(replicates), prompts)
    n = r.size
    frames = []
    for judge, p_g in (("o", 0.6 if kind == "agree" else 0.8), ("a", 0.5)):
        g_wins = rng.random(n) < p_g
        positional = rng.random(n) < (0.7 if kind == "flip" else 0.0)
        g_longer = rng.random(n) < 0.5
        for g_first in (True, False):
            first_won = np.where(positional, True, g_wins == g_first)
            frames.append(
                pl.DataFrame(
                    {
                        "judge": [f"{judge}{i}" for i in r],
                        "prompt_id": [f"p{i}" for i in range(n)],
                        "g": [f"g{i}" for i in r],
                        "c": [f"c{i}" for i in r],
                        "winner": np.where(first_won, FIRST, SECOND),
                        "len_g": np.where(g_longer, 300, 100),
                        "len_c": np.where(g_longer, 100, 300),
                        "fam_g": [f"F{i}" for i in r],
                        "fam_c": [f"G{i}" for i in r],
                        "judge_family": [f"{'F' if judge == 'o' else 'G'}{i}" for i in r],
                        "gold": FIRST if g_first else SECOND,
                    }
                ).select(
                    "judge",
                    "prompt_id",
                    pl.col("g" if g_first else "c").alias("model_a"),
                    pl.col("c" if g_first else "g").alias("model_b"),
                    "winner",
                    pl.col("len_g" if g_first else "len_c").alias("len_a"),
                    pl.col("len_c" if g_first else "len_g").alias("len_b"),
                    pl.col("fam_g" if g_first else "fam_c").alias("family_a"),
                    pl.col("fam_c" if g_first else "fam_g").alias("family_b"),
                    "judge_family",
                    "gold",
                )
            )
    return pl.concat(frames)


def coverage(estimate: pl.Series, se: pl.Series, true: float | pl.Series) -> float:
    """Share of the ±1.96 SE intervals around ``estimate`` that hold the truth."""
    return float(((estimate - true).abs() <= 1.96 * se).mean())


@pytest.mark.parametrize(
    ("kind", "truth", "old_coverage"),
    [("agree", 0.6 - 0.5, (0.0, 0.88)), ("flip", 0.7 * 0.5 + 0.3 * 0.8 - 0.5, (0.975, 1.0))],
)
def test_clustered_standard_errors_cover_the_truth(kind: str, truth: float, old_coverage: tuple) -> None:
    """400 simulated datasets of known truth: the ±1.96 SE intervals of the self-preference, the longer-wins
    rate and the flip rate cover the truth about 95% of the time (measured: 0.955 / 0.956 agree, 0.955 / 0.951
    flip).  The per-battle binomial SEs they had covered 0.84 / 0.82 when both orders agree (too small by
    about √2) and 0.99 / 0.98 when they flip (too large)."""
    result = audit(two_order_replicates(11 if kind == "agree" else 12, kind))
    fam = result.family.filter(pl.col("judge").str.starts_with("o"))
    assert fam.height == 400
    new = coverage(fam["self_preference"], fam["self_preference_se"], truth)
    p_s, p_o = fam["win_rate_self"], fam["win_rate_other_judges"]
    binomial = (p_s * (1 - p_s) / fam["n_self"] + p_o * (1 - p_o) / fam["n_other_judges"]).sqrt()
    old = coverage(fam["self_preference"], binomial, truth)
    judges = result.judges
    longer = coverage(judges["len_longer_win_rate"], judges["len_longer_win_rate_se"], 0.5)
    n = judges["len_n_decisive_diff"]
    longer_old = coverage(judges["len_longer_win_rate"], (0.25 / n).sqrt(), 0.5)  # binomial SE at the truth
    print(f"{kind}: self-preference {new:.3f} (binomial {old:.3f}); longer wins {longer:.3f} ({longer_old:.3f})")
    assert 0.92 <= new <= 0.975
    assert old_coverage[0] <= old <= old_coverage[1]
    assert 0.92 <= longer <= 0.975
    assert old_coverage[0] <= longer_old <= old_coverage[1]
    if kind == "flip":  # 70% of pairs flip under every judge; with agreeing orders the flip rate is 0 (SE 0)
        assert 0.92 <= coverage(judges["order_flip_rate"], judges["order_flip_rate_se"], 0.7) <= 0.975


def shared_baseline_replicates(seed: int, replicates: int = 400, prompts: int = 40, models: int = 8) -> pl.DataFrame:
    """Independent datasets of known truth in AlpacaEval's design: replicate r has one judge j{r}, a baseline b{r}
    and ``models`` models; on every prompt each model's answer is judged against the baseline's, in one shown order
    drawn at random.  Per prompt the baseline's answer is the longer with probability ½ and the judge likes it by a
    prompt effect u_p ~ N(0, 1.5²) in logits — both shared by the prompt's pairs, so whether the longer answer won
    is ½ by symmetry and correlated across a prompt's pairs."""
    rng = np.random.default_rng(seed)
    n_prompts = replicates * prompts
    prompt = np.repeat(np.arange(n_prompts), models)
    rep = prompt // prompts
    u = rng.normal(0.0, 1.5, n_prompts)[prompt]
    base_longer = (rng.random(n_prompts) < 0.5)[prompt]
    base_wins = rng.random(prompt.size) < 1.0 / (1.0 + np.exp(-u))
    base_first = rng.random(prompt.size) < 0.5
    model = [f"m{r}_{k}" for r, k in zip(rep, np.tile(np.arange(models), n_prompts), strict=True)]
    base = [f"b{r}" for r in rep]
    return pl.DataFrame(
        {
            "judge": [f"j{r}" for r in rep],
            "prompt_id": [f"p{p}" for p in prompt],
            "model_a": np.where(base_first, base, model),
            "model_b": np.where(base_first, model, base),
            "winner": np.where(base_wins == base_first, FIRST, SECOND),
            "len_a": np.where(base_first == base_longer, 300, 100),
            "len_b": np.where(base_first == base_longer, 100, 300),
        }
    )


def test_a_cluster_is_the_prompt_when_its_answers_meet_several_opponents() -> None:
    """400 simulated judges in AlpacaEval's design (a baseline's answer meets every model's on a prompt): the
    verdicts on one prompt share its answers, across pairs.  Clustered by prompt, the longer-wins SE covers the
    truth ~95% of the time (measured 0.955); clustered by prompt and pair, as before, it covered 0.745 (mean SE
    0.028 against a spread of 0.047 across the datasets)."""
    judges = audit(shared_baseline_replicates(5)).judges
    assert judges.height == 400
    covered = coverage(judges["len_longer_win_rate"], judges["len_longer_win_rate_se"], 0.5)
    assert 0.92 <= covered <= 0.975, covered


def test_the_cluster_sketch_estimates_the_union_of_days() -> None:
    """3 days of 5,000 (judge, prompt) keys, 40% of each day's keys on every day: the HyperLogLog union of the days'
    sketches is within a few % of the truth (2,000 + 3 × 3,000 = 11,000 keys; S = 15,000, so 27% recur), the days'
    distinct keys are exact, and a small set (linear counting) is near exact."""
    from biasboard.audit.measures import ClusterRecurrence, cluster_sketch, merge_sketches

    def keys(names: list[str]) -> pl.DataFrame:
        return pl.DataFrame({"judge": [f"j{i % 7}" for i in range(len(names))], "prompt_id": names})

    shared = [f"shared-{i}" for i in range(2000)]
    days = [keys(shared + [f"day{d}-{i}" for i in range(3000)]) for d in range(3)]
    sketches = [cluster_sketch(pl.concat([d, d.head(500)])) for d in days]  # repeats in a day count once
    assert [s["day_keys"].item() for s in sketches] == [5000] * 3
    recurrence = ClusterRecurrence.of(merge_sketches(sketches))
    truth = 11_000
    print(f"union {recurrence.distinct_keys:,.0f} (truth {truth:,}); share {recurrence.recurring_share:.4f}")
    assert recurrence.day_keys == 15_000 and recurrence.days == 3
    assert abs(recurrence.distinct_keys / truth - 1) < 0.05  # measured +2.1% (+3.1% with the polars hash it replaced)
    assert abs(recurrence.recurring_share - (1 - truth / 15_000)) < 0.03
    small = ClusterRecurrence.of(merge_sketches([cluster_sketch(keys([f"p{i}" for i in range(300)]), days=0)]))
    assert abs(small.distinct_keys - 300) < 5 and small.days == 1 and small.recurring_share == 0.0
    # Null prompt_ids are left out: such a battle is a cluster of its own and never recurs.
    with_nulls = pl.concat([days[0], pl.DataFrame({"judge": ["j0"] * 10, "prompt_id": [None] * 10})])
    assert cluster_sketch(with_nulls).equals(sketches[0])


def by_day(frame: pl.DataFrame, day: pl.Expr, days: int) -> list[AuditPartials]:
    """Each day's partials, reduced within the day as the jobs reduce them."""
    frame = frame.with_columns(day.alias("_day"))
    return [reduce_order_rows(audit_partials(frame.filter(pl.col("_day") == d).drop("_day"))) for d in range(days)]


def test_an_audit_says_how_many_clusters_recur_on_other_days(monkeypatch) -> None:
    """AlpacaEval's design judged one model a day against the baseline's answers on the same 40 prompts.  Above
    the history closure's bound (set tiny here) the clusters are closed within a day, so the same (judge, prompt)
    on 8 days is 8 clusters (95% intervals then covered 0.745, not 0.955).  The audit measures the recurring share
    (1 − 1/8 = 0.875 here, 0.5 over 2 days), puts it in audit.json with ``closed_over: day``, and says it in a
    note and on the audit page; prompts unique to a day say ~0 and no note; battles without a prompt_id are not
    counted.  Under the bound (the default: 4,000 keys) the clusters are closed over the history: no note."""
    from biasboard.audit import measures
    from biasboard.report.audit import render_audit_section
    from biasboard.transforms.audit import AUDIT_HTML, AUDIT_JSON, audit_files

    data = shared_baseline_replicates(5, replicates=100)
    model = pl.when(pl.col("model_a").str.starts_with("m")).then(pl.col("model_a")).otherwise(pl.col("model_b"))
    index = model.str.split("_").list.get(1).cast(pl.Int64)
    no_prompt = data.head(400).with_columns(pl.lit(None, pl.String).alias("prompt_id"))
    counts = {"read": data.height + no_prompt.height, "counted": data.height + no_prompt.height}
    history = finish_audit(merge_partials(by_day(pl.concat([data, no_prompt]), index % 8, 8)))
    assert history.clusters.closed_over == "history" and history.clusters.note() is None
    document = json.loads(audit_files(history, counts)[AUDIT_JSON])
    assert document["clusters"]["closed_over"] == "history"
    assert not [n for n in document["notes"] if "clusters repeat" in n]
    monkeypatch.setattr(measures, "HISTORY_CLOSURE_MAX_KEYS", 100)
    for days, truth in ((8, 0.875), (2, 0.5)):
        parts = by_day(pl.concat([data, no_prompt]), index % days, days)
        result = finish_audit(merge_partials(parts))
        clusters = result.clusters
        assert clusters.closed_over == "day"
        print(f"{days} days: recurring share {clusters.recurring_share:.4f} (truth {truth})")
        assert clusters.days == days and clusters.day_keys == 100 * 40 * days  # the null prompt_ids not counted
        assert abs(clusters.recurring_share - truth) < 0.02
        files = audit_files(result, counts)
        document = json.loads(files[AUDIT_JSON])
        assert document["clusters"] == clusters.to_json() and document["clusters"]["closed_over"] == "day"
        note = [n for n in document["notes"] if "clusters repeat one judged on another day" in n]
        assert len(note) == 1 and f"{clusters.recurring_share:.0%}" in note[0] and f"over {days} days" in note[0]
        assert "covered 0.745, not 0.955" in note[0]
        page = files[AUDIT_HTML].decode()
        assert "clusters repeat one judged on another day" in page
        assert render_audit_section(document) == page  # from audit.json as from the result
    unique = by_day(data, pl.col("prompt_id").str.slice(1).cast(pl.Int64) % 4, 4)  # each prompt on one day
    result = finish_audit(merge_partials(unique))
    assert result.clusters.days == 4 and result.clusters.day_keys == 100 * 40
    # Truth 0: within three of the sketch's standard errors (1.04/√4096 = 1.6%) of it.  Measured 0.025 (4,000 keys
    # read 3,899); it read under 0.02 with polars' hash, this test's bound then — 1.25 SEs, a coin flip of the hash.
    assert result.clusters.recurring_share < 3 * 1.04 / measures.SKETCH_REGISTERS**0.5
    files = audit_files(result, counts)
    document = json.loads(files[AUDIT_JSON])
    assert document["clusters"]["recurring_share"] == result.clusters.to_json()["recurring_share"]
    assert not [n for n in document["notes"] if "clusters repeat" in n]
    assert "clusters repeat" not in files[AUDIT_HTML].decode()


def baseline_model_index() -> pl.Expr:
    """The model's number k in ``shared_baseline_replicates``' m{r}_{k}: one model a day, in the tests below."""
    model = pl.when(pl.col("model_a").str.starts_with("m")).then(pl.col("model_a")).otherwise(pl.col("model_b"))
    return model.str.split("_").list.get(1).cast(pl.Int64)


def test_clusters_closed_over_the_history_cover_the_truth_when_prompts_recur_across_days(monkeypatch) -> None:
    """One model a day against the baseline on the same 40 prompts, 8 days, 400 simulated datasets: the clusters
    closed over the history (the default: 16,000 keys, far under the bound) make a prompt's verdicts of every day
    one cluster, and the longer-wins 95% interval covers the truth as the audit of one day does (measured 0.958,
    with the CR1 factor); closed within each day (the bound set tiny), as every audit was, it covered 0.745."""
    from biasboard.audit import measures

    parts = by_day(shared_baseline_replicates(5), baseline_model_index() % 8, 8)
    history = finish_audit(merge_partials(parts))
    assert history.clusters.closed_over == "history" and history.clusters.days == 8
    judges = history.judges
    covered = coverage(judges["len_longer_win_rate"], judges["len_longer_win_rate_se"], 0.5)
    monkeypatch.setattr(measures, "HISTORY_CLOSURE_MAX_KEYS", 1000)
    apart = finish_audit(merge_partials(parts))
    assert apart.clusters.closed_over == "day"
    covered_apart = coverage(apart.judges["len_longer_win_rate"], apart.judges["len_longer_win_rate_se"], 0.5)
    print(f"longer wins over 8 days: closed over the history {covered:.3f}, within each day {covered_apart:.3f}")
    assert 0.92 <= covered <= 0.975
    assert covered_apart < 0.8


@pytest.mark.parametrize("seed", [1, 2])
def test_clusters_closed_over_the_history_equal_one_audit_of_every_day(seed: int, monkeypatch) -> None:
    """The incremental equals the full: 3 days sharing their 40 prompts and 3 judges (each model pair on one day,
    so every (judge, prompt, pair) group — its both orders, its repeats — is whole in a day while its (judge,
    prompt) cluster spans the days) audited apart, summed and closed over the history, give the audit of all the
    battles as one day, every table and SE to 1e-12: length, family, gold, the flip rate per judge and per pair,
    the consistent win rates per (judge, model), per pair and pooled over judges.  Closed within each day (the
    bound set tiny) they do not."""
    from biasboard.audit import measures

    data = random_battles(seed)
    pair = pl.concat_str(pl.min_horizontal("model_a", "model_b"), pl.max_horizontal("model_a", "model_b"))
    day = pair.hash(seed=3) % 3
    days = by_day(data, day, 3)
    history = finish_audit(merge_partials(days[::-1]))
    together = audit(data)
    assert history.clusters.closed_over == "history" and history.clusters.recurring_share > 0.3
    assert_same_result(together, history, rtol=0.0)
    assert_frames_close(pooled_models(history.order_pairs), pooled_models(together.order_pairs), rtol=0.0)
    monkeypatch.setattr(measures, "HISTORY_CLOSURE_MAX_KEYS", 10)
    apart = finish_audit(merge_partials(days))
    assert apart.clusters.closed_over == "day"
    for column in ("len_longer_win_rate_se", "gold_accuracy_se", "order_flip_rate_se"):
        assert (apart.judges[column] - together.judges[column]).abs().max() > 1e-4, column
    assert (apart.family["self_preference_se"] - together.family["self_preference_se"]).abs().max() > 1e-4
    ours = apart.order_models["consistent_win_rate_se"] - together.order_models["consistent_win_rate_se"]
    assert ours.abs().max() > 1e-4


def test_history_closure_of_a_prompt_pair_judged_on_several_days() -> None:
    """A prompt-pair judged in both orders on two days is one unit of the per-pair rates (N_u = 2 days, its
    consistent shares summed), and one (judge, prompt) cluster: by hand.  p1 consistent (x wins) on day 1 and
    flipped on day 2; p2 consistent (x wins) on both; p3 consistent (y wins) on day 1 only."""
    day1 = [("j", "p1", "x", "y", FIRST), ("j", "p1", "y", "x", SECOND)]
    day1 += [("j", "p2", "x", "y", FIRST), ("j", "p2", "y", "x", SECOND)]
    day1 += [("j", "p3", "x", "y", SECOND), ("j", "p3", "y", "x", FIRST)]
    day2 = [("j", "p1", "x", "y", FIRST), ("j", "p1", "y", "x", FIRST)]
    day2 += [("j", "p2", "x", "y", FIRST), ("j", "p2", "y", "x", SECOND)]
    days = [reduce_order_rows(audit_partials(battles(rows))) for rows in (day1, day2)]
    result = finish_audit(merge_partials(days))
    assert result.clusters.closed_over == "history"
    pair = result.order_pairs.row(0, named=True)
    # Units (N, C, s): p1 (2, 1, 1), p2 (2, 2, 2), p3 (1, 1, 0); flip: 5 pairs, 4 consistent, p̂ = 0.8:
    # Σ (C − p̂ N)² = 0.36 + 0.16 + 0.04 = 0.56, G = 3.
    assert pair["flip_rate"] == pytest.approx(0.2)
    assert pair["flip_rate_se"] == pytest.approx(math.sqrt(0.56 * cr1(3)) / 5)
    # Consistent win rate of x: n = C, s = s: (1, 1), (2, 2), (1, 0); p̂ = 3/4: Σ (s − p̂ n)² = 1/16 + 1/4 + 9/16.
    assert pair["consistent_win_rate_x"] == pytest.approx(0.75)
    assert pair["consistent_win_rate_x_se"] == pytest.approx(math.sqrt(0.875 * cr1(3)) / 4)
    judge = result.judges.row(0, named=True)  # one pair a prompt: the (judge, prompt) clusters are the units
    assert judge["order_flip_rate_se"] == pytest.approx(pair["flip_rate_se"])
    x = result.order_models.filter(pl.col("model") == "x").row(0, named=True)
    assert x["consistent_win_rate_se"] == pytest.approx(pair["consistent_win_rate_x_se"])


def test_the_cr1_factor_against_the_raw_clusters() -> None:
    """Every clustered SE carries G/(G − 1), G the clusters with n_c > 0, as Stata and statsmodels do by default:
    the longer-wins SE of 20 judges computed by hand with numpy from the raw (judge, prompt) clusters; one cluster
    (G = 1) gives no SE (null), where it gave 0."""
    data = shared_baseline_replicates(3, replicates=20, prompts=5, models=3)
    judges = audit(data).judges.sort("judge")
    longer = (pl.col("len_a") > pl.col("len_b")) == (pl.col("winner") == FIRST)
    clusters = data.group_by("judge", "prompt_id").agg(pl.len().alias("n"), longer.sum().alias("s")).sort("judge")
    for judge, rows in clusters.group_by("judge", maintain_order=True):
        n, s = rows["n"].to_numpy().astype(float), rows["s"].to_numpy().astype(float)
        p, g = s.sum() / n.sum(), len(n)
        se = np.sqrt(g / (g - 1) * np.sum((s - p * n) ** 2)) / n.sum()
        row = judges.filter(pl.col("judge") == judge[0]).row(0, named=True)
        assert row["len_longer_win_rate"] == pytest.approx(p)
        assert row["len_longer_win_rate_se"] == pytest.approx(se, rel=1e-12)
    one = audit(data.filter(pl.col("prompt_id") == data["prompt_id"][0])).judges.row(0, named=True)
    assert one["len_n_decisive_diff"] == 3 and one["len_longer_win_rate_se"] is None


def shared_baseline_both_orders(seed: int, replicates: int = 400, prompts: int = 80, models: int = 8) -> pl.DataFrame:
    """Independent datasets of known truth in AlpacaEval's design, every pair judged in both orders: replicate r has
    one judge j{r}, a baseline b{r} and ``models`` models, each meeting the baseline on every prompt.  The judge is
    position-biased by prompt: on a prompt it picks the first-shown answer in both orders (a flip) with
    probability q_p, 0.1 or 0.9 with ½ each — shared by the prompt's pairs, so the flip rate is ½ and its flips are
    correlated across a prompt's pairs.  Otherwise it gives one verdict in both orders: the baseline wins with
    probability σ(u_p), u_p ~ N(0, 1.5²) also shared by the prompt's pairs, so the baseline's win rate among
    consistent pairs is ½ (q_p and u_p are independent), with correlated verdicts across a prompt's pairs."""
    rng = np.random.default_rng(seed)
    n_prompts = replicates * prompts
    prompt = np.repeat(np.arange(n_prompts), models)  # one entry per prompt-pair
    q = np.where(rng.random(n_prompts) < 0.5, 0.1, 0.9)[prompt]
    u = rng.normal(0.0, 1.5, n_prompts)[prompt]
    pairs = pl.DataFrame(
        {
            "rep": prompt // prompts,
            "prompt": prompt,
            "k": np.tile(np.arange(models), n_prompts),
            "positional": rng.random(prompt.size) < q,
            "base_wins": rng.random(prompt.size) < 1.0 / (1.0 + np.exp(-u)),
        }
    )
    return _in_both_orders(pairs, pl.format("j{}", "rep"))


def test_flip_rate_and_consistent_win_rate_cover_the_truth_when_a_prompt_meets_several_opponents() -> None:
    """400 simulated judges, each position-biased by prompt, a baseline meeting 8 models on 80 prompts in both
    orders: clustered by (judge, prompt), the flip rate's and the baseline's consistent win rate's ±1.96 SE
    intervals cover the truth about 95% of the time (measured 0.948 and 0.943; seeds 2, 3: 0.940 / 0.945, 0.940
    / 0.953).  With the prompt-pair as the unit, as before, they covered 0.570 and 0.800 (mean flip SE 0.020
    against a spread of 0.047 across the datasets; the clustered SE's mean is 0.046)."""
    result = audit(shared_baseline_both_orders(1))
    judges = result.judges.sort("judge")
    assert judges.height == 400
    flips = coverage(judges["order_flip_rate"], judges["order_flip_rate_se"], 0.5)
    sums = judge_order_sums(result.order_pairs).sort("judge")  # the prompt-pair as the unit: Σ C_p², the binomial
    consistent, n = sums["c_xx"] + sums["c_yy"] + sums["c_tt"], sums["pairs"]
    p = consistent / n
    by_pair = ((sums["consistent_sq"] - 2 * p * consistent + p * p * n).clip(lower_bound=0.0).sqrt()) / n
    flips_by_pair = coverage(judges["order_flip_rate"], by_pair, 0.5)
    base = result.order_models.filter(pl.col("model").str.starts_with("b"))
    assert base.height == 400
    rate, k = base["consistent_win_rate"], base["consistent"]
    plain = ((base["consistent_wins"] + 0.25 * base["consistent_ties"]) / k - rate * rate).clip(lower_bound=0.0)
    baseline = coverage(rate, base["consistent_win_rate_se"], 0.5)
    baseline_by_pair = coverage(rate, (plain / k).sqrt(), 0.5)
    print(f"flip rate {flips:.3f} (by pair {flips_by_pair:.3f}); baseline {baseline:.3f} ({baseline_by_pair:.3f})")
    assert 0.92 <= flips <= 0.975
    assert flips_by_pair < 0.7
    assert 0.92 <= baseline <= 0.975
    assert baseline_by_pair < 0.85
    # Each model meets the baseline once a prompt: its clusters are its prompt-pairs, and its SE covers as well.
    models = result.order_models.filter(pl.col("model").str.starts_with("m"))
    assert 0.92 <= coverage(models["consistent_win_rate"], models["consistent_win_rate_se"], 0.5) <= 0.975


def several_judges_shared_prompts(
    seed: int, replicates: int = 400, prompts: int = 40, models: int = 4, judges: int = 4
) -> pl.DataFrame:
    """Independent datasets of known truth where several judges judge the same answers: replicate r has a baseline
    b{r} and ``models`` models, each meeting the baseline on every prompt, every pair judged in both orders by
    each of ``judges`` judges (j0, j1, ... — the same names in every replicate; the pooled table sums them).  Per
    (judge, prompt, pair) the judge picks the first-shown answer in both orders (a flip) with probability 0.3;
    otherwise it gives one verdict in both orders, the baseline winning with probability σ(u_p), u_p ~ N(0, 1.5²)
    the baseline's answer's appeal on the prompt, shared by every judge and every pair of the prompt.  So the
    baseline's consistent win rate pooled over judges is ½, and its verdicts correlate across judges of a prompt."""
    rng = np.random.default_rng(seed)
    n_prompts = replicates * prompts
    n = n_prompts * models * judges
    prompt = np.repeat(np.arange(n_prompts), models * judges)  # one entry per (prompt, pair, judge)
    u = rng.normal(0.0, 1.5, n_prompts)[prompt]
    pairs = pl.DataFrame(
        {
            "rep": prompt // prompts,
            "prompt": prompt,
            "k": np.tile(np.repeat(np.arange(models), judges), n_prompts),
            "j": np.tile(np.arange(judges), n_prompts * models),
            "positional": rng.random(n) < 0.3,
            "base_wins": rng.random(n) < 1.0 / (1.0 + np.exp(-u)),
        }
    )
    return _in_both_orders(pairs, pl.format("j{}", "j"))


def _in_both_orders(pairs: pl.DataFrame, judge: pl.Expr) -> pl.DataFrame:
    """Each simulated baseline-vs-model verdict of ``pairs`` (rep, prompt, k, positional, base_wins) as two battles,
    the baseline shown first then second: a positional verdict goes to the first-shown answer, else the baseline
    wins as drawn; ``judge`` names the row's judge."""
    base, model = pl.format("b{}", "rep"), pl.format("m{}_{}", "rep", "k")
    frames = []
    for base_first in (True, False):
        first_won = pl.col("positional") | (pl.col("base_wins") == base_first)
        frames.append(
            pairs.select(
                judge.alias("judge"),
                pl.format("p{}", "prompt").alias("prompt_id"),
                (base if base_first else model).alias("model_a"),
                (model if base_first else base).alias("model_b"),
                pl.when(first_won).then(pl.lit(FIRST)).otherwise(pl.lit(SECOND)).alias("winner"),
            )
        )
    return pl.concat(frames)


def summed_over_judges(order_pairs: pl.DataFrame) -> pl.DataFrame:
    """The audit's order pairs summed over judges per model pair under judge ``*`` (as the snapshot pools them)."""
    pairs = order_pairs.select(*PAIR_KEYS, *PAIR_MEASURES).with_columns(pl.lit("*").alias("judge"))
    return pairs.group_by(PAIR_KEYS).agg(pl.all().sum())


def test_the_order_pairs_file_summed_over_judges_a_batch_at_a_time_is_the_whole_files_sum(monkeypatch) -> None:
    """The snapshot sums audit_order_pairs.parquet over judges from the file, a few rows at a time in codes
    (its rows are about the cells' with voter-judges): every model pair's measures are the whole table's sums."""
    order_pairs = audit(several_judges_shared_prompts(1, replicates=40)).order_pairs
    sink = io.BytesIO()
    order_pairs.sample(fraction=1.0, shuffle=True, seed=3).write_parquet(sink, row_group_size=97)
    monkeypatch.setattr(snapshot, "_PAIRS_BATCH_ROWS", 41)  # many batches, folded every four
    summed = snapshot._pairs_over_judges(sink.getvalue())
    expected = summed_over_judges(order_pairs).select(summed.columns).sort(PAIR_KEYS[1:])
    assert order_pairs.height > 8 * 41 and summed.height == expected.height
    assert summed.sort(PAIR_KEYS[1:]).equals(expected)


def pooled_models(order_pairs: pl.DataFrame) -> pl.DataFrame:
    """The summary's per-model consistent win rates pooled over judges (``_pooled_order_models``), as a frame."""
    return pl.DataFrame([dataclasses.asdict(m) for m in _pooled_order_models(order_pairs)])


def test_the_pooled_consistent_win_rate_clusters_by_prompt_across_judges() -> None:
    """400 simulated datasets, 4 judges judging the same answers (a baseline meeting 4 models on 40 prompts, both
    orders, the baseline's appeal on a prompt shared by every judge): the summary's per-model consistent win rate
    pooled over judges, clustered by prompt across judges, covers the truth about 95% of the time (measured 0.940;
    seeds 2, 3: 0.938, 0.933).  Clustered by (judge, prompt), as before, its intervals covered 0.760 (0.755,
    0.765): mean SE 0.030 against a spread of 0.049 across the datasets (the prompt clusters' mean SE is 0.047)."""
    data = several_judges_shared_prompts(1)
    result = audit(data)
    pooled = pooled_models(result.order_pairs)
    base = pooled.filter(pl.col("model").str.starts_with("b"))
    assert base.height == 400
    covered = coverage(base["consistent_win_rate"], base["consistent_win_rate_se"], 0.5)
    by_judge = order_models_table(summed_over_judges(result.order_pairs)).filter(pl.col("model").str.starts_with("b"))
    assert by_judge["consistent_win_rate"].equals(base["consistent_win_rate"])  # same rate, another SE
    covered_by_judge = coverage(by_judge["consistent_win_rate"], by_judge["consistent_win_rate_se"], 0.5)
    spread = base["consistent_win_rate"].std()
    mean_se, mean_se_by_judge = base["consistent_win_rate_se"].mean(), by_judge["consistent_win_rate_se"].mean()
    print(f"pooled baseline {covered:.3f} (by (judge, prompt) {covered_by_judge:.3f}); SE {mean_se:.3f} "
          f"({mean_se_by_judge:.3f}) against a spread of {spread:.3f}")  # fmt: skip
    assert 0.92 <= covered <= 0.975
    assert covered_by_judge < 0.85
    # Each model meets the baseline once a prompt, under 4 judges: its verdicts correlate across judges too.
    models = pooled.filter(pl.col("model").str.starts_with("m"))
    assert models.height == 1600
    assert 0.92 <= coverage(models["consistent_win_rate"], models["consistent_win_rate_se"], 0.5) <= 0.975
    # Per judge the cluster stays (judge, prompt), and a judge audited alone, pooled, is the same table: its prompt
    # clusters are its (judge, prompt) clusters.  (Its rows cut from the audit of all judges are not: their prompt
    # sums carry the other judges' parts, meaningful only summed over every judge.)
    one = audit(data.filter(pl.col("judge") == "j0")).order_pairs
    assert_frames_close(order_models_table(one), result.order_models.filter(pl.col("judge") == "j0").drop("judge"))
    assert_frames_close(
        order_models_table(one.with_columns(pl.lit("*").alias("judge")), across_judges=True),
        order_models_table(one).drop("judge"),
    )
    with pytest.raises(ValueError, match="summed over judges"):
        order_models_table(result.order_pairs, across_judges=True)


def assert_frames_close(frame: pl.DataFrame, expected: pl.DataFrame, rtol: float = 1e-9) -> None:
    """``frame`` (with or without a ``judge`` column) equals ``expected`` column by column, floats to ``rtol``."""
    frame = frame.drop("judge", strict=False)
    assert frame.columns == expected.columns
    for column in frame.columns:
        if frame.schema[column].is_numeric():
            np.testing.assert_allclose(frame[column].to_numpy(), expected[column].to_numpy(), rtol=rtol, atol=1e-12)
        else:
            assert frame[column].to_list() == expected[column].to_list(), column


@pytest.mark.parametrize(("kind", "old_coverage"), [("agree", (0.0, 0.88)), ("flip", (0.975, 1.0))])
def test_gold_and_consistent_win_rate_standard_errors_cover_the_truth(kind: str, old_coverage: tuple) -> None:
    """800 simulated judges of known gold accuracy, every gold case judged in both orders (120 prompts): the
    ±1.96 SE intervals of the clustered gold-accuracy SE cover the truth about 95% of the time (measured: 0.940
    agree, 0.955 flip).  The per-battle SE it replaces covered 0.836 when both orders agree (two verdicts
    counted as two cases) and 0.996 when the judge flips with the order (a hit and a miss are one case
    scoring ½).  The order-consistent win rate (clustered by prompt: here one pair a prompt, so by prompt-pair)
    covers too (0.940, 0.940: g's win rate among the pairs the judge did not flip)."""
    result = audit(two_order_replicates(11 if kind == "agree" else 12, kind, prompts=120))
    judges = result.judges
    assert judges.height == 800 and judges["gold_judge_ties"].sum() == 0
    truth = pl.when(pl.col("judge").str.starts_with("o")).then(0.6 if kind == "agree" else 0.7 * 0.5 + 0.3 * 0.8)
    true = judges.select(truth.otherwise(0.5)).to_series()
    accuracy = judges["gold_accuracy"]
    new = coverage(accuracy, judges["gold_accuracy_se"], true)
    old = coverage(accuracy, (accuracy * (1 - accuracy) / judges["gold_n_discriminative"]).sqrt(), true)
    g = result.order_models.filter(pl.col("model").str.starts_with("g"))
    g_true = g.select(
        pl.when(pl.col("judge").str.starts_with("o")).then(0.6 if kind == "agree" else 0.8).otherwise(0.5)
    )
    consistent = coverage(g["consistent_win_rate"], g["consistent_win_rate_se"], g_true.to_series())
    print(f"{kind}: gold accuracy {new:.3f} (per battle {old:.3f}); consistent win rate {consistent:.3f}")
    assert 0.92 <= new <= 0.975
    assert old_coverage[0] <= old <= old_coverage[1]
    assert g.height == 800 and 0.92 <= consistent <= 0.975


def test_gold_accuracy_standard_error_by_hand() -> None:
    """A gold case judged in both orders is one cluster: the two verdicts on it are not two cases."""
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "gold")
    rows = []
    # Anchors say x wins p1..p4; the judge sees each in both orders: p1, p2 hit twice, p3 missed twice,
    # p4 a tie and a miss.  A battle without a prompt_id, labelled in its own column, is hit (a cluster of one).
    for prompt, (x_first, y_first) in {
        "p1": (FIRST, SECOND),
        "p2": (FIRST, SECOND),
        "p3": (SECOND, FIRST),
        "p4": (TIE, FIRST),
    }.items():
        rows += [("j", prompt, "x", "y", x_first, None), ("j", prompt, "y", "x", y_first, None)]
    rows.append(("j", None, "x", "y", FIRST, FIRST))
    anchors = battles([("human", p, "x", "y", FIRST) for p in ("p1", "p2", "p3", "p4")])
    judge = audit(battles(rows, cols), anchors).judges.row(0, named=True)
    assert judge["gold_n_discriminative"] == 9
    assert judge["gold_accuracy"] == pytest.approx(5.5 / 9)
    # Clusters (n, s): (2, 2), (2, 2), (2, 0), (2, ½), (1, 1); p̂ = 11/18: Σ (s − p̂ n)² = 273.5/81.
    assert judge["gold_accuracy_se"] == pytest.approx(math.sqrt(273.5 / 81 * cr1(5)) / 9)  # 0.228
    # Every battle a case of its own (prompts apart): the per-case spread, as before clustering (0.153).
    apart = battles(rows, cols).with_columns(pl.col("prompt_id") + pl.col("model_a"))
    anchors_apart = pl.concat([anchors.with_columns(pl.col("prompt_id") + m) for m in ("x", "y")])
    judge = audit(apart, anchors_apart).judges.row(0, named=True)
    scores = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.0, 1.0]
    assert judge["gold_accuracy"] == pytest.approx(5.5 / 9)
    assert judge["gold_accuracy_se"] == pytest.approx(math.sqrt(statistics.pvariance(scores) / 9 * cr1(9)))


def test_gold_labels_column_and_anchor_table() -> None:
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "len_a", "len_b", "gold")
    rows = [
        ("j", "p1", "x", "y", FIRST, 10, 20, "model_a"),  # hit; longest picks y → miss
        ("j", "p2", "x", "y", FIRST, 10, 20, "model_b"),  # miss; longest hit
        ("j", "p3", "x", "y", TIE, 30, 20, "model_a"),  # judge tie scores ½; longest hit
        ("j", "p4", "x", "y", SECOND, 20, 20, "model_b"),  # hit; equal lengths: longest ½
        ("j", "p5", "x", "y", FIRST, 10, 20, "tie"),  # not discriminative
        ("j", "p6", "x", "y", FIRST, 10, 20, None),  # unlabeled
    ]
    judge = audit(battles(rows, cols)).judges.row(0, named=True)
    assert (judge["gold_n_labeled"], judge["gold_n_discriminative"]) == (5, 4)
    assert judge["gold_accuracy"] == pytest.approx(2.5 / 4)
    # The scores 1, 0, ½, 1: their (population) variance over n, not the binomial 0.625 · 0.375 / 4.
    scores = [1.0, 0.0, 0.5, 1.0]
    assert judge["gold_accuracy_se"] == pytest.approx(math.sqrt(statistics.pvariance(scores) / 4 * cr1(4)))
    assert judge["gold_strict_accuracy"] == pytest.approx(2 / 4)
    assert judge["gold_random_pick_baseline"] == 0.5
    assert judge["gold_longest_pick_baseline"] == pytest.approx(2.5 / 4)
    assert judge["gold_lift_over_random"] == pytest.approx(0.125)
    assert judge["gold_lift_over_longest"] == pytest.approx(0.0)

    # The same labels as trusted anchors, shown in the other order by a human judge.
    plain = battles(rows, cols).drop("gold")
    anchors = battles(
        [
            ("human", "p1", "y", "x", SECOND),
            ("human", "p2", "y", "x", FIRST),
            ("human", "p3", "x", "y", FIRST),
            ("human", "p4", "y", "x", FIRST),
            ("human", "p5", "x", "y", TIE),
        ]
    )
    via_anchors = audit(plain, anchors).judges.filter(pl.col("judge") == "j").row(0, named=True)
    for key in ("gold_n_labeled", "gold_n_discriminative", "gold_accuracy", "gold_longest_pick_baseline"):
        assert via_anchors[key] == pytest.approx(judge[key]), key


def test_missing_required_column_is_an_input_error() -> None:
    with pytest.raises(InputError, match="winner"):
        audit(pl.DataFrame({"judge": ["j"], "model_a": ["x"], "model_b": ["y"]}), source="day=2024-01-01")


def test_empty_input_finishes() -> None:
    result = finish_audit(merge_partials([]))
    assert result.judges.height == 0
    assert json.dumps(result.to_json())


def random_battles(seed: int, n: int = 3000) -> pl.DataFrame:
    """Both-order battles with repeats, orphans, self-battles, lengths, families and gold labels."""
    rng = np.random.default_rng(seed)
    models = np.array([f"m{i}" for i in range(6)])
    fam = {m: ("fa" if i % 2 else "fb") for i, m in enumerate(models)}
    judges = np.array(["j1", "j2", "j3"])
    a = rng.integers(0, 6, n)
    b = rng.integers(0, 6, n)
    winners = np.array([FIRST, SECOND, TIE, BOTHBAD])[rng.choice(4, n, p=[0.45, 0.35, 0.15, 0.05])]
    frame = pl.DataFrame(
        {
            "judge": judges[rng.integers(0, 3, n)],
            "prompt_id": [f"p{i}" for i in rng.integers(0, 40, n)],
            "model_a": models[a],
            "model_b": models[b],
            "winner": winners,
            "len_a": rng.integers(1, 500, n),
            "len_b": rng.integers(1, 500, n),
            "gold": pl.Series(np.array([FIRST, SECOND, TIE, None])[rng.integers(0, 4, n)].tolist(), dtype=pl.String),
        }
    )
    return frame.with_columns(
        pl.col("model_a").replace_strict(fam).alias("family_a"),
        pl.col("model_b").replace_strict(fam).alias("family_b"),
        pl.col("judge").replace_strict({"j1": "fa", "j2": "fb", "j3": "fc"}).alias("judge_family"),
    )


def assert_same_result(left, right, rtol: float = 1e-9) -> None:
    for name, frame in left.tables().items():
        other = right.tables()[name]
        keys = [c for c in ("judge", "model", "model_x", "model_y") if c in frame.columns]
        a, b = frame.sort(keys), other.sort(keys)
        assert a.columns == b.columns, name
        for column in a.columns:
            if a.schema[column].is_numeric():
                np.testing.assert_allclose(
                    a[column].cast(pl.Float64).to_numpy(),
                    b[column].cast(pl.Float64).to_numpy(),
                    rtol=rtol,
                    atol=1e-12,
                    err_msg=f"{name}.{column}",
                )
            else:
                assert a[column].to_list() == b[column].to_list(), f"{name}.{column}"


@pytest.mark.parametrize("seed", [1, 2])
def test_partials_are_a_monoid_and_shards_give_the_same_audit(seed: int) -> None:
    data = random_battles(seed)
    whole = audit(data)
    rng = np.random.default_rng(seed + 100)
    slice_of = rng.integers(0, 5, data.height)
    parts = [audit_partials(data.filter(pl.Series(slice_of == k))) for k in range(5)]
    assert_same_result(whole, finish_audit(merge_partials(parts[::-1])))
    # Sharded: order and cluster rows split by (judge, prompt), each shard reduced alone, then summed.
    merged = merge_partials(parts)
    rows = merged.order_rows.with_columns(order_shard(merged.order_rows, 4))
    clusters = merged.cluster_rows.with_columns(order_shard(merged.cluster_rows, 4))
    assert clusters["shard"].n_unique() == 4
    # By prompt alone: every judge's rows of a prompt in one shard (the 3 judges share the 40 prompts), as the
    # pooled per-model SE's prompt clusters need — not only each (judge, prompt) group.
    for keyed in (rows, clusters):
        assert keyed.group_by("prompt_id").agg(pl.col("shard").n_unique())["shard"].max() == 1
        assert keyed.group_by("prompt_id").agg(pl.col("judge").n_unique())["judge"].max() == 3
    reduced = [
        reduce_order_rows(
            AuditPartials(
                order_rows=rows.filter(pl.col("shard") == s).drop("shard"),
                cluster_rows=clusters.filter(pl.col("shard") == s).drop("shard"),
            ),
            whole_slice=False,  # shards of one slice, as FinishAudit reduces them
        )
        for s in range(4)
    ]
    counts_only = AuditPartials(
        slots=merged.slots, identical=merged.identical, length=merged.length, family=merged.family, gold=merged.gold
    )
    sharded = finish_audit(merge_partials([counts_only, *reduced]))
    assert_same_result(whole, sharded)
    assert_frames_close(pooled_models(sharded.order_pairs), pooled_models(whole.order_pairs))
    # The (judge, prompt) keys' sketch: the shards' keys add up to the slice's (they split it by key), its registers
    # are the whole slice's, and the shards are one slice, not four days: nothing recurs.
    keys = data.filter(pl.col("model_a") != pl.col("model_b")).select("judge", "prompt_id").n_unique()
    assert whole.clusters == sharded.clusters
    assert whole.clusters.day_keys == keys and whole.clusters.days == 1 and whole.clusters.recurring_share == 0.0
    one = reduce_order_rows(merged).recurrence
    assert (
        merge_partials(reduced).recurrence.select("day_keys", "registers").equals(one.select("day_keys", "registers"))
    )


def clustered_order_ses(data: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """A reference computed straight from the battles: per judge the flip rate ± SE and per (judge, model) the
    consistent win rate ± SE, clustered by (judge, prompt) — a prompt-pair judged in both orders counts its
    consistent share C (the chance two verdicts drawn one from each order agree) and its model_x's score s in it —
    and per model over every judge the consistent win rate ± SE clustered by prompt across judges."""
    b = data.filter((pl.col("model_a") != pl.col("model_b")) & pl.col("prompt_id").is_not_null())
    x, y = pl.min_horizontal("model_a", "model_b"), pl.max_horizontal("model_a", "model_b")
    b = b.with_columns(x.alias("x"), y.alias("y"), (pl.col("model_a") == x).alias("x_first"))
    won = pl.when(pl.col("winner") == FIRST).then(pl.col("model_a")).when(pl.col("winner") == SECOND)
    b = b.with_columns(won.then(pl.col("model_b")).otherwise(None).alias("won")).with_columns(
        pl.when(pl.col("won").is_null())
        .then(pl.lit("t"))
        .when(pl.col("won") == pl.col("x"))
        .then(pl.lit("x"))
        .otherwise(pl.lit("y"))
        .alias("verdict")
    )
    counts = b.group_by("judge", "prompt_id", "x", "y").agg(
        *[
            ((pl.col("x_first") == first) & (pl.col("verdict") == v)).sum().cast(pl.Float64).alias(f"{o}{v}")
            for first, o in ((True, "a"), (False, "b"))
            for v in "xyt"
        ]
    )
    n1, n2 = pl.col("ax") + pl.col("ay") + pl.col("at"), pl.col("bx") + pl.col("by") + pl.col("bt")
    paired = counts.filter((n1 > 0) & (n2 > 0)).with_columns(
        ((pl.col("ax") * pl.col("bx") + pl.col("ay") * pl.col("by") + pl.col("at") * pl.col("bt")) / (n1 * n2)).alias(
            "C"
        ),
        ((pl.col("ax") * pl.col("bx") + 0.5 * pl.col("at") * pl.col("bt")) / (n1 * n2)).alias("s"),
    )

    def clustered(frame: pl.DataFrame, keys: list[str], n: str, s: str) -> pl.DataFrame:
        sums = frame.group_by(*keys, "prompt_id").agg(pl.col(n).sum().alias("n"), pl.col(s).sum().alias("s"))
        p = pl.col("s").sum() / pl.col("n").sum()
        g = pl.len().cast(pl.Float64)  # the clusters (every one has n > 0 here): CR1's G/(G − 1)
        spread = (((pl.col("s") - p * pl.col("n")) ** 2).sum() * g / (g - 1)).sqrt() / pl.col("n").sum()
        return sums.group_by(keys).agg(p.alias("rate"), spread.alias("se")).sort(keys)

    judges = clustered(paired.with_columns(pl.lit(1.0).alias("N")), ["judge"], "N", "C")
    sides = pl.concat(
        [
            paired.select("judge", "prompt_id", pl.col("x").alias("model"), "C", "s"),
            paired.select(
                "judge", "prompt_id", pl.col("y").alias("model"), "C", (pl.col("C") - pl.col("s")).alias("s")
            ),
        ]
    )
    consistent = sides.filter(pl.col("C") > 0)
    return judges, clustered(consistent, ["judge", "model"], "C", "s"), clustered(consistent, ["model"], "C", "s")


@pytest.mark.parametrize("seed", [1, 2])
def test_days_audited_apart_add_up_to_the_flip_rate_clustered_by_prompt(seed: int) -> None:
    """Each prompt's battles on one day: the days audited apart (each day's (judge, prompt) groups reduced within
    it, as the jobs do) and summed give the audit of all the battles together, and its flip rate and per-model
    consistent win rate SEs are the (judge, prompt) clusters' of a direct computation — with repeats, orphans and
    several pairs a prompt (Σ_c N_c² > Σ_c N_c: the clusters are not the prompt-pairs)."""
    data = random_battles(seed)
    day = data["prompt_id"].str.slice(1).cast(pl.Int64) % 3
    days = [reduce_order_rows(audit_partials(data.filter(day == d))) for d in range(3)]
    assert all(d.order_rows.height == 0 and d.order_pairs.height > 0 for d in days)
    together = audit(data)
    assert_same_result(together, finish_audit(merge_partials(days[::-1])))
    # The keys' sketch adds up too: days' distinct keys summed, registers merged by max are the registers of all the
    # keys sketched together (in any order); each prompt on one day, so no cluster recurs.
    apart = merge_partials(days[::-1]).recurrence
    assert apart.equals(merge_partials(days).recurrence)
    whole = reduce_order_rows(audit_partials(data)).recurrence
    assert apart["registers"].equals(whole["registers"]) and apart["day_keys"].equals(whole["day_keys"])
    assert apart["days"].item() == 3 and whole["days"].item() == 1
    recurrence = finish_audit(merge_partials(days)).clusters
    assert recurrence.days == 3 and recurrence.recurring_share < 0.02 and recurrence.note() is None
    sums = judge_order_sums(merge_partials(days).order_pairs)
    assert (sums["cl_pairs_sq"] > sums["pairs"]).all()
    consistent = sums["c_xx"] + sums["c_yy"] + sums["c_tt"]
    assert (sums["consistent_sq"] < consistent).all()  # repeats: fractional consistent shares
    judges, models, pooled = clustered_order_ses(data)
    ours = together.judges.sort("judge")
    np.testing.assert_allclose(1 - ours["order_flip_rate"].to_numpy(), judges["rate"].to_numpy(), rtol=1e-5)
    np.testing.assert_allclose(ours["order_flip_rate_se"].to_numpy(), judges["se"].to_numpy(), rtol=1e-5)
    ours_m = together.order_models.filter(pl.col("consistent") > 0).sort("judge", "model")
    assert ours_m.select("judge", "model").equals(models.select("judge", "model"))
    np.testing.assert_allclose(ours_m["consistent_win_rate"].to_numpy(), models["rate"].to_numpy(), rtol=1e-5)
    np.testing.assert_allclose(ours_m["consistent_win_rate_se"].to_numpy(), models["se"].to_numpy(), rtol=1e-5)
    # Pooled over judges (the summary's, by the snapshot's path): clustered by prompt across the 3 judges, who share
    # the prompts; the days apart add up to it too, and it is not the (judge, prompt) clusters' (random verdicts
    # here: wider or narrower by chance).
    ours_p = pooled_models(merge_partials(days).order_pairs)
    assert_frames_close(ours_p.drop("judge", strict=False), pooled_models(together.order_pairs))
    assert ours_p["model"].to_list() == pooled["model"].to_list()
    np.testing.assert_allclose(ours_p["consistent_win_rate"].to_numpy(), pooled["rate"].to_numpy(), rtol=1e-5)
    np.testing.assert_allclose(ours_p["consistent_win_rate_se"].to_numpy(), pooled["se"].to_numpy(), rtol=1e-5)
    by_judge = order_models_table(summed_over_judges(together.order_pairs))
    assert (ours_p["consistent_win_rate_se"] - by_judge["consistent_win_rate_se"]).abs().min() > 1e-4


def _save(result, path: str) -> None:
    Path(path).write_bytes(pickle.dumps(result))


def test_beam_transform_matches_in_memory_audit(tmp_path: Path) -> None:
    from biasboard.pipelines.options import beam_options
    from biasboard.transforms.audit import AuditBattles

    data = random_battles(7, n=4000)
    batches = [data.slice(offset, 700).to_arrow() for offset in range(0, data.height, 700)]
    target = str(tmp_path / "result.pickle")
    with beam.Pipeline(options=beam_options([])) as p:
        _ = p | beam.Create(batches) | AuditBattles(n_shards=3) | beam.Map(_save, target)
    result = pickle.loads(Path(target).read_bytes())
    assert result.judges.height == 3
    assert_same_result(audit(data), result)
    assert result.clusters == audit(data).clusters  # its shards are one slice: their keys counted once, one day
    assert result.clusters.days == 1 and result.clusters.day_keys > 0


def _write_battles(frame: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = frame.height
    frame.with_columns(
        pl.Series("battle_id", [f"b{i}" for i in range(n)]),
        pl.lit("2024-01-01T12:00:00Z").alias("ts"),
    ).write_parquet(path)


def test_cli_writes_parquet_json_and_escaped_html(tmp_path: Path) -> None:
    from biasboard.pipelines import cli

    data = random_battles(11, n=1500).with_columns(
        pl.when(pl.col("judge") == "j1")
        .then(pl.lit('<script>alert("j")</script>'))
        .otherwise(pl.col("judge"))
        .alias("judge")
    )
    bad = data.head(3).with_columns(pl.lit("maybe").alias("winner"))  # three rows the validator rejects
    _write_battles(pl.concat([data, bad]), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    # Anchors: a trusted judge's verdict on some prompts, used where the battle has no gold of its own.
    anchors = data.filter(pl.col("gold").is_null()).head(200).drop("gold").with_columns(pl.lit("human").alias("judge"))
    _write_battles(anchors, tmp_path / "anchors" / "day=2024-01-01" / "a.parquet")
    out = tmp_path / "out"
    code = cli.main(
        ["audit", "--input", str(tmp_path / "in"), "--out", str(out), "--anchors", str(tmp_path / "anchors")]
    )
    assert code == 0
    document = json.loads((out / "audit.json").read_text())
    assert document["counts"]["read"] == data.height + 3
    assert document["counts"]["rejected"] == {"bad_winner": 3}
    written = pl.read_parquet(out / "audit_judges.parquet")
    # Families in the files come from the data here, so the in-memory audit of the valid rows must agree exactly.
    expected = audit(data, anchors).judges
    assert_same_result(
        type("R", (), {"tables": lambda self: {"judges": expected}})(),
        type("R", (), {"tables": lambda self: {"judges": written}})(),
    )
    assert written.filter(pl.col("gold_n_labeled") > 0).height == data["judge"].n_unique() == 3
    page = (out / "audit_section.html").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;j&quot;)&lt;/script&gt;" in page
    assert [r["judge"] for r in document["tables"]["judges"]] == sorted(set(data["judge"]))


def test_the_days_fold_and_the_sliced_finish_equal_the_whole_audit(tmp_path, monkeypatch):
    """``biasboard audit`` sums the days' partials by a fold in integer codes and finishes the order tables a
    judge-slice at a time (Parquet row groups); with tiny folds and slices the files hold the whole audit's
    tables, value for value, and the scratch folder of day partials is gone."""
    from biasboard.pipelines.options import beam_options
    from biasboard.simulate import SimulationConfig, write_simulation
    from biasboard.transforms import audit as taudit
    from biasboard.transforms import read

    monkeypatch.setattr(taudit, "FOLD_ORDER_ROWS", 7)
    monkeypatch.setattr(taudit, "FINISH_ROWS", 25)
    config = SimulationConfig(battles=6000, models=7, judges=4, days=3, both_orders=True, prompts=50, seed=5)
    logs = write_simulation(config, tmp_path / "sim")
    glob = str(logs / "battles" / "day=*" / "*.parquet")
    out = tmp_path / "audit"
    taudit.run_audit(glob, str(out), beam_options([]))
    assert not (out / taudit.SCRATCH_DAYS).exists()
    families = read.load_family_map(None)
    days = [taudit.audit_day(task, families)[0] for task in sorted(read.list_input_days(glob).items())]
    whole = finish_audit(merge_partials(days))
    assert whole.order_pairs.height > 3 * 25  # several slices, each judge whole in one
    for name, frame in whole.tables().items():
        written = pl.read_parquet(out / taudit.table_file(name))
        assert written.schema == frame.schema, name
        assert written.equals(frame), name


@pytest.mark.parametrize("finish_rows", [25, 70, 10**6])
def test_the_audit_summed_by_judge_bucket_writes_the_same_files(tmp_path, monkeypatch, finish_rows):
    """Order pairs summed by judge bucket on disk (``BIASBOARD_BUCKET_ROWS`` tiny: a bucket per judge or two)
    and finished slice by slice across the buckets: every file byte for byte the in-memory sum's, and the
    tables the whole audit's."""
    from biasboard.pipelines.options import beam_options
    from biasboard.simulate import SimulationConfig, write_simulation
    from biasboard.transforms import audit as taudit
    from biasboard.transforms import read, state

    monkeypatch.setattr(taudit, "FOLD_ORDER_ROWS", 7)
    monkeypatch.setattr(taudit, "FINISH_ROWS", finish_rows)
    config = SimulationConfig(battles=4000, models=6, judges=7, days=3, both_orders=True, prompts=40, seed=8)
    logs = write_simulation(config, tmp_path / "sim")
    glob = str(logs / "battles" / "day=*" / "*.parquet")
    folds: list[str] = []
    real_fold = taudit._order_pairs_fold
    monkeypatch.setattr(taudit, "_order_pairs_fold", lambda *a: folds.append(type(f := real_fold(*a)).__name__) or f)
    taudit.run_audit(glob, str(tmp_path / "memory"), beam_options([]))
    monkeypatch.setenv(state.BUCKET_ROWS_ENV, "60")
    taudit.run_audit(glob, str(tmp_path / "buckets"), beam_options([]))
    assert folds == ["CodedFold", "BucketedFold"]
    files = sorted(p.name for p in (tmp_path / "memory").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "buckets").iterdir())
    for name in files:
        assert (tmp_path / "memory" / name).read_bytes() == (tmp_path / "buckets" / name).read_bytes(), name
    families = read.load_family_map(None)
    days = [taudit.audit_day(task, families)[0] for task in sorted(read.list_input_days(glob).items())]
    whole = finish_audit(merge_partials(days))
    for name, frame in whole.tables().items():
        assert pl.read_parquet(tmp_path / "buckets" / taudit.table_file(name)).equals(frame), name


@pytest.mark.parametrize(
    ("rows", "note"),
    [
        ([("j", "p1", "x", "y", "maybe")] * 2, "none of the 2 rows read is a valid battle (bad_winner 2)"),
        ([("j", None, "x", "y", FIRST), ("j", None, "y", "x", SECOND)], "no battle between two different models has"),
        ([("j", "p1", "x", "y", FIRST), ("j", "p2", "y", "x", SECOND)], "in both orders on the same day"),
    ],
    ids=["all-rejected", "no-prompt-id", "one-order-only"],
)
def test_cli_says_what_the_audit_could_not_measure(tmp_path: Path, capsys, rows, note) -> None:
    """Such inputs gave dashes (or nothing) and exit code 0 without a word of why; now audit.json's notes say it."""
    from biasboard.pipelines import cli

    _write_battles(battles(rows), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    assert cli.main(["audit", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 0
    assert note in capsys.readouterr().out
    assert any(note in n for n in json.loads((tmp_path / "out" / "audit.json").read_text())["notes"])


def test_the_note_does_not_claim_the_first_second_split_when_no_shown_order_is_known(tmp_path: Path, capsys) -> None:
    """AlpacaEval 1 records no shown order: the note said flip rates were not measured "(the first/second split is)",
    but that split is null there too (QA finding); it now says so."""
    from biasboard.pipelines import cli

    columns = ("judge", "prompt_id", "model_a", "model_b", "winner", "order_known", "len_a", "len_b")
    rows = [("j", "p1", "x", "y", FIRST, False, 10, 20), ("j", "p2", "y", "x", SECOND, False, 30, 5)]
    _write_battles(battles(rows, columns), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    assert cli.main(["audit", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "nor is the first/second split: no battle's shown order is known" in printed, printed
    assert "(the first/second split is)" not in printed


def test_a_note_says_the_length_measures_are_not_measured_without_lengths(tmp_path: Path, capsys) -> None:
    """Battles without len_a/len_b gave null length columns and no note (the notes said only what order could not
    measure)."""
    from biasboard.pipelines import cli

    columns = ("judge", "prompt_id", "model_a", "model_b", "winner")
    rows = [("j", "p1", "x", "y", FIRST), ("j", "p1", "y", "x", SECOND)]
    _write_battles(battles(rows, columns), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    assert cli.main(["audit", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "the length measures" in printed, printed
    notes = json.loads((tmp_path / "out" / "audit.json").read_text())["notes"]
    assert any("the length measures" in n for n in notes)


def test_a_note_says_self_preference_is_not_measured_without_another_family_judging() -> None:
    """One judge (openai) judging its own family's model: no judge of another family scores that family, so the
    family table has no self-preference, and the notes said nothing of it; with a judge of another family, no note."""
    from biasboard.transforms.audit import audit_notes

    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "family_a", "family_b", "judge_family")
    alone = [("o", f"p{i}", "gpt", "claude", w, "openai", "anthropic", "openai") for i, w in enumerate([FIRST, SECOND])]
    result = audit(battles(alone, cols))
    notes = audit_notes(result.judges, {"read": 2, "counted": 2}, family=result.family)
    assert any("self-preference is not measured" in n for n in notes), notes
    other = [("a", f"p{i}", "gpt", "claude", w, "openai", "anthropic", "anthropic") for i, w in enumerate([TIE, FIRST])]
    result = audit(battles(alone + other, cols))
    assert result.family.get_column("self_preference").is_not_null().any()
    notes = audit_notes(result.judges, {"read": 4, "counted": 4}, family=result.family)
    assert not any("self-preference" in n for n in notes), notes


def test_lmarena_voters_are_the_other_judges_a_self_preference_is_measured_against(tmp_path: Path, capsys) -> None:
    """LMArena names its voters ``arena_user_<id>``: the family map gave them "unknown" (not "human", as it gives the
    LLMFAO crowd), and the audit counts no judge of unknown family, so GPT-4 judging the arena's battles beside the
    arena's own voters had its self-preference "not measured" for want of another family's judge."""
    from biasboard.pipelines import cli

    rows = [(f"arena_user_{i}", f"p{i}", "gpt-4-0613", "claude-2", w) for i, w in enumerate([FIRST, SECOND] * 3)]
    rows += [("gpt-4-1106-preview", f"p{i}", "gpt-4-0613", "claude-2", w) for i, w in enumerate([FIRST] * 5 + [TIE])]
    _write_battles(battles(rows), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    assert cli.main(["audit", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 0
    assert "self-preference is not measured" not in capsys.readouterr().out
    family = pl.read_parquet(tmp_path / "out" / "audit_family.parquet")
    gpt4 = family.filter(pl.col("judge") == "gpt-4-1106-preview").row(0, named=True)
    assert (gpt4["n_self"], gpt4["n_other_judges"]) == (6, 6)
    assert gpt4["self_preference"] == pytest.approx(5.5 / 6 - 3 / 6)


def test_aliases_rename_the_anchors_as_they_rename_the_battles(tmp_path: Path) -> None:
    """``--aliases`` renamed the battles' models but not the anchors', which are matched to battles by model name:
    every battle of a renamed model lost its gold label, and the gold accuracy was null without a word."""
    from biasboard.pipelines import cli

    rows = [("j", f"p{i}", "gpt4", "claude", w) for i, w in enumerate([FIRST, FIRST, SECOND, TIE])]
    _write_battles(battles(rows), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    gold = [("human", f"p{i}", "gpt4", "claude", FIRST) for i in range(4)]
    _write_battles(battles(gold), tmp_path / "anchors" / "day=2024-01-01" / "a.parquet")
    (tmp_path / "aliases.json").write_text(json.dumps({"gpt4": "gpt-4"}))
    out = tmp_path / "out"
    argv = ["audit", "--input", str(tmp_path / "in"), "--out", str(out), "--anchors", str(tmp_path / "anchors")]
    assert cli.main([*argv, "--aliases", str(tmp_path / "aliases.json")]) == 0
    judge = pl.read_parquet(out / "audit_judges.parquet").row(0, named=True)
    assert judge["gold_n_discriminative"] == 4
    assert judge["gold_accuracy"] == pytest.approx((2 + 0.5) / 4)  # two hits, a miss, a tie (½)


def test_audit_names_the_alias_entries_that_matched_nothing(tmp_path: Path, capsys) -> None:
    """``biasboard audit --aliases`` said nothing of entries that renamed no row (refresh names them): a typo in one
    entry of a map went unseen.  The same note now, in audit.json and printed; an entry that names an anchor rater
    matched something; a map whose every entry matched says nothing."""
    from biasboard.pipelines import cli

    rows = [("j", f"p{i}", "gpt4", "claude", w) for i, w in enumerate([FIRST, FIRST, SECOND, TIE])]
    _write_battles(battles(rows), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    _write_battles(battles([("j", "p9", "gpt4", "llama", FIRST)]), tmp_path / "in" / "day=2024-01-02" / "p.parquet")
    gold = [("human", f"p{i}", "gpt4", "claude", FIRST) for i in range(4)]
    _write_battles(battles(gold), tmp_path / "anchors" / "day=2024-01-01" / "a.parquet")

    def notes(mapping: dict[str, str], name: str) -> tuple[list[str], str]:
        aliases = tmp_path / f"{name}.json"
        aliases.write_text(json.dumps(mapping))
        out = tmp_path / name
        argv = ["audit", "--input", str(tmp_path / "in"), "--out", str(out), "--anchors", str(tmp_path / "anchors")]
        capsys.readouterr()
        assert cli.main([*argv, "--aliases", str(aliases)]) == 0
        said = [n for n in json.loads((out / "audit.json").read_text())["notes"] if n.startswith("aliases:")]
        return said, capsys.readouterr().out

    tail = "; the names they map from are not in the input as written there"
    said, printed = notes({"gpt4": "gpt-4", "llama": "llama-2", "human": "humans", "Clade-3": "claude-3"}, "typo")
    assert said == [f"aliases: 1 of the 4 entries of {tmp_path / 'typo.json'} renamed no counted row: 'Clade-3'{tail}"]
    assert f"note: {said[0]}" in printed
    assert notes({"gpt4": "gpt-4", "llama": "llama-2"}, "all")[0] == []


def test_a_gold_column_is_read_as_the_winner_is() -> None:
    """``winner`` is trimmed and lower-cased before it is read ("Model_A " is model_a); ``gold`` was compared as
    written, so a label spelled as the winner may be spelled was no label: its rows left out of the accuracy."""
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "gold")
    spelled = [
        ("j", "p1", "x", "y", FIRST, "Model_A "),
        ("j", "p2", "x", "y", FIRST, " MODEL_B"),
        ("j", "p3", "x", "y", SECOND, "model_b"),
        ("j", "p4", "x", "y", TIE, "Tie (BothBad)"),
    ]
    judge = audit(battles(spelled, cols)).judges.row(0, named=True)
    assert judge["gold_n_labeled"] == 4
    assert judge["gold_n_discriminative"] == 3
    assert judge["gold_accuracy"] == pytest.approx(2 / 3)


def test_a_note_says_gold_accuracy_is_not_measured_when_no_battle_matches_the_anchors(tmp_path: Path, capsys) -> None:
    """Anchors matched to no battle (here: without a prompt_id) left every gold column null and the notes silent: the
    audit read as one run without --anchors.  With anchors that match, no such note."""
    from biasboard.pipelines import cli

    rows = [("j", "p1", "x", "y", FIRST), ("j", "p1", "y", "x", SECOND)]
    _write_battles(battles(rows), tmp_path / "in" / "day=2024-01-01" / "part-0.parquet")
    gold = battles([("human", "p1", "x", "y", FIRST)])
    _write_battles(gold.drop("prompt_id"), tmp_path / "apart" / "day=2024-01-01" / "a.parquet")
    _write_battles(gold, tmp_path / "matched" / "day=2024-01-01" / "a.parquet")
    said = "gold-label accuracy is not measured"
    for anchors, expected in (("apart", True), ("matched", False)):
        out = tmp_path / f"out-{anchors}"
        argv = ["audit", "--input", str(tmp_path / "in"), "--out", str(out), "--anchors", str(tmp_path / anchors)]
        assert cli.main(argv) == 0
        assert (said in capsys.readouterr().out) is expected, anchors
        notes = json.loads((out / "audit.json").read_text())["notes"]
        assert any(said in n for n in notes) is expected, notes


def test_the_longest_pick_baseline_is_not_measured_without_lengths() -> None:
    """Gold labels without lengths scored every case ½ for the longest pick: "longest pick 50%" and a lift over it
    equal to the lift over random, for a rule never measured.  With lengths it is measured (a case of equal
    lengths ½)."""
    cols = ("judge", "prompt_id", "model_a", "model_b", "winner", "gold")
    verdicts = [(FIRST, FIRST), (FIRST, SECOND), (SECOND, SECOND)]
    rows = [("j", f"p{i}", "x", "y", w, g) for i, (w, g) in enumerate(verdicts)]
    judge = audit(battles(rows, cols)).judges.row(0, named=True)
    assert judge["gold_accuracy"] == pytest.approx(2 / 3)
    assert judge["gold_longest_pick_baseline"] is None and judge["gold_lift_over_longest"] is None
    lengths = battles(rows, cols).with_columns(pl.Series("len_a", [10, 5, 7]), pl.Series("len_b", [5, 10, 7]))
    judge = audit(lengths).judges.row(0, named=True)
    assert judge["gold_longest_pick_baseline"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert judge["gold_lift_over_longest"] == pytest.approx(2 / 3 - 2.5 / 3)


def test_the_recurrence_note_says_why_clusters_under_the_bound_were_closed_within_a_day() -> None:
    """Clusters closed within each day under the history closure's bound (days stored without their keyed sums
    beside a history past it, then days dropped) were said to be "about 500 distinct, more than the 262,144"."""
    from biasboard.audit import measures

    few = measures.ClusterRecurrence(day_keys=1000, distinct_keys=500.0, days=2, recurring_share=0.5)
    note = few.note()
    assert note is not None and "about 500 distinct" in note and "more than the 262,144 whose" not in note
    assert "stored without the keyed sums" in note
    many = dataclasses.replace(few, day_keys=600_000, distinct_keys=300_000.0)
    note = many.note()
    assert note is not None and "more than the 262,144 whose clusters the audit closes" in note
