"""Buckets: the jobs against a real GCS emulator on loopback, started and stopped here.

The ``gcp-storage-emulator`` package serves the GCS JSON API; ``STORAGE_EMULATOR_HOST``
sends google-cloud-storage (and so Beam's ``gs://`` file system) to it.  Nothing is
mocked: objects really go over HTTP to a separate process.
"""

from __future__ import annotations

import datetime as dt
import io
import json

import polars as pl
import pytest
from biasboard.pipelines import cli
from biasboard.transforms import publish, read, storage
from gcs_emulator import emulated_gcs

BUCKET = "biasboard-test"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with emulated_gcs(BUCKET, tmp_path_factory.mktemp("gcs") / "emulator.log") as root:
        yield root


def _publish(out: str, shift: float, day: int) -> publish.Published:
    leaderboard = pl.DataFrame({"model": ["a<b>", "c&d"], "rating_corrected": [1.0 + shift, -1.0]})
    bias = pl.DataFrame({"judge": ["j"], "effect": ["position"], "estimate": [0.2]})
    files = publish.snapshot_files(leaderboard, bias, {"kendall_tau": 1.0}, "<html></html>")
    return publish.publish_snapshot(out, files, {"inputs": []}, now=dt.datetime(2024, 1, day, tzinfo=dt.timezone.utc))


def test_storage_helpers_behave_on_a_bucket_as_locally(emulator):
    root = f"{emulator}/helpers"
    storage.atomic_write_text(f"{root}/a/x.json", '{"k": 1}')
    storage.write_bytes(f"{root}/a/b/y.bin", b"\x00\x01")
    assert storage.exists(f"{root}/a/x.json") and not storage.exists(f"{root}/a/zz")
    assert json.loads(storage.read_text(f"{root}/a/x.json")) == {"k": 1}
    assert storage.list_children(f"{root}/a") == ["b", "x.json"]
    assert [info.size for info in storage.list_files(root)] == [2, 8]
    storage.rename_dir(f"{root}/a", f"{root}/moved")
    assert storage.list_children(root) == ["moved"]
    storage.delete_tree(root)
    assert storage.list_files(root) == []


def test_publish_and_export_on_a_bucket(emulator, tmp_path):
    out = f"{emulator}/out"
    _publish(out, 0.0, 1)
    newest = _publish(out, 1.0, 2)
    assert publish.latest_snapshot_id(out) == newest.snapshot_id
    assert publish.list_snapshots(out)[-1] == newest.snapshot_id
    assert storage.list_files(f"{out}/staging") == []
    # a copy cut short on a bucket (no manifest) is ignored
    storage.write_bytes(f"{out}/snapshots/20991231T000000Z-000000000000/leaderboard.csv", b"half")
    assert "20991231T000000Z-000000000000" not in publish.list_snapshots(out)
    # and removed by the next run before it stages (it stayed under snapshots/ for good)
    publish.clean_staging(out)
    assert storage.list_files(f"{out}/snapshots/20991231T000000Z-000000000000") == []
    assert publish.list_snapshots(out)[-1] == newest.snapshot_id

    to = f"{emulator}/dash"
    assert cli.main(["export", "--out", out, "--to", to, "--format", "parquet"]) == 0
    back = pl.read_parquet(io.BytesIO(storage.read_bytes(f"{to}/leaderboard.parquet")))
    assert back["rating_corrected"].to_list() == [2.0, -1.0]
    assert json.loads(storage.read_text(f"{to}/snapshot.json"))["snapshot_id"] == newest.snapshot_id
    assert not storage.exists(f"{to}/.export-pending.json")  # the pending list goes once the stamp is written
    # bucket → local works too
    assert cli.main(["export", "--out", out, "--to", str(tmp_path / "d"), "--format", "json"]) == 0
    assert json.loads((tmp_path / "d" / "bias.json").read_text())[0]["judge"] == "j"


def test_refresh_and_export_entirely_on_a_bucket(emulator, tmp_path):
    """Battles read from gs://, state and snapshots on gs://, export to gs:// — and a second run adds nothing."""
    from biasboard.pipelines.refresh import RefreshOptions, refresh
    from biasboard.simulate import SimulationConfig, write_simulation

    sim = write_simulation(SimulationConfig(battles=2000, models=5, judges=2, days=2, bad_rows=0.01, seed=3), tmp_path)
    storage.copy_tree(str(sim / "battles"), f"{emulator}/logs/battles")
    truth = json.loads((sim / "truth.json").read_text())["counts"]
    glob, state, out = f"{emulator}/logs/battles/day=*/*.parquet", f"{emulator}/state", f"{emulator}/site"

    first = refresh(glob, state, out, ["--runner=FnApiRunner"], RefreshOptions(audit=False))
    assert first.aggregated_days == ["2024-01-01", "2024-01-02"]
    assert first.summary.counts.read == truth["rows"] and first.summary.counts.counted == truth["valid"]
    assert storage.exists(f"{state}/manifests/day=2024-01-02.json")
    snapshot = publish.resolve_snapshot(out)
    assert snapshot.startswith(f"{out}/snapshots/")
    assert {*publish.SNAPSHOT_FILES, "manifest.json"} <= set(storage.list_children(snapshot))

    second = refresh(glob, state, out, [], RefreshOptions(audit=False))
    assert second.aggregated_days == []
    assert storage.read_bytes(f"{second.published.path}/leaderboard.parquet") == storage.read_bytes(
        f"{snapshot}/leaderboard.parquet"
    )

    assert cli.main(["export", "--out", out, "--to", f"{emulator}/dashboards/lb", "--format", "csv"]) == 0
    exported = pl.read_csv(io.BytesIO(storage.read_bytes(f"{emulator}/dashboards/lb/leaderboard.csv")))
    assert exported.height == 5 and "rating_corrected" in exported.columns


def test_anonymous_access_only_for_an_emulator_or_no_auth(monkeypatch):
    """Real credential handling is untouched unless STORAGE_EMULATOR_HOST or --no_auth says otherwise."""
    from apache_beam.internal.gcp import auth

    monkeypatch.delenv(storage.EMULATOR_ENV, raising=False)
    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(auth._Credentials, "_credentials", None)
    assert storage.configure_gcs_auth() is False
    assert auth._Credentials._credentials_init is False  # Beam will still look credentials up
    assert storage.configure_gcs_auth(no_auth=True) is True
    assert auth._Credentials._credentials_init is True and auth._Credentials._credentials is None


@pytest.fixture
def no_credentials(monkeypatch):
    """A machine without Google Cloud credentials and no emulator: Beam has not looked yet; google-auth's lookup
    (counted) finds nothing, as on a laptop without ``gcloud auth application-default login``."""
    import google.auth
    from apache_beam.internal.gcp import auth
    from google.auth.exceptions import DefaultCredentialsError

    monkeypatch.delenv(storage.EMULATOR_ENV, raising=False)
    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(auth._Credentials, "_credentials", None)
    monkeypatch.setattr(storage, "_GCS_AUTH", storage._GcsAuth())
    lookups: list[int] = []

    def default(*args, **kwargs):
        lookups.append(1)
        raise DefaultCredentialsError("Your default credentials were not found. To set up ADC, see https://…")

    monkeypatch.setattr(google.auth, "default", default)
    return lookups


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--out", "OUT", "--to", "gs://dashboards/lb", "--format", "csv"],
        ["refresh", "--input", "OUT/none/*.parquet", "--state", "OUT/state", "--out", "gs://site/boards"],
    ],
)
def test_writing_to_a_bucket_without_credentials_is_refused_at_once(no_credentials, tmp_path, capsys, argv):
    """``export --to gs://…`` without credentials took 28 s (Beam retried google-auth 5 times, then went on
    anonymously) to fail on the bucket probe; now one lookup, then one line naming what is missing and how to give
    it.  Nothing is sent to the bucket (there is no endpoint here that would answer)."""
    out = tmp_path / "out"
    published = _publish(str(out), 0.0, 1)
    assert published.snapshot_id
    assert cli.main([str(out) if a == "OUT" else a.replace("OUT", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    flag, path = argv[3:5] if argv[0] == "export" else argv[-2:]
    assert err.strip().splitlines() == [
        f"biasboard {argv[0]}: error: {flag} {path}: no Google Cloud credentials to write with (Your default "
        "credentials were not found): set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file or run "
        "'gcloud auth application-default login' (an emulator: set STORAGE_EMULATOR_HOST=http://HOST:PORT)"
    ], err
    assert no_credentials == [1], "one lookup, not Beam's five"


def test_credentials_found_are_left_to_beam_and_none_found_is_anonymous_at_once(no_credentials, monkeypatch):
    """Found: Beam's cache is untouched, so Beam looks them up itself (impersonation, scopes) as before.  None found:
    Beam's cache says anonymous (its answer after the retries, without them), and a read may still go ahead."""
    import google.auth
    from apache_beam.internal.gcp import auth

    assert storage.gcs_credentials_missing() == "Your default credentials were not found"
    assert auth._Credentials._credentials_init is True and auth._Credentials._credentials is None
    assert storage.gcs_credentials_missing() == "Your default credentials were not found" and no_credentials == [1]

    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(google.auth, "default", lambda *args, **kwargs: (object(), "a-project"))
    assert storage.gcs_credentials_missing() is None
    assert auth._Credentials._credentials_init is False  # Beam will look them up, as without this check
    monkeypatch.setenv(storage.EMULATOR_ENV, "http://127.0.0.1:9")
    monkeypatch.setattr(google.auth, "default", lambda *args, **kwargs: pytest.fail("no lookup for an emulator"))
    assert storage.gcs_credentials_missing() is None


def test_the_audit_sum_and_its_cache_on_a_bucket(emulator, tmp_path):
    """The audit's stored days and their cached sum on gs:// (the cache's order pairs are streamed to and
    read back from the bucket): the +1 day sum reads the cache and the new day, and writes a full sum's files."""
    from biasboard.simulate import SimulationConfig, write_simulation
    from biasboard.transforms import audit, read

    config = SimulationConfig(battles=1500, models=5, judges=3, days=3, both_orders=True, prompts=30, seed=4)
    logs = write_simulation(config, tmp_path / "sim")
    inputs = read.list_input_days(str(logs / "battles" / "day=*" / "*.parquet"))
    days = sorted(inputs)
    days_dir = f"{emulator}/state/audit_days"
    audit_fn = audit.AuditDayFn(days_dir, read.load_family_map(None), None)
    for day in days:
        list(audit_fn.process((day, inputs[day], f"k-{day}")))
    keys = {day: f"k-{day}" for day in days}
    audit.write_stored_sum(days[:-1], days_dir, f"{emulator}/first", {d: keys[d] for d in days[:-1]})
    cached = audit.audit_cache.read_cache(days_dir, keys)
    assert cached is not None and sorted(cached.days) == days[:-1]
    audit.write_stored_sum(days, days_dir, f"{emulator}/cached", keys)
    cached = audit.audit_cache.read_cache(days_dir, keys)
    assert cached is not None and sorted(cached.days) == days
    audit.write_stored_sum(days, days_dir, str(tmp_path / "full"))
    for path in sorted((tmp_path / "full").iterdir()):
        assert storage.read_bytes(f"{emulator}/cached/{path.name}") == path.read_bytes(), path.name


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_sum_that_fails_leaves_no_cache_file_and_nothing_to_upload(emulator, tmp_path, monkeypatch, where):
    """The cache's order pairs are streamed to their file as the sum goes: a sum that failed half way left the file
    open, and the garbage collector later finished it — on a bucket, a partial Parquet uploaded after the job had
    failed (or ~30 s of retries at exit when storage was gone).  Now the file is given up with the sum."""
    import gc

    from biasboard.simulate import SimulationConfig, write_simulation
    from biasboard.transforms import audit, audit_cache, read

    config = SimulationConfig(battles=1500, models=5, judges=3, days=2, both_orders=True, prompts=30, seed=4)
    inputs = read.list_input_days(str(write_simulation(config, tmp_path / "sim") / "battles" / "day=*" / "*.parquet"))
    days = sorted(inputs)
    keys = {day: f"k-{day}" for day in days}
    days_dir = str(tmp_path / "audit_days") if where == "local" else f"{emulator}/failed-sum/audit_days"
    audit_fn = audit.AuditDayFn(days_dir, read.load_family_map(None), None)
    for day in days:
        list(audit_fn.process((day, inputs[day], keys[day])))
    real_slices = audit._judge_slices

    def failing_slices(pairs):
        for frame in real_slices(pairs):  # the cache file is open and has been written to
            yield frame
            raise OSError("disk full")

    monkeypatch.setattr(audit, "_judge_slices", failing_slices)
    with pytest.raises(OSError, match="disk full"):
        audit.write_stored_sum(days, days_dir, str(tmp_path / "out"), keys)
    gc.collect()
    cache = storage.join(days_dir, audit_cache.SUM_CACHE)
    assert [f.path for f in storage.list_files(cache)] == []
    monkeypatch.setattr(audit, "_judge_slices", real_slices)  # the next sum writes its cache as ever
    audit.write_stored_sum(days, days_dir, str(tmp_path / "out"), keys)
    assert sorted(audit_cache.read_cache(days_dir, keys).days) == days


def test_backfill_goes_anonymous_on_an_emulator_as_every_job_does(emulator, tmp_path):
    """backfill alone skipped the shortcut: ~25 s of Beam's credential retries and four tracebacks on stderr per run,
    and 52 lines before a missing bucket's one-line error.  In a process of its own (the shortcut is per process)."""
    import os
    import subprocess
    import sys

    from biasboard.simulate import SimulationConfig, write_simulation

    sim = write_simulation(SimulationConfig(battles=600, models=4, judges=2, days=1, seed=6), tmp_path)
    storage.copy_tree(str(sim / "battles"), f"{emulator}/bf-logs/battles")
    argv = [sys.executable, "-m", "biasboard.pipelines.cli", "backfill", "--input"]
    argv += [f"{emulator}/bf-logs/battles/day=*/*.parquet", "--state", f"{emulator}/bf-state"]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GCS access is anonymous" in done.stderr and "Traceback" not in done.stderr
    assert storage.exists(f"{emulator}/bf-state/manifests/day=2024-01-01.json")


def test_an_input_on_a_missing_bucket_says_so_in_one_line(emulator, tmp_path, capsys):
    """It was a 369-character dump of Beam's listing error; the state's and out's buckets already said this."""
    glob = "gs://no-such-bucket/logs/day=*/*.parquet"
    jobs = {
        "refresh": ["refresh", "--input", glob, "--state", f"{emulator}/m/state", "--out", f"{emulator}/m/site"],
        "audit": ["audit", "--input", glob, "--out", str(tmp_path / "audit")],
        "backfill": ["backfill", "--input", glob, "--state", f"{emulator}/m/bf"],
    }
    for job, argv in jobs.items():
        assert cli.main(argv) == 2, job
        err = capsys.readouterr().err.strip()
        assert err == f"biasboard {job}: error: --input {glob}: bucket no-such-bucket does not exist", err


def test_a_glob_of_import_folders_on_a_bucket(emulator, tmp_path):
    """A bucket has no folders, only objects named by path: ``gs://…/imp/*/battles`` matches no object, and is read
    as the folders below which objects lie, as locally (tests/test_import_folders.py), with each import's rejections
    and its benchmark checked."""
    from biasboard.schemas.errors import InputError
    from biasboard.transforms.read import import_rejections, match_files
    from test_import_folders import pba_import

    pba_import(tmp_path / "imp" / "judge-a", "judge-a", unjudged=2)
    pba_import(tmp_path / "imp" / "judge-b", "judge-b")
    storage.copy_tree(str(tmp_path / "imp"), f"{emulator}/imp")
    imp = f"{emulator}/imp"
    for glob in (f"{imp}/*/battles", f"{imp}/*"):
        assert [f.path for f in match_files(glob)] == [
            f"{imp}/judge-{j}/battles/day=2000-01-01/part-00000.parquet" for j in "ab"
        ], glob
        assert [(r.path, r.rejected_total) for r in import_rejections([("--input", glob)])] == [
            (f"{imp}/judge-a/import_dead_letters.parquet", 2),
            (f"{imp}/judge-b/import_dead_letters.parquet", 0),
        ], glob
    pba_import(tmp_path / "dev" / "judge-a", "judge-a", "DevBench")
    storage.copy_tree(str(tmp_path / "dev" / "judge-a"), f"{imp}/judge-dev")
    with pytest.raises(InputError, match=f"2 benchmarks .*{imp}/judge-dev/battles"):
        match_files(f"{imp}/*/battles")


def test_a_glob_of_import_folders_on_a_bucket_skips_the_hidden_ones(emulator, tmp_path):
    """As locally (tests/test_import_folders.py): ``gs://…/imp/*/battles`` skips ``imp/_old/battles``, reads it when
    the glob spells the ``_``, and when every folder it matches is hidden says so rather than 'no input files match'
    (a bucket glob of folders matches no object, so the hidden files below them went unseen)."""
    from biasboard.schemas.errors import InputError
    from biasboard.transforms.read import match_files
    from test_import_folders import pba_import

    pba_import(tmp_path / "imp" / "judge-a", "judge-a")
    pba_import(tmp_path / "imp" / "_old", "judge-old")
    storage.copy_tree(str(tmp_path / "imp"), f"{emulator}/hid")
    hid, part = f"{emulator}/hid", "battles/day=2000-01-01/part-00000.parquet"
    assert [f.path for f in match_files(f"{hid}/*/battles")] == [f"{hid}/judge-a/{part}"]
    assert [f.path for f in match_files(f"{hid}/_*/battles")] == [f"{hid}/_old/{part}"]
    storage.delete_tree(f"{hid}/judge-a")
    with pytest.raises(InputError, match=r"matches only hidden files .*_old/battles/.*spell the '_'"):
        match_files(f"{hid}/*/battles")


def test_a_glob_of_files_on_a_bucket_names_the_folders_beside_them_it_does_not_read(emulator, caplog):
    """A bucket's listing has no folders, so the warning that a glob of files leaves ``day=D/sub/`` out never fired
    there; the folders are now found from the files below the glob's prefix, on every file system alike."""
    logs = f"{emulator}/skipped/logs"
    for path, rows in ((f"{logs}/day=2024-01-01/sub/p.parquet", 4), (f"{logs}/day=2024-01-02/p.parquet", 3)):
        buffer = io.BytesIO()
        pl.DataFrame({"battle_id": [str(i) for i in range(rows)]}).write_parquet(buffer)
        storage.write_bytes(path, buffer.getvalue())
    with caplog.at_level("WARNING", logger="biasboard.transforms.read"):
        assert [m.path for m in read.resolve_input(f"{logs}/day=*/*").files] == [f"{logs}/day=2024-01-02/p.parquet"]
        assert len(read.resolve_input(f"{logs}/**").files) == 2
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].endswith(
        f"1 folder(s) it also matches hold Parquet files that are not read: {logs}/day=2024-01-01/sub (give a glob "
        "that reaches into them, or the folder itself)"
    )
