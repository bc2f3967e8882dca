"""fedsim: federated recommender protocols on a simulated network that counts every byte."""

__version__ = "0.1.0"
