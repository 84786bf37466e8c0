"""Scoring speed: ``asrkit score`` vs NIST ``sclite`` on a large synthetic ref/hyp set.

Seeded synthetic transcripts (AN4-like vocabulary, 5-25 words, ~15% of the words
substituted, deleted or inserted) are written as Kaldi text; both tools score the same
``trn`` files end to end in a subprocess (start-up included, as a user meets them),
sclite with its ``dtl`` report and asrkit writing its whole scoring dir. Their totals must agree.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from asrkit.errors import ConfigError


def synthetic_pairs(count: int, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """``count`` Kaldi text lines of references and of hypotheses with ~15% errors."""
    rng = random.Random(seed)
    vocab = [
        *"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "ONE",
        "TWO",
        "THREE",
        "FOUR",
        "FIVE",
        "SIX",
        "SEVEN",
        "EIGHT",
        "NINE",
        "ZERO",
        "ENTER",
        "RUBOUT",
        "ERASE",
        "GO",
        "YES",
        "NO",
        "STOP",
    ]
    refs, hyps = [], []
    for k in range(count):
        utt = f"spk{k % 50:02d}-utt{k:06d}"
        ref = [rng.choice(vocab) for _ in range(rng.randint(5, 25))]
        hyp = []
        for word in ref:
            r = rng.random()
            if r < 0.08:
                hyp.append(rng.choice(vocab))
            elif r < 0.12:
                continue
            else:
                hyp.append(word)
            if rng.random() < 0.03:
                hyp.append(rng.choice(vocab))
        refs.append(f"{utt} {' '.join(ref)}")
        hyps.append(f"{utt} {' '.join(hyp)}".rstrip())
    return refs, hyps


def bench_scoring(data_dir: str = "", *, utterances: int = 20000) -> dict:
    """Seconds for ``asrkit score`` and ``sctk sclite`` on ``utterances`` synthetic pairs.

    ``data_dir`` is unused. Raises :class:`ConfigError` when sctk is not installed.
    """
    sctk = shutil.which("sctk")
    if sctk is None:
        raise ConfigError(
            "sctk (NIST sclite) is not installed; `make bench` installs it (apt-get install sctk)"
        )
    refs, hyps = synthetic_pairs(utterances)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "ref").write_text("\n".join(sorted(refs)) + "\n")
        (tmp_path / "hyp").write_text("\n".join(sorted(hyps)) + "\n")
        began = time.perf_counter()
        ours = subprocess.run(
            [
                sys.executable,
                "-m",
                "asrkit",
                "score",
                str(tmp_path / "ref"),
                str(tmp_path / "hyp"),
                "--out-dir",
                str(tmp_path / "scoring"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        asrkit_s = time.perf_counter() - began
        if ours.returncode != 0:
            raise RuntimeError(f"asrkit score failed: {ours.stderr[-2000:]}")
        began = time.perf_counter()
        theirs = subprocess.run(
            sclite_command(sctk, tmp_path / "scoring", "dtl"),
            capture_output=True,
            text=True,
            check=False,
        )
        sclite_s = time.perf_counter() - began
        if theirs.returncode != 0:
            raise RuntimeError(f"sclite failed: {theirs.stderr[-2000:]}")
    ours_counts = _kaldi_counts(ours.stdout)
    if ours_counts is None:
        raise RuntimeError(f"asrkit score printed no Kaldi %WER line: {ours.stdout[-2000:]}")
    theirs_counts = _sclite_counts(theirs.stdout)
    return {
        "utterances": utterances,
        "words": sum(len(r.split()) - 1 for r in refs),
        "asrkit_s": round(asrkit_s, 3),
        "sclite_s": round(sclite_s, 3),
        "asrkit_over_sclite": round(asrkit_s / sclite_s, 3),
        "asrkit_errors": ours_counts["errors"],
        "sclite_errors": theirs_counts.get("errors"),
        "asrkit_sub_del_ins": [ours_counts[k] for k in ("sub", "del", "ins")],
        "sclite_sub_del_ins": [theirs_counts.get(k) for k in ("sub", "del", "ins")],
        "agree": ours_counts == theirs_counts,
    }


def sclite_command(sctk: str, scoring_dir: Path, *reports: str) -> list[str]:
    """NIST sclite on the ``ref.trn``/``hyp.trn`` of an asrkit scoring dir, printing
    ``reports`` (``dtl``, ``pra``...) to stdout."""
    return [sctk, "sclite", "-r", str(scoring_dir / "ref.trn"), "trn", "-h", str(scoring_dir / "hyp.trn"),
            "trn", "-i", "rm", "-o", *reports, "stdout"]  # fmt: skip


def _kaldi_counts(text: str) -> dict[str, int] | None:
    """Errors and their breakdown from ``%WER x [ E / N, I ins, D del, S sub ]``."""
    found = re.search(r"%WER \S+ \[ (\d+) / \d+, (\d+) ins, (\d+) del, (\d+) sub \]", text)
    if found is None:
        return None
    errors, ins, dele, sub = map(int, found.groups())
    return {"errors": errors, "sub": sub, "del": dele, "ins": ins}


def _sclite_counts(text: str) -> dict[str, int]:
    """The same from sclite's ``dtl`` report (``Percent Substitution = ... ( S)``)."""
    counts = {}
    for key, label in (
        ("errors", "Total Error"),
        ("sub", "Substitution"),
        ("del", "Deletions"),
        ("ins", "Insertions"),
    ):
        found = re.search(rf"Percent {label}\s*=.*\(\s*(\d+)\)", text)
        if found:
            counts[key] = int(found.group(1))
    return counts
