"""``biasboard simulate``: day-partitioned synthetic battle logs plus ``truth.json``.

Writes ``OUT/battles/day=YYYY-MM-DD/part-00000.parquet`` (and ``OUT/scores/…``
when ``--scores`` > 0) and ``OUT/truth.json`` with every true parameter and the
exact count of every row kind.  The generator is :mod:`biasboard.simulate`
(plain numpy/pyarrow, no Beam); this module only maps flags onto its config.

    biasboard simulate --out /tmp/sim --battles 1000000 --models 30 --judges 6 \\
        --design swiss --both-orders --bad-rows 0.01 --scores 0.2 --seed 7
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from biasboard.pipelines import validation
from biasboard.pipelines.options import OneFolder
from biasboard.schemas.errors import InputError
from biasboard.simulate import DESIGNS, SimulationConfig, truth, write_simulation
from biasboard.simulate.simulator import FLAG_RULES

log = logging.getLogger(__name__)

_DEFAULTS = SimulationConfig()


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from err


def _number(field: str) -> dict[str, Any]:
    """``add_argument`` keywords of the flag that sets ``field``: its default, read and checked by its rule."""
    flag, rule = FLAG_RULES[field]
    return {"type": rule.flag_type(flag), "default": getattr(_DEFAULTS, field)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    parser.add_argument("--out", action=OneFolder, required=True, help="output folder (battles/, scores/, truth.json)")
    parser.add_argument("--battles", **_number("battles"), help="valid battle rows (default %(default)s)")
    parser.add_argument("--models", **_number("models"), help="models (default %(default)s)")
    parser.add_argument("--judges", **_number("judges"), help="judges, humans included (default %(default)s)")
    parser.add_argument("--human-judges", **_number("human_judges"), help="of which human pools (default %(default)s)")
    parser.add_argument("--days", **_number("days"), help="day partitions (default %(default)s)")
    parser.add_argument("--start-date", type=_date, default=d.start_date, help="first day (default %(default)s)")
    parser.add_argument("--design", choices=DESIGNS, default=d.design, help="tournament design (Katoch et al. 2026)")
    parser.add_argument("--both-orders", action="store_true", help="judge every sampled unit in both orders")
    parser.add_argument(
        "--bad-rows", **_number("bad_rows"), help="injected bad rows per valid row (default %(default)s)"
    )
    parser.add_argument("--scores", **_number("scores"), help="ordinal score rows per battle row (default %(default)s)")
    parser.add_argument("--grades", **_number("grades"), help="scores are 1..K (default %(default)s)")
    parser.add_argument("--seed", **_number("seed"), help="random seed (default %(default)s)")
    parser.add_argument(
        "--corr-length", **_number("corr_length"), help="corr(θ, mean log length) (default %(default)s)"
    )
    parser.add_argument(
        "--self-battles", **_number("self_battles"), help="share of model_a == model_b (default %(default)s)"
    )
    parser.add_argument(
        "--self-identical", **_number("self_identical"), help="of self-battles: same answer (default %(default)s)"
    )
    parser.add_argument("--hubs", **_number("hubs"), help="multihub hubs (0: max(2, min(5, M/8)))")
    parser.add_argument("--strata", **_number("strata"), help="stratified strata (0: max(2, min(5, M/5)))")
    parser.add_argument("--prompts", **_number("prompts"), help="distinct prompts (default %(default)s)")
    parser.add_argument("--families", **_number("families"), help="model families (default %(default)s)")
    parser.add_argument(
        "--position-skew",
        **_number("position_skew"),
        help="SD of each model's first-slot propensity ρ_m (default %(default)s: a fair coin)",
    )
    parser.add_argument("--gamma0", **_number("gamma0"), help="global position effect γ₀ (default %(default)s)")
    parser.add_argument(
        "--beta0", **_number("beta0"), help="global length effect β₀ per ln ratio (default %(default)s)"
    )
    parser.add_argument("--lambda0", **_number("lambda0"), help="global same-family affinity λ₀ (default %(default)s)")
    parser.add_argument("--sd-u", **_number("sd_u"), help="SD of per-judge position deviations (default %(default)s)")
    parser.add_argument("--theta-sd", **_number("theta_sd"), help="SD of model quality θ (default %(default)s)")
    parser.add_argument("--style", action="store_true", help="write style counts (headers, lists, bold) with effects")
    parser.add_argument(
        "--corr-style", **_number("corr_style"), help="corr(θ, mean log header count) (default %(default)s)"
    )
    parser.add_argument(
        "--categories",
        **_number("categories"),
        help="label each battle with one of N categories, each shifting every model's quality (refresh --slices "
        "category recovers their boards; default %(default)s: no category)",
    )
    parser.add_argument(
        "--category-sd",
        **_number("category_sd"),
        help="SD of a model's quality shift within a category (default %(default)s)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier simulation in --out")


#: Flags that act only with another, as (field, what it needs, whether the command has it, why).  Given without
#: it, each was recorded in truth.json's settings and drew nothing (``--grades 5`` without ``--scores``: no
#: grade; ``--hubs 3`` with the uniform design: no hub), so a run the user believed had them had not: refused,
#: like refresh's ``--slice-min-battles`` without ``--slices``.
_NEEDS: tuple[tuple[str, str, Callable[[argparse.Namespace], bool], str], ...] = (
    ("grades", "--scores", lambda a: a.scores > 0, "no score is drawn"),
    ("hubs", "--design multihub", lambda a: a.design == "multihub", "only the multihub design has hubs to count"),
    ("strata", "--design stratified", lambda a: a.design == "stratified", "only the stratified design has strata"),
    ("corr_style", "--style", lambda a: a.style, "no style count is drawn"),
    ("category_sd", "--categories", lambda a: a.categories > 0, "no battle has a category"),
    ("self_identical", "--self-battles", lambda a: a.self_battles > 0, "there is no self-battle"),
)


def _check_applies(args: argparse.Namespace) -> None:
    """Refuse a flag set (to other than its default) where it changes nothing (InputError names it)."""
    for name, needed, has, why in _NEEDS:
        if getattr(args, name) != getattr(_DEFAULTS, name) and not has(args):
            raise InputError(f"{FLAG_RULES[name][0]} {getattr(args, name)} is given without {needed}: {why}")
    for name in ("corr_length", "corr_style"):  # (a correlation with a constant is none: it was dropped silently)
        if args.theta_sd == 0 and getattr(args, name) != 0:
            flag = FLAG_RULES[name][0]
            raise InputError(
                f"{flag} {getattr(args, name)} is given with --theta-sd 0: every θ is 0, nothing correlates"
            )
    if args.both_orders and args.position_skew != _DEFAULTS.position_skew:
        raise InputError(
            f"--position-skew {args.position_skew} is given with --both-orders: every unit is shown in both orders"
        )


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    """The :class:`SimulationConfig` the flags describe (InputError names a bad flag, or one that does not apply)."""
    _check_applies(args)
    return SimulationConfig(
        battles=args.battles,
        models=args.models,
        judges=args.judges,
        human_judges=args.human_judges,
        days=args.days,
        start_date=args.start_date,
        design=args.design,
        both_orders=args.both_orders,
        bad_rows=args.bad_rows,
        scores=args.scores,
        grades=args.grades,
        seed=args.seed,
        corr_length=args.corr_length,
        self_battles=args.self_battles,
        self_identical=args.self_identical,
        hubs=args.hubs,
        strata=args.strata,
        prompts=args.prompts,
        families=args.families,
        position_skew=args.position_skew,
        gamma0=args.gamma0,
        beta0=args.beta0,
        lambda0=args.lambda0,
        sd_u=args.sd_u,
        theta_sd=args.theta_sd,
        style=args.style,
        corr_style=args.corr_style,
        categories=args.categories,
        category_sd=args.category_sd,
    )


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    if beam_args:
        raise InputError(f"simulate runs no Beam pipeline; unknown options: {' '.join(beam_args)}")
    config = config_from_args(args)
    validation.local_only(
        args.out,
        "--out",
        "simulate writes local files only; copy the folder to the bucket afterwards (refresh --input reads gs://)",
    )
    validation.writable_folder(args.out, "--out")
    validation.not_owned(args.out, "--out")
    start = time.perf_counter()
    out = write_simulation(config, args.out, overwrite=args.overwrite)
    counts = truth(config)["counts"]
    print(
        f"simulated {counts['rows']:,} battle rows ({counts['valid']:,} valid, {counts['bad_total']:,} bad, "
        f"{counts['self_battles']:,} self-battles) and {counts['score_rows']:,} score rows over {config.days} days "
        f"in {time.perf_counter() - start:.1f} s -> {out}"
    )
    return 0
