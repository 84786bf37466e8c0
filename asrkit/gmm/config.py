"""Settings of the GMM-HMM systems and of WFST decoding (the ``gmm`` and ``wfst`` sections).

Kept apart from the training code so the config tree imports no Kaldi bindings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.errors import raise_all

#: The kinds of triphone system (Kaldi's ``train_deltas.sh``, ``train_lda_mllt.sh``,
#: ``train_sat.sh``).
TRI_KINDS = ("deltas", "lda_mllt", "sat")

#: Kaldi's train_mono.sh realignment schedule.
MONO_REALIGN = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 23, 26, 29, 32, 35, 38]


#: ``wfst.gmm_systems``'s values.
GMM_SYSTEMS = ("all", "last")


@dataclass
class GmmConfig:
    """The ``gmm`` settings: the GMM-HMM systems of a hybrid experiment.

    Attributes:
        mono_iters / mono_gauss / mono_realign: monophone training rounds, the total
            Gaussians it grows to, and the rounds that realign (Kaldi's schedule).
        tri_leaves / tri_gauss / tri_iters / tri_realign: per triphone pass (Kaldi's tri1,
            tri2, ...: one entry each), the tied states (tree leaves), total Gaussians,
            rounds and realigning rounds. The last pass aligns the training data for the
            neural network.
        tri_kinds: per triphone pass, its kind: ``deltas`` (MFCC + deltas, Kaldi's
            ``train_deltas.sh``), ``lda_mllt`` (spliced MFCC through LDA + MLLT,
            ``train_lda_mllt.sh``: writes ``final.mat``) or ``sat`` (per-speaker fMLLR on
            the previous pass's LDA+MLLT features, ``train_sat.sh``: writes ``trans.*`` and
            ``final.alimdl``; needs a ``lda_mllt`` or ``sat`` pass before it). Empty: every
            pass is ``deltas``.
        lda_dim / splice_context: LDA's output dimension and the frames spliced either side
            of each (Kaldi: 40 and ±3).
        mllt_rounds / fmllr_rounds: the (0-based) training rounds after which MLLT, or
            every speaker's fMLLR transform, is re-estimated (Kaldi's ``mllt_iters`` 2 4 6 12
            count from 1).
        fmllr_silence_weight: the weight of silence frames in fMLLR statistics (Kaldi's
            ``train_sat.sh``: 0).
        boost_silence: silence likelihood boost while aligning (Kaldi's 1.25 in
            ``train_mono.sh``/``align_si.sh``; 1.0 = off).
        beam / retry_beam: alignment beams; an utterance that fails ``beam`` is tried
            again with ``retry_beam``.
        max_fail: the fraction of utterances that may fail to align before a stage stops.
        acoustic_scale / self_loop_scale / transition_scale: Kaldi's ``scale_opts``.
        power: the exponent of a state's occupancy in the share of Gaussians it gets.
        nj: parallel alignment jobs.
    """

    mono_iters: int = 40
    mono_gauss: int = 1000
    mono_realign: list[int] = field(default_factory=lambda: list(MONO_REALIGN))
    tri_leaves: list[int] = field(default_factory=lambda: [300])
    tri_gauss: list[int] = field(default_factory=lambda: [3000])
    tri_iters: int = 35
    tri_realign: list[int] = field(default_factory=lambda: [10, 20, 30])
    tri_kinds: list[str] = field(default_factory=list)
    lda_dim: int = 40
    splice_context: int = 3
    mllt_rounds: list[int] = field(default_factory=lambda: [1, 3, 5, 11])
    fmllr_rounds: list[int] = field(default_factory=lambda: [1, 5, 9])
    fmllr_silence_weight: float = 0.0
    boost_silence: float = 1.25
    beam: float = 10.0
    retry_beam: float = 40.0
    max_fail: float = 0.05
    acoustic_scale: float = 0.1
    self_loop_scale: float = 0.1
    transition_scale: float = 1.0
    power: float = 0.25
    nj: int = 2

    def check(self) -> None:
        problems = []
        if self.mono_iters < 1 or self.tri_iters < 1:
            problems.append("gmm.mono_iters and gmm.tri_iters must be >= 1")
        if len(self.tri_leaves) != len(self.tri_gauss):
            problems.append(
                f"gmm.tri_leaves ({self.tri_leaves}) and gmm.tri_gauss ({self.tri_gauss}) need one "
                "entry per triphone pass each"
            )
        if self.tri_kinds and len(self.tri_kinds) != len(self.tri_leaves):
            problems.append(
                f"gmm.tri_kinds ({self.tri_kinds}) needs one entry per triphone pass, as gmm.tri_leaves "
                f"({self.tri_leaves}); or leave it empty (every pass deltas)"
            )
        unknown = [k for k in self.tri_kinds if k not in TRI_KINDS]
        if unknown:
            problems.append(f"gmm.tri_kinds: unknown {unknown}; each one of {', '.join(TRI_KINDS)}")
        for k, kind in enumerate(self.tri_kinds):
            if kind == "sat" and (k == 0 or self.tri_kinds[k - 1] == "deltas"):
                problems.append(
                    f"gmm.tri_kinds={self.tri_kinds}: a sat pass adapts LDA+MLLT features, so a lda_mllt "
                    "(or sat) pass must come right before it (Kaldi: tri2 lda_mllt, tri3 sat)"
                )
        if self.lda_dim < 1 or self.splice_context < 0:
            problems.append(f"gmm.lda_dim={self.lda_dim} must be >= 1 and gmm.splice_context >= 0")
        if not 0 <= self.fmllr_silence_weight <= 1:
            problems.append(f"gmm.fmllr_silence_weight={self.fmllr_silence_weight}: in [0, 1]")
        if any(n < 2 for n in self.tri_leaves):
            problems.append(f"gmm.tri_leaves={self.tri_leaves}: each pass needs at least 2 leaves")
        if not 0 <= self.max_fail < 1:
            problems.append(f"gmm.max_fail={self.max_fail}: a fraction in [0, 1)")
        if self.beam <= 0 or self.retry_beam < 0:
            problems.append("gmm.beam must be > 0 and gmm.retry_beam >= 0")
        if self.nj < 1:
            problems.append(f"gmm.nj={self.nj}: at least 1")
        raise_all(problems)

    @property
    def kinds(self) -> list[str]:
        """Each triphone pass's kind (``tri_kinds``, or ``deltas`` throughout)."""
        return list(self.tri_kinds) or ["deltas"] * len(self.tri_leaves)


@dataclass
class WfstConfig:
    """The ``wfst`` settings: decoding GMM and hybrid models through HCLG.

    Attributes:
        beam / lattice_beam / max_active: decoder pruning (Kaldi's ``decode.sh`` defaults:
            13, 8, 7000). Lattices come from Kaldi's lattice-simple decoder (the bindings'
            only lattice-producing one, which has no ``max_active``); the best path alone
            from its faster decoder.
        lm_weights: the LM weights swept on the tune set; the acoustic scale is their
            inverse (Kaldi's ``score.sh`` LMWT range).
        word_penalties: word insertion penalties swept with them.
        self_loop_scale / transition_scale: HCLG's transition probabilities (Kaldi: 0.1, 1.0).
        prior_floor: a pdf whose prior (its share of the training alignments' frames) is
            below this is never chosen, as in Kaldi's nnet1 (its log-likelihood would
            otherwise get a huge boost from a tiny prior).
        prior_scale: the weight of the log priors in a hybrid model's scores,
            ``log p(s|x) - prior_scale * log p(s)`` (Kaldi nnet1's ``--prior-scale``;
            1 divides by the priors in full, 0 decodes the posteriors themselves).
        nj: decoding jobs (forked processes sharing the graph; Kaldi's ``--nj``).
        first_pass: (LM weight, word penalty) of a SAT system's speaker-independent first
            pass (its ``final.alimdl``), whose hypotheses the test speakers' fMLLR transforms
            are estimated from (Kaldi's ``decode_fmllr.sh`` takes acoustic scale 1/12).
        fmllr_estimates: how many times two-pass decoding estimates the test speakers'
            transforms: 1, from the first pass's hypotheses; 2, again from the hypotheses
            of the SAT model on the adapted features (at the same point), as the final
            fMLLR of Kaldi's ``decode_fmllr.sh`` is estimated from the adapted lattice.
        graph: the graph dir the hybrid model decodes through (``HCLG.fst``,
            ``words.txt``); empty: the last GMM system's (``gmm/<system>/graph``). A Kaldi
            graph dir (``exp/tri3/graph``) works too, for a model trained on that system's
            alignments (``align.train=exp/tri3_ali``).
        pron_probs: build the decoding graphs from a lang dir whose lexicon carries
            pronunciation probabilities counted from the last system's training alignments
            (``gmm/lang_pp``, :mod:`asrkit.gmm.pronprobs`; Kaldi's ``get_prons.sh`` and
            ``dict_dir_add_pronprobs.sh``); the GMMs train on ``gmm/lang`` either way.
        gmm_systems: the GMM systems stage 5 builds a graph for and decodes: ``all``
            (Kaldi's ``run.sh``: every rung of the ladder scored) or ``last`` (only the one
            the BLSTM decodes through, a SAT system's two passes included), which saves the
            earlier systems' graphs and lattice searches.
    """

    beam: float = 13.0
    lattice_beam: float = 8.0
    max_active: int = 7000
    lm_weights: list[float] = field(
        default_factory=lambda: (
            [4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 15.0, 17.0, 19.0, 21.0] + [24.0]
        )
    )
    word_penalties: list[float] = field(default_factory=lambda: [-0.5, 0.0, 0.5, 1.0])
    self_loop_scale: float = 0.1
    transition_scale: float = 1.0
    prior_floor: float = 1e-10
    prior_scale: float = 1.0
    nj: int = 2
    first_pass: list[float] = field(default_factory=lambda: [12.0, 0.0])
    fmllr_estimates: int = 1
    graph: str = ""
    gmm_systems: str = "all"
    pron_probs: bool = False

    def check(self) -> None:
        problems = []
        if self.gmm_systems not in GMM_SYSTEMS:
            problems.append(
                f"wfst.gmm_systems={self.gmm_systems!r}: one of {', '.join(GMM_SYSTEMS)} (decode every "
                "GMM system, or the last one only)"
            )
        if self.beam <= 0 or self.lattice_beam <= 0 or self.max_active < 1:
            problems.append("wfst.beam, wfst.lattice_beam and wfst.max_active must be positive")
        if not self.lm_weights or any(w <= 0 for w in self.lm_weights):
            problems.append(f"wfst.lm_weights={self.lm_weights}: at least one, each > 0")
        if not self.word_penalties:
            problems.append("wfst.word_penalties: at least one value (0.0 for none)")
        if self.nj < 1:
            problems.append(f"wfst.nj={self.nj}: at least 1 decoding job")
        if len(self.first_pass) != 2 or self.first_pass[0] <= 0:
            problems.append(f"wfst.first_pass={self.first_pass}: [LM weight > 0, word penalty]")
        if self.fmllr_estimates not in (1, 2):
            problems.append(
                f"wfst.fmllr_estimates={self.fmllr_estimates}: 1 (from the first pass) or 2 (again "
                "from the adapted pass)"
            )
        if not 0 < self.prior_floor < 1:
            problems.append(f"wfst.prior_floor={self.prior_floor}: in (0, 1)")
        if not 0 <= self.prior_scale <= 1:
            problems.append(
                f"wfst.prior_scale={self.prior_scale}: in [0, 1] (1: divide by the priors in full)"
            )
        raise_all(problems)
