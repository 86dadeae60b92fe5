"""Name hygiene for judge and model names: trim, reject the unusable, apply the user's aliases.

Names are the leaderboard's keys, so two spellings of one model become two
models.  Before any rule runs, every judge and model name is

* **trimmed** of surrounding whitespace and invisible characters (``" gpt-4 "`` and
  ``"gpt-4\u200b"`` are ``gpt-4``: :data:`INVISIBLE`) and put in Unicode NFC (``"e\u0301"``, as a macOS
  or JavaScript export may decompose it, is ``"\u00e9"``: the two display alike, and were two models of one
  name on the board); the counted rows this changed are reported as ``trimmed``.  A name the user types
  (``--aliases``, ``--reference``, ``plan --judge``, ``import --judge``/``--baseline``) is read the same way
  (:func:`canonical_name`), and a pattern matched against names (``--judge-pool prefix:SEP``, a family map's
  ``prefix`` and ``regex``) is put in the same form (:func:`in_name_form`): typed decomposed, it matched nothing;
* **renamed** by the optional alias map (``--aliases FILE``: a JSON object
  ``{"name as written": "canonical name"}``, e.g. for case variants; applied
  once, after trimming, to judges and models alike; reported as ``renamed``);
* **rejected** when it holds a control character or a bidirectional override (``control_chars:<col>``) or
  is longer than :data:`MAX_NAME_CHARS` characters (``name_too_long:<col>``):
  such a name is a broken writer, not a model, and a megabyte name would be
  carried through every table and plot.

Names repeat across rows (models, judges), so the work is done once per
distinct name in a batch and mapped back to the rows; a batch without anything
to fix costs one ``unique`` per name column.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import polars as pl
from biasboard.schemas.coerce import FLAG_PREFIX
from biasboard.schemas.errors import InputError
from biasboard.schemas.wording import first_few

#: Longest accepted judge or model name, in characters.
MAX_NAME_CHARS = 256
REASON_CONTROL_CHARS_PREFIX = "control_chars:"
REASON_NAME_TOO_LONG_PREFIX = "name_too_long:"

#: Characters trimmed from a name's ends with its whitespace: zero-width space, non-joiner and joiner, word joiner,
#: the byte-order mark, and the left-to-right / right-to-left marks.  Invisible where a name is shown, they made
#: ``"m2\u200b"`` a model beside ``m2`` with no word (a trailing no-break space, which is whitespace, was trimmed).
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u200e\u200f"

#: Characters a name may not hold (rejected ``control_chars:<col>``): control characters, and the bidirectional
#: embedding, override and isolate controls, with which one name displays as another (``"rlo\u202eevil"`` shows as
#: "rlolive" in the report, the console and a spreadsheet).
UNUSABLE_CHARS = r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"

#: The Unicode normal form of every name (composed: what most keyboards and writers produce).
NAME_FORM: Final = "NFC"

#: A run of whitespace or :data:`INVISIBLE` characters, as trimmed from a name's ends, in a pattern polars (Rust) and
#: Python read alike: Python's ``\s`` also matches the separators ``\x1c``-``\x1f``, control characters that the
#: data's rule rejects (``control_chars``) rather than trims.
_EDGES = f"(?:[^\\S\\x1c-\\x1f]|[{INVISIBLE}])+"

#: Prefix of the column that keeps a name column as the input wrote it, added beside it only when trimming, NFC or an
#: alias changed one of its names (:func:`clean_names`, the importers' ``in_names_form``): see :func:`as_written`.
AS_WRITTEN_PREFIX = "__as_written:"

BATTLE_NAME_COLUMNS = ("judge", "model_a", "model_b")
SCORE_NAME_COLUMNS = ("judge", "model")


@dataclass(frozen=True)
class AliasMap:
    """Name → canonical name, as the user wrote it; empty means no renaming."""

    aliases: Mapping[str, str] = field(default_factory=dict)
    source: str = ""

    def digest(self) -> str:
        """SHA-256 of the mapping (what a day's stored settings compare): a changed map re-aggregates."""
        return hashlib.sha256(json.dumps(dict(sorted(self.aliases.items()))).encode("utf-8")).hexdigest()

    @classmethod
    def parse(cls, text: str, source: str) -> AliasMap:
        """A JSON object of non-empty strings; InputError naming ``source`` otherwise."""
        try:
            document = json.loads(text)
        except ValueError as err:
            raise InputError(f"{source}: the alias map is not JSON: {err}") from err
        if not isinstance(document, dict):
            raise InputError(f"{source}: the alias map must be a JSON object of name -> canonical name")
        bad = [
            k for k, v in document.items() if not isinstance(v, str) or not canonical_name(v) or not canonical_name(k)
        ]
        if bad:
            raise InputError(f"{source}: alias map entries must map a name to a non-empty name (not: {bad[0]!r})")
        # read as the names they rename are (:func:`canonical_names`): a key typed decomposed would match no name
        aliases = {canonical_name(k): canonical_name(v) for k, v in document.items()}
        unusable = [v for v in aliases.values() if name_fault(v) is not None]
        if unusable:
            raise InputError(
                f"{source}: canonical name {unusable[0][:40]!r} is not a usable name ({name_fault(unusable[0])})"
            )
        # Names are renamed once, not along a chain: {"a": "b", "b": "c"} split a's rows (→ b) from b's (→ c), and
        # {"a": "b", "b": "a"} swapped two judges, without a word.  Each name must map straight to its final name.
        chained = sorted(old for old, new in aliases.items() if new in aliases and aliases[new] != new)
        if chained:
            old = chained[0]
            raise InputError(
                f"{source}: {old!r} is renamed to {aliases[old]!r}, which is itself renamed to "
                f"{aliases[aliases[old]]!r}: names are renamed once, so map each name straight to its final name"
            )
        return cls(aliases, source)


#: Unmatched ``--aliases`` entries a note names at most.
NAMED_ALIASES = 5


def unmatched_aliases_note(aliases: AliasMap, matched: Collection[str]) -> str | None:
    """The note naming the entries of ``aliases`` whose names (keys) are not among ``matched`` (the keys that
    renamed a counted row), or None when every entry matched.

    Why: the note once came only when no entry matched, so a user with a typo in one entry of 30 never heard of it;
    the entries are named (a few, and how many), as they are the user's to check.  A map reused across days may
    miss some names on some days: the caller passes the keys matched over all of the days it reads."""
    unmatched = sorted(set(aliases.aliases) - set(matched))
    if not unmatched:
        return None
    few = first_few([repr(k) for k in unmatched], NAMED_ALIASES)
    entries = f"{len(aliases.aliases):,} entries of {aliases.source}"
    if len(unmatched) == len(aliases.aliases):
        head = f"none of the {entries} renamed a counted row (renamed: 0 in summary.json): {few}"
    else:
        head = f"{len(unmatched):,} of the {entries} renamed no counted row: {few}"
    return f"aliases: {head}; the names they map from are not in the input as written there"


def as_written(column: str, columns: Collection[str]) -> pl.Expr:
    """``column`` as the input wrote it: its :data:`AS_WRITTEN_PREFIX` copy when one is among ``columns``, else the
    column itself (no name of it was changed), named ``column``.

    Why: names are cleaned before the rules run (ids, duplicates and the board's keys depend on the clean form), but
    a dead letter keeps the row's original fields (:mod:`biasboard.schemas.deadletter`) so that the user can find the
    row at its source and fix it there: a search for ``gpt-4`` finds no ``" gpt-4"``, nor a composed ``modèle`` the
    decomposed one the file holds."""
    kept = AS_WRITTEN_PREFIX + column
    return (pl.col(kept) if kept in columns else pl.col(column)).alias(column)


def canonical_names(names: pl.Series | pl.Expr):
    """``names`` without whitespace or :data:`INVISIBLE` characters at either end (in any mix of the two), in
    :data:`NAME_FORM`: each name as the leaderboard keys it."""
    return names.str.replace(f"^{_EDGES}", "").str.replace(f"{_EDGES}$", "").str.normalize(NAME_FORM)


def canonical_name(name: str) -> str:
    """One name as :func:`canonical_names` reads a column's: for the names a user types in an option or a map.

    Why: the names of the data are trimmed and composed before anything matches them, so a name typed with a
    trailing space or decomposed (``"e\u0301"``, as a macOS terminal may paste it) named no judge or model."""
    return in_name_form(re.sub(f"{_EDGES}$", "", re.sub(f"^{_EDGES}", "", name)))


def in_name_form(text: str) -> str:
    """``text`` in :data:`NAME_FORM`, nothing trimmed: for a pattern matched against names (a separator, a prefix,
    a regex), whose spaces may be meant."""
    return unicodedata.normalize(NAME_FORM, text)


def spelling_twins(names: Iterable[str]) -> list[list[str]]:
    """Groups of ``names`` (each of two or more, sorted) that :func:`canonical_names` makes one name.

    Why: a day's cells keep its names as cleaned when it was aggregated, and a stored day is aggregated again only
    when its inputs or settings change.  Days stored before names were put in NFC keep a decomposed spelling
    beside the new days' composed one — two rows of one model on the board, which only this check can see."""
    every = list(names)
    # Only a name with an edge to trim or a character past ASCII can change: the rest are their own canonical form
    # (50,000 voter-judges: 63 ms through polars, ~5 ms so).
    odd = [name for name in every if not name.isascii() or name != name.strip()]
    if not odd:
        return []
    keys = set(canonical_names(pl.Series(odd, dtype=pl.String)).to_list())
    plain = set(every).difference(odd)
    frame = pl.DataFrame({"name": odd + sorted(keys & plain)}, schema={"name": pl.String})
    twins = (
        frame.with_columns(canonical_names(pl.col("name")).alias("key"))
        .group_by("key")
        .agg(pl.col("name").unique().sort())
        .filter(pl.col("name").list.len() > 1)
        .sort("key")
    )
    return twins["name"].to_list()


def name_fault(name: str) -> str | None:
    """Why a (trimmed) name is unusable, or None (the scalar form of the rule, for option checks)."""
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if re.search(UNUSABLE_CHARS, name):
        return "holds a control character"
    return None


@dataclass
class NameFixes:
    """Which rows :func:`clean_names` trimmed / renamed (masks over the batch; None: no row).

    A row both trimmed and renamed counts as renamed.  The validator counts the
    rows it keeps (:meth:`counts`), so the numbers describe the leaderboard's rows.
    """

    trimmed: np.ndarray | None = None
    renamed: np.ndarray | None = None
    #: Per name column looked at: its blank values (null aside) as written, which stay so (rejected as missing);
    #: the validator's blank check reads them here rather than finding the column's distinct names again.
    blanks: dict[str, pl.Series] = field(default_factory=dict)

    #: Per name column an alias renamed rows of: (its names as written, the mask of those rows, the alias keys that
    #: renamed them), for :meth:`aliased`.
    aliased_rows: list[tuple[pl.Series, np.ndarray, frozenset[str]]] = field(default_factory=list)

    def counts(self, kept: np.ndarray) -> tuple[int, int]:
        """(trimmed, renamed) among the rows at positions ``kept``."""
        trimmed, renamed = (int(m[kept].sum()) if m is not None else 0 for m in (self.trimmed, self.renamed))
        return trimmed, renamed

    def aliased(self, kept: np.ndarray) -> frozenset[str]:
        """The alias map's keys (names in :func:`canonical_names`' form) that renamed a row at positions ``kept``.

        Why: ``renamed`` counts rows, not entries, so a map one of whose 30 entries had a typo renamed rows and said
        nothing of it (:func:`unmatched_aliases_note`).  Only the renamed rows are looked at: a run without aliases,
        or whose aliases match nothing, pays nothing; where every renamed row is kept (the usual case) the column's
        keys are all matched without gathering a name."""
        found: set[str] = set()
        for names, rows, keys in self.aliased_rows:
            picked = kept[rows[kept]]
            if len(picked) == np.count_nonzero(rows):
                found |= keys
            elif len(picked):
                found.update(canonical_names(names.gather(picked).cast(pl.String).drop_nulls().unique()).to_list())
        return frozenset(found)


def clean_names(
    df: pl.DataFrame, columns: Iterable[str], aliases: AliasMap | None = None
) -> tuple[pl.DataFrame, NameFixes]:
    """Trim and alias the name ``columns`` of ``df``; flag unusable names for the rules.

    Flags are ``__flag:control_chars:<col>`` / ``__flag:name_too_long:<col>``
    columns (see :mod:`biasboard.schemas.coerce`), added only when some row has one; a column whose names were
    changed keeps its names as written beside it (``__as_written:<col>``, for the dead letters: :func:`as_written`).
    """
    mapping = dict(aliases.aliases) if aliases is not None else {}
    replaced: list[pl.Series] = []
    trimmed_rows = renamed_rows = None
    blanks: dict[str, pl.Series] = {}
    aliased_rows: list[tuple[pl.Series, np.ndarray, frozenset[str]]] = []
    for name in columns:
        if name not in df.columns or (
            df.schema[name] not in (pl.String, pl.Categorical) and not isinstance(df.schema[name], pl.Enum)
        ):
            continue
        raw = df.get_column(name)
        # a dictionary-coded (Categorical) column gives its distinct names, and takes its renames, without a
        # string per row
        # nulls dropped first: polars' unique() of a Categorical holding nulls takes twice as long
        distinct = (raw if raw.dtype == pl.Categorical else raw.cast(pl.String)).drop_nulls().unique()
        distinct = distinct.cast(pl.String)
        stripped = canonical_names(distinct)
        blanks[name] = distinct.filter(stripped == "")
        canonical = stripped.replace(mapping) if mapping else stripped
        faults = pl.DataFrame({"name": distinct, "clean": canonical}).with_columns(
            (pl.col("clean").str.len_chars() > MAX_NAME_CHARS).alias("long"),
            pl.col("clean").str.contains(UNUSABLE_CHARS).alias("ctrl"),
            (pl.col("name") != pl.col("clean")).alias("changed"),
            (canonical_names(pl.col("name")) != pl.col("clean")).alias("aliased"),
        )
        if not faults.select(pl.any_horizontal("long", "ctrl", "changed").any()).item():
            continue  # every name is usable as written (the usual case)
        column = raw if raw.dtype == pl.Categorical else raw.cast(pl.String)
        for reason, flag in ((REASON_CONTROL_CHARS_PREFIX, "ctrl"), (REASON_NAME_TOO_LONG_PREFIX, "long")):
            bad = faults.filter(pl.col(flag)).get_column("name")
            if len(bad):
                replaced.append(column.is_in(bad.implode()).fill_null(False).alias(FLAG_PREFIX + reason + name))
        # a blank name stays as written: it is rejected as missing, and its dead letter shows what was there
        changed = faults.filter(pl.col("changed") & ~pl.col("ctrl") & ~pl.col("long") & (pl.col("clean") != ""))
        if changed.height:
            old, new = changed.get_column("name"), changed.get_column("clean")
            replaced.append(column.replace(old, new).alias(name))
            replaced.append(raw.alias(AS_WRITTEN_PREFIX + name))  # for the dead letters (:func:`as_written`)
            aliased = changed.filter(pl.col("aliased")).get_column("name")
            rows_aliased = column.is_in(aliased.implode()).fill_null(False)
            rows_trimmed = column.is_in(old.implode()).fill_null(False) & ~rows_aliased
            renamed_rows = rows_aliased if renamed_rows is None else renamed_rows | rows_aliased
            if len(aliased):
                keys = frozenset(canonical_names(aliased).to_list())
                aliased_rows.append((column, rows_aliased.to_numpy(), keys))
            trimmed_rows = rows_trimmed if trimmed_rows is None else trimmed_rows | rows_trimmed
    renamed = renamed_rows.to_numpy() if renamed_rows is not None else None
    trimmed = trimmed_rows.to_numpy() if trimmed_rows is not None else None
    if trimmed is not None and renamed is not None:
        trimmed = trimmed & ~renamed
    return (df.with_columns(replaced) if replaced else df), NameFixes(trimmed, renamed, blanks, aliased_rows)
