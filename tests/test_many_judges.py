"""Snapshots with many judges (arena voters): the report shows the busiest judges, the files keep them all.

Why: with every voter its own judge a snapshot holds tens of thousands of judges; a row per judge in every
report table, or every (judge, model pair) row copied into audit.json, made the files grow with the voters
(bench/scale.py).  These checks pin what is cut (the page and audit.json's copy) and what is not (Parquet).
"""

from __future__ import annotations

import io
import json
import re

import polars as pl
import pyarrow as pa
from biasboard.audit import audit
from biasboard.report.judges import MAX_JUDGES_SHOWN, shown_judges
from biasboard.simulate import SimulationConfig, simulate_days
from biasboard.transforms.audit import AUDIT_JSON, JSON_TABLES, audit_files, table_file

JUDGES = MAX_JUDGES_SHOWN + 25


def _battles() -> pa.Table:
    config = SimulationConfig(battles=6_000, models=6, judges=JUDGES, days=1, both_orders=True, prompts=20, seed=3)
    return pa.concat_tables(b for _, b, _ in simulate_days(config))


def test_shown_judges_are_the_busiest_with_names_breaking_ties() -> None:
    battles = {"a": 5, "b": 9, "c": 5, "d": 1}
    assert shown_judges(battles, limit=2) == {"b", "a"}
    assert shown_judges(battles, limit=4) == set(battles)


def test_audit_section_and_json_stay_bounded_and_parquet_keeps_every_judge() -> None:
    result = audit(_battles())
    assert result.judges.height == JUDGES
    files = audit_files(result)

    html = files["audit_section.html"].decode()
    first_table = html.split("</table>")[0]
    rows = re.findall(r"<tr><td>(.*?)</td>", first_table)
    busiest = result.judges.sort(["slot_n", "judge"], descending=[True, False]).head(MAX_JUDGES_SHOWN)
    assert sorted(r for r in rows) == sorted(busiest["judge"].to_list())
    assert f"Showing the {MAX_JUDGES_SHOWN:,} judges with the most battles of {JUDGES:,}" in html

    document = json.loads(files[AUDIT_JSON])
    assert set(document["tables"]) == set(JSON_TABLES)
    assert len(document["tables"]["judges"]) == JUDGES
    assert document["files"]["order_pairs"] == table_file("order_pairs")
    pairs = pl.read_parquet(io.BytesIO(files[table_file("order_pairs")]))
    assert pairs.height == result.order_pairs.height > 0
    assert pairs["judge"].n_unique() == JUDGES
