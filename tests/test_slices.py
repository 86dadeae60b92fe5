"""Category boards end to end through ``refresh --slices`` on simulated battles with a ``category`` column.

The simulator draws a category per battle and, per category, a quality shift for
every model (known truth): the slice's corrected board must recover the slice's
own order (better than it matches the other category's), the overall board must
be the one a run without ``--slices`` publishes, byte for byte, and a slice
below the minimum battle count is listed, not fit.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from biasboard.importers.registry import import_path
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, conform_pair_cells
from biasboard.schemas.errors import InputError
from biasboard.schemas.summary import Summary
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.simulate.simulator import CATEGORY_NAMES, draw_parameters
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


def test_a_small_slice_is_listed_not_fit(run):
    snapshot = run("out-small", slices="category,language", slice_min_battles=10**6)
    info = _summary(snapshot).slices
    assert [i.dimension for i in info] == ["category", "category"]  # no battle has a language: no such slice
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
