"""The ``asrkit`` command: one sub-command per user task.

Each sub-command lives in its own module exposing ``register(subparsers)``, which
adds its parser and sets ``func`` to a callable taking the parsed arguments and
returning an exit status. User mistakes raise :class:`asrkit.errors.UserError`
and end as one ``asrkit: error: ...`` line with exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from asrkit import __version__
from asrkit.errors import FILE_ONLY, STOPPED_EXIT, TrainingStopped, UserError

#: Sub-command -> its module. Only the chosen command's module is imported (``asrkit
#: score`` needs no torch); ``asrkit --help`` imports them all to list them.
_COMMANDS = {
    "run": "asrkit.cli.run",
    "make-data-dir": "asrkit.cli.make_data_dir",
    "validate-data": "asrkit.cli.validate_data",
    "check-alignments": "asrkit.cli.check_alignments",
    "bench": "asrkit.cli.bench",
    "score": "asrkit.cli.score",
    "compare": "asrkit.cli.compare",
    "results": "asrkit.cli.results",
    "transcribe": "asrkit.cli.transcribe",
    "export": "asrkit.cli.export",
    "topology": "asrkit.cli.topology",
    "simulate": "asrkit.cli.simulate",
    "study": "asrkit.cli.study",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv`` naming a command, only that command's sub-parser."""
    parser = argparse.ArgumentParser(
        prog="asrkit",
        description="Speech recognition from raw audio to scored transcripts.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--version", action="version", version=f"asrkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    import importlib

    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    chosen = [_COMMANDS[words[0]]] if words and words[0] in _COMMANDS else list(_COMMANDS.values())
    for module_name in chosen:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if args.command is None:  # a bare `asrkit`: what it can do
        parser.print_help()
        return 0
    # argparse takes one run of positionals: KEY=VALUE overrides after an option
    # (`asrkit run a=1 --force b=2`, as recipes' run.sh append their own) join the rest.
    if extra and hasattr(args, "overrides") and not any(e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        words = list(sys.argv[1:] if argv is None else argv)
        print(f"asrkit: error: {_unknown_options(args.command, extra, words)}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )
    # basicConfig does nothing when the host (a test runner, a notebook) already
    # configured logging; asrkit's own stage logs must still reach the run log.
    logging.getLogger("asrkit").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # the console, not a log file or a test's capture
            handler.addFilter(_console)
    # A log file that cannot be written (a full disk) must not add tracebacks to the one
    # line that says so.
    logging.raiseExceptions = False
    previous, stopped = _terminate_like_ctrl_c(), False
    try:
        return int(args.func(args) or 0)
    except TrainingStopped as stop:
        from asrkit.training.stop import ignore_signals_at_exit

        ignore_signals_at_exit()
        stopped = True
        if not stop.quiet:
            print(f"asrkit: {stop}", file=sys.stderr)
        return STOPPED_EXIT
    except UserError as err:
        print(f"asrkit: error: {err}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as err:
        from asrkit.data.io import disk_full, is_disk_full

        if not is_disk_full(err):
            raise
        where = getattr(err, "filename", None) or os.getcwd()
        print(f"asrkit: error: {disk_full(where)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        how = f"by {err.args[0]}" if err.args else "(Ctrl-C)"
        print(f"asrkit: interrupted {how}", file=sys.stderr)
        return 130
    finally:
        # After a stop, ignore_signals_at_exit's handlers stay: putting back the default
        # action here let the tail of a signal burst kill the exiting process (-15).
        if previous is not None and not stopped:
            signal.signal(signal.SIGTERM, previous)


def _console(record: logging.LogRecord) -> bool:
    return not getattr(record, FILE_ONLY, False)


def _unknown_options(command: str, extra: Sequence[str], words: Sequence[str]) -> str:
    """One line for options a command does not take; for ``run``, the setting meant
    (``--epochs 3`` -> ``train.epochs=3``: settings are KEY=VALUE words, not options)."""
    options = [e for e in extra if e.startswith("-")]
    text = f"unknown option{'s' if len(options) > 1 else ''} {' '.join(options)} for `asrkit {command}`"
    if command != "run":
        return f"{text}; `asrkit {command} --help` lists its options"
    from asrkit.choices import did_you_mean
    from asrkit.config import AsrkitConfig
    from asrkit.overrides import typed_settings

    option = options[0]
    name, _, value = option.lstrip("-").replace("-", "_").partition("=")
    if not value:
        after = list(words[words.index(option) + 1 :]) if option in words else []
        value = after[0] if after and not after[0].startswith("-") and "=" not in after[0] else "..."
    leaves = [k for k, s in typed_settings(AsrkitConfig).items() if not s.is_section]
    close = did_you_mean(name, leaves, most=1)
    example = f"{close[0]}={value}" if close else "train.epochs=3"
    return (
        f"{text}: settings are KEY=VALUE words, not options, e.g. {example}"
        " (`asrkit run --help` lists the options and the settings' groups)"
    )


def _default_signals_in_child() -> None:
    """In a forked child (a pool worker): SIGTERM and SIGINT as Python starts with them.
    The parent's handlers must not be inherited: a worker blocked in a lock would never run
    a Python-level handler, so ``Pool.terminate()``'s SIGTERM would not end it and the
    parent would wait forever. A child that wants otherwise (the batch readers ignore
    both) sets its own after the fork. Ignored signals stay ignored."""
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # forked from a thread other than the main one: nothing to undo here
        pass


os.register_at_fork(after_in_child=_default_signals_in_child)


def _terminate_like_ctrl_c() -> Any:
    """SIGTERM outside training (which saves and stops on its own) unwinds like Ctrl-C, so
    ``finally`` blocks remove half-written files; returns the handler it replaced (None
    off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    pid = os.getpid()

    def terminated(signum: int, frame: object) -> None:
        if os.getpid() != pid:  # a forked worker (a pool's terminate()): die as the signal says
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt("SIGTERM")

    return signal.signal(signal.SIGTERM, terminated)


if __name__ == "__main__":
    sys.exit(main())
