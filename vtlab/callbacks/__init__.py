"""Lightning callbacks, one module per entry of conf/callbacks/ (apc.py serves both `apc` and `start_shift`), plus
resume_state.py, which the fine-tune stage adds itself. The algorithms they run live in the library (vtlab.apc,
vtlab.health, vtlab.models.idf, vtlab.vocab.transfer, vtlab.checkpoints)."""
