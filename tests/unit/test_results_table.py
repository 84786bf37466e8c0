"""``asrkit results``: the scored decodings of experiment dirs collected into one table.

The experiment dirs are written by the stages' own writers: ``config.yaml`` as the
registry saves the composed config, every decode folder by
:func:`asrkit.stages.common.tune_and_decode` (``wer_<w>_<s>``, ``best_wer``, ``hyp``,
``scoring/``, ``setting``) with a decoder whose hypotheses are made up, and a SAT system's
first pass by :func:`asrkit.decoding.decoder.write_and_score` into ``decode_<set>.si``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from asrkit.config import compose
from asrkit.data.io import atomic_write
from asrkit.decoding.decoder import Decoder, DecodingRecord, Point, Prepared, write_and_score
from asrkit.scoring.results import collect_results, format_results
from asrkit.stages import registry
from asrkit.stages.common import tune_and_decode
from tests.helpers import assert_one_line_error, run_main

#: Eight utterances of 4 words (32 reference words) per set.
_WORDS = "one two three four".split()
#: A 2 x 2 sweep (LM weight, word penalty).
_GRID = [(5.0, 0.0), (5.0, 1.0), (9.0, 0.0), (9.0, 1.0)]


def _texts(data_dir: Path) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in (data_dir / "text").read_text().splitlines()}


def _hyps(ref: dict[str, list[str]], wrong: int) -> dict[str, str]:
    """``ref`` with the first ``wrong`` utterances missing their last word."""
    return {utt: " ".join(words[:-1] if k < wrong else words) for k, (utt, words) in enumerate(ref.items())}


class _MadeUp(Decoder):
    """Hypotheses with ``base[set]`` + (distance of the point from ``best``) utterances
    missing a word, so that a sweep picks ``best`` and each set has a known WER."""

    kind = "made_up"
    weight_names = ("lm_weight", "word_penalty")

    def __init__(self, name: str, grid: Sequence[Point], *, best: Point, base: dict[str, int]) -> None:
        super().__init__(grid)
        self.name, self.best, self.base = name, best, base

    @property
    def label(self) -> str:
        return self.name

    @property
    def sample_rate(self) -> int:
        return 16000

    def prepare(self, data_dir: str | Path) -> Prepared:
        return Prepared(_texts(Path(data_dir)), name=Path(data_dir).name)

    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        raise NotImplementedError

    def hypotheses(self, prepared: Prepared, points: Sequence[Point]) -> dict[Point, dict[str, str]]:
        off = {p: int(abs(p[0] - self.best[0]) + abs(p[1] - self.best[1])) for p in points}
        return {p: _hyps(dict(prepared.scores), self.base[prepared.name] + off[p]) for p in points}

    def setting(self, point: Point) -> str | None:
        return None if self.name == "greedy" else super().setting(point)

    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        return DecodingRecord(kind="greedy", weights=list(point), tuned_on=tuned_on)


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    """``train_dev`` and ``test`` data dirs (a ``text`` each: all scoring reads)."""
    sets = {}
    for name in ("train_dev", "test"):
        sets[name] = tmp_path / "data" / name
        atomic_write(sets[name] / "text", "".join(f"spk1-{name}{k} {' '.join(_WORDS)}\n" for k in range(8)))
    return sets


@pytest.fixture(autouse=True)
def _no_leftover_results() -> Iterator[None]:
    yield
    registry.RESULTS.clear()  # tune_and_decode reports into the run's table


def _experiment(exp_dir: Path, *overrides: str) -> None:
    """``config.yaml`` as a run saves it (the composed config)."""
    atomic_write(exp_dir / "config.yaml", OmegaConf.to_yaml(compose(list(overrides))))


def _decode(
    folder: Callable[[str], Path],
    data: dict[str, Path],
    name: str,
    *,
    base: dict[str, int],
    grid: Sequence[Point] = _GRID,
    best: Point = (9.0, 0.0),
    targets: Sequence[str] = ("train_dev", "test"),
) -> None:
    """Tune on train_dev (when ``grid`` has several points) and decode ``targets`` into
    ``folder(set)``, as the stages do."""
    tune_and_decode(
        _MadeUp(name, grid, best=best, base=base),
        tune=lambda: ("train_dev", data["train_dev"]),
        targets=[(t, data[t]) for t in targets],
        out_dir=folder,
    )


def _exp_root(tmp_path: Path, data: dict[str, Path]) -> Path:
    root = tmp_path / "exp"
    ctc = root / "an4_ctc"
    _experiment(ctc)
    _decode(
        lambda s: ctc / f"decode_{s}",
        data,
        "greedy",
        grid=[(0.0, 0.0)],
        best=(0.0, 0.0),
        base={"train_dev": 4, "test": 6},
    )
    _decode(lambda s: ctc / f"decode_beam_lm_{s}", data, "beam_lm", base={"train_dev": 1, "test": 2})
    # A model a rerun set aside: not this experiment's any more.
    _decode(
        lambda s: ctc / "previous" / f"decode_{s}",
        data,
        "greedy",
        grid=[(0.0, 0.0)],
        best=(0.0, 0.0),
        base={"train_dev": 8, "test": 8},
    )
    # A combination's member: an experiment of its own inside this one.
    member = ctc / "member1"
    _experiment(member)
    _decode(
        lambda s: member / f"decode_{s}",
        data,
        "greedy",
        grid=[(0.0, 0.0)],
        best=(0.0, 0.0),
        base={"train_dev": 7, "test": 7},
        targets=["test"],
    )
    hybrid = root / "an4_hybrid"
    _experiment(hybrid, "+experiment=an4_hybrid")
    gmm = hybrid / "gmm"
    _decode(
        lambda s: gmm / "mono" / f"decode_{s}",
        data,
        "mono",
        best=(5.0, 1.0),
        base={"train_dev": 3, "test": 4},
    )
    _decode(lambda s: gmm / "tri3" / f"decode_{s}", data, "tri3", base={"train_dev": 2, "test": 2})
    for name in ("train_dev", "test"):  # the SAT system's speaker-independent first pass
        write_and_score(_hyps(_texts(data[name]), 5), data[name], gmm / "tri3" / f"decode_{name}.si")
    _decode(
        lambda s: hybrid / f"decode_hybrid_{s}",
        data,
        "hybrid",
        best=(5.0, 0.0),
        base={"train_dev": 1, "test": 1},
    )
    # Tuned on train_dev but only test decoded (decode.sets=[test]): best_wer is train_dev's score.
    only_test = root / "an4_test_only"
    _experiment(only_test, "decode.sets=[test]", "decode=beam_lm")
    _decode(
        lambda s: only_test / f"decode_beam_lm_{s}",
        data,
        "beam_lm",
        base={"train_dev": 0, "test": 3},
        targets=["test"],
    )
    return root


def test_rows_name_experiment_set_system_weights_and_file(tmp_path: Path, data: dict[str, Path]) -> None:
    root = _exp_root(tmp_path, data)
    rows = collect_results(root)
    got = [(r.experiment, r.dataset, r.system, r.wer, r.setting, r.tuned_on, r.sweep) for r in rows]
    at_9_0 = "lm_weight=9 word_penalty=0"
    assert got == [
        ("an4_ctc", "test", "beam_lm", 6.25, at_9_0, "train_dev", 0),
        ("an4_ctc", "test", "greedy", 18.75, "", "", 0),
        ("an4_ctc", "train_dev", "beam_lm", 3.12, at_9_0, "train_dev", 4),
        ("an4_ctc", "train_dev", "greedy", 12.5, "", "", 0),
        ("an4_ctc/member1", "test", "greedy", 21.88, "", "", 0),
        ("an4_hybrid", "test", "hybrid", 3.12, "lm_weight=5 word_penalty=0", "train_dev", 0),
        ("an4_hybrid", "test", "gmm tri3", 6.25, at_9_0, "train_dev", 0),
        ("an4_hybrid", "test", "gmm mono", 12.5, "lm_weight=5 word_penalty=1", "train_dev", 0),
        ("an4_hybrid", "test", "gmm tri3.si", 15.62, "", "", 0),
        ("an4_hybrid", "train_dev", "hybrid", 3.12, "lm_weight=5 word_penalty=0", "train_dev", 4),
        ("an4_hybrid", "train_dev", "gmm tri3", 6.25, at_9_0, "train_dev", 4),
        ("an4_hybrid", "train_dev", "gmm mono", 9.38, "lm_weight=5 word_penalty=1", "train_dev", 4),
        ("an4_hybrid", "train_dev", "gmm tri3.si", 15.62, "", "", 0),
        ("an4_test_only", "test", "beam_lm", 9.38, at_9_0, "train_dev", 0),
        ("an4_test_only", "train_dev", "beam_lm", 0.0, at_9_0, "train_dev", 4),
    ]
    by_source = {r.source: (r.errors, r.words, r.counts) for r in rows}
    assert by_source["an4_hybrid/gmm/tri3/decode_test.si/scoring/wer"] == (
        5,
        32,
        "[ 5 / 32, 0 ins, 5 del, 0 sub ]",
    )
    # The tune set that was not decoded on its own is read from the sweep's best_wer.
    assert "an4_test_only/decode_beam_lm_train_dev/best_wer" in by_source
    assert "an4_ctc/decode_beam_lm_test/scoring/wer" in by_source
    assert not any("previous" in source for source in by_source)


def test_one_experiment_dir_is_a_root_of_its_own(tmp_path: Path, data: dict[str, Path]) -> None:
    root = _exp_root(tmp_path, data)
    rows = collect_results(root / "an4_ctc")
    assert {r.experiment for r in rows} == {"an4_ctc", "member1"}
    assert [r.source for r in rows][:2] == ["decode_beam_lm_test/scoring/wer", "decode_test/scoring/wer"]


def test_the_command_prints_and_writes_the_table(
    tmp_path: Path, data: dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    root = _exp_root(tmp_path, data)
    capfd.readouterr()  # the decodings' own report lines
    result = run_main(["results", str(root)], capfd)
    assert result.returncode == 0, result.stderr
    assert result.stdout == format_results(collect_results(root))
    assert (root / "RESULTS").read_text() == result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "experiment",
        "set",
        "system",
        "%WER",
        "errors",
        "/",
        "words",
        "weights",
        "file",
    ]
    assert len(lines) == 1 + 15
    rows = {tuple(ln.split()[:4]): ln.split()[4:] for ln in lines[1:]}
    assert rows[("an4_hybrid", "train_dev", "gmm", "mono")] == [
        "9.38",
        *"[ 3 / 32, 0 ins, 3 del, 0 sub ]".split(),
        *"lm_weight=5 word_penalty=1 (best of 4 here)".split(),
        "an4_hybrid/gmm/mono/decode_train_dev/scoring/wer",
    ]
    assert rows[("an4_hybrid", "test", "hybrid", "*3.12")] == [
        *"[ 1 / 32, 0 ins, 1 del, 0 sub ]".split(),
        *"lm_weight=5 word_penalty=0 (tuned on train_dev)".split(),
        "an4_hybrid/decode_hybrid_test/scoring/wer",
    ]
    assert rows[("an4_ctc", "test", "greedy", "18.75")] == [
        *"[ 6 / 32, 0 ins, 6 del, 0 sub ]".split(),
        "an4_ctc/decode_test/scoring/wer",
    ]
    # --out elsewhere, and --out - writes nothing
    out = tmp_path / "tables" / "RESULTS.txt"
    assert run_main(["results", str(root), "--out", str(out)], capfd).returncode == 0
    assert out.read_text() == result.stdout
    (root / "RESULTS").unlink()
    assert run_main(["results", str(root), "--out", "-"], capfd).stdout == result.stdout
    assert not (root / "RESULTS").exists()


def test_no_scores_is_one_line_with_the_fix(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _experiment(tmp_path / "exp" / "an4_untrained")
    assert_one_line_error(
        run_main(["results", str(tmp_path / "exp")], capfd),
        f"no scored decodings under {tmp_path / 'exp'}: run a recipe's decode stage first",
    )
    assert_one_line_error(
        run_main(["results", str(tmp_path / "nowhere")], capfd),
        f"{tmp_path / 'nowhere'}: not a directory",
    )
