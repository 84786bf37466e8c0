"""asrkit: speech recognition from raw audio to scored transcripts.

Subpackages follow the pipeline: :mod:`asrkit.data` (Kaldi data dirs, audio),
:mod:`asrkit.features` (fbank/MFCC, CMVN), :mod:`asrkit.scoring` (WER/CER,
sclite outputs), :mod:`asrkit.stages` (numbered recipe stages) and
:mod:`asrkit.cli` (the ``asrkit`` command). From Python: ``asrkit.Recognizer.load(exp_dir)
.transcribe("a.wav")`` (:mod:`asrkit.api`) and ``asrkit.export(exp_dir, out)``.
"""

import os

__version__ = "0.1.0"
__all__ = ["Recognizer", "__version__", "export"]


def __getattr__(name: str) -> object:
    # The Python API, imported when first used (``import asrkit`` stays light: the
    # command-line tools that need no torch do not load it).
    if name == "Recognizer":
        from asrkit.api import Recognizer

        return Recognizer
    if name == "export":
        from asrkit.export import export

        return export
    raise AttributeError(f"module 'asrkit' has no attribute {name!r}")


# numpy's OpenBLAS threads: asrkit's numpy work is many small products (a GMM system's
# features through LDA+MLLT and fMLLR, 40-dim statistics), which threads slow down: 300
# utterances' (240 x 91) @ (91 x 40) took 4.9 s with OpenBLAS's threads on a busy 2-core
# machine and 0.1 s with one. Its parallel work is the alignment and decoding jobs
# (gmm.nj, wfst.nj). Read when numpy loads, so set before it does; a user's setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _protect_main_thread() -> None:
    # Signals must not land on the stack of the LSTM code they interrupt (asrkit.sigstack).
    import threading

    if threading.current_thread() is threading.main_thread():
        from asrkit import sigstack

        sigstack.install()


_protect_main_thread()
