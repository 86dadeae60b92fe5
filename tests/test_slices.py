"""Category boards end to end through ``refresh --slices`` on simulated battles with a ``category`` column.

The simulator draws a category per battle and, per category, a quality shift for
every model (known truth): the slice's corrected board must recover the slice's
own order (better than it matches the other category's), the overall board must
be the one a run without ``--slices`` publishes, byte for byte, and a slice
below the minimum battle count is listed, not fit.
"""

from __future__ import annotations

import html
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.importers.registry import import_path
from biasboard.pipelines import cli
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.schemas.battle import STYLE_COUNT_COLUMNS
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, conform_pair_cells
from biasboard.schemas.errors import InputError
from biasboard.schemas.summary import Summary
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.simulate.simulator import CATEGORY_NAMES, draw_parameters, truth
from biasboard.transforms.slices import both_orders_share, label_members
from scipy.stats import kendalltau

CONFIG = SimulationConfig(battles=16_000, models=8, judges=3, days=1, categories=2, category_sd=1.0, seed=11)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("slices")
    logs = write_simulation(CONFIG, root / "logs")
    glob = str(logs / "battles" / "day=*" / "*.parquet")

    def go(out: str, **options) -> Path:
        outcome = refresh(glob, str(root / "state"), str(root / out), [], RefreshOptions(k=3, audit=False, **options))
        assert outcome.published is not None
        return Path(outcome.published.path)

    return go


def _summary(snapshot: Path) -> Summary:
    return Summary.from_json(json.loads((snapshot / "summary.json").read_text()))


def test_each_slice_board_recovers_its_own_order(run):
    snapshot = run("out", slices="category")
    boards = pl.read_parquet(snapshot / "slices.parquet")
    leaderboard = pl.read_parquet(snapshot / "leaderboard.parquet")
    assert boards.columns == ["slice", *leaderboard.columns]
    names = [f"category={c}" for c in CATEGORY_NAMES[: CONFIG.categories]]
    assert sorted(set(boards["slice"])) == names
    params = draw_parameters(CONFIG)
    truth = {c: dict(zip(params.model_names.tolist(), params.theta_in(i), strict=True)) for i, c in enumerate(names)}
    taus = {}
    for name in names:
        board = boards.filter(pl.col("slice") == name)
        assert board.height == CONFIG.models
        for other in names:
            taus[name, other] = kendalltau(board["rating_corrected"], [truth[other][m] for m in board["model"]])[0]
    # Each slice's board orders the models as its own category does, and better than the other category.
    for name in names:
        other = next(o for o in names if o != name)
        assert taus[name, name] >= 0.7, taus
        assert taus[name, name] > taus[name, other] + 0.2, taus
    info = _summary(snapshot).slices
    assert [i.slice for i in info] == names and all(i.fitted for i in info)
    assert sum(i.battles for i in info) == _summary(snapshot).counts.counted  # every battle carries a label
    html = (snapshot / "report.html").read_text()
    assert '<section id="slices">' in html and all(n in html for n in names)


def test_the_overall_board_is_the_same_with_and_without_slices(run):
    with_slices, without = run("out-a", slices="category"), run("out-b")
    for name in ("leaderboard.parquet", "bias.parquet", "posterior.npz"):
        assert (with_slices / name).read_bytes() == (without / name).read_bytes(), name
    assert not (without / "slices.parquet").exists() and _summary(without).slices == []


def test_only_the_main_board_works_out_what_moved_each_model(run, monkeypatch):
    """Which correction moved each model costs a gradient pass per correction and chord step; the summary and the
    report show the main board's only, so a slice's board does not compute one."""
    from biasboard.ranking import fit as fit_module

    boards: list[int] = []
    attribute = fit_module.attribute_moves

    def counted(problem, solution, shards=1):
        boards.append(problem.layout.n_models)
        return attribute(problem, solution, shards)

    monkeypatch.setattr(fit_module, "attribute_moves", counted)
    snapshot = run("out-moves", slices="category")
    assert all(i.fitted for i in _summary(snapshot).slices)
    assert len(boards) == 1 and _summary(snapshot).attribution is not None


def test_a_small_slice_is_listed_not_fit(run):
    snapshot = run("out-small", slices="category,language", slice_min_battles=10**6)
    info = _summary(snapshot).slices
    assert [i.dimension for i in info] == ["category", "category"]  # no battle has a language: no such slice
    warnings = [w for w in _summary(snapshot).warnings if w.startswith("--slices")]  # and the summary says so
    assert len(warnings) == 1 and warnings[0].startswith("--slices language: no stored battle carries a label")
    assert not any(i.fitted for i in info)
    assert all("fewer than the 1000000" in i.note and "not fit" in i.note for i in info)
    boards = pl.read_parquet(io.BytesIO((snapshot / "slices.parquet").read_bytes()))
    assert boards.height == 0 and boards.columns[0] == "slice"
    assert "not fit" in (snapshot / "report.html").read_text()


def test_an_unknown_slice_column_is_refused(run):
    with pytest.raises(InputError, match="--slices: unknown slice column"):
        run("out-bad", slices="category,topic")


def test_cells_stored_before_the_slice_keys_read_as_unlabelled():
    fields = [f for f in PAIR_CELLS_SCHEMA if f.name not in ("category", "language")]
    values = {
        "judge": "j",
        "judge_family": "f",
        "model_a": "a",
        "model_b": "b",
        "family_a": "f",
        "family_b": "f",
        "order_known": True,
    }
    old = pa.table({f.name: pa.array([values.get(f.name, 1)], f.type) for f in fields})
    conformed = conform_pair_cells(old)
    assert conformed.schema.equals(PAIR_CELLS_SCHEMA)
    assert conformed.column("category").to_pylist() == [None] and conformed.column("language").to_pylist() == [None]


def test_the_fastchat_importer_keeps_the_arena_language_as_a_slice_label(tmp_path):
    rows = [
        {
            "model_a": "m1",
            "model_b": "m2",
            "winner": "model_a",
            "judge": "u1",
            "tstamp": 1.7e9 + i,
            "language": lang,
            "anony": True,
        }
        for i, lang in enumerate(["English", "Chinese", None])
    ]
    path = tmp_path / "clean_battle.json"
    path.write_text(json.dumps(rows))
    result = import_path("fastchat", path)
    assert result.rows.column("language").to_pylist() == ["English", "Chinese", None]
    assert result.rows.column("category").to_pylist() == [None, None, None]


# --------------------------------------------------------------------------- the arena's category boards

#: The arena's criteria flags (FastChat ``criteria_v0.1``).
CRITERIA = (
    "specificity",
    "domain_knowledge",
    "complexity",
    "problem_solving",
    "creativity",
    "technical_accuracy",
    "real_world",
)


def _arena_battles(n: int, seed: int) -> tuple[list[dict], list[list[str]]]:
    """``n`` battles in FastChat's clean_battle format with random tags (no free text), and, per battle, the
    arena boards it belongs to, decided here row by row as the arena's filters do."""
    rng = np.random.default_rng(seed)
    models = [f"m{i}" for i in range(5)]
    theta = np.linspace(-1.0, 1.0, len(models))
    rows, expected = [], []
    for i in range(n):
        a, b = rng.choice(len(models), 2, replace=False)
        p = 1.0 / (1.0 + np.exp(-(theta[a] - theta[b])))
        u = rng.random()
        flags = {c: bool(rng.random() < 0.75) for c in CRITERIA}
        score = int(rng.integers(0, 6))
        tags = {
            "criteria_v0.1": flags,
            "if_v0.1": {"if": score >= 4, "score": score},
            "math_v0.1": {"math": bool(rng.random() < 0.2)},
            "creative_writing_v0.1": {"creative_writing": bool(rng.random() < 0.15), "score": "no"},
        }
        row = {
            "question_id": f"q{i}",
            "model_a": models[a],
            "model_b": models[b],
            "winner": "model_a" if u < p - 0.05 else "model_b" if u > p + 0.05 else "tie",
            "judge": f"u{i % 4}",
            "tstamp": 1.7e9 + i,
            "turn": int(rng.integers(1, 4)),
            "anony": True,
            "language": "English",
            "is_code": bool(rng.random() < 0.3),
            "conv_metadata": {"sum_user_tokens": int(rng.integers(1, 900))},
            "category_tag": tags,
        }
        boards = {
            "hard_prompts": sum(flags.values()) >= 6,
            "coding": row["is_code"],
            "math": tags["math_v0.1"]["math"],
            "instruction_following": score >= 4,
            "creative_writing": tags["creative_writing_v0.1"]["creative_writing"],
            "long_query": row["conv_metadata"]["sum_user_tokens"] >= 500,
            "multi_turn": row["turn"] >= 2,
        }
        rows.append(row)
        expected.append([name for name, member in boards.items() if member])
    return rows, expected


def test_the_arena_tags_become_the_arena_categories(tmp_path):
    rows, expected = _arena_battles(400, seed=3)
    # Absent and null tags count as false; a tag a row lacks does not cost it the others.
    rows[0]["category_tag"] = None
    rows[1]["category_tag"] = {"math_v0.1": {"math": True}}
    rows[2]["is_code"] = None
    expected[0] = [c for c in expected[0] if c in ("coding", "long_query", "multi_turn")]
    expected[1] = [c for c in expected[1] if c in ("coding", "long_query", "multi_turn")]
    expected[1].insert(1 if "coding" in expected[1] else 0, "math")
    expected[2] = [c for c in expected[2] if c != "coding"]
    path = tmp_path / "clean_battle.json"
    path.write_text(json.dumps(rows))
    result = import_path("fastchat", path)
    got = result.rows.column("category").to_pylist()
    assert got == ["|".join(e) or None for e in expected]
    assert any(g is None for g in got) and any("|" in (g or "") for g in got)  # the fixture has both cases
    assert any("category: the arena's category boards" in note for note in result.notes)


@pytest.mark.parametrize("varying", [False, True], ids=["alone", "beside-a-field-that-varies"])
def test_arena_tags_written_as_numbers_among_booleans_are_read_as_the_numbers_say(tmp_path, varying):
    """A tag written ``1.0``/``0.0`` on some battles and ``true``/``false`` on others is read as Python's truth
    test in the arena's code reads it.  Such a field is text (pyarrow typed it as numbers only while nothing else
    varied): the text ``"1.0"`` was read as false, so a battle's categories hung on the file's other rows."""
    rows, expected = _arena_battles(60, seed=6)
    for row in rows[::3]:
        tags = row["category_tag"]
        tags["criteria_v0.1"] = {name: float(flag) for name, flag in tags["criteria_v0.1"].items()}
        tags["math_v0.1"]["math"] = float(tags["math_v0.1"]["math"])
    if varying:
        rows[1]["conv_metadata"]["sum_user_tokens"] = str(rows[1]["conv_metadata"]["sum_user_tokens"])
    path = tmp_path / "clean_battle.json"
    path.write_text(json.dumps(rows))
    got = import_path("fastchat", path).rows.column("category").to_pylist()
    assert got == ["|".join(e) or None for e in expected]


def test_a_text_category_column_wins_over_the_tags(tmp_path):
    rows, _ = _arena_battles(3, seed=4)
    for row, category in zip(rows, ["coding", "", None], strict=True):
        row["category"] = category
    path = tmp_path / "clean_battle.json"
    path.write_text(json.dumps(rows))
    # As given (the ingest reads a blank label as none), never replaced by the tags.
    assert import_path("fastchat", path).rows.column("category").to_pylist() == ["coding", "", None]


def test_arena_category_boards_end_to_end(tmp_path, capsys):
    """``import --format fastchat`` then ``refresh --slices category,language``: a battle in several arena
    categories is in each of their boards and counted once on the overall board; each slice carries rank
    intervals drawn as the overall board's are (the one-label language slice, all the data, has the same)."""
    rows, expected = _arena_battles(3000, seed=5)
    path = tmp_path / "clean_battle.json"
    path.write_text(json.dumps(rows))
    out = tmp_path / "imported"
    assert cli.main(["import", "--format", "fastchat", "--in", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    glob = str(out / "battles" / "day=*" / "*.parquet")
    options = RefreshOptions(k=3, audit=False, slices="category,language", slice_min_battles=300)
    outcome = refresh(glob, str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert outcome.published is not None
    snapshot = Path(outcome.published.path)
    summary = _summary(snapshot)
    assert summary.counts.counted == len(rows)
    leaderboard = pl.read_parquet(snapshot / "leaderboard.parquet")
    assert leaderboard["n_battles"].sum() == 2 * len(rows)  # each battle once on the overall board
    members = {c: sum(c in e for e in expected) for c in {c for e in expected for c in e}}
    info = {i.slice: i for i in summary.slices}
    assert {n: i.battles for n, i in info.items() if i.dimension == "category"} == {
        f"category={c}": n for c, n in members.items()
    }
    assert sum(members.values()) > len(rows)  # the boards overlap
    boards = pl.read_parquet(snapshot / "slices.parquet")
    for name, slice_info in info.items():
        if slice_info.battles < 300:
            assert not slice_info.fitted and slice_info.ranks is None
            continue
        assert slice_info.fitted and slice_info.ranks is not None
        board = boards.filter(pl.col("slice") == name)
        ranks = {iv.model: iv for iv in slice_info.ranks.corrected}
        assert set(ranks) == set(board["model"])
        for model, rank in zip(board["model"], board["rank_corrected"], strict=True):
            assert ranks[model].rank == rank and ranks[model].low <= rank <= ranks[model].high
    english = info["language=English"]
    assert english.battles == len(rows) and english.ranks == summary.ranks
    board = boards.filter(pl.col("slice") == "language=English").drop("slice")
    assert board.equals(leaderboard)


def test_a_slice_of_few_models_lists_only_them_and_names_its_groups(tmp_path):
    """A slice with battles between some models only: its rank intervals in summary.slices list those models
    (before, every model of the overall board was listed, the absent ones at "rank 1 [1, 1]"), and a slice whose
    battles fall into groups no battle links says so in its note and its report tab (two models ranked 1 are not
    tied)."""
    logs = write_simulation(SimulationConfig(battles=6_000, models=6, judges=2, days=1, seed=5), tmp_path / "logs")
    (path,) = (logs / "battles").glob("day=*/*.parquet")
    models = sorted(set(pl.read_parquet(path)["model_a"]))
    a, b, c, d = models[:4]

    def pair(x: str, y: str) -> pl.Expr:
        return ((pl.col("model_a") == x) & (pl.col("model_b") == y)) | (
            (pl.col("model_a") == y) & (pl.col("model_b") == x)
        )

    pl.read_parquet(path).with_columns(
        pl.when(pair(a, b))
        .then(pl.lit("Pair"))
        .when(pair(c, d))
        .then(pl.lit("Split"))
        .otherwise(pl.lit("Rest"))
        .alias("language")
    ).with_columns(  # the Split slice: two pairs no battle links
        pl.when(pair(a, b) & (pl.col("battle_id").str.slice(-1).is_in(["0", "2", "4"])))
        .then(pl.lit("Split"))
        .otherwise(pl.col("language"))
        .alias("language")
    ).write_parquet(path)
    options = RefreshOptions(k=3, audit=False, slices="language", slice_min_battles=50)
    outcome = refresh(str(path), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert outcome.published is not None
    snapshot = Path(outcome.published.path)
    info = {i.value: i for i in _summary(snapshot).slices}
    assert info["Pair"].fitted and info["Split"].fitted
    assert info["Pair"].ranks is not None and info["Split"].ranks is not None
    assert sorted(iv.model for iv in info["Pair"].ranks.corrected) == [a, b]
    assert sorted(iv.model for iv in info["Pair"].ranks.naive) == [a, b]
    assert sorted(iv.model for iv in info["Split"].ranks.corrected) == [a, b, c, d]
    assert info["Rest"].note == ""
    # Two models: an affinity the judges each see one way is θ_a − θ_b's own difference (prior-selected, not applied).
    assert (
        info["Pair"].note.startswith("not corrected in this slice, as prior-selected")
        and "affinity" in info["Pair"].note
    )
    assert info["Split"].note.startswith("its battles fall into 2 groups no battle in the slice links")
    assert f"{a}, {b}" in info["Split"].note or f"{b}, {a}" in info["Split"].note
    assert "fall into 2 groups" in (snapshot / "report.html").read_text()


def test_truth_json_gives_each_models_quality_per_category_and_its_style():
    """A slice board is checked against the slice's own truth: truth.json names it per model (it held only the
    overall θ, so the per-category qualities the boards recover could not be read from a CLI run)."""
    config = SimulationConfig(battles=100, models=4, judges=2, days=1, categories=3, style=True, seed=2)
    params = draw_parameters(config)
    models = truth(config)["models"]
    for i, row in enumerate(models):
        assert list(row["theta_by_category"]) == list(CATEGORY_NAMES[:3])
        assert [row["theta_by_category"][c] for c in CATEGORY_NAMES[:3]] == [params.theta_in(k)[i] for k in range(3)]
        assert list(row["style_log_mean"].values()) == params.style_log_mean[i].tolist()
    plain = truth(SimulationConfig(battles=100, models=4, judges=2, days=1, seed=2))["models"]
    assert not {"theta_by_category", "style_log_mean"} & set(plain[0])


def test_a_slice_the_reference_never_judged_is_listed_not_fit(tmp_path):
    """With ``--reference JUDGE``, a slice holding no battle by that judge has nothing to measure the others
    against: it is listed with the reason (as the README says), not fit as a board "relative to" a reference whose
    effects would be prior alone (before, it was fit and published without a word)."""
    logs = write_simulation(SimulationConfig(battles=6_000, models=5, judges=3, days=1, seed=7), tmp_path / "logs")
    (path,) = (logs / "battles").glob("day=*/*.parquet")
    battles = pl.read_parquet(path)
    judges = sorted(set(battles["judge"]))
    solo = (pl.col("judge") == judges[0]) & pl.col("battle_id").str.ends_with("1")
    battles.with_columns(pl.when(solo).then(pl.lit("Solo")).otherwise(pl.lit("Main")).alias("language")).write_parquet(
        path
    )
    options = RefreshOptions(k=3, audit=False, slices="language", slice_min_battles=50, reference=judges[1])
    outcome = refresh(str(path), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert outcome.published is not None
    info = {i.value: i for i in _summary(Path(outcome.published.path)).slices}
    assert info["Main"].fitted
    assert not info["Solo"].fitted and info["Solo"].battles > 50
    assert info["Solo"].note == (
        f"not fit: --reference: no battle by the reference judge(s) {judges[1]} in these battles, so there is "
        "nothing to measure the other judges against"
    )


def test_a_slice_says_what_its_own_gate_corrected_toward_the_reference(tmp_path):
    """Each slice's gate weighs the judges' excesses against the reference's verdicts in that slice.  A slice holding
    5 of them had none of the 23 excesses corrected (its naive and corrected orders the same), and its note was empty:
    only the overall board's warning said what a gate did.  Each slice's note says it now."""
    logs = write_simulation(
        SimulationConfig(battles=6_000, models=5, judges=3, human_judges=1, days=1, seed=7), tmp_path / "logs"
    )
    (path,) = (logs / "battles").glob("day=*/*.parquet")
    battles = pl.read_parquet(path).with_row_index("row")
    human = pl.col("judge") == "human-pool-1"
    few = set(battles.filter(human)["row"].to_list()[:5])
    labelled = battles.with_columns(
        pl.when(pl.col("row").is_in(few) | ~human & (pl.col("row") % 2 == 0))
        .then(pl.lit("Few"))
        .otherwise(pl.lit("Main"))
        .alias("language")
    )
    labelled.drop("row").write_parquet(path)
    options = RefreshOptions(k=3, audit=False, slices="language", slice_min_battles=50, reference="human-pool-1")
    outcome = refresh(str(path), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert outcome.published is not None
    info = {i.value: i for i in _summary(Path(outcome.published.path)).slices}
    assert info["Few"].fitted and info["Main"].fitted
    assert "the reference has 5 verdict(s) in this slice: its gate corrected 0 of " in info["Few"].note
    assert "the reference has " in info["Main"].note and "its gate corrected" in info["Main"].note


def test_a_slice_threshold_without_slices_is_refused(run):
    """``--slice-min-battles 50`` with no ``--slices`` was silently ignored (the run published a board without
    slices): the threshold says the user meant slices, so the run is refused in one line before any work."""
    with pytest.raises(InputError, match="--slice-min-battles 50 is given without --slices"):
        run("out-threshold", slice_min_battles=50)


def _two_category_snapshot(
    tmp_path: Path, models: int, rewrite: Callable[[pl.DataFrame, pl.Expr], pl.DataFrame], style: bool = False
) -> Path:
    """The snapshot of ``refresh --slices category`` over simulated battles in two categories, each day's file first
    rewritten by ``rewrite(table, in the first category)`` (``style``: with style counts)."""
    config = SimulationConfig(battles=8_000, models=models, judges=2, days=1, categories=2, seed=5, style=style)
    logs = write_simulation(config, tmp_path / "logs")
    for path in (logs / "battles").glob("day=*/*.parquet"):
        rewrite(pl.read_parquet(path), pl.col("category") == CATEGORY_NAMES[0]).write_parquet(path)
    options = RefreshOptions(k=2, audit=False, slices="category")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"), str(tmp_path / "state"), str(tmp_path / "out"), [], options
    )
    assert outcome.published is not None
    return Path(outcome.published.path)


@pytest.mark.parametrize(
    ("shown", "says"),
    [
        ("first-by-name", "its position correction rests on the Bradley-Terry model's transitivity alone"),
        ("hub-first", "position bias is not corrected in this slice"),
        ("cyclic", "that balance (as a left/right drawn at random gives) tells its position correction from quality"),
    ],
)
def test_a_slice_shown_in_one_order_says_how_its_position_effect_was_told(tmp_path, shown, says):
    """A slice whose battles show each pair in one order only was published with no word of it: the overall board
    separates a judge's position bias from quality by pairs seen in both orders, the slice cannot.  Every pair shown
    first-by-name leaves γ to the model's transitivity (the profile calls it identified); one model shown first in
    every battle makes it prior-selected and the correction is left off.  A cyclic rule (of 7 models, i first
    against the next three) shows every model first in half its pairs: that balance, not transitivity, tells
    position from quality, and the note says so.  The note now says which; the slice in both orders says nothing of
    it."""
    one, both = (f"category={c}" for c in CATEGORY_NAMES[:2])

    def keep(table: pl.DataFrame, in_one: pl.Expr) -> pl.DataFrame:
        names = sorted(set(table["model_a"]) | set(table["model_b"]))
        index = {m: i for i, m in enumerate(names)}
        step = (pl.col("model_b").replace_strict(index) - pl.col("model_a").replace_strict(index)) % len(names)
        first = {
            "first-by-name": pl.col("model_a") < pl.col("model_b"),
            "hub-first": pl.col("model_a") == pl.col("model_a").min(),
            "cyclic": step.is_between(1, len(names) // 2),
        }[shown]
        return table.filter(~in_one | first)

    snapshot = _two_category_snapshot(tmp_path, 7, keep)
    info = {i.slice: i for i in _summary(snapshot).slices}
    assert info[one].fitted and says in info[one].note and "0% of its battles" in info[one].note, info[one].note
    assert "both orders" not in info[both].note, info[both].note
    assert says in html.unescape((snapshot / "report.html").read_text())


def test_voters_each_seeing_a_pair_once_are_not_a_slice_shown_in_one_order():
    """Voter-judges see a pair once each, in one order or the other: per (judge, pair) nothing is seen in both
    orders, but the pair is, across the voters whose population effect the fit shrinks to.  The share is pooled over
    judges, so such a slice is not said to be shown in one order."""
    rng = np.random.default_rng(3)
    n = 4000
    lo, hi = rng.integers(0, 5, n), rng.integers(5, 10, n)
    swap = rng.random(n) < 0.5
    cells = pa.table(
        {
            "judge": [f"pool/v{i}" for i in range(n)],  # every battle its own voter
            "model_a": [f"m{x}" for x in np.where(swap, hi, lo)],
            "model_b": [f"m{x}" for x in np.where(swap, lo, hi)],
            "n": np.ones(n),
        }
    )
    assert both_orders_share(cells) > 0.9
    one_order = cells.set_column(1, "model_a", pa.array([f"m{x}" for x in lo])).set_column(
        2, "model_b", pa.array([f"m{x}" for x in hi])
    )
    assert both_orders_share(one_order) == 0.0


def test_a_slice_whose_battles_do_not_identify_a_correction_names_it(tmp_path):
    """A slice whose battles are all of equal lengths cannot tell a judge's length preference: its length correction is
    prior-selected and left off its board.  The overall board's warnings name only its own prior-selected corrections,
    so the slice was published without it and without a word; its note now names the effect.  The other slice (its
    lengths as drawn) says nothing of it."""
    flat, drawn = (f"category={c}" for c in CATEGORY_NAMES[:2])

    def equal_lengths(table: pl.DataFrame, in_flat: pl.Expr) -> pl.DataFrame:
        return table.with_columns(pl.when(in_flat).then(pl.col("len_a")).otherwise(pl.col("len_b")).alias("len_b"))

    info = {i.slice: i for i in _summary(_two_category_snapshot(tmp_path, 6, equal_lengths)).slices}
    assert info[flat].fitted and "not corrected in this slice" in info[flat].note, info[flat].note
    assert "length of all judges (global)" in info[flat].note, info[flat].note
    assert "not corrected" not in info[drawn].note, info[drawn].note


@pytest.mark.parametrize(
    ("dropped", "says"),
    [
        (("len_a", "len_b"), "no battle carries both answers' lengths"),
        (STYLE_COUNT_COLUMNS, "no battle of this slice carries the header, list and bold counts"),
    ],
)
def test_a_slice_without_the_covariates_of_a_correction_says_so(tmp_path, dropped, says):
    """A slice whose battles carry no lengths (or no style counts) cannot be corrected for verbosity (or style); its
    fit warned so, but only its naive warnings reached its note, and the overall board, whose other battles carry
    them, said nothing either: the slice was published as corrected with that advantage kept.  The other slice says
    nothing of it."""
    bare, other = (f"category={c}" for c in CATEGORY_NAMES[:2])

    def without(table: pl.DataFrame, in_bare: pl.Expr) -> pl.DataFrame:
        return table.with_columns(pl.when(in_bare).then(None).otherwise(pl.col(c)).alias(c) for c in dropped)

    info = {i.slice: i for i in _summary(_two_category_snapshot(tmp_path, 6, without, style=True)).slices}
    assert info[bare].fitted and says in info[bare].note, info[bare].note
    assert says not in info[other].note, info[other].note


def test_a_slice_with_style_counts_on_some_battles_says_how_many(tmp_path):
    """The overall board says how many battles carry style counts below 95%; a slice where only half do (its battles
    a small share of the whole) left half its formatting advantage in its "corrected" board without a word."""
    half, other = (f"category={c}" for c in CATEGORY_NAMES[:2])

    def halved(table: pl.DataFrame, in_half: pl.Expr) -> pl.DataFrame:
        odd = in_half & (pl.int_range(pl.len()) % 2 == 1)
        return table.with_columns(pl.when(odd).then(None).otherwise(pl.col(c)).alias(c) for c in STYLE_COUNT_COLUMNS)

    info = {i.slice: i for i in _summary(_two_category_snapshot(tmp_path, 6, halved, style=True)).slices}
    assert info[half].fitted and "carry the header, list and bold counts" in info[half].note, info[half].note
    assert "battles (5" in info[half].note and "style-kept board" not in info[half].note, info[half].note
    assert "carry the header" not in info[other].note, info[other].note


def test_a_slice_whose_naive_ratings_do_not_exist_says_so(tmp_path):
    """A model that loses every battle of a slice has no maximum-likelihood rating there: the slice's naive fit uses
    a prior, as the overall board does and warns of; the slice said nothing (its naive CI ±1,270 points as if fit
    as asked).  Its note carries the naive fit's warning; the other slice's does not."""
    losing, other = (f"category={c}" for c in CATEGORY_NAMES[:2])

    def always_loses(table: pl.DataFrame, in_first: pl.Expr) -> pl.DataFrame:
        loser = table["model_a"].min()
        winner = (
            pl.when(in_first & (pl.col("model_a") == loser))
            .then(pl.lit("model_b"))
            .when(in_first & (pl.col("model_b") == loser))
            .then(pl.lit("model_a"))
            .otherwise(pl.col("winner"))
        )
        return table.with_columns(winner.alias("winner"))

    info = {i.slice: i for i in _summary(_two_category_snapshot(tmp_path, 6, always_loses)).slices}
    said = "naive Bradley-Terry: the maximum-likelihood ratings do not exist"
    assert info[losing].fitted and said in info[losing].note, info[losing].note
    assert said not in info[other].note, info[other].note


def test_slices_beside_grades_say_their_points_are_on_another_scale(tmp_path):
    """With --scores the overall board's θ is set by the grades as well as the battles; a slice is fit on its battles
    alone, on the judges' average discrimination's scale.  A slice holding every battle rated the models with a slope
    of 0.83 against the true θ (4 of 8 CIs covering it; the overall board 1.00, 8 of 8), and nothing said so."""
    from biasboard.transforms.snapshot import SLICES_BESIDE_GRADES_WARNING

    sim = tmp_path / "sim"
    write_simulation(SimulationConfig(battles=4000, models=6, judges=3, days=1, categories=1, scores=1.0, seed=9), sim)
    options = RefreshOptions(k=3, audit=False, slices="category", scores_glob=str(sim / "scores"))
    outcome = refresh(str(sim / "battles"), str(tmp_path / "st"), str(tmp_path / "out"), [], options)
    assert outcome.summary is not None and any(info.fitted for info in outcome.summary.slices)
    assert SLICES_BESIDE_GRADES_WARNING in outcome.summary.warnings
    without = refresh(str(sim / "battles"), str(tmp_path / "st2"), str(tmp_path / "out2"), [], RefreshOptions(
        k=3, audit=False, slices="category"))  # fmt: skip
    assert without.summary is not None and SLICES_BESIDE_GRADES_WARNING not in without.summary.warnings


@pytest.mark.parametrize("streamed", [False, True])
def test_a_label_spelled_in_several_cases_is_one_slice(tmp_path, monkeypatch, streamed):
    """Labels are trimmed, and were compared with their case: ``' Coding '`` and ``coding`` became two slices, each
    fit on part of the category's battles.  Compared without case, the slice is the one the log spelled alike
    publishes (the same battles and ratings), named by its most common spelling, its note naming the others."""
    if streamed:
        monkeypatch.setenv("BIASBOARD_STREAM_CELLS", "0")
    logs = write_simulation(
        SimulationConfig(battles=4_000, models=5, judges=2, days=1, categories=2, seed=7), tmp_path / "logs"
    )
    (path,) = (logs / "battles").glob("day=*/*.parquet")
    first = sorted(set(pl.read_parquet(path)["category"]))[0]
    alike = tmp_path / "alike" / "day=2024-01-01" / "part-00000.parquet"
    alike.parent.mkdir(parents=True)
    alike.write_bytes(path.read_bytes())
    quarter = pl.int_range(pl.len()) % 4  # half the category's battles keep its spelling, a quarter each take another
    ours = pl.col("category") == first
    spelled = pl.when(ours & (quarter == 2)).then(pl.lit(f" {first.title()} ")).when(ours & (quarter == 3))
    pl.read_parquet(path).with_columns(
        spelled.then(pl.lit(first.upper())).otherwise(pl.col("category")).alias("category")
    ).write_parquet(path)
    options = RefreshOptions(k=3, audit=False, slices="category", slice_min_battles=50)
    boards = {}
    for name, given in (("alike", alike), ("spelled", path)):
        outcome = refresh(str(given), str(tmp_path / f"state-{name}"), str(tmp_path / f"out-{name}"), [], options)
        assert outcome.published is not None
        snapshot = Path(outcome.published.path)
        boards[name] = (
            _summary(snapshot).slices,
            pl.read_parquet(io.BytesIO((snapshot / "slices.parquet").read_bytes())),
        )
    (alike_info, alike_board), (info, board) = boards["alike"], boards["spelled"]
    assert len(info) == len(alike_info) == 2
    ours_info = next(i for i in info if i.value.lower() == first)
    assert ours_info.battles == next(i.battles for i in alike_info if i.value == first)
    assert ours_info.value == first  # the spelling of half its battles
    assert f"its battles spell the label '{first}' also as '{first.upper()}', '{first.title()}'" in ours_info.note
    assert board.height == alike_board.height and board["slice"].to_list() == alike_board["slice"].to_list()
    ratings = [b.sort("slice", "model").get_column("rating_corrected").to_numpy() for b in (board, alike_board)]
    np.testing.assert_allclose(ratings[0], ratings[1], rtol=0, atol=1e-6)


def test_a_label_spelled_composed_and_decomposed_is_one_slice():
    """A decomposed ``français`` (``c`` + combining cedilla, as a macOS or JavaScript export writes it) displays as the
    composed one and was a second slice beside it: labels are put in the names' form (NFC) before the case fold, so the
    two are one spelling (named composed, the note naming only the case variant), their cell keys both the slice's."""
    composed, decomposed = "fran\u00e7ais", "franc\u0327ais"
    labels = label_members({composed: 30.0, decomposed: 20.0, "Fran\u00e7ais": 40.0, f"coding|{decomposed}": 5.0})
    assert [label.name for label in labels] == ["coding", composed]
    french = labels[1]
    assert set(french.keys) == {composed, decomposed, "Fran\u00e7ais", f"coding|{decomposed}"}
    assert french.others == ("Fran\u00e7ais",)  # 55 battles spelled composed or not beat its 40
