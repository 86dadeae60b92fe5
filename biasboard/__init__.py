"""biasboard: leaderboards corrected for LLM-judge biases, next to the naive ones they replace.

The code lives in the design card's folders and is installed under this namespace:
``biasboard.schemas`` (data contracts), ``biasboard.ranking`` (the numpy/scipy
statistical core, no Beam), ``biasboard.transforms`` (Beam PTransforms that move
Arrow batches and call the core) and ``biasboard.pipelines`` (the jobs and the CLI).
"""

__version__ = "0.1.0"
