"""The ``asrkit`` command line; see :func:`asrkit.cli.main.main`."""
