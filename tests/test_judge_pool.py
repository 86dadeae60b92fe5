"""``refresh --judge-pool column:NAME``: each battle's judge is its pool column's value, applied at ingest.

The same simulated battles are written twice: once with the pools already in ``judge`` (the
simulator's human pools and LLM judges), once with the human pools split into voters and the pool
in a ``voter_group`` column (null for the LLM judges, blank for some: both keep their own judge).
Pooled by the column, the second gives the same published board, bias table and audit as the first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.schemas import summary as S
from biasboard.schemas.errors import InputError
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms.judge_pool import JudgePool, pool_by_column

SIM = SimulationConfig(battles=3000, models=6, judges=4, human_judges=2, days=2, seed=5)
OPTIONS = RefreshOptions(k=3, diagnostics="off")
VOTERS = 30


def _split_into_voters(pooled: Path, out: Path) -> None:
    """Each day file of ``pooled`` with the human pools' battles spread over voters, the pool in voter_group."""
    rng = np.random.default_rng(0)
    for path in sorted(pooled.glob("battles/day=*/*.parquet")):
        frame = pl.read_parquet(path)
        human = frame["judge"].str.starts_with("human-pool")
        voter = pl.Series([f"voter-{k}" for k in rng.integers(0, VOTERS, frame.height)])
        group = pl.when(human).then(pl.col("judge")).otherwise(pl.lit(None, dtype=pl.String))
        frame = frame.with_columns(
            pl.when(human).then(voter).otherwise(pl.col("judge")).alias("judge"), group.alias("voter_group")
        )
        blank = pl.Series(rng.random(frame.height) < 0.3) & ~human  # a blank pool keeps the judge, like a null
        frame = frame.with_columns(
            pl.when(blank).then(pl.lit("  ")).otherwise(pl.col("voter_group")).alias("voter_group")
        )
        target = out / path.relative_to(pooled)
        target.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(target)


def _snapshot(tmp_path: Path, outcome, name: str) -> Path:
    assert outcome.published is not None
    return tmp_path / name / "snapshots" / outcome.published.snapshot_id


def test_pooling_by_column_gives_the_pre_pooled_board(tmp_path):
    pooled = write_simulation(SIM, tmp_path / "pooled")
    _split_into_voters(pooled, tmp_path / "voters")
    pooled_glob = str(pooled / "battles" / "day=*" / "*.parquet")
    voters_glob = str(tmp_path / "voters" / "battles" / "day=*" / "*.parquet")

    expected = _snapshot(tmp_path, refresh(pooled_glob, str(tmp_path / "s1"), str(tmp_path / "o1"), [], OPTIONS), "o1")
    # The voters' state first aggregated without pooling: the voters are judges of their own ...
    unpooled = refresh(voters_glob, str(tmp_path / "s2"), str(tmp_path / "o2"), [], OPTIONS)
    judges = set(pl.read_parquet(_snapshot(tmp_path, unpooled, "o2") / "bias.parquet")["judge"])
    assert any(j.startswith("voter-") for j in judges)
    # ... then the option changes: every stored day is aggregated again (the pools are in the cells).
    by_column = refresh(
        voters_glob,
        str(tmp_path / "s2"),
        str(tmp_path / "o2"),
        [],
        RefreshOptions(k=3, diagnostics="off", judge_pool="column:voter_group"),
    )
    assert by_column.aggregated_days == unpooled.aggregated_days and len(by_column.aggregated_days) == SIM.days
    got = _snapshot(tmp_path, by_column, "o2")

    for table in ("leaderboard.parquet", "bias.parquet"):
        assert pl.read_parquet(got / table).equals(pl.read_parquet(expected / table)), table
    summary, want = (json.loads((p / "summary.json").read_text()) for p in (got, expected))
    assert summary["judges"] == want["judges"] and summary["counts"] == want["counts"]
    for key in ("order", "family"):  # the judge audit pools by the column too
        assert summary["diagnostics"][key] == want["diagnostics"][key] and want["diagnostics"][key], key
    audit, want_audit = (json.loads((p / "audit.json").read_text())["tables"] for p in (got, expected))
    assert audit == want_audit


def test_missing_or_mistyped_pool_column_fails_up_front(tmp_path):
    logs = write_simulation(SimulationConfig(battles=200, models=4, judges=2, days=1, seed=1), tmp_path / "logs")
    glob = str(logs / "battles" / "day=*" / "*.parquet")
    with pytest.raises(InputError, match=r"column:voter_group: .*no column 'voter_group'"):
        refresh(glob, str(tmp_path / "s"), str(tmp_path / "o"), [], RefreshOptions(judge_pool="column:voter_group"))
    day = next((logs / "battles").glob("day=*"))
    mistyped = tmp_path / "mistyped" / day.name
    mistyped.mkdir(parents=True)
    pl.read_parquet(next(day.glob("*.parquet"))).with_columns(pl.lit(0.5).alias("weight")).write_parquet(
        mistyped / "p.parquet"
    )
    with pytest.raises(InputError, match=r"holds 'weight' as double; expected text or integers"):
        refresh(
            str(mistyped.parent),
            str(tmp_path / "s"),
            str(tmp_path / "o"),
            [],
            RefreshOptions(judge_pool="column:weight"),
        )
    # the battle's own columns are no pools (column:winner made the verdict the judge, without a word)
    for column in ("ts", "winner", "model_a"):
        with pytest.raises(InputError, match=rf"--judge-pool 'column:{column}': {column} is part of the battle itself"):
            refresh(glob, str(tmp_path / "s"), str(tmp_path / "o"), [], RefreshOptions(judge_pool=f"column:{column}"))
    with pytest.raises(InputError, match="--judge-pool 'group': expected 'prefix:SEP'"):
        refresh(glob, str(tmp_path / "s"), str(tmp_path / "o"), [], RefreshOptions(judge_pool="group"))
    assert not (tmp_path / "o" / "LATEST").exists()


def test_pool_by_column_keeps_the_judge_where_the_pool_is_missing():
    batch = pl.DataFrame({"judge": ["v1", "v2", "v3", "gpt"], "g": [7, None, 7, None]})
    assert pool_by_column(batch, "g")["judge"].to_list() == ["7", "v2", "7", "gpt"]
    assert JudgePool.parse("prefix:/").fit_rule == "prefix:/" and JudgePool.parse("column:g").fit_rule is None


def test_a_prefix_rule_that_pools_nothing_says_so(tmp_path):
    """``--judge-pool prefix:SEP`` where no judge's name holds SEP fits every judge on its own, as it should; the
    summary now says nothing was pooled (it published without a word)."""
    logs = write_simulation(SIM, tmp_path / "logs")
    glob = str(logs / "battles" / "day=*" / "*.parquet")
    for rule, warned in (("prefix:#", True), ("prefix:-", False)):
        outcome = refresh(glob, str(tmp_path / "s"), str(tmp_path / rule[-1]), [], RefreshOptions(judge_pool=rule))
        assert outcome.summary is not None
        said = [w for w in outcome.summary.warnings if w.startswith("--judge-pool")]
        assert said == ([f"--judge-pool {rule}: no judge's name holds '#', so every judge is its own pool (nothing "
                         "pooled)"] if warned else []), said  # fmt: skip


def test_a_prefix_rule_that_pools_no_grader_says_so(tmp_path):
    """The "nothing pooled" warning reads the graders too: on a board of grades alone it read the (no) battle
    judges and said nothing."""
    config = SimulationConfig(battles=1500, models=5, judges=3, human_judges=1, days=1, seed=3, scores=0.5)
    logs = write_simulation(config, tmp_path / "logs")
    _split_grades_into_voters(logs, tmp_path / "voters", carry=False)  # graders 'voter-7', never '#'
    grades = str(logs / "scores" / "day=*" / "*.parquet")
    options = RefreshOptions(k=2, diagnostics="off", judge_pool="prefix:#", scores_glob=grades)
    outcome = refresh(None, str(tmp_path / "s1"), str(tmp_path / "o1"), [], options)
    assert outcome.summary is not None
    said = [w for w in outcome.summary.warnings if w.startswith("--judge-pool")]
    assert said == ["--judge-pool prefix:#: no judge's name holds '#', so every judge is its own pool (nothing "
                    "pooled)"], said  # fmt: skip
    voters = str(tmp_path / "voters" / "scores" / "day=*" / "*.parquet")
    options = RefreshOptions(k=2, diagnostics="off", judge_pool="prefix:-", scores_glob=voters)
    outcome = refresh(None, str(tmp_path / "s2"), str(tmp_path / "o2"), [], options)
    assert outcome.summary is not None
    assert not [w for w in outcome.summary.warnings if w.startswith("--judge-pool")]


def _split(day, chunk, battles: pa.Table) -> pa.Table:
    rng = np.random.default_rng(chunk)
    judge = battles["judge"]
    human = pc.starts_with(judge, "human-pool")
    voter = pa.array(rng.integers(0, 8, battles.num_rows)).cast(pa.string())
    named = pc.binary_join_element_wise(judge, pc.binary_join_element_wise("v", voter, ""), "/")
    return battles.set_column(battles.schema.get_field_index("judge"), "judge", pc.if_else(human, named, judge))


def test_bias_json_keeps_the_pooled_judges_rows(tmp_path, monkeypatch) -> None:
    """--judge-pool prefix:/ on a log of more voters than summary.json keeps: bias.json still holds the fit's judges.

    The JSON cut keeps the bias rows of summary.json's busiest judges, which are the log's judges (the voters); a
    pooled fit's judges are the pools, so their rows were dropped from bias.json though the fit had only a few
    judges."""
    monkeypatch.setattr(S, "SUMMARY_JUDGES_MAX", 4)
    config = SimulationConfig(battles=4_000, models=5, judges=3, human_judges=1, days=1, prompts=20, seed=4)
    logs = write_simulation(config, tmp_path / "logs", relabel=_split)
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"), str(tmp_path / "state"), str(tmp_path / "out"), [],
        RefreshOptions(k=2, diagnostics="off", judge_pool="prefix:/"),
    )  # fmt: skip
    snapshot = Path(outcome.published.path)
    summary = json.loads((snapshot / "summary.json").read_text())
    assert summary["judge_tables"] is not None  # 10 voters and LLM judges in the log, more than the 4 kept
    bias_all = pl.read_parquet(snapshot / "bias.parquet")
    assert "human-pool-1" in set(bias_all["judge"])  # 3 judges in the fit: the pool and two LLM judges
    bias_json = pl.DataFrame(json.loads((snapshot / "bias.json").read_text()))
    assert set(bias_json["judge"]) == set(bias_all["judge"])
    assert bias_json.height == bias_all.height
    html = (snapshot / "report.html").read_text()
    assert "the JSON files keep the" not in html.split('id="bias"')[1].split("</section>")[0]


def _split_grades_into_voters(pooled: Path, out: Path, carry: bool) -> None:
    """Each grade file of ``pooled`` with the human pools' grades spread over voters, the pool in voter_group when
    ``carry`` (null for the LLM judges)."""
    rng = np.random.default_rng(1)
    for path in sorted(pooled.glob("scores/day=*/*.parquet")):
        frame = pl.read_parquet(path)
        human = frame["judge"].str.starts_with("human-pool")
        voter = pl.Series([f"voter-{k}" for k in rng.integers(0, VOTERS, frame.height)])
        if carry:
            group = pl.when(human).then(pl.col("judge")).otherwise(pl.lit(None, dtype=pl.String))
            frame = frame.with_columns(group.alias("voter_group"))
        frame = frame.with_columns(pl.when(human).then(voter).otherwise(pl.col("judge")).alias("judge"))
        target = out / path.relative_to(pooled)
        target.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(target)


def test_pooling_by_column_pools_the_grades_too(tmp_path):
    """Battles and grades of voters, the pool in both files' voter_group: pooled by the column, the board and bias
    table are those of the pre-pooled log.  The grades kept their voters as judges (a grader voter-7 fitted apart
    from its battles' pool: 20 more judges in the bias table, without a word); a grade file without the column
    cannot be pooled and is refused, as a battle file is."""
    config = SimulationConfig(battles=3000, models=6, judges=3, human_judges=1, days=1, seed=5, scores=0.5)
    pooled = write_simulation(config, tmp_path / "pooled")
    _split_into_voters(pooled, tmp_path / "voters")
    _split_grades_into_voters(pooled, tmp_path / "voters", carry=True)
    _split_grades_into_voters(pooled, tmp_path / "bare", carry=False)
    pooled_in, voters_in = (str(root / "battles" / "day=*" / "*.parquet") for root in (pooled, tmp_path / "voters"))
    pooled_scores, voter_scores, bare_scores = (
        str(root / "scores" / "day=*" / "*.parquet") for root in (pooled, tmp_path / "voters", tmp_path / "bare")
    )
    plain = RefreshOptions(k=3, diagnostics="off", scores_glob=pooled_scores)
    expected = refresh(pooled_in, str(tmp_path / "s1"), str(tmp_path / "o1"), [], plain)
    by_column = RefreshOptions(k=3, diagnostics="off", judge_pool="column:voter_group", scores_glob=voter_scores)
    got = refresh(voters_in, str(tmp_path / "s2"), str(tmp_path / "o2"), [], by_column)
    bias = pl.read_parquet(_snapshot(tmp_path, got, "o2") / "bias.parquet")
    assert not any(j.startswith("voter-") for j in bias["judge"])
    for table in ("leaderboard.parquet", "bias.parquet"):
        want = pl.read_parquet(_snapshot(tmp_path, expected, "o1") / table)
        assert pl.read_parquet(_snapshot(tmp_path, got, "o2") / table).equals(want), table
    with pytest.raises(InputError, match=r"column:voter_group: .*scores.*no column 'voter_group'"):
        bare = RefreshOptions(k=3, diagnostics="off", judge_pool="column:voter_group", scores_glob=bare_scores)
        refresh(voters_in, str(tmp_path / "s3"), str(tmp_path / "o3"), [], bare)
