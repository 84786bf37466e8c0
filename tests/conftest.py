"""Shared fixtures (the helpers they use live in :mod:`tests.helpers`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_data_dir


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    make_data_dir(tmp_path / "data" / "train")
    return tmp_path / "data" / "train"
