"""Experiment tracking (conf/logger/):

- `loggers`: the configured loggers (wandb offline unless `logger.online=true`, one group per sweep), the resolved
  config as hyperparameters, final results as the wandb summary, a Table and the run's images;
- `resumable_csv`: `ResumableCSVLogger`, the CSV log that keeps its rows across a resume;
- `curves`: csv/curves.png, that log's curves (losses, dev measures, active dims), drawn when fitting ends.

conf/ names the logger class by its module (`vtlab.tracking.resumable_csv.ResumableCSVLogger`).
"""
