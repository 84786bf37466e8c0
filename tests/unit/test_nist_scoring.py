"""STM/CTM/GLM scoring (asrkit.scoring.nist, .glm) against NIST's own tools.

The hand-written cases record what sclite 2.4.10 (``sclite -F -D``, Debian's sctk) and
csrfilt.sh printed for them; the tests below them run sctk itself when it is installed.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from asrkit.errors import DataError
from asrkit.scoring.glm import filter_text, read_glm
from asrkit.scoring.nist import (
    HypWord,
    Network,
    Segment,
    align_networks,
    assign_words,
    counts_of,
    parse_items,
    score_stm,
    words_match,
)
from tests.helpers import run_cli

SCTK = Path("/usr/lib/sctk/bin")
needs_sctk = pytest.mark.skipif(
    not (SCTK / "sclite").is_file(), reason="sctk (sclite, csrfilt.sh) not installed"
)

GLM = """;;
* name "test.glm"
* desc "rules of the kinds the Hub5 GLM has"
* format = 'NIST1'
* max_nrules = '100'
* copy_no_hit = 'T'
* case_sensitive = 'F'
;;
I'M => I AM / [ ] __ [ ]
GONNA => { GOING TO / GONNA } / [ ] __ [ ]
OKAY => { OK / OKAY } / [ ] __ [ ]
UH => %HESITATION / [ ] __ [ ]
UM => %HESITATION / [ ] __ [ ]
ALRIGHT => ALL RIGHT / [ ] __ [ ]
"""


def _counts(ref: str, hyp: str) -> tuple[int, int, int, int, int]:
    c = counts_of(align_networks(Network.of(parse_items(ref)), Network.of(parse_items(hyp))))
    return c.ref_words, c.corr, c.sub, c.dele, c.ins


@pytest.mark.parametrize(
    ("ref", "hyp", "want"),
    [  # (#Wrd, C, S, D, I) as sclite -F -D reported them
        ("a (uh) b", "a x b", (3, 2, 1, 0, 0)),
        ("a (uh) b", "a b", (3, 3, 0, 0, 0)),
        ("a (uh) b", "a uh b", (3, 3, 0, 0, 0)),
        ("a (uh) (um) b", "a x b", (4, 3, 1, 0, 0)),
        ("a { yes / @ } b", "a x b", (2, 2, 0, 0, 1)),
        ("a { yes / yeah } b", "a x b", (3, 2, 1, 0, 0)),
        ("a { going to / gonna } b", "a going b", (4, 3, 0, 1, 0)),
        ("frog", "fr-", (1, 1, 0, 0, 0)),
        ("fr- a", "frog a", (2, 2, 0, 0, 0)),
        ("-og a", "frog a", (2, 2, 0, 0, 0)),
        ("(fr-) a", "a", (2, 2, 0, 0, 0)),
        ("{ u / @ } u { b / @ } u", "u u b", (4, 3, 0, 1, 0)),
        ("uh c um (a)", "d c d", (4, 2, 2, 0, 0)),
        ("a b", "a (uh) b (x)", (4, 4, 0, 0, 0)),
        ("(q) b", "a b", (2, 1, 1, 0, 0)),
    ],
)
def test_network_alignment_counts_as_sclite(ref: str, hyp: str, want: tuple[int, ...]) -> None:
    assert _counts(ref, hyp) == want


def test_fragments_match_the_words_they_begin_or_end() -> None:
    assert words_match("FR-", "frog") and words_match("frog", "fr-") and words_match("-og", "dog")
    assert not words_match("fr-", "dog") and not words_match("fr-", "frog", fragments=False)
    assert words_match("Yes", "YES")


def test_glm_filter_as_csrfilt(tmp_path: Path) -> None:
    """Outputs csrfilt.sh -dh printed for these lines with the same rules."""
    path = tmp_path / "t.glm"
    path.write_text(GLM + "%HESITATION => (%HESITATION) / [ ] __ [ ]\n")
    rules = read_glm(path).active("stm", "ref")
    assert (
        filter_text("i'm gonna say uh okay", rules)
        == "I AM { GOING TO / GONNA } SAY %HESITATION { OK / OKAY }"
    )
    assert filter_text("yes (um) fr- word uh-huh (%hesitation) (uh) {yes/@}", rules) == (
        "YES (%HESITATION) FR- WORD UH HUH ((%HESITATION)) (%HESITATION) {YES/@}"
    )
    first = tmp_path / "order.glm"
    first.write_text(
        GLM.split(";;\nI'M")[0] + ";;\nGOING => WENT / [ ] __ [ ]\nGOING TO => GONNA / [ ] __ [ ]\n"
        "A B => X / [ ] __ [ ]\nB C => Y / [ ] __ [ ]\nQ => R / [ ] __ [ ]\nR => S / [ ] __ [ ]\n"
        "UH-HUH => UHHUH / [ ] __ [ ]\n"
    )
    rules = read_glm(first).active("stm", "ref")
    assert filter_text("going to go going there a b c q r uh-huh (a b) b c", rules) == (
        "WENT TO GO WENT THERE X C R S UHHUH (X) Y"
    )


def test_glm_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.glm"
    path.write_text(GLM + "THIS LINE HAS NO ARROW\n")
    with pytest.raises(DataError, match=r"bad\.glm:15: not a GLM rule"):
        read_glm(path)
    path.write_text(GLM + "A => B / C __ [ ]\n")
    with pytest.raises(DataError, match=r"bad\.glm:15: rule context .* is not supported"):
        read_glm(path)


def test_input_dependent_sections(tmp_path: Path) -> None:
    path = tmp_path / "t.glm"
    path.write_text(GLM + ';; INPUT_DEPENDENT_APPLICATION = "ref"\nYEAH => YES / [ ] __ [ ]\n')
    glm = read_glm(path)
    assert filter_text("yeah", glm.active("stm", "ref")) == "YES"
    assert filter_text("yeah", glm.active("ctm", "hyp")) == "YEAH"


def _seg(start: float, end: float, text: str = "a", speaker: str = "s") -> Segment:
    return Segment("f", "A", speaker, start, end, text)


def test_words_go_to_the_first_segment_ending_after_their_midpoint() -> None:
    segments = [
        _seg(0, 2),
        _seg(1.5, 4),
        _seg(5, 6, "ignore_time_segment_in_scoring"),
        _seg(7, 8),
    ]
    words = [
        HypWord("f", "A", 1.6, 0.2, "w1"),  # inside both overlapping segments: the first
        HypWord("f", "A", 2.0, 0.2, "w2"),  # after the first's end: the second
        HypWord("f", "A", 4.5, 0.2, "w3"),  # in the gap: the next segment (ignored: dropped)
        HypWord("f", "A", 5.5, 0.2, "w4"),  # in the ignored segment: dropped
        HypWord("f", "A", 6.5, 0.2, "w5"),  # gap before the last: the last
        HypWord("f", "A", 9.0, 0.2, "w6"),  # after every segment: the last
    ]
    placed, dropped = assign_words(segments, words)
    assert {k: [w.text for w in v] for k, v in placed.items()} == {
        0: ["w1"],
        1: ["w2"],
        2: [],
        3: ["w5", "w6"],
    }
    assert dropped == 2
    with pytest.raises(DataError, match="file 'g' channel 'A' has no segment"):
        assign_words(segments, [HypWord("g", "A", 0, 1, "x")])
    result = score_stm(segments, words)
    assert [s.segment.start for s in result.segments] == [0, 1.5, 7]  # the ignored one is not scored


# ---------------------------------------------------------------------------- sctk oracles


def _sclite_rows(ref: Path, hyp: Path) -> dict[str, tuple[int, ...]]:
    """sclite -F -D's raw counts per speaker and for the sum: (#Snt, #Wrd, C, S, D, I)."""
    out = subprocess.run(
        [
            str(SCTK / "sclite"),
            "-r",
            str(ref),
            "stm",
            "-h",
            str(hyp),
            "ctm",
            "-F",
            "-D",
            "-o",
            "rsum",
            "stdout",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": f"{SCTK}:{os.environ['PATH']}"},
    ).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\s*\|\s*(\S+)\s*\|\s*(\d+)\s+(\d+)\s*\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", line)
        if m:
            rows[m.group(1).lower()] = tuple(int(x) for x in m.groups()[1:])
    return rows


VOCAB = ["a", "b", "c", "d", "e", "uh", "um"]


def _ref_item(rng: random.Random) -> str:
    k = rng.random()
    if k < 0.55:
        return rng.choice(VOCAB)
    if k < 0.65:
        return f"({rng.choice(VOCAB)})"
    if k < 0.75:
        return f"{{ {rng.choice(VOCAB)} / @ }}"
    if k < 0.85:
        alternatives = [" ".join(rng.choices(VOCAB, k=rng.randint(1, 2))) for _ in range(rng.randint(2, 3))]
        return "{ " + " / ".join(alternatives) + " }"
    return rng.choice(["fr-", "-og", "ab-"])


def _hyp_of(items: list[str], rng: random.Random) -> list[str]:
    hyp = []
    for item in items:
        word = rng.choice(re.findall(r"[a-z\-]+", item) or ["a"])
        word = {"fr-": rng.choice(["frog", "fr-", "fry"]), "-og": rng.choice(["dog", "log"])}.get(word, word)
        r = rng.random()
        if r < 0.6:
            hyp.append(word)
        elif r < 0.75:
            hyp.append(rng.choice(VOCAB))
        elif r >= 0.85:
            hyp += [word, rng.choice(VOCAB)]
    if rng.random() < 0.2:
        hyp.insert(0, rng.choice(VOCAB))
    return hyp


@needs_sctk
@pytest.mark.parametrize("seed", range(6))
def test_random_networks_align_as_sclite(tmp_path: Path, seed: int) -> None:
    """40 segments per seed, each its own speaker, with optional words, alternations
    (empty ones too) and fragments: every segment's counts equal sclite's."""
    rng = random.Random(seed)
    stm, ctm = [], []
    for s in range(40):
        items = [_ref_item(rng) for _ in range(rng.randint(0, 7))]
        stm.append(f"f1 A s{s} {s * 10:.2f} {s * 10 + 8:.2f} <o> " + " ".join(items))
        ctm += [f"f1 A {s * 10 + 0.5 + k * 0.5:.2f} 0.30 {w}" for k, w in enumerate(_hyp_of(items, rng))]
    (tmp_path / "ref.stm").write_text("\n".join(stm) + "\n")
    (tmp_path / "hyp.ctm").write_text("\n".join(ctm) + "\n")
    want = _sclite_rows(tmp_path / "ref.stm", tmp_path / "hyp.ctm")
    from asrkit.scoring.nist import read_ctm, read_stm

    result = score_stm(read_stm(tmp_path / "ref.stm"), read_ctm(tmp_path / "hyp.ctm"))
    for scored in result.segments:
        c = scored.counts
        assert want[scored.segment.speaker] == (1, c.ref_words, c.corr, c.sub, c.dele, c.ins), (
            scored.ref,
            scored.hyp,
        )


CONVERSATION_WORDS = [
    "i'm",
    "gonna",
    "okay",
    "uh",
    "um",
    "yeah",
    "right",
    "know",
    "you",
    "alright",
    "uh-huh",
    "so",
]


def _hub5_case(rng: random.Random, tmp_path: Path) -> tuple[Path, Path]:
    """An eval2000-like STM (sw_ and en_ files, two channels, gaps, overlapping segments,
    ignored regions, optional words, alternations, fragments) and a CTM for it."""
    stm = [';; CATEGORY "0" "" ""', ';; LABEL "O" "Overall" "All Segments in the test"']
    ctm: list[str] = []
    for file in ("en_4156", "en_6189", "sw_4390", "sw_4484"):  # sorted, as hubscr sorts both files
        for channel in ("A", "B"):
            t = rng.uniform(0, 2)
            for _ in range(rng.randint(4, 7)):
                start = t
                end = start + rng.uniform(1.5, 4)
                speaker = f"{file}_{channel}"
                if rng.random() < 0.15:
                    text = "IGNORE_TIME_SEGMENT_IN_SCORING"
                else:
                    words = rng.choices(CONVERSATION_WORDS, k=rng.randint(1, 6))
                    if rng.random() < 0.3:
                        words.insert(rng.randrange(len(words) + 1), "(%hesitation)")
                    if rng.random() < 0.2:
                        words.insert(rng.randrange(len(words) + 1), "{ yes / yeah }")
                    if rng.random() < 0.2:
                        words.insert(rng.randrange(len(words) + 1), "th-")
                    text = " ".join(words)
                stm.append(f"{file} {channel} {speaker} {start:.2f} {end:.2f} <O,F0,M> {text}")
                # hypothesis words across the segment and a little beyond (gaps, overlaps)
                for _ in range(rng.randint(0, 6)):
                    word = rng.choice([*CONVERSATION_WORDS, "the", "there", "going", "ok"])
                    at = rng.uniform(start - 0.3, end + 0.5)
                    ctm.append(f"{file} {channel} {at:.2f} {rng.uniform(0.1, 0.5):.2f} {word}")
                overlap = rng.random() < 0.2  # the next segment starts before this one ends
                t = end - 0.5 if overlap else end + rng.uniform(0.1, 2)
    ctm_lines = sorted(ctm, key=lambda ln: (ln.split()[0], ln.split()[1], float(ln.split()[2])))
    ref, hyp = tmp_path / "ref.stm", tmp_path / "hyp.ctm"
    ref.write_text("\n".join(stm) + "\n")
    hyp.write_text("\n".join(ctm_lines) + "\n")
    return ref, hyp


def _hubscr_counts(ref: Path, hyp: Path, glm: Path, prefix: str) -> tuple[int, ...]:
    """hubscr.pl's hub5 path by hand (its plotting step needs tools sctk lacks): csrfilt.sh
    -dh with the GLM on both files, the subset's lines, sclite -F -D; the Sum row."""
    env = {**os.environ, "PATH": f"{SCTK}:{os.environ['PATH']}"}
    filtered = {}
    for path, kind, purpose in ((ref, "stm", "ref"), (hyp, "ctm", "hyp")):
        out = subprocess.run(
            [str(SCTK / "csrfilt.sh"), "-i", kind, "-t", purpose, "-dh", str(glm)],
            stdin=path.open(),
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
        keep = [ln for ln in out.splitlines() if ln.startswith(";;") or ln.startswith(prefix)]
        filtered[kind] = path.with_name(f"{path.name}.{prefix or 'all'}.filt")
        filtered[kind].write_text("\n".join(keep) + "\n")
    return _sclite_rows(filtered["stm"], filtered["ctm"])["sum"]


@needs_sctk
@pytest.mark.parametrize("seed", range(3))
def test_score_equals_hubscr_per_subset(tmp_path: Path, seed: int) -> None:
    """`asrkit score REF.stm HYP.ctm --glm G --subset swbd=sw_ --subset callhm=en_` prints
    the counts of csrfilt.sh + sclite (hubscr.pl -h hub5's pipeline), overall and per subset."""
    ref, hyp = _hub5_case(random.Random(seed), tmp_path)
    glm = tmp_path / "test.glm"
    glm.write_text(GLM)
    out = run_cli(
        "score", str(ref), str(hyp), "--glm", str(glm), "--subset", "swbd=sw_", "--subset", "callhm=en_"
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split()[-3] for ln in lines] == ["all", "swbd", "callhm"]
    for line, prefix in zip(lines, ("", "sw_", "en_"), strict=True):
        m = re.match(
            r"%WER [\d.]+ \[ (\d+) / (\d+), (\d+) ins, (\d+) del, (\d+) sub \] \S+ \((\d+) segments\)", line
        )
        assert m, line
        errors, words, ins, dele, sub, segments = (int(x) for x in m.groups())
        snt, wrd, _corr, s_sub, s_del, s_ins = _hubscr_counts(ref, hyp, glm, prefix)
        assert (segments, words, sub, dele, ins) == (snt, wrd, s_sub, s_del, s_ins), (prefix, line)
        assert errors == sub + dele + ins


def test_cli_refuses_kaldi_options_with_an_stm(tmp_path: Path) -> None:
    ref = tmp_path / "ref.stm"
    ref.write_text("f A s 0 1 <o> a\n")
    hyp = tmp_path / "hyp.ctm"
    hyp.write_text("f A 0.1 0.2 a\n")
    out = run_cli("score", str(ref), str(hyp), "--bootstrap")
    assert out.returncode == 2 and "an STM reference is scored as sclite" in out.stderr
    out = run_cli("score", str(hyp), str(hyp), "--glm", str(ref))
    assert out.returncode == 2 and "need an STM reference" in out.stderr
    out = run_cli("score", str(ref), str(hyp), "--out-dir", str(tmp_path / "scoring"))
    assert out.returncode == 0 and out.stdout.startswith(
        "%WER 0.00 [ 0 / 1, 0 ins, 0 del, 0 sub ] all (1 segments)"
    )
    assert (tmp_path / "scoring" / "pra").read_text().startswith("id: (s-f-A-0.00-1.00)")
    bad = tmp_path / "bad.ctm"
    bad.write_text("g A 0.1 0.2 a\n")
    out = run_cli("score", str(ref), str(bad))
    assert out.returncode == 2 and "no segment in the STM" in out.stderr
