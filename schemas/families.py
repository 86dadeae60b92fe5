"""Model and judge families from names: ordered prefix/regex rules.

The affinity covariate (does a judge favour its own family?) needs the family
of each model and of each judge.  A battle may carry them (``family_a``,
``family_b``, ``judge_family``); otherwise the family map assigns them from the
name.  Rules are tried in order on the lower-cased name and the first match
wins, so specific rules (``gpt4all`` is Nomic's) come before general ones
(``gpt`` is OpenAI's).  A user map (``--family-map PATH``) is tried before the
defaults in :file:`default_families.json`, so it can override or extend them.

Rule file format (JSON)::

    {"rules": [{"prefix": "llama", "family": "meta"},
               {"regex": "^my-(judge|model)", "family": "in-house"}]}

A bare list of rules, or a ``{"prefix": "family"}`` object (prefixes in file
order), is accepted too.  ``prefix`` matches at the start of the name or just
after an org path (``meta-llama/llama-3`` matches ``llama``); ``regex`` is a
Python regular expression searched anywhere in the name, ignoring case.

Names are matched once per distinct name and cached, so applying the map to a
batch costs one dictionary lookup per distinct name, never Python per row.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources

import polars as pl
from biasboard.schemas.cells import UNKNOWN_FAMILY
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import NAME_FORM, in_name_form

DEFAULT_FAMILIES_RESOURCE = "default_families.json"


@dataclass(frozen=True)
class FamilyRule:
    """One ordered rule: a compiled pattern and the family it assigns."""

    pattern: str
    family: str

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE)


def _text(obj: dict, key: str, source: str, index: int) -> str:
    """A rule's ``key`` as non-empty text, else a one-line error.

    Why: ``str()`` of anything made ``"family": null`` the family ``"None"`` (shared by every rule so written:
    a judge and the models so mapped were one family, an affinity from nothing), a list ``"['openai']"``, and an
    empty ``prefix`` matched every name.  A family is trimmed and lower-cased, as a family given in the data is
    (:func:`~biasboard.transforms.covariates.given_family`): kept as written, a map's ``Acme`` never met a battle's
    given ``Acme`` (read as ``acme``), so the judge so mapped was a stranger to its own models."""
    value = obj[key]
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{source}: family rule #{index}: '{key}' must be a non-empty string, got {value!r}")
    return family_form(value) if key == "family" else value


def family_form(family: str) -> str:
    """A family as the map keys it: trimmed, in the names' Unicode form (NFC) and lower-cased, as a family given in the
    data is (:func:`~biasboard.transforms.covariates.given_family`).  Why NFC: ``"Soci\u00e9t\u00e9"`` and its
    decomposed spelling display alike and were two families (a judge a stranger to its own models)."""
    return in_name_form(family.strip()).lower()


def family_text(text: pl.Expr | pl.Series) -> pl.Expr | pl.Series:
    """:func:`family_form` over a column (the families given in the data): one rule for both."""
    return text.str.strip_chars().str.normalize(NAME_FORM).str.to_lowercase()


def _rule_from_obj(obj: object, source: str, index: int) -> FamilyRule:
    if not isinstance(obj, dict) or "family" not in obj or not ({"prefix", "regex"} & set(obj)):
        raise InputError(f"{source}: family rule #{index} must be an object with 'family' and 'prefix' or 'regex'")
    family = _text(obj, "family", source, index)
    # A regex is kept as written and matched case-insensitively: lower-casing its text turned \D, \W, \S, \B
    # into \d, \w, \s, \b (another pattern, silently) and \Z into the bad escape \z.
    # The pattern in the names' form (composed), as the names it is matched against are: a prefix or a regex typed
    # decomposed ("cafe\u0301") matched none of them.
    key = "regex" if "regex" in obj else "prefix"
    text = in_name_form(_text(obj, key, source, index))
    pattern = text if key == "regex" else r"(^|/)" + re.escape(text.lower())
    try:
        re.compile(pattern, re.IGNORECASE)
    except re.error as err:
        raise InputError(f"{source}: family rule #{index} has a bad regex {pattern!r}: {err}") from err
    return FamilyRule(pattern, family)


def parse_rules(text: str, source: str) -> list[FamilyRule]:
    """Rules from a family-map JSON document; ``source`` names it in error messages."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{source}: family map is not valid JSON: {err}") from err
    if isinstance(doc, dict) and "rules" in doc:
        items = doc["rules"]
    elif isinstance(doc, list):
        items = doc
    elif isinstance(doc, dict):
        items = [{"prefix": k, "family": v} for k, v in doc.items() if not k.startswith("_")]
    else:
        raise InputError(f"{source}: family map must be a JSON object or list")
    if not isinstance(items, list):
        raise InputError(f"{source}: 'rules' must be a list")
    return [_rule_from_obj(obj, source, i) for i, obj in enumerate(items)]


def default_rules() -> list[FamilyRule]:
    """The shipped rules for the common model families."""
    text = resources.files("biasboard.schemas").joinpath(DEFAULT_FAMILIES_RESOURCE).read_text(encoding="utf-8")
    return parse_rules(text, DEFAULT_FAMILIES_RESOURCE)


@dataclass
class FamilyMap:
    """Ordered rules (user rules first) with a per-name cache.  Picklable for Beam workers."""

    rules: list[FamilyRule]
    default: str = UNKNOWN_FAMILY
    _cache: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    _compiled: list[tuple[re.Pattern[str], str]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def with_user_rules(cls, user_text: str | None = None, source: str = "--family-map") -> FamilyMap:
        """The defaults, preceded by the rules of a user map when given."""
        user = parse_rules(user_text, source) if user_text is not None else []
        return cls(rules=[*user, *default_rules()])

    def __getstate__(self) -> dict:
        return {"rules": self.rules, "default": self.default}

    def __setstate__(self, state: dict) -> None:
        self.rules = state["rules"]
        self.default = state["default"]
        self._cache = {}
        self._compiled = None

    def digest(self) -> str:
        """SHA-256 of the rules in order and the default: what a day's cells depend on besides its files.

        Families are written into the stored cells, so a refresh must
        re-aggregate a day when the map changes (a user map edited, given or
        dropped, or new shipped defaults); this digest is part of the day's
        fingerprint for that reason.
        """
        doc = {"rules": [[rule.pattern, rule.family] for rule in self.rules], "default": self.default}
        return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode("utf-8")).hexdigest()

    def family_of(self, name: str) -> str:
        """The family of one name (first matching rule, else :data:`UNKNOWN_FAMILY`)."""
        hit = self._cache.get(name)
        if hit is not None:
            return hit
        if self._compiled is None:
            self._compiled = [(rule.compiled(), rule.family) for rule in self.rules]
        lowered = name.strip().lower()
        family = next((fam for pattern, fam in self._compiled if pattern.search(lowered)), self.default)
        self._cache[name] = family
        return family

    def assign(self, names: pl.Series) -> pl.Series:
        """Family of every name in ``names`` (vectorised: one rule match per distinct name)."""
        names = names.cast(pl.String)
        distinct = names.drop_nulls().unique().to_list()
        mapping = {name: self.family_of(name) for name in distinct}
        return names.replace_strict(mapping, default=self.default, return_dtype=pl.String)
