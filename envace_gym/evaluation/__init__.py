"""The paper's evaluation: its benchmarks and their leaderboards' aggregation
(:mod:`~envace_gym.evaluation.benchmarks`), the runs and the world-model table
(:mod:`~envace_gym.evaluation.evaluate`), and what is written (:mod:`~envace_gym.evaluation.results`)."""

from envace_gym.evaluation.benchmarks import PAPER, REPORTED, Benchmark
from envace_gym.evaluation.evaluate import EvalConfig, Evaluation
from envace_gym.evaluation.results import EvalResults, markdown

__all__ = ["PAPER", "REPORTED", "Benchmark", "EvalConfig", "EvalResults", "Evaluation", "markdown"]
