"""``asrkit bench hybrid`` on a tiny real fixture: 12 AN4 training and 3 test utterances
(wav in tmp_path), AN4's dictionary, a bigram LM of their transcripts, a GMM of a few rounds,
and stand-in hybrid and CTC experiments (untrained tiny networks) so every part runs.
The figures are checked for shape and consistency, never against wall-clock limits."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from omegaconf import OmegaConf

from asrkit.bench import BENCHMARKS, QUICK
from asrkit.bench.hmm import bench_hybrid
from asrkit.bench.plots import plot
from asrkit.config import compose
from asrkit.data import DataDir, write_data_dir
from asrkit.decoding.beam import write_lexicon
from asrkit.decoding.decoder import DecodingRecord
from asrkit.decoding.hclg import PRIOR_COUNTS
from asrkit.errors import ConfigError
from asrkit.features.extractors import FeatureConfig
from asrkit.gmm.config import GmmConfig
from asrkit.lm import estimate_kneser_ney, write_arpa
from asrkit.models.checkpoint import build_from_meta, save_checkpoint
from asrkit.targets import TokenizerConfig, train_tokenizer
from asrkit.targets.alignments import read_alignments
from asrkit.targets.forced_align import class_counts, write_counts
from tests.helpers import SHARED_AN4

DICTIONARY = SHARED_AN4 / "etc" / "an4.dic"

pytestmark = pytest.mark.skipif(
    not (SHARED_AN4 / "wav").is_dir() or not DICTIONARY.is_file(), reason="needs the AN4 corpus in ../shared"
)

TINY = GmmConfig(
    mono_iters=3,
    mono_gauss=60,
    mono_realign=[1, 2],
    tri_leaves=[30],
    tri_gauss=[60],
    tri_iters=2,
    tri_realign=[],
)


def _an4_dir(out: Path, which: str, count: int) -> dict[str, str]:
    """The first ``count`` utterances of AN4's ``which`` list (``train``/``test``) as a data
    dir of wav files; returns its text."""
    folder = "an4_clstk" if which == "train" else "an4test_clstk"
    wav_scp, utt2spk, text = {}, {}, {}
    for line in (SHARED_AN4 / "etc" / f"an4_{which}.transcription").read_text().splitlines()[:count]:
        words, corpus_id = line.rsplit("(", 1)
        corpus_id = corpus_id.rstrip(")").strip()
        spk = corpus_id.split("-")[1]
        samples = np.fromfile(SHARED_AN4 / "wav" / folder / spk / f"{corpus_id}.raw", dtype=">i2")
        wav = out / "audio" / f"{corpus_id}.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        soundfile.write(wav, samples.astype(np.int16), 16000, subtype="PCM_16")
        utt = f"{spk}-{corpus_id}"
        wav_scp[utt], utt2spk[utt] = str(wav), spk
        text[utt] = " ".join(w for w in words.split() if w not in ("<s>", "</s>"))
    write_data_dir(out, DataDir(wav_scp=wav_scp, utt2spk=utt2spk, text=text))
    return text


def _network_exp(exp_dir: Path, texts: dict[str, str], *, num_classes: int) -> int:
    """A stand-in experiment: an untrained tiny BLSTM (23 fbank bins, no CMVN) and a char
    tokenizer; a CE model of ``num_classes`` frame classes, or a CTC model (0)."""
    tokenizer = train_tokenizer(texts, exp_dir / "tokenizer", TokenizerConfig(kind="char"))
    features = FeatureConfig(num_mel_bins=23, cmvn="none", nj=1)
    meta = {
        "model": {
            "input_dim": 23,
            "num_tokens": tokenizer.num_tokens,
            "hidden": 8,
            "layers": 1,
            "bidirectional": True,
            "bottleneck": 0,
            "stack": 1,
            "subsample": 1,
            "dropout": 0.0,
            "num_classes": num_classes,
        },
        "features": dataclasses.asdict(features),
        "cmvn": "none",
        "tokenizer": "tokenizer",
        "objective": "ce" if num_classes else "ctc",
        "decode_head": None if num_classes else "ctc",
    }
    torch.manual_seed(0)
    save_checkpoint(exp_dir / "model.pt", {"model": build_from_meta(meta).state_dict(), "meta": meta})
    return tokenizer


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The benchmark without experiments (kept work dir), then with stand-in ones built
    from the first run's triphone system (its alignments and HCLG)."""
    root = tmp_path_factory.mktemp("bench_hybrid")
    texts = _an4_dir(root / "train", "train", 12)
    texts.update(_an4_dir(root / "test", "test", 3))
    write_arpa(estimate_kneser_ney([t.split() for t in texts.values()], order=2), root / "lm.arpa")
    common = dict(train_dir=root / "train", lexicon=DICTIONARY, lm=root / "lm.arpa", gmm=TINY)
    bare = bench_hybrid(
        root / "test", exp_dir=root / "none", ctc_exp_dir=root / "none", work_dir=root / "work", **common
    )

    hybrid = root / "exp_hybrid"
    shutil.copytree(root / "work" / "ali_train", hybrid / "gmm" / "ali_train")
    shutil.copytree(root / "work" / "tri" / "graph", hybrid / "gmm" / "tri1" / "graph")
    cfg = compose(["+experiment=an4_hybrid", f"exp_dir={hybrid}"])
    (hybrid / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    _network_exp(hybrid, texts, num_classes=bare["training_data"]["triphone_pdfs"])
    # The decoder its stage 7 would have tuned (priors of the alignments, the tri graph).
    counts = class_counts(
        read_alignments(str(hybrid / "gmm" / "ali_train")), bare["training_data"]["triphone_pdfs"]
    )
    write_counts(hybrid / PRIOR_COUNTS, counts)
    search = dict(acoustic_scale=0.1, beam=13.0, lattice_beam=8.0, max_active=7000)
    DecodingRecord(
        kind="hybrid",
        weights=[9.0, 0.5],
        tuned_on="train_dev",
        settings=dict(
            graph=str(hybrid / "gmm" / "tri1" / "graph"),
            transitions=str(hybrid / "gmm" / "ali_train" / "final.mdl"),
            counts=PRIOR_COUNTS,
            prior_floor=1e-10,
            prior_scale=1.0,
            **search,
        ),
    ).save(hybrid)

    ctc = root / "exp_ctc"
    tokenizer = _network_exp(ctc, texts, num_classes=0)
    (ctc / "lang").mkdir()
    write_lexicon(ctc / "lang" / "lexicon.txt", {w for t in texts.values() for w in t.split()}, tokenizer)
    shutil.copyfile(root / "lm.arpa", ctc / "lang" / "lm.arpa")
    full = bench_hybrid(root / "test", exp_dir=hybrid, ctc_exp_dir=ctc, **common)
    return {"bare": bare, "full": full, "root": root}


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_graphs_are_built_for_both_systems(runs: dict) -> None:
    graphs = runs["full"]["graphs"]
    for name in ("g", "mono", "tri"):
        assert _positive(graphs[f"{name}_s"]) and graphs[f"{name}_states"] > 1 and graphs[f"{name}_arcs"] > 1
    assert graphs["tri_over_mono"] == pytest.approx(graphs["tri_s"] / graphs["mono_s"], rel=0.05)


def test_all_three_decoders_run_on_the_same_utterances(runs: dict) -> None:
    result = runs["full"]
    gmm, hybrid, ctc = result["gmm_decoding"], result["hybrid_decoding"], result["ctc_decoding"]
    assert gmm["utterances"] == hybrid["utterances"] == ctc["utterances"] == 3
    for part, keys in ((gmm, ("scoring_rtf", "search_rtf")), (hybrid, ("forward_rtf", "search_rtf"))):
        assert all(_positive(part[k]) for k in keys)
        assert part["total_rtf"] == pytest.approx(sum(part[k] for k in keys), abs=2e-5)
        assert 0 <= part["wer"]
    assert (hybrid["lm_weight"], hybrid["word_penalty"]) == (9.0, 0.5)  # the recorded setting
    assert (gmm["lm_weight"], gmm["word_penalty"]) == (10.0, 0.0)  # none recorded: 1 / acoustic scale
    assert _positive(ctc["beam_lm_total_rtf"]) and ctc["threads"] == 1
    assert result["test_audio_s"] == ctc["audio_s"]
    assert result["hybrid_over_ctc"] == pytest.approx(
        hybrid["total_rtf"] / ctc["beam_lm_total_rtf"], rel=0.01
    )
    assert result["gmm_over_ctc"] == pytest.approx(gmm["total_rtf"] / ctc["beam_lm_total_rtf"], rel=0.01)
    assert result["hybrid_over_gmm"] == pytest.approx(hybrid["total_rtf"] / gmm["total_rtf"], rel=0.01)


def test_missing_experiments_are_skipped_with_what_to_run(runs: dict) -> None:
    result = runs["bare"]
    assert "an4_hybrid" in result["hybrid_decoding"]["skipped"]
    assert "make demo" in result["ctc_decoding"]["skipped"]
    assert result["hybrid_over_ctc"] is result["gmm_over_ctc"] is result["hybrid_over_gmm"] is None
    assert _positive(result["gmm_decoding"]["total_rtf"])
    assert (runs["root"] / "work" / "tri" / "graph" / "HCLG.fst").is_file()  # work_dir kept


def test_registered_with_a_quick_setting_and_a_plot(runs: dict, tmp_path: Path) -> None:
    assert BENCHMARKS["hybrid"] is bench_hybrid and QUICK["hybrid"] == {"quick": True}
    assert plot("hybrid", runs["full"], tmp_path).is_file()
    assert plot("hybrid", runs["bare"], tmp_path).is_file()


def test_missing_inputs_are_errors_naming_what_to_run(runs: dict, tmp_path: Path) -> None:
    root = runs["root"]
    with pytest.raises(ConfigError, match=r"train/wav.scp: not found.*run.sh --stop-stage 1"):
        bench_hybrid(root / "test", train_dir=tmp_path / "train", lexicon=DICTIONARY, lm=root / "lm.arpa")
    with pytest.raises(ConfigError, match=r"nowhere/wav.scp: not found"):
        bench_hybrid(tmp_path / "nowhere", train_dir=root / "train", lexicon=DICTIONARY, lm=root / "lm.arpa")
    with pytest.raises(ConfigError, match="no pronunciation lexicon"):
        bench_hybrid(root / "test", train_dir=root / "train", lexicon=tmp_path / "x.dic", lm=root / "lm.arpa")
    with pytest.raises(ConfigError, match=r"no AN4 LM.*--stop-stage 3"):
        bench_hybrid(
            root / "test",
            train_dir=root / "train",
            lexicon=DICTIONARY,
            exp_dir=tmp_path / "a",
            ctc_exp_dir=tmp_path / "b",
        )


def test_speaker_adapted_systems_and_the_second_pass_are_timed(runs: dict) -> None:
    """tri1 (deltas), tri2 (LDA+MLLT) and tri3 (SAT) timed each; tri3 decoded in two
    passes, the speaker-independent one's share apart."""
    root = runs["root"]
    adapted = dataclasses.replace(
        TINY,
        tri_kinds=["deltas", "lda_mllt", "sat"],
        tri_leaves=[30] * 3,
        tri_gauss=[60] * 3,
        lda_dim=12,
        mllt_rounds=[0],
        fmllr_rounds=[0],
    )
    result = bench_hybrid(
        root / "test",
        train_dir=root / "train",
        lexicon=DICTIONARY,
        lm=root / "lm.arpa",
        gmm=adapted,
        exp_dir=root / "none",
        ctc_exp_dir=root / "none",
    )
    systems = result["system_s"]
    assert list(systems) == ["mono", "tree1", "tri1", "tri2", "tri3"] and all(
        map(_positive, systems.values())
    )
    assert result["training_s"]["triphone"] == pytest.approx(
        systems["tri1"] + systems["tri2"] + systems["tri3"], abs=0.01
    )
    sat = result["gmm_decoding"]["sat"]
    assert sat["utterances"] == 3 and _positive(sat["first_pass_rtf"]) and _positive(sat["second_pass_rtf"])
    assert sat["total_rtf"] == pytest.approx(sat["first_pass_rtf"] + sat["second_pass_rtf"], abs=2e-5)
    assert result["gmm"]["tri_kinds"] == ["deltas", "lda_mllt", "sat"]
    assert _positive(result["graphs"]["sat_s"])
