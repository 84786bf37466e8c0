#!/usr/bin/env bash
# Switchboard (LDC97S62) -> eval2000 (LDC2002S09 + LDC2002T43): GMM-HMMs, the papers' BLSTM
# (hybrid, frame CE), HCLG decoding, scored as NIST's hubscr.pl (Switchboard / CallHome).
# Usage: recipes/swbd/run.sh data.corpus_dir=LDC97S62 \
#          data.corpus_dirs.eval2000_audio=LDC2002S09/hub5e_00 \
#          data.corpus_dirs.eval2000_text=LDC2002T43 [--stage N] [--stop-stage M] [overrides ...]
# No corpus here? local/make_synthetic_ldc.py builds a tiny one in LDC's layout from AN4.
# Outputs (data/, fbank/, exp/) go to this directory. See docs/switchboard.md.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../lib/run_stages.sh" "$here" +experiment=swbd_hybrid "$@"
