"""The audit's summed-days cache (``transforms.audit_cache``): a sum that starts from it reads only the days it
lacks and writes the files of a full sum byte for byte; a changed or removed day invalidates it, a broken
cache file is a warning and a full sum, a broken stored day a StateError."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from biasboard.audit import anchor_gold, finish_audit, measures, merge_partials
from biasboard.audit.measures import judge_order_sums
from biasboard.importers.registry import import_path
from biasboard.schemas.errors import StateError
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import audit as taudit
from biasboard.transforms import audit_cache, read, state
from polars.testing import assert_frame_equal

from tests.conftest import real_data

SIM = SimulationConfig(battles=5000, models=6, judges=7, days=6, both_orders=True, prompts=40, seed=21)


@pytest.fixture(scope="module", params=["simulated", "real"])
def inputs(request, tmp_path_factory) -> dict[str, list[read.InputFile]]:
    """Days of battles in both orders: simulated, or the real judgments of Position-Bias-Analyzer."""
    folder = tmp_path_factory.mktemp(request.param)
    logs = write_simulation(SIM, folder) if request.param == "simulated" else real_days(folder)
    return read.list_input_days(str(logs / "battles" / "day=*" / "*.parquet"))


def real_days(folder: Path, days: int = 6) -> Path:
    """The vendored Position-Bias-Analyzer judgments (every pair judged in both orders; MT-Bench and DevBench,
    5 judges), spread over ``days`` days by prompt so that each pair's two orders share a day (the audit pairs
    them within a day), written as a day-partitioned battle log."""
    pba = real_data("mtbench-position-bias-analyzer")
    # One benchmark an import (a folder of both is refused); the audit is per judge and prompt, so both fit in one log.
    rows = pl.concat(
        [pl.from_arrow(import_path("pba", pba / f"{bench}_judgments_*").rows) for bench in ("mtbench", "devbench")]
    )
    prompts = sorted(set(rows["prompt_id"].to_list()))
    day_of = {prompt: i % days for i, prompt in enumerate(prompts)}
    rows = rows.with_columns(pl.col("prompt_id").replace_strict(day_of, return_dtype=pl.Int64).alias("_day"))
    for d in range(days):
        day = datetime.date(2024, 3, 1 + d)
        stamp = datetime.datetime(day.year, day.month, day.day, 12, tzinfo=datetime.timezone.utc)
        part = (
            rows.filter(pl.col("_day") == d).drop("_day").with_columns(pl.lit(stamp).alias("ts").cast(rows["ts"].dtype))
        )
        out = folder / "battles" / f"day={day.isoformat()}"
        out.mkdir(parents=True)
        pq.write_table(part.to_arrow(), out / "part-00000.parquet")
    return folder


@pytest.fixture(params=["memory", "buckets"])
def sums(request, monkeypatch):
    """Small folds; ``buckets``: the order pairs summed by judge bucket on disk (a judge or two a bucket)."""
    monkeypatch.setattr(taudit, "FOLD_ORDER_ROWS", 50)
    monkeypatch.setattr(taudit, "FINISH_ROWS", 40)
    if request.param == "buckets":
        monkeypatch.setenv(state.BUCKET_ROWS_ENV, "60")
    return request.param


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def cached_days(days_dir: Path) -> list[str]:
    return [day for day, _ in json.loads(Path(audit_cache.manifest_path(str(days_dir))).read_text())["days"]]


def first_judge_as_anchors(inputs: dict[str, list[read.InputFile]]) -> pl.DataFrame:
    """Gold labels for every day: one judge's verdicts as the trusted anchors (matched by prompt and pair,
    so a gold case judged in both orders is two correlated verdicts, as in MT-Bench's design)."""
    columns = ["judge", "prompt_id", "model_a", "model_b", "winner"]
    battles = pl.concat([pl.read_parquet(f.path, columns=columns) for day in inputs for f in inputs[day]])
    return anchor_gold(battles.filter(pl.col("judge") == battles["judge"].min()))


def test_the_cached_sum_reads_only_new_days_and_writes_the_full_sums_bytes(
    tmp_path, inputs, sums, monkeypatch, request
):
    days = sorted(inputs)
    days_dir = tmp_path / "audit_days"
    gold = first_judge_as_anchors(inputs)
    audit_fn = taudit.AuditDayFn(str(days_dir), read.load_family_map(None), gold)
    keys: dict[str, str] = {}

    def store(day: str, source: str, key: str) -> None:
        list(audit_fn.process((day, inputs[source], key)))
        keys[day] = key

    read_days: list[str] = []
    real_read = taudit.read_day_partials
    monkeypatch.setattr(taudit, "read_day_partials", lambda day, *a: (read_days.append(day), real_read(day, *a))[1])

    folds: set[str] = set()
    real_fold = taudit._order_pairs_fold
    monkeypatch.setattr(taudit, "_order_pairs_fold", lambda *a: folds.add(type(f := real_fold(*a)).__name__) or f)

    def check(summed: list[str], expect_read: list[str]) -> None:
        """Sum ``summed`` with the cache and without: the same files; the cached sum read ``expect_read``."""
        read_days.clear()
        taudit.write_stored_sum(summed, str(days_dir), str(tmp_path / "cached"), {d: keys[d] for d in summed})
        assert read_days == expect_read
        assert cached_days(days_dir) == summed
        taudit.write_stored_sum(summed, str(days_dir), str(tmp_path / "full"))
        assert files(tmp_path / "cached") == files(tmp_path / "full")

    for day in days[:3]:
        store(day, day, f"k-{day}")
    check(days[:3], days[:3])  # no cache yet: every day, and the cache written
    for i in range(3, len(days)):  # a day arrives
        store(days[i], days[i], f"k-{days[i]}")
        check(days[: i + 1], [days[i]])
    assert folds == {"BucketedFold" if sums == "buckets" else "CodedFold"}
    # The incremental sum equals a full re-audit, the clustered standard errors' partials included: the cached
    # per-judge partials carry the sums over clusters, and the clusters are real (both orders: Σ n_c² > Σ n_c).
    cache = audit_cache.read_cache(str(days_dir), keys)
    assert cache is not None
    full = merge_partials([taudit.audit_day((day, inputs[day]), read.load_family_map(None), gold)[0] for day in days])
    for name, keys_of in (("length", ["judge"]), ("family", ["judge", "judge_family", "family"]), ("gold", ["judge"])):
        assert_frame_equal(getattr(cache.partials, name).sort(keys_of), getattr(full, name).sort(keys_of))
    # The days' (judge, prompt) sketch too: its keys, days and registers (audit.json's ``clusters``, in the files
    # compared byte for byte above).  The simulated days reuse their 40 prompts (most clusters recur: a note); the
    # real judgments are spread over the days by prompt (none recurs).  Their keys are few: the clusters are closed
    # over the history, the cache keeping the clusters' sums by key (summed over its days), so no note.
    assert_frame_equal(cache.partials.recurrence, full.recurrence)
    for name, keys_of in (("closed_clusters", measures.CLOSED_CLUSTER_KEYS), ("closed_pairs", measures.ORDER_ROW_KEYS)):
        assert_frame_equal(getattr(cache.partials, name).sort(keys_of), getattr(full, name).sort(keys_of))
    assert full.recurrence["days"].item() == len(days)
    document = json.loads((tmp_path / "cached" / taudit.AUDIT_JSON).read_text())
    share = document["clusters"]["recurring_share"]
    recurring = [note for note in document["notes"] if "clusters repeat one judged on another day" in note]
    assert document["clusters"]["closed_over"] == "history" and not recurring
    if request.node.callspec.params["inputs"] == "simulated":
        assert share > 0.5
    else:
        assert share < 0.02
    assert (full.length["n_decisive_diff_sq"] > full.length["n_decisive_diff"]).any()
    assert (full.gold["n_disc_sq"] > full.gold["n_disc"]).all()  # every judge's gold cases in both orders
    # The flip rate's sums over (judge, prompt) clusters ride on the order pairs, whose cached sum the files above
    # match byte for byte; a judge's prompts hold several pairs, so its clusters are not its prompt-pairs.
    judge_sums = judge_order_sums(full.order_pairs)
    assert (judge_sums["cl_pairs_sq"] > judge_sums["pairs"]).all()
    whole = finish_audit(full)
    for name in ("judges", "family"):
        assert pl.read_parquet(tmp_path / "cached" / taudit.table_file(name)).equals(whole.tables()[name]), name
    for column in ("order_flip_rate_se", "len_longer_win_rate_se", "gold_accuracy_se"):
        assert whole.judges[column].drop_nulls().len() > 0, column
    assert whole.family["self_preference_se"].drop_nulls().len() == whole.family.height
    cache_files = {p.name for p in (days_dir / audit_cache.SUM_CACHE).glob("*.parquet")}
    assert len(cache_files) == len(audit_cache.SMALL_TABLES) + 2  # the last commit's files only

    store(days[1], days[4], "changed")  # day 2 re-audited from other battles: every day summed again
    check(days, days)
    check(days[1:], days[1:])  # day 1 no longer summed (its input gone): a miss too
    store(days[0], days[0], f"k-{days[0]}")
    check(days, [days[0]])  # a day added before the summed ones: read alone


def test_a_broken_cache_file_is_said_and_a_broken_day_is_a_state_error(tmp_path, inputs, sums, caplog):
    days = sorted(inputs)
    days_dir = tmp_path / "audit_days"
    audit_fn = taudit.AuditDayFn(str(days_dir), read.load_family_map(None), None)
    for day in days:
        list(audit_fn.process((day, inputs[day], f"k-{day}")))
    keys = {day: f"k-{day}" for day in days}
    taudit.write_stored_sum(days[:-1], str(days_dir), str(tmp_path / "first"), {d: keys[d] for d in days[:-1]})
    taudit.write_stored_sum(days, str(days_dir), str(tmp_path / "full"))
    cache = days_dir / audit_cache.SUM_CACHE
    manifest = json.loads(Path(audit_cache.manifest_path(str(days_dir))).read_text())
    saved = {p.name: p.read_bytes() for p in cache.iterdir()}
    for name in ("order_pairs", "slots", "judge_rows"):  # the big file (read late) and the small ones (read first)
        shutil.rmtree(cache)
        cache.mkdir()
        for file, data in saved.items():  # the cache of days[:-1] as it was written
            (cache / file).write_bytes(data)
        broken = days_dir / manifest["files"][name]
        broken.write_bytes(b"PAR1 not parquet PAR1")
        caplog.clear()
        with caplog.at_level("WARNING"):
            taudit.write_stored_sum(days, str(days_dir), str(tmp_path / name), keys)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and broken.name in warnings[0] and "broken cache file" in warnings[0], warnings
        assert files(tmp_path / name) == files(tmp_path / "full")
        assert cached_days(days_dir) == days and not broken.exists()  # a new cache replaced it
    Path(audit_cache.manifest_path(str(days_dir))).write_text("{broken")
    caplog.clear()
    with caplog.at_level("WARNING"):
        taudit.write_stored_sum(days, str(days_dir), str(tmp_path / "manifest"), keys)
    assert [r for r in caplog.records if "manifest.json" in r.getMessage() and "broken cache" in r.getMessage()]
    assert files(tmp_path / "manifest") == files(tmp_path / "full")

    taudit.write_stored_sum(days[:-1], str(days_dir), str(tmp_path / "again"), {d: keys[d] for d in days[:-1]})
    for name in ("order_pairs", "slots"):  # the last day is not cached: it is read, and is the truth
        day_file = days_dir / f"day={days[-1]}" / f"{name}.parquet"
        saved = day_file.read_bytes()
        day_file.write_bytes(b"garbage")
        with pytest.raises(StateError, match=f"day={days[-1]}"):
            taudit.write_stored_sum(days, str(days_dir), str(tmp_path / "bad"), keys)
        day_file.write_bytes(saved)


def test_above_the_bound_the_days_close_their_own_clusters_and_no_keyed_sums_are_read(tmp_path, inputs, monkeypatch):
    """With more distinct (judge, prompt) keys than ``HISTORY_CLOSURE_MAX_KEYS`` (set tiny here: an arena's unique
    prompts) a day keeps no keyed cluster sums when it alone has that many, the sum reads none (only the days'
    4 KB sketches decide it), closes each day's clusters within it and says so (``closed_over: day``, the note
    where clusters recur) — the files those of the in-memory audit under the same bound, and other SEs than the
    history closure's when clusters recur."""
    days = sorted(inputs)
    days_dir = tmp_path / "audit_days"
    audit_fn = taudit.AuditDayFn(str(days_dir), read.load_family_map(None), None)
    keys = {day: f"k-{day}" for day in days}
    for day in days:
        list(audit_fn.process((day, inputs[day], keys[day])))
    taudit.write_stored_sum(days, str(days_dir), str(tmp_path / "history"), keys)
    stored = pl.read_parquet(days_dir / f"day={days[0]}" / "closed_pairs.parquet")
    assert stored.height > 0  # under the bound a day keeps its prompt-pair units
    monkeypatch.setattr(measures, "HISTORY_CLOSURE_MAX_KEYS", 10)
    list(audit_fn.process((days[0], inputs[days[0]], keys[days[0]])))  # stored again, above the bound alone
    for name in measures.KEYED_PARTIALS:
        assert pl.read_parquet(days_dir / f"day={days[0]}" / f"{name}.parquet").height == 0, name
    reads: list[bool] = []
    real_read = taudit.read_day_partials
    monkeypatch.setattr(
        taudit, "read_day_partials", lambda day, d, keyed=True: (reads.append(keyed), real_read(day, d, keyed))[1]
    )
    taudit.write_stored_sum(days, str(days_dir), str(tmp_path / "day"))  # (no cache: every day read)
    assert reads == [False] * len(days)
    document = json.loads((tmp_path / "day" / taudit.AUDIT_JSON).read_text())
    assert document["clusters"]["closed_over"] == "day"
    whole = finish_audit(
        merge_partials([taudit.audit_day((day, inputs[day]), read.load_family_map(None))[0] for day in days])
    )
    assert whole.clusters.closed_over == "day"
    for name in ("judges", "family"):
        assert pl.read_parquet(tmp_path / "day" / taudit.table_file(name)).equals(whole.tables()[name]), name
    history = pl.read_parquet(tmp_path / "history" / taudit.table_file("judges"))
    recurring = [note for note in document["notes"] if "clusters repeat one judged on another day" in note]
    if document["clusters"]["recurring_share"] > 0.5:  # the simulated days reuse their prompts
        assert len(recurring) == 1
        assert (history["len_longer_win_rate_se"] != whole.judges["len_longer_win_rate_se"]).any()
    else:  # the real judgments' prompts are on one day each: the two closures agree
        assert not recurring
        assert_frame_equal(history.select("len_longer_win_rate_se"), whole.judges.select("len_longer_win_rate_se"))


def test_a_day_stored_beside_a_history_past_the_bound_keeps_no_keyed_sums(tmp_path, inputs, monkeypatch):
    """An arena's history passes the bound within days; after that a new day's keyed cluster sums would only be
    stored, never read: a day audited beside such a history (its keys' sketch: the cache's, or the stored days')
    keeps none and says so (``unkeyed``), and a sum holding it is closed within each day even under the bound
    (it lacks what the history closure needs) — never closed over the history with some days' clusters missing."""
    days = sorted(inputs)
    days_dir = tmp_path / "audit_days"
    keys = {day: f"k-{day}" for day in days}
    families = read.load_family_map(None)
    for day in days[:-1]:
        list(taudit.AuditDayFn(str(days_dir), families, None).process((day, inputs[day], keys[day])))
    history = taudit.stored_history_sketch(str(days_dir), days[:-1])
    assert history is not None and history["day_keys"].item() > 0
    last = (days[-1], inputs[days[-1]], keys[days[-1]])
    list(taudit.AuditDayFn(str(days_dir), families, None, history=history).process(last))  # under the bound: kept
    stored = days_dir / f"day={days[-1]}"
    assert pl.read_parquet(stored / "closed_clusters.parquet").height > 0
    bound = int(measures.ClusterRecurrence.of(history).distinct_keys)  # the stored days' keys reach it
    monkeypatch.setattr(measures, "HISTORY_CLOSURE_MAX_KEYS", bound)
    assert taudit.stored_history_sketch(str(days_dir), days[:-1]) is not None
    list(taudit.AuditDayFn(str(days_dir), families, None, history=history).process(last))  # beside it: dropped
    assert pl.read_parquet(stored / "closed_clusters.parquet").height == 0
    assert pl.read_parquet(stored / "recurrence.parquet")["unkeyed"].item() == 1
    monkeypatch.undo()
    taudit.write_stored_sum(days, str(days_dir), str(tmp_path / "out"), keys)
    document = json.loads((tmp_path / "out" / taudit.AUDIT_JSON).read_text())
    assert document["clusters"]["closed_over"] == "day"
    taudit.write_stored_sum(days[:-1], str(days_dir), str(tmp_path / "kept"), keys)  # the days with their sums
    assert json.loads((tmp_path / "kept" / taudit.AUDIT_JSON).read_text())["clusters"]["closed_over"] == "history"
