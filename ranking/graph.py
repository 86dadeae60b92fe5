"""The comparison graph: which models can be ranked against which.

Two models are comparable when a chain of battles links them (weak connectivity of the comparison
graph).  The maximum-likelihood Bradley–Terry fit needs more — every model must both win and lose
against the rest of its component (strong connectivity of the "earned points against" graph,
Zermelo/Ford) — or some rating runs to ±∞.

An ordinal-only data set (single grades, no battles) has no comparison graph; there two models are
linked when the same judge graded both on the same prompt (judge severity and prompt difficulty cancel
in their difference), and comparable through chains of such links (:func:`model_components`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from biasboard.ranking.data import Dataset, PairArrays, ScoreArrays
from scipy.sparse.csgraph import connected_components


def _graph(rows: np.ndarray, cols: np.ndarray, n_models: int) -> sp.csr_matrix:
    """The graph with an edge rows[i] → cols[i] for every i, each distinct edge once.

    Why distinct first: the cells hold each model pair many times (every judge, length bin, …: 650k cells
    over ~10k pairs at 2 × 25k voter-judges), and a sparse matrix built from every cell sorts and sums all of
    them (~20-40 ms a call); a table over the M² pairs (or ``np.unique`` when M² outgrows the cells) keeps
    each pair once in a few ms.  Connectivity depends on which edges exist only.
    """
    key = rows.astype(np.int64, copy=False) * n_models + cols
    if n_models * n_models <= 4 * key.size + (1 << 16):
        seen = np.zeros(n_models * n_models, bool)
        seen[key] = True
        key = np.flatnonzero(seen)
    else:
        key = np.unique(key)
    return sp.csr_matrix((np.ones(key.size), np.divmod(key, n_models)), shape=(n_models, n_models))


def comparison_components(pairs: PairArrays, n_models: int) -> np.ndarray:
    """Component label per model (0 = the largest), over battles between two different models.

    A model's battles against itself are loops of the graph, which change no component: they are not
    filtered out (a copy of every cell's models for nothing); cells without battles (n = 0, e.g. a bootstrap
    redraw) are.
    """
    a, b = pairs.a, pairs.b
    if not np.all(pairs.n > 0):
        keep = pairs.n > 0
        a, b = a[keep], b[keep]
    _, labels = connected_components(_graph(a, b, n_models), directed=False)
    return _by_size(labels)


def grade_components(scores: ScoreArrays, n_models: int) -> np.ndarray:
    """Component label per model (0 = the largest) of single grades: models graded by one judge on one
    prompt are linked (a bipartite graph of models and (judge, prompt) cells, restricted to the models).

    A sufficient condition for the many-facet model to compare two models without leaning on its
    priors; a model never graded is a component of its own.
    """
    return _linked_components(np.zeros(0, np.int64), np.zeros(0, np.int64), scores, n_models)


def _linked_components(a: np.ndarray, b: np.ndarray, scores: ScoreArrays, n_models: int) -> np.ndarray:
    """Components of the models linked by battles ``a``–``b`` and by being graded by one judge on one prompt."""
    n_judges = int(scores.j.max()) + 1 if len(scores) else 0
    _, cell = np.unique(scores.p * n_judges + scores.j, return_inverse=True)
    nodes = n_models + (int(cell.max()) + 1 if len(scores) else 0)
    rows, cols = np.concatenate([a, scores.m]), np.concatenate([b, n_models + cell])
    graph = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(nodes, nodes))
    _, labels = connected_components(graph, directed=False)
    return _by_size(np.unique(labels[:n_models], return_inverse=True)[1])


def model_components(data: Dataset, grades: bool = True) -> np.ndarray:
    """Component label per model: of the battles and the grades together — what a fit of both can compare — of the
    grades alone on an ordinal-only data set, of the battles alone with ``grades=False`` (the naive pair board).

    Why together: a model graded but never in a battle was its own component on a board of both, so it was left
    off the leaderboard (named as having "only self-battles") though the corrected fit rates it from its grades;
    and two groups linked only by grades were ranked apart."""
    m = len(data.models)
    scores = data.scores if grades or data.ordinal_only else None
    if scores is None or not len(scores):
        return comparison_components(data.pairs, m)
    keep = data.pairs.n > 0
    return _linked_components(data.pairs.a[keep], data.pairs.b[keep], scores, m)


def grader_groups(data: Dataset, graders: np.ndarray) -> np.ndarray:
    """Group label per grader (judge indices ``graders``): two graders share a group when chains of "grades a model
    of one comparison component" (:func:`model_components`) link them.

    Why: a severity is measured against the other graders through the models they both rate; across groups it is
    the prior's alone (a grader that alone grades its models has θ − α_j identified, never α_j).  Measured from the
    mean over every grader, such a grader's prior-set severity moved every other grader's (+0.23 to +0.25, intervals
    ~5× wider), so severities are measured from their group's mean (:mod:`~biasboard.ranking.bias_table`)."""
    scores = data.scores
    if scores is None or not len(scores) or graders.size < 2:
        return np.zeros(graders.size, np.int64)
    component = model_components(data)
    jn, n_comp = len(data.judges), int(component.max()) + 1
    edges = sp.csr_matrix(
        (np.ones(len(scores)), (scores.j, jn + component[scores.m])), shape=(jn + n_comp, jn + n_comp)
    )
    _, labels = connected_components(edges, directed=False)
    return np.unique(labels[graders], return_inverse=True)[1]


def _by_size(labels: np.ndarray) -> np.ndarray:
    """Component labels renumbered by size, largest first (ties: first seen first)."""
    sizes = np.bincount(labels)
    order = np.argsort(-sizes, kind="stable")
    relabel = np.empty_like(order)
    relabel[order] = np.arange(order.size)
    return relabel[labels]


def unranked_components(component: np.ndarray) -> list[int]:
    """The components of one model each — a model no comparison links to any other, whose rating is its component's
    centre by definition — when some component holds more models; else none (a board of such models only is left
    as it is: there is nothing else to rank)."""
    if component.size == 0:
        return []
    sizes = np.bincount(component)
    return np.flatnonzero(sizes == 1).tolist() if sizes.max() > 1 else []


def _points(pairs: PairArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, points of a, points of b) over the cells of two different models, a tie half a point each."""
    keep = pairs.a != pairs.b
    return pairs.a[keep], pairs.b[keep], (pairs.win_a + 0.5 * pairs.tie)[keep], (pairs.win_b + 0.5 * pairs.tie)[keep]


def mle_exists(pairs: PairArrays, n_models: int, within_components: bool = False) -> bool:
    """True when the ties-as-half-wins BT likelihood has a finite maximiser (strongly connected).

    ``within_components``: the maximiser of each comparison component's ratings (one gauge each) —
    every weakly connected component strongly connected.
    """
    a, b, a_pts, b_pts = _points(pairs)
    a_pts, b_pts = a_pts > 0, b_pts > 0
    # Edge u → v when u earned points against v.
    rows = np.concatenate([a[a_pts], b[b_pts]])
    cols = np.concatenate([b[a_pts], a[b_pts]])
    n_comp, _ = connected_components(_graph(rows, cols, n_models), directed=True, connection="strong")
    if within_components:
        return n_comp == int(comparison_components(pairs, n_models).max()) + 1
    return n_comp == 1


def one_sided_models(pairs: PairArrays, n_models: int) -> np.ndarray:
    """The models (indices) that earned no point, or gave none away, against another model (ties as half wins):
    the plainest case of a maximum-likelihood rating that does not exist (:func:`mle_exists` finds the rest: a
    group that never loses to the models outside it)."""
    a, b, a_pts, b_pts = _points(pairs)
    earned = np.bincount(a, a_pts, n_models) + np.bincount(b, b_pts, n_models)
    conceded = np.bincount(a, b_pts, n_models) + np.bincount(b, a_pts, n_models)
    played = np.bincount(a, minlength=n_models) + np.bincount(b, minlength=n_models)
    return np.flatnonzero((played > 0) & ((earned == 0) | (conceded == 0)))


def component_names(component: np.ndarray, models: tuple[str, ...]) -> list[list[str]]:
    return [[models[i] for i in np.flatnonzero(component == c)] for c in range(int(component.max()) + 1)]
