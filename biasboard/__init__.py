"""biasboard: leaderboards corrected for LLM-judge biases, next to the naive ones they replace.

Each top-level folder of the repository is installed under this namespace:
``biasboard.schemas`` (data contracts), ``biasboard.ranking`` (the numpy/scipy
model core, no Beam), ``biasboard.simulate``, ``biasboard.audit`` and
``biasboard.plan`` (the simulator, the judge audit and the planner, beside the
core), ``biasboard.transforms`` (Beam composites and DoFns that move Arrow
batches and call the core), ``biasboard.report`` and ``biasboard.importers``,
and ``biasboard.pipelines`` (the jobs and the CLI).  docs/design-notes.md draws
the layers.
"""

__version__ = "0.1.0"

#: The top-level folders installed as ``biasboard.<name>``: setup.py reads this tuple (without importing
#: the package), and :mod:`biasboard.pipelines.code_fingerprint` hashes their sources.
SUBPACKAGES = ("pipelines", "transforms", "schemas", "ranking", "simulate", "audit", "plan", "importers", "report")
