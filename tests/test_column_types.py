"""Every type a Parquet column can hold is cast or dead-lettered by rule; no traceback for bad input.

Each case writes a real Parquet file whose column has a hostile type (a ``ts``
that cannot hold a time, binary with invalid UTF-8, lists, structs, maps,
durations) and runs the real backfill through the CLI: exit code 0, every row
counted or dead-lettered with the reason the rules name, ``read = counted +
rejected``.  Input columns named like the dead-letter fields never reach them.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines import cli
from biasboard.schemas.coerce import utf8_valid
from biasboard.transforms.state import load_dead_letters, read_day_manifest

DAY = "2024-05-01"
T0 = dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)
N = 4


def battle_columns(**overrides) -> dict:
    cols = {
        "battle_id": [f"b{i}" for i in range(N)],
        "ts": pa.array([T0] * N, pa.timestamp("us", tz="UTC")),
        "judge": ["gpt-4"] * N,
        "model_a": ["m1"] * N,
        "model_b": ["m2"] * N,
        "winner": ["model_a", "model_b", "tie", "tie"],
    }
    cols.update(overrides)
    return cols


def score_columns(**overrides) -> dict:
    cols = {
        "score_id": [f"s{i}" for i in range(N)],
        "ts": pa.array([T0] * N, pa.timestamp("us", tz="UTC")),
        "judge": ["gpt-4"] * N,
        "model": ["m1"] * N,
        "prompt_id": ["p1"] * N,
        "score": [1, 2, 3, 4],
    }
    cols.update(overrides)
    return cols


BAD_UTF8 = pa.array([b"ok", b"\xff\xfe", None, b"fine \xc3\xa9"], pa.binary())
HOSTILE = {
    # a ts that cannot hold a time
    "ts_null": ("ts", pa.nulls(N), {"missing:ts": 4}),
    "ts_bool": ("ts", pa.array([True, False, None, True]), {"bad_timestamp": 3, "missing:ts": 1}),
    "ts_time": (
        "ts",
        pa.array([dt.time(1), None, dt.time(2), dt.time(3)], pa.time64("us")),
        {"bad_timestamp": 3, "missing:ts": 1},
    ),
    # epoch milliseconds written with a unit of seconds (year 56000), a sentinel before year 1: no Python datetime
    # holds them, and the day check's bounds failed the run (OverflowError) instead of the rows being dead-lettered
    "ts_beyond_python_years": (
        "ts",
        pa.array([int(T0.timestamp()) * 1000, -(10**11), None, int(T0.timestamp())], pa.timestamp("s", tz="UTC")),
        {"bad_timestamp": 2, "missing:ts": 1},
    ),
    "ts_date_beyond_python_years": (
        "ts",
        pa.array([3_000_000, -800_000, None, (T0.date() - dt.date(1970, 1, 1)).days], pa.date32()),
        {"bad_timestamp": 2, "missing:ts": 1},
    ),
    "ts_duration": ("ts", pa.array([1, 2, None, 4], pa.duration("s")), {"bad_type:ts": 3, "missing:ts": 1}),
    "ts_list": ("ts", pa.array([[1], [], None, [2, 3]], pa.list_(pa.int64())), {"bad_type:ts": 3, "missing:ts": 1}),
    "ts_binary": (
        "ts",
        pa.array([b"2024-05-01T12:00:00Z", b"\xff", None, b"2024-05-01"], pa.binary()),
        {"bad_utf8:ts": 1, "missing:ts": 1},
    ),
    # names, ids and optional fields of types no field can have
    "judge_bad_utf8": ("judge", BAD_UTF8, {"bad_utf8:judge": 1, "missing:judge": 1}),
    "model_struct": (
        "model_a",
        pa.array([{"x": 1}, None, {"x": 2}, {"x": None}]),
        {"bad_type:model_a": 3, "missing:model_a": 1},
    ),
    "prompt_map": (
        "prompt_id",
        pa.array([[("a", 1)], None, [], None], pa.map_(pa.string(), pa.int64())),
        {"bad_type:prompt_id": 2},
    ),
    "family_fixed_list": (
        "family_a",
        pa.array([["a", "b"], None, None, None], pa.list_(pa.string(), 2)),
        {"bad_type:family_a": 1},
    ),
    "id_large_binary": (
        "battle_id",
        pa.array([b"a", b"b\xff", b"c", b"d"], pa.large_binary()),
        {"bad_utf8:battle_id": 1},
    ),
    "winner_binary": (
        "winner",
        pa.array([b"tie", b"model_a", b"\xc3", None]),
        {"bad_utf8:winner": 1, "missing:winner": 1},
    ),
    "len_list": ("len_a", pa.array([[1], None, [2], None], pa.list_(pa.int64())), {"bad_type:len_a": 2}),
    # a decimal wider than 38 digits (a tool that widens decimals): polars refused the whole file in one line; its
    # values are lengths like a decimal128's, one too large for any answer dead-lettered as such
    "len_decimal256": (
        "len_a",
        pa.array([decimal.Decimal(120), decimal.Decimal("1e45"), None, decimal.Decimal("7.00")], pa.decimal256(50, 2)),
        {"absurd_length": 1},
    ),
}


def run_backfill_cli(tmp_path: Path, battles: pa.Table, scores: pa.Table | None = None) -> tuple[int, str, str]:
    path = tmp_path / "logs" / f"day={DAY}" / "part-0.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(battles, path)
    argv = ["backfill", "--input", str(tmp_path / "logs"), "--state", str(tmp_path / "state")]
    if scores is not None:
        score_path = tmp_path / "scores" / f"day={DAY}" / "part-0.parquet"
        score_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(scores, score_path)
        argv += ["--scores", str(tmp_path / "scores")]
    return cli.main(argv), str(tmp_path / "state"), str(path)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_battle_column_types_are_dead_lettered_by_rule(case: str, tmp_path: Path, capsys):
    column, values, expected = HOSTILE[case]
    code, state, _ = run_backfill_cli(tmp_path, pa.table(battle_columns(**{column: values})))
    assert code == 0, capsys.readouterr().err
    counts = read_day_manifest(state, DAY)["counts"]
    assert counts["rejected"] == expected
    assert counts["read"] == N == counts["counted"] + counts["rejected_total"]
    dead = load_dead_letters(state)
    assert dead is not None and dead.num_rows == sum(expected.values())
    assert all(pa.types.is_string(f.type) or f.name == "source_row" for f in dead.schema)


def test_dead_letters_show_invalid_bytes_as_hex_and_nested_values_as_json(tmp_path: Path):
    table = pa.table(battle_columns(judge=BAD_UTF8, prompt_id=pa.array([None, None, None, [1, 2]])))
    code, state, _ = run_backfill_cli(tmp_path, table)
    assert code == 0
    dead = sorted(load_dead_letters(state).to_pylist(), key=lambda r: r["source_row"])
    assert [(r["source_row"], r["reason"]) for r in dead] == [
        (1, "bad_utf8:judge"),
        (2, "missing:judge"),
        (3, "bad_type:prompt_id"),
    ]
    assert dead[0]["judge"] == "hex:fffe" and dead[2]["prompt_id"] == "[1,2]"


def test_hostile_score_column_types(tmp_path: Path):
    scores = pa.table(score_columns(ts=pa.array([1, None, 3, 4], pa.duration("ms")), judge=BAD_UTF8))
    code, state, _ = run_backfill_cli(tmp_path, pa.table(battle_columns()), scores)
    assert code == 0
    counts = read_day_manifest(state, DAY)["score_counts"]
    # missing:<col> outranks every type reason; the type reasons follow in column order (ts before judge)
    assert counts["rejected"] == {"bad_type:ts": 2, "missing:ts": 1, "missing:judge": 1}
    assert counts["read"] == N == counts["counted"] + counts["rejected_total"]


def test_input_columns_named_like_dead_letter_fields_are_ignored(tmp_path: Path):
    """``source_file``, ``reason``, ``source_row`` in the input are extras: the dead letters carry ours."""
    table = pa.table(
        battle_columns(
            winner=["model_a", "nope", "tie", "tie"],
            source_file=["forged"] * N,
            reason=["forged"] * N,
            source_row=[99] * N,
        )
    )
    code, state, path = run_backfill_cli(tmp_path, table)
    assert code == 0
    (dead,) = load_dead_letters(state).to_pylist()
    assert (dead["reason"], dead["source_file"], dead["source_row"]) == ("bad_winner", path, 1)


def test_undated_file_whose_ts_cannot_hold_a_time_is_one_line_error(tmp_path: Path, capsys):
    path = tmp_path / "logs" / "undated.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table(battle_columns(ts=pa.array([[1], [2], None, [3]]))), path)
    code = cli.main(["backfill", "--input", str(tmp_path / "logs"), "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "undated.parquet" in err and "Traceback" not in err


def test_utf8_check_finds_each_bad_value_in_a_large_column():
    values = [b"x" * (i % 7) for i in range(5000)]
    for i in (0, 63, 64, 1999, 4999):
        values[i] = b"\xff" + values[i]
    valid = utf8_valid(pa.array(values, pa.large_binary()))
    assert sorted(int(i) for i in (~valid).nonzero()[0]) == [0, 63, 64, 1999, 4999]


def test_carried_schema_column_of_an_unreadable_type_is_coerced_once():
    """The audit carries prompt_id, which the battle schema also names: a duration prompt_id is made text and
    flagged once (it raised a polars duplicate-column error, found by tests/test_fuzz.py)."""
    import polars as pl
    from biasboard.transforms.validate import normalise_columns

    battles = pa.table(
        {
            "battle_id": ["b1", "b2"],
            "ts": ["2024-01-01T00:00:00Z"] * 2,
            "judge": ["j", "j"],
            "model_a": ["m1", "m2"],
            "model_b": ["m2", "m1"],
            "winner": ["model_a", "tie"],
            "prompt_id": pa.array([5, None], pa.duration("s")),
        }
    )
    df = normalise_columns(battles, carry=("prompt_id", "gold"))
    assert df["prompt_id"].to_list() == ["5000 ms", None]  # polars reads duration[s] as ms
    flags = [c for c in df.columns if c.endswith("prompt_id") and c != "prompt_id"]
    assert len(flags) == 1 and df[flags[0]].to_list() == [True, False]
    assert df.schema["prompt_id"] == pl.String


def test_times_in_a_zone_polars_does_not_take_are_read_as_their_instants(tmp_path: Path, capsys):
    """pandas writes times parsed with an offset in the zone ``+05:30``; polars' reader panicked on such a file's
    schema (a Rust panic through the runner), whichever column held them.  Read through pyarrow, each row keeps its
    instant: 03:00 at +05:30 on May 2 is 21:30 UTC on May 1, so an undated file files it under May 1."""
    zone = dt.timezone(dt.timedelta(hours=5, minutes=30))
    late = dt.datetime(2024, 5, 2, 3, 0, tzinfo=zone)
    zoned = pa.array([T0, T0, late, late], pa.timestamp("ns", tz="+05:30"))
    code, state, _ = run_backfill_cli(tmp_path, pa.table(battle_columns(ts=zoned, exported_at=zoned)))
    assert code == 0, capsys.readouterr().err
    counts = read_day_manifest(state, DAY)["counts"]
    assert counts["read"] == N == counts["counted"] and "off_day" not in counts
    undated = tmp_path / "undated" / "export.parquet"
    undated.parent.mkdir()
    pq.write_table(pa.table(battle_columns(ts=zoned)), undated)
    assert cli.main(["backfill", "--input", str(undated.parent), "--state", str(tmp_path / "s2")]) == 0
    assert read_day_manifest(str(tmp_path / "s2"), DAY)["counts"]["counted"] == N


@pytest.mark.parametrize(
    "extra",
    [
        pa.array([{"at": T0, "n": 1}] * N, pa.struct([("at", pa.timestamp("us", "+05:30")), ("n", pa.int64())])),
        pa.array([[T0], [], None, [T0, T0]], pa.list_(pa.timestamp("ms", "+05:30"))),
        pa.array([[("k", T0)]] * N, pa.map_(pa.string(), pa.timestamp("us", "-03:30"))),
    ],
    ids=["struct", "list", "map"],
)
def test_times_in_a_foreign_zone_inside_a_nested_extra_column_do_not_stop_the_read(extra, tmp_path: Path, capsys):
    """A ``+05:30`` time inside a struct, list or map column the ingest never reads made polars' reader panic on the
    file's schema all the same (the top-level check did not look inside): every row is read and counted."""
    code, state, _ = run_backfill_cli(tmp_path, pa.table(battle_columns(exported=extra)))
    assert code == 0, capsys.readouterr().err
    counts = read_day_manifest(state, DAY)["counts"]
    assert counts["read"] == N == counts["counted"]


def test_a_carried_nested_column_with_foreign_zone_times_keeps_its_instants():
    """The pyarrow route casts nested times to UTC rather than dropping them: the same instants reach polars."""
    import polars as pl
    from biasboard.transforms.read import in_polars_types

    zone = dt.timezone(dt.timedelta(hours=5, minutes=30))
    local = dt.datetime(2024, 5, 2, 3, 0, tzinfo=zone)
    table = pa.table({"meta": pa.array([{"at": local}], pa.struct([("at", pa.timestamp("us", "+05:30"))]))})
    frame = pl.from_arrow(in_polars_types(table))
    assert isinstance(frame, pl.DataFrame)
    assert frame["meta"].struct.field("at").to_list() == [dt.datetime(2024, 5, 1, 21, 30, tzinfo=dt.timezone.utc)]


def test_an_extra_map_column_with_sorted_keys_leaves_the_file_on_polars_reader(tmp_path: Path):
    """Only a file holding a type polars cannot take goes the slower pyarrow route (no dictionary codes for the
    battle keys).  A map column marked ``keys_sorted`` (pyarrow writes the flag) holds nothing polars refuses, yet
    its type rebuilt without the flag compared unequal: the file was read as foreign, its keys as plain text."""
    import polars as pl
    from biasboard.transforms.read import iter_batches
    from polars.testing import assert_frame_equal

    battles = pa.table(battle_columns())
    sorted_map = pa.array([[("k", 1)]] * N, pa.map_(pa.string(), pa.int64(), keys_sorted=True))
    pq.write_table(battles, tmp_path / "plain.parquet")
    pq.write_table(battles.append_column("meta", sorted_map), tmp_path / "with_map.parquet")
    plain = [frame for _, frame in iter_batches(str(tmp_path / "plain.parquet"), dictionary=True)]
    with_map = [frame for _, frame in iter_batches(str(tmp_path / "with_map.parquet"), dictionary=True)]
    assert plain[0].schema["judge"] == pl.Categorical
    assert len(plain) == len(with_map) == 1
    assert_frame_equal(plain[0], with_map[0])


#: Extra columns (never read by the ingest) that send a file down the pyarrow route: a type polars refuses, at the
#: top or nested.
FOREIGN_EXTRAS = {
    "decimal256": pa.array([decimal.Decimal(i) for i in range(3 * N)], pa.decimal256(50, 2)),
    "zone": pa.array([T0] * (3 * N), pa.timestamp("us", "+05:30")),
    "nested_zone": pa.array([{"at": T0}] * (3 * N), pa.struct([("at", pa.timestamp("ms", "+05:30"))])),
}


@pytest.mark.parametrize("extra", sorted(FOREIGN_EXTRAS))
def test_a_file_read_through_pyarrow_keeps_the_battle_keys_as_dictionary_codes(extra: str, tmp_path: Path):
    """A file holding a type polars refuses is read through pyarrow, which ignored ``dictionary``: its judge, model
    and winner columns came as plain text, not Categorical as from polars' reader, so the cells took their slower
    path.  Both routes yield the same frames, batch by batch, and a backfill stores the same cells."""
    import polars as pl
    from biasboard.transforms.read import iter_batches
    from biasboard.transforms.state import load_cells
    from polars.testing import assert_frame_equal

    rows = 3 * N
    battles = pa.table(
        battle_columns(
            battle_id=[f"b{i}" for i in range(rows)],
            ts=pa.array([T0] * rows, pa.timestamp("us", tz="UTC")),
            judge=[f"judge-{i % 2}" for i in range(rows)],
            model_a=[f"m{i % 3}" for i in range(rows)],
            model_b=["m9" if i % 4 else None for i in range(rows)],
            winner=[("model_a", "model_b", "tie")[i % 3] for i in range(rows)],
        )
    )
    paths = {"polars": tmp_path / "polars" / f"day={DAY}" / "part-0.parquet"}
    paths["pyarrow"] = tmp_path / "pyarrow" / f"day={DAY}" / "part-0.parquet"
    for route, table in (("polars", battles), ("pyarrow", battles.append_column(extra, FOREIGN_EXTRAS[extra]))):
        paths[route].parent.mkdir(parents=True)
        pq.write_table(table, paths[route])
    for dictionary in (True, False):
        read = {
            route: [frame for _, frame in iter_batches(str(path), batch_rows=5, dictionary=dictionary)]
            for route, path in paths.items()
        }
        assert [f.height for f in read["pyarrow"]] == [f.height for f in read["polars"]] == [5, 5, 2]
        assert (read["polars"][0].schema["judge"] == pl.Categorical) is dictionary
        for polars_frame, pyarrow_frame in zip(read["polars"], read["pyarrow"], strict=True):
            assert_frame_equal(polars_frame, pyarrow_frame, categorical_as_str=True)
            assert polars_frame.schema == pyarrow_frame.schema
    cells = {}
    for route, path in paths.items():
        state = str(tmp_path / f"state-{route}")
        assert cli.main(["backfill", "--input", str(path.parent.parent), "--state", state]) == 0
        cells[route] = pl.from_arrow(load_cells(state))
        assert isinstance(cells[route], pl.DataFrame)
    assert cells["polars"]["n"].sum() == rows - rows // 4  # a row without model_b is dead-lettered
    assert_frame_equal(cells["polars"].sort(pl.all()), cells["pyarrow"].sort(pl.all()))
