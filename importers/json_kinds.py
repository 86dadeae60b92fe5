"""Where parsed JSON records disagree on a value's kind, down inside their nested objects, and that value as text.

Why: polars types a field from all its values and silently drops the ones that do not fit.  An object beside a
number (FastChat's ``conv_metadata.header_count_a`` written ``{"h1": 1, "h2": 0}`` on some battles and ``1`` on
others) kept the objects and made every number null; an object beside text became polars' own rendering of it
(``"{1,0}"``), which no reader can parse.  The top-level fields of a record were already compared
(:func:`biasboard.importers.common.read_records`); the fields inside objects and lists were not.  A value whose
kind varies is kept as text at its own place, strings as they are and anything else as JSON, so the format's
mapping reads each representation as it would read it alone, and the other fields of the object keep their types.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import pyarrow as pa

#: The path of a field inside a record: ``("conv_metadata", "header_count_a")``; ``ITEM`` stands for a list's items.
FieldPath = tuple[str, ...]
ITEM = "[]"


#: A parsed JSON value's Python type → its kind for type agreement (numbers agree with each other).
_KINDS: dict[type, str] = {bool: "bool", int: "number", float: "number", str: "str", dict: "dict", list: "list"}


def _kinds_of(values: list[object]) -> set[str]:
    """The kinds among non-null ``values``; integers beyond int64 are a kind of their own (``bigint``)."""
    types = set(map(type, values))
    found = {_KINDS.get(t, t.__name__) for t in types}
    if int in types:
        ints = [v for v in values if type(v) is int]
        if min(ints) < -(2**63) or max(ints) >= 2**63:
            found.add("bigint")
            if all(not -(2**63) <= v < 2**63 for v in ints) and float not in types:
                found.discard("number")
    return found


#: ``json.dumps(value, separators=(",", ":"))``, its encoder made once: ``dumps`` with any option builds a new
#: encoder per call, which cost a third of the time of texting 200k small objects (0.45 s → 0.33 s, measured).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":")).encode


def as_text(value: object) -> str | None:
    """A value of a field whose kind varies: text as it is, anything else as compact JSON, null as null."""
    return value if value is None or isinstance(value, str) else _COMPACT_JSON(value)


def _float_paths(dtype: pa.DataType, path: FieldPath) -> list[FieldPath]:
    """The paths of the float fields under a value of arrow type ``dtype`` (itself at ``path``)."""
    if pa.types.is_struct(dtype):
        return [found for f in dtype for found in _float_paths(f.type, (*path, f.name))]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return _float_paths(dtype.value_type, (*path, ITEM))
    return [path] if pa.types.is_floating(dtype) else []


def typed_array(values: list[object]) -> pa.Array | None:
    """``values`` typed by pyarrow, or None where it refuses them or typed a JSON boolean as a float, at any depth.

    Why the booleans: pyarrow types ``true`` among floats as 1.0 (among integers it refuses it), so a grade ``true``
    was imported as the grade 1 and a token count ``true`` as a length of 1 token.  Where pyarrow refuses, the
    kinds are compared (:func:`refused_kinds`).  A lone UTF-16 surrogate raises :class:`UnicodeEncodeError`, left
    to the caller (its rows are dead-lettered: :func:`biasboard.importers.common.read_records`).
    """
    try:
        array = pa.array(values)
    except UnicodeEncodeError:
        raise
    except (pa.ArrowException, TypeError, OverflowError, ValueError):
        return None
    paths = _float_paths(array.type, ())
    return None if any(bool in set(map(type, values_at(values, p))) for p in paths) else array


def refused_kinds(
    path: FieldPath, values: list[object], typed: dict[FieldPath, pa.Array] | None = None
) -> dict[FieldPath, set[str]]:
    """The kinds of ``values`` (at ``path``, which pyarrow refused to type), and below them the kinds of the fields
    pyarrow refuses in turn: the varying values found without typing in Python the fields that agree.  The fields
    it typed are kept in ``typed`` (by path; an object's field over the rows whose object is not null), for
    :func:`struct_column` to build the object's column from rather than type every field again.

    Why: one odd value among 200k nested records made the reader type every field of every record in
    Python (~4 s); pyarrow tells in C which fields agree.  It refuses exactly what is mixed here
    (kinds, integers beyond int64) besides a boolean among floats, which :func:`typed_array` refuses itself.
    """
    present = [v for v in values if v is not None]
    if not present:
        return {}
    found = _kinds_of(present)
    kinds = {path: found}
    if len(found) > 1 or "bigint" in found:  # the whole value becomes text: nothing below it matters
        return kinds
    below: list[tuple[FieldPath, list[object]]] = []
    if found == {"dict"}:
        objects = [v for v in present if isinstance(v, dict)]
        names: set[str] = set().union(*objects)
        below = [((*path, name), [obj.get(name) for obj in objects]) for name in names]
    elif found == {"list"}:
        below = [((*path, ITEM), [item for v in present if isinstance(v, list) for item in v])]
    for inner, inner_values in below:
        array = typed_or_none(inner_values)
        if array is None:
            kinds.update(refused_kinds(inner, inner_values, typed))
        elif typed is not None:
            typed[inner] = array
    return kinds


def typed_or_none(values: list[object]) -> pa.Array | None:
    """``values`` typed by pyarrow (:func:`typed_array`), or None where it refuses them (a lone surrogate counts as
    refused: its kinds still agree)."""
    try:
        return typed_array(values)
    except UnicodeEncodeError:
        return None


def struct_column(
    values: list[object], path: FieldPath, texted: set[FieldPath], typed: Mapping[FieldPath, pa.Array]
) -> pa.Array | None:
    """The objects ``values`` (at ``path``; each an object, none null) as a struct array from their fields' arrays
    ``typed`` already (:func:`refused_kinds`), the fields at ``texted`` paths as text (:func:`as_text`): what
    :func:`texted_column` then pyarrow give, without texting and typing every field of every object again.

    None where that is not how the column is made (a null object, a varying value deeper down, a field not
    typed, a lone surrogate in a text): the caller texts and types the whole column.  Why: one odd value among
    200k nested records had every object copied and typed again, ~1.7 s of the reader's ~4.6 s.
    """
    if not values or any(type(v) is not dict for v in values):
        return None
    objects: list[dict] = values  # type: ignore[assignment]
    names = list(dict.fromkeys(name for obj in objects for name in obj))
    arrays = []
    for name in names:
        inner = (*path, name)
        if inner in texted:
            try:
                arrays.append(pa.array([as_text(obj.get(name)) for obj in objects], pa.string()))
            except UnicodeEncodeError:
                return None
        elif inner in typed:
            arrays.append(typed[inner])
        else:
            return None
    return pa.StructArray.from_arrays(arrays, names=names)


def values_at(records: Iterable[object], path: FieldPath) -> list[object]:
    """Every value at ``path`` across ``records``: objects' fields by name, lists' items by ``ITEM``.

    Why: to look for a kind pyarrow typed as another (a boolean among floats) in the few fields where it can hide,
    without walking every field.
    """
    values: list[object] = list(records)
    for name in path:
        if name == ITEM:
            values = [item for v in values if type(v) is list for item in v]
        else:
            values = [v.get(name) for v in values if type(v) is dict]
    return values


def mixed_paths(kinds: Mapping[FieldPath, set[str]]) -> set[FieldPath]:
    """The outermost paths whose values are of more than one kind (or integers beyond int64): to be read as text."""
    mixed = {path for path, seen in kinds.items() if len(seen) > 1 or "bigint" in seen}
    return {path for path in mixed if not any(path[:n] in mixed for n in range(1, len(path)))}


#: Paths below one field as a tree: a name maps to its own subtree, or to None where the value becomes text.
Tree = dict[str, "Tree | None"]


def _tree(paths: Iterable[FieldPath]) -> Tree:
    tree: Tree = {}
    for path in sorted(paths, key=len):
        node = tree
        for name in path[:-1]:
            child = node.setdefault(name, {})
            if child is None:  # an outer value is text already
                break
            node = child
        else:
            node[path[-1]] = None
    return tree


def _texted(value: object, tree: Tree) -> object:
    """``value`` with the values at ``tree``'s leaves as text (:func:`as_text`), everything else as it was."""
    if isinstance(value, dict):
        out = dict(value)
        for name, sub in tree.items():
            if name in out and out[name] is not None:
                out[name] = as_text(out[name]) if sub is None else _texted(out[name], sub)
        return out
    if isinstance(value, list) and ITEM in tree:
        sub = tree[ITEM]
        return [as_text(v) if sub is None else _texted(v, sub) for v in value]
    return value


def texted_column(records: Iterable[Mapping[str, object]], name: str, inner: Iterable[FieldPath]) -> list[object]:
    """Field ``name`` of every record, its values at the ``inner`` paths (below ``name``) as text.

    Why per field: only the fields that hold a varying value are rebuilt; the others go to polars as parsed.
    """
    tree = _tree(path[1:] for path in inner)
    return [_texted(record.get(name), tree) for record in records]
