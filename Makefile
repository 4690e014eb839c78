# The two commands of the README's Quick start, plus lint.
.PHONY: demo test lint bench

demo:  ## set up .venv and serve the app with the embedded demo on http://127.0.0.1:8000
	bash scripts/demo

test:  ## set up .venv, start Postgres/Redis/Slurm if needed, run ruff and the whole suite
	bash scripts/test

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

bench:  ## the benchmarks of bench/ (figures go into bench/RESULTS.md by hand)
	PYTHONPATH=. .venv/bin/python bench/trainer_step.py
	PYTHONPATH=. .venv/bin/python bench/thl_throughput.py
	PYTHONPATH=. .venv/bin/python bench/regimes.py
	PYTHONPATH=. DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mrl_bench} .venv/bin/python bench/ingest.py
	PYTHONPATH=. DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mrl_bench} .venv/bin/python bench/vs_mlflow.py
	PYTHONPATH=. .venv/bin/python bench/remix_efficiency.py
	PYTHONPATH=. .venv/bin/python bench/vs_trl.py  # makes .venv-bench-trl on first use
	PYTHONPATH=. DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mrl_bench} .venv/bin/python bench/submit_latency.py
	PYTHONPATH=. DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mrl_bench} .venv/bin/python bench/compare.py
	PYTHONPATH=. DATABASE_URL=$${BENCH_SCALE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mrl_bench_scale} .venv/bin/python bench/scale.py --reuse
