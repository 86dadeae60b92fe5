"""The distributed path: the same refresh on Beam's portable job service with external workers,
and a Dataflow job built offline (dry run; template staged on a GCS emulator) through ``setup.py``.

Flink and Spark runners need job-server jars this machine cannot download; Beam's own portable
job service speaks the same Job API, and the external worker pool starts SDK workers as separate
processes, as a cluster's task managers would.  Nothing here is mocked.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import publish, storage
from gcs_emulator import VENV_BIN, emulated_gcs, free_port, wait_for_port

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SIM = SimulationConfig(battles=2000, models=5, judges=2, days=2, bad_rows=0.01, seed=9)
NO_AUDIT = RefreshOptions(audit=False)
DATAFLOW = ["--runner=DataflowRunner", "--project=test-project", "--region=us-central1"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return write_simulation(SIM, tmp_path_factory.mktemp("sim"))


def _glob(root: Path) -> str:
    return str(root / "battles" / "day=*" / "*.parquet")


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as sink:
        return subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop a service and the SDK workers it spawned (its own process group, which we created)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def portable_cluster(tmp_path_factory):
    """Beam's job service and an external worker pool on loopback; yields (job port, worker port, worker log)."""
    logs = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_GCE_CHECK": "true"}
    job_port, worker_port = free_port(), free_port()
    py = sys.executable
    job_service = _start(
        [py, "-m", "apache_beam.runners.portability.local_job_service_main", f"--port={job_port}"],
        logs / "job_service.log",
        env,
    )
    worker_pool = _start(
        [py, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={worker_port}"],
        logs / "worker_pool.log",
        env,
    )
    try:
        wait_for_port(job_port, job_service)
        wait_for_port(worker_port, worker_pool)
        yield job_port, worker_port, logs / "worker_pool.log"
    finally:
        _stop(worker_pool)
        _stop(job_service)


@pytest.mark.slow
def test_refresh_on_the_portable_runner_with_external_workers(sim, tmp_path, portable_cluster):
    job_port, worker_port, worker_log = portable_cluster
    portable = [
        "--runner=PortableRunner",
        f"--job_endpoint=localhost:{job_port}",
        "--environment_type=EXTERNAL",
        f"--environment_config=localhost:{worker_port}",
    ]
    remote = refresh(_glob(sim), str(tmp_path / "state-p"), str(tmp_path / "out-p"), portable, NO_AUDIT)
    local = refresh(_glob(sim), str(tmp_path / "state-l"), str(tmp_path / "out-l"), ["--runner=FnApiRunner"], NO_AUDIT)
    assert remote.aggregated_days == local.aggregated_days == ["2024-01-01", "2024-01-02"]
    # the aggregation ran in SDK worker processes started by the pool, not in this one
    assert "Starting worker" in worker_log.read_text()
    manifest = publish.read_snapshot_manifest(remote.published.path)
    assert manifest["options"]["beam"]["runner"] == "PortableRunner"
    assert manifest["metrics"]["this_run"]["battles_read"] == remote.summary.counts.read
    for name in ("leaderboard.parquet", "bias.parquet", "summary.json"):
        assert (Path(remote.published.path) / name).read_bytes() == (Path(local.published.path) / name).read_bytes()


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    with emulated_gcs("dataflow-staging", tmp_path_factory.mktemp("gcs") / "emulator.log") as root:
        yield root


def _sdist_members(tarball: bytes) -> set[str]:
    """Paths inside an sdist, without its top folder (``biasboard-0.1.0/``)."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as handle:
        return {"/".join(name.split("/")[1:]) for name in handle.getnames()}


SHIPPED = {"setup.py", "pipelines/refresh.py", "transforms/ingest.py", "transforms/cells.py", "schemas/cells.py"}


@pytest.mark.slow
def test_dataflow_dry_run_builds_the_job_with_the_package(sim, tmp_path, bucket):
    from apache_beam.portability.api import beam_runner_api_pb2

    args = [*DATAFLOW, f"--temp_location={bucket}/tmp", f"--setup_file={PROJECT_ROOT / 'setup.py'}", "--dry_run=True"]
    outcome = refresh(_glob(sim), f"{bucket}/state", f"{bucket}/out", args, NO_AUDIT)
    assert outcome.published is None and outcome.reason == "--dry_run"
    assert publish.latest_snapshot_id(f"{bucket}/out") is None  # a dry run publishes nothing
    job = outcome.job.job
    names = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert "AggregateDays/AggregateDay" in names
    staged = {}
    for env in job.proto_pipeline.components.environments.values():
        for dep in env.dependencies:
            role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
            staged[role.staged_name] = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
    assert "workflow.tar.gz" in staged, f"setup.py was not packaged: {sorted(staged)}"
    assert _sdist_members(Path(staged["workflow.tar.gz"]).read_bytes()) >= SHIPPED


@pytest.mark.slow
def test_dataflow_template_stages_the_package_on_the_bucket(sim, tmp_path, bucket):
    template = f"{bucket}/templates/refresh.json"
    args = [
        *DATAFLOW,
        f"--temp_location={bucket}/tmp",
        f"--staging_location={bucket}/staging",
        f"--template_location={template}",
        f"--setup_file={PROJECT_ROOT / 'setup.py'}",
    ]
    outcome = refresh(_glob(sim), f"{bucket}/state", f"{bucket}/out", args, NO_AUDIT)
    assert outcome.published is None and outcome.reason == "--template_location"
    spec = json.loads(storage.read_text(template))
    assert spec["environment"]["sdkPipelineOptions"]["options"]["setup_file"].endswith("setup.py")
    tarballs = [f.path for f in storage.list_files(f"{bucket}/staging") if f.path.endswith("/workflow.tar.gz")]
    assert len(tarballs) == 1
    assert _sdist_members(storage.read_bytes(tarballs[0])) >= SHIPPED
    assert not storage.exists(f"{bucket}/state/manifests/day=2024-01-01.json")  # nothing ran


@pytest.mark.slow
def test_relative_state_and_out_are_the_launchers_not_each_workers(sim, tmp_path, monkeypatch):
    """Relative ``--input``/``--state``/``--out`` went to the workers as given (a worker could not find the files the
    launcher had listed), so each SDK worker wrote the day cells under its
    own working directory and the launcher then said ``state: day … was not committed by the pipeline``.  The
    folders are the launcher's: resolved before the graph is built."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_GCE_CHECK": "true"}
    elsewhere, here = tmp_path / "worker-cwd", tmp_path / "launcher-cwd"
    elsewhere.mkdir()
    here.mkdir()
    job_port, worker_port = free_port(), free_port()
    py = sys.executable
    job_cmd = [py, "-m", "apache_beam.runners.portability.local_job_service_main", f"--port={job_port}"]
    pool_cmd = [py, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={worker_port}"]
    with open(tmp_path / "cluster.log", "wb") as sink:
        job = subprocess.Popen(job_cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        pool = subprocess.Popen(
            pool_cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=elsewhere
        )
    try:
        wait_for_port(job_port, job)
        wait_for_port(worker_port, pool)
        monkeypatch.chdir(here)
        portable = [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{worker_port}",
        ]
        glob = os.path.relpath(_glob(sim), here)
        outcome = refresh(glob, "state", "out", portable, NO_AUDIT)
    finally:
        _stop(pool)
        _stop(job)
    assert outcome.aggregated_days == ["2024-01-01", "2024-01-02"]
    assert (here / "out" / "LATEST").exists() and (here / "state" / "manifests").is_dir()
    assert list(elsewhere.iterdir()) == []
