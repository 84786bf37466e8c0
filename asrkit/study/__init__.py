"""The study of IBM's distributed-training claims on simulated learners: a plan of runs
(:mod:`asrkit.study.plan`), a resumable runner (:mod:`asrkit.study.runner`) and the
tables and plots of docs/study.md (:mod:`asrkit.study.report`)."""
