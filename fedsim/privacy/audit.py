"""Running a protocol under observation, and scoring attacks on what was observed.

``capture`` runs one registered protocol on a network with a ``Recorder`` as its tap and returns
a ``Capture``: the recording, what is public about the run, the ground truth (each client's true
item set, from the training data: never shown to an attack) and the protocol's ``Result`` (its
accuracy and its ledger, for the costs). ``evaluate`` runs attacks on a capture through their
declared views and scores them (``fedsim.privacy.metrics``); ``score_links`` scores a linking
attack against the ledger's true senders.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ..kernel import SimNetwork
from ..kernel.ledger import SEQ, SRC
from ..protocols import REGISTRY
from ..protocols.common import client_names
from .attacks.base import Attack, AttackRun, run_attack
from .attacks.size import score_sizes, size_estimate
from .metrics import score_inference
from .record import Recorder
from .views import Public, ref_of

__all__ = ["CALL_KINDS", "Capture", "UPLOAD_KINDS", "attack_capture", "capture", "known_answer_ratings",
           "observed_clients", "partly_seen", "score_links", "truth_of", "upload_rounds", "view_key"]

# the kinds of message a client of each protocol uploads to the server (the masked ones too: the
# server saw a secure-aggregation upload and could read nothing of it); PersonalFR's clients send their
# indices once (with compression only) and an update in every round they are selected in (read by
# personalfr_idle_rows without compression); FedAvg-AE's send their whole trained model, an update
UPLOAD_KINDS = {"fedrec": ("gradients", "masked"), "fedrecpp": ("gradients",), "fpl": ("update", "masked"),
                "fcf": ("gradients",), "personalfr": ("indices", "update"), "fedavg-ae": ("update",)}

# the kinds of message by which the server of each protocol calls a client to upload in a round
# (each such call expects one upload of the round's); PersonalFR's clients upload their indices once,
# uncalled (round 0), and an update when sent a decoder; FedAvg-AE's an update when sent the model
CALL_KINDS = {"fedrec": ("model",), "fedrecpp": ("model",), "fpl": ("model",), "fcf": ("model",),
              "personalfr": ("decoder",), "fedavg-ae": ("model",)}


@dataclass
class Capture:
    """One observed protocol run: ``protocol``, ``config``, ``recorder`` (the tap's recording),
    ``public``, ``truth`` (client id -> true item set; for the audit, never for attacks),
    ``result`` (the protocol's ``Result``), ``network`` (the network it ran on), ``wall_s``
    (seconds the run took), ``seed`` and ``label`` (with the seed, what keys the references)."""

    protocol: str
    config: Any
    recorder: Recorder
    public: Public
    truth: dict[str, np.ndarray]
    result: Any
    network: Any
    wall_s: float
    seed: int = 0
    label: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> bytes:
        """The key of this capture's opaque message references (``view_key``)."""
        return view_key(self.seed, self.label or self.protocol)


def view_key(seed: int, label: str) -> bytes:
    """The key of the views' opaque message references for one capture (derived from its seed:
    runs stay reproducible; attacks never receive it)."""
    return hashlib.blake2b(f"fedsim.privacy:{seed}:{label}".encode(), digest_size=16).digest()


def truth_of(protocol: str, data, job) -> dict[str, np.ndarray]:
    """Each client's true item set: the items of its user (its users, for PersonalFR and
    FedAvg-AE) in the training ``data``."""
    csr = data.by_user()
    rows = [np.asarray(csr.row_indices(u), dtype=np.int64) for u in range(int(data.n_users))]
    groups = getattr(job, "groups", None)
    if groups is not None:
        return {name: np.unique(np.concatenate([rows[u] for u in g])) if len(g) else np.empty(0, np.int64)
                for name, g in zip(job.clients, groups)}
    return {name: rows[u] for u, name in enumerate(client_names(int(data.n_users)))}


def capture(protocol: str, data, config, *, net=None, seed: int = 0, rounds: Iterable[int] | None = None,
            nodes: Iterable[str] | None = None, kinds: Iterable[str] | None = None, test=None,
            build_kw: Mapping[str, Any] | None = None, given: Iterable[str] | None = None) -> Capture:
    """Run ``protocol`` (a registry name) on ``data`` with ``config`` on ``net`` (default: an
    ideal ``SimNetwork`` seeded ``seed``) with a ``Recorder`` that keeps the payloads of
    ``rounds``, ``kinds`` and ``nodes`` (None: all; see ``Recorder``). Returns a ``Capture``.
    ``given``: the names of the settings of ``config`` the caller chose (as ``fedsim run``'s
    ``--set``); given, the spec's ``check_data(config, data, given)`` checks the configuration
    against ``data`` first, as ``fedsim run`` does (a ``ConfigError`` naming the setting, before
    anything runs: PersonalFR's implicit ``threshold`` left at its default on ratings 1 to 10);
    None (the default): not checked, as ``spec.build`` does not. Raises what the run raises."""
    spec = REGISTRY[protocol]
    if given is not None and spec.check_data is not None and spec.data != "none":
        spec.check_data(config, data, frozenset(given))
    net = SimNetwork(seed=seed) if net is None else net
    rec = Recorder(rounds=rounds, kinds=kinds, nodes=nodes).attach(net)
    t0 = time.perf_counter()
    job = spec.build(net, data, config, test=test, **dict(build_kw or {}))
    result = job.collect(net.run())
    wall = time.perf_counter() - t0
    clients = tuple(job.clients)
    public = Public(protocol, config, "server", clients, int(data.n_items))
    return Capture(protocol, config, rec, public, truth_of(protocol, data, job), result, net, wall, seed)


def _window(rounds):
    """The round-label test of a window as ``build_view`` reads it: up to that round (an int), in
    that set, or every round (None)."""
    if rounds is None:
        return lambda r: True
    if isinstance(rounds, int):
        top = int(rounds)
        return lambda r: r <= top
    allowed = frozenset(int(r) for r in rounds)
    return lambda r: r in allowed


def observed_clients(cap: Capture, rounds=None, *, recorded: bool = False) -> list[str]:
    """The clients the server saw upload in ``rounds`` (as ``build_view`` reads it: up to that
    round, an int, or in that set; None: every round), sorted: the senders of a delivered message
    of one of the protocol's ``UPLOAD_KINDS`` to the server. A client whose upload was lost, who
    dropped out, whom the server did not call in those rounds (FPL's draw) or who uploads nothing
    (a FedRec++ denoiser) is not among them: no attack on the uploads can have read her.
    ``recorded``: only the uploads whose payload the recorder kept (its filters left the others
    out: the adversary saw them, the audit cannot attack them)."""
    from ..kernel.ledger import DST, KIND, ROUND, SRC, STATUS

    kinds = set(UPLOAD_KINDS.get(cap.protocol, ()))
    inside = _window(rounds)
    seen = set()
    for row, doc, _ in cap.recorder.entries:
        if row[DST] == cap.public.server and row[KIND] in kinds and row[STATUS] == "delivered" and inside(row[ROUND]):
            if doc is not None or not recorded:
                seen.add(row[SRC])
    return sorted(seen)


def upload_rounds(cap: Capture, rounds=None) -> dict[str, tuple[frozenset, frozenset]]:
    """Per client, ``(called, seen)``: the training rounds of the window ``rounds`` (read as
    ``observed_clients`` reads it) in which the server called her (sent her a message of the
    protocol's ``CALL_KINDS``, whatever became of it: it expected an upload) and those in which
    it saw her upload (a delivered message of its ``UPLOAD_KINDS`` to the server, payload recorded
    or not). Rounds, not calls: a client called twice in one round (FedRec's stochastic server
    draws with replacement) counts the round once. Every client with a call or an upload in the
    window is listed."""
    from ..kernel.ledger import DST, KIND, ROUND, SRC, STATUS

    ups = set(UPLOAD_KINDS.get(cap.protocol, ()))
    calls = set(CALL_KINDS.get(cap.protocol, ()))
    server = cap.public.server
    inside = _window(rounds)
    called: dict[str, set] = {}
    seen: dict[str, set] = {}
    for row, _, _ in cap.recorder.entries:
        r = row[ROUND]
        if r < 0 or not inside(r):
            continue
        if row[SRC] == server and row[KIND] in calls:
            called.setdefault(row[DST], set()).add(r)
        elif row[DST] == server and row[KIND] in ups and row[STATUS] == "delivered":
            seen.setdefault(row[SRC], set()).add(r)
    return {u: (frozenset(called.get(u, ())), frozenset(seen.get(u, ()))) for u in sorted({*called, *seen})}


def partly_seen(cap: Capture, rounds=None, clients: Iterable[str] | None = None) -> list[str]:
    """Of ``clients`` (default: ``observed_clients(cap, rounds)``), sorted, those the server saw
    upload in the window and yet not in every round of it in which it called them
    (``upload_rounds``: a called round without an upload seen: lost, past a deadline, dropped
    out, or the model never reached her). A round she was not called in (FPL's draw) does not
    make her partly seen, and a single-round window has none (a client called and not seen
    there is unseen). An attack that accumulates evidence over rounds (``intersection``) read
    fewer uploads of these clients than the window holds."""
    per = upload_rounds(cap, rounds)
    pick = observed_clients(cap, rounds) if clients is None else list(clients)
    out = []
    for u in pick:
        called, seen = per.get(u, (frozenset(), frozenset()))
        if seen and called - seen:
            out.append(u)
    return sorted(out)


def attack_capture(attack: Attack, cap: Capture, *, rounds=None, targets: Iterable[str] | None = None):
    """Run ``attack`` on ``cap`` (through its declared view, up to ``rounds``) and score it:
    returns ``(AttackRun, rows)`` with one ``score_inference`` row per target (default: every
    client the server saw upload in ``rounds`` with a payload the recorder kept,
    ``observed_clients(recorded=True)``: one whose upload was lost, who dropped out or was not
    called cannot be attacked from it, nor one whose uploads the recorder's filters left out, and
    is left out, not scored as a miss; of an attack on a sample of them, ``AttackRun.sample``, those
    only, as IMIA with ``max_users``; a client scored whom the attack gave no answer is a miss; for a linking attack, one row per
    anonymous message delivered, see ``score_links``; for a size attack, one row, ``score_sizes``
    of its estimates, which for unmerged FPL and for FCF are not sizes of I_u: only their rank
    correlation is scored; the row's ``size_estimate`` says what they are)."""
    run = run_attack(attack, cap.recorder, cap.public, rounds=rounds, key=cap.key)
    if attack.about == "links":
        return run, score_links(run, cap, rounds=rounds)
    if attack.about == "sizes":
        truth = cap.truth if targets is None else {u: cap.truth[u] for u in targets if u in cap.truth}
        return run, [score_sizes(run.inference, truth, estimate=size_estimate(cap.protocol, cap.config))]
    tg = list(targets) if targets is not None else observed_clients(cap, rounds, recorded=True)
    if targets is None and run.sample is not None:  # an attack on a sample (IMIA's max_users): those clients
        chosen = set(run.sample)
        tg = [u for u in tg if u in chosen]
    return run, score_inference(run.inference, cap.truth, cap.public.n_items, tg)


def score_links(run: AttackRun, cap: Capture, kind: str = "noise", rounds=None) -> list[dict]:
    """One row per delivered message of ``kind`` in ``rounds`` (as ``build_view`` reads it: up to
    that round, or in that set; None: all): ``correct`` (1 if the attack's guessed sender is the
    true one, from the ledger), ``candidates`` (how many senders uploaded to the server in that
    round: the random-guess baseline is their inverse) and ``linked`` (1 if it named a sender)."""
    from ..kernel.ledger import DST_ROLE, KIND, ROUND, STATUS

    truth: dict[int, tuple] = {}
    uploads: dict[int, int] = {}
    if rounds is None:
        keep = None
    elif isinstance(rounds, int):
        keep = range(-(1 << 30), int(rounds) + 1)
    else:
        keep = set(int(r) for r in rounds)
    for row, _, net in cap.recorder.entries:
        if keep is not None and row[ROUND] not in keep:
            continue
        if row[KIND] == kind and row[STATUS] == "delivered":
            truth[ref_of((int(net) << 40) | row[SEQ], cap.key)] = (row[SRC], row[ROUND])
        elif row[KIND] == "gradients" and row[DST_ROLE] == "server" and row[STATUS] == "delivered":
            uploads[row[ROUND]] = uploads.get(row[ROUND], 0) + 1
    rows = []
    for ref, (src, rnd) in truth.items():
        guess = run.inference.get(ref)
        n = uploads.get(rnd, 0)
        rows.append({"target": src, "round": rnd, "correct": float(guess == src), "linked": float(guess is not None),
                     "candidates": float(n), "correct_rand": 1.0 / n if n else 0.0})
    return rows


def known_answer_ratings(n_users: int = 20, n_items: int = 90, per_user: tuple[int, int] = (24, 30), seed: int = 0):
    """Explicit ``Ratings`` whose answers the FedRec attacks know by construction: every user
    rates between ``per_user`` items (more than the latent dimensions of the test presets, so the
    hybrid-filling check has enough sampled items) with integer ratings 1..5 whose mean is not an
    integer (so user averaging never gives a sampled item an integer rating). Seeded."""
    from ..data import Ratings

    rng = node_rng_for(seed)
    users, items, values = [], [], []
    for u in range(int(n_users)):
        k = int(rng.integers(per_user[0], per_user[1] + 1))
        its = np.sort(rng.choice(int(n_items), size=k, replace=False))
        r = rng.integers(1, 6, size=k).astype(np.float64)
        if float(r.mean()).is_integer():
            # move one rating by one level (or from 5 to 1): the mean moves by 1/k or -4/k, and with
            # k > 4 items it is no longer an integer
            r[0] = 1.0 + (r[0] % 5)
        users.append(np.full(k, u))
        items.append(its)
        values.append(r)
    return Ratings(np.concatenate(users), np.concatenate(items), np.concatenate(values).astype(np.float32),
                   n_users=int(n_users), n_items=int(n_items), name="privacy-known-answer")


def node_rng_for(seed: int):
    from ..seeding import node_rng

    return node_rng(int(seed), "privacy:known-answer")
