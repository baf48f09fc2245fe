"""Where generated artefacts live, and the key that makes them safe to reuse.

Directory: ``$ATTNPHASE_CACHE_DIR`` (default ``~/.cache/attnphase``), subfolder
``derivations``.  Every key includes a hash of this package's source, so editing
the derivation code never reuses a stale file.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import pathlib
import tempfile

log = logging.getLogger(__name__)


def cache_dir() -> pathlib.Path:
    """``$ATTNPHASE_CACHE_DIR`` or ``~/.cache/attnphase``, subfolder ``derivations``."""
    root = os.environ.get("ATTNPHASE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "attnphase")
    return pathlib.Path(root) / "derivations"


@functools.lru_cache(maxsize=1)
def package_source_hash() -> str:
    """Hash of this package's source (``cli.py`` and ``report.py`` excluded: they only print)."""
    h = hashlib.sha256()
    here = pathlib.Path(__file__).resolve().parent
    for path in sorted(here.glob("*.py")):
        if path.name in ("cli.py", "report.py"):
            continue
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def write_atomic(path: pathlib.Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically (concurrent readers never see half a file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        log.info("wrote %s", path)
        return True
    except OSError as exc:
        log.warning("could not write the cache file %s (%s); continuing without it", path, exc)
        return False


def dump_dataclass(d) -> str:
    """A derivation's fields as JSON of ``srepr`` strings (read back by :func:`load_dataclass`)."""
    import sympy as sp

    out = {}
    for field in dataclasses.fields(d):
        value = getattr(d, field.name)
        if isinstance(value, dict):
            out[field.name] = {"dict": [[sp.srepr(k) if isinstance(k, sp.Basic) else k, sp.srepr(v)]
                                        for k, v in value.items()]}
        elif isinstance(value, tuple) and value and not isinstance(value[0], sp.Basic):
            out[field.name] = {"plain": json.loads(json.dumps(value))}
        elif isinstance(value, tuple):
            out[field.name] = {"tuple": [sp.srepr(v) for v in value]}
        else:
            out[field.name] = sp.srepr(value)
    return json.dumps(out, indent=1)


def load_dataclass(cls, path):
    """A derivation from its :func:`dump_dataclass` file, or None (missing or unreadable: re-derive)."""
    import sympy as sp

    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable cache file %s (%s)", path, exc)
        return None
    try:
        parse = sp.sympify
        fields = {}
        for name, value in raw.items():
            if isinstance(value, dict) and "dict" in value:
                fields[name] = {(parse(k) if k.startswith(("Symbol", "Dummy")) else k): parse(v)
                                for k, v in value["dict"]}
            elif isinstance(value, dict) and "plain" in value:
                fields[name] = _as_tuples(value["plain"])
            elif isinstance(value, dict):
                fields[name] = tuple(parse(v) for v in value["tuple"])
            else:
                fields[name] = parse(value)
        d = cls(**fields)
    except Exception as exc:  # corrupt or foreign: re-derive
        log.warning("ignoring unreadable cache file %s (%s)", path, exc)
        return None
    log.debug("loaded the derivation from %s", path)
    return d


def _as_tuples(x):
    return tuple(_as_tuples(v) for v in x) if isinstance(x, list) else x
