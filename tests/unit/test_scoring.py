"""Scoring: hand-computed cases, error handling, agreement with NIST sclite and jiwer."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import jiwer
import pytest

from asrkit.bench.scoring import sclite_command
from asrkit.cli.main import main
from asrkit.errors import DataError
from asrkit.scoring import ErrorCounts, align_words, read_text, score_files, score_texts
from asrkit.scoring import align as align_module


def _counts(ref: str, hyp: str, align: str = "sclite") -> tuple[int, int, int, int]:
    c = ErrorCounts.of(align_words(ref.split(), hyp.split(), weights=align))
    return c.corr, c.sub, c.dele, c.ins


def test_hand_computed_alignments() -> None:
    assert _counts("a b c", "a b c") == (3, 0, 0, 0)
    assert _counts("a b c", "a x c") == (2, 1, 0, 0)
    assert _counts("a b c", "a c") == (2, 0, 1, 0)
    assert _counts("a b", "a b b") == (2, 0, 0, 1)
    assert _counts("a b c", "") == (0, 0, 3, 0)
    assert _counts("", "a b") == (0, 0, 0, 2)
    # sclite's weights pick 1 sub + 1 ins (cost 7) over 1 del + 2 ins (cost 9).
    assert _counts("a b", "b b a") == (1, 1, 0, 1)
    ops = align_words(["a", "b"], ["x"])
    assert [op for op, _, _ in ops] in (["S", "D"], ["D", "S"])


def test_sclite_weights_can_cost_more_errors_than_levenshtein() -> None:
    # Five substitutions (cost 20) lose to 3 deletions + 2 matches + 3 insertions (cost 18).
    assert _counts("p q r a b", "a b s t u", "levenshtein") == (0, 5, 0, 0)
    assert _counts("p q r a b", "a b s t u", "sclite") == (2, 0, 3, 3)


def test_kaldi_line_format() -> None:
    c = ErrorCounts(ref_words=773, corr=716, sub=43, dele=9, ins=5)
    assert c.kaldi_line() == "%WER 7.37 [ 57 / 773, 5 ins, 9 del, 43 sub ]"


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_missing_hyp_counts_as_deleted_and_outputs_are_written(tmp_path: Path, caplog) -> None:
    ref = _write(tmp_path / "ref", ["spkA-u1 A B C", "spkA-u2 D E", "spkB-u3 F"])
    hyp = _write(tmp_path / "hyp", ["spkA-u1 A X C", "spkB-u3"])
    result = score_files(ref, hyp, out_dir=tmp_path / "scoring")
    assert (result.words.sub, result.words.dele, result.words.ins) == (1, 3, 0)
    assert result.words.kaldi_line() == "%WER 66.67 [ 4 / 6, 0 ins, 3 del, 1 sub ]"
    assert "1 reference utterance(s) have no hypothesis" in caplog.text
    out = tmp_path / "scoring"
    assert (out / "wer").read_text().startswith("%WER 66.67 [ 4 / 6, 0 ins, 3 del, 1 sub ]\n%CER")
    assert (out / "ref.trn").read_text().splitlines()[0] == "A B C (spkA-u1)"
    assert (out / "hyp.trn").read_text().splitlines()[1] == " (spkA-u2)"
    per_utt = (out / "per_utt").read_text()
    assert "spkA-u1 op   C S C" in per_utt and "spkA-u2 #csid 0 0 0 2" in per_utt
    assert "spkA-u2 hyp  *** ***" in per_utt
    rows = {line.split()[0]: line.split() for line in (out / "per_spk").read_text().splitlines()[2:]}
    assert rows["spkA"][1:3] == ["2", "5"] and rows["SUM"][-1] == "66.67"


def test_character_error_rate() -> None:
    result = score_texts({"s-u": ["AB", "CD"]}, {"s-u": ["AB", "CE"]})
    assert (result.chars.ref_words, result.chars.sub) == (4, 1)


def test_bad_inputs(tmp_path: Path, capsys) -> None:
    ref = _write(tmp_path / "ref", ["s-u1 A", "s-u2 B"])
    extra = _write(tmp_path / "hyp", ["s-u1 A", "s-u9 B"])
    with pytest.raises(DataError, match=r"hyp: 1 utterance\(s\) not in the reference, first 's-u9'"):
        score_files(ref, extra)
    dup = _write(tmp_path / "dup", ["s-u1 A", "s-u1 B"])
    with pytest.raises(DataError, match=r"dup:2: duplicate id 's-u1'"):
        read_text(dup)
    assert main(["score", str(ref), str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("asrkit: error:") and "nope: file not found" in err[0]


def _random_pairs(seed: int, n: int = 320) -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(seed)
    vocab = "ONE TWO THREE A B C YES NO".split()  # small, so equal-cost ties are common
    refs, hyps = [], []
    for _ in range(n):
        ref = [rng.choice(vocab) for _ in range(rng.randint(0, 15))]
        if rng.random() < 0.2:
            hyp = [rng.choice(vocab) for _ in range(rng.randint(0, 15))]
        else:
            hyp = list(ref)
            for _ in range(rng.randint(0, 6)):
                pos, op = rng.randint(0, len(hyp)), rng.choice("sid")
                if op == "i":
                    hyp.insert(pos, rng.choice(vocab))
                elif hyp and pos < len(hyp):
                    if op == "s":
                        hyp[pos] = rng.choice(vocab)
                    else:
                        del hyp[pos]
        refs.append(ref)
        hyps.append(hyp)
    return refs, hyps


def _sclite() -> str:
    if shutil.which("sctk") is None:
        pytest.skip("sctk (NIST sclite) not installed; `make test` installs it with apt-get as root")
    return "sctk"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_nist_sclite(tmp_path: Path, seed: int) -> None:
    sctk = _sclite()
    refs, hyps = _random_pairs(seed)
    ids = [f"spk{k % 7}-utt{k:04d}" for k in range(len(refs))]
    ref = _write(tmp_path / "ref", [f"{u} {' '.join(r)}".strip() for u, r in zip(ids, refs, strict=True)])
    hyp = _write(tmp_path / "hyp", [f"{u} {' '.join(h)}".strip() for u, h in zip(ids, hyps, strict=True)])
    result = score_files(ref, hyp, out_dir=tmp_path / "scoring")
    report = subprocess.run(
        sclite_command(sctk, tmp_path / "scoring", "dtl", "pra"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def total(label: str) -> int:
        return int(re.search(rf"{label}\s*=.*\(\s*(\d+)\)", report).group(1))

    w = result.words
    assert total("Ref. words") == w.ref_words
    assert total("Percent Total Error") == w.errors
    assert (total("Percent Substitution"), total("Percent Deletions"), total("Percent Insertions")) == (
        w.sub,
        w.dele,
        w.ins,
    )
    wer = float(re.search(r"Percent Total Error\s*=\s*([\d.]+)%", report).group(1))
    assert wer == round(w.wer, 1)
    # Per utterance too: this is what catches a different tie-break between equal-cost alignments.
    per_utt = dict(re.findall(r"id: \((\S+)\)\nScores: \(#C #S #D #I\) (\d+ \d+ \d+ \d+)", report))
    assert len(per_utt) == len(ids)
    for utt, ops in result.per_utt.items():
        c = ErrorCounts.of(ops)
        assert per_utt[utt] == f"{c.corr} {c.sub} {c.dele} {c.ins}", utt


def test_levenshtein_gives_the_minimum_error_count() -> None:
    refs, hyps = _random_pairs(5)
    ref = {f"s-{k}": r for k, r in enumerate(refs)}
    hyp = {f"s-{k}": h for k, h in enumerate(hyps)}
    ours = score_texts(ref, hyp, align="levenshtein").words
    pairs = [(" ".join(r), " ".join(h)) for r, h in zip(refs, hyps, strict=True) if r]
    out = jiwer.process_words([p[0] for p in pairs], [p[1] for p in pairs])
    empty_ref_ins = sum(len(h) for r, h in zip(refs, hyps, strict=True) if not r)
    assert ours.errors == out.substitutions + out.deletions + out.insertions + empty_ref_ins
    assert ours.errors <= score_texts(ref, hyp).words.errors


def test_per_group_table_sums_the_speakers_of_each_group(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    ref.write_text("a-1 ONE TWO\na-2 THREE\nb-1 FOUR FIVE SIX\nc-1 SEVEN\n")
    hyp = tmp_path / "hyp"
    hyp.write_text("a-1 ONE\na-2 THREE\nb-1 FOUR FIVE SIX\nc-1 ELEVEN EIGHT\n")
    groups = tmp_path / "spk2group"
    groups.write_text("a child\nb adult\nc child\n")
    result = score_files(ref, hyp, out_dir=tmp_path / "scoring", spk2group=groups)
    assert result.words.errors == 3
    rows = {
        line.split()[0]: line.split()
        for line in (tmp_path / "scoring" / "per_group").read_text().splitlines()[2:]
    }
    # GROUP #spk #utts #words corr sub del ins err WER%
    assert rows["child"] == ["child", "2", "3", "4", "2", "1", "1", "1", "3", "75.00"]
    assert rows["adult"] == ["adult", "1", "1", "3", "3", "0", "0", "0", "0", "0.00"]
    assert rows["SUM"][1:4] == ["3", "4", "7"] and rows["SUM"][-1] == "42.86"
    groups.write_text("a child\nb adult\n")  # speaker c has no group
    with pytest.raises(DataError, match="no group for speaker 'c'"):
        score_files(ref, hyp, out_dir=tmp_path / "scoring2", spk2group=groups)


def test_compiled_alignment_is_the_python_one() -> None:
    """The compiled module (built at install) runs align_words' programme: the same ops and
    counts, for words and for characters, with either weights (counts-only path too)."""
    from asrkit.scoring import align as align_module

    if align_module._compiled is None:
        pytest.skip("asrkit.scoring._align was not built (no C compiler at install)")
    rng = random.Random(7)
    for _ in range(3000):
        vocab = "ABCDE"[: rng.randint(1, 5)]
        ref = [rng.choice(vocab) for _ in range(rng.randint(0, 10))]
        hyp = [rng.choice(vocab) for _ in range(rng.randint(0, 10))]
        for weights in ("sclite", "levenshtein"):
            expected = align_words(ref, hyp, weights=weights)
            kinds = [op for op, _, _ in expected]
            counts = tuple(kinds.count(k) for k in "CSDI")
            assert align_module.align(ref, hyp, weights=weights) == (counts, expected)
            assert align_module.align(ref, hyp, weights=weights, ops=False) == (counts, None)
            chars = align_words(list("".join(ref)), list("".join(hyp)), weights=weights)
            char_kinds = [op for op, _, _ in chars]
            assert align_module.align("".join(ref), "".join(hyp), weights=weights, ops=False)[0] == tuple(
                char_kinds.count(k) for k in "CSDI"
            )


def test_python_alignment_scores_the_same_without_the_compiled_module(monkeypatch) -> None:
    from asrkit.scoring import align as align_module

    refs, hyps = _random_pairs(3)
    ref = {f"s-{k}": r for k, r in enumerate(refs)}
    hyp = {f"s-{k}": h for k, h in enumerate(hyps)}
    first = score_texts(ref, hyp)
    monkeypatch.setattr(align_module, "_compiled", None)
    second = score_texts(ref, hyp)
    assert (first.words, first.chars, first.per_utt) == (second.words, second.chars, second.per_utt)


@pytest.mark.skipif(align_module._compiled is None, reason="the compiled alignment was not built")
@pytest.mark.parametrize("weights", ["sclite", "levenshtein"])
def test_compiled_alignment_equals_the_python_specification(weights: str) -> None:
    """Across the traceback's blocks (lines of 0 to 150 tokens, near and far apart)."""
    rng = random.Random(11)
    vocab = [f"w{k}" for k in range(12)]
    for n in [0, 1, 2, 3, 4, 5, 8, 9, 10, 15, 16, 17, 24, 25, 26, 63, 64, 65, 99, 100, 150]:
        for _ in range(3):
            ref = [rng.choice(vocab) for _ in range(n)]
            hyp = [w for w in ref if rng.random() > 0.2]
            for _ in range(rng.randint(0, max(1, n // 4))):
                hyp.insert(rng.randint(0, len(hyp)), rng.choice(vocab))
            if rng.random() < 0.3:
                hyp = [rng.choice(vocab) for _ in range(rng.randint(0, n + 5))]
            expected = align_module.align_words(ref, hyp, weights=weights)
            _, got = align_module.align(ref, hyp, weights=weights)
            assert got == expected, (n, ref, hyp)
            text_ref, text_hyp = "".join(ref), "".join(hyp)
            _, chars = align_module.align(text_ref, text_hyp, weights=weights)
            assert chars == align_module.align_words(list(text_ref), list(text_hyp), weights=weights)
