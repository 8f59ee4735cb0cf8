"""Benchmarks (`make bench`): measured in their own processes, never asserted in unit tests.

- `__main__`: the command (arguments, the parts in order, details.json and summary.json);
- `parts`: each part (encode, train, retrieval, transfer) run as worker processes, with the equality and recall checks;
- `summary`: the ratios to each peer, judged against their targets; `table`: the printed table;
- `testbed`: the encode part's texts (the testbed's four evaluation sets) and the nDCG@10 of each precision on them;
- `encode`, `train`, `retrieval`, `transfer`: the workers, one measurement per process (`common`: their plumbing,
  `synthetic`: the synthetic collection); `gpu_smoke`: `make gpu-smoke`; `gpu_check`: `make gpu-check` (its
  references: `cached_check`, the cached loss; `tiny_runs`: the smallest runs it starts).
"""
