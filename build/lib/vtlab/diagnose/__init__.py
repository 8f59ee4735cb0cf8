"""`vtlab diagnose`: can a backbone's vocabulary express my corpus? Figures per backbone × vocabulary, no training.

- `tokenizer_fit`: fertility, words in ≥3 pieces, unknown / byte-fallback tokens, frequent words as one token, per
  Unicode script;
- `redundancy`: vocabulary entries that collapse onto one normalized form (the "Vocabulary Gap") and the corpus mass
  spread over several surface forms;
- `activity`: the model's output space on sample documents, before and after the configured APC;
- `sparsity`: the sparse range of active dims per document, and whether the configured APC moves a start toward it;
- `verdict` + `report`: ranking (random-init backbones last), suggested command (APC only where the measured APC
  helps), markdown / JSON / PNG report (also over a multirun's jobs).

Entry points: the stage `python -m vtlab stage=diagnose ...` (vtlab/stages/diagnose.py) and
`python -m vtlab.diagnose DIR` to (re)render the combined report over job outputs.
"""
