"""The audit's counts with weights are shown rounded, not on the 2⁻²⁰ grid they are summed on.

A prompt judged three times with one model shown first (two wins for it, one loss) and once in the other order
is one pair split ⅔ / ⅓ over the cross-tab: over 40 such prompts the judge has 26⅔ pairs where each order's shown
model won and 13⅓ order-consistent ones, which the exact grid sums store as 26.666679… and 13.333320….  Real
Parquet, the real refresh on the local runner (which runs the audit).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import polars as pl
from biasboard.pipelines.refresh import refresh
from biasboard.transforms import publish

NOON = dt.datetime(2024, 3, 2, 12, tzinfo=dt.timezone.utc)


def _battles() -> pl.DataFrame:
    rows = []
    for p in range(40):  # judge-1: x first three times (x, x, y), y first once (y)
        for winner in ("model_a", "model_a", "model_b"):
            rows.append(("judge-1", f"p{p}", "x", "y", winner))
        rows.append(("judge-1", f"p{p}", "y", "x", "model_a"))
    for i in range(300):  # judge-2: each prompt once, so the three models are compared and fit
        rows.append(("judge-2", f"q{i}", "xyz"[i % 3], "yzx"[i % 3], ("model_a", "model_b", "tie")[i % 3]))
    frame = pl.DataFrame(rows, schema=["judge", "prompt_id", "model_a", "model_b", "winner"], orient="row")
    return frame.with_columns(
        pl.format("b{}", pl.int_range(pl.len())).alias("battle_id"),
        pl.lit(NOON).alias("ts"),
        pl.lit(100).alias("len_a"),
        pl.lit(120).alias("len_b"),
    )


def test_fractional_audit_counts_are_shown_rounded(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "day=2024-03-02"
    folder.mkdir(parents=True)
    _battles().write_parquet(folder / "part-0.parquet")
    refresh(str(tmp_path / "logs"), str(tmp_path / "state"), str(tmp_path / "out"), ["--runner=FnApiRunner"])
    snapshot = Path(publish.resolve_snapshot(str(tmp_path / "out")))

    stored = pl.read_parquet(snapshot / "audit_judges.parquet").filter(pl.col("judge") == "judge-1").row(0, named=True)
    assert stored["order_c_xy"] != round(stored["order_c_xy"], 2)  # the grid sum is kept as computed
    shown = {"order_c_xy": 26.67, "order_c_yy": 13.33, "order_consistent": 13.33, "pba_consistent": 53.33}
    audit = json.loads((snapshot / "audit.json").read_text())
    summary = json.loads((snapshot / "summary.json").read_text())
    for judges in (audit["tables"]["judges"], summary["diagnostics"]["order"]):
        row = next(r for r in judges if r["judge"] == "judge-1")
        assert {k: row[k] for k in shown} == shown
        assert row["order_consistency_rate"] == stored["order_consistency_rate"]  # statistics are not rounded
    models = {m["model"]: m["consistent"] for m in summary["diagnostics"]["order_models"]}
    assert models == {"x": 13.33, "y": 13.33, "z": 0.0}
    report = (snapshot / "report.html").read_text()
    consistent = re.search(r'<td class="name">x</td>(?:<td>[^<]*</td>){2}<td>([^<]*)</td>', report)
    assert consistent is not None and consistent.group(1) == "13.33"
    assert "the order-consistent count can be fractional" in report
