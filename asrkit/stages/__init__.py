"""Numbered recipe stages and the runner that chains them.

Public API:
    - :data:`STAGES` — stage number -> :class:`Stage` of the default (``ctc``) pipeline;
      :data:`PIPELINES` — pipeline name (``ctc``, ``hybrid``) -> its stages.
    - :func:`run_stages` — run stages ``start..stop`` of a composed config,
      saving the resolved config and the exact command in the experiment dir and
      logging every stage's start, end and duration.
"""

from asrkit.stages.registry import PIPELINES, STAGES, Stage, StageContext, run_stages, stage

# Importing the stage modules registers their stages.
from asrkit.stages import data as _data  # noqa: E402,F401  isort: skip
from asrkit.stages import features as _features  # noqa: E402,F401  isort: skip
from asrkit.stages import lang as _lang  # noqa: E402,F401  isort: skip
from asrkit.stages import train as _train  # noqa: E402,F401  isort: skip
from asrkit.stages import decode as _decode  # noqa: E402,F401  isort: skip
from asrkit.stages import align as _align  # noqa: E402,F401  isort: skip
from asrkit.stages import combine as _combine  # noqa: E402,F401  isort: skip
from asrkit.stages import hmm as _hmm  # noqa: E402,F401  isort: skip

__all__ = ["PIPELINES", "STAGES", "Stage", "StageContext", "run_stages", "stage"]
