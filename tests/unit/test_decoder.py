"""The decoder interface: one tune-and-decode for every decoder, one record
format with its kind, load_decoder's choice, and the records of older asrkit read as the
same decoders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import asrkit
from asrkit.data.datadir import read_kaldi_map
from asrkit.decoding import decoder as decoding
from asrkit.decoding.decoder import Decoder, DecodingRecord, Prepared, forget_record, load_decoder
from asrkit.errors import ConfigError, DataError
from asrkit.stages.common import tune_and_decode

REF = {"u1": "A B C", "u2": "D E"}


class TableDecoder(Decoder):
    """Hypotheses from a fixed table: point -> utterance -> text."""

    kind = "beam_lm"

    def __init__(self, table: dict, grid: list) -> None:
        super().__init__(grid)
        self.table = table
        self.prepared: list[str] = []

    @property
    def sample_rate(self) -> int:
        return 16000

    def prepare(self, data_dir):
        self.prepared.append(Path(data_dir).name)
        return Prepared({utt: None for utt in REF}, frames=100)

    def prepare_audio(self, samples, rate, *, utt, where):
        return Prepared({utt: samples})

    def hypotheses(self, prepared, points):
        return {p: {utt: self.table[p][utt] for utt in prepared.scores} for p in points}

    def record(self, point, *, tuned_on):
        return DecodingRecord(kind=self.kind, weights=list(point), tuned_on=tuned_on)


def _data(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "text").write_text("".join(f"{u} {t}\n" for u, t in REF.items()))
    return folder


def test_tune_and_decode_tunes_on_dev_and_decodes_every_set_at_the_best_point(tmp_path: Path) -> None:
    dev, test = _data(tmp_path, "dev"), _data(tmp_path, "test")
    table = {
        (0.5, 0.0): {"u1": "A B", "u2": "D E"},  # 1 error
        (1.0, 0.0): {"u1": "A B C", "u2": "D E"},  # 0 errors
        (1.0, 1.0): {"u1": "A B C", "u2": "D E"},  # 0 errors too: the lower weights win
    }
    decoder = TableDecoder(table, list(table))
    best = tune_and_decode(
        decoder,
        tune=lambda: ("dev", dev),
        targets=[("dev", dev), ("test", test)],
        out_dir=lambda name: tmp_path / "exp" / f"decode_{name}",
        record_dir=tmp_path / "exp",
    )
    assert best == (1.0, 0.0)
    assert decoder.prepared == ["dev", "test"]  # the tune set's scores are reused
    out = tmp_path / "exp" / "decode_dev"
    assert sorted(p.name for p in out.glob("wer_*")) == ["wer_0.5_0", "wer_1_0", "wer_1_1"]
    assert (out / "best_wer").read_text().startswith("%WER 0.00 [ 0 / 5")
    for name in ("dev", "test"):
        folder = tmp_path / "exp" / f"decode_{name}"
        assert read_kaldi_map(folder / "hyp") == table[best]
        assert (folder / "setting").read_text() == "lm_weight=1 word_score=0\n"
        assert (folder / "scoring" / "wer").read_text().startswith("%WER 0.00")
    record = json.loads((tmp_path / "exp" / "decoders" / "beam_lm.json").read_text())
    assert record["kind"] == "beam_lm" and record["weights"] == [1.0, 0.0] and record["tuned_on"] == "dev"


def test_one_point_is_not_tuned(tmp_path: Path) -> None:
    test = _data(tmp_path, "test")

    def no_tuning() -> tuple[str, Path]:
        raise AssertionError("a single point needs no tune set")

    decoder = TableDecoder({(0.5, 0.0): {"u1": "A", "u2": "D E"}}, [(0.5, 0.0)])
    best = tune_and_decode(
        decoder, tune=no_tuning, targets=[("test", test)], out_dir=lambda name: tmp_path / name
    )
    assert best == (0.5, 0.0) and not list(tmp_path.glob("test/wer_*"))
    assert (tmp_path / "test" / "scoring" / "wer").read_text().startswith("%WER 40.00 [ 2 / 5")


def test_records_round_trip_and_name_their_kind(tmp_path: Path) -> None:
    record = DecodingRecord(kind="hybrid", weights=[11.0, 0.5], tuned_on="dev", settings={"beam": 13.0})
    path = record.save(tmp_path)
    assert path == tmp_path / "decoders" / "hybrid.json"
    assert DecodingRecord.load(tmp_path, "hybrid") == record
    assert DecodingRecord.load(tmp_path, "beam_lm") is None
    path.rename(tmp_path / "decoders" / "gmm.json")
    with pytest.raises(DataError, match="records a 'hybrid' decoder, not 'gmm'"):
        DecodingRecord.load(tmp_path, "gmm")
    (tmp_path / "decoders" / "beam.json").write_text("{ not json")
    with pytest.raises(DataError, match=r"beam\.json: unreadable decoding settings .*rerun stage 5"):
        DecodingRecord.load(tmp_path, "beam")


def test_records_of_an_older_asrkit_are_read_as_the_same_decoders(tmp_path: Path) -> None:
    (tmp_path / "decoding.json").write_text(
        json.dumps(
            dict(method="beam_lm", beam_size=40, beam_threshold=20.0, lm_weight=0.75, word_score=1.0)
            | dict(model="model.pt", tuned_on="train_dev")
        )
    )
    old_hybrid = dict(graph="/g", transitions="/t/final.mdl", counts="c", lm_weight=10.0, word_penalty=0.5)
    (tmp_path / "hybrid_decoding.json").write_text(json.dumps(old_hybrid | {"tuned_on": "dev"}))
    (tmp_path / "combination.json").write_text(
        json.dumps(dict(systems=[".", "member1"], nbest=5, lm_weight=0.5, word_score=2.0, tuned_on="dev"))
    )
    beam_lm = DecodingRecord.load(tmp_path, "beam_lm")
    assert beam_lm is not None and beam_lm.point == (0.75, 1.0)
    assert beam_lm.settings == {"beam_size": 40, "beam_threshold": 20.0} and beam_lm.tuned_on == "train_dev"
    assert DecodingRecord.load(tmp_path, "beam") is None  # that file held beam_lm
    hybrid = DecodingRecord.load(tmp_path, "hybrid")
    assert hybrid is not None and hybrid.point == (10.0, 0.5)
    assert hybrid.settings == {"graph": "/g", "transitions": "/t/final.mdl", "counts": "c"}
    combined = DecodingRecord.load(tmp_path, "combined")
    assert combined is not None and combined.settings == {"systems": [".", "member1"], "nbest": 5}
    # Writing the new record retires the old file; forgetting a kind removes both.
    DecodingRecord(kind="hybrid", weights=[9.0, 0.0]).save(tmp_path)
    assert not (tmp_path / "hybrid_decoding.json").exists()
    assert DecodingRecord.load(tmp_path, "hybrid").point == (9.0, 0.0)  # type: ignore[union-attr]
    forget_record(tmp_path, "beam_lm")
    assert not (tmp_path / "decoding.json").exists() and DecodingRecord.load(tmp_path, "beam_lm") is None


def test_load_decoder_prefers_combined_then_hybrid_then_the_ctc_searches(tmp_path: Path, monkeypatch) -> None:
    built: list[tuple[str, str]] = []

    def builder(exp_dir, record, *, model, device):
        built.append((record.kind, model))
        return record.kind

    monkeypatch.setattr(decoding, "_MODULES", dict.fromkeys(decoding.KINDS, "asrkit.decoding.decoder"))
    monkeypatch.setattr(decoding, "_BUILDERS", dict.fromkeys(decoding.KINDS, builder))
    assert load_decoder(tmp_path) == "greedy"  # nothing recorded: best path
    for kind in ("beam", "beam_lm", "hybrid", "combined"):
        DecodingRecord(kind=kind, model="other.pt").save(tmp_path)
        assert load_decoder(tmp_path) == kind
    assert load_decoder(tmp_path, "beam", model="mine.pt") == "beam" and built[-1] == ("beam", "mine.pt")
    assert built[-2] == ("combined", "other.pt")
    with pytest.raises(ConfigError, match="decoder kind 'beamlm' is unknown"):
        load_decoder(tmp_path, "beamlm")
    forget_record(tmp_path, "beam_lm")
    with pytest.raises(
        ConfigError, match=r"beam_lm\.json: no beam_lm settings; run stage 5 .*decode=beam_lm first"
    ):
        load_decoder(tmp_path, "beam_lm")


def test_a_decoder_without_a_ctc_alignment_has_no_word_times() -> None:
    decoder = TableDecoder({}, [(0.0, 0.0)])
    assert not decoder.has_word_times
    with pytest.raises(ConfigError, match="word times come from a CTC alignment"):
        decoder.word_times(Prepared({}), "u1", "A")
    prepared = decoder.prepare_audio(np.zeros(3), 16000, utt="x", where="x.wav")
    assert list(prepared.scores) == ["x"]


def test_tuning_and_decoding_is_written_once() -> None:
    """Kaldi's best_wer file name (written by the stages, read by ``asrkit results``), and a
    BeamSearch or an HCLG search built from settings, each have
    one home in the library (benchmarks of the searches themselves aside)."""
    package = Path(asrkit.__file__).parent
    homes: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        text, where = path.read_text(), str(path.relative_to(package))
        for needle in ('"best_wer"', "BeamSearch(", "WfstDecoder.from_graph_dir("):
            if needle in text and not where.startswith("bench/"):
                homes.setdefault(needle, set()).add(where)
    assert homes == {
        '"best_wer"': {"scoring/wer.py"},
        "BeamSearch(": {"decoding/ctc.py"},
        "WfstDecoder.from_graph_dir(": {"decoding/hclg.py", "decoding/wfst.py"},
    }
