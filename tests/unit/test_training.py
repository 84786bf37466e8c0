"""Tokenizer, model sizes, CTC training, checkpoints, greedy decoding, shipped configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import asrkit
from asrkit.config import DEFAULT_CONFIG_DIR, compose, to_object
from asrkit.data.datadir import read_kaldi_map
from asrkit.decoding.greedy import greedy_ctc
from asrkit.errors import ConfigError, DataError
from asrkit.loader.batch import Utterance, collate, plan_buckets
from asrkit.models import MODEL_SIZES, ModelConfig, build_model
from asrkit.models.checkpoint import build_from_meta, load_model_bundle, save_checkpoint
from asrkit.models.lstm import LSTMAcousticModel
from asrkit.targets import Tokenizer, TokenizerConfig, train_tokenizer
from asrkit.training.config import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig
from asrkit.training.objectives import CtcObjective
from asrkit.training.schedule import LRSchedule
from asrkit.training.specaug import spec_augment
from asrkit.training.trainer import Trainer

TEXTS = {"a-1": "A B C", "a-2": "TWO THREE", "b-1": "YES NO", "b-2": "ERASE F G", "b-3": "GO"}


@pytest.fixture
def tokenizer(tmp_path: Path) -> Tokenizer:
    return train_tokenizer(TEXTS, tmp_path / "tok", TokenizerConfig(kind="char"))


def _utts(tokenizer: Tokenizer, *, dim: int = 8, seed: int = 0) -> list[Utterance]:
    """Seeded features whose frames carry their token ids, so a model can learn them."""
    rng = np.random.default_rng(seed)
    utts = []
    for utt, text in TEXTS.items():
        tokens = np.asarray(tokenizer.encode(text), dtype=np.int64)
        frames = []
        for t in tokens:
            proto = np.sin(np.arange(dim) * (int(t) + 1) * 0.37)
            frames += [proto + 0.05 * rng.standard_normal(dim) for _ in range(4)]
        utts.append(Utterance(utt, np.asarray(frames, dtype=np.float32), tokens, text))
    return utts


@pytest.mark.parametrize("kind", ["char", "unigram", "bpe"])
def test_tokenizer_round_trip_and_files(tmp_path: Path, kind: str) -> None:
    tok = train_tokenizer(TEXTS, tmp_path / kind, TokenizerConfig(kind=kind, vocab_size=20))
    for text in TEXTS.values():
        ids = tok.encode(text)
        assert ids and min(ids) >= 1  # 0 is the CTC blank
        assert tok.decode(ids) == text
    units = (tmp_path / kind / "units.txt").read_text().splitlines()
    assert units[0] == "<blank> 0" and len(units) == tok.num_tokens + 1
    words = (tmp_path / kind / "words.txt").read_text().split()
    assert words == sorted({w for t in TEXTS.values() for w in t.split()})


def test_a_model_of_other_units_is_refused(tmp_path: Path) -> None:
    mine = train_tokenizer({"u": "AB CD"}, tmp_path / "mine", TokenizerConfig(kind="char"))
    # As many units, other letters: only the recorded digest tells them apart.
    other = train_tokenizer({"u": "WX YZ"}, tmp_path / "other", TokenizerConfig(kind="char"))
    assert other.num_tokens == mine.num_tokens
    mine.check_model({"units": mine.signature()}, mine.num_tokens, model="m.pt")
    with pytest.raises(
        DataError, match=rf"m.pt: the model was trained on {mine.num_tokens} sentencepiece units"
    ):
        mine.check_model({"units": other.signature()}, other.num_tokens, model="m.pt")
    # A bundle from before units were recorded: the count is checked.
    mine.check_model({}, mine.num_tokens, model="m.pt")
    with pytest.raises(DataError, match="trained on 3 units.*experiment that trained it"):
        mine.check_model({}, 3, model="m.pt")


@pytest.mark.parametrize("size", sorted(MODEL_SIZES))
def test_model_output_shapes_for_every_size(size: str) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(size=size, num_classes=7), input_dim=40, num_tokens=30).eval()
    feats, lengths = torch.randn(3, 50, 40), torch.tensor([50, 37, 12])
    out = model(feats, lengths)
    frames = (50 + model.subsample - 1) // model.subsample
    assert out["ctc"].shape == (3, frames, 31)
    assert out["frame"].shape == (3, frames, 7)
    assert out["lengths"].tolist() == [-(-n // model.subsample) for n in (50, 37, 12)]
    assert torch.allclose(out["ctc"].exp().sum(-1), torch.ones(3, frames), atol=1e-4)


def test_padding_does_not_change_an_utterances_output() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(size="tiny", stack=3, subsample=3), input_dim=8, num_tokens=5).eval()
    x = torch.randn(1, 30, 8)
    alone = model(x, torch.tensor([30]))["ctc"]
    padded = model(torch.cat([x, torch.randn(1, 12, 8)], dim=1).repeat(2, 1, 1), torch.tensor([30, 42]))[
        "ctc"
    ]
    assert torch.allclose(alone[0], padded[0, :10], atol=1e-5)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_cpu_padded_lstm_equals_the_packed_lstm(bidirectional: bool) -> None:
    """The CPU path (dense LSTM, backward direction reversed per utterance) gives the packed
    sequence's outputs and gradients; padding frames come out zero."""
    torch.manual_seed(0)
    model = LSTMAcousticModel(12, 5, hidden=16, layers=3, bidirectional=bidirectional, dropout=0.0)
    x, lengths = torch.randn(4, 23, 12), torch.tensor([23, 9, 17, 1])
    weights = torch.randn(4, 23, 32 if bidirectional else 16)

    def run(path: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        if path == "padded":
            y = model._lstm_padded(x, lengths)
        else:
            rnn = torch.nn.utils.rnn
            packed = rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            y, _ = rnn.pad_packed_sequence(model.lstm(packed)[0], batch_first=True, total_length=23)
        (y * weights).sum().backward()
        return y.detach(), [p.grad.clone() for p in model.lstm.parameters() if p.grad is not None]

    (padded, padded_grads), (packed, packed_grads) = run("padded"), run("packed")
    assert padded.shape == packed.shape
    assert torch.allclose(padded, packed, atol=1e-6)
    assert padded[1, 9:].abs().sum() == 0 and padded[3, 1:].abs().sum() == 0
    assert len(padded_grads) == len(packed_grads) == 4 * 3 * (2 if bidirectional else 1)
    for a, b in zip(padded_grads, packed_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_ctc_loss_falls_on_a_tiny_fixture(tmp_path: Path, tokenizer: Tokenizer) -> None:
    torch.manual_seed(0)
    utts = _utts(tokenizer)
    model = build_model(ModelConfig(size="tiny"), input_dim=8, num_tokens=tokenizer.num_tokens)
    trainer = Trainer(
        model,
        utts,
        utts,
        tokenizer=tokenizer,
        exp_dir=tmp_path / "exp",
        cfg=TrainConfig(epochs=40, max_frames=400, max_batch=5, progress=False, device="cpu"),
        optim=OptimConfig(lr=2e-2),
        schedule=ScheduleConfig(warmup_steps=5),
        specaug=SpecAugConfig(enabled=False),
        meta={"model": model.args},
        seed=0,
    )
    before = CtcObjective().loss(model.eval(), collate(utts)).item()
    state = trainer.fit()
    after = CtcObjective().loss(model.eval(), collate(utts)).item()
    assert after < 0.3 * before, (before, after)
    assert state.history[-1]["loss"] < state.history[0]["loss"]
    # the curves' training line: each epoch's mean step loss, and the lr of its last step
    assert state.history[-1]["train_loss"] < state.history[0]["train_loss"]
    assert all(h["lr"] > 0 for h in state.history)
    assert (tmp_path / "exp" / "checkpoints" / "best.pt").is_file()
    kept = sorted(p.name for p in (tmp_path / "exp" / "checkpoints").glob("epoch*.pt"))
    assert kept == [f"epoch{e}.pt" for e in range(36, 41)]  # keep_checkpoints=5


def test_checkpoint_round_trip_restores_identical_outputs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(size="tiny", num_classes=4), input_dim=8, num_tokens=6).eval()
    save_checkpoint(tmp_path / "m.pt", {"model": model.state_dict(), "meta": {"model": model.args}})
    restored, meta = load_model_bundle(tmp_path / "m.pt")
    x, n = torch.randn(2, 20, 8), torch.tensor([20, 15])
    for key in ("ctc", "frame"):
        assert torch.equal(model(x, n)[key], restored(x, n)[key])
    assert build_from_meta(meta).args == model.args
    assert not list(tmp_path.glob(".*tmp"))


def test_the_same_state_saves_to_the_same_bytes(tmp_path: Path) -> None:
    model = build_model(ModelConfig(size="tiny"), input_dim=8, num_tokens=5)
    state = {"model": model.state_dict(), "meta": {"model": model.args}}
    save_checkpoint(tmp_path / "a" / "model.pt", state)
    save_checkpoint(tmp_path / "b" / "model.pt", state)
    assert (tmp_path / "a" / "model.pt").read_bytes() == (tmp_path / "b" / "model.pt").read_bytes()
    assert not list(tmp_path.glob("*/.model.pt.*"))  # no temporary file left


def test_corrupt_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    from asrkit.errors import DataError

    (tmp_path / "m.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="m.pt: cannot load checkpoint"):
        load_model_bundle(tmp_path / "m.pt")


def test_greedy_ctc_merges_repeats_and_drops_blanks() -> None:
    path = torch.tensor([[0, 3, 3, 0, 3, 5, 5, 0, 2]])
    scores = torch.nn.functional.one_hot(path, 6).float()
    assert greedy_ctc(scores, torch.tensor([9])) == [[3, 3, 5, 2]]
    assert greedy_ctc(scores, torch.tensor([3])) == [[3]]
    assert greedy_ctc(scores, torch.tensor([0])) == [[]]


def test_buckets_respect_the_frame_cap() -> None:
    lengths = [100, 20, 55, 300, 90, 21, 60, 5000]
    batches = plan_buckets(lengths, max_frames=250, max_batch=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 250


def test_schedule_warmup_and_annealing() -> None:
    sched = LRSchedule(
        ScheduleConfig(warmup_steps=10, anneal="cosine", final_scale=0.1),
        peak_lr=1.0,
        total_steps=110,
        steps_per_epoch=11,
    )
    assert sched(0) == pytest.approx(0.1) and sched(9) == pytest.approx(1.0)
    assert sched(110) == pytest.approx(0.1)
    exp = LRSchedule(
        ScheduleConfig(warmup_steps=0, anneal="exponential", decay=0.5, decay_start_epoch=2),
        peak_lr=1.0,
        total_steps=100,
        steps_per_epoch=10,
    )
    assert [exp(s) for s in (5, 15, 25, 35)] == [1.0, 0.5, 0.25, 0.125]


def test_specaugment_masks_within_the_utterance() -> None:
    feats = torch.ones(2, 100, 20)
    out = spec_augment(
        feats, torch.tensor([100, 40]), SpecAugConfig(time_width=30), torch.Generator().manual_seed(0)
    )
    assert (out == 0).any() and torch.equal(feats, torch.ones(2, 100, 20))
    again = spec_augment(
        feats, torch.tensor([100, 40]), SpecAugConfig(time_width=30), torch.Generator().manual_seed(0)
    )
    assert torch.equal(out, again)


def test_every_shipped_config_composes() -> None:
    groups = [p for p in DEFAULT_CONFIG_DIR.iterdir() if p.is_dir()]
    assert {g.name for g in groups} >= {"data", "features", "model", "optim", "tokenizer"}
    for group in groups:
        for option in sorted(group.glob("*.yaml")):
            prefix = "+" if group.name == "experiment" else ""
            cfg = to_object(compose([f"{prefix}{group.name}={option.stem}"]))
            assert cfg.name


def test_configs_live_at_the_top_and_every_one_is_shipped() -> None:
    """conf/ is at the top of the checkout; setup.py ships conf/*.yaml and conf/<group>/*.yaml,
    so a config in a deeper folder would be missing from an installed asrkit."""
    root = Path(asrkit.__file__).parent.parent
    assert DEFAULT_CONFIG_DIR == root / "conf" and not (root / "asrkit" / "conf").exists()
    shipped = [p.relative_to(DEFAULT_CONFIG_DIR) for p in DEFAULT_CONFIG_DIR.rglob("*.yaml")]
    assert len(shipped) > 20 and [p for p in shipped if len(p.parts) > 2] == []


def _tiny_experiment(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    """An experiment dir with a seeded tiny model and ``tokenizer``."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(size="tiny"), input_dim=8, num_tokens=tokenizer.num_tokens)
    exp = tmp_path / "exp"
    (exp / "tokenizer").mkdir(parents=True)
    for name in ("sp.model", "units.txt", "words.txt"):
        (exp / "tokenizer" / name).write_bytes((tokenizer.model_dir / name).read_bytes())
    meta = {"model": model.args, "features": {"num_mel_bins": 8}, "cmvn": "none", "tokenizer": "tokenizer"}
    save_checkpoint(exp / "model.pt", {"model": model.state_dict(), "meta": meta})
    return exp


def test_decode_writes_well_formed_kaldi_text(tmp_path: Path, tokenizer: Tokenizer) -> None:
    from asrkit.decoding.recognizer import Recognizer

    exp = _tiny_experiment(tmp_path, tokenizer)
    recognizer = Recognizer(exp)
    hyp = recognizer.recognize(_utts(tokenizer))
    from asrkit.data.datadir import write_kaldi_map

    write_kaldi_map(exp / "hyp", hyp)
    lines = (exp / "hyp").read_text().splitlines()
    assert [ln.split(" ")[0] for ln in lines] == sorted(TEXTS)
    for line in lines:
        assert line == line.strip() and "  " not in line
    parsed = read_kaldi_map(exp / "hyp", allow_empty_value=True)
    assert set(parsed) == set(TEXTS)


def test_decoding_threads_follow_the_free_cores_and_come_back(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen 2026-12-05: a hybrid's acoustic scores beside two busy processes on two cores
    ran about 10x slower on torch's two spinning threads; training had its governor,
    decoding did not. The governor is asked before every batch, the count it sets is
    used, and the caller's count is back afterwards; the words do not change."""
    from asrkit.decoding import recognizer as module

    exp = _tiny_experiment(tmp_path, tokenizer)
    recognizer = module.Recognizer(exp)
    recognizer.max_frames = 1  # a batch per utterance
    seen: list[int] = []

    class Busy:  # another process keeps one of two cores busy
        def __init__(self, most: int, **_: object) -> None:
            assert most == 2

        def poll(self) -> int:
            torch.set_num_threads(1)
            return 1

    real_forward = recognizer._forward

    def forward(*args: object) -> dict:
        seen.append(torch.get_num_threads())
        return real_forward(*args)

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        alone = recognizer.recognize(_utts(tokenizer))
        monkeypatch.setattr(module, "ThreadGovernor", Busy)
        monkeypatch.setattr(recognizer, "_forward", forward)
        assert recognizer.recognize(_utts(tokenizer)) == alone
        assert seen == [1] * len(TEXTS) and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_checkpoint_averaging_is_the_elementwise_mean(tmp_path: Path) -> None:
    from asrkit.models.checkpoint import average_checkpoints

    torch.manual_seed(0)
    models = [build_model(ModelConfig(size="tiny"), input_dim=8, num_tokens=6) for _ in range(3)]
    paths = []
    for i, m in enumerate(models):
        paths.append(tmp_path / f"epoch{i}.pt")
        save_checkpoint(paths[-1], {"model": m.state_dict(), "meta": {"model": m.args}})
    averaged = average_checkpoints(paths)
    for key, value in averaged["model"].items():
        expected = sum(m.state_dict()[key] for m in models) / 3
        assert torch.allclose(value, expected, atol=1e-7), key
    from asrkit.errors import DataError

    with pytest.raises(DataError, match="no checkpoints"):
        average_checkpoints([])


def test_every_bad_setting_is_reported_in_one_error() -> None:
    from asrkit.errors import ConfigError

    bad = {
        "train.max_frames=-1": "train.max_frames=-1",
        "optim.lr=0": "optim.lr=0.0",
        "specaug.time_ratio=2": "specaug.time_ratio=2.0",
        "schedule.anneal=linear": "schedule.anneal='linear'",
        "schedule.warmup_steps=-5": "schedule.warmup_steps=-5",
        "strategy.learners=0": "learners=0",
        "model.size=huge": "model.size='huge'",
    }
    with pytest.raises(ConfigError) as caught:
        compose(list(bad))
    message = str(caught.value)
    assert message.startswith(f"{len(bad)} bad settings: (1) ")
    for shown in bad.values():
        assert shown in message, shown
    assert "\n" not in message  # one line for the CLI's `asrkit: error:`
    # One bad value alone is reported as itself.
    with pytest.raises(ConfigError, match=r"^specaug.freq_width=-1 must be >= 0$"):
        compose(["specaug.freq_width=-1"])


def test_each_section_and_the_checks_across_sections_report_every_problem() -> None:
    """Several bad values of one section (train, optim, features, strategy) and of the
    top-level settings all come back together, each choice named with its choices."""
    from asrkit.errors import ConfigError

    bad = {
        "train.epochs=0": "train.epochs=0",
        "train.loader=disk": "train.loader='disk' is unknown; choose one of process, thread",
        "train.device=tpu": "train.device='tpu'",
        "optim.name=rmsprop": "optim.name='rmsprop' is unknown; choose one of adam, sgd",
        "optim.lr=0": "optim.lr=0.0",
        "features.cmvn=utterance": "features.cmvn='utterance' is unknown; choose one of global, speaker",
        "features.dither=-1": "features.dither=-1.0",
        "strategy=adpsgd": "",
        "strategy.learners=3": "even number of learners, got n=3",
        "strategy.backend=mpi": "strategy.backend='mpi'",
        "strategy.straggler.mode=slow": "strategy.straggler.mode='slow'",
        "pipeline=kaldi": "pipeline='kaldi' is unknown; choose one of ctc, hybrid",
        "objective=mmi": "objective='mmi' is unknown; choose one of ctc, ce",
        "resume=maybe": "resume='maybe'",
    }
    with pytest.raises(ConfigError) as caught:
        compose(list(bad))
    shown = [text for text in bad.values() if text]
    problems = caught.value.problems  # type: ignore[attr-defined]
    assert len(problems) == len(shown), problems
    for text in shown:
        assert any(text in p for p in problems), text


def _stack_every_frame(feats: torch.Tensor, stack: int, subsample: int) -> torch.Tensor:
    """Stacking as first written: every frame stacked (edge-padded), then subsampled."""
    if stack > 1:
        pad = feats[:, -1:, :].expand(-1, stack - 1, -1)
        padded = torch.cat([feats, pad], dim=1)
        feats = torch.cat([padded[:, k : k + feats.shape[1]] for k in range(stack)], dim=2)
    return feats[:, ::subsample]


@pytest.mark.parametrize(("stack", "subsample"), [(1, 1), (1, 3), (2, 2), (3, 3), (3, 1), (4, 3), (2, 3)])
@pytest.mark.parametrize("frames", [1, 2, 7, 30])
def test_stacking_only_the_kept_frames_gives_the_same_features(
    stack: int, subsample: int, frames: int
) -> None:
    model = LSTMAcousticModel(5, 4, hidden=4, layers=1, stack=stack, subsample=subsample)
    feats = torch.randn(3, frames, 5)
    assert torch.equal(model._stack(feats), _stack_every_frame(feats, stack, subsample))


def test_specaugment_frequency_masks_stay_within_freq_dims() -> None:
    """With a joined input (fbank bins, then fMLLR features) the frequency masks fall in the
    first ``freq_dims`` dims only; the time masks still cover every dim of their frames."""
    feats = torch.ones(16, 50, 30)
    lengths = torch.full((16,), 50)
    cfg = SpecAugConfig(freq_masks=2, freq_width=8, time_masks=0, freq_dims=10)
    out = spec_augment(feats, lengths, cfg, torch.Generator().manual_seed(0))
    assert (out[:, :, :10] == 0).any() and bool((out[:, :, 10:] == 1).all())
    timed = spec_augment(
        feats,
        lengths,
        SpecAugConfig(freq_masks=0, time_width=20, time_ratio=0.5, freq_dims=10),
        torch.Generator().manual_seed(0),
    )
    masked_frames = (timed == 0).all(dim=2)
    assert masked_frames.any() and bool(((timed == 0).any(dim=2) == masked_frames).all())
    # 0 (the default) masks anywhere, drawing as before the setting existed
    anywhere = spec_augment(feats, lengths, SpecAugConfig(time_masks=0), torch.Generator().manual_seed(0))
    assert (anywhere[:, :, 10:] == 0).any()
    with pytest.raises(ConfigError, match=r"specaug.freq_dims=40, but the input has 30 dims"):
        spec_augment(feats, lengths, SpecAugConfig(freq_dims=40), torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match=r"^specaug.freq_dims=-1 must be >= 0$"):
        compose(["specaug.freq_dims=-1"])
