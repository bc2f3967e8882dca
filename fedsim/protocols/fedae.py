"""What PersonalFR and its FedAvg baseline share: the configuration, the federated evaluation,
the bookkeeping of a run, and placing one actor per user group.

Both protocols train the same autoencoder (``fedsim.math.autoencoder``) on the same prepared
task (``fedsim.math.ae_train.AETask``): dense training rows per user, private test entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Config, ConfigError, param
from ..math.jit import warm_up
from ..math import ae_train
from ..math import optim
from .common import SERVER, BadMessageError, all_finite, client_names
from .contract import Kind, Result, server_result

__all__ = [
    "FedAEConfig", "FedAEJob", "check_against_data", "check_clients", "check_threshold", "checked_download", "checked_items", "checked_params", "evaluate_clients",
    "merge_flops", "param_shapes", "place_actors", "prepare_task", "selection_size", "SHARED_KINDS", "tiny_autoencoder", "unscored",
]

# what both protocols send besides their training messages: the federated evaluation and the stop
SHARED_KINDS = (
    Kind("evaluate", "server", "client", "evaluation", "{t, dec or model}: the model to evaluate"),
    Kind("eval", "client", "server", "evaluation", "{sse, n, ndcg_sum, ndcg_users}"),
    Kind("stop", "server", "client", "control", "None"),
)


@dataclass(frozen=True)
class FedAEConfig(Config):
    """Hyper-parameters of PersonalFR and of the FedAvg baseline (``fedsim.protocols.fedavg_ae``).

    Defaults: Table II and the authors' code (SGD lr 0.1, Nesterov momentum 0.9, weight decay 5e-4, cosine
    annealing per round, clipping at 1, dropout 0.5 on the code, C = 0.1, K = 5, B = 10, 800 rounds).

    PersonalFR only: ``compression`` (Partial Compression: exchange and train only the active decoder; for
    it each client sends the server its item set once, ``indices``; without it no client sends one);
    ``merge`` (``"per_item"``: Eq. 5, each output row averaged over the clients that have it active;
    ``"algorithm1"``: Algorithm 1 as printed, rows a client lacks count with their previous value);
    ``uncompressed_training`` (with ``compression=False``: ``"full"`` trains and weight-decays every row of
    the whole decoder, as the authors' code; ``"masked"`` updates only the active rows, which makes it
    equal to ``compression=True, merge="algorithm1"``); ``encoder_input`` (``"dense"``: the private encoder
    has a column for every item, as the paper counts computation; ``"cut"``: it keeps only the columns of
    the client's own training items. The other columns only ever multiply zero inputs, in training and in
    prediction, so the model computes the same function (equal to rounding, tested); only the FLOPs and
    the memory differ).

    Both: ``client_momentum`` (``"keep"``: a client keeps its SGD momentum buffers between the rounds it
    is selected in, as the authors' code; ``"reset"``: fresh buffers every round, standard FedAvg, O(C M)
    memory instead of O(M) model-sized buffers); ``untouched`` (how a client's local steps treat the input
    columns and output rows of items its users did not rate, whose gradient is zero at every step:
    ``"lazy"`` applies their weight decay and momentum in one pass after the steps and computes the steps on
    the rest, ``"stepwise"`` steps the whole model every time; the same rule, equal to float rounding, see
    ``ae_train.local_train``). ``clients`` and ``threshold`` are used by ``build`` (how many clients the
    users are partitioned into, a ``ConfigError`` naming ``clients`` when more than the users; which
    ratings are positive in the implicit task).
    """

    rounds: int = param(800, "communication rounds T (at least 1: the federated evaluation follows the last "
                        "round)", min=1)
    fraction: float = param(0.1, "fraction C of clients selected per round", min=0, max=1, exclusive_min=True)
    local_epochs: int = param(5, "local epochs K", min=1)
    batch: int = param(10, "local batch size B (users)", min=1)
    lr: float = param(0.1, "client SGD learning rate", min=0, exclusive_min=True)
    momentum: float = param(0.9, "SGD momentum", min=0)
    nesterov: bool = param(True, "Nesterov momentum")
    weight_decay: float = param(5e-4, "weight decay", min=0)
    clip: float = param(1.0, "gradient-norm clipping", min=0)
    dropout: float = param(0.5, "dropout on the code", min=0, max=1)
    schedule: str = param("cosine", "learning-rate schedule over the rounds", choices=("cosine", "constant"))
    hidden: tuple[int, ...] = param((256, 128), "encoder widths (the decoder mirrors them)", min=1)
    task: str = param("explicit", "explicit ratings (RMSE) or implicit feedback (NDCG@10)",
                      choices=tuple(ae_train.TASKS))
    compression: bool = param(True, "PersonalFR: Partial Compression (exchange only the active decoder)")
    merge: str = param("per_item", "PersonalFR: Eq. 5 merge per item, or Algorithm 1 as printed",
                       choices=("per_item", "algorithm1"))
    uncompressed_training: str = param("full", "PersonalFR without compression: train the whole decoder "
                                       "(full) or only the active rows (masked)", choices=("full", "masked"))
    encoder_input: str = param("dense", "PersonalFR encoder width: every item (dense) or the client's own "
                               "items (cut; same model, less memory)", choices=("dense", "cut"))
    client_momentum: str = param("keep", "clients keep their momentum between rounds (keep) or not (reset)",
                                 choices=("keep", "reset"))
    untouched: str = param("lazy", "local steps on parameters the client's data cannot reach: weight decay and "
                           "momentum in one pass after the steps (lazy) or at every step (stepwise)",
                           choices=("lazy", "stepwise"))
    dtype: str = param("float32", "parameter and wire dtype", choices=("float32", "float64"))
    eval_every: int = param(0, "federated evaluation every this many rounds (and after the last; 0: last only)",
                            min=0)
    eval_k: int = param(10, "NDCG cut-off", min=1)
    clients: int = param(100, "clients M the users are partitioned into (0: one user per client; at most the "
                         "data's users, e.g. 30 on tiny)", min=0)
    threshold: float = param(3.5, "implicit task: ratings >= threshold are positive (3.5 is for "
                            "1-5 stars; on 1-10 ratings the paper's > 8 is 8.5)")
    deadline: float | None = param(None, "seconds the server waits for the selected clients' updates (and for "
                                   "evaluations) before merging what arrived (none: until all arrive)",
                                   min=0, exclusive_min=True, none_ok=True)

    def validate(self) -> None:
        # what the clients' training would refuse once the run has started (optim.sgd_step,
        # ae.loss_and_grads), refused here, naming the key as the user sets it (not this class,
        # which PersonalFR and FedAvg-AE share: "FedAEConfig.dropout" named neither protocol)
        if self.nesterov and self.momentum <= 0:
            raise ConfigError("nesterov: Nesterov momentum needs momentum > 0 (for plain SGD "
                              "set momentum=0 and nesterov=false)", "nesterov")
        if not self.hidden:  # (the server's model init refused it as a bare ValueError, a traceback)
            raise ConfigError("hidden must name at least one layer width (comma separated, "
                              "e.g. 256,128), got none", "hidden")
        if self.dropout >= 1:
            raise ConfigError(f"dropout must be below 1 (it is the rate of units dropped), "
                              f"got {self.dropout}", "dropout")

    @property
    def loss(self) -> str:
        return ae_train.TASKS[self.task]

    def lr_at(self, t: int) -> float:
        """Learning rate of round ``t`` (1-based): cosine annealing from ``lr`` over ``rounds`` rounds."""
        if self.schedule == "constant":
            return self.lr
        return optim.cosine_lr(self.lr, t - 1, self.rounds)

    def wants_eval(self, t: int) -> bool:
        return t == self.rounds or bool(self.eval_every and t % self.eval_every == 0)


def check_threshold(threshold: float, ratings, given, data: str) -> None:
    """Refuse (``ConfigError`` naming ``threshold``) the default implicit ``threshold`` (3.5, for
    1-5 stars) on ``ratings`` above 5 unless the caller set it (``"threshold"`` in ``given``, the
    names of the settings the user set): on a 1-10 scale it made 4 to 10 positive, silently (the
    paper: > 3.5 on ML1M, > 8 on Anime, section IV-A). ``data`` names the data in the message
    (``"--data PATH"``, ``"the data (anime)"``). The PersonalFR scenarios (for their implicit
    task) and the protocols' ``ProtocolSpec.check_data`` (:func:`check_against_data`) call it."""
    if "threshold" in given or len(ratings) == 0:
        return
    values = np.asarray(ratings.values)
    lo, hi = float(values.min()), float(values.max())
    if hi > 5:
        raise ConfigError(f"--set threshold: {data} has ratings {lo:g} to {hi:g}, and the default threshold "
                          f"{threshold:g} (positive: rating >= threshold) is for 1-5 stars; set it (the paper's "
                          "Anime, positive above 8: --set threshold=8.5)", "threshold")


def check_clients(clients: int, n_users: int, given=None) -> None:
    """Refuse (``ConfigError`` naming ``clients``) more clients than users: each client holds at
    least one user. ``given`` (the names of the settings the user set, or None where they are not
    known) adds "(the default)" to a value the user did not set: ``fedsim run personalfr --data
    tiny`` is refused for a setting it never named."""
    if clients > n_users:
        default = " (the default)" if given is not None and "clients" not in given else ""
        raise ConfigError(f"clients = {clients}{default} is more than the {n_users} user{'' if n_users == 1 else 's'} of the data: each client "
                          f"holds at least one user (give clients <= {n_users}, or 0 for one user per client)",
                          "clients")


def check_against_data(cfg: FedAEConfig, ratings, given) -> None:
    """PersonalFR's and FedAvg-AE's ``ProtocolSpec.check_data``: with ``task = implicit``,
    :func:`check_threshold` on the ratings as loaded (``ratings.name`` names them); then
    :func:`check_clients` against their users."""
    if cfg.task == "implicit":
        check_threshold(cfg.threshold, ratings, given, f"the data ({ratings.name})" if ratings.name else "the data")
    check_clients(cfg.clients, int(ratings.n_users), given)


def checked_items(msg, n_items: int) -> np.ndarray:
    """A client's ``indices`` message: its items as int64, strictly increasing, in [0, n_items);
    else ``BadMessageError`` naming the client (the server slices and merges by these ids)."""
    items = msg.payload.get("items") if isinstance(msg.payload, dict) else None
    arr = np.asarray(items) if isinstance(items, np.ndarray) else None
    if arr is None or arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise BadMessageError(msg, f"items must be a 1-D integer array, got {type(items).__name__}")
    arr = arr.astype(np.int64)
    if arr.size and (arr[0] < 0 or arr[-1] >= n_items or (np.diff(arr) <= 0).any()):
        raise BadMessageError(msg, f"items must be strictly increasing ids in [0, {n_items})")
    return arr


def param_shapes(n_items: int, hidden, n_out: int | None = None, part: str | None = None) -> dict:
    """The shapes of ``ae.init_params(n_items, rng, hidden, n_out=n_out)``'s arrays (drawing
    nothing), those of the decoder only with ``part="dec"``: what a client checks the model or
    decoder it is sent against."""
    hidden = tuple(int(h) for h in hidden)
    n_out = int(n_items if n_out is None else n_out)
    shapes = {}
    for prefix, sizes in (("enc", (int(n_items),) + hidden), ("dec", tuple(reversed(hidden)) + (n_out,))):
        if part is not None and prefix != part:
            continue
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            shapes[f"{prefix}.W{layer}"] = (fan_out, fan_in)
            shapes[f"{prefix}.b{layer}"] = (fan_out,)
    return shapes


def checked_download(msg, field: str, shapes: dict, dtype, *, training: bool) -> dict:
    """A client's check of the server's ``decoder``/``model`` (``training``) or ``evaluate``
    message: ``msg.payload[field]`` as ``checked_params`` checks it (shapes and dtype), and, for
    training, ``t`` the int round the message is labelled with; else ``BadMessageError`` naming
    the server's message (a string t was a bare ValueError of the client, a float one taken as its
    integer part, a parameter dict of other keys or shapes a bare AttributeError, IndexError or
    ValueError deep in the training, and a decoder slice of other rows than the client's items
    one too: a client whose ``indices`` did not say its items, e.g. an empty list)."""
    if training:
        t = msg.payload.get("t") if isinstance(msg.payload, dict) else None
        if type(t) is not int or t != msg.round:
            raise BadMessageError(msg, f"t must be the round the message is labelled with ({msg.round}), got {t!r}")
    return checked_params(msg, field, shapes, dtype)


def checked_params(msg, field: str, shapes: dict, dtype) -> dict:
    """``msg.payload[field]``, a parameter dict, if it has exactly the keys of ``shapes`` and
    arrays of those shapes and of the run's ``dtype`` (what its clients send); else
    ``BadMessageError`` naming the client (a merge would broadcast an array of another shape into
    the mean, or fail without saying whose it was; a list of numbers stopped the server with a
    bare AttributeError, bool or integer arrays were averaged as numbers, a float16 slice was a
    bare NotImplementedError of the compiled merge, float64 arrays in a float32 run were taken
    at twice the bytes on the ledger)."""
    params = msg.payload.get(field) if isinstance(msg.payload, dict) else None
    got = {k: np.shape(v) for k, v in params.items()} if isinstance(params, dict) else None
    if got != shapes:
        raise BadMessageError(msg, f"{field} must hold arrays of shapes {shapes}, got "
                                   f"{got if got is not None else type(params).__name__}")
    dt = np.dtype(dtype)
    wrong = {k: (v.dtype.name if isinstance(v, np.ndarray) else type(v).__name__)
             for k, v in params.items() if not (isinstance(v, np.ndarray) and v.dtype == dt)}
    if wrong:
        raise BadMessageError(msg, f"{field} must hold {dt.name} arrays (the run's dtype), got {wrong}")
    return params


EVAL_FIELDS = ("sse", "n", "ndcg_sum", "ndcg_users")


def checked_eval(msg, task: str) -> dict:
    """A client's ``eval`` answer, if it holds the four sums as numbers that some test entries
    of ``task`` give: ``sse`` >= 0, counts ``n`` and ``ndcg_users`` whole numbers >= 0, ``0 <=
    ndcg_sum <= ndcg_users`` (an NDCG is at most 1); the explicit task's sums are ``sse`` over
    ``n`` entries (no entry: ``sse`` 0) and no NDCG (``ndcg_sum``, ``ndcg_users`` 0), the implicit
    task's ``ndcg_sum`` over ``ndcg_users`` users, each with one test entry or more (``ndcg_users <=
    n``), and no ``sse`` (0); inf or NaN sums are a diverged model's predictions and are taken (the
    metric then says so); else ``BadMessageError`` naming the client (the sums went into the
    reported RMSE and NDCG as sent, a missing one as 0; an ``sse`` without entries raised the
    others' RMSE, an implicit answer's NDCG users outnumbering its entries lowered their NDCG)."""
    p = msg.payload
    if not isinstance(p, dict) or any(k not in p for k in EVAL_FIELDS):
        got = sorted(p) if isinstance(p, dict) else type(p).__name__
        raise BadMessageError(msg, f"eval must hold {', '.join(EVAL_FIELDS)}, got {got}")
    sse, n, ndcg, users = (p[k] for k in EVAL_FIELDS)
    ok = (type(n) is int and type(users) is int and n >= 0 and users >= 0
          and type(sse) in (int, float) and (sse >= 0 or sse != sse)
          and type(ndcg) in (int, float) and (0 <= ndcg <= users * (1 + 1e-9) or ndcg != ndcg))
    if not ok:
        raise BadMessageError(msg, f"eval must carry sse >= 0, counts n, ndcg_users >= 0 and 0 <= ndcg_sum <= "
                                   f"ndcg_users, got sse={sse!r}, n={n!r}, ndcg_sum={ndcg!r}, ndcg_users={users!r}")
    if task == "explicit":
        ok, rule = ndcg == 0 and users == 0 and (n > 0 or sse == 0), "ndcg_sum = ndcg_users = 0 and sse = 0 when n = 0"
    else:
        ok, rule = sse == 0 and users <= n, "sse = 0 and ndcg_users <= n"
    if not ok:
        raise BadMessageError(msg, f"eval of the {task} task must carry {rule}, got sse={sse!r}, n={n!r}, "
                                   f"ndcg_sum={ndcg!r}, ndcg_users={users!r}")
    return p


def selection_size(fraction: float, n_clients: int) -> int:
    """Clients per round: ``max(int(C M), 1)`` (McMahan et al.'s FedAvg rounding)."""
    return max(int(fraction * n_clients + 1e-9), 1)


async def evaluate_clients(ctx, clients: list[str], payload: dict, t: int, cfg: FedAEConfig) -> dict:
    """Server side of a federated evaluation: send ``payload`` (the model) to every client as
    ``evaluate``, add up the test sums of their ``eval`` answers, return the metrics of round ``t``."""
    await ctx.broadcast(clients, "evaluate", payload)
    # the metrics are over the test entries of the clients that answered in time
    got = await ctx.gather("eval", senders=clients, round=t, timeout=cfg.deadline)
    sums = ae_train.add_sums(checked_eval(m, cfg.task) for m in got)
    out = ae_train.finish_eval(sums, cfg.task)
    out["round"] = t
    out["missing"] = len(got.missing)  # clients whose answer did not arrive by the deadline
    return out


def unscored(row: dict, task: str) -> bool:
    """Whether evaluation ``row`` (``finish_eval``'s) over some test entry (``n`` > 0) has no
    finite figure: some prediction was not finite (a diverged model, e.g. a client's private
    encoder), not a score. A row over no entry is NaN for want of one: not this."""
    key = "rmse" if task == "explicit" else "ndcg"
    return row["n"] > 0 and not np.isfinite(row[key])


def merge_flops(slices) -> int:
    """FLOPs of merging received parameter dicts: a multiply-add per received scalar and one
    division per merged scalar."""
    received = sum(int(v.size) for s in slices for v in s.values())
    return 2 * received + max((sum(int(v.size) for v in s.values()) for s in slices), default=0)


def prepare_task(data, test, cfg: FedAEConfig, seed: int) -> tuple[ae_train.AETask, list[np.ndarray]]:
    """The ``AETask`` of ``data`` (training ``Ratings``) and ``test`` (held-out ``Ratings`` or
    None), and the user groups: ``cfg.clients`` balanced groups drawn with ``seed`` (0: one user
    per client). Raises ``ConfigError`` naming ``clients`` when it is more than the data's users."""
    from ..data import partition_users

    empty = (np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32))
    te = empty if test is None else (test.users, test.items, test.values)
    task = ae_train.prepare((data.users, data.items, data.values), te, int(data.n_users), int(data.n_items),
                            task=cfg.task, threshold=cfg.threshold)
    n = int(data.n_users)
    M = cfg.clients or n
    check_clients(M, n)  # (partition_users' ValueError, a traceback from `fedsim run personalfr --data tiny`)
    return task, partition_users(n, M, seed=seed)


@dataclass
class FedAEJob:
    """What ``place_actors`` placed on a network; ``collect`` gathers a run's results."""

    protocol: str
    cfg: FedAEConfig
    clients: list[str]
    groups: list[np.ndarray]
    n_items: int

    def collect(self, run) -> Result:
        """``params``: the shared model the server holds at the end (PersonalFR: the decoder;
        FedAvg: the whole autoencoder) and, for PersonalFR, each client's private encoder under
        ``enc:<client>:<name>`` (the experimenter's copy: it was never sent); ``metrics``: the
        federated evaluations, one per evaluated round (``missing``: the clients whose answer did not
        arrive; PersonalFR's ``left_out``: the clients whose indices never arrived, not asked);
        ``info``: ``best`` and ``final`` evaluation (the paper reports the best), ``client_flops``
        (the training FLOPs every client charged, ``RunResult.flops`` under ``train``: also those of
        a client that dropped out or was closed at the run's end before returning, see
        ``lost_clients``; a training step its dropout cut does not count), ``server_flops``,
        ``selected`` (the clients of every round), ``clients`` (each finished client's return value),
        ``diverged_at``: the round (1-based) at which the server found the shared
        model not finite, or an evaluation's predictions not finite, and stopped (the rounds after it did not
        run, that evaluation is not in ``metrics``); else ``cfg.rounds`` if a client's private encoder is not
        finite at the end (PersonalFR: known only then, when no evaluation saw it); else None."""
        srv = server_result(run)
        hist = list(srv["history"])
        key = "rmse" if self.cfg.task == "explicit" else "ndcg"
        best = None
        vals = [h[key] for h in hist]
        if any(not np.isnan(v) for v in vals):  # (all NaN, e.g. no test entry or a diverged run: no best)
            i = int(np.nanargmin(vals) if key == "rmse" else np.nanargmax(vals))
            best = hist[i]
        shared = srv["decoder"] if "decoder" in srv else srv["model"]
        params = dict(shared)
        done = {c: run.results[c] for c in self.clients if c in run.results}
        for c, r in done.items():
            enc = r.get("encoder")
            if enc:
                params.update({f"enc:{c}:{k}": v for k, v in enc.items()})
        diverged_at = srv.get("diverged_at")
        if diverged_at is None and not all_finite(*(r.get("encoder") or {} for r in done.values())):
            diverged_at = self.cfg.rounds  # a private encoder: known only to have happened by the end
        info = {
            "diverged_at": diverged_at,
            "final": hist[-1] if hist else None,
            "best": best,
            # the kernel's count, not the return values: a client that never returned took its
            # own with it. Summed as ints per client (each exact: whole FLOPs added below 2**53)
            "client_flops": sum(int(run.flops.get(c, {}).get("train", 0.0)) for c in self.clients),
            "server_flops": int(srv["flops"]),
            "selected": srv["selected"],
            "clients": done,
            "missing": srv["missing"],
            "lost_clients": [c for c in self.clients if c not in done],
        }
        return Result(self.protocol, self.cfg, params, hist, run, info=info)


def place_actors(net, protocol: str, server, client, task: ae_train.AETask, groups: list[np.ndarray],
                 cfg: FedAEConfig, evaluate: bool, server_role: str = "server") -> FedAEJob:
    """Place ``server`` and one ``client`` per user group (``groups[m]``: the user indices of
    client ``m``) on ``net``."""
    clients = client_names(len(groups))
    net.before_run(warm_up)  # the actors call compiled kernels: numba's compiler started once (Network.before_run)
    net.add_node(SERVER, server, clients, task.n_items, cfg, evaluate, role=server_role)
    for name, users in zip(clients, groups):
        net.add_node(name, client, task.rows(users), cfg)
    return FedAEJob(protocol, cfg, clients, [np.asarray(g) for g in groups], task.n_items)


def tiny_autoencoder(clients: int = 3, rounds: int = 2, seed: int = 0):
    """The tiny preset of both autoencoder protocols: two users per client from the ``tiny``
    synthetic data (so 1 to 15 clients), every client every round, a small autoencoder (8, 4)."""
    from .presets import tiny_ratings

    data = tiny_ratings(clients, seed, users_per_client=2)
    return data, FedAEConfig(rounds=rounds, fraction=1.0, local_epochs=1, hidden=(8, 4), batch=10, clients=clients)
