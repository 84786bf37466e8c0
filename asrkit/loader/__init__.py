"""The loader layer: data dirs and feature archives turned into batches for training and
decoding. It sits above :mod:`asrkit.data` (Kaldi files and data dirs), :mod:`asrkit.features`
(CMVN) and :mod:`asrkit.targets` (tokens, alignments), and below models, training and
decoding.

Modules (import them; they need torch):
    - :mod:`asrkit.loader.batch` — :class:`~asrkit.loader.batch.Utterance`,
      :class:`~asrkit.loader.batch.Batch`, per-speaker or global CMVN, collation, length
      the one batch planner (:func:`~asrkit.loader.batch.plan_buckets`) and CE chunks.
    - :mod:`asrkit.loader.sources` — what a set of utterances offers (frame counts, readers)
      and the in-memory set.
    - :mod:`asrkit.loader.archive` — a data dir streamed from its feature archives.
    - :mod:`asrkit.loader.opening` — opening and checking a data dir
      (:func:`~asrkit.loader.opening.open_data_dir`).
    - :mod:`asrkit.loader.planning` — :class:`~asrkit.loader.planning.BucketBatches`,
      each epoch's batches, sharded among learners and read ahead.
    - :mod:`asrkit.loader.prefetch` — read-ahead in worker processes or threads.
"""
