"""A fingerprint of the installed biasboard code, so a code change is never mistaken for "nothing new".

``refresh`` keeps the LATEST snapshot when nothing it depends on changed since; the package's
version string alone would let a change to the code without a version bump reuse a snapshot the
new code would have published differently.  :func:`code_fingerprint` hashes the source of every
module (and the shipped JSON data) of every biasboard package, wherever it is installed (a wheel's
files or an editable checkout's folders); it is computed once per process (~150 small files).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

import biasboard


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 over (module path, source bytes) of every ``.py`` and ``.json`` file of the biasboard packages."""
    digest = hashlib.sha256()
    for package in ("biasboard", *(f"biasboard.{name}" for name in biasboard.SUBPACKAGES)):
        spec = importlib.util.find_spec(package)
        roots = (spec.submodule_search_locations or []) if spec is not None else []
        for root in map(Path, roots):
            # the top package's own files only: in a wheel its folder also holds the subpackages
            found = root.glob("*") if package == "biasboard" else root.rglob("*")
            for path in sorted(p for p in found if p.suffix in (".py", ".json") and p.is_file()):
                digest.update(f"{package}:{path.relative_to(root).as_posix()}\0".encode())
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return digest.hexdigest()
