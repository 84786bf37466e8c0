"""System combination: CTC sequence likelihoods, n-best rescoring, and stage 8."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from asrkit.config import compose, to_object
from asrkit.decoding.beam import BeamSearch, write_lexicon
from asrkit.decoding.combine import combine_nbest, ctc_log_likelihood, pick, sentence_log_prob
from asrkit.decoding.config import EnsembleConfig
from asrkit.errors import ConfigError
from asrkit.lm.ngram import estimate_kneser_ney, write_arpa
from asrkit.scoring import score_texts
from asrkit.stages.members import check_member, member_overrides
from asrkit.stages.registry import StageContext
from asrkit.targets import TokenizerConfig, train_tokenizer
from tests.helpers import ctc_emissions

WORDS = ["ONE", "TWO", "THREE", "GO", "NO"]
NOISE = 4.0  # logit noise at which each fake system errs on several of the 40 utterances
TEXTS = {"a-1": "TWO THREE", "a-2": "ONE TWO", "b-1": "THREE ONE TWO", "b-2": "GO", "b-3": "NO GO"}


def test_ctc_log_likelihood_sums_every_alignment() -> None:
    torch.manual_seed(0)
    log_probs = torch.randn(4, 3).log_softmax(-1)
    total = 0.0
    for path in itertools.product(range(3), repeat=4):  # every frame labelling
        collapsed = [k for i, k in enumerate(path) if k != 0 and (i == 0 or path[i - 1] != k)]
        if collapsed == [1, 2]:
            total += math.exp(sum(float(log_probs[t, k]) for t, k in enumerate(path)))
    assert ctc_log_likelihood(log_probs, [1, 2]) == pytest.approx(math.log(total), abs=1e-5)
    assert ctc_log_likelihood(log_probs, [1, 1, 1]) == -math.inf  # needs 5 frames: 1 _ 1 _ 1


def test_combining_noisy_systems_beats_each_of_them(tmp_path: Path) -> None:
    tokenizer = train_tokenizer(TEXTS, tmp_path / "tok", TokenizerConfig(kind="char"))
    write_lexicon(tmp_path / "lexicon.txt", WORDS, tokenizer)
    lm = estimate_kneser_ney([t.split() for t in TEXTS.values()], order=2)
    write_arpa(lm, tmp_path / "lm.arpa")
    search = BeamSearch(
        tokenizer, lexicon=tmp_path / "lexicon.txt", lm=tmp_path / "lm.arpa", lm_weight=0.5, nbest=5
    )
    rng = np.random.default_rng(3)
    refs: dict[str, list[str]] = {}
    systems: list[dict[str, torch.Tensor]] = [{}, {}, {}]
    for k in range(40):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 5))))
        refs[f"u-{k}"] = text.split()
        for posteriors in systems:
            posteriors[f"u-{k}"] = ctc_emissions(tokenizer, text, rng, noise=NOISE)
    candidates = combine_nbest(systems, searches=[search] * 3, tokenizers=[tokenizer] * 3, lm=lm)
    # Every system's own best transcript is among the candidates, scored by all systems.
    for utt, cands in candidates.items():
        words = {c.words for c in cands}
        for posteriors in systems:
            assert tuple(search(posteriors[utt]).split()) in words
        first = cands[0]
        mean = np.mean([ctc_log_likelihood(p[utt], tokenizer.encode(" ".join(first.words))) for p in systems])
        assert first.acoustic == pytest.approx(mean, rel=1e-6)
        assert first.lm == pytest.approx(sentence_log_prob(lm, first.words))
    alone = [
        score_texts(refs, {u: search(lp).split() for u, lp in posteriors.items()}).words.errors
        for posteriors in systems
    ]
    combined = pick(candidates, lm_weight=0.5, word_score=0.0)
    errors = score_texts(refs, {u: t.split() for u, t in combined.items()}).words.errors
    assert min(alone) > 0, "the fixture must be noisy enough for the systems to err"
    assert errors < min(alone), (errors, alone)


def test_member_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="name is set by stage 8"):
        EnsembleConfig(members=["seed=2 name=other"]).check()
    with pytest.raises(ConfigError, match="'seed' is not a KEY=VALUE override"):
        EnsembleConfig(members=["seed"]).check()
    with pytest.raises(ConfigError, match="ensemble.jobs=0"):
        EnsembleConfig(jobs=0).check()


def _context(overrides: list[str], exp_dir: Path) -> StageContext:
    typed = to_object(compose(overrides))
    return StageContext(
        cfg=typed,
        data_root=Path("data"),
        feats_root=Path("fbank"),
        exp_dir=exp_dir,
        overrides=tuple(overrides),
    )


def test_members_inherit_the_experiments_overrides(tmp_path: Path) -> None:
    ctx = _context(
        [
            "model=tiny",
            "tokenizer=phone",
            "seed=7",
            "train.num_threads=2",
            'ensemble.members=["tokenizer=char","seed=3 model.hidden=24"]',
        ],
        tmp_path / "exp",
    )
    first = member_overrides(ctx, 1, threads=1)
    assert first == [
        "model=tiny",
        "tokenizer=char",
        "seed=1007",
        "name=an4_fbank_tiny_member1",
        f"exp_dir={tmp_path / 'exp' / 'member1'}",
        "ensemble.members=[]",
        "train.num_threads=1",
    ]
    second = member_overrides(ctx, 2, threads=1)
    assert second[:4] == ["model=tiny", "tokenizer=phone", "seed=3", "model.hidden=24"]
    assert check_member(ctx, 2, second).model.hidden == 24


def test_a_member_may_not_change_the_shared_features(tmp_path: Path) -> None:
    ctx = _context(['ensemble.members=["features.num_mel_bins=40"]'], tmp_path / "exp")
    with pytest.raises(ConfigError, match=r"changes features.num_mel_bins: members share"):
        check_member(ctx, 1, member_overrides(ctx, 1, threads=1))


# ---------------------------------------------------------------- a hybrid experiment's ensemble

HYBRID = ["+experiment=an4_hybrid_sat", "seed=4", 'ensemble.members=["","model.hidden=64"]']


def test_hybrid_members_train_on_the_experiments_alignments_and_input(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    ctx = _context(HYBRID, exp)
    first = member_overrides(ctx, 1, threads=2)
    assert first[-5:] == [
        "train.num_threads=2",
        f"align.train={exp / 'gmm' / 'ali_train'}",
        f"align.dev={exp / 'gmm' / 'ali_train_dev'}",
        f"align.max_missing={ctx.cfg.gmm.max_fail}",  # what the GMM stage could not align
        f"align.inputs_from={exp}",
    ]
    assert "seed=1004" in first
    typed = check_member(ctx, 1, first)
    assert (typed.seed, typed.align.inputs_from, typed.model.hidden) == (1004, str(exp), ctx.cfg.model.hidden)
    assert check_member(ctx, 2, member_overrides(ctx, 2, threads=1)).model.hidden == 64


@pytest.mark.parametrize(
    ("member", "changed"),
    [
        ("gmm.tri_leaves=[500,700,700]", "gmm.tri_leaves"),  # other tied states
        ("align.ivector_dim=50", "align.ivector_dim"),  # another input
        ("wfst.prior_scale=0.3", "wfst.prior_scale"),  # decoded otherwise
    ],
)
def test_a_hybrid_member_may_not_change_what_the_networks_share(
    tmp_path: Path, member: str, changed: str
) -> None:
    ctx = _context([*HYBRID[:2], f'ensemble.members=["{member}"]'], tmp_path / "exp")
    with pytest.raises(ConfigError, match=rf"changes {changed}: members share this experiment's GMMs"):
        check_member(ctx, 1, member_overrides(ctx, 1, threads=1))


def test_align_inputs_from_needs_the_joined_input() -> None:
    with pytest.raises(ConfigError, match="align.inputs_from='exp/x' needs align.fmllr=true"):
        to_object(compose(["+experiment=an4_hybrid", "align.inputs_from=exp/x"]))


class _Net:
    """A frame network's stand-in: fixed logits per utterance (what a Recognizer yields)."""

    def __init__(self, exp_dir: Path, logits: dict[str, torch.Tensor], **meta: object) -> None:
        self.exp_dir, self.model_file = exp_dir, "model.pt"
        self.logits = logits
        self.meta = {"features": {"kind": "fbank"}, "cmvn": "speaker", "ivector_dim": 4, **meta}
        self.model = torch.nn.Module()
        self.model.num_classes = next(iter(logits.values())).shape[1]  # type: ignore[assignment]
        self.model.subsample = 1  # type: ignore[assignment]

    def speaker_source(self, recordings):  # noqa: ANN001, ANN201
        from asrkit.loader.batch import Utterance
        from asrkit.loader.sources import InMemorySource

        empty = np.zeros(0, dtype=np.int64)
        return InMemorySource(
            [Utterance(u, np.zeros((len(self.logits[u]), 3), np.float32), empty) for u, *_ in recordings]
        )

    def outputs(self, utts, head):  # noqa: ANN001, ANN201
        assert head == "frame"
        for utt in utts.ids:
            yield utt, self.logits[utt]


def _hybrid_decoder(net: _Net, members: list[_Net]):  # noqa: ANN202
    from asrkit.decoding.hclg import HybridDecoder, HybridScorer

    scorer = HybridScorer(np.log(np.full(5, 0.2)), prior_scale=0.5)
    knobs = {"acoustic_scale": 0.1, "beam": 9.0, "lattice_beam": 4.0, "max_active": 700}
    search = type("Search", (), knobs)()
    return HybridDecoder(
        net,  # type: ignore[arg-type]
        scorer,
        search,
        [(10.0, 0.0)],
        counts="ali_train_pdf.counts",
        graph="graph",
        transitions="final.mdl",
        members=members,  # type: ignore[arg-type]
    )


def test_a_hybrid_ensemble_averages_its_networks_log_posteriors(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    utts = {"a": 7, "b": 4}
    nets = [
        _Net(tmp_path / where, {u: torch.randn(n, 5, generator=gen) for u, n in utts.items()})
        for where in ("exp", "exp/member1", "exp/member2")
    ]
    decoder = _hybrid_decoder(nets[0], nets[1:])
    assert decoder.kind == decoder.label == "combined"
    got = decoder.prepare_speaker([(u, np.zeros(10), 16000, u) for u in utts]).scores
    for utt, frames in utts.items():
        mean = torch.stack([net.logits[utt].log_softmax(-1) for net in nets]).mean(0)
        want = decoder.scorer.likelihoods(mean.numpy(), frames)
        np.testing.assert_allclose(got[utt], want, rtol=1e-6)
        alone = decoder.scorer(nets[0].logits[utt], frames)
        assert not np.allclose(got[utt], alone)
    record = decoder.record((10.0, 0.0), tuned_on="dev")
    assert record.kind == "combined"
    assert record.settings["members"] == [
        {"dir": "member1", "model": "model.pt"},
        {"dir": "member2", "model": "model.pt"},
    ]
    assert "members" not in _hybrid_decoder(nets[0], []).record((10.0, 0.0), tuned_on="dev").settings


def test_a_hybrid_member_must_read_the_same_input_and_score_the_same_states(tmp_path: Path) -> None:
    logits = {"a": torch.zeros(3, 5)}
    net = _Net(tmp_path / "exp", logits)
    with pytest.raises(ConfigError, match=r"member1/model.pt: its ivector_dim \(0\) is not .*'s \(4\)"):
        _hybrid_decoder(net, [_Net(tmp_path / "exp" / "member1", logits, ivector_dim=0)])
    with pytest.raises(ConfigError, match=r"member1/model.pt: num_classes=6, but .* has num_classes=5"):
        _hybrid_decoder(net, [_Net(tmp_path / "exp" / "member1", {"a": torch.zeros(3, 6)})])
    with pytest.raises(ConfigError, match=r"member1/model.pt: its features \({'kind': 'mfcc'}\) is not"):
        _hybrid_decoder(net, [_Net(tmp_path / "exp" / "member1", logits, features={"kind": "mfcc"})])


def test_a_member_whose_features_were_made_with_other_jobs_reads_the_same_input(tmp_path: Path) -> None:
    # Seen in the field: speechocean762 seed 2's experiment was prepared with features.nj=1
    # and its member trained with nj=2; the decoder refused the finished member.
    logits = {"a": torch.zeros(3, 5)}
    net = _Net(tmp_path / "exp", logits, features={"kind": "fbank", "nj": 1})
    member = _Net(tmp_path / "exp" / "member1", logits, features={"kind": "fbank", "nj": 2})
    _hybrid_decoder(net, [member])
