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
