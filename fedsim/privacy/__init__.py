"""Privacy audit: what a curious server, its accomplices or a network observer learn from a
protocol's messages (docs/privacy.md).

``record`` (the tap on a network), ``views`` (what one adversary may see), ``attacks`` (each
declares its view and reads nothing else), ``metrics`` (precision, recall, F1, AUC, exact
recovery against the true item sets, with a random-guess baseline), ``audit`` (run a protocol
under observation and score attacks on it).
"""

from .audit import (
    Capture, attack_capture, capture, observed_clients, partly_seen, score_links, truth_of, upload_rounds,
)
from .metrics import Guess, score_guess, score_inference, summarize
from .record import Recorder
from .views import Observed, Packet, Public, View, ViewSpec, build_view

__all__ = [
    "Capture", "Guess", "Observed", "Packet", "Public", "Recorder", "View", "ViewSpec", "attack_capture", "build_view",
    "capture", "observed_clients", "partly_seen", "score_guess", "score_inference", "score_links", "summarize",
    "truth_of", "upload_rounds",
]
