"""Synthetic judge-battle logs with a known truth, for tests and benchmarks.

Why a simulator: the bias-aware fit can only be judged against a truth it did
not see.  This module draws models, judges and prompts with known parameters,
lets every judge compare model pairs under the generative model the fit assumes (:mod:`biasboard.ranking.model`),
and returns day-partitioned Arrow tables in the Battle/Score contracts, plus a
``truth`` dict that holds every parameter and the exact count of every row kind
(valid, self-battle, each injected defect), so tests can check conservation to
the row.  Pure numpy/pyarrow, vectorised per chunk: no Python loop per battle.

The generative model
--------------------
For judge *j*, model *a* shown first and *b* second::

    η = a_j·(θ_a − θ_b) + γ_j + β_j·(x_a − x_b) + λ_j·(s_aj − s_bj)

* θ_m ~ N(0, theta_sd), centred to sum to zero.
* x = ln(response length in tokens) of each response, **unstandardised**: β_j
  is per unit of ln length ratio, exactly what the ingest computes from
  ``len_a``/``len_b`` (the integer lengths written, not the latent ones).
* s_mj = 1 when model m's family equals the judge's family (human pools have
  family ``human`` and λ_j = 0, so they have no affinity).
* γ_j = γ₀ + u_j, u_j ~ N(0, sd_u);  β_j = β₀ + N(0, sd_beta);
  λ_j = λ₀ + N(0, sd_lambda);  a_j = exp(N(0, disc_sd)) (discrimination).
* Davidson ties with ν_j = tie_nu·exp(N(0, tie_sd)):
  P(a) = e^{η/2}/D, P(b) = e^{−η/2}/D, P(tie) = ν_j/D, D = e^{η/2} + e^{−η/2} + ν_j.
* A tie is labelled ``tie (bothbad)`` with probability
  σ(logit(b_j) − (θ_a + θ_b)/2): b_j is the judge's base bothbad share
  (logit-normal around ``bothbad_share``), raised when both models are weak.
* Lengths: model m has a mean log length μ_m whose in-sample correlation with
  θ is *exactly* ``corr_length`` (Xu et al.'s variable: correction helps below a
  crossing point and hurts above it); a response's log length is
  μ_m + π_p (prompt offset, shared by both answers) + N(0, len_noise_sd),
  rounded to a positive integer token count.

* Style (``style=True``): each answer gets markdown counts (headers, list
  items, bold spans), Poisson around the model's own mean (log-normal across
  models, ``style_model_sd``, and across answers, ``style_noise_sd``; the
  model's header propensity correlates ``corr_style`` with θ); η gains
  Σ_k δ_jk·d_k with d_k = (c_a − c_b)/(c_a + c_b) (0 when both are 0) and
  δ_jk = ``style_effects[k]`` + N(0, ``sd_style``).  Drawn from streams of
  their own: a run without style is unchanged, and the pairs, judges, prompts
  and lengths of a run with style are those of the same run without (the
  verdicts differ, as the style effects move η, and so do the time stamps,
  drawn after the ties; likewise with ``categories``).

Ordinal scores follow the partial-credit many-facet Rasch model
P(X = k) ∝ exp(Σ_{h=2..k}(θ_m − δ_p − α_j − τ_h)), k = 1..K, with prompt
difficulty δ_p (mean zero), judge severity α_j (mean zero) and thresholds τ.

Tournament designs (Katoch et al.'s six; how the unordered pair is chosen)
---------------------------------------------------------------------
``uniform``     any two distinct models, uniformly.
``swiss``       a uniform model against a neighbour in the *standings*
                (θ plus a little noise): rank distance 1, 2, 3 … with
                probability 1/2, 1/4, 1/8 … — close matches only.
``stratified``  standings cut into contiguous strata; a pair is within one
                stratum, except a ``cross_stratum`` share drawn uniformly.
``hubspoke``    one hub model in every battle, against any other model.
``multihub``    several hubs; every battle has a hub against any other model
                (possibly another hub).
``popularity``  both models drawn with weights ∝ exp(popularity_slope·zθ + noise):
                strong models are popular and battle far more often.
The order shown is then random: P(m shown first) = σ(ρ_a − ρ_b) with a per
model propensity ρ_m ~ N(0, position_skew) (0 = fair coin).  With
``both_orders`` each sampled (prompt, pair, judge) is judged twice, once in each
order: same ``prompt_id``, swapped models and lengths, its own ``battle_id``,
an independent verdict.  ``--battles`` counts rows, so both-orders mode samples
⌈N/2⌉ units per run and writes 2·⌈N/2⌉ rows.

Self-battles (``model_a == model_b``) are a ``self_battles`` share of units; a
``self_identical`` share of them show the *same* answer twice (equal lengths;
the identical-answer check), the rest two answers of the same model.  θ and the
affinity cancel, so they inform position, length and ties only.

Injected bad rows
-----------------
``bad_rows`` F adds round(F · valid rows) rows per chunk, each with exactly one
defect, the kinds assigned round-robin over :data:`BAD_ROW_REASONS` so every kind
appears once there are at least eleven bad rows.  The reason strings are the
dead-letter contract's (:mod:`biasboard.schemas.deadletter`):
``missing:<col>`` (null, or the empty string, alternately; for ``ts`` too),
``bad_winner``, ``negative_length``, ``absurd_length`` (> MAX_RESPONSE_LENGTH),
``bad_timestamp`` (unparseable text) and ``duplicate_battle_id`` (an exact
repeat of an earlier valid row of the same day, so first-occurrence-wins keeps
the original).  Files with bad rows carry ``ts`` as an ISO-8601 string column
(the only way to hold an unparseable time); clean files carry a proper UTC
timestamp.  Score rows get ``bad_score`` rows (score 0 or −1) at the same rate.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from biasboard.importers.output import DEAD_LETTERS as IMPORT_DEAD_LETTERS
from biasboard.importers.output import MANIFEST as IMPORT_MANIFEST
from biasboard.schemas.battle import BATTLE_REQUIRED, BATTLE_SCHEMA, SCORE_SCHEMA, STYLE_COLUMNS, WINNER_VALUES
from biasboard.schemas.deadletter import (
    MAX_RESPONSE_LENGTH,
    REASON_ABSURD_LENGTH,
    REASON_BAD_SCORE,
    REASON_BAD_TIMESTAMP,
    REASON_BAD_WINNER,
    REASON_DUPLICATE_ID,
    REASON_MISSING_PREFIX,
    REASON_NEGATIVE_LENGTH,
)
from biasboard.schemas.errors import InputError, StateError
from biasboard.schemas.numbers import NumberRule
from biasboard.schemas.rules import MAX_SCORE, TS_MAX, TS_MIN

DESIGNS: tuple[str, ...] = ("uniform", "swiss", "stratified", "hubspoke", "multihub", "popularity")

#: Model families in the order they are used, with the name prefix a family map recognises.
#: Models are named ``<prefix>-sim-NN`` and LLM judges ``<prefix>-sim-judge-K`` (human pools
#: ``human-pool-K``), so the default family map assigns the same families as the columns.
FAMILY_PREFIXES: dict[str, str] = {
    "openai": "gpt",
    "anthropic": "claude",
    "google": "gemini",
    "meta": "llama",
    "mistral": "mistral",
    "alibaba": "qwen",
    "deepseek": "deepseek",
    "microsoft": "phi3",
    "xai": "grok",
    "cohere": "command-r",
}
HUMAN_FAMILY = "human"

#: Every defect a bad row can carry, in round-robin order (truth.json's keys).
BAD_ROW_REASONS: tuple[str, ...] = (
    *(f"{REASON_MISSING_PREFIX}{column}" for column in BATTLE_REQUIRED),
    REASON_BAD_WINNER,
    REASON_NEGATIVE_LENGTH,
    REASON_ABSURD_LENGTH,
    REASON_BAD_TIMESTAMP,
    REASON_DUPLICATE_ID,
)

#: Battle schema of files that hold bad rows: ``ts`` as ISO-8601 text, every field nullable.
BATTLE_SCHEMA_WITH_BAD_ROWS = pa.schema(
    [pa.field(f.name, pa.string() if f.name == "ts" else f.type, nullable=True) for f in BATTLE_SCHEMA]
)

#: Names of the simulated categories (``SimulationConfig.categories`` takes the first ones).
CATEGORY_NAMES: tuple[str, ...] = ("coding", "writing", "math", "reasoning", "roleplay", "extraction")
_BAD_WINNERS = ("model_c", "bad-verdict", "xyz")
_BAD_TIMESTAMPS = ("not-a-timestamp", "2024-13-45T99:99:99Z", "yesterday")
_WINNER_ARRAY = pa.array(list(WINNER_VALUES), pa.string())
_US_PER_DAY = 86_400_000_000
_EPOCH = dt.date(1970, 1, 1)


_WHOLE = NumberRule(integer=True, low=0)
_COUNT = NumberRule(integer=True, low=1)
#: The bound on the logit-scale flags (effects, and the SDs that spread them): at 20 the odds are e²⁰ ≈ 5·10⁸ to 1,
#: every verdict already certain, and the largest runs stay far from float overflow.  Without it ``--gamma0 1e308``
#: passed as a finite number, numpy's overflow/invalid-value RuntimeWarnings were printed and every verdict was a tie.
_LOGIT_BOUND = 20.0
_SD = NumberRule(low=0.0, high=_LOGIT_BOUND)
_SHARE = NumberRule(low=0.0, high=1.0)
_CORRELATION = NumberRule(above=-1.0, below=1.0)
_EFFECT = NumberRule(low=-_LOGIT_BOUND, high=_LOGIT_BOUND)

#: The config's fields a ``biasboard simulate`` flag sets, with the flag and what it accepts: the CLI reads each
#: flag with its rule (``--seed -1`` and ``--sd-u -1`` were tracebacks from numpy, ``--gamma0 inf`` NaN verdicts)
#: and :meth:`SimulationConfig.validate` checks a caller's config with the same rules, naming the flag.
FLAG_RULES: dict[str, tuple[str, NumberRule]] = {
    "battles": ("--battles", _COUNT),
    "models": ("--models", NumberRule(integer=True, low=3)),
    "judges": ("--judges", _COUNT),
    "human_judges": ("--human-judges", _WHOLE),
    "days": ("--days", _COUNT),
    "bad_rows": ("--bad-rows", NumberRule(low=0.0, below=1.0)),
    "scores": ("--scores", NumberRule(low=0.0)),
    # (the ingest takes grades 1..MAX_SCORE: more simulated categories than that were all rejected as bad_score)
    "grades": ("--grades", NumberRule(integer=True, low=2, high=MAX_SCORE)),
    "seed": ("--seed", _WHOLE),
    "corr_length": ("--corr-length", _CORRELATION),
    "self_battles": ("--self-battles", _SHARE),
    "self_identical": ("--self-identical", _SHARE),
    "hubs": ("--hubs", _WHOLE),
    "strata": ("--strata", _WHOLE),
    "prompts": ("--prompts", _COUNT),
    "families": ("--families", NumberRule(integer=True, low=1, high=len(FAMILY_PREFIXES))),
    "position_skew": ("--position-skew", _SD),
    "gamma0": ("--gamma0", _EFFECT),
    "beta0": ("--beta0", _EFFECT),
    "lambda0": ("--lambda0", _EFFECT),
    "sd_u": ("--sd-u", _SD),
    "theta_sd": ("--theta-sd", _SD),
    "corr_style": ("--corr-style", _CORRELATION),
    "categories": ("--categories", NumberRule(integer=True, low=0, high=len(CATEGORY_NAMES))),
    "category_sd": ("--category-sd", _SD),
}


@dataclass(frozen=True)
class SimulationConfig:
    """Every knob of a simulation; the run is a pure function of this and ``seed``."""

    battles: int = 100_000  # battle rows (valid ones; bad rows come on top)
    models: int = 20
    judges: int = 4  # all judges, humans included
    human_judges: int = 0  # how many of ``judges`` are human pools (family "human")
    days: int = 7
    start_date: dt.date = dt.date(2024, 1, 1)
    design: str = "uniform"
    both_orders: bool = False
    bad_rows: float = 0.0  # injected bad rows per valid row
    scores: float = 0.0  # ordinal score rows per valid battle row (0: no score files)
    grades: int = 10  # K: scores are 1..K
    seed: int = 0
    corr_length: float = 0.0  # exact in-sample corr(θ, μ)
    self_battles: float = 0.0  # share of units with model_a == model_b
    self_identical: float = 0.5  # share of self-battles showing the same answer twice
    prompts: int = 500
    families: int = 6  # model families in use (≤ len(FAMILY_PREFIXES))
    theta_sd: float = 0.8
    gamma0: float = -0.165  # Katoch et al.'s MT-Bench estimate: the second position is favoured
    sd_u: float = 0.337  # Katoch et al.'s SD(u_j)
    beta0: float = 0.3  # per unit of ln length ratio
    sd_beta: float = 0.1
    lambda0: float = 0.4
    sd_lambda: float = 0.15
    disc_sd: float = 0.2  # log-SD of the discrimination a_j
    tie_nu: float = 0.4  # Davidson ν around which ν_j scatter
    tie_sd: float = 0.3
    bothbad_share: float = 0.3
    severity_sd: float = 0.5  # SD of α_j (scores)
    prompt_difficulty_sd: float = 0.5  # SD of δ_p (scores)
    tau_span: float = 2.5  # thresholds evenly spaced in [−span, span] (one threshold, for two grades: 0)
    len_mean: float = 300.0  # geometric mean response length, tokens
    len_model_sd: float = 0.35  # SD of μ_m
    len_prompt_sd: float = 0.3
    len_noise_sd: float = 0.4
    position_skew: float = 0.0
    hubs: int = 0  # multihub hubs (0: max(2, min(5, M // 8)))
    strata: int = 0  # stratified strata (0: max(2, min(5, M // 5)))
    cross_stratum: float = 0.1
    popularity_slope: float = 1.0
    standings_noise: float = 0.2  # SD of the noise on θ that orders swiss/stratified standings
    chunk_rows: int = 1_000_000  # bounded memory: a bigger day comes as several tables
    categories: int = 0  # >0: each battle gets a category (column ``category``) drawn uniformly
    category_sd: float = 0.6  # SD of each model's quality shift within a category (its own stream)
    style: bool = False  # draw style counts (header/list/bold, columns *_count_a/_b) and style effects
    style_effects: tuple[float, float, float] = (0.5, 0.3, 0.3)  # δ_k per unit normalised difference
    sd_style: float = 0.1  # SD of a judge's deviation from each δ_k
    style_means: tuple[float, float, float] = (1.5, 4.0, 3.0)  # geometric mean count per answer
    style_model_sd: float = 0.8  # log-SD of the models' mean counts
    style_noise_sd: float = 0.5  # log-SD of one answer's count rate around its model's mean
    corr_style: float = 0.0  # exact in-sample corr(θ, a model's log mean header count)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`InputError` naming the option that is out of range."""
        for name, (flag, rule) in FLAG_RULES.items():
            rule.check(getattr(self, name), flag)
        checks = [
            (
                self.human_judges <= self.judges,
                f"--human-judges must be at most --judges ({self.judges}), got {self.human_judges}",
            ),
            (self.design in DESIGNS, f"--design must be one of {', '.join(DESIGNS)}"),
            (0 < self.bothbad_share < 1, "bothbad_share must be in (0, 1)"),
            (self.tie_nu > 0, "tie_nu must be positive"),
            (self.len_mean >= 1, "len_mean must be at least 1"),
            (0 <= self.cross_stratum <= 1, "cross_stratum must be in [0, 1]"),
            (self.hubs < self.models, f"--hubs must be below --models ({self.models}), got {self.hubs}"),
            (
                self.strata == 0 or 2 <= self.strata <= self.models // 2,
                f"--strata must be 0 or from 2 to half of --models ({self.models // 2}), got {self.strata}",
            ),
            (self.chunk_rows >= 1000, "chunk_rows must be at least 1000"),
            (len(self.style_effects) == 3 and len(self.style_means) == 3, "style_effects/style_means: 3 values"),
            (min(self.style_means) > 0 and self.sd_style >= 0, "style_means must be positive, sd_style >= 0"),
            (
                # the ingest rejects instants outside [TS_MIN, TS_MAX): a simulation past them was all bad_timestamp;
                # counted in days, not dates (a last day past 9999-12-31 raised OverflowError before this refusal)
                TS_MIN.date() <= self.start_date and self.days <= (TS_MAX.date() - self.start_date).days,
                f"--start-date {self.start_date} with --days {self.days}: the days must lie from "
                f"{TS_MIN.date()} to before {TS_MAX.date()}, where the ingest takes time stamps",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise InputError(message)


# ---------------------------------------------------------------------------
# Parameters (drawn once per seed)


@dataclass(frozen=True)
class Parameters:
    """The drawn truth: arrays indexed by model, judge, prompt."""

    model_names: np.ndarray
    model_family: np.ndarray  # family index per model
    family_names: tuple[str, ...]  # index → family name; the last entry is "human"
    theta: np.ndarray
    mu: np.ndarray  # mean log length
    propensity: np.ndarray  # first-position propensity ρ_m
    popularity: np.ndarray  # normalised weights (popularity design)
    standings: np.ndarray  # model indices, best first (swiss, stratified)
    hubs: np.ndarray  # model indices (hubspoke: one; multihub: several; else empty)
    strata_bounds: np.ndarray  # rank offsets of the strata, len S + 1
    judge_names: np.ndarray
    judge_family: np.ndarray  # family index per judge
    judge_human: np.ndarray
    gamma: np.ndarray
    u: np.ndarray
    beta: np.ndarray
    lam: np.ndarray
    disc: np.ndarray
    nu: np.ndarray
    bothbad: np.ndarray
    alpha: np.ndarray
    delta: np.ndarray  # prompt difficulty
    prompt_len: np.ndarray  # prompt log-length offset π_p
    tau: np.ndarray  # K − 1 thresholds τ_2..τ_K
    #: Per category (rows) and model: the quality shift added to θ in that category (0 rows: no categories).
    category_theta: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: (judges, 3) style effects δ_jk and (models, 3) log mean counts (0 rows: no style).
    style_effect: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    style_log_mean: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))

    def theta_in(self, category: int) -> np.ndarray:
        """The true qualities within one category: θ plus the category's own shift."""
        return self.theta + self.category_theta[category]


def _param_rng(config: SimulationConfig) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([config.seed, 0]))


def _centred(x: np.ndarray) -> np.ndarray:
    return x - x.mean()


def _correlated(z: np.ndarray, rho: float, rng: np.random.Generator) -> np.ndarray:
    """A standardised vector whose in-sample correlation with ``z`` is exactly ``rho`` (with ``z`` constant, as θ
    with ``theta_sd`` 0, there is no correlation to set: the standardised noise alone; it was 0/0, NaN mean
    lengths, every length written as −2⁶³ and every verdict a tie)."""
    zc = _centred(z)
    e = _centred(rng.standard_normal(z.size))
    spread = np.sqrt(np.mean(zc**2))
    if spread == 0:
        return e / np.sqrt(np.mean(e**2))
    zc = zc / spread
    e = e - zc * np.mean(e * zc)  # Gram–Schmidt: orthogonal to z in-sample
    e = e / np.sqrt(np.mean(e**2))
    return rho * zc + math.sqrt(1 - rho**2) * e


def draw_parameters(config: SimulationConfig) -> Parameters:
    """The truth of a run, drawn from its own stream so data chunks never shift it."""
    rng = _param_rng(config)
    m, n_judges = config.models, config.judges
    families = tuple(FAMILY_PREFIXES)[: config.families]
    model_family = np.arange(m) % len(families)
    width = max(2, len(str(m - 1)))
    model_names = np.array([f"{FAMILY_PREFIXES[families[f]]}-sim-{i:0{width}d}" for i, f in enumerate(model_family)])

    theta = _centred(rng.normal(0.0, config.theta_sd, m))
    z_theta = theta / theta.std() if theta.std() > 0 else theta
    mu = math.log(config.len_mean) + config.len_model_sd * _correlated(theta, config.corr_length, rng)
    propensity = rng.normal(0.0, 1.0, m) * config.position_skew
    pop = np.exp(config.popularity_slope * z_theta + 0.5 * rng.standard_normal(m))
    popularity = pop / pop.sum()
    standings = np.argsort(-(theta + rng.normal(0.0, config.standings_noise, m)), kind="stable")

    hub_order = rng.permutation(m)
    if config.design == "hubspoke":
        hubs = hub_order[:1]
    elif config.design == "multihub":
        hubs = hub_order[: config.hubs or max(2, min(5, m // 8))]
    else:
        hubs = hub_order[:0]
    n_strata = config.strata or max(2, min(5, m // 5))
    n_strata = min(n_strata, m // 2)
    strata_bounds = np.round(np.linspace(0, m, n_strata + 1)).astype(np.int64)

    n_llm = n_judges - config.human_judges
    judge_family = np.concatenate([np.arange(n_llm) % len(families), np.full(config.human_judges, len(families))])
    judge_human = np.arange(n_judges) >= n_llm
    family_names = (*families, HUMAN_FAMILY)
    seen: dict[int, int] = {}
    judge_names = []
    for k, f in enumerate(judge_family):
        seen[f] = seen.get(f, 0) + 1
        prefix = "human-pool" if judge_human[k] else f"{FAMILY_PREFIXES[family_names[f]]}-sim-judge"
        judge_names.append(f"{prefix}-{seen[f]}")

    u = rng.normal(0.0, config.sd_u, n_judges)
    beta = config.beta0 + rng.normal(0.0, config.sd_beta, n_judges)
    lam = np.where(judge_human, 0.0, config.lambda0 + rng.normal(0.0, config.sd_lambda, n_judges))
    disc = np.exp(rng.normal(0.0, config.disc_sd, n_judges))
    nu = config.tie_nu * np.exp(rng.normal(0.0, config.tie_sd, n_judges))
    logit_bb = math.log(config.bothbad_share / (1 - config.bothbad_share))
    bothbad = 1.0 / (1.0 + np.exp(-(logit_bb + rng.normal(0.0, 0.5, n_judges))))
    alpha = _centred(rng.normal(0.0, config.severity_sd, n_judges))
    delta = _centred(rng.normal(0.0, config.prompt_difficulty_sd, config.prompts))
    prompt_len = rng.normal(0.0, config.len_prompt_sd, config.prompts)
    # (numpy puts a single point at the start: two grades had their threshold at −span, 90% of them the top grade,
    # where every other K is symmetric about 0)
    tau = np.linspace(-config.tau_span, config.tau_span, config.grades - 1) if config.grades > 2 else np.zeros(1)
    return Parameters(
        model_names=model_names,
        model_family=model_family,
        family_names=family_names,
        theta=theta,
        mu=mu,
        propensity=propensity,
        popularity=popularity,
        standings=standings,
        hubs=hubs,
        strata_bounds=strata_bounds,
        judge_names=np.array(judge_names),
        judge_family=judge_family,
        judge_human=judge_human,
        gamma=config.gamma0 + u,
        u=u,
        beta=beta,
        lam=lam,
        disc=disc,
        nu=nu,
        bothbad=bothbad,
        alpha=alpha,
        delta=delta,
        prompt_len=prompt_len,
        tau=tau,
        category_theta=_category_shifts(config),
        **_style_parameters(config, theta),
    )


def _style_parameters(config: SimulationConfig, theta: np.ndarray) -> dict[str, np.ndarray]:
    """Judges' style effects and models' log mean counts, from a stream of their own (none without style)."""
    if not config.style:
        return {}
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, 6]))
    effect = np.asarray(config.style_effects) + rng.normal(0.0, config.sd_style, (config.judges, 3))
    spread = rng.standard_normal((config.models, 3))
    spread[:, 0] = _correlated(theta, config.corr_style, rng)
    log_mean = np.log(np.asarray(config.style_means)) + config.style_model_sd * spread
    return {"style_effect": effect, "style_log_mean": log_mean}


def style_differences(count_a: np.ndarray, count_b: np.ndarray) -> np.ndarray:
    """(c_a − c_b)/(c_a + c_b) per battle and feature, 0 where both are 0 (the ingest's style covariate)."""
    total = count_a + count_b
    return np.divide(count_a - count_b, total, out=np.zeros(total.shape), where=total > 0)


def _category_shifts(config: SimulationConfig) -> np.ndarray:
    """Per category, each model's quality shift, from a stream of its own (the rest never moves), centred both ways:
    over the models in each category (a slice board is centred so) and over the categories for each model, so a
    model's mean over its (equally likely) categories is its ``theta``.  Centred over models alone, the overall
    board, which sees every category, sat 0.22 logits RMS from ``truth.json``'s theta (0.04 from the category
    means), and its true order ``standing`` put a model first that the board ranked fourth."""
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, 5]))
    shifts = rng.normal(0.0, config.category_sd, (config.categories, config.models))
    if not config.categories:
        return shifts
    return shifts - shifts.mean(axis=1, keepdims=True) - shifts.mean(axis=0, keepdims=True) + shifts.mean()


# ---------------------------------------------------------------------------
# The plan: how many rows of each kind go in which chunk (known without drawing data)


@dataclass(frozen=True)
class Chunk:
    """One table of one day: its unit and row counts are fixed before any data is drawn."""

    day_index: int
    chunk_index: int
    day_chunks: int  # chunks in this day
    units: int  # sampled (prompt, pair, judge) units
    self_units: int
    rows: int  # valid battle rows (2 · units in both-orders mode)
    row_offset: int  # index of its first valid row within the day (battle ids)
    bad: int  # injected bad rows
    bad_offset: int  # global index of its first bad row (round-robin kinds)
    scores: int
    score_offset: int
    bad_scores: int


def _split(total: int, parts: int) -> Iterator[int]:
    """``total`` in ``parts`` near-equal whole parts, one at a time (a list of them grew with the input)."""
    base, extra = divmod(total, parts)
    return (base + (1 if i < extra else 0) for i in range(parts))


def plan(config: SimulationConfig) -> Iterator[Chunk]:
    """Every chunk of the run in write order, made as it is needed; counts here are the truth's counts.

    Lazy because ``--battles 99999999999999`` built its list of ~10⁸ chunks first: memory grew by ~70 MB/s and
    nothing was written.  Now memory holds one chunk whatever the run's size.
    """
    per_row = 2 if config.both_orders else 1
    total_units = -(-config.battles // per_row)
    bad_offset = 0
    for day_index, day_units in enumerate(_split(total_units, config.days)):
        max_units = max(1, config.chunk_rows // per_row)
        n_chunks = max(1, -(-day_units // max_units))
        row_offset = score_offset = 0
        for chunk_index, units in enumerate(_split(day_units, n_chunks)):
            rows = units * per_row
            bad = round(config.bad_rows * rows)
            scores = round(config.scores * rows)
            bad_scores = round(config.bad_rows * scores)
            yield Chunk(
                day_index=day_index,
                chunk_index=chunk_index,
                day_chunks=n_chunks,
                units=units,
                self_units=round(config.self_battles * units),
                rows=rows,
                row_offset=row_offset,
                bad=bad,
                bad_offset=bad_offset,
                scores=scores,
                score_offset=score_offset,
                bad_scores=bad_scores,
            )
            row_offset += rows + bad
            score_offset += scores + bad_scores
            bad_offset += bad


def _bad_kinds(chunk: Chunk) -> np.ndarray:
    """Round-robin kind index of each of the chunk's bad rows (before shuffling their positions)."""
    return (chunk.bad_offset + np.arange(chunk.bad)) % len(BAD_ROW_REASONS)


def day_of(config: SimulationConfig, day_index: int) -> dt.date:
    return config.start_date + dt.timedelta(days=day_index)


# ---------------------------------------------------------------------------
# Vectorised helpers


def _fixed_width_strings(prefix: str, numbers: np.ndarray, width: int) -> pa.StringArray:
    """``prefix`` + zero-padded ``numbers`` as an Arrow string array, built from bytes.

    Formatting ten million ids through Python or Arrow's cast costs seconds; a
    fixed-width byte matrix filled digit by digit (a loop over digits, not rows)
    costs tens of milliseconds.
    """
    n = len(numbers)
    head = np.frombuffer(prefix.encode("ascii"), dtype=np.uint8)
    stride = head.size + width
    buf = np.empty((n, stride), dtype=np.uint8)
    buf[:, : head.size] = head
    rest = np.asarray(numbers, dtype=np.int64).copy()
    for k in range(width - 1, -1, -1):
        buf[:, head.size + k] = 48 + rest % 10
        rest //= 10
    offsets = np.arange(0, (n + 1) * stride, stride, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(buf))


def _iso_timestamps(day: dt.date, micros_of_day: np.ndarray) -> pa.StringArray:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` for times within ``day`` (fast, fixed width)."""
    t = np.asarray(micros_of_day, dtype=np.int64)
    hh, rest = np.divmod(t, 3_600_000_000)
    mm, rest = np.divmod(rest, 60_000_000)
    ss, us = np.divmod(rest, 1_000_000)
    n = t.size
    head = np.frombuffer(f"{day.isoformat()}T".encode("ascii"), dtype=np.uint8)
    stride = head.size + 16  # HH:MM:SS.ffffffZ
    buf = np.empty((n, stride), dtype=np.uint8)
    buf[:, : head.size] = head
    col = head.size
    for value, width, sep in ((hh, 2, ":"), (mm, 2, ":"), (ss, 2, "."), (us, 6, "Z")):
        v = value.copy()
        for k in range(width - 1, -1, -1):
            buf[:, col + k] = 48 + v % 10
            v //= 10
        buf[:, col + width] = ord(sep)
        col += width + 1
    offsets = np.arange(0, (n + 1) * stride, stride, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(buf))


def _distinct_other(a: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """A uniform model different from each ``a``."""
    b = rng.integers(0, m - 1, a.size)
    return b + (b >= a)


def sample_pairs(config: SimulationConfig, params: Parameters, n: int, rng: np.random.Generator):
    """``n`` unordered pairs of distinct models (first slot = hub where there is one), per the design."""
    m = config.models
    design = config.design
    if design == "uniform":
        a = rng.integers(0, m, n)
        return a, _distinct_other(a, m, rng)
    if design in ("hubspoke", "multihub"):
        a = params.hubs[rng.integers(0, params.hubs.size, n)]
        return a, _distinct_other(a, m, rng)
    if design == "popularity":
        cdf = np.cumsum(params.popularity)
        cdf[-1] = 1.0
        a = np.searchsorted(cdf, rng.random(n), side="right")
        b = np.searchsorted(cdf, rng.random(n), side="right")
        clash = np.flatnonzero(a == b)
        while clash.size:  # redraw collisions; the largest weight is far below 1
            b[clash] = np.searchsorted(cdf, rng.random(clash.size), side="right")
            clash = clash[a[clash] == b[clash]]
        return a, b
    ranks = rng.integers(0, m, n)
    if design == "swiss":
        dist = rng.geometric(0.5, n)
        sign = np.where(rng.random(n) < 0.5, -1, 1)
        other = ranks + sign * dist
        outside = (other < 0) | (other >= m)
        other = np.where(outside, ranks - sign * dist, other)
        other = np.clip(other, 0, m - 1)
        same = other == ranks
        other[same] = np.where(ranks[same] < m - 1, ranks[same] + 1, ranks[same] - 1)
    elif design == "stratified":
        bounds = params.strata_bounds
        stratum = np.searchsorted(bounds, ranks, side="right") - 1
        lo, size = bounds[stratum], bounds[stratum + 1] - bounds[stratum]
        within = lo + (rng.random(n) * (size - 1)).astype(np.int64)
        within += within >= ranks
        cross = rng.random(n) < config.cross_stratum
        other = np.where(cross, _distinct_other(ranks, m, rng), within)
    else:  # pragma: no cover - validate() rejects unknown designs
        raise InputError(f"unknown design {design!r}")
    return params.standings[ranks], params.standings[other]


def _log_lengths_to_tokens(log_len: np.ndarray) -> np.ndarray:
    return np.maximum(1, np.rint(np.exp(log_len))).astype(np.int64)


def verdict_probabilities(params: Parameters, judge, a, b, len_a, len_b, category=None, style=None):
    """(P(a wins), P(b wins), P(tie)) per battle under the documented model; tests reuse it.

    ``category``: per battle, the index of its category (its quality shift is added to θ); None: none.
    ``style``: (battles, 3) normalised style differences (:func:`style_differences`); None: none.
    """
    x = np.log(len_a) - np.log(len_b)
    jf = params.judge_family[judge]
    s = (params.model_family[a] == jf).astype(np.float64) - (params.model_family[b] == jf)
    diff = params.theta[a] - params.theta[b]
    if category is not None:
        diff = diff + params.category_theta[category, a] - params.category_theta[category, b]
    eta = params.disc[judge] * diff + params.gamma[judge]
    eta += params.beta[judge] * x + params.lam[judge] * s
    if style is not None:
        eta += np.sum(params.style_effect[judge] * style, axis=1)
    ea, eb, nu = np.exp(0.5 * eta), np.exp(-0.5 * eta), params.nu[judge]
    den = ea + eb + nu
    return ea / den, eb / den, nu / den


# ---------------------------------------------------------------------------
# One chunk of battles


def _chunk_rng(config: SimulationConfig, chunk: Chunk, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([config.seed, stream, chunk.day_index, chunk.chunk_index]))


def _valid_battles(config: SimulationConfig, params: Parameters, chunk: Chunk, rng: np.random.Generator):
    """Columns (numpy, as indices) of the chunk's valid battles, rows in time order."""
    n = chunk.units
    a, b = sample_pairs(config, params, n, rng)
    self_idx = rng.choice(n, chunk.self_units, replace=False) if chunk.self_units else np.empty(0, np.int64)
    b[self_idx] = a[self_idx]
    if config.position_skew > 0:
        keep = rng.random(n) < 1.0 / (1.0 + np.exp(params.propensity[b] - params.propensity[a]))
    else:
        keep = rng.random(n) < 0.5
    a, b = np.where(keep, a, b), np.where(keep, b, a)
    judge = rng.integers(0, config.judges, n)
    prompt = rng.integers(0, config.prompts, n)
    noise = rng.normal(0.0, config.len_noise_sd, (2, n))
    len_a = _log_lengths_to_tokens(params.mu[a] + params.prompt_len[prompt] + noise[0])
    len_b = _log_lengths_to_tokens(params.mu[b] + params.prompt_len[prompt] + noise[1])
    identical = self_idx[: round(config.self_identical * self_idx.size)]
    len_b[identical] = len_a[identical]
    is_self = np.zeros(n, dtype=bool)
    is_self[self_idx] = True
    if config.both_orders:  # rows 2i and 2i+1: the same unit in both orders

        def pair(x, y):
            return np.stack((x, y), axis=1).ravel()

        a, b = pair(a, b), pair(b, a)
        len_a, len_b = pair(len_a, len_b), pair(len_b, len_a)
        judge, prompt, is_self = np.repeat(judge, 2), np.repeat(prompt, 2), np.repeat(is_self, 2)
    category = None
    if config.categories:  # a stream of its own: the other columns do not move
        category = _chunk_rng(config, chunk, 4).integers(0, config.categories, n)
        category = np.repeat(category, 2) if config.both_orders else category
    counts = None
    if config.style:  # a stream of its own: the other columns do not move
        counts = _style_counts(config, params, chunk, a, b, identical)
    p_a, p_b, _ = verdict_probabilities(
        params, judge, a, b, len_a, len_b, category, None if counts is None else style_differences(*counts)
    )
    draw = rng.random(a.size)
    winner = np.full(a.size, 2, dtype=np.int64)  # tie
    winner[draw < p_a] = 0
    winner[draw >= 1.0 - p_b] = 1
    tie = np.flatnonzero(winner == 2)
    logit = np.log(params.bothbad[judge[tie]] / (1 - params.bothbad[judge[tie]]))
    p_bothbad = 1.0 / (1.0 + np.exp(-(logit - 0.5 * (params.theta[a[tie]] + params.theta[b[tie]]))))
    winner[tie[rng.random(tie.size) < p_bothbad]] = 3
    lo = chunk.chunk_index * _US_PER_DAY // chunk.day_chunks  # chunks split the day's hours
    hi = (chunk.chunk_index + 1) * _US_PER_DAY // chunk.day_chunks
    micros = np.sort(rng.integers(lo, hi, a.size))
    return {
        "a": a,
        "b": b,
        "judge": judge,
        "prompt": prompt,
        "len_a": len_a,
        "len_b": len_b,
        "winner": winner,
        "micros": micros,
        "is_self": is_self,
        "category": category,
        "style": counts,
    }


def _style_counts(config: SimulationConfig, params: Parameters, chunk: Chunk, a, b, identical):
    """(counts of the first-shown answers, of the second-shown), each (battles, 3), from stream 7.

    In both-orders mode ``a``/``b`` are already paired rows (2i, 2i+1 = one unit swapped): the unit's two
    answers are drawn once and swapped, like their lengths.  An identical self-battle shows one answer twice.
    """
    rng = _chunk_rng(config, chunk, 7)
    first, second = (a[0::2], b[0::2]) if config.both_orders else (a, b)
    rate = [
        np.exp(params.style_log_mean[m] + rng.normal(0.0, config.style_noise_sd, (m.size, 3))) for m in (first, second)
    ]
    c_a, c_b = (rng.poisson(r).astype(np.int64) for r in rate)
    if identical is not None:
        c_b[identical] = c_a[identical]
    if config.both_orders:
        both = np.empty((a.size, 3), np.int64), np.empty((a.size, 3), np.int64)
        both[0][0::2], both[0][1::2], both[1][0::2], both[1][1::2] = c_a, c_b, c_b, c_a
        return both
    return c_a, c_b


def _id_prefix(day: dt.date) -> str:
    """Battle ids are ``bYYYYMMDD-nnnnnnnnn``: unique across days, numbered within a day."""
    return f"b{day:%Y%m%d}-"


def _strings(values: np.ndarray, index: np.ndarray) -> pa.Array:
    return pa.array(values.tolist(), pa.string()).take(pa.array(index))


def _battle_table(config: SimulationConfig, params: Parameters, day: dt.date, cols: dict, ids: np.ndarray, iso: bool):
    family = np.asarray(params.family_names)
    ts_day = (day - _EPOCH).days * _US_PER_DAY
    ts = (
        _iso_timestamps(day, cols["micros"]) if iso else pa.array(ts_day + cols["micros"], pa.timestamp("us", tz="UTC"))
    )
    arrays = {
        "battle_id": _fixed_width_strings(_id_prefix(day), ids, 9),
        "ts": ts,
        "judge": _strings(params.judge_names, cols["judge"]),
        "model_a": _strings(params.model_names, cols["a"]),
        "model_b": _strings(params.model_names, cols["b"]),
        "winner": _WINNER_ARRAY.take(pa.array(cols["winner"])),
        "prompt_id": _fixed_width_strings("p", cols["prompt"], 6),
        "len_a": pa.array(cols["len_a"], pa.int64()),
        "len_b": pa.array(cols["len_b"], pa.int64()),
        "family_a": _strings(family, params.model_family[cols["a"]]),
        "family_b": _strings(family, params.model_family[cols["b"]]),
        "judge_family": _strings(family, params.judge_family[cols["judge"]]),
        "order_known": pa.nulls(len(ids), pa.bool_()),  # the simulated log records the shown order
        "strength": pa.nulls(len(ids), pa.int8()),
        "category": (
            pa.nulls(len(ids), pa.string())
            if cols.get("category") is None
            else _strings(np.asarray(CATEGORY_NAMES), cols["category"])
        ),
        "language": pa.nulls(len(ids), pa.string()),
    }
    counts = cols.get("style")
    for k, (col_a, col_b) in enumerate(STYLE_COLUMNS):
        for name, side in ((col_a, 0), (col_b, 1)):
            arrays[name] = (
                pa.nulls(len(ids), pa.int64()) if counts is None else pa.array(counts[side][:, k], pa.int64())
            )
    schema = BATTLE_SCHEMA_WITH_BAD_ROWS if iso else BATTLE_SCHEMA
    return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)


def _corrupt(table: pa.Table, kinds: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """Give row i of ``table`` the single defect ``BAD_ROW_REASONS[kinds[i]]`` (duplicates excluded)."""
    columns = {name: np.array(table.column(name).to_pylist(), dtype=object) for name in table.column_names}
    for k, reason in enumerate(BAD_ROW_REASONS):
        rows = np.flatnonzero(kinds == k)
        if not rows.size:
            continue
        if reason.startswith(REASON_MISSING_PREFIX):
            column = reason[len(REASON_MISSING_PREFIX) :]
            columns[column][rows] = np.array([None, ""], dtype=object)[np.arange(rows.size) % 2]
        elif reason == REASON_BAD_WINNER:
            columns["winner"][rows] = np.array(_BAD_WINNERS, dtype=object)[np.arange(rows.size) % len(_BAD_WINNERS)]
        elif reason == REASON_BAD_TIMESTAMP:
            columns["ts"][rows] = np.array(_BAD_TIMESTAMPS, dtype=object)[np.arange(rows.size) % len(_BAD_TIMESTAMPS)]
        elif reason in (REASON_NEGATIVE_LENGTH, REASON_ABSURD_LENGTH):
            if reason == REASON_NEGATIVE_LENGTH:
                values = -rng.integers(1, 1000, rows.size)
            else:
                values = rng.integers(MAX_RESPONSE_LENGTH + 1, 10 * MAX_RESPONSE_LENGTH, rows.size)
            on_a = np.arange(rows.size) % 2 == 0
            columns["len_a"][rows[on_a]] = values[on_a]
            columns["len_b"][rows[~on_a]] = values[~on_a]
    arrays = [pa.array(columns[f.name].tolist(), f.type) for f in table.schema]
    return pa.Table.from_arrays(arrays, schema=table.schema)


def _with_bad_rows(valid: pa.Table, day: dt.date, chunk: Chunk, rng: np.random.Generator) -> pa.Table:
    """Interleave the chunk's bad rows among its valid rows (the first row stays valid).

    A duplicate is an exact repeat of a valid row placed earlier in the file, so
    first-occurrence-wins keeps the original.  Other bad rows are copies of the
    valid row just before them (so their time fits) with a fresh id and one defect.
    """
    n_valid, n_bad = valid.num_rows, chunk.bad
    total = n_valid + n_bad
    bad_pos = np.sort(rng.choice(np.arange(1, total), n_bad, replace=False))
    kinds = rng.permutation(_bad_kinds(chunk))
    valid_before = bad_pos - np.arange(n_bad)  # valid rows preceding each bad position (≥ 1)
    dup = kinds == BAD_ROW_REASONS.index(REASON_DUPLICATE_ID)
    other = np.flatnonzero(~dup)
    base = valid_before[other] - 1
    fresh = _fixed_width_strings(_id_prefix(day), chunk.row_offset + n_valid + np.arange(other.size), 9)
    bad_table = valid.take(pa.array(base)).set_column(0, "battle_id", fresh)
    bad_table = _corrupt(bad_table, kinds[other], rng)
    order = np.empty(total, dtype=np.int64)
    is_bad = np.zeros(total, dtype=bool)
    is_bad[bad_pos] = True
    order[~is_bad] = np.arange(n_valid)
    order[bad_pos[other]] = n_valid + np.arange(other.size)
    order[bad_pos[dup]] = (rng.random(dup.sum()) * valid_before[dup]).astype(np.int64)
    return pa.concat_tables([valid, bad_table]).take(pa.array(order))


# ---------------------------------------------------------------------------
# Scores


def _score_table(config: SimulationConfig, params: Parameters, day: dt.date, chunk: Chunk, rng: np.random.Generator):
    n, n_bad = chunk.scores, chunk.bad_scores
    model = rng.integers(0, config.models, n)
    judge = rng.integers(0, config.judges, n)
    prompt = rng.integers(0, config.prompts, n)
    length = _log_lengths_to_tokens(
        params.mu[model] + params.prompt_len[prompt] + rng.normal(0.0, config.len_noise_sd, n)
    )
    score = np.empty(n, dtype=np.int64)
    step = 200_000  # bound the n × K matrix
    for start in range(0, n, step):
        sl = slice(start, start + step)
        t = params.theta[model[sl]] - params.delta[prompt[sl]] - params.alpha[judge[sl]]
        score[sl] = sample_grades(t, params.tau, rng)
    micros = np.sort(rng.integers(0, _US_PER_DAY, n + n_bad))
    if n_bad:  # bad_score rows: copies of random rows with a grade outside 1..K
        src = rng.integers(0, n, n_bad)
        model, judge, prompt, length = (np.concatenate([v, v[src]]) for v in (model, judge, prompt, length))
        score = np.concatenate([score, np.where(np.arange(n_bad) % 2 == 0, 0, -1)])
        perm = rng.permutation(n + n_bad)
        model, judge, prompt, length, score = (v[perm] for v in (model, judge, prompt, length, score))
    family = np.asarray(params.family_names)
    ts_day = (day - _EPOCH).days * _US_PER_DAY
    arrays = {
        "score_id": _fixed_width_strings(f"s{day:%Y%m%d}-", chunk.score_offset + np.arange(n + n_bad), 9),
        "ts": pa.array(ts_day + micros, pa.timestamp("us", tz="UTC")),
        "judge": _strings(params.judge_names, judge),
        "model": _strings(params.model_names, model),
        "prompt_id": _fixed_width_strings("p", prompt, 6),
        "score": pa.array(score.astype(np.float64), pa.float64()),
        "len": pa.array(length, pa.int64()),
        "family": _strings(family, params.model_family[model]),
        "judge_family": _strings(family, params.judge_family[judge]),
    }
    return pa.Table.from_arrays([arrays[f.name] for f in SCORE_SCHEMA], schema=SCORE_SCHEMA)


def grade_probabilities(t: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Partial-credit probabilities, shape (n, K): P(X=k) ∝ exp(Σ_{h=2..k}(t − τ_h)), k = 1..K."""
    k = np.arange(tau.size + 1)
    logits = np.outer(t, k) - np.concatenate([[0.0], np.cumsum(tau)])[None, :]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def sample_grades(t: np.ndarray, tau: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Grades 1..K drawn by inverse CDF from :func:`grade_probabilities`."""
    cdf = np.cumsum(grade_probabilities(t, tau), axis=1)
    return 1 + np.minimum((rng.random(t.size)[:, None] > cdf).sum(axis=1), tau.size)


# ---------------------------------------------------------------------------
# Public API


def simulate_days(
    config: SimulationConfig, params: Parameters | None = None
) -> Iterator[tuple[dt.date, pa.Table, pa.Table | None]]:
    """Yield ``(day, battles, scores)`` per chunk, days in order.

    A day with more than ``config.chunk_rows`` rows comes as several
    consecutive tables of the same day (memory stays bounded); ``scores`` is
    ``None`` when ``config.scores == 0``.  Deterministic given the config.
    """
    params = params or draw_parameters(config)
    for chunk in plan(config):
        day = day_of(config, chunk.day_index)
        rng = _chunk_rng(config, chunk, 1)
        cols = _valid_battles(config, params, chunk, rng)
        ids = chunk.row_offset + np.arange(chunk.rows)
        iso = config.bad_rows > 0
        battles = _battle_table(config, params, day, cols, ids, iso)
        del cols  # the numpy columns are in the table now; free them before the next step
        if chunk.bad:
            battles = _with_bad_rows(battles, day, chunk, _chunk_rng(config, chunk, 2))
        scores = None
        if config.scores > 0:
            scores = _score_table(config, params, day, chunk, _chunk_rng(config, chunk, 3))
        yield day, battles, scores


def _jsonable(value):
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _plan_totals(config: SimulationConfig) -> dict:
    """The plan's row counts summed in one pass over its lazy chunks (memory stays one chunk's, whatever the run)."""
    totals: dict = dict.fromkeys(("units", "self_units", "identical", "rows", "scores", "bad_scores"), 0)
    totals["bad_kinds"] = np.zeros(len(BAD_ROW_REASONS), dtype=np.int64)
    per_day: dict[str, dict[str, int]] = {}
    for chunk in plan(config):
        totals["bad_kinds"] += np.bincount(_bad_kinds(chunk), minlength=len(BAD_ROW_REASONS))
        day = per_day.setdefault(day_of(config, chunk.day_index).isoformat(), {"rows": 0, "valid": 0, "bad": 0})
        day["rows"] += chunk.rows + chunk.bad
        day["valid"] += chunk.rows
        day["bad"] += chunk.bad
        totals["units"] += chunk.units
        totals["self_units"] += chunk.self_units
        totals["identical"] += round(config.self_identical * chunk.self_units)
        totals["rows"] += chunk.rows
        totals["scores"] += chunk.scores
        totals["bad_scores"] += chunk.bad_scores
    return {**totals, "per_day": per_day}


def truth(config: SimulationConfig, params: Parameters | None = None) -> dict:
    """Everything needed to score a fit, and the exact row counts of the run (no data drawn)."""
    params = params or draw_parameters(config)
    per_row = 2 if config.both_orders else 1
    totals = _plan_totals(config)
    bad_counts = dict(zip(BAD_ROW_REASONS, totals.pop("bad_kinds").tolist(), strict=True))
    valid, bad_total = totals["rows"], sum(bad_counts.values())
    family = params.family_names
    z, mu = _centred(params.theta), _centred(params.mu)
    spread = np.sqrt(np.sum(z**2) * np.sum(mu**2))
    corr = float(np.sum(z * mu) / spread) if spread > 0 else None  # (no correlation with a constant: not NaN)
    ranks = np.empty(config.models, dtype=np.int64)
    ranks[params.standings] = np.arange(config.models)
    stratum = np.searchsorted(params.strata_bounds, ranks, side="right") - 1
    return {
        "seed": config.seed,
        "settings": {k: _jsonable(v) for k, v in dataclasses.asdict(config).items()},
        "model": {
            # (the style and category terms, when drawn, are part of it: the formula without them misled)
            "eta": (
                ("a_j*(theta_by_category_a - theta_by_category_b)" if config.categories else "a_j*(theta_a - theta_b)")
                + " + gamma_j + beta_j*(ln len_a - ln len_b) + lambda_j*(s_aj - s_bj)"
                + (" + sum_k style_jk*(c_ak - c_bk)/(c_ak + c_bk) (0 when both are 0)" if config.style else "")
            ),
            "ties": "Davidson: P(a)=e^{eta/2}/D, P(b)=e^{-eta/2}/D, P(tie)=nu_j/D, D=e^{eta/2}+e^{-eta/2}+nu_j",
            "bothbad": "P(tie (bothbad) | tie) = sigmoid(logit(bothbad_j) - (theta_a + theta_b)/2)",
            "length": "ln len = mu_m + prompt offset + N(0, len_noise_sd), rounded to a positive integer",
            "scores": "P(X=k) ∝ exp(sum_{h=2..k}(theta_m - delta_p - alpha_j - tau_h)), k=1..K",
            "theta_identification": "sum to zero",
        },
        "global": {
            "gamma0": config.gamma0,
            "beta0": config.beta0,
            "lambda0": config.lambda0,
            "sd_u": config.sd_u,
            "sd_beta": config.sd_beta,
            "sd_lambda": config.sd_lambda,
            "disc_sd": config.disc_sd,
            "theta_sd": config.theta_sd,
            "corr_theta_length": corr,
        },
        "models": [
            {
                "model": str(params.model_names[i]),
                "family": family[params.model_family[i]],
                "theta": float(params.theta[i]),
                "mean_log_length": float(params.mu[i]),
                "first_propensity": float(params.propensity[i]),
                "popularity": float(params.popularity[i]),
                "standing": int(ranks[i]),
                "stratum": int(stratum[i]),
                "hub": bool(i in params.hubs),
                **(
                    {
                        "theta_by_category": {
                            c: float(params.theta_in(k)[i]) for k, c in enumerate(CATEGORY_NAMES[: config.categories])
                        }
                    }
                    if config.categories
                    else {}
                ),
                **(
                    {
                        "style_log_mean": dict(
                            zip(("header", "list", "bold"), params.style_log_mean[i].tolist(), strict=True)
                        )
                    }
                    if config.style
                    else {}
                ),
            }
            for i in range(config.models)
        ],
        "judges": [
            {
                "judge": str(params.judge_names[j]),
                "family": family[params.judge_family[j]],
                "kind": "human" if params.judge_human[j] else "llm",
                "gamma": float(params.gamma[j]),
                "u": float(params.u[j]),
                "beta": float(params.beta[j]),
                "lambda": float(params.lam[j]),
                "nu": float(params.nu[j]),
                "a": float(params.disc[j]),
                "alpha": float(params.alpha[j]),
                "bothbad_share": float(params.bothbad[j]),
                **({"style": params.style_effect[j].tolist()} if config.style else {}),
            }
            for j in range(config.judges)
        ],
        "design": {
            "name": config.design,
            "hubs": [str(params.model_names[h]) for h in params.hubs],
            "strata_bounds": params.strata_bounds.tolist() if config.design == "stratified" else [],
        },
        "scores": {
            "grades": config.grades,
            "tau": params.tau.tolist(),
            "delta_mean": float(params.delta.mean()),
            "delta_sd": float(params.delta.std()),
        },
        "prompts": {
            "n": config.prompts,
            "delta": params.delta.tolist(),
            "log_length_offset": params.prompt_len.tolist(),
        },
        "counts": {
            "rows": valid + bad_total,
            "valid": valid,
            "units": totals["units"],
            "self_battles": totals["self_units"] * per_row,
            "identical_self_battles": totals["identical"] * per_row,
            "bad_rows": bad_counts,
            "bad_total": bad_total,
            "score_rows": totals["scores"] + totals["bad_scores"],
            "score_valid": totals["scores"],
            "score_bad_rows": {REASON_BAD_SCORE: totals["bad_scores"]},
            "per_day": totals["per_day"],
        },
        "layout": {
            "battles": "battles/day=YYYY-MM-DD/part-00000.parquet",
            "scores": "scores/day=YYYY-MM-DD/part-00000.parquet",
            "ts": "ISO-8601 string column" if config.bad_rows > 0 else "timestamp[us, UTC]",
        },
    }


_OUTPUTS = ("battles", "scores", "truth.json")


def write_simulation(
    config: SimulationConfig,
    out_dir: str | Path,
    overwrite: bool = False,
    relabel: Callable[[dt.date, int, pa.Table], pa.Table] | None = None,
) -> Path:
    """Write ``battles/day=…/part-00000.parquet`` (+ scores) and ``truth.json`` under ``out_dir``.

    ``relabel(day, chunk_of_day, battles)``: applied to each battle table before it is written (a
    benchmark splits human pools into voters this way, chunk by chunk, so memory stays one chunk's);
    ``truth.json`` describes the simulation before relabelling.

    Refuses (``StateError``) to write over an earlier simulation unless
    ``overwrite``, because stale day partitions of a longer earlier run would
    silently join the new one.  ``truth.json`` is written last: its presence
    means the data is complete.
    """
    out = Path(out_dir)
    imported = [name for name in (IMPORT_MANIFEST, IMPORT_DEAD_LETTERS) if (out / name).exists()]
    if imported:  # --overwrite replaced its battles and kept its manifest: a refresh reported the import's rejections
        raise StateError(f"{out} holds a biasboard import ({imported[0]}), not a simulation; use a new folder")
    existing = [out / name for name in _OUTPUTS if (out / name).exists()]
    if existing and not overwrite:
        raise StateError(f"{out} already holds a simulation ({existing[0].name}); pass --overwrite to replace it")
    for path in existing:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    params = draw_parameters(config)
    writers: dict[str, pq.ParquetWriter] = {}
    current_day, chunk_of_day = None, 0
    try:
        for day, battles, scores in simulate_days(config, params):
            if day != current_day:
                for writer in writers.values():
                    writer.close()
                writers = {}
                current_day, chunk_of_day = day, 0
            if relabel is not None:
                battles = relabel(day, chunk_of_day, battles)
            chunk_of_day += 1
            for kind, table in (("battles", battles), ("scores", scores)):
                if table is None or table.num_rows == 0:
                    continue  # no file for an empty day: readers rightly reject empty files
                if kind not in writers:
                    folder = out / kind / f"day={day.isoformat()}"
                    folder.mkdir(parents=True, exist_ok=True)
                    writers[kind] = pq.ParquetWriter(folder / "part-00000.parquet", table.schema)
                writers[kind].write_table(table, row_group_size=1 << 20)
    finally:
        for writer in writers.values():
            writer.close()
    (out / "truth.json").write_text(json.dumps(truth(config, params), indent=1))
    return out
