"""Frame targets: CTC forced alignment, Kaldi alignment dirs, CE training, log-likelihoods."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from asrkit.data.datadir import read_kaldi_map
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.decoding.greedy import greedy_ctc
from asrkit.errors import ConfigError, DataError
from asrkit.loader.batch import Utterance, chunk_batch, collate
from asrkit.loader.sources import attach_alignments
from asrkit.models import ModelConfig, build_model
from asrkit.models.checkpoint import init_from, save_checkpoint
from asrkit.targets import Tokenizer, TokenizerConfig, train_tokenizer
from asrkit.targets.alignments import read_alignments
from asrkit.targets.forced_align import (
    class_counts,
    ctc_forced_align,
    log_priors,
    write_alignment_dir,
    write_counts,
)
from asrkit.training.config import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig
from asrkit.training.objectives import FrameCEObjective, build_objective
from asrkit.training.trainer import Trainer

TEXTS = {"a-1": "A B C", "a-2": "TWO THREE", "b-1": "YES NO", "b-2": "ERASE F G", "b-3": "GO"}


@pytest.fixture
def tokenizer(tmp_path: Path) -> Tokenizer:
    return train_tokenizer(TEXTS, tmp_path / "tok", TokenizerConfig(kind="char"))


def _utts(tokenizer: Tokenizer, *, dim: int = 8, seed: int = 0) -> list[Utterance]:
    """Seeded features whose frames carry their token (4 frames each, then 2 of silence),
    with the matching frame labels (token id, blank 0 for silence)."""
    rng = np.random.default_rng(seed)
    utts = []
    for utt, text in TEXTS.items():
        tokens = np.asarray(tokenizer.encode(text), dtype=np.int64)
        frames, labels = [], []
        for t in tokens:
            proto = np.sin(np.arange(dim) * (int(t) + 1) * 0.37)
            frames += [proto + 0.05 * rng.standard_normal(dim) for _ in range(4)]
            frames += [0.05 * rng.standard_normal(dim) for _ in range(2)]
            labels += [int(t)] * 4 + [0, 0]
        utts.append(
            Utterance(
                utt,
                np.asarray(frames, dtype=np.float32),
                tokens,
                text,
                ali=np.asarray(labels, dtype=np.int64),
            )
        )
    return utts


def test_forced_alignment_is_a_ctc_path_of_the_transcript() -> None:
    torch.manual_seed(0)
    log_probs = torch.randn(20, 6).log_softmax(-1)
    tokens = [3, 1, 1, 5]
    path = ctc_forced_align(log_probs, tokens)
    assert path is not None and path.shape == (20,) and path.dtype == np.int32
    # Collapsing the path (merge repeats, drop blanks) gives the transcript back.
    one_hot = torch.nn.functional.one_hot(torch.from_numpy(path).long(), 6)[None].float()
    assert greedy_ctc(one_hot, torch.tensor([20]))[0] == tokens
    # Repeated tokens need a blank between them: 4 tokens + 1 repeat need 5 frames.
    assert ctc_forced_align(log_probs[:4], tokens) is None
    assert ctc_forced_align(log_probs[:5], tokens) is not None
    assert ctc_forced_align(log_probs, []) is None


def test_alignment_dir_round_trip(tmp_path: Path, tokenizer: Tokenizer) -> None:
    rng = np.random.default_rng(1)
    alis = {
        f"spk{i % 2}-utt{i}": rng.integers(0, 7, size=int(rng.integers(3, 30))).astype(np.int32)
        for i in range(9)
    }
    out = write_alignment_dir(
        tmp_path / "ali_train", alis, subsampling_factor=3, num_classes=7, tokenizer_dir=tmp_path / "tok"
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "ali.ark",
        "ali.scp",
        "frame_subsampling_factor",
        "num_classes",
        "tokenizer",
    ]
    assert not (tmp_path / "ali_train.tmp").exists()
    assert (out / "frame_subsampling_factor").read_text() == "3\n"
    # The ark reads with kaldi-io directly, through its scp offsets, and through asrkit.
    direct = dict(kaldi_io.read_vec_int_ark(str(out / "ali.ark")))
    via_scp = {utt: kaldi_io.read_vec_int(rx) for utt, rx in read_kaldi_map(out / "ali.scp").items()}
    loaded = read_alignments(str(out))
    for got in (direct, via_scp, loaded):
        assert sorted(got) == sorted(alis)
        for utt, labels in alis.items():
            assert np.array_equal(got[utt], labels), utt
    # Kaldi's binary int-vector layout: key, space, \0B, \4 + int32 size, (\4 + int32)*.
    data = (out / "ali.ark").read_bytes()
    first = sorted(alis)[0]
    n = alis[first].size
    head = f"{first} ".encode() + b"\0B\4" + np.int32(n).tobytes()
    assert data.startswith(head)
    assert data[len(head) : len(head) + 5] == b"\4" + np.int32(alis[first][0]).tobytes()


def test_counts_and_priors(tmp_path: Path) -> None:
    counts = class_counts({"a": np.array([0, 0, 1, 2]), "b": np.array([2, 2])}, 4)
    assert counts.tolist() == [2, 1, 3, 0]
    priors = log_priors(counts)
    assert np.allclose(np.exp(priors[:3]), [2 / 6, 1 / 6, 3 / 6], atol=1e-6)
    assert np.isfinite(priors[3])  # unseen class: floored, not -inf
    write_counts(tmp_path / "ali_train_pdf.counts", counts)
    assert (tmp_path / "ali_train_pdf.counts").read_text() == "[ 2 1 3 0 ]\n"


def test_attach_alignments_subsamples_to_the_model_rate() -> None:
    utts = [
        Utterance("u1", np.zeros((7, 2), np.float32), np.zeros(1, np.int64)),
        Utterance("u2", np.zeros((5, 2), np.float32), np.zeros(1, np.int64)),
    ]
    labels = {"u1": np.arange(7)}
    kept = attach_alignments(utts, labels, factor=1, model_subsample=3, source="x").read_all()
    assert [u.utt for u in kept] == ["u1"] and kept[0].ali.tolist() == [0, 3, 6]
    with pytest.raises(ConfigError, match="multiple of 3"):
        attach_alignments(utts, labels, factor=3, model_subsample=1, source="x")


# chunk=12: 2-token chunks with 2 frames of context; trained on chunks and validated on
# whole utterances, the BLSTM learns this toy more slowly (70% frame accuracy, not 88%).
@pytest.mark.parametrize("chunk", [0, 12])
def test_ce_loss_falls_and_frame_head_decodes(tmp_path: Path, tokenizer: Tokenizer, chunk: int) -> None:
    torch.manual_seed(0)
    utts = _utts(tokenizer)
    batch = collate(utts)
    assert batch.frame_targets.shape == (5, max(u.ali.size for u in utts))
    assert int((batch.frame_targets == -1).sum()) == sum(
        batch.frame_targets.shape[1] - u.ali.size for u in utts
    )
    num_classes = tokenizer.num_tokens + 1
    model = build_model(
        ModelConfig(size="tiny", num_classes=num_classes), input_dim=8, num_tokens=tokenizer.num_tokens
    )
    objective = build_objective("ce", token_classes=True)
    assert isinstance(objective, FrameCEObjective) and objective.decodes_from == "frame"
    trainer = Trainer(
        model,
        utts,
        utts,
        tokenizer=tokenizer,
        exp_dir=tmp_path / "exp",
        cfg=TrainConfig(
            epochs=60,
            max_frames=10_000,
            max_batch=8,
            progress=False,
            device="cpu",
            keep_checkpoints=1,
            chunk_frames=chunk,
            chunk_context=2 if chunk else 0,
        ),
        optim=OptimConfig(lr=1e-2),
        schedule=ScheduleConfig(warmup_steps=0),
        specaug=SpecAugConfig(enabled=False),
        meta={"model": model.args},
        seed=0,
        objective=objective,
    )
    before = trainer.validate()
    trainer.fit()
    after = trainer.validate()
    assert set(after) == {"loss", "frame_acc", "wer"}
    assert after["loss"] < 0.5 * before["loss"]
    assert after["frame_acc"] > (60.0 if chunk else 80.0) > before["frame_acc"] + 30, (before, after)
    assert after["wer"] < before["wer"], (before, after)


@pytest.mark.parametrize(("width", "context", "subsample"), [(4, 0, 1), (6, 3, 1), (6, 3, 3), (30, 6, 3)])
def test_chunks_score_every_frame_once_with_its_own_features(
    width: int, context: int, subsample: int
) -> None:
    rng = np.random.default_rng(3)
    utts = []
    for k, n in enumerate([23, 9, 1, 12]):
        labels = rng.integers(0, 50, size=-(-n // subsample))
        utts.append(
            Utterance(
                f"u{k}", rng.standard_normal((n, 2)).astype(np.float32), np.zeros(1, np.int64), ali=labels
            )
        )
    batch = collate(utts)
    batch.norm, batch.global_utts = 2.5, 8
    chunks = chunk_batch(batch, width, context=context, subsample=subsample)
    assert (chunks.norm, chunks.global_utts) == (2.5, 8)
    assert chunks.feats.shape[1] <= width + 2 * context
    scored: dict[str, list[int]] = {u.utt: [] for u in utts}
    for k, name in enumerate(chunks.utts):
        utt, start = name.rsplit("-", 1)
        source = next(u for u in utts if u.utt == utt)
        first = max(0, int(start) - context)
        n = int(chunks.lengths[k])
        # The chunk's features are its stretch of the utterance, padded with zeros.
        np.testing.assert_array_equal(chunks.feats[k, :n].numpy(), source.feats[first : first + n])
        assert not chunks.feats[k, n:].any()
        for j, label in enumerate(chunks.frame_targets[k].tolist()):
            if label >= 0:
                position = first // subsample + j
                assert label == source.ali[position]
                assert int(start) // subsample <= position < -(-(int(start) + width) // subsample)
                scored[utt].append(position)
    # Every output frame of every utterance is scored once, in exactly one chunk.
    for u in utts:
        assert sorted(scored[u.utt]) == list(range(u.ali.size)), u.utt
    # As many frames are scored as in the whole batch.
    assert int((chunks.frame_targets >= 0).sum()) == int((batch.frame_targets >= 0).sum())


def test_chunks_need_frame_targets_and_sizes_the_model_can_take() -> None:
    utt = Utterance("u", np.zeros((9, 2), np.float32), np.zeros(1, np.int64))
    with pytest.raises(ConfigError, match="objective=ce"):
        chunk_batch(collate([utt]), 3)
    utt.ali = np.zeros(3, dtype=np.int64)
    with pytest.raises(ConfigError, match="multiples"):
        chunk_batch(collate([utt]), 4, subsample=3)
    with pytest.raises(ConfigError, match="chunk_context"):
        TrainConfig(chunk_context=10).check()


def test_ce_without_frame_head_or_targets_is_a_config_error(tokenizer: Tokenizer) -> None:
    utts = _utts(tokenizer)
    model = build_model(ModelConfig(size="tiny"), input_dim=8, num_tokens=tokenizer.num_tokens)
    with pytest.raises(ConfigError, match="model.num_classes"):
        FrameCEObjective().loss(model, collate(utts))
    model = build_model(ModelConfig(size="tiny", num_classes=4), input_dim=8, num_tokens=tokenizer.num_tokens)
    for u in utts:
        u.ali = None
    with pytest.raises(ConfigError, match="align.train"):
        FrameCEObjective().loss(model, collate(utts))


def test_init_from_copies_matching_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ctc = build_model(ModelConfig(size="tiny"), input_dim=8, num_tokens=5)
    save_checkpoint(tmp_path / "ctc.pt", {"model": ctc.state_dict(), "meta": {}})
    ce = build_model(ModelConfig(size="tiny", num_classes=6), input_dim=8, num_tokens=5)
    copied = init_from(ce, tmp_path / "ctc.pt")
    assert "frame_head.weight" not in copied and "lstm.weight_ih_l0" in copied
    for name in copied:
        assert torch.equal(ce.state_dict()[name], ctc.state_dict()[name]), name
    other = build_model(ModelConfig(size="tiny"), input_dim=3, num_tokens=2)
    save_checkpoint(tmp_path / "other.pt", {"model": {"x": torch.zeros(1)}, "meta": {}})
    with pytest.raises(DataError, match="none of its parameters"):
        init_from(other, tmp_path / "other.pt")


def test_hybrid_training_leaves_out_what_the_gmm_stage_could_not_align(tmp_path: Path) -> None:
    """The GMM stage allows (and reports) up to gmm.max_fail of utterances that would not
    align; training on its alignments leaves them out instead of stopping. Alignments named
    by the user (align.train) keep align.max_missing."""
    from asrkit.config import compose, to_object
    from asrkit.learner import _with_alignments
    from asrkit.loader.sources import InMemorySource

    tokenizer = train_tokenizer(TEXTS, tmp_path / "tok", TokenizerConfig(kind="char"))
    utts = _utts(tokenizer)
    aligned = {u.utt: u.ali.astype(np.int32) for u in utts[1:]}  # the first would not align
    exp = tmp_path / "exp"
    write_alignment_dir(exp / "gmm" / "ali_train", aligned, subsampling_factor=1, num_classes=30)
    source = InMemorySource([dataclasses.replace(u, ali=None) for u in utts])
    hybrid = to_object(compose(["pipeline=hybrid", "objective=ce", "gmm.max_fail=0.25"]))
    kept, classes, _ = _with_alignments(hybrid, exp, source, "train", num_classes=30, log_it=False)
    assert len(kept) == len(utts) - 1 and utts[0].utt not in kept.ids and classes == 30
    strict = to_object(compose(["pipeline=hybrid", "objective=ce", "gmm.max_fail=0.1"]))
    with pytest.raises(DataError, match="1 of 5 feature utterances have no alignment"):
        _with_alignments(strict, exp, source, "train", num_classes=30, log_it=False)
    named = to_object(compose(["objective=ce", f"align.train={exp / 'gmm' / 'ali_train'}"]))
    with pytest.raises(DataError, match="max_missing"):
        _with_alignments(named, exp, source, "train", num_classes=30, log_it=False)


def tiny_ce_trainer(
    tmp_path,
    rank: int,
    comm,
    strategy,
    optim,
    *,
    max_batch: int = 4,
    epochs: int = 2,
    clip: float = 0.0,
    schedule=None,
    precision: str = "fp32",
):
    """Learner ``rank``'s Trainer of a tiny frame-CE model on :data:`TEXTS` (its model seeded
    with ``rank``), for tests of strategies on the simulator's clock."""
    from asrkit.models import ModelConfig, build_model
    from asrkit.targets import TokenizerConfig, train_tokenizer
    from asrkit.training.config import ScheduleConfig, SpecAugConfig, TrainConfig
    from asrkit.training.objectives import build_objective
    from asrkit.training.trainer import Trainer

    tokenizer = train_tokenizer(TEXTS, tmp_path / f"tok{rank}", TokenizerConfig(kind="char"))
    torch.manual_seed(rank)
    model = build_model(
        ModelConfig(size="tiny", num_classes=tokenizer.num_tokens + 1),
        input_dim=8,
        num_tokens=tokenizer.num_tokens,
    )
    return Trainer(
        model,
        _utts(tokenizer),
        _utts(tokenizer),
        tokenizer=tokenizer,
        exp_dir=tmp_path / f"rank{rank}",
        cfg=TrainConfig(
            epochs=epochs,
            max_frames=10_000,
            max_batch=max_batch,
            progress=False,
            device="cpu",
            clip_grad_norm=clip,
            precision=precision,
        ),
        optim=optim,
        schedule=schedule or ScheduleConfig(warmup_steps=0, anneal="none"),
        specaug=SpecAugConfig(enabled=False),
        meta={"model": model.args},
        seed=0,
        objective=build_objective("ce", token_classes=True),
        comm=comm,
        strategy=strategy,
    )


def test_bf16_steps_compute_in_bfloat16_and_keep_float32_weights(tmp_path: Path) -> None:
    """train.precision=bf16: the step's matrix products run in bfloat16 (so its weights end
    near, not at, the float32 run's), while the weights, the optimizer state and the dev
    figures stay float32 and the model still learns."""
    optim = OptimConfig(name="adam", lr=1e-2)
    runs = {}
    for precision in ("fp32", "bf16"):
        seen: list[torch.dtype] = []
        trainer = tiny_ce_trainer(tmp_path / precision, 0, None, None, optim, epochs=3, precision=precision)
        head = trainer.model.frame_head
        handle = head.register_forward_hook(lambda module, args, out, seen=seen: seen.append(out.dtype))
        trainer.fit()
        handle.remove()
        runs[precision] = trainer
        # Training steps in the chosen arithmetic; validation (no autocast) in float32.
        assert torch.bfloat16 in seen if precision == "bf16" else set(seen) == {torch.float32}
        assert torch.float32 in seen
        assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
        for state in trainer.optimizer.state.values():
            assert all(v.dtype == torch.float32 for v in state.values() if torch.is_tensor(v) and v.dim())
        history = trainer.state.history
        assert history[-1]["loss"] < history[0]["loss"] and math.isfinite(history[-1]["loss"])
    fp32, bf16 = (dict(runs[p].model.named_parameters()) for p in ("fp32", "bf16"))
    gaps = [float((fp32[k] - bf16[k]).detach().abs().max()) for k in fp32]
    assert 0 < max(gaps) < 0.5


def test_an_unknown_precision_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"train.precision.*fp16.*bf16"):
        TrainConfig(precision="fp16").check()
