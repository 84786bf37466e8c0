"""``python -m asrkit.distributed.agent TORCHRUN-ARGS``: torchrun, with a failed learner
reported in one line instead of the agent's traceback, and signals passed on once.

The learners print their own one-line errors; when one fails (or is killed), torchrun
stops the others on this node and raises ``ChildFailedError``, whose traceback would
bury those lines. This entry point runs the same agent and turns that into a summary
naming the first learner that failed and how.

On SIGINT or SIGTERM torchrun's agent sends the same signal to its learners, waits up to
30 s for them to exit (they finish their step, save a resume state and exit with
:data:`~asrkit.errors.STOPPED_EXIT`) and then kills what is left. Its own handler would
raise again on the copy of the signal that a ``kill`` of the process group or Slurm
delivers beside the launcher's, cutting that wait short: here a signal within
:data:`~asrkit.training.stop.SAME_STOP_S` of the first is ignored, and a later one (a user
insisting) kills the learners at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from types import FrameType

import torch.distributed.elastic.multiprocessing.api as elastic_api
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

from asrkit.errors import STOPPED_EXIT

#: Seconds after a first signal in which another one is the same request (as in
#: asrkit.training.stop, not imported here: it would import torch's training stack).
SAME_STOP_S = 2.0
_first: list[float] = []


def _on_signal(signum: int, frame: FrameType | None) -> None:
    now = time.monotonic()
    if not _first:
        _first.append(now)
        # What torchrun would log while stopping the learners ("Sending process ... closing
        # signal") is not news to a user who sent the signal.
        logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
        sigval = signal.Signals(signum)
        raise elastic_api.SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
    if now - _first[0] < SAME_STOP_S:
        return  # the same stop, delivered twice
    os.killpg(os.getpgid(0), signal.SIGKILL)  # a second request: everything on this node, now


def main(argv: list[str]) -> int:
    # torchrun installs its handler when it starts the learners, by this module-level name.
    elastic_api._terminate_process_handler = _on_signal
    try:
        run(parse_args(argv))
    except elastic_api.SignalException:
        # The learners were sent the signal and have saved and exited (or were killed after
        # torchrun's wait); the main learner printed where it stopped.
        return STOPPED_EXIT
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        if failure.exitcode == STOPPED_EXIT:
            return STOPPED_EXIT  # a learner stopped by a signal sent to it alone
        how = (
            f"was killed by {failure.signal_name()}"
            if failure.exitcode < 0
            else f"exited with status {failure.exitcode}"
        )
        print(
            f"asrkit: learner {rank} {how} (the first to fail); the learners on this node were stopped",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
