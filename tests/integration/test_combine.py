"""Stage 8: training the members of a system combination and combining them.

The in-process tests of the same code are in :mod:`tests.unit.test_combine`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asrkit.data.datadir import read_kaldi_map
from tests.helpers import run_cli, tiny_recipe


def _fixture_run(tmp_path: Path, *extra: str):
    return tiny_recipe(
        tmp_path,
        "train.average_last=1",
        "ensemble.nbest=3",
        "ensemble.lm_weights=[0,1]",
        "ensemble.word_scores=[0]",
        *extra,
        stop_stage=8,
    )


@pytest.mark.heavy
def test_stage_8_trains_the_members_and_combines_them(tmp_path: Path) -> None:
    result = _fixture_run(tmp_path, 'ensemble.members=["seed=5","model.hidden=12"]')
    assert result.returncode == 0, result.stderr[-3000:]
    exp = tmp_path / "exp"
    for member in ("member1", "member2"):
        assert (exp / member / "model.pt").is_file()
        assert (exp / member / "decode_beam_lm_test" / "scoring" / "wer").is_file()
    saved = json.loads((exp / "decoders" / "combined.json").read_text())
    assert saved["settings"]["systems"] == [".", "member1", "member2"]
    assert saved["tuned_on"] == "train_dev"
    assert {p.name for p in (exp / "decode_combined_train_dev").glob("wer_*")} == {"wer_0_0", "wer_1_0"}
    assert (exp / "decode_combined_test" / "scoring" / "wer").read_text().startswith("%WER ")
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("test (combined, systems=3")]
    assert "%WER" in line
    member_config = (exp / "member2" / "config.yaml").read_text()
    assert "hidden: 12" in member_config and "seed: 2001" in member_config
    # asrkit transcribe combines the same systems by default; --decode beam_lm is the
    # experiment's own model, as stage 5 decoded it.
    wav_scp = read_kaldi_map(tmp_path / "data" / "test" / "wav.scp")
    for options, folder in (([], "decode_combined_test"), (["--decode", "beam_lm"], "decode_beam_lm_test")):
        hyp = read_kaldi_map(exp / folder / "hyp", allow_empty_value=True)
        out = run_cli("transcribe", str(exp), *wav_scp.values(), *options)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.splitlines() == [f"{path}\t{hyp[utt]}" for utt, path in wav_scp.items()], folder
    # Again: the members' stages and stage 8 are skipped; the scores are shown again.
    again = _fixture_run(tmp_path, 'ensemble.members=["seed=5","model.hidden=12"]')
    assert again.returncode == 0, again.stderr[-3000:]
    assert "stage 8 (combine): already done with these settings" in again.stderr
    assert line in again.stdout


def test_a_failing_member_stops_stage_8_with_its_log(tmp_path: Path) -> None:
    # AN4's phone dictionary has none of the fixtures' words: the member's stage 3 fails.
    result = _fixture_run(tmp_path, 'ensemble.members=["tokenizer=phone"]')
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()
    assert any("ensemble member 1 ('tokenizer=phone') failed" in ln for ln in last), result.stderr[-2000:]
    assert any(str(tmp_path / "exp" / "member1" / "log" / "stage8.out") in ln for ln in last)
    assert not (tmp_path / "exp" / "decode_combined_test").exists()
    assert not (tmp_path / "exp" / ".stages" / "8-combine.json").exists()
