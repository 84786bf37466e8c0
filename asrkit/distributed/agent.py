"""``python -m asrkit.distributed.agent TORCHRUN-ARGS``: torchrun, with a failed learner
reported in one line instead of the agent's traceback.

The learners print their own one-line errors; when one fails (or is killed), torchrun
stops the others on this node and raises ``ChildFailedError``, whose traceback would
bury those lines. This entry point runs the same agent and turns that into a summary
naming the first learner that failed and how.
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run


def main(argv: list[str]) -> int:
    try:
        run(parse_args(argv))
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
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
