"""Several ``biasboard import`` folders as one input: a glob of them is read as if each were given.

A QA pass ran ``refresh --input 'imp/*/battles'`` over imports side by side and got ``no input files match`` (the
glob's matches are folders, and only files were read), while ``--input imp/one/battles`` worked but reported none
of the rows its import had rejected.  ``--input imp/a --input imp/b`` read imp/b alone, without a word.  The
imports are made here from small generated Position-Bias-Analyzer and FastChat files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from biasboard.importers.output import DEAD_LETTERS
from biasboard.pipelines import cli
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.schemas.errors import InputError
from biasboard.transforms import import_folders
from biasboard.transforms.read import import_rejections, match_files, resolve_input

MODELS = ("m1", "m2", "m3", "m4")


def pba_import(out: Path, judge: str, benchmark: str = "MTBench", unjudged: int = 0, unit: str = "chars") -> Path:
    """``biasboard import --format pba`` of a judge's round robin over MODELS on two questions, both orders, with
    ``unjudged`` more rows without a verdict (the import's dead letters)."""
    pairs = [(i, a, b) for i, a in enumerate(MODELS) for b in MODELS[i + 1 :]]
    common = {"benchmark": benchmark, "category": "writing", "turn": 1, "judge": judge}
    rows = [
        {**common, "question_id": q, "model_a": a, "model_b": b, "position_a": position,
         "winner": "model_a" if q == 81 else "tie", f"len_{unit}_a": 40 + i, f"len_{unit}_b": 30}
        for q in (81, 82) for i, a, b in pairs for position in ("first", "second")
    ]  # fmt: skip
    rows += [{**rows[0], "question_id": 90 + k, "winner": None} for k in range(unjudged)]
    source = out.parent.parent / "sources" / f"{out.parent.name}-{out.name}.judgments.jsonl"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["import", "--format", "pba", "--in", str(source), "--out", str(out), "--length-unit", unit]
    assert cli.main(args) == 0
    return out


#: Battles per pba_import: 6 pairs × 2 orders × 2 questions.
BATTLES = 24


def test_a_glob_of_import_folders_reads_each_as_if_given(tmp_path):
    """``'imp/*/battles'`` and ``'imp/*'`` read both imports' battles (never their dead letters) and report what
    each import rejected; a refresh counts every battle (48) and names both imports' rejections (2 and 0).  Before:
    ``imp/*/battles: no input files match``."""
    imp = tmp_path / "imp"
    pba_import(imp / "judge-a", "judge-a", unjudged=2)
    pba_import(imp / "judge-b", "judge-b")
    parts = [f"{imp}/judge-{j}/battles/day=2000-01-01/part-00000.parquet" for j in "ab"]
    for glob in (f"{imp}/*/battles", f"{imp}/*", f"{imp}/*/battles/", f"{imp}/judge-?"):
        assert [f.path for f in match_files(glob)] == parts, glob
        rejected = import_rejections([("--input", glob)])
        assert [(r.path, r.rejected) for r in rejected] == [
            (f"{imp}/judge-a/{DEAD_LETTERS}", {"no_verdict": 2}),
            (f"{imp}/judge-b/{DEAD_LETTERS}", {}),
        ], glob
    outcome = refresh(
        f"{imp}/*/battles", str(tmp_path / "state"), str(tmp_path / "site"), [], RefreshOptions(audit=False)
    )
    assert outcome.summary is not None
    assert outcome.summary.counts.read == 2 * BATTLES == outcome.summary.counts.counted
    assert [r.rejected_total for r in outcome.summary.import_rejected] == [2, 0]


def test_an_import_folder_linked_in_beside_others_is_read(tmp_path):
    """Folders in different places are linked under one (``ln -s``): Beam's listing below ``imp/`` does not follow
    the link, so the linked import's battles were left out without a word."""
    pba_import(tmp_path / "elsewhere" / "judge-a", "judge-a", unjudged=1)
    pba_import(tmp_path / "imp" / "judge-b", "judge-b")
    (tmp_path / "imp" / "judge-a").symlink_to(tmp_path / "elsewhere" / "judge-a", target_is_directory=True)
    imp = tmp_path / "imp"
    assert [Path(f.path).parent.parent.parent.name for f in match_files(f"{imp}/*/battles")] == ["judge-a", "judge-b"]
    assert [r.rejected_total for r in import_rejections([("--input", f"{imp}/*")])] == [1, 0]


def test_a_glob_of_import_folders_skips_the_hidden_ones_it_matches(tmp_path):
    """``data/*/battles.parquet`` skips ``data/_2024/`` (a writer's leftovers, as Spark does), but ``imp/*/battles``
    read ``imp/_old/battles``: each matched folder was listed by its own path, which spells the ``_``.  A folder
    glob skips the hidden folders its wildcard matches, reads those it spells, and one that matches only hidden
    folders is refused as a glob of files is."""
    imp = tmp_path / "imp"
    pba_import(imp / "judge-a", "judge-a")
    pba_import(imp / "_old", "judge-old", unjudged=1)
    pba_import(imp / ".staging", "judge-staging")
    part = "battles/day=2000-01-01/part-00000.parquet"
    for glob in (f"{imp}/*/battles", f"{imp}/*", f"{imp}/*/battles/"):
        assert [f.path for f in match_files(glob)] == [f"{imp}/judge-a/{part}"], glob
        assert [r.path for r in import_rejections([("--input", glob)])] == [f"{imp}/judge-a/{DEAD_LETTERS}"], glob
    assert [f.path for f in match_files(f"{imp}/_*/battles")] == [f"{imp}/_old/{part}"]
    assert [r.rejected_total for r in import_rejections([("--input", f"{imp}/_*")])] == [1]
    (imp / "judge-a" / "battles" / "day=2000-01-01" / "part-00000.parquet").unlink()
    for glob in (f"{imp}/*/battles", f"{imp}/*"):
        with pytest.raises(InputError, match=r"matches only hidden files .*_old/battles/.*spell the '_'"):
            match_files(glob)


def test_an_imports_battles_folder_is_its_import(tmp_path):
    """``--input DIR/battles`` is DIR's import: its rejected rows are reported as for ``--input DIR`` (before: none);
    a glob of files into it still names no import (it may select only some days), nor does a folder that merely
    holds a ``battles`` folder."""
    out = pba_import(tmp_path / "imp", "judge-a", unjudged=3)
    for given in (str(out), f"{out}/battles", f"{out}/battles/"):
        assert [(r.path, r.rejected_total) for r in import_rejections([("--input", given)])] == [
            (f"{out}/{DEAD_LETTERS}", 3)
        ], given
    assert resolve_input(f"{out}/battles/day=*/*.parquet").imports == []
    assert import_folders.find_import(str(tmp_path)) is None


def test_imports_of_two_benchmarks_are_refused_naming_their_folders(tmp_path, capsys):
    """MT-Bench's and DevBench's judgments in one import are refused at import; two imports, one of each, under one
    glob made one board of both.  Refused in one line naming each benchmark's folder, before anything is written."""
    mixed = tmp_path / "mixed"
    pba_import(mixed / "mt", "judge-a", "MTBench")
    pba_import(mixed / "dev", "judge-a", "DevBench")
    with pytest.raises(InputError) as caught:
        match_files(f"{mixed}/*/battles")
    message = str(caught.value)
    assert "2 benchmarks" in message and "\n" not in message
    assert f"DevBench: {mixed}/dev/battles" in message and f"MTBench: {mixed}/mt/battles" in message
    args = ["refresh", "--input", f"{mixed}/*", "--state", str(tmp_path / "state"), "--out", str(tmp_path / "site")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"biasboard refresh: error: {mixed}/*: these imports hold 2 benchmarks") and "\n" not in err
    assert not (tmp_path / "state").exists() and not (tmp_path / "site").exists()


def test_an_imports_benchmark_is_its_note_its_format_or_its_run_folder():
    """How a manifest names its benchmark; names compare without case and punctuation (PBA's MT-Bench is FastChat's
    ``mt_bench``: the same 80 questions, so a PBA import and a FastChat pair import do make one board)."""
    pba = {"format": "pba", "notes": ["lengths: chars", "benchmark: MTBench"]}
    pair = {"format": "mtbench-pair", "inputs": ["/x/data/mt_bench/model_judgment/gpt-4_pair.jsonl"], "notes": []}
    hard = {"format": "arena-hard", "inputs": ["/r/data/arena-hard-v0.1/model_judgment/gpt-4/m.jsonl"]}
    assert [import_folders.benchmark(m) for m in (pba, pair, hard)] == ["MTBench", "mt_bench", "arena-hard-v0.1"]
    assert import_folders.benchmark({"format": "alpacaeval"}) == "AlpacaEval"
    assert import_folders.benchmark({"format": "fastchat", "inputs": ["clean_battle.json"]}) is None
    assert import_folders.benchmark({"format": "mtbench-pair", "inputs": ["pairs.jsonl"]}) is None
    found = [import_folders.ImportFolder(f"imp/{i}", f"imp/{i}", m) for i, m in enumerate((pba, pair))]
    import_folders.check_agreement(found, "imp/*")  # no error


def test_imports_with_lengths_in_different_units_are_refused(tmp_path):
    """Characters beside words (one PBA import each way), and characters beside a FastChat arena's token counts
    (whose import now notes its unit): each model's typical length would mix units.  One line naming both sides."""
    units = tmp_path / "units"
    pba_import(units / "chars", "judge-a")
    pba_import(units / "words", "judge-b", unit="words")
    with pytest.raises(InputError, match=r"2 length units \((chars|words): .*; (chars|words): .*\)") as caught:
        match_files(f"{units}/*")
    assert f"{units}/chars" in str(caught.value) and f"{units}/words" in str(caught.value)

    arena = tmp_path / "arena"
    pba_import(arena / "pba", "judge-a")
    battle = {"model_a": "m1", "model_b": "m2", "winner": "model_a", "tstamp": 1.7e9, "judge": "crowd",
              "conv_metadata": {"sum_assistant_a_tokens": 40, "sum_assistant_b_tokens": 30}}  # fmt: skip
    source = tmp_path / "clean_battle.json"
    source.write_text(json.dumps([battle, {**battle, "tstamp": 1.7e9 + 1}]))
    assert cli.main(["import", "--format", "fastchat", "--in", str(source), "--out", str(arena / "crowd")]) == 0
    manifest = json.loads((arena / "crowd" / "import_manifest.json").read_text())
    assert import_folders.length_unit(manifest) == "tokens"
    with pytest.raises(InputError, match="2 length units"):
        match_files(f"{arena}/*/battles")


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("refresh", ["--input", "A", "--input", "B", "--state", "s", "--out", "o"]),
        ("refresh", ["--scores", "A", "--scores", "B", "--state", "s", "--out", "o"]),
        ("backfill", ["--input", "A", "--state", "s", "--input", "B"]),
        ("audit", ["--input", "A", "--out", "o", "--anchors", "x", "--anchors", "y"]),
    ],
)
def test_an_input_flag_given_twice_is_refused_in_one_line(tmp_path, monkeypatch, capsys, command, flags):
    """argparse keeps the last of a repeated flag: ``--input imp/a --input imp/b`` published imp/b's board alone.
    Refused, naming both values and the glob that reads several folders; nothing is read or written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main([command, *flags])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"biasboard {command}: error: --") and "given twice" in err
    assert "(A, then B)" in err or "(x, then y)" in err
    assert "'imp/*/battles'" in err
    assert list(tmp_path.iterdir()) == []


FOLDER, RULES = "a job writes one folder per flag", "a job reads one rules file per flag"


@pytest.mark.parametrize(
    ("command", "flags", "advice"),
    [
        ("refresh", ["--input", "i", "--state", "A", "--out", "o", "--state", "B"], FOLDER),
        ("refresh", ["--input", "i", "--state", "s", "--out", "A", "--out", "B"], FOLDER),
        ("export", ["--out", "o", "--format", "csv", "--to", "A", "--to", "B"], FOLDER),
        ("simulate", ["--out", "A", "--out", "B"], FOLDER),
        ("refresh", ["--input", "i", "--state", "s", "--out", "o", "--family-map", "A", "--family-map", "B"], RULES),
        ("refresh", ["--input", "i", "--state", "s", "--out", "o", "--aliases", "A", "--aliases", "B"], RULES),
        ("backfill", ["--input", "i", "--state", "s", "--family-map", "A", "--family-map", "B"], RULES),
        ("audit", ["--input", "i", "--out", "o", "--aliases", "A", "--aliases", "B"], RULES),
    ],
)
def test_a_folder_or_rules_file_flag_given_twice_is_refused_in_one_line(
    tmp_path, monkeypatch, capsys, command, flags, advice
):
    """``--state a --state b`` wrote to b alone, and ``--family-map a.json --family-map b.json`` applied b's rules
    alone, without a word: refused as a repeated input is."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main([command, *flags])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"given twice (A, then B): {advice}" in err
    assert list(tmp_path.iterdir()) == []
