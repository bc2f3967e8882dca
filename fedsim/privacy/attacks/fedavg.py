"""FedAvg-AE (PersonalFR's baseline), by the curious server: the item set from the model a client returns.

The FedAvg server broadcasts the whole autoencoder (``model``) and every selected client returns the
whole model it trained (``update``; ``fedsim.protocols.fedavg_ae``). Two parts of it belong to one item
each: the output row ``w_i`` of the last decoder layer (weights and bias) and the input column
``W1[:, i]`` of the first encoder layer. An item none of the client's users rated gets an exactly zero
gradient in its output row at every local step (the loss reads the rated entries only), and an item
with a zero input for every one of them (unrated: ratings are 1 to 5; in the implicit task, unrated or
below the threshold) in its input column (its gradient is the input times the first layer's error);
clipping and dropout (on the code) scale gradients, which are zero there. Their local steps are then
SGD's weight decay and momentum alone: the same 2 x 2 map of (parameter, momentum buffer) per step as
PersonalFR's decoder rows (``attacks.personalfr``: ``idle_map``), applied to every entry of the row and
of the column, under the one learning rate, momentum and weight decay of the client's optimiser.

``fedavg_idle_rows`` puts each item's output row and input column side by side as one row and reads it
as ``personalfr_idle_rows`` reads a decoder row (``idle_guesses``): the number of local steps S off the
client's first update, the kept momentum buffer (``client_momentum=keep``, the default) from the models
the server sent it before, a round whose update did not come back tried as trained in and as not
(``read_updates``), S tried with them when its first update was lost (``steps_along``). The items whose
row or column left its idle path in some update are claimed: I_m, the items the client's users rated
(in the implicit task the output rows alone say it; the input columns name the positives among them).
What it assumes the server knows: the models it sent each client and the updates that came back (its
own view), and the public hyper-parameters (``Public.config``: lr and its schedule, momentum, Nesterov,
weight decay, the local epochs K, ``client_momentum``). PersonalFR-only fields (``compression``,
``uncompressed_training``) do not apply: FedAvg trains and weight-decays the whole model.
"""

from __future__ import annotations

import numpy as np

from ...math.autoencoder import input_key
from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack
from .personalfr import decoder_rows, idle_guesses

__all__ = ["FedAvgIdleRows", "item_rows"]


def item_rows(model: dict) -> np.ndarray:
    """Each item's parameters in a whole autoencoder, float64 ``(n, w + 1 + h)``: its output row
    (``decoder_rows``: last decoder layer's weights and bias) and its input column of the first encoder
    layer (``enc.W1[:, i]``, ``h`` entries) side by side."""
    return np.column_stack([decoder_rows(model), np.asarray(model[input_key(model)], np.float64).T])


class FedAvgIdleRows(Attack):
    """``fedavg_idle_rows`` (module docstring): the items whose output row or input column in a
    FedAvg-AE update left the path of an untouched one. ``tol`` and ``max_steps`` as
    ``PersonalFRIdleRows``'s."""

    name = "fedavg_idle_rows"
    view = ViewSpec.server()
    protocols = ("fedavg-ae",)

    def __init__(self, tol: float = 64.0, max_steps: int = 4096) -> None:
        self.tol = float(tol)
        self.max_steps = int(max_steps)

    def run(self, view: View) -> dict[str, Guess]:
        sent: dict[str, dict[int, dict]] = {}
        back: dict[str, dict[int, dict]] = {}
        for m in view.messages:
            if m.kind == "model" and m.outgoing and m.payload is not None:
                sent.setdefault(m.receiver, {})[m.round] = m.payload["model"]
            elif m.kind == "update" and not m.outgoing and m.sender is not None and m.payload is not None:
                back.setdefault(m.sender, {})[m.round] = m.payload["model"]
        return idle_guesses(view, sent, back, item_rows, call_kind="model",
                            keep=view.public.config.client_momentum == "keep", masked=False,
                            tol=self.tol, max_steps=self.max_steps)
