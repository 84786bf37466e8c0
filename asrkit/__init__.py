"""asrkit: speech recognition from raw audio to scored transcripts.

Subpackages follow the pipeline: :mod:`asrkit.data` (Kaldi data dirs, audio),
:mod:`asrkit.features` (fbank/MFCC, CMVN), :mod:`asrkit.scoring` (WER/CER,
sclite outputs), :mod:`asrkit.stages` (numbered recipe stages) and
:mod:`asrkit.cli` (the ``asrkit`` command).
"""

__version__ = "0.1.0"


def _protect_main_thread() -> None:
    # Signals must not land on the stack of the LSTM code they interrupt (asrkit.sigstack).
    import threading

    if threading.current_thread() is threading.main_thread():
        from asrkit import sigstack

        sigstack.install()


_protect_main_thread()
