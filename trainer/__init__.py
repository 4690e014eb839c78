"""The mutual-RL trainer: a pure Python library (torch + transformers), no Django.

It talks to the web app only over the HTTP ingestion API (SPEC section 8), so it runs
the same on a Slurm node, a laptop or in CI.
"""

__version__ = "0.1.0"
