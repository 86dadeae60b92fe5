"""Benchmark: importing a FastChat JSON log whose style counts are uniform vs the same log with one odd value.

The arena writes each style count as an object of sub-counts (``header_count_a: {"h1": 1, ...}``); a log that
writes one of them as a plain number on a single row makes pyarrow refuse the field, so the reader keeps that
count as text (:mod:`biasboard.importers.json_kinds`) and the importer reads it back
(:mod:`biasboard.importers.style_counts`).  Why measured side by side: one odd value among 200k records should
cost about what the uniform log costs, not a pass over every row's text.

Both files are generated here (N records, nested ``conv_metadata`` as the arena writes it), then imported with
``import_path("fastchat", ...)`` in a fresh process each (``benchlib``), interleaved ``--repeat`` times (the order
reversed every other round); the fastest wall time and the least CPU time of each are kept (on a shared
machine the least disturbed).

    python bench/json_import.py                     # 200k records, JSON array, 2 rounds
    python bench/json_import.py --records 50000 --layout lines --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchlib import child_command, peak_rss_mb, run_child

#: The count the odd file writes as a plain number on one row (every other row: an object of sub-counts).
ODD_FIELD = "header_count_a"


def _meta(i: int, side: str) -> dict:
    return {
        f"sum_assistant_{side}_tokens": 100 + i % 900,
        f"header_count_{side}": {f"h{k + 1}": (i >> k) % 2 for k in range(6)},
        f"list_count_{side}": {"ordered": i % 5, "unordered": i % 3},
        f"bold_count_{side}": {"**": i % 7, "__": i % 2},
    }


def records(n: int, odd: bool) -> list[dict]:
    """``n`` FastChat ``clean_battle`` records; with ``odd``, row ``n // 2`` writes :data:`ODD_FIELD` as a number."""
    out = [
        {
            "question_id": f"q{i}",
            "model_a": f"m{i % 20}",
            "model_b": f"m{(i * 7 + 3) % 20}",
            "winner": ("model_a", "model_b", "tie", "tie (bothbad)")[i % 4],
            "judge": f"u{i % 500}",
            "anony": True,
            "language": "English",
            "tstamp": 1.72e9 + i,
            "conv_metadata": {**_meta(i, "a"), **_meta(i * 3, "b")},
        }
        for i in range(n)
    ]
    if odd:
        meta = out[n // 2]["conv_metadata"]
        meta[ODD_FIELD] = sum(meta[ODD_FIELD].values())
    return out


def write(path: Path, rows: list[dict], layout: str) -> None:
    with path.open("w") as handle:
        if layout == "array":
            json.dump(rows, handle)
        else:
            handle.writelines(json.dumps(r) + "\n" for r in rows)


def child_import(path: str) -> dict:
    from biasboard.importers.registry import import_path

    start, cpu = time.perf_counter(), time.process_time()
    result = import_path("fastchat", path)
    return {
        "seconds": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "rows": result.rows.num_rows,
        "notes": len(result.notes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--layout", choices=["array", "lines"], default="array")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each file, interleaved; the fastest is kept")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps({**child_import(args.child), "peak_rss_mb": peak_rss_mb()}))
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench-json-import-"))
    suffix = ".json" if args.layout == "array" else ".jsonl"
    files = {name: work / f"{name}{suffix}" for name in ("uniform", "one-odd")}
    try:
        for name, path in files.items():
            write(path, records(args.records, odd=name == "one-odd"), args.layout)
        runs: dict[str, list[dict]] = {name: [] for name in files}
        for round_ in range(args.repeat):
            for name in list(files) if round_ % 2 == 0 else list(files)[::-1]:
                runs[name].append(run_child(child_command(__file__, "--child", str(files[name]))))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {
        name: {**min(found, key=lambda info: info["seconds"]), "cpu": min(info["cpu"] for info in found)}
        for name, found in runs.items()
    }
    assert best["uniform"]["rows"] == best["one-odd"]["rows"], best
    print(f"{args.records:,} records, {args.layout}, fastest of {args.repeat}, load {os.getloadavg()[0]:.1f}")
    for name, info in best.items():
        every = ", ".join(f"{run['seconds']:.2f}" for run in runs[name])
        print(
            f"  {name:8s} {info['seconds']:6.2f} s wall ({every}), {info['cpu']:6.2f} s CPU, "
            f"peak RSS {info['peak_rss_mb']:.0f} MB"
        )
    wall, cpu = (best["one-odd"][k] / best["uniform"][k] for k in ("seconds", "cpu"))
    print(f"  one-odd / uniform: {wall:.2f} wall, {cpu:.2f} CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
