"""Recipe stages through the CLI: data prep in both AN4 layouts, features, download."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml

from asrkit.cli.main import main
from asrkit.config import compose, settings_hash
from asrkit.data import read_data_dir
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.errors import ConfigError
from asrkit.stages import STAGES
from tests.helpers import make_an4_corpus


def _dirs(tmp_path: Path) -> list[str]:
    return [
        f"data_root={tmp_path / 'data'}",
        f"feats_root={tmp_path / 'fbank'}",
        f"exp_dir={tmp_path / 'exp'}",
    ]


@pytest.mark.parametrize("layout", ["raw", "sphere"])
def test_prep_and_features_for_both_corpus_layouts(tmp_path: Path, layout: str) -> None:
    corpus = make_an4_corpus(tmp_path / "an4", layout)
    status = main(
        [
            "run",
            "--stop-stage",
            "2",
            f"data.corpus_dir={corpus}",
            "data.num_dev=2",
            "features.num_mel_bins=40",
            *_dirs(tmp_path),
        ]
    )
    assert status == 0
    train, dev, test = (read_data_dir(tmp_path / "data" / s) for s in ("train", "train_dev", "test"))
    # train_dev = the first 2 training utterances in sorted id order.
    assert dev.utt_ids == ["fabc-an100-fabc-b", "fabc-an101-fabc-b"]
    assert len(train.utt_ids) == 5 and len(test.utt_ids) == 2
    assert dev.text["fabc-an100-fabc-b"] == "YES"  # <s> </s> stripped
    assert test.text["fqqq-an108-fqqq-b"] == "STOP"
    feats = dict(kaldi_io.read_mat_scp(str(tmp_path / "data" / "train" / "feats.scp")))
    assert len(feats) == 5 and all(m.shape[1] == 40 for m in feats.values())
    saved = yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())
    assert saved["features"]["num_mel_bins"] == 40
    log = (tmp_path / "exp" / "log" / "run.log").read_text()
    for number in (0, 1, 2):
        assert f"stage {number} ({STAGES[number].name}): start" in log
        assert f"stage {number} ({STAGES[number].name}): done in" in log


def test_download_stage_fetches_and_skips(tmp_path: Path) -> None:
    source = make_an4_corpus(tmp_path / "src" / "an4", "sphere")
    archive = tmp_path / "an4_sphere.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="an4")
    corpus = tmp_path / "downloads" / "an4"
    args = [
        "run",
        "--stop-stage",
        "1",
        f"data.corpus_dir={corpus}",
        f"data.url=file://{archive}",
        "data.num_dev=2",
        *_dirs(tmp_path),
    ]
    assert main(args) == 0
    assert (corpus / "etc" / "an4_train.transcription").is_file()
    archive.unlink()  # a second run must not need the archive: the corpus is there
    assert main(args) == 0
    assert "corpus found in" in (tmp_path / "exp" / "log" / "run.log").read_text()


@pytest.mark.parametrize(
    "command", ["run", "validate-data", "check-alignments", "bench", "score", "transcribe", "topology"]
)
def test_every_help_text_prints_as_written(command: str, capfd: pytest.CaptureFixture[str]) -> None:
    """argparse %-formats help strings but not descriptions: a literal '%%' shows as is."""
    from asrkit.cli.main import main

    try:
        code = main([command, "--help"])  # `run --help` composes the settings it is given
    except SystemExit as exit_:
        code = exit_.code
    assert code == 0
    out = capfd.readouterr().out
    assert out.startswith("usage: asrkit " + command) and "%%" not in out


def test_a_change_upstream_reruns_the_stages_that_need_it() -> None:
    from asrkit.stages.registry import stage_number, stage_settings

    assert "features" in stage_settings(5) and "decode" in stage_settings(5)
    assert "decode" not in stage_settings(4) and "align" not in stage_settings(3)
    assert "model" in stage_settings(7) and "tokenizer" in stage_settings(4)
    # Stage 7 (loglikes) reads decode.model, decode.sets and align.train.
    assert {"decode", "align"} <= set(stage_settings(stage_number("loglikes")))


def test_how_batches_are_read_is_not_part_of_the_training_settings() -> None:
    from asrkit.stages.registry import stage_number, stage_settings

    """The reader-crash advice (train.loader=thread) must resume training, not restart it:
    the loader settings do not change the batches, so not the stage's settings either."""
    keys = stage_settings(stage_number("train"))
    base, _ = settings_hash(compose([]), keys)
    loaders = ("train.loader=thread", "train.prefetch=0", "train.loader_workers=3")
    for override in (*loaders, "train.adapt_threads=false"):
        assert settings_hash(compose([override]), keys)[0] == base, override
    assert settings_hash(compose(["train.epochs=3"]), keys)[0] != base


def test_overrides_may_follow_options(capsys: pytest.CaptureFixture[str]) -> None:
    # Recipes' run.sh append their own override after the user's arguments, which may end
    # with an option: `run.sh train.epochs=3 --force` + `+experiment=...`.
    from asrkit.cli.main import main

    assert main(["run", "train.epochs=3", "--cfg", "model=tiny", "optim.lr=0.5"]) == 0
    printed = capsys.readouterr().out
    assert "epochs: 3" in printed and "size: tiny" in printed and "lr: 0.5" in printed
    assert main(["run", "a=1", "--cfg", "--no-such-option"]) == 2
    assert "unknown option --no-such-option for `asrkit run`" in capsys.readouterr().err


def test_a_setting_added_later_leaves_earlier_outputs_current_at_its_default() -> None:
    """optim.fused came after trained models: at its default the train stage's hash is the
    one those models were made with (the field is left out), set it changes the hash."""
    from asrkit.stages.registry import stage_number, stage_settings

    keys = stage_settings(stage_number("train"))
    base, covered = settings_hash(compose([]), keys)
    assert "fused" not in covered["optim"] and "lr" in covered["optim"]
    fused, covered = settings_hash(compose(["optim.fused=true"]), keys)
    assert fused != base and covered["optim"]["fused"] is True


def test_the_speaker_adapted_and_open_vocabulary_settings_leave_earlier_outputs_current() -> None:
    """gmm.tri_kinds & co., wfst.first_pass, lm.general_words and align.fmllr came after
    experiments were run: at their defaults no stage's hash moves; set, the stages that
    use them run again."""
    from asrkit.stages.registry import PIPELINES, stage_settings

    base = {
        n: settings_hash(compose(["pipeline=hybrid", "objective=ce"]), stage_settings(n, pipeline="hybrid"))
        for n in PIPELINES["hybrid"]
    }
    for n, (_, covered) in base.items():
        flat = json.dumps(covered)
        for key in (
            "tri_kinds",
            "lda_dim",
            "mllt_rounds",
            "fmllr_rounds",
            "first_pass",
            "general_words",
            '"fmllr"',
            "ivector",
            '"fbank": ',
        ):
            assert key not in flat, (n, key)
    for override, stage in (
        ("gmm.tri_kinds=[deltas]", 4),
        ("align.fmllr=true", 6),
        ("wfst.first_pass=[10,0]", 5),
    ):
        moved, _ = settings_hash(
            compose(["pipeline=hybrid", "objective=ce", override]), stage_settings(stage, pipeline="hybrid")
        )
        assert moved != base[stage][0], override
    # i-vectors join the fMLLR input: the training stage runs again when they are added.
    fmllr = ["pipeline=hybrid", "objective=ce", "align.fmllr=true"]
    assert (
        settings_hash(compose(fmllr), stage_settings(6, pipeline="hybrid"))[0]
        != settings_hash(compose([*fmllr, "align.ivector_dim=100"]), stage_settings(6, pipeline="hybrid"))[0]
    )
    with pytest.raises(ConfigError, match="align.ivector_dim=100 needs align.fmllr=true"):
        compose(["pipeline=hybrid", "objective=ce", "align.ivector_dim=100"])
    # Leaving the fbank out of the input (align.fbank=false) trains again too.
    assert (
        settings_hash(compose(fmllr), stage_settings(6, pipeline="hybrid"))[0]
        != settings_hash(compose([*fmllr, "align.fbank=false"]), stage_settings(6, pipeline="hybrid"))[0]
    )
    with pytest.raises(ConfigError, match="align.fbank=false needs align.fmllr=true"):
        compose(["pipeline=hybrid", "objective=ce", "align.fbank=false"])
