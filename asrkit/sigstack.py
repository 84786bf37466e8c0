"""An alternate signal stack for the main thread, so a signal never writes into the stack of
the code it interrupts.

Why: torch's CPU LSTM (oneDNN's RNN primitives, which ``nn.LSTM`` uses for float32 on
CPU) keeps live data below the stack pointer while it runs. A signal handler's frame is
pushed right there: any signal that arrives mid-forward or mid-backward overwrites that
data, and the process later dies in ``free()`` (glibc's "corrupted size vs. prev_size",
"double free or corruption") or segfaults, in the step or at exit. The handler does not
matter: Python's own C handler, which only records the signal, is enough. Measured on the
2-core VM (torch 2.11, a 2x320 BLSTM on one thread, one SIGUSR1 every 20 ms with a no-op
Python handler): every run aborted within 8-15 signals; the same loop with the native
(non-oneDNN) LSTM, or with this module's stack in place, took over 1,000 signals
unharmed (``tests/integration/test_signal_stack.py``).

Python installs every handler with ``SA_ONSTACK``, so once a thread has an alternate
stack (``sigaltstack``) the kernel builds the handler's frame there instead. Process-wide
signals (Ctrl-C, ``kill``, Slurm's SIGTERM) go to the main thread unless it blocks them,
and asrkit never blocks them, so the main thread is the one that needs it; a forked child
inherits it, an exec'd one (``spawn``, torchrun's learners) installs its own when it
imports asrkit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable

__all__ = ["STACK_BYTES", "install", "installed", "quiet_worker"]

#: The alternate stack's size: the handler's frame holds the CPU's extended state (up to
#: ~11 KB with AMX) and Python's C handler needs little more; generous, and allocated once.
STACK_BYTES = 256 << 10
_SS_DISABLE = 2


class _StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


_stacks: dict[int, ctypes.Array] = {}  # thread id -> its stack's memory (kept for the process's life)
_lock = threading.Lock()


def _sigaltstack() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.sigaltstack
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.POINTER(_StackT), ctypes.POINTER(_StackT)]
    fn.restype = ctypes.c_int
    return fn


def installed() -> bool:
    """Whether the calling thread has an alternate signal stack (ours or another's, such as
    :mod:`faulthandler`'s)."""
    fn = _sigaltstack()
    if fn is None:
        return False
    current = _StackT()
    if fn(None, ctypes.byref(current)) != 0:
        return False
    return not current.ss_flags & _SS_DISABLE


def install() -> bool:
    """Give the calling thread an alternate signal stack unless it has one (idempotent).

    Returns:
        Whether the thread has one now (False where ``sigaltstack`` is not available).
    """
    fn = _sigaltstack()
    if fn is None:
        return False
    with _lock:
        if installed():
            return True
        memory = ctypes.create_string_buffer(STACK_BYTES)
        stack = _StackT(ctypes.cast(memory, ctypes.c_void_p), 0, STACK_BYTES)
        if fn(ctypes.byref(stack), None) != 0:
            return False
        _stacks[threading.get_ident()] = memory  # the kernel refers to it from now on
        return True


def quiet_worker() -> None:
    """A pool worker's initializer: Ctrl-C is the parent's to handle (it stops the pool), so
    a worker ignores SIGINT rather than printing a ``KeyboardInterrupt`` traceback of its
    own (seen with ``gmm.nj=2``). ``Pool.terminate``'s SIGTERM still ends it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
