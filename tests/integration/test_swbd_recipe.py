"""recipes/swbd end to end on a tiny Switchboard in LDC's layout, made from AN4's audio
(recipes/swbd/local/make_synthetic_ldc.py): data prep from SPHERE + MS-State transcripts
+ the eval2000 STM/GLM, GMMs to SAT, the BLSTM (tiny), HCLG decoding, and a Switchboard /
CallHome table scored as hubscr.pl scores it (checked against sctk's tools when present)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SHARED_AN4, run_cli
from tests.unit.test_nist_scoring import SCTK, _hubscr_counts

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not SHARED_AN4.is_dir(), reason=f"AN4 corpus not at {SHARED_AN4}"),
    pytest.mark.skipif(shutil.which("sox") is None, reason="sox reads the SPHERE channels"),
]


def test_swbd_recipe_on_a_synthetic_ldc_layout(tmp_path: Path) -> None:
    ldc = tmp_path / "ldc"
    made = subprocess.run(
        [sys.executable, str(ROOT / "recipes/swbd/local/make_synthetic_ldc.py"), str(SHARED_AN4), str(ldc),
         "--train-conversations", "5"],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    assert (ldc / "LDC97S62/swb1_d1/data/sw02001.sph").is_file()
    exp = tmp_path / "exp"
    result = subprocess.run(
        [
            str(ROOT / "recipes/swbd/run.sh"),
            f"data.corpus_dir={ldc / 'LDC97S62'}",
            f"data.corpus_dirs.eval2000_audio={ldc / 'LDC2002S09/hub5e_00'}",
            f"data.corpus_dirs.eval2000_text={ldc / 'LDC2002T43'}",
            "data.num_dev=2",
            f"data_root={tmp_path / 'data'}",
            f"feats_root={tmp_path / 'fbank'}",
            f"exp_dir={exp}",
            "gmm.tri_leaves=[40,40,40]",
            "gmm.tri_gauss=[200,200,200]",
            "model=tiny",
            "train.epochs=1",
            "wfst.lm_weights=[9,12]",
            "wfst.word_penalties=[0]",
            "train.progress=false",
        ],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    data = tmp_path / "data" / "eval2000"
    for name in ("stm", "glm", "stm_subsets", "segments", "reco2file_and_channel"):
        assert (data / name).is_file(), name
    assert (tmp_path / "data" / "train" / "segments").read_text().startswith("sw02001-A_")
    table = run_cli("results", str(exp), "--out", "-")
    assert table.returncode == 0, table.stderr
    rows = [ln.split() for ln in table.stdout.splitlines()[1:]]
    for subset in ("eval2000:all", "eval2000:swbd", "eval2000:callhm"):
        systems = {" ".join(r[2:4]) if r[2] == "gmm" else r[2] for r in rows if r[1] == subset}
        assert {"gmm mono", "gmm tri3", "hybrid"} <= systems, (subset, table.stdout)
    # Word times come from each decoder's alignment (Kaldi's get_ctm.sh), not an even spread
    # over the segment: per utterance, the ctm spells the hyp, in order, inside the segment.
    segments = {ln.split()[0]: ln.split()[1:] for ln in (data / "segments").read_text().splitlines()}
    for decode in (exp / "gmm" / "tri3" / "decode_eval2000", exp / "decode_hybrid_eval2000"):
        hyp = {ln.split()[0]: ln.split()[1:] for ln in (decode / "hyp").read_text().splitlines()}
        timed: dict[str, list[tuple[float, float, str]]] = {}
        for ln in (decode / "ctm").read_text().splitlines():
            utt, _, start, dur, word = ln.split()
            timed.setdefault(utt, []).append((float(start), float(dur), word))
        assert timed and all([w for _, _, w in timed[u]] == hyp[u] for u in timed), decode
        assert {u for u, words in hyp.items() if words} == set(timed), decode
        gaps = set()
        for utt, words in timed.items():
            length = float(segments[utt][2]) - float(segments[utt][1])
            assert all(0 <= a and d > 0 and a + d <= length + 0.011 for a, d, _ in words), (utt, words)
            assert all(
                a1 + d1 <= a2 + 1e-6 for (a1, d1, _), (a2, _, _) in zip(words, words[1:], strict=False)
            ), words
            gaps.add(round(words[0][0], 2))
        # The tri3 system starts each utterance's first word where its speech does (the tiny
        # one-epoch hybrid is degenerate here: one word over the whole segment).
        assert len(gaps) > 1 or "hybrid" in decode.name, gaps
    # The tri3 (SAT) decode's NIST scores equal csrfilt.sh + sclite's on the stage's own CTM.
    scoring = exp / "gmm" / "tri3" / "decode_eval2000" / "scoring_nist"
    lines = (scoring / "wer").read_text().splitlines()
    assert [ln.split()[-3] for ln in lines] == ["all", "swbd", "callhm"]
    if not (SCTK / "sclite").is_file():
        return
    for line, prefix in zip(lines, ("", "sw_", "en_"), strict=True):
        m = re.match(
            r"%WER [\d.]+ \[ \d+ / (\d+), (\d+) ins, (\d+) del, (\d+) sub \] \S+ \((\d+) segments\)", line
        )
        assert m, line
        words, ins, dele, sub, segments = (int(x) for x in m.groups())
        sclite = _hubscr_counts(data / "stm", scoring / "hyp.ctm", data / "glm", prefix)
        snt, wrd, _c, s_sub, s_del, s_ins = sclite
        assert (segments, words, sub, dele, ins) == (snt, wrd, s_sub, s_del, s_ins), (prefix, line)
