"""Lightning callbacks, one module per entry of conf/callbacks/ (apc.py serves both `apc` and `start_shift`), plus
resume_state.py, which the fine-tune stage adds itself, and what they share: health.py (the training-health
measurements behind `preflight`, `health_monitor` and `collapse_detector`) and checkpoints.py (how checkpoints are
loaded, written beside their target and sized; the RNG streams a resume restores). The other algorithms they run live
in their own folders (vtlab.apc.calibration, vtlab.models.idf, vtlab.vocab.transfer)."""
