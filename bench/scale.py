"""Benchmark: the whole ``biasboard refresh`` at arena scale, then with twice the history (issue 11, item 6).

What it runs: the real job (``biasboard refresh`` on the local FnApiRunner: read, aggregate per day, the
judge audit, the naive and bias-aware fits with the profile diagnostics, the report, publish) on
day-partitioned battle Parquet as a user has it, from an empty state, twice:

* **N**: 20M battles over 60 days, 400 models, 20 LLM judges and two human pools whose battles are each
  cast by one of 25,000 voters (``human-pool-K/vN``: 50,000 voter-judges, every voter its own judge);
* **2N**: the same models and judges, 120 days at the same rate: a user's history grows by days, so twice
  the data is twice the days.  The first 60 days of the 2N input are the N input's files (hard links:
  the simulator draws each day from its own seed), so the two runs differ only by the added history.

Each refresh runs in a fresh process (``--child``); printed per size: wall time, the refresh's own stage
times (its ``stage times`` log line), peak RSS of the refresh process (VmHWM) and of its whole process
tree (RSS of the process and every descendant summed, sampled every 0.1 s), and the ratios 2N / N.
Each run's RSS timeline is written beside its log (``out-N.rss.tsv``: every 0.1 s the tree, the process, its
anonymous and file-backed memory; once a second its anonymous memory in transparent huge pages).
Also printed: the CPU seconds (user + system) of the refresh's process tree, which a machine shared with other
work inflates far less than the wall time; the fit's merge of the stored cells (part of ``fit``); and the size
of the snapshot's JSON files.  Targets: time ratio ≤ 2.1, peak RSS flat (ratio ≈ 1).

Memory: at this shape the cells hardly merge (the full size's input holds 14.9M distinct cell keys at N, 23.8M
at 2N: voter-judges, and 400 models × length bins per LLM judge), so the cells grow with the history
and a refresh must not hold them; the table prints the peak tree RSS per cell of both runs and per added cell
(2N − N).  Since the cells merge by judge bucket on disk, the fit streams its shards and couplings from disk,
and each stage hands back what it freed, the refresh peaks in the streamed fit's solve at ~1.1 GB whatever the
history (at the full size 77 B per cell at N, 49 B at 2N; it was 1.2–1.4 KB per cell before the folds:
docs/performance.md, Scale).

Per run it also prints the peak tree RSS between consecutive log messages of the refresh, and (``--parts``,
on by default) the parts that hold cells-sized data measured on their own on the run's state, each in a fresh
process: the merge of the stored cells in memory (``load_cells``) and by judge bucket on disk
(``load_cells_by_judge``), and the audit's sum of the stored days (``write_stored_sum``) in memory and by
judge bucket — time, peak RSS and the RSS after the imports, N and 2N side by side, so a part whose memory is
bounded by a bucket shows a flat peak whatever the refresh's own peak is (the fit's, until it streams).

Data: the simulator (:func:`biasboard.simulate.write_simulation`) writes a day at a time; the voters are
assigned chunk by chunk with bench/fit.py's :func:`split_voters`, seeded per day, so memory stays one
chunk's.  ``--scale F`` multiplies battles and voters (models and LLM judges stay), e.g. ``--scale 0.25``
is 5M battles and 12,500 voters; ``--smoke`` is 200k battles, 40 models, 500 voters, 6 days (about a
minute).

``--grades R`` writes R single grades per battle beside the battles (the simulator's score files, graded by the
LLM judges) and gives them to refresh ``--scores``: the judge-blocked solver takes them (the graders' severities
among its globals, the prompts eliminated into them).

    .venv/bin/python bench/scale.py              # 20M then 40M battles (needs ~3 GB of disk under --work)
    .venv/bin/python bench/scale.py --scale 0.25
    .venv/bin/python bench/scale.py --smoke

Flags it does not know are given to each refresh as they are (``--help`` lists only its own): the docs' runs
use ``--diagnostics fast``, ``--judge-pool prefix:/``, ``--bootstrap 10`` and ``--reference 'human-pool-1/*'``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from benchlib import peak_rss_mb
from fit import split_voters

HERE = Path(__file__).resolve().parent
HUMAN_POOLS = 2
#: The refresh logs "stage times: read 0.12 s, pipeline 3.40 s, fit 2.10 s, report 0.31 s, publish 0.05 s".
STAGE_TIMES = re.compile(r"stage times: (.*)$", re.MULTILINE)
#: ... and "fit: 400 models, 50020 judges, 1234567 cells; ...".
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) INFO [\w.]+: (.*)$", re.MULTILINE)
FIT_LINE = re.compile(r"fit: (\d+) models, (\d+) judges, (\d+) cells")


def sizes(args: argparse.Namespace) -> dict:
    """The N run's shape from the options (the 2N run doubles the days)."""
    if args.smoke:
        return {
            "battles": 200_000, "models": 40, "llm_judges": args.llm_judges, "voters": min(500, args.voters), "days": 6,
            "grades": args.grades,
        }  # fmt: skip
    return {
        "battles": round(args.battles * args.scale),
        "models": args.models,
        "llm_judges": args.llm_judges,
        "voters": max(HUMAN_POOLS, round(args.voters * args.scale)),
        "days": args.days,
        "grades": args.grades,
    }


def generate(folder: Path, shape: dict, seed: int) -> None:
    """2N battles over 2·days days under ``folder/all``; ``folder/half`` holds the first ``days`` (hard links)."""
    from biasboard.simulate import SimulationConfig, write_simulation

    config = SimulationConfig(
        battles=2 * shape["battles"],
        models=shape["models"],
        judges=shape["llm_judges"] + HUMAN_POOLS,
        human_judges=HUMAN_POOLS,
        days=2 * shape["days"],
        seed=seed,
        self_battles=0.02,
        scores=shape["grades"],
    )
    per_pool = shape["voters"] // HUMAN_POOLS

    def voters(day: dt.date, chunk: int, battles):
        rng = np.random.default_rng(np.random.SeedSequence([seed, day.toordinal(), chunk]))
        return split_voters(battles, per_pool, rng)

    write_simulation(config, folder / "all", overwrite=True, relabel=voters)
    shutil.rmtree(folder / "half", ignore_errors=True)
    for kind in ("battles", "scores") if shape["grades"] else ("battles",):
        days = sorted(p for p in (folder / "all" / kind).iterdir() if p.name.startswith("day="))
        half = folder / "half" / kind
        for day in days[: shape["days"]]:
            (half / day.name).mkdir(parents=True)
            for part in day.iterdir():
                os.link(part, half / day.name / part.name)


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and all its descendants, summed (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21])  # pages
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


#: Columns of the RSS timeline each run writes beside its log (``out-N.rss.tsv``), one row per sample.
TIMELINE_COLUMNS = ("seconds", "tree_mb", "rss_mb", "anon_mb", "file_mb", "anon_huge_mb")
#: Samples between two reads of ``AnonHugePages`` (smaps_rollup walks the process's page tables: once a second).
HUGE_EVERY = 10


def process_memory_mb(pid: int, huge: bool) -> dict[str, float]:
    """A process's resident memory now by kind, in MB: all, anonymous, file-backed (``RssFile`` + ``RssShmem``)
    and, when ``huge``, the anonymous memory in transparent huge pages (``AnonHugePages``; else NaN)."""
    sizes = {"rss": 0.0, "anon": 0.0, "file": 0.0, "anon_huge": float("nan")}
    fields = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "RssShmem": "file"}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = fields.get(line.split(":", 1)[0])
            if key is not None:
                sizes[key] += int(line.split()[1]) / 1024
        if huge:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("AnonHugePages:"):
                    sizes["anon_huge"] = int(line.split()[1]) / 1024
    except OSError:  # the process has ended
        pass
    return sizes


def run_refresh(data: Path, state: Path, out: Path, beam_args: list[str]) -> dict:
    """One ``biasboard refresh`` in a fresh process: wall time, stage times, peak RSS (process and tree).

    Every sample is also written to ``out``'s RSS timeline (:data:`TIMELINE_COLUMNS`, tab-separated, seconds
    from the start): what the peaks alone do not show, such as the anonymous memory's floor between phases or
    how much of it is in transparent huge pages.
    """
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(data), str(state), str(out), *beam_args]
    env = {**os.environ, "NO_GCE_CHECK": "true"}
    log = out.with_suffix(".log")
    peak = [0.0, 0.0, 0.0]  # MB, wall-clock time of the peak, the refresh process's file-backed MB then
    samples: list[tuple[float, float]] = []  # (wall-clock time, tree RSS MB)
    with open(log, "w") as sink, open(out.with_suffix(".rss.tsv"), "w") as timeline:
        timeline.write("\t".join(TIMELINE_COLUMNS) + "\n")
        start, cpu_start = time.perf_counter(), _children_cpu_s()
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, text=True)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                rss = tree_rss_mb(proc.pid)
                samples.append((time.time(), rss))
                own = process_memory_mb(proc.pid, huge=len(samples) % HUGE_EVERY == 1)
                timeline.write(f"{time.perf_counter() - start:.1f}\t{rss:.0f}\t" + "\t".join(
                    f"{own[k]:.0f}" for k in ("rss", "anon", "file", "anon_huge")) + "\n")  # fmt: skip
                if rss > peak[0]:
                    peak[:] = [rss, time.time(), own["file"]]

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        seconds = time.perf_counter() - start
        cpu = _children_cpu_s() - cpu_start
        done.set()
        sampler.join()
    text = log.read_text()
    if code != 0:
        raise SystemExit(f"refresh failed ({code}); log {log}:\n{text[-3000:]}")
    child = json.loads(text.strip().splitlines()[-1])
    stages = STAGE_TIMES.findall(text)
    parsed = dict(
        (name, float(value)) for name, value in re.findall(r"([a-z_]+) ([0-9.]+) s", stages[-1] if stages else "")
    )
    fitted = FIT_LINE.findall(text)
    models, judges, cells = (int(v) for v in fitted[-1]) if fitted else (0, 0, 0)
    return {
        "peak_during": _last_message_before(text, peak[1]),
        "phase_peaks": phase_peaks(text, samples),
        "seconds": seconds,
        "cpu_s": cpu,
        "stages": parsed,
        "models": models,
        "judges": judges,
        "cells": cells,
        "peak_rss_mb": child["peak_rss_mb"],
        "tree_rss_mb": peak[0],
        "file_rss_mb": peak[2],
    }


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (the refresh and anything it started)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def phase_peaks(log: str, samples: list[tuple[float, float]]) -> list[tuple[str, float]]:
    """The peak tree RSS between each log message and the next (what the job held in each phase it logs)."""
    stamps = [
        (dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), message)
        for stamp, message in LOG_LINE.findall(log)
    ]
    peaks: dict[int, float] = {}
    for when, rss in samples:
        index = sum(1 for t, _ in stamps if t <= when) - 1  # -1: before the first message
        peaks[index] = max(peaks.get(index, 0.0), rss)
    return [("start" if i < 0 else stamps[i][1], mb) for i, mb in sorted(peaks.items())]


#: The refresh's parts that hold cells-sized data, measured on their own on each run's state (``--parts``), each
#: in a fresh process: the merge of the stored cells in memory (``load_cells``, what the fit reads today) and by
#: judge bucket on disk (``load_cells_by_judge``, every bucket's table read once); the audit's sum of the stored
#: days' partials with its files written (``write_stored_sum``), in memory and by judge bucket.
PARTS: dict[str, dict[str, str]] = {
    "merge in memory": {},
    "merge by judge": {},
    "audit sum in memory": {"BIASBOARD_BUCKET_ROWS": str(10**15)},  # one bucket: the in-memory fold
    "audit sum by judge": {},
}


def run_part(name: str, state: Path) -> dict:
    """One of :data:`PARTS` on ``state`` in a fresh process: seconds, peak RSS, RSS after the imports."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", name, str(state)]
    env = {**os.environ, "NO_GCE_CHECK": "true", **PARTS[name]}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"part {name!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def part_child(name: str, state: str) -> int:
    """Run part ``name`` on ``state`` in this process and print its measurements as one JSON line."""
    import biasboard

    biasboard.hand_back_polars_memory()  # as the refresh command does, before polars is imported
    from biasboard.transforms import audit
    from biasboard.transforms import state as st

    base = _rss_mb()
    start = time.perf_counter()
    rows, buckets = 0, 1
    if name == "merge in memory":
        rows = st.load_cells(state, dictionary=True).num_rows
    elif name == "merge by judge":
        merged = st.load_cells_by_judge(state)
        rows, buckets = sum(t.num_rows for t in merged.tables()), merged.n_buckets
    else:
        days_dir = str(Path(state) / audit.DAY_PARTIALS)
        days = sorted(p.name[len("day=") :] for p in Path(days_dir).iterdir() if p.name.startswith("day="))
        with tempfile.TemporaryDirectory() as out:
            audit.write_stored_sum(days, days_dir, out)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "base_mb": base, "rows": rows,
                      "buckets": buckets}))  # fmt: skip
    return 0


def _rss_mb() -> float:
    """This process's resident set now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _last_message_before(log: str, when: float) -> str:
    """The last log message written before ``when`` (what the job was doing at its memory peak)."""
    last = "start"
    for stamp, message in LOG_LINE.findall(log):
        if dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() > when:
            break
        last = message
    return last


def child(data: str, state: str, out: str, beam_args: list[str]) -> int:
    """The refresh itself, in this process, through the console script's entry point."""
    from biasboard.pipelines.cli import main as cli_main

    code = cli_main(["refresh", "--input", data, "--state", state, "--out", out, *beam_args])
    print(json.dumps({"code": code, "peak_rss_mb": peak_rss_mb()}))
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--battles", type=int, default=20_000_000, help="N (the run also does 2N)")
    parser.add_argument("--models", type=int, default=400)
    parser.add_argument("--llm-judges", type=int, default=20)
    parser.add_argument("--voters", type=int, default=50_000, help="voter-judges over the two human pools")
    parser.add_argument("--days", type=int, default=60, help="days of the N run (2N: twice as many)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply battles and voters by this")
    parser.add_argument(
        "--smoke", action="store_true", help="200k battles, 40 models, 500 voters (fewer with --voters), 6 days"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--grades", type=float, default=0.0,
        help="single grades per battle, written beside the battles and given to refresh --scores (0: none)",
    )  # fmt: skip
    parser.add_argument("--work", help="folder for data, states and snapshots (default: a temp folder, removed)")
    parser.add_argument("--reuse-data", action="store_true", help="keep data already generated under --work")
    parser.add_argument(
        "--parts", action=argparse.BooleanOptionalAction, default=True,
        help="after each refresh, measure the merge and the audit's sum on its state on their own (PARTS)",
    )  # fmt: skip
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--part", nargs=2, help=argparse.SUPPRESS)
    args, beam_args = parser.parse_known_args(argv)
    if args.child:
        return child(*args.child, beam_args)
    if args.part:
        return part_child(*args.part)

    shape = sizes(args)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        t0 = time.perf_counter()
        data = work / "data"
        if not (args.reuse_data and (data / "all" / "truth.json").exists() and (data / "half").exists()):
            generate(data, shape, args.seed)
        generated = time.perf_counter() - t0
        for label, folder, days in (("N", "half", shape["days"]), ("2N", "all", 2 * shape["days"])):
            battles = data / folder / "battles"
            disk = sum(p.stat().st_size for p in battles.rglob("*.parquet")) / 2**20
            state, out = work / f"state-{label}", work / f"out-{label}"
            for path in (state, out):
                shutil.rmtree(path, ignore_errors=True)
            grades = ["--scores", str(data / folder / "scores" / "day=*" / "*.parquet")] if shape["grades"] else []
            result = run_refresh(battles, state, out, [*grades, *beam_args])
            summary = json.loads(_latest_summary(out))
            result["json_mb"] = _json_mb(out)
            result["parts"] = {name: run_part(name, state) for name in PARTS} if args.parts else {}
            rows.append((label, days, disk, summary, result))
            print(f"{label}: {result['seconds']:.1f} s, peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(shape, rows, generated)
    return 0


def _latest_snapshot(out: Path) -> Path:
    from biasboard.transforms import publish

    latest = publish.latest_snapshot_id(str(out))
    assert latest is not None, f"{out}: nothing published"
    return Path(publish.snapshot_dir(str(out), latest))


def _latest_summary(out: Path) -> str:
    return (_latest_snapshot(out) / "summary.json").read_text()


def _json_mb(out: Path) -> float:
    """Size of the published snapshot's JSON files (summary, bias, audit), which grow with the judges they list."""
    return sum(p.stat().st_size for p in _latest_snapshot(out).glob("*.json") if p.name != "manifest.json") / 2**20


def print_table(shape: dict, rows: list[tuple], generated: float) -> None:
    """The sizes, times and memory of both runs, and the 2N / N ratios against the targets."""
    print(
        f"\nscale benchmark: biasboard refresh from an empty state, FnApiRunner, {os.cpu_count()} cores; "
        f"{shape['models']} models, {shape['llm_judges']} LLM judges + {shape['voters']:,} voter-judges "
        f"(data generated in {generated:.0f} s)"
    )
    stage_names = [n for n in ("read", "pipeline", "fit", "merge", "report", "publish") if n in rows[0][4]["stages"]]
    header = (
        f"{'run':>3} {'battles':>11} {'days':>4} {'MB':>6} {'judges':>7} {'cells':>10} | {'time s':>7} "
        + " ".join(f"{name:>8}" for name in stage_names)
        + f" | {'CPU s':>7} | {'RSS MB':>7} {'tree MB':>7} | {'JSON MB':>7}"
    )
    print(header)
    print("-" * len(header))
    for label, days, disk, summary, r in rows:
        counts = summary["counts"]
        print(
            f"{label:>3} {counts['counted']:>11,} {days:>4} {disk:>6.0f} {r['judges']:>7,} "
            f"{r['cells']:>10,} | {r['seconds']:>7.1f} "
            + " ".join(f"{r['stages'].get(name, float('nan')):>8.1f}" for name in stage_names)
            + f" | {r['cpu_s']:>7.1f} | {r['peak_rss_mb']:>7.0f} {r['tree_rss_mb']:>7.0f} | {r['json_mb']:>7.1f}"
        )
    for label, _, _, _, r in rows:
        print(
            f"{label}: tree RSS peaked after: {r['peak_during'][:110]} "
            f"({r['file_rss_mb']:.0f} MB of it file-backed in the refresh's process)"
        )
    for label, _, _, _, r in rows:
        phases = "; ".join(f"{message[:48]} {mb:.0f}" for message, mb in r["phase_peaks"])
        print(f"{label}: tree RSS peak (MB) after each log message: {phases}")
    print_parts(rows)
    if len(rows) == 2:
        a, b = rows[0][4], rows[1][4]
        print(
            f"2N / N: time {b['seconds'] / a['seconds']:.2f} (target <= 2.10), CPU {b['cpu_s'] / a['cpu_s']:.2f}, "
            f"peak RSS "
            f"{b['peak_rss_mb'] / a['peak_rss_mb']:.2f}, tree {b['tree_rss_mb'] / a['tree_rss_mb']:.2f} (target: flat)"
        )
        per_cell = [r["tree_rss_mb"] * 2**20 / max(r["cells"], 1) for r in (a, b)]
        added = (b["tree_rss_mb"] - a["tree_rss_mb"]) * 2**20 / max(b["cells"] - a["cells"], 1)
        print(f"peak tree RSS per cell: N {per_cell[0]:.0f} B, 2N {per_cell[1]:.0f} B; per added cell {added:.0f} B")
        print(
            "stage ratios: "
            + ", ".join(f"{k} {b['stages'][k] / a['stages'][k]:.2f}" for k in a["stages"] if a["stages"][k] > 0)
        )


def print_parts(rows: list[tuple]) -> None:
    """The parts measured on each run's state (:data:`PARTS`): time and peak RSS at N and 2N, and the ratios."""
    if not rows or not rows[0][4]["parts"]:
        return
    labels = [label for label, *_ in rows]
    print("\nparts on each run's state, a fresh process each (peak RSS = VmHWM; 'base': RSS after the imports)")
    header = f"{'part':<20} " + " ".join(f"{lab + ' s':>8} {lab + ' MB':>8} {lab + ' base':>8}" for lab in labels)
    if len(rows) == 2:
        header += f" | {'time 2N/N':>9} {'RSS 2N/N':>8} {'RSS-base 2N/N':>13}"
    print(header)
    print("-" * len(header))
    for name in rows[0][4]["parts"]:
        parts = [r["parts"][name] for *_, r in rows]
        line = f"{name:<20} " + " ".join(
            f"{p['seconds']:>8.1f} {p['peak_rss_mb']:>8.0f} {p['base_mb']:>8.0f}" for p in parts
        )
        if len(parts) == 2:
            a, b = parts
            added = (b["peak_rss_mb"] - b["base_mb"]) / max(a["peak_rss_mb"] - a["base_mb"], 1e-9)
            line += f" | {b['seconds'] / a['seconds']:>9.2f} {b['peak_rss_mb'] / a['peak_rss_mb']:>8.2f} {added:>13.2f}"
        if name == "merge by judge":
            line += "   (buckets: " + ", ".join(str(p["buckets"]) for p in parts) + ")"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
