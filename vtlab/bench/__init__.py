"""Benchmarks (`make bench`): measured in their own processes, never asserted in unit tests.

- `__main__`: the command (arguments, the parts in order, details.json and summary.json);
- `parts`: each part (encode, train, retrieval, transfer) run as worker processes, with the equality and recall checks;
- `summary`: the ratios to each peer, judged against their targets, and the printed table;
- `encode`, `train`, `retrieval`, `transfer`: the workers, one measurement per process (`common`: their plumbing,
  `synthetic`: the synthetic collection); `gpu_smoke`: `make gpu-smoke`.
"""
