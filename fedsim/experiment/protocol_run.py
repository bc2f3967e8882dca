"""Any registered protocol as a scenario: ``fedsim run NAME`` where NAME is a protocol.

The scenario's parameters are the protocol's configuration fields (declared once, in its
``Config``), plus ``test_frac``. It loads ``--data`` (explicit ratings as they are, implicit
protocols on the binarized data), holds out a fraction of each user's ratings as test data (the
most recent ones when the data has timestamps and the protocol learns from implicit feedback, a
random choice otherwise, from a generator derived from (--seed, "split")), after the spec's
``check_data`` (if any) checked the configuration against the data as loaded (a ``ConfigError``
naming the setting, e.g. PersonalFR's implicit ``threshold`` left at 3.5 on ratings 1 to 10),
builds the protocol on the network the run options describe,
runs it (refusing, with a ``ContractError``, a ``build`` that returns no job, a ``collect`` that
returns no ``Result`` and a run that sent a message its spec does not declare) and reports: the protocol's own evaluations per round, a test evaluation of the final
model where the protocol's result can predict ratings, the traffic per message kind (with each
kind's declared purpose) and per role, and what was lost or missing. A run whose model diverged
(the protocol's ``info["diverged_at"]``) says so: a ``diverged_at`` column in the summary and a
note in report.md (a final model whose parameters stayed finite but whose test predictions are
not: its ``test_error`` and the same note, caveat ``diverged``); so does a run that left something out (``info["missing"]`` records, lost
clients): the ``missing`` table and an **Incomplete** note; and a run whose protocol could not use
a setting as given (``info["adjusted"]`` records ``{setting, asked, used, why}``, e.g. FPL's
``clients_per_round`` beyond the clients there are): the ``adjusted`` table, an **Adjusted** note
(caveat ``adjusted``) and a line on stderr.
The module's ``check(config, load, given)`` (:func:`check_point`: the configuration and the spec's
``check_data``, without running) is what ``fedsim sweep`` checks each point with before it runs any.
"""

from __future__ import annotations

import types
from typing import Any, Callable

import numpy as np


from ..config import ConfigError
from .context import RunContext
from .params import Param, params_from
from .report import plural

__all__ = ["DEFAULT_TEST_FRAC", "check_point", "hold_out", "protocol_config", "protocol_scenario", "split_data"]

DEFAULT_DATA = "tiny"
DEFAULT_TEST_FRAC = 0.2  # test_frac's default (fedsim run NAME; fedsim trace NAME --eval)


def protocol_scenario(name: str) -> types.ModuleType:
    """A scenario module (``PARAMS``, ``run``, a docstring) that runs registered protocol
    ``name``. Raises ``KeyError`` if no such protocol is registered."""
    from ..protocols import REGISTRY

    spec = REGISTRY[name]
    mod = types.ModuleType(f"fedsim_protocol_{name.replace('-', '_')}")
    mod.__doc__ = f"{spec.summary} (protocol {name}: one run, its metrics and its ledger)."
    params: dict[str, Param] = params_from(spec.Config)
    if spec.data != "none":
        params["test_frac"] = Param(DEFAULT_TEST_FRAC, "fraction of each user's ratings held out to evaluate the final model "
                                    "(0: none)", min=0.0, max=0.9)
    mod.PARAMS = params
    mod.DEFAULT_DATA = DEFAULT_DATA if spec.data != "none" else "synthetic"
    mod.TAKES_DATA = spec.data != "none"  # a protocol that makes its own data refuses --data
    mod.PROTOCOL = name
    mod.run = lambda ctx: run_protocol(ctx, name)
    # what a sweep checks of each point before it runs any (a check_data error is each point's otherwise)
    mod.check = lambda config, load, given: check_point(name, config, load, given)
    return mod


def protocol_config(spec, config: dict[str, Any]):
    """``spec.Config`` of a run's resolved parameters ``config`` (``test_frac`` left out, lists as
    tuples); a ``ConfigError`` naming the field for values that do not go together."""
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items() if k != "test_frac"}
    return spec.Config(**fields)


def check_point(name: str, config: dict[str, Any], load, given) -> None:
    """What a run of protocol ``name`` with the resolved parameters ``config`` would refuse
    before building its network, checked without running it (``fedsim sweep`` calls it, as the
    scenario module's ``check``, for every point before it runs any): the configuration
    (:func:`protocol_config`) and the spec's ``check_data(cfg, load(), given)``, ``load`` a
    function returning the ``Ratings`` of ``--data`` as loaded (called only when the spec has a
    ``check_data``) and ``given`` the names of the settings the user set. Raises what the run
    would: a ``ConfigError`` naming the setting."""
    from ..protocols import REGISTRY

    spec = REGISTRY[name]
    cfg = protocol_config(spec, config)
    if spec.data != "none" and spec.check_data is not None:
        spec.check_data(cfg, load(), frozenset(given))


def test_scores(result, test) -> dict[str, Any]:
    """``test_mae`` and ``test_rmse`` of ``result``'s model (a protocol whose model predicts
    ratings) on the ``test`` ratings of the users still present at the end, with
    ``test_users_left_out`` when some were left out; ``test_error`` instead when the model cannot
    be evaluated (a diverged one) or no user is left to evaluate (all those with test ratings
    dropped out, or the test split holds no rating: a ``test_frac`` too small for the data);
    nothing without a model or test ratings. A client that dropped
    out took its user factor with it (``info["lost_users"]``: the model holds zeros there, which
    predict the lowest rating): its ratings would be scored as if it had trained, so they are left
    out, as the protocols' own evaluations leave out clients that do not answer."""
    model = result.model
    if test is None or model is None or not hasattr(model, "evaluate"):
        return {}
    users, items, values, left_out = result.present(test.users, test.items, test.values)
    out: dict[str, Any] = {"test_users_left_out": left_out} if left_out else {}
    if not len(users):
        # every user with test ratings dropped out, or there was none (an empty test split): a mean
        # over no rating is no figure (it was NaN, with NumPy's "mean of empty slice" warnings, in
        # the columns of a score)
        out["test_error"] = ("no user evaluated: " + (f"all {left_out} users with test ratings dropped out"
                                                      if len(test.users) else "the test ratings are empty"))
        return out
    try:
        out["test_mae"], out["test_rmse"] = model.evaluate(users, items, values)
    except Exception as exc:  # a diverged model cannot be evaluated: say so instead (and who was left out)
        out["test_error"] = f"{type(exc).__name__}: {exc}"
    return out


def evaluated_nobody(row: dict) -> bool:
    """Whether a protocol's metric row is over no user or no rating (its count, ``users`` as
    FPL's or ``n`` as FedRec's and the autoencoders', is 0): its metrics are NaN, no figure."""
    count = row.get("users", row.get("n"))
    return isinstance(count, (int, np.integer)) and not isinstance(count, bool) and count == 0


def split_data(ctx: RunContext, spec, cfg: Any = None) -> tuple[Any, Any]:
    """``(train, test)`` Ratings for protocol ``spec`` from ``--data`` and ``test_frac`` (see the
    module docstring); ``(None, None)`` for a protocol that makes its own data. With ``cfg`` (the
    run's configuration), the spec's ``check_data(cfg, ratings, ctx.given)`` first checks it
    against the data as loaded (a ``ConfigError`` naming the setting that does not fit)."""
    if spec.data == "none":
        return None, None
    ratings = ctx.load_data()
    if cfg is not None and spec.check_data is not None:
        # a default meant for other data (PersonalFR's implicit threshold 3.5 on ratings 1 to 10), refused
        # unless it was asked for; before the split, the binarizing and the network
        spec.check_data(cfg, ratings, frozenset(ctx.given))
    if spec.data == "implicit":
        ratings = ratings.binarize()
    return hold_out(spec, ratings, float(ctx.config.get("test_frac", 0.0)), ctx.seed, lambda: f"--data {ctx.data}")


def hold_out(spec, ratings, frac: float, seed: int, what: str | Callable[[], str]) -> tuple[Any, Any]:
    """``(train, test)``: ``frac`` of each user's ``ratings`` held out as test ratings for protocol
    ``spec``, as ``fedsim run`` holds them out (and ``fedsim trace --eval``, of its preset's data):
    the most recent ones when the protocol learns from implicit feedback and the data has
    timestamps, else a random choice from a generator derived from (``seed``, "split"). ``frac``
    0: ``(ratings, None)``. ``ConfigError`` (key ``test_frac``) when the split holds no rating out;
    ``what`` names the data there (``--data tiny``; or a function that returns it, called then)."""
    from ..data import per_user_random, temporal_holdout
    from ..seeding import node_rng

    if frac <= 0:
        return ratings, None
    if spec.data == "implicit" and ratings.timestamps is not None:
        train, test = temporal_holdout(ratings, frac)
    else:
        # a stream of its own, derived from (seed, "split"): default_rng(seed) was the very stream that
        # made a synthetic preset (generated at seed 0) under the default --seed 0, so which ratings were
        # held out repeated the generator's first draws
        train, test = per_user_random(ratings, frac, seed=node_rng(seed, "split"))
    if not len(test.users):
        # a protocol that evaluates refused it with a ValueError (a traceback from the command line),
        # one that does not reported a test error: the split asked for held nothing out
        raise ConfigError(f"test_frac = {frac:g} holds out no rating of {what() if callable(what) else what} "
                          f"({plural(len(ratings.users), 'rating')} of {plural(int(ratings.n_users), 'user')}): give a "
                          "larger test_frac, or 0 for no test split",
                          "test_frac")
    return train, test


def run_protocol(ctx: RunContext, name: str) -> None:
    """Run protocol ``name`` once with the configuration in ``ctx`` and report it."""
    from ..protocols import REGISTRY
    from ..protocols.contract import check_job, check_ledger, check_result, check_run

    spec = REGISTRY[name]
    cfg = protocol_config(spec, ctx.config)
    train, test = split_data(ctx, spec, cfg)  # (and spec.check_data: the configuration against the data)
    net = ctx.network()
    ctx.progress.update(0, 1, stage=f"{name} on {ctx.net.describe()}", rounds=getattr(cfg, spec.rounds_field, None))
    job = check_job(spec, spec.build(net, train, cfg, test=test))
    run = check_run(net.run(), net, ctx.net.transport)
    result = check_result(spec, job.collect(run), run)
    # the kinds table below reads each kind's purpose and roles from the spec: a kind it does not
    # declare was listed with '?', one sent between other roles under the declared ones
    check_ledger(spec, net.ledger)
    ctx.progress.update(1, 1)
    ctx.record_network(net)
    summary: dict[str, Any] = {"protocol": name, "rounds": getattr(cfg, spec.rounds_field)}
    diverged = result.info.get("diverged_at")
    if diverged is not None:
        # the protocol stopped there (or found non-finite parameters at the end): "rounds" is
        # what was asked for, and the table said nothing of it
        summary["diverged_at"] = int(diverged)
    # a real transport's clock is real seconds (results.json's measured_time_s), not simulated ones
    summary["simulated_s" if getattr(net, "simulated", True) else "measured_s"] = result.duration
    if train is not None:
        summary.update(users=train.n_users, items=train.n_items, train_ratings=len(train),
                       test_ratings=0 if test is None else len(test))
    summary.update(test_scores(result, test))
    if result.metrics:
        summary.update({f"final_{k}": v for k, v in result.metrics[-1].items() if k != "round"
                        and isinstance(v, (int, float))})
    t = net.ledger.totals()
    summary.update(messages=t["messages"], bytes=t["bytes"], lost_messages=t["lost_messages"],
                   missing_waits=t["missing"], lost_clients=len(result.info.get("lost_clients", result.run.offline)))
    ctx.table("summary", [summary], title=f"{spec.summary}: one run")
    if result.metrics:
        ctx.table("metrics", result.metrics, title="The protocol's own evaluations per round")
    nobody = [m["round"] for m in result.metrics if evaluated_nobody(m)]
    final_error = str(summary.get("test_error", ""))
    final_nobody = final_error.startswith("no user evaluated: ")
    if nobody or final_nobody:
        # a NaN where a score goes reads as a broken model; say that there was nobody to score,
        # and why (the final model's test evaluation: as test_scores found it)
        where = []
        if nobody:
            where.append(f"the protocol's evaluation of round{'s' if len(nobody) > 1 else ''} "
                         f"{', '.join(str(r) for r in nobody)} (its metrics are NaN over 0 users: no figure): "
                         "every user with test ratings had dropped out, or no answer arrived by the deadline")
        if final_nobody:
            where.append("the test evaluation of the final model (`test_error`): "
                         + final_error.removeprefix("no user evaluated: "))
        said = "no user was evaluated in " + "; and in ".join(where)
        ctx.warn("unevaluated", "Not evaluated.", said, "; these are not scores.")
    purposes = {k.name: k for k in spec.kinds}
    kinds = []
    for kind, tot in net.ledger.view().group("kind").items():
        k = purposes.get(kind)
        kinds.append({"kind": kind, "purpose": k.purpose if k else "?", "from": ",".join(k.src) if k else "?",
                      "to": ",".join(k.dst) if k else "?", "messages": tot.messages, "bytes": tot.wire_bytes,
                      "payload_bytes": tot.payload_bytes, "units": tot.units})
    ctx.table("kinds", kinds, title="Traffic per message kind (from the ledger)", floatfmt=".1f")
    roles = [{k: r[k] for k in ("role", "direction", "nodes", "messages", "bytes", "bytes_per_node",
                                "units_per_node")}
             for r in net.ledger.by_role(per_round=False, exclude_kinds=spec.kinds_for("evaluation"))]
    ctx.table("roles", roles, title="Traffic per role, evaluation messages left out (from the ledger)",
              floatfmt=".1f")
    if not net.ledger.unit:
        # PersonalFR and FedAvg-AE have no latent dimension: their units columns were NaN, unexplained
        ctx.note(f"The `units` and `units_per_node` columns are NaN: protocol `{name}` declares no accounting unit "
                 "(`net.set_unit(d)`: d floats, a latent vector, make one unit); its traffic is in bytes.")
    adjusted = result.info.get("adjusted") or []
    if adjusted:
        # a setting the protocol capped (clients per round beyond the clients there are): the
        # configuration above says what was asked, this what ran
        ctx.table("adjusted", adjusted, title="Settings the protocol could not use as given, and what it used")
        said = "; ".join(f"{a['setting']} = {a['asked']} was used as {a['used']}: {a['why']}" for a in adjusted)
        ctx.warn("adjusted", "Adjusted.", said,
                 report_head="The run is not the configuration as given (table `adjusted`): ")
    missing = result.info.get("missing") or []
    if missing:
        ctx.table("missing", missing, title="What was left out, per round: uploads that did not arrive by the deadline, "
                  "per kind (clients: how many; FedRec++: also the groups and clients, left_out, left out of the update; "
                  "kind keys, round -1: clients whose secure-aggregation key never arrived)")
    if missing or summary["lost_clients"]:
        # the summary's columns say it, but only to a reader who looks for them
        ctx.caveat("incomplete", f"**Incomplete.** The run left {len(missing)} round record(s) of missing uploads or groups "
                 f"(table `missing`) and lost {summary['lost_clients']} client(s) that dropped out: its figures are "
                 "not those of a complete run.")
    if diverged is not None:
        # the round the protocol found it in: its server checks each round and stops there, or, for what
        # only the end shows (clients' private parameters), the rounds done; both are where it stopped
        warning = (f"the model diverged: its parameters, or the scores they give, were found not finite at round "
                   f"{int(diverged)} of {summary['rounds']}, where the run stopped; its figures are not those of "
                   "a trained model")
        ctx.warn("diverged", "Diverged.", warning)
    elif final_error.startswith("DivergenceError: "):
        # parameters finite to the end (no server stopped), the scores they give not (a decay of 1e23:
        # predictions overflow): the test_error column said it, no caveat did, so a sweep saw a clean run
        ctx.warn("diverged", "Diverged.", "the final model's parameters stayed finite, but the scores they give "
                 f"are not (`test_error`: {final_error.removeprefix('DivergenceError: ')}); its figures are not "
                 "those of a trained model")
    ctx.note(f"Protocol `{name}` ({spec.paper or 'see its docs page'}), data `{ctx.data}`, network: "
             f"{ctx.net.describe()}. Parameters: the protocol's configuration (`fedsim run {name} --help`).")
