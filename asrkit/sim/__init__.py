"""The many-learner simulator: N learners in one process on a virtual clock.

- :mod:`asrkit.sim.clock`: the deterministic scheduler (tasks run one at a time, in
  virtual-time order) and its events and conditions;
- :mod:`asrkit.sim.network`: message times from bandwidth and latency;
- :mod:`asrkit.sim.comm`: the :class:`~asrkit.comm.Communicator` of simulated
  learners, so the real strategy classes run unchanged;
- :mod:`asrkit.sim.runtime`: time, threads and conditions of the virtual clock for the
  code written against :class:`~asrkit.comm.Runtime`.
"""
