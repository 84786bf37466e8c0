"""The loader layer: data dirs and feature archives turned into batches for training and
decoding. It sits above :mod:`asrkit.data` (Kaldi files and data dirs), :mod:`asrkit.features`
(CMVN) and :mod:`asrkit.targets` (tokens, alignments), and below models, training and
decoding.

Modules (import them; they need torch):
    - :mod:`asrkit.loader.batch` — :class:`~asrkit.loader.batch.Utterance`,
      :class:`~asrkit.loader.batch.Batch`, per-speaker or global CMVN, collation, length
      bucketing and CE chunks.
    - :mod:`asrkit.loader.stream` — utterance sources (in memory, or a data dir streamed
      from its feature archives), opening and checking a data dir, and
      :class:`~asrkit.loader.stream.BucketBatches`, the batch planner with its readers.
    - :mod:`asrkit.loader.prefetch` — read-ahead in worker processes or threads.
"""
