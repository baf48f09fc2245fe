"""Where generated artefacts live, and the key that makes them safe to reuse.

Directory: ``$ATTNPHASE_CACHE_DIR`` (default ``~/.cache/attnphase``), subfolder
``derivations``.  Every key includes a hash of this package's source, so editing
the derivation code never reuses a stale file.
"""
from __future__ import annotations

import functools
import hashlib
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
