"""Download and unpack a corpus archive, atomically."""

from __future__ import annotations

import logging
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from asrkit.errors import DataError

log = logging.getLogger(__name__)


def download_corpus(url: str, dest: str | Path) -> Path:
    """Fetch the ``.tar.gz`` at ``url`` and unpack its single top folder as ``dest``.

    The archive is unpacked in a temporary folder beside ``dest`` and renamed
    into place only when complete, so an interrupted download leaves nothing
    that looks like a corpus.

    Raises:
        DataError: download failed, not a tar archive, or not one top folder.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}.", dir=dest.parent) as tmp:
        archive = Path(tmp) / "corpus.tar.gz"
        log.info("downloading %s", url)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(archive, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as err:
            raise DataError(
                f"cannot download {url}: {err}; check the network, or download it by hand "
                f"and set data.corpus_dir to the unpacked folder"
            ) from None
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(Path(tmp) / "unpacked", filter="data")
        except (tarfile.TarError, OSError) as err:
            raise DataError(f"{url}: not a readable tar archive ({err}); download it again") from None
        tops = list((Path(tmp) / "unpacked").iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise DataError(f"{url}: expected one top folder in the archive, found {[p.name for p in tops]}")
        if dest.exists():
            if any(dest.iterdir()):
                raise DataError(
                    f"{dest}: exists and is not empty but holds no corpus; "
                    "empty it or point data.corpus_dir elsewhere"
                )
            dest.rmdir()
        tops[0].rename(dest)
    return dest
