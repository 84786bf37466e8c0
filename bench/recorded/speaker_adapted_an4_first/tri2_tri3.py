"""tri2 (LDA+MLLT) on AN4 from the copy's tri1: likelihoods and dev WER against tri1's."""
import json, logging, sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
from asrkit.gmm.config import GmmConfig
from asrkit.gmm.feats import GmmFeatures
from asrkit.gmm.lang import load_lang
from asrkit.gmm.train import GmmSystem
from asrkit.gmm.adapt import train_lda_mllt, TransformedFeatures
from asrkit.gmm.graph import make_graph
from asrkit.decoding.wfst import WfstDecoder
from asrkit.targets.alignments import read_alignments
from asrkit.data.datadir import read_data_dir
from asrkit.scoring.wer import read_text, score_texts

root = Path("/tmp/an4h_copy/gmm")
lang = load_lang(root / "lang")
tri1 = GmmSystem.load(root / "tri1", lang)
base = GmmFeatures(root / "data" / "train", delta_order=0)
texts = read_data_dir(root / "data" / "train").text
ali = {u: a.tolist() for u, a in read_alignments(str(root / "tri1" / "ali.1.gz")).items() if u in texts}
print("aligned", len(ali), "of", len(texts))
cfg = replace(GmmConfig(), tri_iters=int(sys.argv[1]) if len(sys.argv) > 1 else 35)
rounds = tuple(r for r in (1, 3, 5, 11) if r < cfg.tri_iters)
began = time.time()
system, result, feats = train_lda_mllt(lang, base, texts, tri1, ali, cfg, num_leaves=300, num_gauss=3000, mllt_rounds=rounds, seed=3)
print("tri2 trained in", round(time.time() - began), "s; like/frame", result.like_per_frame)
graph = make_graph(lang, system.ctx_dep, system.trans_model, Path("/tmp/an4h_copy/lang/lm.arpa"), Path("/tmp/tri2/graph"))
search = WfstDecoder.from_graph_dir(graph, system.trans_model, beam=13.0, lattice_beam=8.0, max_active=7000, acoustic_scale=0.1)
for name in ("train_dev", "test"):
    dev = TransformedFeatures(GmmFeatures(root / "data" / name, delta_order=0), feats.transform)
    scores = {u: system.log_likelihoods(dev(u)) for u in dev.utt_ids}
    weights = [9.0, 10.0, 11.0, 12.0, 13.0, 15.0, 17.0, 19.0]
    swept = search.sweep(scores, weights, word_penalties=[-0.5, 0.0, 0.5], nj=1)
    ref = read_text(Path("/work/main/recipes/an4/data") / name / "text")
    for combo in [(w, p) for w in weights for p in (-0.5, 0.0, 0.5)]:
        hyp = {u: swept[u][combo] for u in swept}
        print(name, combo, score_texts(ref, hyp).words.kaldi_line())

# ---- tri3: SAT on tri2's features and alignment, then two-pass decoding
from asrkit.gmm.adapt import train_sat, transforms_from_hypotheses
began = time.time()
sat, sat_result, adapted = train_sat(lang, feats, texts, system, result.alignments, cfg, num_leaves=300, num_gauss=3000,
                                     fmllr_rounds=tuple(r for r in (1, 5, 9) if r < cfg.tri_iters), seed=4)
print("tri3 trained in", round(time.time() - began), "s; like/frame", sat_result.like_per_frame, "speakers", len(adapted.speakers))
graph3 = make_graph(lang, sat.ctx_dep, sat.trans_model, Path("/tmp/an4h_copy/lang/lm.arpa"), Path("/tmp/tri3/graph"))
search3 = WfstDecoder.from_graph_dir(graph3, sat.trans_model, beam=13.0, lattice_beam=8.0, max_active=7000, acoustic_scale=0.1)
first_point = (float(sys.argv[2]) if len(sys.argv) > 2 else 12.0, 0.0)
for name in ("train_dev", "test"):
    si = TransformedFeatures(GmmFeatures(root / "data" / name, delta_order=0), feats.transform)
    scores = {u: system.log_likelihoods(si(u)) for u in si.utt_ids}
    first = {u: " ".join(w[first_point]) for u, w in search.sweep(scores, [first_point[0]], word_penalties=[0.0], nj=1).items()}
    speakers = transforms_from_hypotheses(sat, si, first, cfg)
    second = TransformedFeatures(si.base, si.transform, speakers=speakers)
    scores2 = {u: sat.log_likelihoods(second(u)) for u in second.utt_ids}
    weights = [9.0, 10.0, 11.0, 12.0, 13.0, 15.0, 17.0, 19.0]
    swept = search3.sweep(scores2, weights, word_penalties=[-0.5, 0.0, 0.5], nj=1)
    ref = read_text(Path("/work/main/recipes/an4/data") / name / "text")
    print(name, "first pass", score_texts(ref, {u: t.split() for u, t in first.items()}).words.kaldi_line())
    for combo in [(w, p) for w in weights for p in (-0.5, 0.0, 0.5)]:
        hyp = {u: swept[u][combo] for u in swept}
        print(name, "tri3", combo, score_texts(ref, hyp).words.kaldi_line())
