"""Lint is part of the test command: ``ruff check``, ``ruff format --check`` and mypy must pass.

mypy's packages and options are configured in pyproject.toml.

Both run as subprocesses from the repository root with this interpreter's tools, so the suite checks
exactly what a developer's ``ruff check .`` and ``mypy`` see; a failure shows the tool's own report.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Where the top-level folders are linked under the ``biasboard`` name that the code imports them by.
LINKS = ROOT / ".mypy_cache" / "links" / "biasboard"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(args[0]) is None:
        pytest.fail(f"{args[0]} is not installed in this venv: run `pip install -e '.[test]'` (the test extras)")
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _link_packages() -> None:
    """Link ``biasboard/__init__.py`` and every top-level package folder into ``LINKS``.

    setup.py installs ``schemas/`` as ``biasboard.schemas`` (``package_dir``); the editable install
    resolves that with an import hook mypy cannot follow, so mypy is pointed (``mypy_path``) at these
    links instead.  They are remade on each run, so folders added or moved are picked up.
    """
    LINKS.mkdir(parents=True, exist_ok=True)
    for old in LINKS.iterdir():
        old.unlink()
    targets = [ROOT / "biasboard" / "__init__.py"]
    targets += sorted(
        p for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name not in ("biasboard", "tests")
    )
    for target in targets:
        (LINKS / target.name).symlink_to(os.path.relpath(target, LINKS))


def test_ruff_check_passes() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, f"ruff check . failed:\n{result.stdout}{result.stderr}"


def test_ruff_format_check_passes() -> None:
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, (
        f"ruff format --check . failed (run `ruff format .`):\n{result.stdout}{result.stderr}"
    )


def test_mypy_passes() -> None:
    _link_packages()
    result = _run("mypy")
    report = (result.stdout + result.stderr).replace(f"{LINKS.relative_to(ROOT)}{os.sep}", "")
    assert result.returncode == 0, f"mypy failed (packages and options in pyproject.toml [tool.mypy]):\n{report}"
