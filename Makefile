# The two commands of the README's Quick start, plus lint.
.PHONY: demo test lint bench

demo:  ## set up .venv and serve the app with the embedded demo on http://127.0.0.1:8000
	bash scripts/demo

test:  ## set up .venv, start Postgres/Redis/Slurm if needed, run ruff, mypy and the whole suite
	bash scripts/test

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

bench:  ## every benchmark of bench/ with its wall time (figures go into bench/RESULTS.md by hand)
	bash scripts/bench
