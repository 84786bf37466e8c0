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
