"""``python -m envace_gym.cli`` (``accelerate launch -m envace_gym.cli train ...`` too)."""

from envace_gym.cli import app

app()
