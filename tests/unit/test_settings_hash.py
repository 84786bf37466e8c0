"""Settings added after experiments were made count in a stage's hash only when set, so an
upgrade does not make finished stages look stale (asrkit.config.HASHED_WHEN_CHANGED)."""

from __future__ import annotations

from asrkit.config import HASHED_WHEN_CHANGED, compose, settings_hash, to_object


def test_corpus_dirs_counts_only_when_set() -> None:
    plain = to_object(compose(["+experiment=an4_hybrid"]))
    digest, chosen = settings_hash(plain, ["data"])
    assert "corpus_dirs" not in chosen["data"] and HASHED_WHEN_CHANGED["data.corpus_dirs"] == {}
    other = to_object(compose(["+experiment=an4_hybrid", "+data.corpus_dirs.extra=/somewhere"]))
    digest2, chosen2 = settings_hash(other, ["data"])
    assert chosen2["data"]["corpus_dirs"] == {"extra": "/somewhere"} and digest2 != digest


def test_swbd_corpus_locations_are_settings() -> None:
    cfg = to_object(compose(["+experiment=swbd_hybrid", "data.corpus_dirs.ms98=/corpora/ms98"]))
    assert cfg.data.corpus_dirs == {"eval2000_audio": "", "eval2000_text": "", "ms98": "/corpora/ms98"}


def test_precision_names_itself_only_when_it_changes_the_arithmetic() -> None:
    """train.precision at fp32 leaves the train stage's hash, a simulated run's settings
    (and so its output dir) and a step cost's key as they were before the setting existed:
    the study's runs and step costs recorded then still answer."""
    from asrkit.sim.experiment import run_settings, step_cost_settings
    from asrkit.sim.network import NETWORKS

    plain = to_object(compose(["+experiment=an4_hybrid"]))
    bf16 = to_object(compose(["+experiment=an4_hybrid", "train.precision=bf16"]))
    (digest, chosen), (digest2, chosen2) = settings_hash(plain, ["train"]), settings_hash(bf16, ["train"])
    assert "precision" not in chosen["train"] and chosen2["train"]["precision"] == "bf16"
    assert digest != digest2
    network = NETWORKS["infiniband"]
    assert "train.precision" not in run_settings(plain, network)
    assert run_settings(bf16, network)["train.precision"] == "bf16"
    assert "train.precision" not in step_cost_settings(plain)
    assert step_cost_settings(bf16)["train.precision"] == "bf16"
