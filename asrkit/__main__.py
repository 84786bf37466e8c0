"""``python -m asrkit`` is the same as the ``asrkit`` command."""

import sys

from asrkit.cli.main import main

sys.exit(main())
