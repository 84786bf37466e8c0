"""Files asrkit writes atomically get the mode an ordinary write would (0666 less the
umask). Seen in the field: ``model.pt``, feature arks and ``HCLG.fst`` were created 0600
(``mkstemp``'s), so other users of a shared feature or experiment dir could not read them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from asrkit.data.io import atomic_write, atomic_writer, new_dir_mode, new_file_mode
from asrkit.models.checkpoint import save_checkpoint


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_files_and_checkpoints_keep_the_umasks_mode(tmp_path: Path, umask: int) -> None:
    assert new_file_mode() == 0o666 & ~umask and new_dir_mode() == 0o777 & ~umask
    atomic_write(tmp_path / "a.txt", "x\n")
    with atomic_writer(tmp_path / "b.ark", "wb") as out:
        out.write(b"\0B")
    save_checkpoint(tmp_path / "model.pt", {"model": {"w": torch.zeros(2)}})
    plain = tmp_path / "plain"
    plain.write_text("x")  # what an ordinary write gives
    for name in ("a.txt", "b.ark", "model.pt"):
        assert _mode(tmp_path / name) == _mode(plain) == 0o666 & ~umask, name
