"""Smoke test of the evidence scripts: both run end to end in their smallest mode and write what the page needs.

The scripts are run as a user runs them (a subprocess, their own command line), into a temporary folder,
so the committed ``docs/evidence.md`` is never touched.  Beyond the shape of the outputs, two checks
can fail on a real regression of the bias-aware fit:

* on the smoke simulation (biased judges, corr(θ, length) = 0) the bias-aware hybrid's τ vs truth is
  not below naive Bradley–Terry's or below the oracle's by more than noise;
* the LLMFAO bias table has, for every judge, CIs that contain their estimates, and the written
  leaderboard reproduces the τ the page reports.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import PROJECT_ROOT, real_data

BENCH = PROJECT_ROOT / "bench"
sys.path.insert(0, str(BENCH))
from evidence_sections import read_section, replace_section  # noqa: E402


def _run(script: str, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH / script),
            *args,
            "--out-dir",
            str(tmp / "evidence"),
            "--evidence",
            str(tmp / "evidence.md"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PROJECT_ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_simulation_study_smoke(tmp_path):
    _run("simulation_study.py", "--smoke", "--workers", "1", tmp=tmp_path)
    page = tmp_path / "evidence.md"
    for section in ("simulation-run", "simulation-grid", "simulation-recovery", "simulation-sweep"):
        assert read_section(page, section), f"section {section} missing from the page"

    trials = pl.read_parquet(tmp_path / "evidence" / "simulation_trials.parquet")
    grid = trials.filter(pl.col("study") == "grid")
    expected = {"win_rate", "naive_bt", "mean_score", "hybrid_no_bias", "bias_aware", "oracle"}
    assert set(grid["estimator"].unique().to_list()) == expected
    assert grid.group_by("design", "trial").len()["len"].to_list() == [len(expected)] * 6  # 2 designs × 3 trials
    assert grid["tau"].is_between(-1, 1).all()
    fitted = grid.filter(pl.col("estimator").is_in(["naive_bt", "hybrid_no_bias", "bias_aware"]))
    assert fitted["converged"].null_count() == 0 and fitted["converged"].all()

    mean = grid.group_by("estimator").agg(pl.col("tau").mean())
    tau = dict(zip(mean["estimator"].to_list(), mean["tau"].to_list(), strict=True))
    # Judges with position, length and family biases: the bias-aware fit must not lose to naive BT on the
    # same data, and must not sit far below the oracle (judge effects at truth).  Margins are noise
    # allowances for six trials (the per-trial SD of τ is ≈ 0.03–0.05).
    assert tau["bias_aware"] >= tau["naive_bt"] - 0.02, tau
    assert tau["bias_aware"] >= tau["oracle"] - 0.05, tau
    assert tau["oracle"] > tau["win_rate"], tau

    sweep = pl.read_csv(tmp_path / "evidence" / "simulation_sweep.csv")
    assert sorted(sweep["corr_length"].unique().to_list()) == [0.0, 0.9]
    assert sweep["trials"].to_list() == [3] * 8  # 2 biases × 2 length settings × 2 correlations


def test_real_data_smoke(tmp_path):
    out = _run("real_data.py", "--smoke", "--data", str(real_data()), tmp=tmp_path)
    page = tmp_path / "evidence.md"
    body = read_section(page, "real-llmfao")
    assert body and "move toward crowd" in body
    assert read_section(page, "real-mtbench") is None  # not asked for: not written

    bias = pl.read_csv(tmp_path / "evidence" / "real_llmfao_bias.csv")
    assert set(bias["data"].unique().to_list()) == {"LLMFAO crowd", "LLMFAO gpt4", "LLMFAO gpt3"}
    shown = bias.filter(
        pl.col("enabled") & pl.col("effect").is_in(["position", "length", "affinity"]) & pl.col("ci_low").is_not_nan()
    )
    assert shown.height >= 6
    assert (shown["ci_low"] <= shown["estimate"]).all() and (shown["estimate"] <= shown["ci_high"]).all()

    boards = pl.read_csv(tmp_path / "evidence" / "real_llmfao_leaderboards.csv")
    gpt4 = boards.filter(pl.col("data") == "LLMFAO gpt4").drop_nulls(["rating_naive", "rating_corrected"])
    crowd = boards.filter(pl.col("data") == "LLMFAO crowd").select("model", pl.col("rating_naive").alias("crowd"))
    both = gpt4.join(crowd, on="model")
    assert both.height >= 50
    from biasboard.ranking.rank_stats import kendall_tau_b

    tau_naive = kendall_tau_b(both["rating_naive"].to_numpy(), both["crowd"].to_numpy())
    tau_corr = kendall_tau_b(both["rating_corrected"].to_numpy(), both["crowd"].to_numpy())
    # The page's numbers are the files' numbers (no second computation drifting from the first).
    assert f"{tau_naive:.3f} (±" in body and f"{tau_corr:.3f} (±" in body
    assert f"{tau_corr - tau_naive:+.3f}" in body
    assert np.isfinite(tau_naive) and 0.0 < tau_naive < 1.0
    assert "LLMFAO move toward crowd" in out.stdout


@pytest.mark.parametrize(
    ("script", "args", "section"),
    [
        ("real_data", ["--smoke", "--data", str(real_data())], "real-llmfao"),
        ("simulation_study", ["--smoke", "--workers", "1"], "simulation-grid"),
    ],
)
def test_a_smoke_run_leaves_the_committed_page_alone(script, args, section, tmp_path):
    """``--smoke`` without ``--evidence``/``--out-dir`` rewrote the committed ``docs/evidence.md`` (and
    ``docs/evidence/``) with a smoke run's numbers: running the smoke mode as docs/performance.md suggests
    replaced LLMFAO's real-data section (34 lines changed).  It now writes into a new temporary folder and says
    where, as ``reference_study.py`` and ``acquisition_study.py`` already did.  The script runs in its own process
    (its imports set thread variables) with its repository root pointed at ``tmp_path``, so the check cannot
    touch the real page either way."""
    code = (
        f"import sys; from pathlib import Path; sys.path.insert(0, {str(BENCH)!r}); import {script} as m; "
        f"m.ROOT = Path({str(tmp_path)!r}); raise SystemExit(m.main({args!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (tmp_path / "docs").exists()
    (page,) = re.findall(r"smoke run: page (\S+evidence\.md)", out.stdout)
    assert read_section(Path(page), section)


def test_sections_replace_in_place(tmp_path):
    name = "simulation-grid"
    page = tmp_path / "page.md"
    replace_section(page, name, "first")
    replace_section(page, "other", "kept")
    replace_section(page, name, "second")
    text = page.read_text()
    assert read_section(page, name) == "second" and "first" not in text
    assert read_section(page, "other") == "kept"


def test_grades_study_smoke(capsys):
    """``bench/grades_study.py --smoke``: a grades board's interval coverage, Laplace and bootstrap, in one table."""
    import grades_study

    assert grades_study.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    assert "θ bootstrap" in printed and "severity Laplace" in printed and "bootstrap B = 20" in printed
