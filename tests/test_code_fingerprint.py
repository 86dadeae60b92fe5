"""The code fingerprint that keys snapshot reuse covers every biasboard package (the refit is in test_refresh)."""

from __future__ import annotations

from pathlib import Path

from biasboard.pipelines.code_fingerprint import code_fingerprint

import biasboard

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_fingerprinted():
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"biasboard", "tests"}
    assert set(biasboard.SUBPACKAGES) == folders


def test_fingerprint_is_stable_and_reads_the_sources():
    assert code_fingerprint.__wrapped__() == code_fingerprint() and len(code_fingerprint()) == 64
