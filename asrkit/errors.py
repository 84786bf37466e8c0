"""Errors that the CLI turns into one readable line and a non-zero exit.

A :class:`UserError` is a mistake the user can fix (bad input, bad config). Its
message says what is wrong, where (file, line, utterance) and how to fix it.
Anything else that escapes is a bug in asrkit and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input or settings, reported without a traceback."""


class DataError(UserError):
    """A Kaldi data directory, audio file or feature archive is malformed."""


class ConfigError(UserError):
    """A setting is unknown or has a value asrkit cannot use."""


class DiskFull(UserError):
    """A write failed for lack of space (ENOSPC); what was there before is intact."""


#: Exit status of a run stopped by a signal after saving where it was (the shell's 128 + N
#: would read as "killed"; this one means "rerun the same command to continue").
STOPPED_EXIT = 3


class TrainingStopped(UserError):
    """Training stopped on a signal after saving a resume state; the message is the line
    for the user. ``quiet``: this process has nothing to add (a learner other than the
    main one, or the parent of learners that said it)."""

    def __init__(self, message: str, *, quiet: bool = False) -> None:
        super().__init__(message)
        self.quiet = quiet


#: A log record's ``extra`` key for what goes to the run's log file but not the console
#: (a result the command prints on stdout already).
FILE_ONLY = "asrkit_file_only"


def raise_all(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` that lists every problem (nothing when there is none);
    its ``problems`` attribute holds them one by one."""
    unique = list(dict.fromkeys(problems))
    if not unique:
        return
    err = ConfigError(
        unique[0]
        if len(unique) == 1
        else f"{len(unique)} bad settings: " + " ".join(f"({k}) {p}" for k, p in enumerate(unique, start=1))
    )
    err.problems = unique  # type: ignore[attr-defined]
    raise err


class TrainingDiverged(UserError):
    """The training loss became NaN or infinite: the run cannot recover (its weights are
    no longer numbers). ``step``: the optimizer step whose loss it was."""

    def __init__(self, message: str, *, step: int) -> None:
        super().__init__(message)
        self.step = step
