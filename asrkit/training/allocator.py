"""Process-wide allocator settings for training processes.

Every batch is a fresh array of up to a few MB. glibc's malloc serves blocks that large
with ``mmap`` and returns them to the kernel when freed (or trims them off the heap top),
so each new batch is page-faulted in and zeroed by the kernel again: measured on the
2-core VM, that made reading a batch into memory ~1.6x slower than reading it into memory
the process had used before (``asrkit bench data``). Keeping freed blocks in the heap lets
the next batch (and the training step's activations) reuse pages already mapped — the
reason PyTorch's CPU tuning guides suggest jemalloc or tcmalloc. Memory then stays at the
process's high-water mark instead of shrinking between batches; it still does not grow
with the corpus.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt parameters (glibc <malloc.h>).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Blocks below this come from the heap and are reused after ``free``.
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit (HEAP_MAX / 2)
#: Free memory at the heap's top kept for reuse rather than returned to the kernel.
TRIM_THRESHOLD = 128 << 20

#: The simulator's largest threshold (:func:`map_large_blocks`); it maps a model's weight
#: vector whenever that is smaller.
SIM_MMAP_THRESHOLD = 4 << 20
#: ... but never below this (batches of a few utterances stay on the heap).
SIM_MMAP_FLOOR = 256 << 10

_done = False


def retain_freed_memory() -> bool:
    """Have glibc's malloc keep freed blocks of up to 32 MB for reuse (once per process).

    Returns:
        Whether the settings took effect (False off glibc, e.g. on macOS or musl).
    """
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no glibc mallopt here; the allocator keeps its defaults")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return _done


def map_large_blocks(threshold: int = SIM_MMAP_THRESHOLD) -> bool:
    """Serve blocks of ``threshold`` bytes and more with ``mmap`` (returned to the kernel
    when freed), at a fixed threshold.

    For the simulator's many replicas: each learner step frees and allocates weight-sized
    vectors (10 MB at demo size) among batch-sized blocks. From the heap (glibc raises its
    threshold to the largest block freed, up to 32 MB), they fragment it: 16 ADPSGD
    learners on speechocean762 grew past 6.5 GB within a minute and kept growing (two such
    runs at 64 learners ran this 24 GB VM out of memory), against 3.1 GB, flat, with large
    blocks mapped. Batches (below ``threshold``) still reuse the heap.

    Returns:
        Whether the setting took effect (False off glibc).
    """
    global _done
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no glibc mallopt here; the allocator keeps its defaults")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    _done = _done or ok  # the process's policy is set; retain_freed_memory leaves it alone
    return ok
