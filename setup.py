"""Packaging for biasboard.

The repository keeps one top-level folder per layer (``pipelines/``,
``transforms/``, ``schemas/``, ``ranking/`` ...) but installs every folder under the
``biasboard`` namespace (``biasboard.pipelines`` ...), so that generic names such
as ``schemas`` never collide with other distributions on a Dataflow, Flink or
Spark worker.  The same file is what ``--setup_file ./setup.py`` ships to remote
workers.
"""

import ast
from pathlib import Path

from setuptools import setup


def _subpackages() -> tuple[str, ...]:
    """``biasboard.SUBPACKAGES``, read from biasboard/__init__.py's source (the package is not importable yet)."""
    tree = ast.parse((Path(__file__).resolve().parent / "biasboard" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SUBPACKAGES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("biasboard/__init__.py defines no SUBPACKAGES")


SUBPACKAGES = _subpackages()

setup(
    name="biasboard",
    version="0.1.0",
    description="Bias-corrected leaderboards from LLM-judge battle logs, on Apache Beam.",
    python_requires=">=3.10",
    packages=["biasboard", *(f"biasboard.{name}" for name in SUBPACKAGES)],
    package_dir={"biasboard": "biasboard", **{f"biasboard.{name}": name for name in SUBPACKAGES}},
    package_data={"biasboard.schemas": ["*.json"]},
    install_requires=[
        # Beam caps pyarrow < 26 and numpy < 2.5; we stay inside its caps.
        "apache-beam[gcp]>=2.70,<3",
        "pyarrow>=15,<26",
        "numpy>=1.26,<2.5",
        "polars>=1.0",
        "scipy>=1.11",
        "google-cloud-storage>=2.10",
        # the fit stage limits BLAS threads around itself (transforms/fit.py: one thread is faster there)
        "threadpoolctl>=3.1",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",  # make test: a worker per core
            "hypothesis>=6",
            "gcp-storage-emulator>=2024.0",
            "build",
            # lint (tests/test_lint.py): scipy's types come from scipy-stubs; pyarrow has none that match
            "ruff",
            "mypy>=2.4",
            "scipy-stubs",
        ],
    },
    entry_points={"console_scripts": ["biasboard=biasboard.pipelines.cli:main"]},
)
