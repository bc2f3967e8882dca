"""Protocols as actors: each module holds one protocol's actor coroutines and a ``build``
function that places them on any transport. Nothing here imports simpy or asyncio."""

PROTOCOLS = {
    "demo": "federated gradient descent on a linear model (kernel demo)",
    "fedrec": "FedRec: federated PMF(B), PMF(S), SVD++(S) with user averaging or hybrid filling",
    "personalfr": "PersonalFR: private encoders, a shared decoder, Partial Compression of the active decoder rows",
    "fedavg-ae": "FedAvg on PersonalFR's autoencoder: whole-model local training and averaging (baseline)",
    "fedrecpp": "FedRec++: FedRec PMF(B) with denoising clients that make hybrid filling lossless",
    "fpl": "FPL: federated pair-wise (BPR) learning; clients send each positive-item update with probability pi",
    "fcf": "FCF: federated implicit MF; every client uploads gradients for all m items each round (baseline)",
}
