"""Partial cells and the cell monoid: exact against a plain reference, and the monoid laws (hypothesis)."""

from __future__ import annotations

import bisect
import datetime as dt
import json
import math
from collections import defaultdict

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.schemas.battle import STYLE_COUNT_COLUMNS
from biasboard.schemas.cells import LEN_BIN_EDGES, PAIR_CELL_KEYS, PAIR_CELLS_SCHEMA, STYLE_SQUARES, STYLE_SUMS
from biasboard.schemas.families import FamilyMap
from biasboard.transforms.cells import judge_summary, merge_cells, partial_cells
from biasboard.transforms.validate import SeenIds, validate_battles
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FMAP = FamilyMap.with_user_rules()
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
INT_MEASURES = ["n", "win_a", "win_b", "tie", "tie_bothbad", "n_len", "n_style"]
FLOAT_MEASURES = ["sum_x", "sum_x2", "sum_loglen_a", "sum_loglen_b", *STYLE_SUMS, *STYLE_SQUARES]

MODELS = ["gpt-4", "claude-2", "llama-2-70b", "vicuna-13b", "acme"]
JUDGES = ["gpt-4", "human", "claude-3-opus"]
WINNERS = ["model_a", "model_b", "tie", "tie (bothbad)", "bogus"]
LENGTHS = st.one_of(st.none(), st.integers(-2, 3), st.integers(0, 3000))

COLUMNS = (
    "battle_id",
    "judge",
    "model_a",
    "model_b",
    "winner",
    "len_a",
    "len_b",
    "family_a",
    "order_known",
    "category",
)
row = st.fixed_dictionaries(
    {
        "battle_id": st.integers(0, 40).map(str),
        "judge": st.sampled_from(JUDGES),
        "model_a": st.sampled_from(MODELS),
        "model_b": st.sampled_from(MODELS),
        "winner": st.sampled_from(WINNERS),
        "len_a": LENGTHS,
        "len_b": LENGTHS,
        "family_a": st.sampled_from([None, None, "", "custom"]),
        "order_known": st.sampled_from([None, True, False]),
        "category": st.sampled_from([None, "", " coding ", "coding", "math"]),
        # six style counts (headers a/b, lists a/b, bold a/b), one of them null, or none given; -1 is rejected
        "style": st.one_of(
            st.none(),
            st.tuples(*[st.integers(-1, 4)] * 6),
            st.tuples(*[st.integers(0, 3)] * 5, st.none()),
        ),
    }
)
battle_lists = st.lists(row, min_size=0, max_size=60)


def to_table(rows: list[dict]) -> pa.Table:
    columns = {k: [r.get(k) for r in rows] for k in COLUMNS}
    for i, name in enumerate(STYLE_COUNT_COLUMNS):
        columns[name] = [None if r.get("style") is None else r["style"][i] for r in rows]
    types = {"len_a": pa.int64(), "len_b": pa.int64(), "order_known": pa.bool_()}
    types.update(dict.fromkeys(STYLE_COUNT_COLUMNS, pa.int64()))
    table = pa.table({k: pa.array(v, types.get(k, pa.string())) for k, v in columns.items()})
    return table.append_column("ts", pa.array([T0] * len(rows), pa.timestamp("us", tz="UTC")))


def frame(cells: pa.Table) -> pl.DataFrame:
    assert cells.schema.equals(PAIR_CELLS_SCHEMA)
    return pl.from_arrow(cells).sort(list(PAIR_CELL_KEYS))


def assert_cells_equal(left: pa.Table, right: pa.Table) -> None:
    """Keys and counts exactly; float sums to 1e-9 (float addition is not associative)."""
    a, b = frame(left), frame(right)
    assert a.select(*PAIR_CELL_KEYS, *INT_MEASURES).equals(b.select(*PAIR_CELL_KEYS, *INT_MEASURES))
    for column in FLOAT_MEASURES:
        for x, y in zip(a.get_column(column).to_list(), b.get_column(column).to_list(), strict=True):
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (column, x, y)


def cells_of(rows: list[dict], seen: SeenIds | None = None) -> pa.Table:
    return partial_cells(to_table(rows), FMAP, seen if seen is not None else SeenIds()).cells


def reference_cells(rows: list[dict]) -> dict:
    """Plain-Python cells of rows that are all valid and distinct: the definition, written out."""
    out: dict = defaultdict(lambda: defaultdict(float))
    for r in rows:
        la, lb = r["len_a"], r["len_b"]
        has = la is not None and lb is not None
        x = math.log(max(la, 1)) - math.log(max(lb, 1)) if has else None
        bin_ = bisect.bisect_right(list(LEN_BIN_EDGES), x) if has else -1
        fam_a = r["family_a"] or FMAP.family_of(r["model_a"])
        style = r.get("style")
        has_style = style is not None and None not in style
        d = []
        if has_style:
            for k in range(3):
                c_a, c_b = style[2 * k], style[2 * k + 1]
                d.append((c_a - c_b) / (c_a + c_b) if c_a + c_b else 0.0)
        signs = [(v > 0) - (v < 0) for v in d]
        key = (
            r["judge"],
            FMAP.family_of(r["judge"]),
            r["model_a"],
            r["model_b"],
            fam_a,
            FMAP.family_of(r["model_b"]),
            bin_,
            r.get("order_known") is not False,  # null = known
            (r.get("category") or "").strip() or None,  # slice labels: blank = unlabelled
            (r.get("language") or "").strip() or None,
            sum((sign + 1) * 3**k for k, sign in enumerate(signs)) if has_style else -1,
        )
        cell = out[key]
        cell["n"] += 1
        cell[{"model_a": "win_a", "model_b": "win_b", "tie": "tie", "tie (bothbad)": "tie_bothbad"}[r["winner"]]] += 1
        if has:
            cell["n_len"] += 1
            cell["sum_x"] += x
            cell["sum_x2"] += x * x
            cell["sum_loglen_a"] += math.log(max(la, 1))
            cell["sum_loglen_b"] += math.log(max(lb, 1))
        if has_style:
            cell["n_style"] += 1
            for k in range(3):
                cell[STYLE_SUMS[k]] += d[k]
                cell[STYLE_SQUARES[k]] += d[k] * d[k]
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(battle_lists)
def test_partial_cells_match_the_definition(rows):
    valid, seen_ids = [], set()
    for r in rows:
        bad = r["winner"] == "bogus" or any(
            v is not None and v < 0 for v in (r["len_a"], r["len_b"], *(r["style"] or ()))
        )
        if not bad and r["battle_id"] not in seen_ids:
            seen_ids.add(r["battle_id"])
            valid.append(r)
    result = partial_cells(to_table(rows), FMAP, SeenIds())
    assert result.counts.read == len(rows) and result.counts.counted == len(valid)
    assert result.counts.conserved and result.dead_letters.num_rows == result.counts.rejected_total
    assert result.counts.self_battles == sum(r["model_a"] == r["model_b"] for r in valid)
    expected = reference_cells(valid)
    got = {tuple(c[k] for k in PAIR_CELL_KEYS): c for c in result.cells.to_pylist()}
    assert set(got) == set(expected)
    for key, cell in expected.items():
        for measure in INT_MEASURES:
            assert got[key][measure] == cell.get(measure, 0), (key, measure)
        for measure in FLOAT_MEASURES:
            assert math.isclose(got[key][measure], cell.get(measure, 0.0), rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=40, deadline=None)
@given(battle_lists, st.integers(0, 60))
def test_batching_does_not_change_a_day(rows, cut):
    """Cells of a day are the same whether its rows come in one batch or two (duplicates found across batches)."""
    whole = partial_cells(to_table(rows), FMAP, SeenIds())
    seen = SeenIds()
    left = partial_cells(to_table(rows[:cut]), FMAP, seen)
    right = partial_cells(to_table(rows[cut:]), FMAP, seen)
    assert_cells_equal(merge_cells([left.cells, right.cells]), whole.cells)
    assert (left.counts + right.counts) == whole.counts


@settings(max_examples=40, deadline=None)
@given(battle_lists, battle_lists)
def test_union_of_disjoint_parts(rows_a, rows_b):
    """cells(A) ⊕ cells(B) = cells(A ∪ B) for parts with distinct ids (e.g. two days)."""
    rows_b = [{**r, "battle_id": "B" + r["battle_id"]} for r in rows_b]
    assert_cells_equal(merge_cells([cells_of(rows_a), cells_of(rows_b)]), cells_of(rows_a + rows_b))


@settings(max_examples=30, deadline=None)
@given(battle_lists, battle_lists, battle_lists)
def test_monoid_laws(rows_a, rows_b, rows_c):
    a, b, c = cells_of(rows_a), cells_of(rows_b), cells_of(rows_c)
    empty = PAIR_CELLS_SCHEMA.empty_table()
    # commutative: byte-for-byte the same table (merge sorts by key)
    assert merge_cells([a, b]).equals(merge_cells([b, a]))
    # associative
    assert_cells_equal(merge_cells([merge_cells([a, b]), c]), merge_cells([a, merge_cells([b, c])]))
    # identity, and idempotent normal form: merging a merged table with nothing changes nothing
    assert merge_cells([a, empty]).equals(merge_cells([a]))
    assert merge_cells([merge_cells([a])]).equals(merge_cells([a]))
    assert merge_cells([]).equals(empty)
    # totals are conserved by merging
    total = sum(sum(t.column("n").to_pylist()) for t in (a, b, c))
    assert sum(merge_cells([a, b, c]).column("n").to_pylist()) == total


@settings(max_examples=30, deadline=None)
@given(battle_lists, battle_lists)
def test_merge_groups_coded_keys_in_string_order(rows_a, rows_b):
    """Keys are grouped as codes into sorted vocabularies: the rows come out in the strings' key order, and
    the dictionary-encoded form (what the fit loads) holds the same table."""
    rows_b = [{**r, "battle_id": "B" + r["battle_id"]} for r in rows_b]
    merged = merge_cells([cells_of(rows_a), cells_of(rows_b)])
    in_order = merged.take(pc.sort_indices(merged, [(k, "ascending", "at_start") for k in PAIR_CELL_KEYS]))
    assert merged.equals(in_order.cast(PAIR_CELLS_SCHEMA))  # nulls (no slice label) first, as before
    coded = merge_cells([cells_of(rows_a), cells_of(rows_b)], dictionary=True)
    assert all(pa.types.is_dictionary(coded.schema.field(k).type) for k in ("judge", "model_a", "model_b"))
    assert coded.cast(PAIR_CELLS_SCHEMA).equals(merged)


def test_judge_summary_shares():
    rows = [
        {
            "battle_id": str(i),
            "judge": "gpt-4",
            "model_a": "m1",
            "model_b": m_b,
            "winner": w,
            "len_a": 10,
            "len_b": 20,
            "family_a": None,
        }
        for i, (m_b, w) in enumerate([("m2", "model_a"), ("m2", "model_a"), ("m1", "tie (bothbad)"), ("m2", "model_b")])
    ]
    summary = judge_summary(cells_of(rows)).to_pylist()
    assert len(summary) == 1
    s = summary[0]
    assert s["n"] == 4 and s["judge_family"] == "openai" and s["self_battles"] == 1 and s["models"] == 2
    assert (s["win_a_share"], s["win_b_share"], s["tie_share"], s["bothbad_share"]) == (0.5, 0.25, 0.25, 0.25)


def test_judge_summary_orders_the_families_of_one_judge_name():
    """A judge name under several families (a ``--judge-pool column:`` pool of judges of different families) has a
    row per family; sorted by name alone they came in polars' group order, which changes from run to run, so a
    refit of the same cells published a snapshot of another content hash."""
    families = ["qwen", "openai", "meta", "anthropic", "mistral", "google"]
    rows = [
        {"battle_id": str(i), "judge": "pool", "model_a": "m1", "model_b": f"m{i + 2}", "winner": "model_a",
         "len_a": 10, "len_b": 20, "family_a": None}
        for i in range(len(families))
    ]  # fmt: skip
    cells = cells_of(rows).sort_by("model_b")
    cells = cells.set_column(cells.schema.get_field_index("judge_family"), "judge_family", pa.array(families))
    summary = judge_summary(cells).select(["judge", "judge_family"]).to_pylist()
    assert summary == [{"judge": "pool", "judge_family": f} for f in sorted(families)]


def test_judge_summary_first_and_second_shares_leave_out_battles_of_unknown_order():
    """A battle whose shown order is unknown (AlpacaEval: model_a is the listed baseline) has no first-shown answer:
    the first/second shares are of the battles of known order, ties of all; a judge with none gets null shares.
    Before, AlpacaEval 1's judge (no order known) read 'first shown wins 20.5%, second 79.0%'."""
    listed = [("j1", "base", "m", "model_a", False)] * 3 + [("j1", "base", "m", "tie", False)]
    known = [("j1", "m", "base", "model_a", True), ("j1", "base", "m", "model_b", True)]
    only_listed = [("j2", "base", "m", "model_a", False)] * 2
    rows = [
        {"battle_id": str(i), "judge": j, "model_a": a, "model_b": b, "winner": w, "order_known": k}
        for i, (j, a, b, w, k) in enumerate(listed + known + only_listed)
    ]
    by_judge = {row["judge"]: row for row in judge_summary(cells_of(rows)).to_pylist()}
    j1, j2 = by_judge["j1"], by_judge["j2"]
    assert (j1["n"], j1["order_known"], j1["win_a_share"], j1["win_b_share"], j1["tie_share"]) == (
        6,
        2,
        0.5,
        0.5,
        1 / 6,
    )
    assert (j2["n"], j2["order_known"], j2["win_a_share"], j2["win_b_share"], j2["tie_share"]) == (2, 0, None, None, 0)


def test_judge_summary_counts_each_judges_own_models_plain_or_dictionary_encoded():
    """``models`` is per judge (model_a ∪ model_b within the judge's cells), whether the keys are text or the
    merged history's dictionary-encoded columns."""
    pairs = [("j1", "m1", "m2"), ("j1", "m2", "m1"), ("j2", "m3", "m4"), ("j2", "m5", "m3"), ("j2", "m3", "m3")]
    rows = [
        {"battle_id": str(i), "judge": j, "model_a": a, "model_b": b, "winner": "model_a", "len_a": 1, "len_b": 2}
        for i, (j, a, b) in enumerate(pairs)
    ]
    cells = cells_of(rows)
    coded = pa.table(
        [c.dictionary_encode() if pa.types.is_string(c.type) else c for c in cells.columns], names=cells.column_names
    )
    for table in (cells, coded):
        summary = {r["judge"]: r for r in judge_summary(table).to_pylist()}
        assert {j: (r["models"], r["self_battles"], r["n"]) for j, r in summary.items()} == {
            "j1": (2, 0, 2),
            "j2": (3, 1, 3),
        }


def test_group_ids_group_exactly_the_rows_that_share_every_key(monkeypatch):
    """Rows share a group id exactly when they agree on every key: coded and plain text, integers, booleans,
    nulls; through the bitmap renumbering and the sorting one (a tiny :data:`DENSE_SPAN`)."""
    import numpy as np
    from biasboard.transforms import cells

    rng = np.random.default_rng(5)
    n = 4000
    names = np.array(["gpt", "claude", " claude", "", "llama"])

    def text(k: int) -> pl.Series:
        values = names[rng.integers(0, k, n)].tolist()
        return pl.Series([None if rng.random() < 0.05 else v for v in values], dtype=pl.String)

    frame = pl.DataFrame({
        "judge": text(3).cast(pl.Categorical), "model_a": text(5).cast(pl.Categorical), "label": text(4),
        "len_bin": pl.Series(rng.integers(-1, 22, n), dtype=pl.Int16), "known": pl.Series(rng.random(n) < 0.5),
        "all_null": pl.Series([None] * n, dtype=pl.Categorical),
    })  # fmt: skip
    keys = frame.columns
    for span in (cells.DENSE_SPAN, 64, 1):
        monkeypatch.setattr(cells, "DENSE_SPAN", span)
        group, groups = cells.group_ids(frame, keys)
        assert group.min() == 0 and group.max() == groups - 1
        coded = frame.with_columns(pl.Series("g", group))
        distinct = frame.unique().height
        assert groups == distinct == coded.unique().height == coded.select("g").unique().height
    assert cells.group_ids(frame.head(0), keys)[1] == 0


def test_cells_of_the_valid_rows_whatever_the_rejected_rows_hold():
    """Cells cut to the valid rows by a mask equal cells of the valid rows alone, bit for bit.

    Keys constant over the batch and (without style counts) the zero sums are read off the whole batch
    before the cut; here the rejected rows differ from the valid ones exactly there (order, slice label,
    style counts), and a batch whose rows are all rejected gives no cells.
    """
    import numpy as np
    from biasboard.transforms.cells import _aggregate_pairs, pair_cells_table

    def summed(checked, kept) -> pa.Table:
        return pair_cells_table(_aggregate_pairs(checked.rows, FMAP, kept))

    n = 40
    good = [{**r, "battle_id": str(i)} for i, r in enumerate(_plain_rows(n))]
    bad = [
        {**r, "battle_id": f"x{i}", "winner": "bogus", "order_known": False, "category": "math", "style": (1,) * 6}
        for i, r in enumerate(_plain_rows(8))
    ]
    checked = validate_battles(to_table(bad + good), SeenIds())  # a rejected row first
    assert checked.kept is not None and checked.kept.sum() == n
    alone = validate_battles(to_table(good), SeenIds())
    assert summed(checked, checked.kept).equals(summed(alone, alone.kept))
    nothing = summed(checked, np.zeros(len(good) + len(bad), dtype=bool))
    assert nothing.num_rows == 0 and nothing.schema == PAIR_CELLS_SCHEMA


def _plain_rows(n: int) -> list[dict]:
    """``n`` valid battles without order, slice labels or style counts (every such key constant)."""
    return [
        {
            "judge": JUDGES[i % 3],
            "model_a": MODELS[i % 5],
            "model_b": MODELS[(i + 1) % 5],
            "winner": WINNERS[i % 4],
            "len_a": 10 + i,
            "len_b": 20,
            "family_a": None,
            "order_known": None,
            "category": None,
            "style": None,
        }
        for i in range(n)
    ]


def test_a_family_spelled_composed_and_decomposed_is_one_family():
    """A family a map gives decomposed (``soci\u0065\u0301t\u0065\u0301``, typed on macOS) and the same family given
    composed in the data display alike and were two families: the judge a stranger to its own family's models (no
    affinity measured).  Both are put in the names' form (NFC) before the case fold, as slice labels and names are."""
    decomposed, composed = "Soci\u0065\u0301t\u0065\u0301", "Soci\u00e9t\u00e9"
    fmap = FamilyMap.with_user_rules(json.dumps({"acme": decomposed}))
    assert fmap.family_of("acme-judge") == "soci\u00e9t\u00e9"
    rows = [
        {"battle_id": "1", "judge": "acme-judge", "model_a": "gpt-4", "model_b": "acme-7b", "winner": "model_a",
         "family_a": "openai", "family_b": decomposed},
        {"battle_id": "2", "judge": "acme-judge", "model_a": "zeta", "model_b": "claude-2", "winner": "model_b",
         "family_a": composed},
    ]  # fmt: skip
    cells = frame(partial_cells(to_table(rows), fmap, SeenIds()).cells)
    families = {m: f for side in "ab" for m, f in zip(cells[f"model_{side}"], cells[f"family_{side}"], strict=True)}
    assert set(cells["judge_family"]) == {"soci\u00e9t\u00e9"}
    assert families["acme-7b"] == families["zeta"] == "soci\u00e9t\u00e9", families  # the judge's own family


def test_families_given_in_the_data_are_read_as_the_maps_are_trimmed_and_lower_cased():
    """``OpenAI`` given for a model never met the map's ``openai`` for the judge (its own family: no affinity measured),
    and ``Unknown``/``Human`` were families of their own (two rows given ``Unknown`` made an affinity between
    strangers).  Given families are trimmed and lower-cased, as the map's are; a family of spaces is none."""
    rows = [
        {"battle_id": "1", "judge": "gpt-4", "model_a": "gpt-4", "model_b": "acme", "winner": "model_a",
         "family_a": " OpenAI "},
        {"battle_id": "2", "judge": "human", "model_a": "acme", "model_b": "claude-2", "winner": "model_b",
         "family_a": "Unknown"},
        {"battle_id": "3", "judge": "human", "model_a": "vicuna-13b", "model_b": "acme", "winner": "model_b",
         "family_a": "   "},
    ]  # fmt: skip
    cells = frame(cells_of(rows))
    families = dict(zip(cells["model_a"].to_list(), cells["family_a"].to_list(), strict=True))
    assert families == {"gpt-4": "openai", "acme": "unknown", "vicuna-13b": FMAP.family_of("vicuna-13b")}


def test_battles_whose_given_families_differ_only_in_form_share_one_cell():
    """Given families are put in their form on the cells, not on each battle: cells whose family becomes another's
    (``OpenAI``, `` openai``, ``openai``), or is blank and mapped to the one given beside it, are one cell."""
    base = {"judge": "human", "model_a": "gpt-4", "model_b": "acme", "winner": "model_a", "len_a": 10, "len_b": 20}
    for spellings in (["OpenAI", " openai", "openai"], ["OpenAI", " openai", "openai", "", None]):
        rows = [{**base, "battle_id": str(i), "family_a": f} for i, f in enumerate(spellings)]
        cells = frame(cells_of(rows))
        assert cells.select("family_a", "n", "win_a").rows() == [("openai", len(rows), len(rows))]


def test_a_days_stored_cells_are_written_from_their_codes_and_read_back_as_the_cells(tmp_path):
    """A day's cells file is written from the frame the batch summed, its text keys still dictionary codes (decoding
    them to text for the writer to encode them again took 41 ms of a 1%-bad day, where writing the codes takes 15),
    and every reader gets the cells the batch gave: the same table through the state's reader, bit for bit."""
    import pyarrow.parquet as pq
    from biasboard.transforms import state
    from biasboard.transforms.ingest import AggregateDayFn
    from biasboard.transforms.read import list_input_days

    rows = [{**r, "battle_id": str(i)} for i, r in enumerate(_plain_rows(30))]
    rows += [{**rows[0], "battle_id": "x", "winner": "bogus"}, {**rows[1], "battle_id": "3"}]  # a bad row, a repeat
    folder = tmp_path / "logs" / "day=2024-05-01"
    folder.mkdir(parents=True)
    pq.write_table(to_table(rows), folder / "part-0.parquet")
    ((day, files),) = list_input_days(str(tmp_path / "logs")).items()
    state_dir = str(tmp_path / "state")
    _, counts, _ = AggregateDayFn(state_dir, FMAP).write_day(
        {"day": day, "files": [f.to_dict() for f in files], "score_files": None}
    )
    assert (counts.read, counts.counted) == (32, 30)
    path = next((tmp_path / "state").rglob(state.PAIR_CELLS_FILE))
    assert pa.types.is_dictionary(pq.read_schema(path).field("judge").type)  # stored as the codes it was summed in
    stored = state._read_table(str(path), PAIR_CELLS_SCHEMA)
    assert frame(stored).equals(frame(partial_cells(to_table(rows), FMAP, SeenIds()).cells))
