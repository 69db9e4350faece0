"""Files written whole or not at all: through a temporary file in the same folder, flushed to disk and
renamed over the target, so a full disk, a signal or a crash mid-write leaves the old file or none --
never a truncated one. The file gets the mode a plain ``open`` would give it (0666 less the umask), not
``mkstemp``'s 0600: others on a shared CI host can read what the run wrote."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all; raises the OSError of a failed write, naming ``path``
    (the temporary file removed, ``path`` as it was)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # a full disk says "No space left on device" without the file: name the target
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
