"""The lang stage and the LM-weight sweep on dev, through the command line.

The in-process tests of the same code are in :mod:`tests.unit.test_beam_lm`.
"""

from __future__ import annotations

from pathlib import Path

from asrkit.data.datadir import read_kaldi_map
from tests.helpers import make_data_dir, run_cli, tiny_recipe


def test_lang_stage_and_sweep_pick_the_best_dev_setting(tmp_path: Path) -> None:
    result = tiny_recipe(
        tmp_path, "decode=beam_lm", "decode.lm_weights=[0,1,3]", "decode.word_scores=[-2,0]", "lm.order=2"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    exp = tmp_path / "exp"
    lexicon = read_kaldi_map(exp / "lang" / "lexicon.txt")
    assert set(lexicon) == {"HELLO", *(f"WORD{i}" for i in range(6))}
    assert (exp / "lang" / "lm.arpa").read_text().startswith("\n\\data\\\nngram 1=")
    tune = exp / "decode_beam_lm_train_dev"
    wers = {f.name: f.read_text() for f in tune.glob("wer_*")}
    assert len(wers) == 6
    errors = {name: int(line.split("[")[1].split("/")[0]) for name, line in wers.items()}
    best_line = (tune / "best_wer").read_text()
    best_file = Path(best_line.split()[-1]).name
    assert errors[best_file] == min(errors.values())
    w, s = best_file[len("wer_") :].split("_")
    assert (exp / "decode_beam_lm_test" / "setting").read_text().startswith(f"lm_weight={w} word_score={s} ")
    assert "test (beam_lm, lm_weight=" in result.stdout and "test: %WER" in result.stdout
    assert (exp / "decode_beam_lm_test" / "scoring" / "wer").is_file()

    # A reference word outside the lexicon is reported (and cannot be output).
    other = tmp_path / "other"
    make_data_dir(other, utts=2, seed=5)
    (other / "text").write_text("spk1-utt0 ZEBRA HELLO\nspk2-utt1 WORD1 HELLO\n")
    result = run_cli(
        "run",
        "--stage",
        "5",
        "--stop-stage",
        "5",
        f"data_root={tmp_path / 'data'}",
        f"exp_dir={exp}",
        f"decode.sets=[{other}]",
        "decode.lm_weights=[1]",
        "decode.word_scores=[0]",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 of 4 reference words (25.00%) are not in the lexicon (ZEBRA)" in result.stderr
    assert "ZEBRA" not in (exp / "decode_beam_lm_other" / "hyp").read_text()
