"""Bridges to other libraries' training loops: ``trl`` (TRL's GRPOTrainer), ``sb3`` (stable-baselines3)."""
