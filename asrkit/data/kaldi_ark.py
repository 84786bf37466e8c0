"""kaldi-io, imported once and quietly.

kaldi-io prints a banner to stderr at import time when ``KALDI_ROOT`` is unset;
asrkit does not need Kaldi's binaries, so the banner is swallowed here and every
other module imports ``kaldi_io`` from this one.
"""

from __future__ import annotations

import contextlib
import io

with contextlib.redirect_stderr(io.StringIO()):
    import kaldi_io  # noqa: E402

__all__ = ["kaldi_io"]
