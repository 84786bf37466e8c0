"""Feature extraction for a whole data dir, in ``nj`` parallel jobs.

Like Kaldi's ``steps/make_fbank.sh``: the matrices go to ``ark`` files in a
feature directory, the data dir gets ``feats.scp``, ``utt2num_frames``,
``frame_shift``, per-speaker CMVN stats (``cmvn.scp``) and the stats of all its
utterances (``cmvn_global.ark``), plus ``feats.yaml`` recording the settings.
Jobs split the recordings, so each recording of a segmented dir is read once, by one
job, and cut into its utterances (keyed by utterance id in every output).
Either every output is written or none: on any error the job's arks are removed
and the data dir's previous feature files are left as they were.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import yaml

from asrkit.data.audio import read_recordings
from asrkit.data.datadir import Recording, read_data_dir, write_kaldi_map
from asrkit.data.io import atomic_write, atomic_writer, disk_full, is_disk_full
from asrkit.data.kaldi_ark import kaldi_io, write_ark
from asrkit.errors import DataError
from asrkit.features.cmvn import cmvn_stats
from asrkit.features.extractors import FeatureConfig, extract
from asrkit.progress import Progress, map_forked, tick
from asrkit.sigstack import quiet_worker

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _JobResult:
    scp: dict[str, str]
    num_frames: dict[str, int]
    spk_stats: dict[str, np.ndarray]


def _run_job(
    job: int,
    recordings: list[Recording],
    utt2spk: dict[str, str],
    ark_path: str,
    cfg: FeatureConfig,
    segments: str,
) -> _JobResult:
    """Extract features for the utterances of ``recordings`` into one ark (``segments``:
    the dir's segments file, for messages)."""
    torch.set_num_threads(1)
    num_frames: dict[str, int] = {}
    spk_stats: dict[str, np.ndarray] = {}

    def features() -> Iterator[tuple[str, np.ndarray]]:
        for utt, samples, rate, source in read_recordings(recordings, segments_file=segments):
            spk = utt2spk[utt]
            feats = extract(samples, rate, cfg, utt=utt, where=source)
            num_frames[utt] = feats.shape[0]
            stats = cmvn_stats(feats)
            spk_stats[spk] = spk_stats[spk] + stats if spk in spk_stats else stats
            yield utt, feats
            tick()

    scp = write_ark(ark_path, features())
    return _JobResult(scp, num_frames, spk_stats)


def _resolved(path: str | Path) -> str:
    return str(Path(path).resolve())


def listed_arks(data_dir: Path) -> set[str]:
    """The archive files a data dir's ``feats.scp`` and ``cmvn.scp`` point into (resolved)."""
    arks: set[str] = set()
    for name in ("feats.scp", "cmvn.scp"):
        path = data_dir / name
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            parts = line.split(maxsplit=1)
            if len(parts) == 2 and not parts[1].rstrip().endswith("|"):
                arks.add(_resolved(parts[1].rsplit(":", 1)[0]))
    return arks


def _free_tag(feats_dir: Path, stem: str, nj: int, in_use: set[str]) -> str:
    """A name part for new archives that none of ``in_use`` has: ``""`` (Kaldi's
    ``raw_fbank_train.1.ark``) unless those are listed, else ``"g<N>."``."""
    generation = 1
    while True:
        tag = "" if generation == 1 else f"g{generation}."
        names = [feats_dir / f"{stem}.{tag}{j + 1}.ark" for j in range(nj)]
        names.append(feats_dir / f"{stem.replace('raw_', 'cmvn_', 1)}.{tag}ark")
        if not any(_resolved(p) in in_use for p in names):
            return tag
        generation += 1


def compute_features_for_dir(
    data_dir: str | Path, feats_dir: str | Path, cfg: FeatureConfig, *, where_set: str = "feats_root"
) -> dict[str, int]:
    """Compute features for every utterance of ``data_dir``.

    Args:
        data_dir: a Kaldi data dir with ``wav.scp`` and ``utt2spk`` (and ``segments``,
            when ``wav.scp`` lists recordings to cut utterances from).
        feats_dir: where the ``ark`` files go (created).
        cfg: feature settings; ``cfg.nj`` jobs run in parallel.
        where_set: the setting that moves ``feats_dir`` elsewhere, for a full disk's message.

    Returns:
        utterance id -> number of frames.

    Raises:
        DataError: bad data dir or audio; names the utterance and file. Nothing
            is left half-written.
    """
    cfg.check()
    data_dir, feats_dir = Path(data_dir), Path(feats_dir)
    data = read_data_dir(data_dir, require_text=False)
    feats_dir.mkdir(parents=True, exist_ok=True)
    # Jobs split the recordings (in a dir without segments, the utterances).
    recordings = data.recordings()
    nj = max(1, min(cfg.nj, len(recordings)))
    name = data_dir.name
    # New archives never overwrite the ones the data dir's current feats.scp lists: those
    # stay whole and listed until the new feats.scp replaces it, then they are removed.
    old_arks = listed_arks(data_dir)
    tag = _free_tag(feats_dir, f"raw_{cfg.kind}_{name}", nj, old_arks)
    ark_paths = [str(feats_dir / f"raw_{cfg.kind}_{name}.{tag}{j + 1}.ark") for j in range(nj)]
    segments = str(data_dir / "segments")
    jobs = []
    for j in range(nj):
        share = recordings[j::nj]
        utt2spk = {utt: data.utt2spk[utt] for rec in share for utt, _ in rec.utterances}
        jobs.append((j, share, utt2spk, ark_paths[j], cfg, segments))
    log.info(
        "computing %s features for %d utterances of %s%s with %d job(s)",
        cfg.kind,
        len(data.utt_ids),
        data_dir,
        f" ({len(recordings)} recordings)" if data.segmented else "",
        nj,
    )
    try:
        with Progress(f"features {data_dir}", total=len(data.utt_ids)) as progress:
            if nj == 1:
                results = [_run_job(*jobs[0])]
            else:
                results = map_forked(_run_job, jobs, nj=nj, progress=progress, initializer=quiet_worker)
    except BaseException as err:
        for path in ark_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if is_disk_full(err):
            raise disk_full(
                feats_dir, fix=f"{data_dir}'s previous features are intact; free space or set {where_set}"
            ) from None
        raise

    scp: dict[str, str] = {}
    num_frames: dict[str, int] = {}
    spk_stats: dict[str, np.ndarray] = {}
    for result in results:
        scp.update(result.scp)
        num_frames.update(result.num_frames)
        for spk, stats in result.spk_stats.items():
            spk_stats[spk] = spk_stats[spk] + stats if spk in spk_stats else stats

    cmvn_ark = feats_dir / f"cmvn_{cfg.kind}_{name}.{tag}ark"
    try:
        cmvn_scp = write_ark(cmvn_ark, ((spk, spk_stats[spk]) for spk in sorted(spk_stats)))
        with atomic_writer(data_dir / "cmvn_global.ark", "wb") as ark:
            kaldi_io.write_mat(ark, sum(spk_stats.values()))
        write_kaldi_map(data_dir / "cmvn.scp", cmvn_scp)
        write_kaldi_map(data_dir / "utt2num_frames", {u: str(n) for u, n in num_frames.items()})
        atomic_write(data_dir / "frame_shift", f"{cfg.frame_shift_ms / 1000:g}\n")
        atomic_write(data_dir / "feats.yaml", yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=True))
        # feats.scp last: its presence says the feature files beside it are complete.
        write_kaldi_map(data_dir / "feats.scp", scp)
    except BaseException as err:
        listed = listed_arks(data_dir)
        for path in [*ark_paths, str(cmvn_ark)]:  # the new ones nothing lists yet
            if _resolved(path) not in listed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        if is_disk_full(err):
            # Name the write that failed: the stats and lists go to the data dir, the
            # archives to feats_dir, and the two may be on different disks.
            failed = getattr(err, "filename", None) or str(err).split(":", 1)[0]
            in_data = Path(failed).resolve().is_relative_to(data_dir.resolve())
            where, setting = (failed, "data_root") if in_data else (feats_dir, where_set)
            raise disk_full(
                where, fix=f"{data_dir}'s previous features are intact; free space or set {setting}"
            ) from None
        raise
    for path in old_arks - listed_arks(data_dir):
        if Path(path).parent == feats_dir.resolve():  # asrkit's own, not a user's
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    if len(num_frames) != len(data.utt_ids):
        raise DataError(
            f"{data_dir}: features written for {len(num_frames)} of {len(data.utt_ids)} "
            "utterances; rerun the feature stage with --force"
        )
    return num_frames
