"""The checks of bench/gpu_smoke.py, one module per group: common (verdicts, the memory meter,
the context), core (memory, log-probs, merge, sampling, train) and engine (the vLLM checks)."""
