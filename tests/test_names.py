"""Name hygiene: surrounding whitespace trimmed, control characters and overlong names rejected, aliases applied.

Unit checks on the validator, then the real backfill and refresh with ``--aliases``:
case variants become one model, the rows renamed are counted in the day manifest
and in summary.json, a changed alias map re-aggregates, and every run conserves
``read = counted + rejected``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.ranking.reference import Reference
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import MAX_NAME_CHARS, AliasMap, name_fault, unmatched_aliases_note
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms.cells import IngestCounts, partial_cells
from biasboard.transforms.ingest import aliases_matched
from biasboard.transforms.state import load_cells, load_dead_letters, read_day_manifest
from biasboard.transforms.validate import validate_battles, validate_scores

T0 = dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)


def table(judges: list, models_a: list, models_b: list) -> pa.Table:
    n = len(judges)
    return pa.table(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
            "judge": judges,
            "model_a": models_a,
            "model_b": models_b,
            "winner": ["model_a"] * n,
        }
    )


def test_names_are_trimmed_and_unusable_names_rejected_with_reasons():
    long_name = "m" * (MAX_NAME_CHARS + 1)
    batch = table(
        [" gpt-4 ", "gpt-4", "gpt-4\t", "gpt\x00-4", "gpt-4", "gpt-4", "   "],
        ["m1", "\tm1", "m1", "m1", long_name, "m" * MAX_NAME_CHARS, "m1"],
        ["m2", "m2", "m\x1b[31m2", "m2", "m2", "m2", "m2"],
    )
    out = validate_battles(batch)
    assert out.read == 7 == out.valid.height + sum(out.rejected.values())
    assert out.rejected == {
        "control_chars:model_b": 1,
        "control_chars:judge": 1,
        "name_too_long:model_a": 1,
        "missing:judge": 1,
    }
    assert out.valid.get_column("judge").to_list() == ["gpt-4", "gpt-4", "gpt-4"]
    assert out.valid.get_column("model_a").to_list() == ["m1", "m1", "m" * MAX_NAME_CHARS]
    assert out.trimmed == 2 and out.renamed == 0  # valid rows 0 and 1 (row 2 is rejected for its model_b)
    dead = {r["source_row"]: r for r in out.dead_letters.to_pylist()}
    assert dead[6]["judge"] == "   " and dead[3]["judge"] == "gpt\x00-4"  # dead letters keep what was written


def test_invisible_characters_at_a_names_ends_are_trimmed_like_whitespace():
    """``"m2\u200b"`` (a zero-width space after the name) was a model of its own beside ``m2``, with no word, where a
    trailing no-break space is trimmed and counted.  Zero-width and byte-order characters at the ends are trimmed
    with the whitespace now; inside a name they stay (a name is not rewritten)."""
    batch = table(
        ["j", "\ufeffj", "j"],
        ["m1", "m1 \u200b", "m\u200b1"],
        ["m2\u200b", "\u200e m2", "m2"],
    )
    out = validate_battles(batch)
    assert out.read == 3 == out.valid.height and out.trimmed == 2
    assert out.valid.get_column("judge").to_list() == ["j", "j", "j"]
    assert out.valid.get_column("model_a").to_list() == ["m1", "m1", "m\u200b1"]
    assert out.valid.get_column("model_b").to_list() == ["m2", "m2", "m2"]
    blank = validate_battles(table(["\u200b"], ["m1"], ["m2"]))
    assert blank.rejected == {"missing:judge": 1}
    # A bidirectional override makes one name display as another ("rlo\u202eevil" shows as "rlolive"): rejected.
    spoof = validate_battles(table(["j", "j"], ["rlo\u202eevil", "m\u20661"], ["m2", "m2"]))
    assert spoof.rejected == {"control_chars:model_a": 2} and name_fault("rlo\u202eevil") == "holds a control character"


def test_a_decomposed_name_is_the_composed_one():
    """``"mode\u0300le"`` (NFD, as a macOS or JavaScript export writes it) and ``"mod\u00e8le"`` (NFC) display alike,
    and were two models of one name on the board (and two judges): names are put in NFC, counted as trimmed, and an
    alias map's keys are too, so a decomposed key still renames the name."""
    nfc, nfd = "mod\u00e8le", "mode\u0300le"
    out = validate_battles(table([nfd, "j\u00fcdge", "ju\u0308dge"], [nfc, nfd, "m1"], ["m1", "m1", nfd]))
    assert out.read == 3 == out.valid.height and out.trimmed == 3
    assert out.valid.get_column("judge").to_list() == [nfc, "j\u00fcdge", "j\u00fcdge"]
    assert set(out.valid.get_column("model_a")) | set(out.valid.get_column("model_b")) == {nfc, "m1"}
    aliases = AliasMap.parse(json.dumps({nfd: "m9"}), "a.json")
    renamed = validate_battles(table(["j", "j"], [nfc, nfd], ["m1", "m1"]), aliases=aliases)
    assert renamed.valid.get_column("model_a").to_list() == ["m9", "m9"] and renamed.renamed == 2
    assert Reference.parse(f"ju\u0308dge, {nfd}", False).judges == ("j\u00fcdge", nfc)  # --reference names them too


def test_dead_letters_keep_the_names_as_written():
    """A rejected row's names were trimmed, composed and renamed by ``--aliases`` in its dead letter as in the valid
    rows, where the dead-letter contract keeps the row's original fields, for the user to find it at its source (a
    search for ``gpt-4`` finds no ``" gpt-4"``).  Valid rows keep the clean names; a score's dead letter does too."""
    nfd = "mode\u0300le"
    batch = table([" alice", "alice", "GPT-4"], [" gpt-4", "gpt-4", nfd], [nfd, "m2", "m3"]).set_column(
        5, "winner", pa.array(["nobody", "model_a", "model_a"])
    )
    out = validate_battles(batch, aliases=AliasMap({"GPT-4": "gpt-4"}, "a.json"))
    assert out.rejected == {"bad_winner": 1}
    assert out.valid.select("judge", "model_a").rows() == [("alice", "gpt-4"), ("gpt-4", "mod\u00e8le")]
    (dead,) = out.dead_letters.to_pylist()
    assert (dead["judge"], dead["model_a"], dead["model_b"]) == (" alice", " gpt-4", nfd)
    scores = pa.table(
        {
            "score_id": ["s1", "s1"],
            "ts": pa.array([T0] * 2, pa.timestamp("us", tz="UTC")),
            "judge": ["j", " j"],
            "model": ["m", nfd],
            "prompt_id": ["p", "p"],
            "score": [3, 4],
        }
    )
    (repeat,) = validate_scores(scores).dead_letters.to_pylist()
    assert (repeat["judge"], repeat["model"], repeat["reason"]) == (" j", nfd, "duplicate_score_id")


def test_the_stored_dead_letters_keep_the_names_as_written(tmp_path: Path):
    """The ingest's dead letters as backfill stores them (the state folder refresh reads too): names as written."""
    rows = table([" gpt-4", "gpt-4"], ["mode\u0300le", "m1"], ["m2", "m2"]).set_column(
        5, "winner", pa.array(["model_c", "model_a"])
    )
    path = tmp_path / "logs" / "day=2024-05-01" / "p.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(rows, path)
    assert cli.main(["backfill", "--input", str(path.parent.parent), "--state", str(tmp_path / "state")]) == 0
    dead = load_dead_letters(str(tmp_path / "state"))
    assert dead is not None
    assert dead.select(["judge", "model_a", "reason"]).to_pylist() == [
        {"judge": " gpt-4", "model_a": "mode\u0300le", "reason": "bad_winner"}
    ]


def test_aliases_rename_case_variants_and_are_counted():
    aliases = AliasMap({"GPT-4": "gpt-4", "Claude-3": "claude-3"}, "a.json")
    batch = table(["GPT-4", " GPT-4 ", "gpt-4", "human"], ["Claude-3", "claude-3", "x", "y"], ["m", "m", "m", "m"])
    out = validate_battles(batch, aliases=aliases)
    assert out.valid.get_column("judge").to_list() == ["gpt-4", "gpt-4", "gpt-4", "human"]
    assert out.valid.get_column("model_a").to_list() == ["claude-3", "claude-3", "x", "y"]
    assert out.renamed == 2 and out.trimmed == 0  # a row both trimmed and renamed counts as renamed
    cells = partial_cells(batch, FamilyMap.with_user_rules(), aliases=aliases)
    assert cells.counts.renamed == 2 and cells.counts.conserved
    scores = pa.table(
        {
            "score_id": ["s1", "s2"],
            "ts": pa.array([T0] * 2, pa.timestamp("us", tz="UTC")),
            "judge": ["GPT-4", "gpt-4 "],
            "model": ["Claude-3", "z"],
            "prompt_id": ["p", "p"],
            "score": [3, 4],
        }
    )
    checked = validate_scores(scores, aliases=aliases)
    assert checked.valid.get_column("judge").to_list() == ["gpt-4", "gpt-4"] and checked.renamed == 1
    assert checked.trimmed == 1


def test_the_alias_entries_that_renamed_a_counted_row_are_kept_with_the_counts():
    """``renamed`` counted rows, not entries: which entries of a map renamed a counted row was known nowhere, so one
    mistyped entry of many went unseen.  An entry whose rows were all rejected (a bad winner) renamed no counted row;
    a decomposed or padded spelling of an entry's name is the entry's."""
    aliases = AliasMap({"GPT-4": "gpt-4", "Claude-3": "claude-3", "Mistrall": "mistral", "Bad": "bad"}, "a.json")
    batch = table([" GPT-4", "human", "Bad"], ["Claude-3", "x", "y"], ["m", "m", "m"])
    batch = batch.set_column(5, "winner", pa.array(["model_a", "model_b", "nobody"]))
    out = validate_battles(batch, aliases=aliases)
    assert out.aliased == {"GPT-4", "Claude-3"} and out.renamed == 1
    days = [partial_cells(batch, FamilyMap.with_user_rules(), aliases=aliases).counts, IngestCounts()]
    assert sum(days, IngestCounts()).aliased == {"GPT-4", "Claude-3"}
    assert "aliased" not in days[0].to_dict()  # the summary's counts stay as they were
    assert unmatched_aliases_note(aliases, out.aliased) == (
        "aliases: 2 of the 4 entries of a.json renamed no counted row: 'Bad', 'Mistrall'; the names they map from "
        "are not in the input as written there"
    )
    assert unmatched_aliases_note(aliases, set(aliases.aliases)) is None
    many = AliasMap({f"m{i}": "x" for i in range(8)}, "b.json")
    assert unmatched_aliases_note(many, ()) == (
        "aliases: none of the 8 entries of b.json renamed a counted row (renamed: 0 in summary.json): 'm0', 'm1', "
        "'m2', 'm3', 'm4' and 3 more; the names they map from are not in the input as written there"
    )


def test_days_stored_before_their_manifests_listed_the_aliases_used_leave_the_match_unknown():
    """A day kept from an earlier run is not read again: the entries it matched come from its manifest, and one
    stored before manifests listed them, with renamed rows, leaves them unknown (no note, rather than a wrong one)."""
    listed = {"counts": {"renamed": 3}, "aliased": ["GPT-4"]}
    unrenamed = {"counts": {"renamed": 0}, "score_counts": {"renamed": 0}}
    assert aliases_matched([listed, unrenamed, {}]) == {"GPT-4"}
    assert aliases_matched([listed, {"counts": {"renamed": 0}, "score_counts": {"renamed": 2}}]) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "JSON object"),
        ("{nope", "not JSON"),
        ('{"a": 3}', "non-empty name"),
        ('{"a": "  "}', "non-empty name"),
        ('{"a": "b\\u0000c"}', "control character"),
        # renamed once, not along a chain: a chain split a's rows from b's, a cycle swapped two judges
        ('{"a": "b", "b": "c"}', "'a' is renamed to 'b', which is itself renamed to 'c'"),
        ('{"a": "b", "b": "a"}', "'a' is renamed to 'b', which is itself renamed to 'a'"),
    ],
)
def test_bad_alias_maps_name_the_file(text: str, message: str):
    with pytest.raises(InputError, match=rf"aliases\.json: .*{message}"):
        AliasMap.parse(text, "aliases.json")


def test_name_fault_matches_the_column_rule():
    assert name_fault("gpt-4") is None and name_fault("模型") is None
    assert name_fault("a\x85b") and name_fault("a\x7fb") and name_fault("x" * (MAX_NAME_CHARS + 1))


def _logs(folder: Path) -> Path:
    rows = table(
        ["GPT-4", "gpt-4", " gpt-4", "judge\x07"], ["Claude-3", "claude-3", "m1", "m1"], ["m1", "m1", "m2", "m2"]
    )
    path = folder / "logs" / "day=2024-05-01" / "p.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(rows, path)
    return path.parent.parent


def test_backfill_with_aliases_merges_case_variants(tmp_path: Path, capsys):
    logs = _logs(tmp_path)
    (tmp_path / "aliases.json").write_text(json.dumps({"GPT-4": "gpt-4", "Claude-3": "claude-3"}))
    argv = ["backfill", "--input", str(logs), "--state", str(tmp_path / "state")]
    assert cli.main([*argv, "--aliases", str(tmp_path / "aliases.json")]) == 0
    assert "renamed by --aliases in 1" in capsys.readouterr().out
    counts = read_day_manifest(str(tmp_path / "state"), "2024-05-01")["counts"]
    assert counts["renamed"] == 1 and counts["trimmed"] == 1 and counts["rejected"] == {"control_chars:judge": 1}
    assert counts["read"] == 4 == counts["counted"] + counts["rejected_total"]
    cells = load_cells(str(tmp_path / "state"))
    assert set(cells.column("judge").to_pylist()) == {"gpt-4"}
    assert set(cells.column("model_a").to_pylist()) == {"claude-3", "m1"}

    # A mistyped entry beside ones that matched is named, as a refresh names it (it was said nowhere).
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"GPT-4": "gpt-4", "Claude-3": "claude-3", "Clade-3": "claude-3"}))
    assert cli.main([*argv, "--aliases", str(typo)]) == 0
    assert (
        f"aliases: 1 of the 3 entries of {typo} renamed no counted row: 'Clade-3'; the names they map from are not "
        "in the input as written there"
    ) in capsys.readouterr().out.splitlines()

    (tmp_path / "bad.json").write_text("[]")
    code = cli.main([*argv, "--aliases", str(tmp_path / "bad.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "bad.json" in err and "Traceback" not in err


def test_refresh_reports_renamed_rows_and_reaggregates_when_the_map_changes(tmp_path: Path):
    sim = write_simulation(SimulationConfig(battles=3000, models=5, judges=2, days=2, seed=3), tmp_path / "sim")
    glob = str(sim / "battles" / "day=*" / "*.parquet")
    first = sorted(json.loads((sim / "truth.json").read_text())["models"], key=lambda m: m["model"])[0]["model"]
    aliases = tmp_path / "aliases.json"
    aliases.write_text(json.dumps({first: first.upper()}))
    options = RefreshOptions(aliases=str(aliases), audit=False)
    outcome = refresh(glob, str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    snap = Path(outcome.published.path)
    summary = json.loads((snap / "summary.json").read_text())
    assert summary["counts"]["renamed"] > 0
    assert summary["counts"]["read"] == summary["counts"]["counted"] + summary["counts"]["rejected_total"]
    board = {row["model"] for row in json.loads((snap / "leaderboard.json").read_text())}
    assert first.upper() in board and first not in board

    aliases.write_text(json.dumps({}))  # the map changed: every day is aggregated again, the old name is back
    again = refresh(glob, str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert sorted(again.aggregated_days) == sorted(outcome.aggregated_days)
    board = {row["model"] for row in json.loads((Path(again.published.path) / "leaderboard.json").read_text())}
    assert first in board and first.upper() not in board


def test_audit_applies_the_aliases_like_the_ingest(tmp_path: Path):
    import polars as pl

    sim = write_simulation(SimulationConfig(battles=2000, models=4, judges=2, days=1, seed=5), tmp_path / "sim")
    judges = sorted(pl.read_parquet(sim / "battles" / "day=*" / "*.parquet")["judge"].unique().to_list())
    (tmp_path / "aliases.json").write_text(json.dumps({judges[0]: "THE-JUDGE"}))
    argv = ["audit", "--input", str(sim / "battles"), "--out", str(tmp_path / "audit")]
    assert cli.main([*argv, "--aliases", str(tmp_path / "aliases.json")]) == 0
    audited = set(pl.read_parquet(tmp_path / "audit" / "audit_judges.parquet")["judge"].to_list())
    assert audited == {"THE-JUDGE", judges[1]}


def test_the_audit_counts_names_as_the_ingest_does(tmp_path: Path):
    """audit.json's counts are the day manifest's: trimmed and renamed names too (the audit built its own counts
    and left them out, so the two files disagreed on the same rows)."""
    logs = _logs(tmp_path)
    (tmp_path / "aliases.json").write_text(json.dumps({"GPT-4": "gpt-4", "Claude-3": "claude-3"}))
    aliases = ["--aliases", str(tmp_path / "aliases.json")]
    assert cli.main(["backfill", "--input", str(logs), "--state", str(tmp_path / "state"), *aliases]) == 0
    assert cli.main(["audit", "--input", str(logs), "--out", str(tmp_path / "audit"), *aliases]) == 0
    ingest = read_day_manifest(str(tmp_path / "state"), "2024-05-01")["counts"]
    audited = json.loads((tmp_path / "audit" / "audit.json").read_text())["counts"]
    assert audited["trimmed"] == ingest["trimmed"] == 1 and audited["renamed"] == ingest["renamed"] == 1
    assert {k: audited[k] for k in ingest} == ingest


def test_names_a_user_types_are_read_as_the_datas_names():
    """Every place a user names a judge or model, or a pattern matched against names, reads it as the data's names
    are read (trimmed, composed): typed decomposed (``"e\u0301"``, a macOS paste) or with a zero-width space, each
    matched nothing (a family rule no model, a pool separator no judge, an alias key no name)."""
    from biasboard.ranking.data import pool_judge_names
    from biasboard.transforms.judge_pool import JudgePool

    rules = [{"prefix": "cafe\u0301", "family": "bistro"}, {"regex": "^the\u0301", "family": "tea"}]
    families = FamilyMap.with_user_rules(json.dumps({"rules": rules}))
    assert [families.family_of(name) for name in ("caf\u00e9-7b", "th\u00e9-2")] == ["bistro", "tea"]
    pool = JudgePool.parse("prefix:e\u0301")  # a separator, kept untrimmed: only composed
    assert pool_judge_names(["arena\u00e9voter-1", "solo"], pool.fit_rule or "") == ("arena", "solo")
    assert JudgePool.parse("prefix: ").arg == " "
    aliases = AliasMap.parse(json.dumps({"m1\u200b": "cafe\u0301"}), "a.json")
    assert aliases.aliases == {"m1": "caf\u00e9"}
    assert validate_battles(table(["j"], ["m1"], ["m2"]), aliases=aliases).renamed == 1
    from biasboard.schemas.names import canonical_name

    assert canonical_name(" cafe\u0301\u200b ") == "caf\u00e9" == canonical_name("caf\u00e9")


def test_import_reads_the_judge_it_is_given_and_the_files_judges_as_the_ingest_does(tmp_path: Path, capsys):
    """``import --judge`` over a file naming one judge, spelt composed on some lines and decomposed on others, was
    refused as "names 2 judges" (the ingest reads them as one), and a ``--judge`` naming that judge decomposed or
    with a trailing space "replaced" it, with a note, by what the ingest reads as the same name."""
    import polars as pl
    from biasboard.importers.common import one_judge_or_refuse

    frame = pl.DataFrame({"judge": ["juge-\u00e9", "juge-e\u0301", " juge-\u00e9"]})
    assert one_judge_or_refuse(frame, "judge", "juge-\u00e9", [tmp_path / "x.jsonl"]) is None
    lines = [
        {"question_id": i, "model_1": "m1", "model_2": "m2", "g1_winner": "model_1", "g2_winner": "model_2",
         "judge": ["juge-\u00e9" if i % 2 else "juge-e\u0301", "pair-v2"], "turn": 1, "tstamp": 1714564800.0}
        for i in range(4)
    ]  # fmt: skip
    source = tmp_path / "model_judgment" / "gpt-4_pair.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "imp"
    argv = ["import", "--format", "mtbench-pair", "--in", str(source), "--out", str(out), "--judge", "juge-e\u0301 "]
    assert cli.main(argv) == 0, capsys.readouterr().err
    manifest = json.loads((out / "import_manifest.json").read_text())
    assert manifest["rows_converted"] == 8 and not [n for n in manifest["notes"] if "replaced the judge" in n]


def test_a_board_whose_stored_days_spell_a_name_apart_says_which_to_backfill():
    """Days stored before names were put in NFC keep the decomposed spelling (a stored day is aggregated again
    only when its inputs or settings change), so the board had two rows of one model, without a word."""
    import numpy as np
    import pyarrow.compute as pc
    from biasboard.ranking import ModelConfig, fit_bias_aware
    from biasboard.schemas.names import spelling_twins

    from tests.test_ranking_model import _cells

    cells = _cells(np.random.default_rng(5))
    old_days = pa.array(np.arange(cells.num_rows) % 2 == 0)
    for column in ("model_a", "model_b"):  # m1 is "modèle", spelled "mode\u0300le" by the days stored before NFC
        i = cells.schema.get_field_index(column)
        is_m1 = pc.equal(cells[column], "m1")
        renamed = pc.if_else(is_m1, pc.if_else(old_days, "mode\u0300le", "mod\u00e8le"), cells[column])
        cells = cells.set_column(i, column, renamed)
    fit = fit_bias_aware(cells, config=ModelConfig(profile=False))
    assert "mode\u0300le" in fit.models and "mod\u00e8le" in fit.models
    warned = [w for w in fit.diagnostics["warnings"] if "Unicode NFC" in w]
    assert len(warned) == 1 and "models 'mode\u0300le' and 'mod\u00e8le'" in warned[0] and "backfill" in warned[0]
    assert spelling_twins(["a", " a", "b"]) == [[" a", "a"]] and spelling_twins(["a", "b"]) == []


def _bench_ingest():
    """``bench/ingest.py`` as a module (it imports ``benchlib`` from its own folder, as when run as a script)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("bench_ingest", folder / "ingest.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


def test_the_ingest_bench_can_give_its_bad_rows_names_as_written():
    """``bench/ingest.py --bad-rows`` wrote clean ASCII names only, so the dead letters' copy of the names as written
    (``__as_written:<col>``) was never timed.  ``--dirty-names F`` gives every name an accented suffix and a share F
    of the rows (bad ones too) one name untrimmed or decomposed: the ingest reads them as the same names, counts them
    trimmed, and its dead letters keep them as written; F = 0 leaves the simulator's files as they are."""
    bench = _bench_ingest()
    folder = Path(pytest.importorskip("tempfile").mkdtemp())
    bench.generate(folder / "dirty", 4000, 4000, 0.05, seed=7, dirty=0.2)
    bench.generate(folder / "plain", 4000, 4000, 0.05, seed=7)
    (dirty,) = (folder / "dirty" / "battles").rglob("*.parquet")
    (plain,) = (folder / "plain" / "battles").rglob("*.parquet")
    written, original = pq.read_table(dirty), pq.read_table(plain)
    assert written.schema.equals(original.schema) and written.num_rows == original.num_rows
    out = validate_battles(written)
    clean = validate_battles(original)
    assert out.counted == clean.counted and out.rejected == clean.rejected
    suffixed = {n + "-\u00e9" for n in clean.valid.get_column("model_a").unique().to_list()}
    assert set(out.valid.get_column("model_a").unique().to_list()) == suffixed  # one name per model, in NFC
    assert 0.15 < out.trimmed / out.counted < 0.25
    dead = pl.from_arrow(out.dead_letters)
    names = pl.concat([dead.get_column(c) for c in ("judge", "model_a", "model_b")]).drop_nulls()
    assert names.str.ends_with(" ").any() and names.str.ends_with("e\u0301").any()  # as written
    assert bench.generate.__defaults__ == (0.0,)  # the default table's data: the simulator's own
