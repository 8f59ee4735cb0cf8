"""Adaptive Pooling Calibration: the output-bias calibration run between adaptation and fine-tuning."""
