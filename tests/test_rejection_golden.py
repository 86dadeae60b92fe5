"""The rejection path's outputs are pinned: valid rows, dead letters with reasons, counts.

A fixed corpus covers every bad-row kind (each ``missing:<col>`` as null, empty
and blank; unparseable, out-of-window and millisecond timestamps in text,
numeric and timestamp columns; bad winners; NaN, text, negative, infinite and
absurd lengths; negative, fractional, unparseable and absurd style counts;
repeats within a batch, across batches and after a malformed first attempt;
scores out of range) in batches whose columns have the types
real files carry.  The outputs were recorded from the validator as it was
before the rejection path was vectorised (``tests/golden/rejection.json``), so
any change in what is kept, what is rejected, for which reason, or where the
dead letter points fails here.  Regenerate only for an intended rule change:
``BIASBOARD_REGEN_REJECTION=1 pytest tests/test_rejection_golden.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.schemas.battle import BATTLE_REQUIRED, SCORE_REQUIRED, STYLE_COUNT_COLUMNS
from biasboard.schemas.deadletter import MAX_RESPONSE_LENGTH
from biasboard.transforms.validate import SeenIds, validate_battles, validate_scores

GOLDEN = Path(__file__).parent / "golden" / "rejection.json"
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
N = 240  # rows per batch


def _base(rng: np.random.Generator, batch: int) -> dict[str, list]:
    """N valid battles as Python lists (ids unique across batches unless a defect repeats one)."""
    models = [f"model-{i}" for i in range(6)]
    judges = ["gpt-4", "claude-3", "human"]
    micros = np.sort(rng.integers(0, 86_400_000_000, N))
    return {
        "battle_id": [f"b{batch}-{i:04d}" for i in range(N)],
        "ts": [T0 + dt.timedelta(microseconds=int(m)) for m in micros],
        "judge": [judges[i] for i in rng.integers(0, 3, N)],
        "model_a": [models[i] for i in rng.integers(0, 6, N)],
        "model_b": [models[i] for i in rng.integers(0, 6, N)],
        "winner": [("model_a", "model_b", "tie", "tie (bothbad)")[i] for i in rng.integers(0, 4, N)],
        "prompt_id": [f"p{i}" for i in rng.integers(0, 50, N)],
        "len_a": [int(v) for v in rng.integers(0, 2000, N)],
        "len_b": [int(v) for v in rng.integers(0, 2000, N)],
        "family_a": [None] * N,
        "family_b": [None] * N,
        "judge_family": [None] * N,
    }


def _inject(cols: dict[str, list], rng: np.random.Generator, text_ts: bool) -> None:
    """Every battle defect at random rows (some rows get two, so precedence is exercised)."""
    rows = iter(rng.permutation(np.arange(1, N)).tolist())
    for column in BATTLE_REQUIRED:
        for blank in (None, "", "   ", "\t"):
            if column == "ts" and not text_ts and blank is not None:
                continue
            cols[column][next(rows)] = blank
    bad_ts = ["yesterday", "2024-13-45T00:00:00", "1970-01-01", "2150-01-01T00:00:00Z"] if text_ts else []
    for value in bad_ts:
        cols["ts"][next(rows)] = value
    for value in ("model_c", "A", "1", "tie(bothbad)", " Model_B ", "TIE"):
        cols["winner"][next(rows)] = value
    for column in ("len_a", "len_b"):
        for value in (-1, -500, MAX_RESPONSE_LENGTH + 1, 10 * MAX_RESPONSE_LENGTH, MAX_RESPONSE_LENGTH, 0, None):
            cols[column][next(rows)] = value
    for _ in range(4):  # two faults on one row: the earlier reason wins
        r = next(rows)
        cols["winner"][r] = "xyz"
        cols["len_a"][r] = -3
    for _ in range(3):
        r = next(rows)
        cols["judge"][r] = None
        cols["model_b"][r] = ""
    for _ in range(8):  # a repeat of an earlier row, exact
        r = next(rows)
        src = int(rng.integers(0, r))
        for column in cols:
            cols[column][r] = cols[column][src]
    for _ in range(3):  # a malformed first attempt, then a corrected resend with the same id
        r, later = sorted((next(rows), next(rows)))
        cols["battle_id"][r] = cols["battle_id"][later]
        cols["winner"][r] = "error"


def _battle_batches() -> list[tuple[str, pa.Table]]:
    """(label, batch) in the order one day would stream them (ids repeat across batches)."""
    rng = np.random.default_rng(20240501)
    out: list[tuple[str, pa.Table]] = []
    first = _base(rng, 0)
    _inject(first, rng, text_ts=False)
    out.append(("timestamp_ts", pa.table({**first, "ts": pa.array(first["ts"], pa.timestamp("us", tz="UTC"))})))

    text = _base(rng, 1)
    text["ts"] = [t.isoformat() if i % 3 else t.strftime("%Y-%m-%d %H:%M:%S") for i, t in enumerate(text["ts"])]
    _inject(text, rng, text_ts=True)
    text["battle_id"][5] = out[0][1].column("battle_id")[7].as_py()  # a repeat of the previous batch's id
    text["battle_id"][6] = out[0][1].column("battle_id")[8].as_py()
    out.append(("text_ts", pa.table(text)))

    epoch = _base(rng, 2)
    _inject(epoch, rng, text_ts=False)
    seconds = [None if t is None else t.timestamp() for t in epoch["ts"]]
    seconds[10], seconds[11], seconds[12] = seconds[10] * 1000, 0.0, float("nan")  # ms, zero, NaN
    lengths = [None if v is None else float(v) for v in epoch["len_a"]]
    lengths[13], lengths[14] = float("nan"), float("inf")
    out.append(("float_ts", pa.table({**epoch, "ts": pa.array(seconds, pa.float64()), "len_a": lengths})))

    texts = _base(rng, 3)
    _inject(texts, rng, text_ts=False)
    texts["ts"] = pa.array([None if t is None else int(t.timestamp()) for t in texts["ts"]], pa.int64())
    texts["len_a"] = [None if v is None else str(v) for v in texts["len_a"]]
    texts["len_a"][20], texts["len_a"][21], texts["len_a"][22] = "twelve", " 7 ", ""
    texts["len_b"] = [None if v is None else str(v) for v in texts["len_b"]]
    out.append(("int_ts_text_lengths", pa.table(texts)))

    fastchat = _base(rng, 4)
    _inject(fastchat, rng, text_ts=False)
    fastchat["question_id"] = fastchat.pop("battle_id")
    fastchat["tstamp"] = [None if t is None else t.timestamp() for t in fastchat.pop("ts")]
    out.append(("fastchat_names", pa.table(fastchat)))

    style = _base(np.random.default_rng(12), 5)  # its own stream: the batches above are as recorded before it
    counts = np.random.default_rng(13).integers(0, 6, (6, N))
    for k, column in enumerate(STYLE_COUNT_COLUMNS):
        style[column] = [str(int(v)) for v in counts[k]]
        style[column][3 + k] = None  # unknown: counted, no style information
    for row, value in ((20, "-1"), (21, "1.5"), (22, "many"), (23, " 4 "), (24, "")):
        style["bold_count_b"][row] = value
    style["header_count_a"][25] = "1e12"  # beyond MAX_RESPONSE_LENGTH
    out.append(("style_counts", pa.table(style)))
    return out


def _score_batch() -> pa.Table:
    rng = np.random.default_rng(7)
    n = 120
    cols = {
        "score_id": [f"s{i}" for i in range(n)],
        "ts": [(T0 + dt.timedelta(seconds=int(s))).isoformat() for s in rng.integers(0, 86_400, n)],
        "judge": ["gpt-4"] * n,
        "model": [f"m{i}" for i in rng.integers(0, 5, n)],
        "prompt_id": [f"p{i}" for i in rng.integers(0, 20, n)],
        "score": [float(v) for v in rng.integers(1, 11, n)],
        "len": [int(v) for v in rng.integers(0, 900, n)],
    }
    rows = iter(rng.permutation(np.arange(1, n)).tolist())
    for column in SCORE_REQUIRED:
        for blank in (None, "", "  "):
            if column == "score" and blank is not None:
                continue
            cols[column][next(rows)] = blank
    for value in (0.0, -1.0, 7.25, 101.0, float("nan")):  # 7.25: off the half-point grid
        cols["score"][next(rows)] = value
    for value in ("never", "2024-02-30"):
        cols["ts"][next(rows)] = value
    for value in (-2, MAX_RESPONSE_LENGTH + 5):
        cols["len"][next(rows)] = value
    for _ in range(4):
        r = next(rows)
        cols["score_id"][r] = cols["score_id"][int(rng.integers(0, r))]
    return pa.table(cols)


def _plain(value):
    """JSON-safe form of a value (NaN and infinities spelled out, times as ISO text)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return value


def _frame(df: pl.DataFrame) -> dict:
    return {
        "schema": {name: str(dtype) for name, dtype in df.schema.items()},
        "rows": [[_plain(v) for v in row] for row in df.iter_rows()],
    }


def _table(table: pa.Table) -> dict:
    return {
        "schema": [f"{f.name}:{f.type}" for f in table.schema],
        "rows": [[_plain(v) for v in row.values()] for row in table.to_pylist()],
    }


def _record(label: str, out) -> dict:
    assert out.read == out.valid.height + sum(out.rejected.values()) == out.read  # conservation per batch
    assert out.dead_letters.num_rows == sum(out.rejected.values())
    return {
        "label": label,
        "read": out.read,
        "rejected": dict(sorted(out.rejected.items())),
        "valid": _frame(out.valid),
        "dead_letters": _table(out.dead_letters),
    }


def outputs() -> list[dict]:
    """What the validator makes of the corpus: one record per batch, in streaming order."""
    records = []
    seen = SeenIds()
    offset = 0
    for label, batch in _battle_batches():
        records.append(_record(label, validate_battles(batch, seen, f"{label}.parquet", offset)))
        offset += batch.num_rows
    # without a day's id set (duplicates within the batch only), and with rows located by _source_row
    label, batch = _battle_batches()[1]
    filtered = batch.append_column("_source_row", pa.array(np.arange(batch.num_rows) * 3 + 11, pa.int64()))
    records.append(_record("source_row", validate_battles(filtered, None, "undated.parquet", 0)))
    records.append(_record("audit_carry", validate_battles(batch, None, "c.parquet", 0, carry=("prompt_id", "gold"))))
    records.append(_record("scores", validate_scores(_score_batch(), SeenIds(), "scores.parquet", 100)))
    return records


def test_rejection_outputs_match_the_recorded_ones():
    got = json.loads(json.dumps(outputs()))  # the same JSON normalisation as the stored file
    if os.environ.get("BIASBOARD_REGEN_REJECTION") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=None, separators=(",", ":")) + "\n")
    expected = json.loads(GOLDEN.read_text())
    assert [r["label"] for r in got] == [r["label"] for r in expected]
    for mine, theirs in zip(got, expected, strict=True):
        for key in ("read", "rejected", "dead_letters", "valid"):
            assert mine[key] == theirs[key], (mine["label"], key)


def test_corpus_covers_every_rejection_reason():
    from biasboard.schemas.rules import BATTLE_REASONS, SCORE_REASONS

    records = json.loads(GOLDEN.read_text())
    battle_reasons = {r for rec in records if rec["label"] != "scores" for r in rec["rejected"]}
    assert set(BATTLE_REASONS) <= battle_reasons, set(BATTLE_REASONS) - battle_reasons
    score_reasons = set(records[-1]["rejected"])
    assert set(SCORE_REASONS) - {"bad_length"} <= score_reasons, set(SCORE_REASONS) - score_reasons
