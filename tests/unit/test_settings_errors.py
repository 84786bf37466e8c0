"""A newcomer's settings mistakes on the command line: each ends as one line that names
the fix (the close spelling, the form a list takes, where ``+`` belongs), exit status 2,
and nothing run; ``+`` never adds a key that nothing reads."""

from __future__ import annotations

import pytest

from asrkit.choices import did_you_mean
from asrkit.cli.main import main
from asrkit.config import compose

SEE = "(`asrkit run --cfg` prints every setting)"
MISTAKES = {
    ("train.epoch=3",): f"unknown setting 'train.epoch'; did you mean train.epochs? {SEE}",
    ("+train.epoch=3",): (
        f"unknown setting 'train.epoch' (+ adds no setting asrkit reads); did you mean train.epochs? {SEE}"
    ),
    ("lr=1e-3",): f"unknown setting 'lr'; did you mean optim.lr? {SEE}",
    ("modle=tiny",): f"unknown setting 'modle'; did you mean model? {SEE}",
    ("stratgy=sync",): f"unknown setting 'stratgy'; did you mean strategy? {SEE}",
    ("strategy=adpgsd",): (
        "strategy=adpgsd is unknown; did you mean adpsgd? "
        "(strategy is one of: adpsgd, delay_by_one, hybrid, single, sync)"
    ),
    ("model=huge",): "model=huge is unknown (model is one of: demo, large, paper, tiny)",
    ("decode=beamlm",): (
        "decode=beamlm is unknown; did you mean beam_lm or beam? (decode is one of: beam, beam_lm, greedy)"
    ),
    ("+experiment=an4_larg",): (
        "experiment=an4_larg is unknown; did you mean an4_large or an4_large_sp? (experiment is one of: "
        "an4_best, an4_hybrid, an4_hybrid_sat, an4_large, an4_large_sp, so762_best, so762_hybrid, "
        "so762_hybrid_sat, speechocean762, swbd_hybrid)"
    ),
    ("experiment=an4_large",): "experiment=an4_large: add it to the defaults with a +: +experiment=an4_large",
    ("+model=large",): "+model=large: model already has a default; write model=large (without +)",
    ("decode.sets=test",): (
        "decode.sets=test: decode.sets is a list; write 'decode.sets=[test]' (quoted for the shell)"
    ),
    ("train.epochs=abc",): "train.epochs=abc: expected a whole number; e.g. train.epochs=20",
    ("+train.epochs=3",): (
        "+train.epochs=3: train.epochs is already a setting; write train.epochs=3 (without +)"
    ),
    ("train=3",): (
        "train=3: train is a section of settings, not one value; set its keys, e.g. train.epochs=..."
    ),
    ("seed=1,2",): (
        "'seed=1,2': a comma makes a sweep of runs, which `asrkit run` does not do; give one value"
    ),
    ("train.epochs=[3",): (
        "'train.epochs=[3': not a KEY=VALUE setting (no viable alternative at input '[3'); quote "
        "values with spaces or brackets, e.g. 'decode.sets=[dev,test]'"
    ),
    ("optim.name=adm",): "optim.name='adm' is unknown; did you mean adam? choose one of adam, sgd",
    ("strategy=sync", "strategy.pattern=fixed"): (
        "'strategy.pattern' is not a setting of strategy=sync; "
        "it belongs to strategy=adpsgd / delay_by_one / hybrid"
    ),
    ("--epochs", "3"): (
        "unknown option --epochs for `asrkit run`: settings are KEY=VALUE words, not options, "
        "e.g. train.epochs=3 (`asrkit run --help` lists the options and the settings' groups)"
    ),
    ("--lr=0.1",): (
        "unknown option --lr=0.1 for `asrkit run`: settings are "
        "KEY=VALUE words, not options, e.g. optim.lr=0.1 (`asrkit run --help` lists the options and "
        "the settings' groups)"
    ),
    ("--stage", "9"): (
        "--stage 9: there is no stage 9; the ctc pipeline's stages are 0-8 (`asrkit run --help` lists them)"
    ),
    (
        "--stage",
        "5",
        "--stop-stage",
        "2",
    ): ("--stage 5 is after --stop-stage 2; swap them (--stage 2 --stop-stage 5)"),
}


@pytest.mark.parametrize("words", list(MISTAKES), ids=[" ".join(w) for w in MISTAKES])
def test_each_settings_mistake_is_one_line_with_its_fix(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be run, or written here
    assert main(["run", *words]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == "asrkit: error: " + MISTAKES[words]
    # No framework internals: Hydra's key paths, its schema nodes, its search path, our files.
    assert not any(word in err for word in ("full_key", "reference_type", "_schema", "search path", "/conf"))
    assert list(tmp_path.iterdir()) == []


def test_a_plus_adds_only_where_a_key_may_be_new() -> None:
    """``+`` adds an experiment to the defaults and a key inside a free-form dict; an
    experiment's settings apply; several mistakes come back together."""
    cfg = compose(["+experiment=an4_hybrid", "+data.import_dirs.train=/egs/an4/data/train"])
    assert cfg.pipeline == "hybrid" and cfg.data.import_dirs == {"train": "/egs/an4/data/train"}
    assert compose(["++train.epochs=3"]).train.epochs == 3
    with pytest.raises(Exception) as caught:
        compose(["train.epoch=3", "model=huge"])
    assert str(caught.value).startswith("2 bad settings: (1) unknown setting 'train.epoch'")


def test_did_you_mean_finds_whole_and_last_part_spellings() -> None:
    keys = ["train.epochs", "optim.lr", "schedule.warmup_epochs", "train.max_batch"]
    assert did_you_mean("train.epoch", keys)[0] == "train.epochs"
    assert did_you_mean("lr", keys) == ["optim.lr"]
    assert did_you_mean("max_batch", keys) == ["train.max_batch"]
    assert did_you_mean("zebra", keys) == []


def test_run_help_lists_the_selected_pipeline_groups_and_experiments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--help", "+experiment=an4_hybrid"]) == 0
    text = capsys.readouterr().out
    assert "stages of the hybrid pipeline" in text and "4  gmm" in text
    assert "  strategy   adpsgd, delay_by_one, hybrid, single, sync" in text
    assert "_schema" not in text
    assert "  an4_hybrid_sat  " in text
    assert main(["run", "-h"]) == 0
    assert "stages of the ctc pipeline" in capsys.readouterr().out
    # Settings that do not compose as a whole still show the pipeline they name.
    assert main(["run", "--help", "pipeline=hybrid"]) == 0
    text = capsys.readouterr().out
    assert "set objective=ce; showing the pipeline given" in text
    assert "stages of the hybrid pipeline" in text and "4  gmm" in text


def test_version_and_a_bare_asrkit_print_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "usage: asrkit" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("asrkit 0.")
