"""What a numeric flag accepts, one rule per flag, shared by the command line and the code behind it.

Here, beside the other data contracts and without Beam, so that the simulator's own config check
(:class:`biasboard.simulate.SimulationConfig`) and the importers' options use the very rules their flags are read
with; :mod:`biasboard.pipelines.validation` re-exports :class:`NumberRule` for the jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from biasboard.schemas.errors import InputError


@dataclass(frozen=True)
class NumberRule:
    """What a numeric flag accepts, said in the flag's own words: ``--k must be at least 1, got 0``.

    One rule both reads the command line's text (:meth:`flag_type`: ``--k abc`` is refused in one line rather than
    argparse's usage block) and checks a value a caller of the job's function passed (:meth:`check`).  Why:
    ``--length-clip 5`` was refused by the model's own check, naming its field (``length_clip must be None or ...``)
    and not the flag, ``--gate-level 2`` said "gate level", ``--length-clip abc`` named a private parser function.
    ``low``/``high``: inclusive; ``above``/``below``: exclusive; ``edges``: the only values allowed; ``none``: a
    word that stands for None (no bound).  NaN and infinities are never allowed: ``simulate --gamma0 inf`` wrote
    battles whose verdicts were all NaN, without a word.
    """

    integer: bool = False
    low: float | None = None
    above: float | None = None
    high: float | None = None
    below: float | None = None
    edges: tuple[float, ...] = ()
    none: str | None = None

    def allowed(self) -> str:
        """``at least 1``, ``a number in (0, 1)``, ``from 1 to 6``, ``one of 0.25, 0.5 or 'none'``: what is allowed."""
        lower = ("[", self.low) if self.low is not None else ("(", self.above) if self.above is not None else None
        upper = ("]", self.high) if self.high is not None else (")", self.below) if self.below is not None else None
        if self.edges:
            text = "one of " + ", ".join(f"{e:g}" for e in self.edges)
        elif lower and upper and self.integer and lower[0] + upper[0] == "[]":
            text = f"from {lower[1]:g} to {upper[1]:g}"
        elif lower and upper:
            text = f"a number in {lower[0]}{lower[1]:g}, {upper[1]:g}{upper[0]}"
        else:
            bounds = [f"at least {self.low:g}"] if self.low is not None else []
            bounds += [f"above {self.above:g}"] if self.above is not None else []
            bounds += [f"at most {self.high:g}"] if self.high is not None else []
            bounds += [f"below {self.below:g}"] if self.below is not None else []
            text = " and ".join(bounds) or "a finite number"
        return text + (f" or '{self.none}'" if self.none else "")

    def holds(self, value: float) -> bool:
        """``value`` is allowed (NaN and infinities never are)."""
        if self.edges:
            return any(float(value) == e for e in self.edges)
        return (
            math.isfinite(value)
            and (not self.integer or float(value).is_integer())
            and (self.low is None or value >= self.low)
            and (self.above is None or value > self.above)
            and (self.high is None or value <= self.high)
            and (self.below is None or value < self.below)
        )

    def check(self, value: float | None, flag: str) -> None:
        """Refuse a value outside the rule for ``flag`` in one line (None means "not given" or the ``none`` word)."""
        if value is not None and not self.holds(value):
            shown = value if isinstance(value, int) else f"{value:g}"  # 5, not 5.0; 1000000000, not 1e+09
            raise InputError(f"{flag} must be {self._finite(value)}{self.allowed()}, got {shown}")

    def _finite(self, value: float) -> str:
        """``a finite number, `` before a one-sided bound that a NaN or an infinity is refused by: ``--sd-u inf`` was
        told "must be at least 0", which inf is (a range, ``a number in [0, 1]``, needs no such word)."""
        one_bound = [self.low, self.above, self.high, self.below].count(None) == 3
        return "a finite number, " if one_bound and not self.edges and not math.isfinite(value) else ""

    def read(self, text: str, flag: str) -> int | float | None:
        """The command line's ``text`` for ``flag`` as the rule's number (or None for the ``none`` word), checked."""
        if self.none and text.strip().lower() == self.none:
            return None
        try:
            value: int | float = int(text) if self.integer else float(text)
        except ValueError:
            kind = "a whole number, " if self.integer else ""
            raise InputError(f"{flag} must be {kind}{self.allowed()}, got {text!r}") from None
        self.check(value, flag)
        return value

    def flag_type(self, flag: str) -> Callable[[str], int | float | None]:
        """The ``type=`` of ``flag``'s ``add_argument``: :meth:`read`.  Its :class:`InputError` is no ``ValueError``,
        so argparse (which turns those into its usage block and ``invalid <function> value``) lets it through to the
        CLI's one-line refusal, exit code 2."""
        return partial(self.read, flag=flag)
