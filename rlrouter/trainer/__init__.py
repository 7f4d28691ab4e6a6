"""The Router-R1 trainer: the controller on top (``RouterR1Trainer``), the job that wires it
(``job.run``) and the run's report. It drives ``rlrouter.learner`` and ``rlrouter.rollout``; nothing
below imports it."""
