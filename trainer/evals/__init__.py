"""Evaluation suites (issue 20): suite configs, scorers and the synthetic suite.

:mod:`trainer.evals.suite` (torch-free) reads and validates suites and their task files;
:mod:`trainer.evals.scoring` scores a causal LM on them (log-likelihood multiple choice,
generative math, exact match); :mod:`trainer.evals.synthetic` writes the seeded
synthetic suite used by the tests and the demo; :mod:`trainer.evals.evaluate` opens a
checkpoint, scores one policy on a suite and spools the results for shipping
(``python -m trainer eval``), and plans a run's evaluation at several checkpoints and its
base models (``python -m trainer eval-run``).
"""
