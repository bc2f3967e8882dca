"""``fedsim compare PROTOCOL --against tcp``: the same run on the simulator and on a real transport.

Both runs use the same data split, configuration, seed and faults (``--loss``, ``--dropout``:
the loss draws are keyed by message, so both lose the same copies; a dropout inside a window is
at a real instant on the real transport, so the copies it costs can differ); the simulator uses
the run's profile (``--profile``, default ``lan``) and link model (as does a real transport that
takes link models: a plug-in's), and the run's ``NetSpec``'s ``framing_bytes`` (as does a real
transport that takes them: all but ``tcp`` and its subclasses, framed by their frame header;
against those the simulator charges that header, 25 bytes a copy, and refuses another
``framing_bytes`` than 0 or 25: ``predicted_framing``). The report puts side by side: the final
metrics (and whether the final parameters are bit-identical, as they must be), the payload bytes
per sender role and message kind (which must be equal) and each run's wire bytes, the wall time of each run, and per round
the simulator's predicted duration against the measured one (from the first send of the round to
the last arrival, read off each ledger).

The messages are compared copy by copy, not only by those totals (equal totals hid a copy larger
and another smaller by as much, a copy sent to the wrong receiver, one missing and another
duplicated, copies labelled with other rounds): each ledger's copies become the multiset of
(round, sender, receiver, kind, payload bytes, lost or not) (``message_keys``; payload bytes are
wire bytes less the network's framing, so TCP's frame headers do not count), and the two must be
equal; the note says so with the number of copies. Every copy counts, lost ones included, and
whether it was lost is part of its key: the loss draws are keyed by message and a dropout from
the start (``--dropout-window 0,0``) costs the same copies on both, so both runs send and lose the
same copies. A copy still in flight when a run ended counts as not lost (its fate was not
decided). A dropout inside a window is at a real instant on the real transport, so which copies
are sent, and which lost, can differ: they are compared all the same, and a difference fails the
comparison, whose message then says why it may differ. A failed comparison names up to
``SHOWN_MESSAGES`` (5) copies of each run without a match on the other (by round, then ledger
order: ``message_differences``) and counts the rest.

A run whose model diverged (``info["diverged_at"]``)
gets a ``diverged_at`` column, and the report a **Diverged** note (caveat ``diverged``) naming
which run diverged at which round. The real network is checked before the simulator runs: a TCP
network whose workers would exceed the open-file limit (``TcpNetwork.check_descriptors``) or
clearly need more memory than is available (``TcpNetwork.check_memory``) is refused then, not
after the simulator's run. Its actors are built once the simulator's run is over and reduced to
what the comparison reads (final parameters, figures, bytes per sender role and kind, the copies'
keys, 48 bytes a copy, round times): the simulator's network and actors are let go before the
second run.
"""

from __future__ import annotations

import functools
import gc
import inspect
import math
import time
import types
from typing import Any

import numpy as np

from .context import RunContext
from .errors import ScenarioError, UsageError
from .protocol_run import protocol_scenario, split_data, test_scores
from .report import human_seconds

__all__ = ["compare_scenario"]

DEFAULT_PROCESSES = 4  # the real run's processes when none are given, for a transport that takes them


def compare_scenario(name: str, transport: str = "tcp", processes: int | None = None,
                     options: Any = ()) -> types.ModuleType:
    """A scenario that runs protocol ``name`` on the simulator and on ``transport`` (``tcp`` with
    ``processes`` worker processes, None: ``DEFAULT_PROCESSES`` (4), ``asyncio``, or one a plug-in registered: ``processes`` goes to
    one that takes it, :func:`takes_processes`, the run's link model to one that takes link
    models, and the run's ``framing_bytes`` to one that takes them: not ``tcp`` or its subclasses,
    ``fedsim.kernel.netspec.frames_itself``) and compares them. Raises ``KeyError`` for an unknown
    protocol, and ``UsageError`` as ``fedsim compare`` refuses its options (:func:`check_against`):
    for a ``transport`` that is not registered or is ``sim``, and for a ``processes`` that is not a
    whole number of at least 1 or is given (not None) for a transport that does not take processes
    (``asyncio``: it was silently ignored, where the command line refuses ``--processes``).
    ``options``: more arguments of ``transport``'s constructor (``--transport-option``; a mapping or
    pairs, checked as ``NetSpec(options=...)`` checks them; ``processes`` among them is refused
    with ``processes`` given too); the simulator's run takes the run's link model and its
    ``link_options``, and so does a ``transport`` that takes link models."""
    base = protocol_scenario(name)
    check_against(transport, processes, option="processes", label="transport")
    processes = None if processes is None else int(processes)
    from ..kernel import NetSpec
    from ..kernel.errors import NetworkConfigError

    try:  # (checked now, naming the options, rather than when the run builds its network)
        options = NetSpec(transport=transport, options=options).options
    except NetworkConfigError as exc:
        raise UsageError(str(exc)) from None
    if processes is not None and "processes" in dict(options):
        raise UsageError("processes given both as an argument and among the options; give it once")
    mod = types.ModuleType(f"fedsim_compare_{name.replace('-', '_')}")
    mod.__doc__ = f"Protocol {name} on the simulator against the {transport} transport, side by side."
    mod.PARAMS = dict(base.PARAMS)
    mod.DEFAULT_DATA = base.DEFAULT_DATA
    mod.TAKES_DATA = getattr(base, "TAKES_DATA", True)
    mod.DEFAULT_PROFILE = "lan"
    mod.PROTOCOL = f"compare-{name}"
    mod.run = lambda ctx: run_compare(ctx, name, transport, processes, options)
    return mod


def same_bits(a, b) -> bool:
    """Whether two parameter arrays are bit for bit the same: dtype, shape and bytes (NaN equal to
    itself: a diverged model's NaN made np.array_equal report two identical runs as different)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def param_difference(name: str, a, b, here: str = "the simulator", there: str = "the other run") -> str | None:
    """How parameter ``name`` differs between two runs (``a`` on ``here``, ``b`` on ``there``; None:
    the run has no such parameter), for a failed comparison's message: which run alone has it, both
    dtypes (and both shapes) when those differ, else how many values differ and the first of them.
    The message said "parameters w differ" alone, whether the runs held float32 against float64,
    another shape or other numbers. None when the two hold the same bytes (or objects)."""
    if a is None or b is None:
        return f"{name} only on {here if b is None else there}"
    a, b = np.asarray(a), np.asarray(b)
    told = []
    if a.dtype != b.dtype:
        told.append(f"dtype {a.dtype} on {here}, {b.dtype} on {there}")
    if a.shape != b.shape:
        told.append(f"shape {a.shape} on {here}, {b.shape} on {there}")
    if told:
        return f"{name}: {'; '.join(told)}"
    if a.size == 0 or a.dtype.hasobject:
        return None
    bits_a = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
    bits_b = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, -1)
    off = np.flatnonzero((bits_a != bits_b).any(axis=1))
    if not off.size:
        return None
    first = np.unravel_index(off[0], a.shape) if a.ndim else ()
    at = f" at [{', '.join(str(int(i)) for i in first)}]" if a.ndim else ""
    return (f"{name}: {off.size} of {a.size} values differ (dtype {a.dtype}, shape {a.shape}); the first{at}: "
            f"{a[first].item()!r} on {here}, {b[first].item()!r} on {there}")


# the columns of a message key (``message_keys``), in the order differences are sorted and told
KEY_COLUMNS = ("round", "src", "dst", "kind", "payload_bytes", "lost")
SHOWN_MESSAGES = 5  # differing copies a failed comparison shows of each run


def message_keys(ledger) -> dict[str, Any]:
    """Every copy ``ledger`` recorded (delivered, lost or still in flight) as one key (round,
    sender, receiver, kind, payload bytes, whether it was lost), in ledger order: ``{"keys": an
    (n, 6) int64 array, columns KEY_COLUMNS, "names": the node ids and kinds the src, dst and
    kind codes number}``. Read in one pass through the ledger's public queries
    (``view().iter_columns``: a ``StreamingLedger`` scans its file once, chunk by chunk), 48 bytes
    a copy; no Python object per row is kept. Payload bytes are the ledger's wire bytes less its
    network's framing (``framing_bytes``), so a frame's header does not count."""
    n = len(ledger)
    keys = np.empty((n, len(KEY_COLUMNS)), dtype=np.int64)
    text = ((1, "src"), (2, "dst"), (3, "kind"))
    # each text column's values numbered in first-occurrence order while the pieces pass, then
    # renumbered into one numbering: src's values first, then dst's, then kind's (the order a
    # pass per column gave)
    local: dict[int, dict[Any, int]] = {j: {} for j, _ in text}
    at = 0
    for piece in ledger.view().iter_columns("round", "src", "dst", "kind", "bytes", "status"):
        m = piece["round"].shape[0]
        rows = slice(at, at + m)
        keys[rows, 0] = piece["round"]
        for j, name in text:
            seen = local[j]
            col = piece[name]
            for x in dict.fromkeys(col.tolist()):  # (first occurrence order: deterministic)
                seen.setdefault(x, len(seen))
            keys[rows, j] = np.fromiter(map(seen.__getitem__, col), dtype=np.int64, count=m)
        keys[rows, 4] = piece["bytes"] - ledger.framing_bytes
        keys[rows, 5] = piece["status"] == "lost"
        at += m
    if at != n:
        raise ValueError(f"the ledger holds {n} rows but its view gave {at}")
    codes: dict[Any, int] = {}
    for j, _ in text:
        seen = local[j]
        remap = np.fromiter((codes.setdefault(x, len(codes)) for x in seen), dtype=np.int64, count=len(seen))
        if n:
            keys[:, j] = remap[keys[:, j]]
    return {"keys": keys, "names": list(codes)}


def _unmatched(ids: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Positions of the rows of one side (``ids``: each row's key number) that the other side
    (``other``: how many copies it has of each key) does not match: of a key held k times here
    and m times there, the copies after the first m, in ledger order."""
    if not ids.size:
        return ids
    order = np.argsort(ids, kind="stable")
    grouped = ids[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, ids.size]))
    rank = np.empty_like(order)
    rank[order] = np.arange(ids.size) - first  # this copy is the rank-th of its key here
    return np.flatnonzero(rank >= other[ids])


def message_differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[tuple], list[tuple], int, int]:
    """Compare two runs' ``message_keys`` as multisets: (the copies only in ``a``, the copies only
    in ``b``, each as (round, src, dst, kind, payload bytes, lost) tuples, at most
    ``SHOWN_MESSAGES`` of each, by round then ledger order; how many in all only in ``a``, only
    in ``b``). Equal multisets: ([], [], 0, 0). Vectorised: one sort of both key arrays."""
    names = list(dict.fromkeys([*a["names"], *b["names"]]))
    at = {x: i for i, x in enumerate(names)}
    sides = []
    for side in (a, b):
        k = side["keys"].copy()
        lut = np.array([at[x] for x in side["names"]], dtype=np.int64)
        if k.shape[0]:
            k[:, 1:4] = lut[k[:, 1:4]]
        sides.append(k)
    ka, kb = sides
    both = np.concatenate([ka, kb])
    if not both.shape[0]:
        return [], [], 0, 0
    # each key's number among the distinct keys (np.unique(axis=0) sorted the rows as bytes, 5x slower)
    order = np.lexsort(both.T[::-1])
    ordered = both[order]
    inv = np.empty(both.shape[0], dtype=np.int64)
    inv[order] = np.cumsum(np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]) - 1
    del ordered
    ia, ib = inv[:ka.shape[0]], inv[ka.shape[0]:]
    m = int(inv.max()) + 1
    ca, cb = np.bincount(ia, minlength=m), np.bincount(ib, minlength=m)
    out = []
    for k, ids, other in ((ka, ia, cb), (kb, ib, ca)):
        extra = _unmatched(ids, other)
        first = extra[np.lexsort((extra, k[extra, 0]))][:SHOWN_MESSAGES]
        out.append(([(int(r[0]), names[r[1]], names[r[2]], names[r[3]], int(r[4]), bool(r[5]))
                     for r in k[first].tolist()], int(extra.size)))
    (only_a, na), (only_b, nb) = out
    return only_a, only_b, na, nb


def describe_message(key: tuple) -> str:
    """One copy of ``message_differences`` in words: ``round 0 gradient c1 -> server 120 B``
    (and `` (lost)`` for a lost copy)."""
    rnd, src, dst, kind, payload, lost = key
    return f"round {rnd} {kind} {src} -> {dst} {payload} B{' (lost)' if lost else ''}"


def _round_times(ledger) -> dict[int, float]:
    return {r: ledger.select(round=r).span() for r in ledger.rounds() if r >= 0}


def _outcome(ctx: RunContext, spec, label: str, described: str, net, job, build_s: float,
             test) -> dict[str, Any]:
    """Run ``net``, and keep of it only what the comparison reads: the final parameters, the
    summary row's figures, the payload bytes per (sender role, kind), the copies sent
    (``message_keys``) and the round times. The
    network, its actors and the protocol's result (their state, its ``RunResult``) are not
    kept: they go when this returns."""
    from ..protocols.contract import check_result, check_run

    ctx.progress.update(0 if label == "sim" else 1, 2, stage=f"{spec.name} on {described}")
    t0 = time.perf_counter()
    run = check_run(net.run(), net, label)
    res = check_result(spec, job.collect(run), run)
    wall = build_s + time.perf_counter() - t0
    ctx.record_network(net, label=label)
    figures: dict[str, Any] = {"wall_s": wall, "run_duration_s": res.duration}
    if res.info.get("diverged_at") is not None:
        figures["diverged_at"] = int(res.info["diverged_at"])
    figures.update(test_scores(res, test))
    if res.metrics:
        figures.update({f"final_{k}": v for k, v in res.metrics[-1].items() if k != "round"
                        and isinstance(v, (int, float))})
    groups = {key: (t.messages, t.payload_bytes, t.wire_bytes)
              for key, t in net.ledger.view().group("src_role", "kind").items()}
    return {"params": res.params, "figures": figures, "wall": wall, "groups": groups,
            "messages": message_keys(net.ledger), "rounds": _round_times(net.ledger)}


def takes_processes(factory: Any) -> bool:
    """Whether a registered transport's ``factory`` takes ``processes`` (``--processes``): ``tcp``
    and any ``TcpNetwork`` subclass (a plug-in's, whose constructor may take ``**kwargs`` only), or
    a factory whose signature names a ``processes`` parameter."""
    from ..kernel import TcpNetwork
    from ..kernel.registry import factory_class

    cls = factory_class(factory)  # (a functools.partial of one too)
    if cls is not None and issubclass(cls, TcpNetwork):
        return True
    try:
        return "processes" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return False


def check_against(transport: Any, processes: Any, *, option: str = "processes", label: str = "transport") -> None:
    """Refuse, with ``UsageError``, what ``fedsim compare`` and :func:`compare_scenario` cannot run:
    a ``transport`` that is not registered or is ``sim`` (the simulator is the run compared with: it
    was compared with itself), a ``processes`` that is not a whole number of at least 1, and one
    given (not None) for a transport that does not take processes (:func:`takes_processes`).
    ``option`` and ``label`` name the processes and the transport in the message (``--processes``
    and ``--against`` on the command line, ``processes`` and ``transport`` from Python)."""
    import difflib

    from ..kernel import TRANSPORTS
    from ..kernel.registry import TRANSPORT_REGISTRY, plugin_hint

    if processes is not None:
        if type(processes) is not int and not isinstance(processes, np.integer):
            raise UsageError(f"{option} must be a whole number of at least 1, got {processes!r}")
        if processes < 1:
            raise UsageError(f"{option} must be at least 1, got {processes}")
    if not isinstance(transport, str) or transport not in TRANSPORTS or transport == "sim":
        others = [t for t in TRANSPORTS if t != "sim"]
        close = difflib.get_close_matches(transport, others, n=1) if isinstance(transport, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        what = "the simulator itself (it is the run compared with)" if transport == "sim" else "unknown transport"
        if transport != "sim":
            hint += plugin_hint("transport")
        raise UsageError(f"{label} {transport!r}: {what}; known: {', '.join(others)}{hint}")
    if processes is not None and not takes_processes(TRANSPORT_REGISTRY.entry(transport).factory):
        # (it was ignored: the run took none, and nothing said so)
        raise UsageError(f"{option}: transport {transport!r} does not take processes (tcp, a TcpNetwork "
                         "subclass or a transport whose constructor takes processes do)")


def predicted_framing(net, entry) -> int:
    """The framing bytes a copy the simulator's run charges, in a comparison of ``net`` (the run's
    ``NetSpec``) with the registered transport ``entry``: the compared transport's own. One that
    frames each message itself (``tcp`` and its subclasses, ``frames_itself``) puts its frame header,
    ``fedsim.kernel.tcp.FRAME_OVERHEAD`` (25) bytes, beyond each document on the wire: the simulator
    charges those (it predicted with the run's ``framing_bytes``, 0 unless set, while TCP sent 25
    more a copy), and a run's ``framing_bytes`` other than 0 (the default: the transport's own, as
    ``NetSpec`` takes it for ``tcp``) or 25 is refused with ``UsageError``, as ``NetSpec(transport=
    "tcp")`` refuses it: no run could show it. Any other transport takes the run's ``framing_bytes``
    (``run_compare`` gives it them), and the simulator charges those. Also refuses, with
    ``UsageError``, a ``net`` whose transport is not ``sim``: the simulator is the run compared
    with, and the other transport is ``compare_scenario``'s (``fedsim compare`` refuses
    ``--transport`` alike; it was replaced by ``sim`` without a word)."""
    from ..kernel.netspec import frames_itself
    from ..kernel.tcp import FRAME_OVERHEAD

    if net.transport != "sim":
        raise UsageError(f"net: transport {net.transport!r}: a comparison runs the simulator itself; the other "
                         f"transport is compare_scenario's ({entry.name!r}; --against on the command line)")
    if not frames_itself(entry):
        return net.framing_bytes
    if net.framing_bytes not in (0, FRAME_OVERHEAD):
        raise UsageError(f"framing_bytes {net.framing_bytes!r}: transport {entry.name!r} frames each message "
                         f"itself, with its {FRAME_OVERHEAD}-byte frame header, and the simulator predicts with "
                         f"those; leave framing_bytes at 0 or give {FRAME_OVERHEAD}")
    return FRAME_OVERHEAD


def _how_measured(transport: str, simulated: bool, processes: bool) -> str:
    """What the other run's wall time holds and what its round times are, for the report's note
    (it said "forking, connecting and merging the ledger included" and "real seconds on this
    machine's loopback" of every transport: of asyncio, which forks and connects nothing, and of a
    plug-in's SimNetwork subclass, whose round times are simulated seconds)."""
    if simulated:
        return (f". The {transport} run's round times are simulated seconds too ({transport} is a simulated "
                "transport: its own model of time, not a measurement);")
    if processes:
        return (" (forking, connecting and merging the ledger included). The measured round times are real "
                "seconds on this machine's loopback (shaped only if the run was made inside a shaped namespace);")
    return (f". The measured round times are real seconds on this machine ({transport}'s clock, not a model of "
            "the network);")


def run_compare(ctx: RunContext, name: str, transport: str, processes: int | None, options: Any = ()) -> None:
    from ..kernel import NetSpec
    from ..kernel.netspec import frames_itself
    from ..kernel.registry import TRANSPORT_REGISTRY
    from ..protocols import REGISTRY
    from ..protocols.contract import check_job

    spec = REGISTRY[name]
    entry = TRANSPORT_REGISTRY.entry(transport)
    sim_spec = ctx.net.replace(transport="sim", framing_bytes=predicted_framing(ctx.net, entry))
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in ctx.config.items() if k != "test_frac"}
    cfg = spec.Config(**fields)
    train, test = split_data(ctx, spec, cfg)
    # the same faults on both: the real transport was built without them, so a compare with --loss
    # or --dropout always reported different parameters and bytes. The run's link model too, for a
    # transport that takes one (a plug-in's: it ran with fifo while the simulator ran with
    # --link-model); --processes for any transport that takes it (it went to "tcp" by name only,
    # and a plug-in's TcpNetwork subclass ran with TcpNetwork's default); and the run's framing
    # bytes for a transport that takes them (all but tcp and its subclasses, whose framing is their
    # frame header: a plug-in transport ran with none while the simulator ran with the run's; the
    # simulator predicts with that frame header against those: predicted_framing)
    # the keywords a functools.partial factory binds (register_transport("tcp2", partial(TcpNetwork,
    # processes=2)): without --processes, its own processes, not DEFAULT_PROCESSES over them
    bound = entry.factory.keywords if isinstance(entry.factory, functools.partial) else {}
    given = dict(options)
    real_spec = NetSpec(profile=ctx.net.profile, transport=transport, loss=ctx.net.loss, dropout=ctx.net.dropout,
                        window=ctx.net.window, link_model=ctx.net.link_model if entry.link_models else "fifo",
                        link_options=ctx.net.link_options if entry.link_models else (),
                        framing_bytes=0 if frames_itself(entry) else ctx.net.framing_bytes,
                        options={**({"processes": DEFAULT_PROCESSES if processes is None else processes}
                                    if takes_processes(entry.factory) and "processes" not in given
                                    and not (processes is None and "processes" in bound) else {}), **given})
    t0 = time.perf_counter()
    net = sim_spec.build(ctx.seed)
    job = check_job(spec, spec.build(net, train, cfg, test=test))
    build_s = time.perf_counter() - t0
    real = real_spec.build(ctx.seed)
    # the real network checked before the simulator runs (TcpNetwork: the open-file limit, the
    # memory available; a refusal came only after the simulator's run), for the processes its
    # nodes, the simulator's (the same build), would take; its actors are built only after the
    # simulator's run, whose network and actors are let go first: both jobs' state was held
    # through the simulator's run, and the first through the second
    count = getattr(real, "count_processes", None)
    if count is not None:
        nprocs = count({nid: node.role for nid, node in net.nodes.items()})
        real.check_descriptors(nprocs)
        real.check_memory(nprocs)
    runs: dict[str, dict[str, Any]] = {}
    runs["sim"] = _outcome(ctx, spec, "sim", sim_spec.describe(), net, job, build_s, test)
    del net, job
    gc.collect()  # (actors, their contexts and the network refer to each other: a cycle)
    t0 = time.perf_counter()
    job = check_job(spec, spec.build(real, train, cfg, test=test))
    runs[transport] = _outcome(ctx, spec, transport, real_spec.describe(), real, job,
                                 time.perf_counter() - t0, test)
    simulated = bool(real.simulated)  # (a plug-in's SimNetwork subclass: its times are simulated too)
    del real, job
    ctx.progress.update(2, 2)
    a, b = runs["sim"], runs[transport]
    wall_a, wall_b = a["wall"], b["wall"]
    pa_, pb_ = a["params"], b["params"]
    differ = sorted(set(pa_) ^ set(pb_)) + [k for k in pa_ if k in pb_ and not same_bits(pa_[k], pb_[k])]
    same = not differ
    rows = []
    for label, out in runs.items():
        row: dict[str, Any] = {"network": f"sim ({sim_spec.describe()})" if label == "sim" else label + (
            f" ({', '.join(f'{k}={v!r}' for k, v in sorted(given.items()))})" if given else "")}  # (--transport-option)
        row.update(out["figures"])
        row["parameters_bit_identical"] = same
        rows.append(row)
    ctx.table("summary", rows, title=f"{name}: the simulator against the {transport} transport")
    nobody = [r for r in rows if str(r.get("test_error", "")).startswith("no user evaluated: ")]
    if nobody:
        # as fedsim run says it: a test_error column alone was read only by whoever looked for it
        why = nobody[0]["test_error"].removeprefix("no user evaluated: ")
        ctx.warn("unevaluated", "Not evaluated.", "no user was evaluated in the test evaluation of the final model "
                 f"of {' and of '.join(r['network'] for r in nobody)}: {why}", "; these are not scores.")
    planned = getattr(cfg, spec.rounds_field)
    diverged = {label: out["figures"]["diverged_at"] for label, out in runs.items()
                if "diverged_at" in out["figures"]}
    said_diverged = "; ".join(
        f"the {label} run's model diverged at round {diverged[label]} of {planned}, where it stopped"
        if label in diverged else f"the {label} run's model did not" for label in runs) if diverged else ""
    if diverged:
        # a diverged_at column alone was read only by whoever looked for it: the report said the runs
        # compared equal, with final figures (inf, NaN) of models that were not trained ones
        warning = (f"{said_diverged} (its parameters, or the scores they give, were found not finite): the "
                   "final figures are not those of a trained model")
        ctx.warn("diverged", "Diverged.", warning)
    ga, gb = a["groups"], b["groups"]  # (messages, payload bytes, wire bytes) per (sender role, kind)
    bytes_rows = []
    for key in sorted(set(ga) | set(gb)):
        ta, tb = ga.get(key), gb.get(key)
        pa = ta[1] if ta else 0
        pb = tb[1] if tb else 0
        bytes_rows.append({"sender_role": key[0], "kind": key[1], "messages": ta[0] if ta else 0,
                           "payload_bytes_sim": pa, f"payload_bytes_{transport}": pb, "equal": pa == pb,
                           "wire_bytes_sim": ta[2] if ta else 0, f"wire_bytes_{transport}": tb[2] if tb else 0})
    ctx.table("payload_bytes", bytes_rows, title="Payload bytes per sender role and kind (they must be equal)")
    ra, rb = a["rounds"], b["rounds"]
    times = [{"round": r, "simulated_s": ra.get(r, float("nan")), f"measured_{transport}_s": rb.get(r, float("nan")),
              "measured_over_simulated": rb.get(r, float("nan")) / ra[r] if ra.get(r) else float("nan")}
             for r in sorted(set(ra) | set(rb))]
    ctx.table("round_times", times, title=f"Round durations: the simulator's prediction ({sim_spec.profile}) "
              f"against the {transport} run's ledger", floatfmt=".4f")
    unequal = [r for r in bytes_rows if not r["equal"]]
    # message by message: equal totals per (role, kind) hid offsetting differences (one copy larger
    # and another smaller, a copy sent to the wrong receiver or labelled with another round)
    only_a, only_b, n_a, n_b = message_differences(a["messages"], b["messages"])
    keys = a["messages"]["keys"]
    sent, lost = keys.shape[0], int(keys[:, 5].sum())
    ctx.note(f"Final parameters {'are bit-identical' if same else 'DIFFER'} between the two runs; payload bytes "
             + ("are equal for every sender role and kind" if not unequal else
                f"differ for {len(unequal)} (role, kind) pairs")
             + (f"; the {sent} copies sent ({lost} of them lost) are the same messages on both networks (sender, "
                "receiver, kind, round, payload bytes, lost or not)." if not (n_a or n_b) else
                f"; {n_a} copies on the simulator and {n_b} on {transport} have no match on the other network.")
             # (in the tables' units: it was {:.2f} s, "0.00 s" of a run of 4 ms)
             + f" Wall time: simulator {human_seconds(wall_a)}, {transport} {human_seconds(wall_b)}" + _how_measured(
                 transport, simulated, frames_itself(entry) or takes_processes(entry.factory))
             + f" the simulator's are what its `{sim_spec.profile}` profile predicts, each copy charged "
               f"{sim_spec.framing_bytes} framing bytes beyond its payload ({transport}'s own)."
             + _no_ratio(times, transport, sim_spec.profile))
    if not same or unequal or n_a or n_b:
        # the run fails, so its folder (and report) is not written: the message carries what differs
        # (it said "see the report", which did not exist)
        what = []
        if differ:
            how = [param_difference(k, pa_.get(k), pb_.get(k), "the simulator", transport) for k in differ]
            told = "; ".join(h for h in how if h)
            what.append(f"parameters {', '.join(differ)} differ" + (f" ({told})" if told else ""))
        what += [f"{r['sender_role']} {r['kind']} payload {r['payload_bytes_sim']} B on the simulator, "
                 f"{r[f'payload_bytes_{transport}']} B on {transport}" for r in unequal[:5]]
        if len(unequal) > 5:
            what.append(f"... ({len(unequal) - 5} more byte counts differ)")
        for n, shown, here, there in ((n_a, only_a, "the simulator", transport),
                                      (n_b, only_b, transport, "the simulator")):
            if n:  # (at most SHOWN_MESSAGES of each side: a run may differ in millions)
                more = f" and {n - len(shown)} more" if n > len(shown) else ""
                what.append(f"{n} {'copy' if n == 1 else 'copies'} on {here} without a match on {there}: "
                            f"{', '.join(describe_message(m) for m in shown)}{more}")
        if diverged:
            what.append(said_diverged)
        if ctx.net.dropout and ctx.net.window[1] > 0:
            # not a fault of the transport: a dropout is at a real instant there, at a simulated one here
            # (a plug-in's simulated transport: at the same simulated instant, in a protocol its own
            # model of time has taken elsewhere; it was said to drop out "at a real instant")
            at = (f"at the same simulated instant on both, which {transport}'s own timing finds at another point of "
                  "the protocol") if simulated else (f"at a real instant on {transport} and at a simulated one on the "
                                                     "simulator")
            what.append(f"with dropout at times in {list(ctx.net.window)} s, a node drops out {at}, so the messages "
                        "it costs can differ (--dropout-window 0,0 drops the same nodes from the start on both)")
        raise ScenarioError(f"{name}: the {transport} run differs from the simulator's: {'; '.join(what)}")


def _no_ratio(times: list[dict], transport: str, profile: str) -> str:
    """A sentence on the rounds of ``times`` (the round_times rows) whose ``measured_over_simulated``
    is NaN, and why: the simulator predicts 0 s (the ideal profile: no delay, free compute), or
    the round is in one run's ledger only; "" when there is none (the NaN stood unexplained)."""
    measured = f"measured_{transport}_s"
    one_side = [r["round"] for r in times if math.isnan(r["simulated_s"]) or math.isnan(r[measured])]
    zero = [r["round"] for r in times if r["simulated_s"] == 0 and r["round"] not in one_side]
    said = []
    if zero:
        said.append(f"in {_rounds_text(zero)}: the simulator predicts 0 s (its `{profile}` profile"
                    + (": no delay, free compute" if profile == "ideal" else "") + "), and a ratio to 0 is no figure")
    if one_side:
        said.append(f"in {_rounds_text(one_side)}: only one of the two runs has the round in its ledger")
    return (" `measured_over_simulated` is NaN " + "; and ".join(said) + ".") if said else ""


def _rounds_text(rounds: list) -> str:
    shown = ", ".join(str(r) for r in rounds[:10]) + (f" and {len(rounds) - 10} more" if len(rounds) > 10 else "")
    return f"round{'s' if len(rounds) > 1 else ''} {shown}"
