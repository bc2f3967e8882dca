"""Teaching traces: run a protocol with a handful of clients and draw every message.

``trace(name, clients=3, rounds=1)`` writes to a folder:

- ``trace.html``: one self-contained page (no network access, no CDN: inline SVG, CSS and a
  little JavaScript) with the sequence diagram, a timeline of every node (queueing, sending,
  propagation, receiving, computing, sleeping; a menu zooms it to the current step's round or to
  the current message) and a step-through of the messages and, among them
  where the diagram has them as notes, the waits given up, dropouts and a deadlock (next/previous, arrow
  keys, or a click on an arrow or a note; first/last, Home/End; a menu of the rounds jumps to a round's first
  message): each event's sentence with its time (``event_step``), each message's kind, round, sizes, times and payload fields
  with their shapes, dtypes and sizes. Anonymous senders are hidden (the arrow comes from an
  "anonymous" lane, the step panel says the receiver does not learn the sender and leaves out the
  sender's send and transmission times, and the timeline's cursor stands at the start of the
  reception, not at the send) unless the page's "reveal" box is ticked, which shows the
  simulator's view. It draws at most ``MAX_PAGE_MESSAGES`` messages, the first whole rounds of a
  longer trace, and says what it leaves out (``page_cut``);

- ``sequence.mmd``: a Mermaid sequence diagram, one arrow per ledger row (sender, receiver,
  kind, bytes, simulated send and arrival times). Anonymous messages are dashed arrows labelled
  *anonymous* (the receiver never learns the sender); lost ones end in a cross; one that arrived
  but that its receiver never took (a deadline had passed, the run ended) says *never read*, as
  the page's arrow and step panel and the step log do. It holds at most ``MAX_MERMAID_CHARS``
  characters (Mermaid's own limit): the first whole rounds within it, and a note saying what it leaves out;
- ``timeline.svg`` (and ``timeline.png`` with matplotlib): one lane per node showing when it is
  sending (egress port busy), receiving (ingress port busy), computing, sleeping (``ctx.sleep``), and the propagation of
  each message between lanes; of the messages the page draws (``MAX_PAGE_MESSAGES``), saying what they leave out;
- ``steps.log``: the same events as plain text, in time order (those of one instant in the order
  they happened, as the network recorded it: ``net.happened``): the whole record, never cut.

Every view gives each message its round (``setup`` for a negative label: the secure
aggregation's key exchange; ``setup for round N`` for the label -1 - N of one that began at round
N, as FPL's resumed over several networks does) and its fate as the ledger has it, with, for one its receiver's actor
took after it arrived (from the mailbox a round later, or when its gather returned), when it
was read (``read_at``, kept by a tracing network). Waits that ended without some senders'
messages (``ledger.missing``) and nodes going offline are shown where they happened, a wait
with how many of how many messages it missed (``2 of 5 missing``: ``Missing.expected``), each
wait a note of its own (``Missing.wait``: also two of one receiver, kind and round given up at one
instant).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import html as _html
import json
import os
import re

import numpy as np

from ..config import ConfigError, fields_of, unknown_key_message
from ..experiment import Param, UsageError, human_seconds, parse_value, plural
from ..kernel import NetSpec, SimNetwork
from ..kernel.codec import decode_message
from ..kernel.errors import ActorError, DeadlockError, NetworkConfigError
from ..protocols import REGISTRY
from ..protocols.contract import check_job, check_tiny

__all__ = ["TracingNetwork", "trace", "mermaid", "timeline_svg", "step_log", "trace_html", "trace_options"]

FORMATS = ("html", "mermaid", "svg", "log", "png")
# the most rounds a trace runs (its clients are bounded by the tiny presets): a teaching trace is of
# a few; 1000 rounds of FedRec with 30 clients take some 20 s and 0.5 GB (and wrote 140 MB of views
# before sequence.mmd and the timelines were bounded), and --rounds 100000000 ran until killed
MAX_TRACE_ROUNDS = 1000
# the most messages trace.html draws and steps through: a page of 6030 messages (FedRec, 30 clients,
# 100 rounds) was 10 MB and a step took 0.3 s, one of 60000 over 100 MB; a longer trace's page
# shows its first whole rounds up to this many messages and says what it leaves out (so do
# timeline.svg and timeline.png; steps.log keeps every message)
MAX_PAGE_MESSAGES = 2000
# the most characters sequence.mmd holds: Mermaid refuses a larger diagram (its maxTextSize, 50000
# by default: "Maximum text size in diagram exceeded"; mermaid.live, GitHub and GitLab draw none of
# it), and FedRec's 30 clients make that some 400 messages; the file keeps the first whole rounds
# within it and ends with a note saying what it leaves out (steps.log keeps every message)
MAX_MERMAID_CHARS = 50_000


def trace_options(name: str, sets: list[str]) -> dict:
    """``key=value`` strings parsed and checked (type, choices, bounds) against protocol
    ``name``'s configuration fields; raises ``UsageError`` naming the key (``--set pi: must be
    <= 1, got 2.0``). The protocol's rounds (its spec's ``rounds_field``) and a ``clients`` field
    are the trace's ``--rounds`` and ``--clients``, refused here (``--set rounds: a trace's rounds
    are its --rounds; give --rounds 5``): set, they ran a run other than the page's title said,
    and ``--set clients`` passed by the tiny preset's bound. ``--set rounds`` for a protocol whose
    rounds field has another name (FedRec's ``T``) is refused the same way, naming that field."""
    spec = REGISTRY[name]
    infos = {f.name: f for f in fields_of(spec.Config)}
    out = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set expects key=value, got {s!r}")
        k, v = (x.strip() for x in s.split("=", 1))
        if k == "rounds" and k not in infos:  # (the protocol counts them in another field, FedRec's T)
            raise UsageError(f"--set rounds: a trace's rounds are its --rounds ({name} counts them in "
                             f"{spec.rounds_field}); give --rounds {v} instead")
        if k not in infos:
            raise UsageError(unknown_key_message(k, infos, f"protocol {name}"))
        for field, option, what in ((spec.rounds_field, "--rounds", "rounds"), ("clients", "--clients", "clients")):
            if k == field:
                raise UsageError(f"--set {k}: a trace's {what} are its {option}; give {option} {v} instead")
        if k in out:  # the later one silently won, as `fedsim run --set` no longer lets it
            raise UsageError(f"--set {k}: given twice; give each key once")
        value = parse_value(k, v, Param.of(spec.Config, k))
        out[k] = tuple(value) if isinstance(value, list) else value
    return out


class TracingNetwork(SimNetwork):
    """A SimNetwork (with ``trace=True``) that also keeps the structure of every message's
    payload, by ledger row: ``payloads[i]`` lists ``{"name", "dtype", "shape", "bytes"}`` for
    arrays and ``{"name", "value"}`` for scalars (decoded from the bytes that were sent). Its
    ``result`` (every network's) is the run's ``RunResult``, also that of a run that ended in a
    deadlock: the views show the actors still blocked then (``blocked_events``)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(trace=True, **kwargs)
        self.payloads: dict[int, list[dict]] = {}
        # what each view ``trace`` wrote left out, by format: {"shown": k, "total": n} (set by trace)
        self.cuts: dict[str, dict] = {}

    def post(self, src, dsts, kind, encoded, anonymous) -> None:
        # len(ledger), not len(ledger.rows): a StreamingLedger has no row list (every send failed)
        first = len(self.ledger)
        super().post(src, dsts, kind, encoded, anonymous)
        last = len(self.ledger)
        if last > first:
            fields = payload_fields(encoded.data)
            for i in range(first, last):
                self.payloads[i] = fields


def payload_fields(data: bytes) -> list[dict]:
    """The fields of an encoded message's payload: arrays with dtype, shape and bytes, scalars
    with their value (text shortened), nested containers by type and length. A map one level
    down (a whole model, ``{"dec": {name: array}}``: PersonalFR's decoder rows, FedAvg's model)
    is given entry by entry, named ``dec['dec.W2']``, as the ledger counts its arrays: it was one
    field ``dict of 4``, so the page's fields did not add up to the message's array bytes."""
    _, payload = decode_message(data)
    items = payload.items() if isinstance(payload, dict) else [("payload", payload)]
    out = []
    for k, v in items:
        if isinstance(v, dict) and v:
            out.extend(_field(f"{k}[{kk!r}]", vv) for kk, vv in v.items())
        else:
            out.append(_field(str(k), v))
    return out


def _field(name: str, v: Any) -> dict:
    if isinstance(v, np.ndarray):
        return {"name": name, "dtype": str(v.dtype), "shape": list(v.shape), "bytes": int(v.nbytes)}
    if isinstance(v, (list, tuple, dict)):
        return {"name": name, "value": f"{type(v).__name__} of {len(v)}"}
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return {"name": name, "value": text if len(text) <= 60 else text[:57] + "..."}


def trace(name: str, out: str | Path, *, clients: int = 3, rounds: int = 1, seed: int = 0,
          profile: str | None = None, net: NetSpec | None = None, sets: list[str] | None = None,
          formats: tuple[str, ...] | None = None, test_frac: float = 0.0) -> tuple[SimNetwork, dict[str, Path]]:
    """Run protocol ``name`` (any registered protocol, on its ``tiny`` preset) with ``clients``
    clients for ``rounds`` rounds on a traced SimNetwork and write to ``out`` the ``formats``
    (default all: ``html`` trace.html, ``mermaid`` sequence.mmd, ``svg`` timeline.svg, ``log``
    steps.log, ``png`` timeline.png when matplotlib is installed; and, only when asked for,
    ``ledger`` ledger.csv: the run's ledger, ``Ledger.to_csv``). The network: ``profile``
    (default ``lan``), or ``net``, a ``NetSpec`` with its link model and faults (``loss``,
    ``dropout``, ``window``; its transport must be ``sim``: a trace is a simulated run), not both.
    ``sets``: ``key=value`` overrides of the protocol's configuration (its deadline among them).
    ``test_frac`` (``fedsim trace --eval``: ``DEFAULT_TEST_FRAC``, 0.2), when above 0, holds that
    fraction of each user's ratings of the preset out as test ratings, split as ``fedsim run``
    splits them (``fedsim.experiment.protocol_run.hold_out``), trains on the rest and gives them to
    the protocol to evaluate (``build(..., test=...)``), so that its evaluation messages are in the
    trace; a protocol's ``eval_every`` not given in ``sets`` is then 1, whatever its preset
    says (every round evaluated: FedRec's 0 evaluates never, the autoencoders' the last round only).
    Raises ``UsageError`` for an unknown protocol, key or profile, a bad value, a ``--set`` of the
    rounds or clients (``trace_options``), ``rounds`` beyond 1 to ``MAX_TRACE_ROUNDS`` (1000),
    ``clients`` the protocol's tiny preset refuses, a ``test_frac`` that is not a number from 0 to
    0.9 (``fedsim run``'s bounds), or above 0 for a protocol that makes its own data (``data``
    ``none``: no ratings to hold out) or declares no evaluation kind (none of its evaluation is
    a message: FCF, FedRec++, FPL), an ``eval_every`` in ``sets`` without ``test_frac`` (nothing to
    evaluate), a split that holds no rating out (a
    ``ValueError`` of ``spec.tiny``: the built-in ones have 1 to 30, the autoencoders' 1 to 15), or a configuration the spec's
    ``check_data`` refuses on the preset's data (``given``: the keys of ``sets``), before writing
    anything. Each file is written beside its name and renamed in once whole: one that fails (a
    full disk) leaves what ``out`` held under that name. What each view leaves out of a long run
    (see the module docstring) is in the returned network's ``cuts``; a run whose model diverged
    (its server found it not finite and stopped: ``info["diverged_at"]``) has the rounds done then in
    its ``diverged_at`` (else None), and the page's title says so. A run that ends in a deadlock is written all the same (its views show the actors
    still waiting), then its ``DeadlockError`` is raised, with the files written in its ``paths``
    and, for a run with faults and no deadline, the remedy in its ``advice``
    (``--set deadline=SECONDS``; else None)."""
    if name not in REGISTRY:
        close = REGISTRY.closest(name)
        hint = f"; did you mean {close!r}?" if close else ""
        raise UsageError(f"cannot trace {name!r}{hint} (registered protocols: {', '.join(REGISTRY)})")
    if clients < 1 or rounds < 1:
        raise UsageError("--clients and --rounds must be at least 1")
    if rounds > MAX_TRACE_ROUNDS:
        raise UsageError(f"cannot trace {name} with {rounds} rounds: traces have 1 to {MAX_TRACE_ROUNDS} rounds, "
                         f"got {rounds}")
    formats = tuple(formats or FORMATS)
    spec = REGISTRY[name]
    options = trace_options(name, sets or [])
    if isinstance(test_frac, bool) or not isinstance(test_frac, (int, float)) or not 0 <= test_frac <= 0.9:
        raise UsageError(f"test_frac: expected a number from 0 (no evaluation) to 0.9, got {test_frac!r}")
    if test_frac and spec.data == "none":
        raise UsageError(f"cannot trace {name} with --eval: it makes its own data, and holds none out to evaluate")
    if test_frac and not spec.kinds_for("evaluation"):
        # (held out all the same, the trace had the same messages of a run on fewer ratings)
        raise UsageError(f"cannot trace {name} with --eval: it declares no evaluation message kind, so no "
                         f"evaluation of it goes over the network (fedsim run {name} evaluates its result outside "
                         "it); trace it without --eval")
    if options.get("eval_every") and not test_frac:
        # (FedRec's build refused it as "cannot trace fedrec with 3 clients: eval_every needs held-out
        # test ratings (test=...; fedsim run: test_frac > 0)", blaming the clients)
        raise UsageError(f"--set eval_every: {name} evaluates on held-out test ratings, and a trace has none "
                         f"without --eval: add --eval (fedsim trace {name} --eval --set eval_every={options['eval_every']})")
    # a protocol refusing its input, when its tiny preset is made (more clients than it has), when
    # it builds its nodes (FPL with one client: its positives are the whole catalogue, no negative
    # to sample) or in an actor, is a bad --clients / --set, said in one line like the checks here
    refused = f"cannot trace {name} with {clients} client{'s' if clients != 1 else ''}"
    try:
        preset = spec.tiny(clients, rounds, seed)
    except ValueError as exc:  # (a ConfigError too: a config field's bound)
        raise UsageError(f"{refused}: {exc}") from None
    data, cfg = check_tiny(spec, preset)
    try:
        cfg = cfg.replace(**options)
        if spec.check_data is not None and spec.data != "none" and data is not None:
            # the protocol's check of the configuration against the data, as fedsim run makes it: the
            # preset's data, and the --set keys as the settings the user gave
            spec.check_data(cfg, data, frozenset(options))
    except (ConfigError, ValueError) as exc:
        raise UsageError(f"{name}: {exc}") from None
    test = None
    if test_frac:
        from ..experiment.protocol_run import hold_out

        try:
            data, test = hold_out(spec, data, float(test_frac), seed, f"the {name} preset's data ({getattr(data, 'name', '') or 'tiny'})")
        except ConfigError as exc:
            raise UsageError(f"{name}: {exc}") from None
        if "eval_every" in {f.name for f in fields_of(type(cfg))} and "eval_every" not in options:
            # every round evaluated, whatever the preset says (FedRec's 0 evaluates none; a plug-in
            # preset's 3 had shown round 3's evaluation only)
            cfg = cfg.replace(eval_every=1)
    netspec = _trace_network(profile, net)
    net = TracingNetwork(seed=seed, profile=netspec.profile, link_model=netspec.link_model_argument(), faults=netspec.faults,
                         framing_bytes=netspec.framing_bytes, **dict(netspec.options))
    try:
        job = spec.build(net, data, cfg) if test is None else spec.build(net, data, cfg, test=test)
    except ValueError as exc:
        raise UsageError(f"{refused}: {exc}") from None
    check_job(spec, job)  # (not collected: the trace is the ledger's)
    deadlock = None
    net.diverged_at = None
    try:
        net.diverged_at = _diverged_at(spec, job, net.run())
    except ActorError as exc:
        if isinstance(exc.__cause__, ValueError):
            raise UsageError(f"{refused}: {exc}") from None
        raise
    except DeadlockError as exc:  # the trace is how to see why: written, then raised
        deadlock = exc
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    title = f"{name}: {plural(clients, 'client')}, {plural(rounds, 'round')}, " \
            f"profile {netspec.describe()}, seed {seed}"
    if test is not None:
        title += f", evaluated on {len(test)} held-out ratings (test_frac {float(test_frac):g})"
    if net.diverged_at is not None:
        title += f", diverged: not finite after {net.diverged_at} of its {plural(rounds, 'round')}"
    rows = [int(r["round"]) for r in net.ledger.records()]
    shown = first_rounds(rows, MAX_PAGE_MESSAGES)
    # what each view written leaves out ({"shown": k, "total": n}; steps.log keeps every message)
    net.cuts = {f: {"shown": shown, "total": len(rows)} for f in ("html", "svg", "png")
                if f in formats and shown < len(rows)}

    def sequence() -> str:
        text, cut = mermaid_view(net)
        if cut is not None:
            net.cuts["mermaid"] = cut
        return text

    writers = {"html": ("trace.html", lambda: trace_html(net, title=title, summary=spec.summary)),
               "mermaid": ("sequence.mmd", sequence),
               "svg": ("timeline.svg", lambda: timeline_svg(net)),
               "log": ("steps.log", lambda: step_log(net))}
    for f in formats:
        if f in writers:
            fname, make = writers[f]
            paths[f] = out / fname
            _write_whole(paths[f], lambda tmp, text=make(): tmp.write_text(text, encoding="utf-8"))
    if "png" in formats:
        png = _write_whole(out / "timeline.png", lambda tmp: timeline_png(net, tmp))
        if png:
            paths["png"] = png
    if "ledger" in formats:  # (asked for, not a default view: fedsim trace --ledger)
        def write_ledger(tmp: Path) -> Path:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                net.ledger.to_csv(fh)
            return tmp

        paths["ledger"] = _write_whole(out / "ledger.csv", write_ledger)
    if deadlock is not None:
        deadlock.paths = paths
        deadlock.advice = _deadlock_advice(name, cfg, netspec)
        raise deadlock
    return net, paths


def _diverged_at(spec, job, run) -> int | None:
    """The traced run's ``info["diverged_at"]`` (the rounds done when its server found the model
    not finite and stopped: the trace ends there), from ``job.collect(run)``; None when it did not
    diverge, or when collect cannot say (a run without its server's result; a plug-in whose
    collect breaks its contract, which ``fedsim run`` names: the trace is the ledger's, written all
    the same)."""
    try:
        info = job.collect(run).info
    except Exception:  # noqa: BLE001 (see above: nothing of the trace depends on it)
        return None
    at = info.get("diverged_at") if isinstance(info, dict) else None
    return None if at is None or isinstance(at, bool) or not isinstance(at, (int, np.integer)) else int(at)


def _write_whole(path: Path, write) -> Path | None:
    """``write(tmp)`` into a file beside ``path`` (its suffix kept: matplotlib reads the format
    from it), renamed to ``path`` when it returned; removed if it raised (a full disk, a file
    size limit: a file half-written had replaced the one ``path`` held) or returned None (no
    matplotlib). Returns ``path``, or None."""
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    try:
        done = write(tmp)
        if done is None:
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename in (None, str(tmp)):
            # (the file the user knows of; a full disk's write or close named none)
            exc.filename = str(path)
        raise
    return path


def _trace_network(profile: str | None, net: NetSpec | None) -> NetSpec:
    """The ``NetSpec`` a trace runs on (see :func:`trace`); ``UsageError`` for a bad one."""
    if net is not None and profile is not None:
        raise UsageError(f"give the trace a profile ({profile!r}) or a NetSpec (profile {net.profile!r}), not both")
    if net is not None and not isinstance(net, NetSpec):
        raise UsageError(f"net must be a NetSpec, got {type(net).__name__}")
    if net is not None and net.transport != "sim":
        # the views are of the simulator's ledger and clock (a TracingNetwork is a SimNetwork)
        raise UsageError(f"a trace runs on the simulated network (transport 'sim'), not on transport {net.transport!r}")
    try:
        return net if net is not None else NetSpec(profile="lan" if profile is None else profile)
    except NetworkConfigError as exc:
        raise UsageError(str(exc)) from None


def _deadlock_advice(name: str, cfg: Any, netspec: NetSpec) -> str | None:
    """The remedy for a deadlock of protocol ``name`` (configuration ``cfg``) on a network with
    faults and no deadline: ``--set deadline=SECONDS`` (None when the network has no faults or
    the protocol has a deadline: the general advice then)."""
    if netspec.faults is None:
        return None
    given = ", ".join(f"--{k} {getattr(netspec, k):g}" for k in ("loss", "dropout") if getattr(netspec, k))
    if "deadline" not in {f.name for f in fields_of(type(cfg))}:
        return (f"{name} has no deadline: a message lost or never sent ({given}) is waited for for ever; "
                f"trace it without {given}")
    if getattr(cfg, "deadline") is None:
        return (f"{name} waits for ever for a message lost or never sent ({given}) without a deadline: "
                f"give it one, --set deadline=SECONDS")
    return None


# --------------------------------------------------------------------------------------------
# renderers


def _participants(net: SimNetwork) -> list[str]:
    order = {"server": 0}
    return sorted(net.nodes, key=lambda n: (order.get(net.ledger.roles.get(n, ""), 1), n))


def _alias(i: int) -> str:
    return f"N{i}"


def _fit(s: str, n: int) -> str:
    """``s`` in at most ``n`` characters for a fixed-width box of a drawing: the middle elided
    (node ids differ at their end: client-...-0001, client-...-0002); the whole text goes into
    the element's tooltip."""
    if len(s) <= n:
        return s
    head = (n - 1) // 2
    return s[:head] + "…" + s[len(s) - (n - 1 - head):]


def _ms(t: float) -> str:
    return "-" if t != t else f"{t * 1000:.3f} ms"


def first_rounds(rounds: list, limit: int) -> int:
    """How many of the messages whose round labels are ``rounds`` (in ledger order) a view of at
    most ``limit`` messages shows: all when they fit, else those up to the last start of a round
    within the limit (the first ``limit`` when the first round alone has more)."""
    if limit < 1:
        raise ValueError(f"a view shows at least one message, got limit {limit!r}")
    n = len(rounds)
    if n <= limit:
        return n
    return next((j for j in range(limit, 0, -1) if rounds[j] != rounds[j - 1]), limit)


def mermaid(net: SimNetwork, limit: int = MAX_MERMAID_CHARS) -> str:
    """The text of ``mermaid_view``: a Mermaid sequence diagram of the run, bounded to ``limit``
    characters."""
    return mermaid_view(net, limit)[0]


def mermaid_view(net: SimNetwork, limit: int = MAX_MERMAID_CHARS) -> tuple[str, dict | None]:
    """A Mermaid ``sequenceDiagram`` with one arrow per ledger row, in ledger order.

    Participants get the aliases ``N0``, ``N1``, ... with the node's id and role as their label;
    every name, role, kind and note is written as it is, its characters that Mermaid would read
    as syntax (``;`` ``#`` ``:`` ``%`` ``&`` ``<`` ``>``, and those of Mermaid's own entity
    placeholders) as Mermaid entity codes (``#59;`` for ``;``, ``#35;`` for ``#``, ``#58;`` for
    ``:``), which the diagram shows as the character; control characters escaped, as ``\\n``.
    A message read after it arrived says when (``read``); a node going offline, a wait that
    ended without some senders' messages (``ledger.missing``) and an actor still waiting at a
    deadlock are notes over that node, among the arrows where the step log has them (see
    ``trace_data``'s ``sequence``).

    A diagram longer than ``limit`` characters (``MAX_MERMAID_CHARS``, Mermaid's own limit) keeps
    its first whole rounds within it (the messages of the first round that fit, when that round
    alone is longer), and the notes among them, and ends with a note saying how many messages it
    shows, to which round, and that steps.log has them all. Returns the text and what it left
    out: None, or ``{"shown": k, "total": n}``."""
    names = _participants(net)
    alias = {n: _alias(i) for i, n in enumerate(names)}
    roles = net.ledger.roles
    lines = ["sequenceDiagram"]
    for n in names:
        label = _mermaid_text(f"{n} ({roles.get(n, '?')})")
        lines.append(f"    participant {alias[n]} as {label}")
    # a node going offline, a wait given up (ledger.missing) and a deadlock are notes among the
    # arrows (in ledger order: the order of sending), where the step log has them: see _sequence
    offline, missing, blocked = offline_events(net), missing_events(net), blocked_events(net)
    records = list(net.ledger.records())
    last_round = None
    starts = []  # the index in lines of each message's first line (its round's note, if it opens one)
    for what, i in _sequence(net, records, offline, missing, blocked):
        if what == "msg":
            starts.append(len(lines))
        if what == "offline":
            e = offline[i]
            lines.append(f"    Note over {alias[e['node']]}: " + _mermaid_text(
                f"{'drops out' if e['dropped'] else 'goes offline (had finished)'} at {_ms(e['time'])}"))
            continue
        if what == "missing":
            g = missing[i]
            lines.append(f"    Note over {alias[g['receiver']]}: " + _mermaid_text(
                f"{missing_text(g)[len(g['receiver']) + 1:]}, at {_ms(g['time'])}"))
            continue
        if what == "blocked":
            b = blocked[i]
            lines.append(f"    Note over {alias[b['node']]}: " + _mermaid_text(
                f"deadlock: still waiting at the end ({_ms(b['time'])}) in {b['waits']}"))
            continue
        r = records[i]
        if r["round"] != last_round:
            last_round = r["round"]
            lines.append(f"    Note over {alias[names[0]]}: {_round(r['round'])}")
        src, dst = alias[r["src"]], alias[r["dst"]]
        if r["status"] == "lost":
            arrow = "-x"
        elif r["anonymous"]:
            arrow = "-->>"
        else:
            arrow = "->>"
        tag = " (anonymous)" if r["anonymous"] else ""
        if r["status"] == "delivered":  # (as the step log and the page say: one the receiver never took)
            read = _read_later(net, r)
            fate = f"arrived {_ms(r['arrival_time'])}" + ("" if r["read"] else ", never read") + \
                ("" if read is None else f", read {_ms(read)}")
        elif r["status"] == "lost":
            fate = f"LOST {r['note']}"
        else:
            fate = "still in flight when the run ended"
        text = f"{r['kind']}{tag} {r['bytes']} B, sent {_ms(r['send_time'])}, {fate}"
        lines.append(f"    {src}{arrow}{dst}: {_mermaid_text(text)}")
        if r["anonymous"]:
            hidden = _mermaid_text(f"sender hidden from {r['dst']}")
            lines.append(f"    Note right of {dst}: {hidden}")
    text = "\n".join(lines) + "\n"
    if _js_len(text) <= limit:
        return text, None
    return _mermaid_cut(lines, starts, records, alias[names[0]], limit)


def _js_len(s: str) -> int:
    """``s``'s length as JavaScript (and so Mermaid's maxTextSize) counts it: in UTF-16 units."""
    return len(s) if s.isascii() else len(s.encode("utf-16-le")) // 2


def _mermaid_cut(lines: list[str], starts: list[int], records: list[dict], first: str,
                 limit: int) -> tuple[str, dict]:
    """The diagram ``lines`` cut to its first whole rounds within ``limit`` characters, the note
    saying so at its end (see ``mermaid``); ``starts[k]``: the index of message k's first line."""
    n = len(records)

    def note(k: int) -> str:
        if k == 0:
            shown = "none of the run's messages (its first alone does not fit)"
        else:
            shown = f"the first {k} of the run's {n} messages (to {_round(records[k - 1]['round'])})"
        rest = ("" if k == 0 else "the rest of " if records[k]["round"] == records[k - 1]["round"] else "") + \
            _round(records[k]["round"])
        return f"    Note over {first}: " + _mermaid_text(
            f"cut: this diagram shows {shown}; {rest} and every round after it are left out (with their notes) "
            f"to stay within Mermaid's {limit}-character limit; steps.log has every message")

    size = [0]  # characters before each line, as Mermaid counts them (JavaScript's: UTF-16 units)
    for line in lines:
        size.append(size[-1] + _js_len(line) + 1)
    fits = []
    for k in range(1, n):
        if size[starts[k]] > limit:  # (sizes only grow)
            break
        if size[starts[k]] + _js_len(note(k)) + 1 <= limit:
            fits.append(k)
    whole = [k for k in fits if records[k]["round"] != records[k - 1]["round"]]
    k = whole[-1] if whole else fits[-1] if fits else 0
    return "\n".join(lines[:starts[k]] + [note(k)]) + "\n", {"shown": k, "total": n}


# Mermaid reads ';' as a statement's end, '#' as a comment's start (and '#...;' as an entity
# code), '%%' as a comment or directive, ':' after a label's start as the wrap: / nowrap:
# directive, '&', '<', '>' as HTML in a label, and replaces its entity codes by the
# placeholders 'ﬂ°°' / 'ﬂ°' ... '¶ß' before it parses: each is written as an entity code, which
# Mermaid turns back into the character when it draws the text
_MERMAID_ESCAPES = {ord(c): f"#{ord(c)};" for c in ";#:%&<>ﬂ°¶ß"}


def _mermaid_text(s: str) -> str:
    # any text of the diagram (a node id, role, kind or note is any str), on one line
    return _one_line(s).translate(_MERMAID_ESCAPES)


def _one_line(s: str) -> str:
    # a kind, role, note or actor's log text is any str: a line break or other control character
    # in it would split one event of the step log over lines, the second without a time
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _round(rnd: int) -> str:
    """A round label as the views write it: a negative label is a setup round (the secure
    aggregation's key exchange), not a training round: ``setup`` for -1, ``setup for round N``
    for a label below -1, that of a network resumed at round N (FPL's ``key_setup_round``:
    -1 - N)."""
    rnd = int(rnd)
    return f"round {rnd}" if rnd >= 0 else "setup" if rnd == -1 else f"setup for round {-1 - rnd}"


def _happened(net: SimNetwork) -> dict[tuple[str, int], int]:
    """Each traced event's position in the order things happened (``net.happened``: a send
    ``("send", seq)``, an arrival, a loss, a read, a computation or sleep ``("span", i)``, a log
    line, a wait given up); empty for a network that did not trace."""
    return {what: i for i, what in enumerate(getattr(net, "happened", ()))}


def _sequence(net: SimNetwork, records: list[dict], offline: list[dict], missing: list[dict],
              blocked: list[dict]) -> list[tuple[str, int]]:
    """The rows of a sequence diagram in order: ``("msg", i)`` for ``records[i]`` (the ledger's
    rows, kept in ledger order: the order of sending) and ``("offline", i)``, ``("missing", i)``,
    ``("blocked", i)`` for the notes ``offline[i]`` (``offline_events``), ``missing[i]``
    (``missing_events``) and ``blocked[i]`` (``blocked_events``), each before the first message
    sent after it. At equal times, as in the step log: a node going offline before that instant's
    sends; a wait given up before or after a send as they happened (``net.happened``), or, for a
    network that did not trace (no ``happened``), before them; a deadlock (the run's end) after
    them, traced or not."""
    at = _happened(net)
    traced = bool(at)
    firsts = _missing_positions(net, at)
    notes = [((e["time"], 0, 0), ("offline", i)) for i, e in enumerate(offline)]
    for i, g in enumerate(missing):
        first = firsts.get(_missing_key(g["time"], g["receiver"], g["kind"], g["round"], g["wait"]))
        pos = -1 if first is None else at[("missing", first)]
        notes.append(((g["time"], 2, pos) if traced else (g["time"], 1, 0), ("missing", i)))
    notes += [((b["time"], 4, 0), ("blocked", i)) for i, b in enumerate(blocked)]
    notes.sort(key=lambda n: n[0])  # (stable: offline, missing, blocked at one key)
    out: list[tuple[str, int]] = []
    k = 0
    for i, r in enumerate(records):
        key = (r["send_time"], 2, at.get(("send", r["seq"]), -1) if traced else 0)
        while k < len(notes) and notes[k][0] < key:
            out.append(notes[k][1])
            k += 1
        out.append(("msg", i))
    out.extend(n[1] for n in notes[k:])
    return out


def _missing_key(time, receiver: str, kind: str, rnd, wait) -> tuple:
    """The wait a ``ledger.missing`` record belongs to (a group of ``missing_events``), from a
    record's or a group's fields: one key for both, so that they cannot drift apart. ``wait``
    (``Missing.wait``, the wait's number among its receiver's gathers) tells apart two waits of
    one receiver, kind and round that gave up at one instant; None for records made without it."""
    return float(time), receiver, kind, int(rnd), None if wait is None else int(wait)


def _missing_positions(net: SimNetwork, at: dict) -> dict[tuple, int]:
    """For each wait given up (a group of ``missing_events``, by ``_missing_key``), the index in
    ``ledger.missing`` of its first record whose position in ``at`` is the earliest; (absent
    when the network did not trace)."""
    out: dict[tuple, int] = {}
    for i, m in enumerate(net.ledger.missing):
        if ("missing", i) in at:
            key = _missing_key(m.time, m.receiver, m.kind, m.round, m.wait)
            if key not in out or at[("missing", i)] < at[("missing", out[key])]:
                out[key] = i
    return out


def _read_later(net: SimNetwork, r: dict) -> float | None:
    """When the receiver's actor took the delivered message ``r``, if that was after it arrived
    (it waited in the mailbox, a later round's, or in a gather until the gather returned); None
    if it was read on arrival, never read, or the network did not trace."""
    t = getattr(net, "read_at", {}).get(r["seq"])
    return t if t is not None and r["status"] == "delivered" and t > r["arrival_time"] else None


def missing_events(net: SimNetwork) -> list[dict]:
    """The ledger's ``missing`` records, one event per wait that ended without them (the records
    of one ``time``, ``receiver``, ``kind``, ``round`` and ``wait``, ``Missing.wait``: two waits
    of one receiver, kind and round that gave up at one instant are two events): those fields,
    ``senders`` (the ids named), ``anonymous`` (how many of a ``count=`` gather's, whose senders
    are not known), ``expected`` and ``arrived`` (how many messages the wait asked for and got:
    ``Missing.expected``/``arrived``; None when its records do not say, or, for records made
    without ``wait`` (by hand), when those of two waits fell into one group and do not add up to
    one wait's), in time order (at one time, in the order of the records)."""
    groups: dict[tuple, dict] = {}
    counts: dict[tuple, set] = {}
    for m in net.ledger.missing:
        time, receiver, kind, rnd, wait = key = _missing_key(m.time, m.receiver, m.kind, m.round, m.wait)
        g = groups.setdefault(key, {"time": time, "receiver": receiver, "kind": kind, "round": rnd, "wait": wait,
                                    "senders": [], "anonymous": 0, "expected": None, "arrived": None})
        counts.setdefault(key, set()).add((m.expected, m.arrived))
        if m.sender is None:
            g["anonymous"] += 1
        else:
            g["senders"].append(m.sender)
    for key, g in groups.items():
        expected, arrived = next(iter(counts[key])) if len(counts[key]) == 1 else (None, None)
        if expected is not None and arrived is not None and \
                expected - arrived == len(g["senders"]) + g["anonymous"]:
            g["expected"], g["arrived"] = int(expected), int(arrived)
    return sorted(groups.values(), key=lambda g: g["time"])


def _missing_count(g: dict, noun: str = "") -> str:
    """``2 of 5`` (+ `` messages``) of a ``missing_events`` group, or ``2`` when the count its
    wait expected is not known."""
    n = len(g["senders"]) + g["anonymous"]
    if g.get("expected") is None:
        return plural(n, noun) if noun else str(n)
    return f"{n} of {plural(g['expected'], noun) if noun else g['expected']}"


def missing_text(g: dict) -> str:
    """``server stops waiting for up (round 0): 2 of 5 missing (nothing from b, c)`` (a
    ``count=`` gather's: ``1 of 3 missing (any sender)``); without the wait's expected count
    (``missing_events``) ``nothing from b, c`` (or ``2 more (any sender)``)."""
    parts = []
    known = g.get("expected") is not None
    if g["senders"]:
        parts.append("nothing from " + ", ".join(g["senders"]))
    if g["anonymous"]:
        parts.append("any sender" if known and not g["senders"] else f"{g['anonymous']} more (any sender)")
    what = f"{_missing_count(g)} missing ({' and '.join(parts)})" if known else " and ".join(parts)
    return f"{g['receiver']} stops waiting for {g['kind']} ({_round(g['round'])}): {what}"


def offline_events(net: SimNetwork) -> list[dict]:
    """The nodes whose link went down during the run (``offline_at`` reached by its end):
    ``node``, ``time``, and ``dropped`` (True: its actor was stopped there; False: it had
    finished its part, only its link went down), in time order."""
    out = []
    end = net.now()
    for n in net.nodes.values():
        off = n.spec.offline_at
        if off is not None and (n.offline or off <= end):
            out.append({"node": n.id, "time": float(off), "dropped": bool(n.offline)})
    return sorted(out, key=lambda e: (e["time"], e["node"]))


def blocked_events(net: SimNetwork) -> list[dict]:
    """The actors a run ended with still blocked and nothing left that could wake them (a
    deadlock; from the network's ``result``, also kept by a network that did not trace):
    ``node``, ``time`` (the run's end) and ``waits`` (what it waited for, as ``DeadlockError``
    says), in node order; none before the network ran."""
    res = net.result
    if res is None:
        return []
    return [{"node": n, "time": float(res.duration), "waits": w} for n, w in sorted(res.blocked.items())]


def blocked_text(e: dict) -> str:
    return f"{e['node']} is still waiting when the run ends, with nothing left that could wake it (deadlock): {e['waits']}"


def offline_text(e: dict) -> str:
    return (f"{e['node']} drops out (offline from here on: its actor stops, messages to or from it are lost)"
            if e["dropped"] else f"{e['node']} goes offline (its actor had finished; messages to it are lost)")


def event_step(what: str, e: dict) -> dict:
    """What the page's step panel says of a note (``what``: ``offline``, ``missing`` or
    ``blocked``; ``e`` one of ``offline_events``, ``missing_events``, ``blocked_events``):
    ``head`` (``wait given up``, ``dropout``, ``offline``, ``deadlock``) and ``text``, a sentence
    with its time: ``server gives up waiting for up (round 0) at 50.000 ms: 2 of 5 messages
    missing (nothing from b, c)`` (``2 messages missing`` when the wait's expected count is not
    known: see ``missing_events``)."""
    at = _ms(e["time"])
    if what == "missing":
        only_any = e.get("expected") is not None and not e["senders"]
        parts = ([f"nothing from {', '.join(e['senders'])}"] if e["senders"] else []) + \
                (["from any sender" if only_any else f"{e['anonymous']} more from any sender"] if e["anonymous"] else [])
        return {"head": "wait given up", "round_label": _round(e["round"]), "text": f"{e['receiver']} gives up waiting for {e['kind']} "
                f"({_round(e['round'])}) at {at}: {_missing_count(e, 'message')} missing ({' and '.join(parts)})"}
    if what == "offline":
        if e["dropped"]:
            return {"head": "dropout", "text": f"{e['node']} drops out at {at}: offline from here on, its actor "
                                               "stops, messages to or from it are lost"}
        return {"head": "offline", "text": f"{e['node']} goes offline at {at}: its actor had finished, messages "
                                           "to it are lost"}
    if what == "blocked":
        return {"head": "deadlock", "text": f"{e['node']} is still waiting when the run ends at {at}, with nothing "
                                            f"left that could wake it: {e['waits']}"}
    raise ValueError(f"no step for a note {what!r} (offline, missing or blocked)")


def step_log(net: SimNetwork) -> str:
    """Every send, arrival, read, loss, computation and actor log line, in simulated-time order
    (what happened at one instant in the order it happened, ``net.happened``, kept by a network
    that traces), one a line (control characters in a kind or a text shown escaped, as ``\\n``); each message
    with its round (``setup`` for the key exchange's negative labels, ``setup for round N`` for
    ``-1 - N``: see ``_round``). A message its receiver
    took after it arrived (from the mailbox a round later, or when its gather returned) has a
    ``reads`` line then (``read_at``, kept by a network that traces), one never taken says
    ``(never read)`` at its arrival. A lost message's line is at the time it was lost and says why
    and when it was sent: the time the link model called ``net.lose`` (kept by a network that
    traces, ``lost_at``), but not before its last byte left the sender (``tx_end``): on
    SimNetwork a link loss when its transmission ended under every link model (``fifo`` draws it
    at the send, but the copy holds the sender's port until then), a dropout's loss when the link
    went down or the copy reached the offline node; on AsyncioNetwork (immediate delivery) its
    send time, when the loss is decided. A node going offline, and a wait that ended without
    some senders' messages (``ledger.missing``: a deadline), have a line of their own."""
    lost_at = getattr(net, "lost_at", {})
    at = _happened(net)
    # at equal times: a node going offline; then what happened (arrivals, losses, reads, waits
    # given up, computations, log lines, sends) in the order it happened (``net.happened``, of a
    # network that traces); for a network that did not trace: arrivals and losses of messages
    # sent earlier, then the rest, sends last, then arrivals and losses of messages sent at that
    # very instant (so too a fifo loss shown at its tx_end); then a deadlock
    events: list[tuple[float, int, int, int, str]] = []  # (time, rank, position in happened, sub-rank, text)

    def did(t: float, what: tuple[str, int], text: str, sub: int = 0) -> None:
        p = at.get(what)
        events.append((t, 2, -1 if p is None else p, sub if p is None else 0, text))

    for e in offline_events(net):
        events.append((e["time"], 0, 0, 0, offline_text(e)))
    for r in net.ledger.records():
        anon = " anonymously" if r["anonymous"] else ""
        rnd = _round(r["round"])
        src = "(anonymous)" if r["anonymous"] else r["src"]
        did(r["send_time"], ("send", r["seq"]), f"{r['src']} sends {r['kind']} ({rnd}, {r['bytes']} B){anon} to {r['dst']}", 1)
        if r["status"] == "delivered":
            text = f"{r['dst']} receives {r['kind']} ({rnd}) from {src}{'' if r['read'] else ' (never read)'}"
            if ("arrive", r["seq"]) in at:
                did(r["arrival_time"], ("arrive", r["seq"]), text)
            else:
                events.append((r["arrival_time"], 1 if r["arrival_time"] > r["send_time"] else 3, 0, 0, text))
            read = _read_later(net, r)
            if read is not None:
                did(read, ("read", r["seq"]), f"{r['dst']} reads {r['kind']} ({rnd}) from {src} "
                                              f"(arrived at {_ms(r['arrival_time'])})")
        elif r["status"] == "lost":
            what = f"{r['kind']} ({rnd}) from {r['src']} to {r['dst']} (sent at {_ms(r['send_time'])})"
            t = lost_at.get(r["seq"])
            if t is None:  # (a network that did not trace: only the send time is known)
                events.append((r["send_time"], 3, 0, 0, f"{what} is lost ({r['note']}; when not recorded: the "
                                                        "network did not trace)"))
            else:
                # not before its last byte left: fifo draws a link loss at the send, but the copy
                # holds the sender's port until tx_end all the same (as the timeline shows)
                if r["tx_end"] > t:
                    t = r["tx_end"]
                    events.append((t, 1 if t > r["send_time"] else 3, 0, 0, f"{what} is lost ({r['note']})"))
                else:
                    did(t, ("lost", r["seq"]), f"{what} is lost ({r['note']})")
        else:  # the run ended (a deadline, until) before it arrived: neither delivered nor lost
            events.append((r["send_time"], 3, 0, 0, f"{r['kind']} ({rnd}) from {r['src']} to {r['dst']} is still in "
                                                     "flight when the run ends"))
    firsts = _missing_positions(net, at)
    for g in missing_events(net):
        first = firsts.get(_missing_key(g["time"], g["receiver"], g["kind"], g["round"], g["wait"]), -1)
        did(g["time"], ("missing", first), missing_text(g))
    for b in blocked_events(net):
        events.append((b["time"], 4, 0, 0, blocked_text(b)))
    for i, (node, start, end, label) in enumerate(net.trace):
        # a duration, not a time on the run's clock: in human units (it was .3f ms, and a client's
        # 20 ns of compute on lan read "computes for 0.000 ms")
        did(start, ("span", i), f"{node} {label}s for {human_seconds(end - start)}")
    for i, (t, node, text) in enumerate(net.steps):
        did(t, ("log", i), f"{node}: {text}")
    events.sort(key=lambda e: e[:4])
    return "".join(f"{e[0] * 1000:12.3f} ms  {_one_line(e[4])}\n" for e in events)


_COLORS = {"sending": "#4C72B0", "receiving": "#55A868", "compute": "#C44E52", "sleep": "#E0D080",
           "propagating": "#8C8C8C", "offline": "#D8D8D8"}


def _spans(net: SimNetwork, limit: int = MAX_PAGE_MESSAGES):
    """The timelines' lanes, spans and arrows, and what they leave out (``cut``: None, or the
    messages ``shown`` and ``total``, the send time ``at`` of the first left out, which ends the
    drawing, and the round labels ``last_shown`` and ``first_cut``): of a run of more than
    ``limit`` messages its first whole rounds (``first_rounds``), the computations and nodes
    going offline before ``at``, as on the page (a timeline of 60000 messages was a 25 MB SVG
    of slivers and took matplotlib seconds)."""
    lanes = _participants(net)
    spans = []  # (lane, start, end, kind)
    arrows = []  # (from lane, to lane, t0, t1, anonymous)
    records = list(net.ledger.records())
    k = first_rounds([r["round"] for r in records], limit)
    cut, at = None, float("inf")
    if k < len(records):
        at = records[k]["send_time"]
        cut = {"shown": k, "total": len(records), "at": at, "last_shown": _round(records[k - 1]["round"]),
               "first_cut": _round(records[k]["round"]), "whole": records[k]["round"] != records[k - 1]["round"]}
    for r in records[:k]:
        if r["tx_end"] == r["tx_end"]:
            spans.append((r["src"], r["tx_start"], r["tx_end"], "sending"))
        if r["status"] == "delivered":
            spans.append((r["dst"], r["rx_start"], r["arrival_time"], "receiving"))
            arrows.append((r["src"], r["dst"], r["tx_end"], r["rx_start"], r["anonymous"]))
    for node, start, end, label in net.trace:  # ctx.sleep's spans (label "sleep") are no computing
        if start < at:
            spans.append((node, start, end, "sleep" if label == "sleep" else "compute"))
    # a node's link down, from then to the end of the drawing, under its other spans
    end = max([s[2] for s in spans] + ([net.now()] if cut is None else [at]))
    spans[:0] = [(e["node"], e["time"], max(end, e["time"]), "offline") for e in offline_events(net) if e["time"] < at]
    return lanes, spans, arrows, cut


def _timeline_cut_text(cut: dict | None) -> str:
    """What a timeline leaves out (``_spans``' ``cut``), or nothing."""
    if cut is None:
        return ""
    rest = ("" if cut["whole"] else "the rest of ") + cut["first_cut"]
    return (f"the first {cut['shown']} of the run's {cut['total']} messages (to {cut['last_shown']}, sent before "
            f"{_ms(cut['at'])}); {rest} and every round after it left out: steps.log has every message")


def timeline_svg(net: SimNetwork, limit: int = MAX_PAGE_MESSAGES) -> str:
    """The timeline as a standalone SVG (no plotting library needed): of a run of more than
    ``limit`` messages its first whole rounds, as on the page, and a line under the title saying
    what it leaves out (``_spans``)."""
    lanes, spans, arrows, cut = _spans(net, limit)
    t_end = max([s[2] for s in spans] + [1e-9])
    width, left, lane_h, top = 900, 170, 34, 30
    if cut is not None:  # (a second line of title: what is left out)
        top += 16
    height = top + lane_h * len(lanes) + 40
    x = lambda t: left + (width - left - 20) * (t / t_end)
    y = {n: top + i * lane_h for i, n in enumerate(lanes)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16">simulated time, 0 to {t_end * 1000:.3f} ms</text>']
    if cut is not None:
        out.append(f'<text id="cut" x="5" y="32" fill="#A0522D">Cut: {_html.escape(_timeline_cut_text(cut), quote=False)}</text>')
    for n in lanes:
        full = f"{n} ({net.ledger.roles.get(n, '')})"  # a role is any text
        label = _html.escape(_fit(full, 26))  # what fits left of the lanes' start
        out.append(f'<g><title>{_html.escape(full)}</title><text x="5" y="{y[n] + 18}">{label}</text></g>')
        out.append(f'<line x1="{left}" y1="{y[n] + 26}" x2="{width - 20}" y2="{y[n] + 26}" stroke="#ddd"/>')
    for lane, s, e, kind in spans:
        w = max(x(e) - x(s), 0.8)
        out.append(f'<rect x="{x(s):.2f}" y="{y[lane] + 6}" width="{w:.2f}" height="18" fill="{_COLORS[kind]}" '
                   f'opacity="0.85"><title>{kind} {s * 1000:.3f}-{e * 1000:.3f} ms</title></rect>')
    for a, b, t0, t1, anon in arrows:
        dash = ' stroke-dasharray="4,3"' if anon else ""
        out.append(f'<line x1="{x(t0):.2f}" y1="{y[a] + 15}" x2="{x(t1):.2f}" y2="{y[b] + 15}" '
                   f'stroke="{_COLORS["propagating"]}" stroke-width="0.8"{dash}/>')
    lx = left
    for kind, col in _COLORS.items():
        out.append(f'<rect x="{lx}" y="{height - 22}" width="12" height="12" fill="{col}"/>'
                   f'<text x="{lx + 16}" y="{height - 12}">{kind}</text>')
        lx += 110
    out.append(f'<text x="{lx}" y="{height - 12}">dashed: anonymous</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def timeline_png(net: SimNetwork, path: Path, limit: int = MAX_PAGE_MESSAGES) -> Path | None:
    """``timeline_svg``'s drawing with matplotlib into ``path`` (None without matplotlib): of a
    run of more than ``limit`` messages its first whole rounds, the title saying what it leaves out."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from matplotlib.collections import LineCollection

    lanes, spans, arrows, cut = _spans(net, limit)
    idx = {n: i for i, n in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(lanes) + 1.5), dpi=110)
    # one collection per lane and kind, one per line style (an artist per span and arrow took 20 s
    # of a 24 s trace of 150 rounds); drawn in the order of _spans' kinds, offline first, beneath
    bars: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for lane, s, e, kind in spans:
        bars.setdefault((lane, kind), []).append((s * 1000, max((e - s) * 1000, 1e-6)))
    for (lane, kind), xr in bars.items():
        ax.broken_barh(xr, (idx[lane] - 0.35, 0.7), facecolors=_COLORS[kind], alpha=0.85)
    for anon in (False, True):
        segs = [[(t0 * 1000, idx[a]), (t1 * 1000, idx[b])] for a, b, t0, t1, an in arrows if bool(an) == anon]
        if segs:
            ax.add_collection(LineCollection(segs, colors=_COLORS["propagating"], linewidths=0.6,
                                             linestyles="--" if anon else "-"))
    ax.autoscale_view()
    ax.set_yticks(range(len(lanes)), [f"{n} ({net.ledger.roles.get(n, '')})" for n in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (ms)")
    if cut is not None:
        import textwrap

        ax.set_title("\n".join(textwrap.wrap("Cut: " + _timeline_cut_text(cut), 120)), fontsize=8, loc="left")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in _COLORS.items()], loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# the self-contained HTML page

def _num_or_none(v: float) -> float | None:
    return None if v != v else float(v)


def trace_data(net: SimNetwork) -> dict:
    """What the HTML page shows, as JSON-ready data: the participants (id, role), every message
    (ledger row, payload fields when the network kept them, ``read``: when its receiver took it
    if that was after its arrival; ``round_label``: its round as the views write it, ``setup for
    round 5`` for the label -6), every compute span, the waits that ended without some
    senders' messages (``missing``: see ``missing_events``) and the nodes that went offline
    (``offline``: see ``offline_events``), the actors still waiting at a deadlock (``blocked``)
    and the rows of the sequence diagram in order (``sequence``: ``["msg", i]`` for
    ``messages[i]``, ``["offline", i]``, ``["missing", i]``, ``["blocked", i]`` for a note; the
    notes of one instant before or after its sends as they happened, as in the step log), which
    are the page's steps: ``steps`` has what its step panel says of each note
    (``steps["missing"][i]``: ``event_step`` of ``missing[i]``)."""
    payloads = getattr(net, "payloads", {})
    messages = []
    for i, r in enumerate(net.ledger.records()):
        messages.append({
            "i": i, "round": int(r["round"]), "round_label": _round(r["round"]), "src": r["src"], "dst": r["dst"], "src_role": r["src_role"],
            "dst_role": r["dst_role"], "kind": r["kind"], "bytes": int(r["bytes"]), "raw_bytes": int(r["raw_bytes"]),
            "send": _num_or_none(r["send_time"]), "tx_start": _num_or_none(r["tx_start"]),
            "tx_end": _num_or_none(r["tx_end"]), "rx_start": _num_or_none(r["rx_start"]),
            "arrival": _num_or_none(r["arrival_time"]), "status": r["status"], "anonymous": bool(r["anonymous"]),
            "read": bool(r["read"]), "read_at": _read_later(net, r), "note": r["note"],
            "payload": payloads.get(i, []),
        })
    nodes = [{"id": n, "role": net.ledger.roles.get(n, "")} for n in _participants(net)]
    compute = [{"node": n, "start": s, "end": e, "label": lab} for n, s, e, lab in net.trace]
    offline, missing, blocked = offline_events(net), missing_events(net), blocked_events(net)
    sequence = [[what, i] for what, i in _sequence(net, list(net.ledger.records()), offline, missing, blocked)]
    # each note is a step of the page too: what its step panel says (event_step), by note
    steps = {what: [event_step(what, e) for e in events] for what, events in
             (("offline", offline), ("missing", missing), ("blocked", blocked))}
    return {"nodes": nodes, "steps": steps, "messages": messages, "compute": compute, "missing": missing,
            "offline": offline, "blocked": blocked, "sequence": sequence, "end": float(net.now())}


_SEQ_COL, _SEQ_LEFT, _SEQ_TOP, _SEQ_ROW = 150, 90, 56, 30


def _sequence_svg(data: dict) -> str:
    nodes = [n["id"] for n in data["nodes"]]
    anon = any(m["anonymous"] for m in data["messages"])
    lanes = nodes + (["(anonymous)"] if anon else [])
    x = {n: _SEQ_LEFT + i * _SEQ_COL for i, n in enumerate(lanes)}
    rows: list[tuple[str, Any]] = []
    # as in the Mermaid diagram: a node going offline, a wait given up, a deadlock among the
    # messages where they happened (data["sequence"])
    texts = {"offline": [(e["time"], e["node"], offline_text(e)) for e in data["offline"]],
             "missing": [(g["time"], g["receiver"], missing_text(g)) for g in data["missing"]],
             "blocked": [(b["time"], b["node"], blocked_text(b)) for b in data["blocked"]]}
    last_round = None
    for what, i in data["sequence"]:
        if what != "msg":
            rows.append(("note", texts[what][i] + (f"{what}-{i}",)))
            continue
        m = data["messages"][i]
        if m["round"] != last_round:
            last_round = m["round"]
            rows.append(("round", m["round"]))
        rows.append(("msg", m))
    height = _SEQ_TOP + _SEQ_ROW * (len(rows) + 1)
    width = _SEQ_LEFT + _SEQ_COL * (len(lanes) - 1) + 90
    # a note starts at its node's lifeline and runs right: the diagram as wide as the longest
    # needs (some 4.6 px a character at this size; 6.5 to spare), else it was cut off mid-sentence
    ends = [x[item[1]] + 6.5 * len(f"{_ms(item[0])}: {item[2]}") + 16 for kind, item in rows if kind == "note"]
    width = int(max([width] + ends))
    e = _html.escape
    out = [f'<svg id="sequence" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" markerHeight="9" '
           'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="context-stroke"/></marker></defs>']
    roles = {n["id"]: n["role"] for n in data["nodes"]}
    # the lane headers are drawn last, over the rows, in one group the page's script keeps in
    # view (sticky: moved down under the controls as the diagram scrolls up); lifelines first
    head = [f'<g id="lanehead"><rect x="0" y="0" width="{width}" height="44" fill="#fff" opacity="0.95"/>']
    for n in lanes:
        cls = "lane anon-lane" if n == "(anonymous)" else "lane"
        role = roles.get(n, "sender hidden")
        out.append(f'<line class="{cls.replace("lane", "lifeline")}" x1="{x[n]}" y1="40" x2="{x[n]}" '
                   f'y2="{height - 6}" stroke="#bbb" stroke-dasharray="3,3"/>')
        # (a long id or role elided to the box, whole in the tooltip: it ran over its neighbours)
        head.append(f'<g class="{cls}"><title>{e(n)} ({e(role)})</title><rect x="{x[n] - 62}" y="6" width="124" '
                    f'height="34" rx="4" fill="#f3f3f3" stroke="#999"/><text x="{x[n]}" y="21" text-anchor="middle" '
                    f'font-weight="bold">{e(_fit(n, 18))}</text><text x="{x[n]}" y="34" text-anchor="middle" '
                    f'fill="#555">{e(_fit(role, 20))}</text></g>')
    head.append("</g>")
    y = _SEQ_TOP
    for kind, item in rows:
        y += _SEQ_ROW
        if kind == "round":
            out.append(f'<g class="round"><line x1="8" y1="{y - 12}" x2="{width - 8}" y2="{y - 12}" stroke="#ddd"/>'
                       f'<text x="10" y="{y - 2}" fill="#777">{_round(item)}</text></g>')
            continue
        if kind == "note":  # (a step of the page: its id names the event, "missing-0")
            t, node, text, key = item
            out.append(f'<g class="note" id="note-{key}" data-step="{key}"><rect class="hit" x="8" y="{y - 16}" '
                       f'width="{width - 16}" height="{_SEQ_ROW - 4}" fill="transparent"/>'
                       f'<text x="{x[node]}" y="{y - 2}" fill="#C44E52" font-style="italic">'
                       f'{e(_ms(t))}: {e(text)}</text></g>')
            continue
        m = item
        lost = m["status"] == "lost"
        color = "#C44E52" if lost else "#4C72B0" if not m["anonymous"] else "#8172B2"
        label = f'{m["kind"]} · {_human_size(m["bytes"])}' + (" · LOST" if lost else
                                                              " · in flight at the end" if m["status"] == "in_flight" else
                                                              " · never read" if not m["read"] else
                                                              f" · read {_ms(m['read_at'])}" if m["read_at"] is not None
                                                              else "")
        variants = [("true", m["src"])] + ([("hidden", "(anonymous)")] if m["anonymous"] else [])
        out.append(f'<g class="msg{" anonymous" if m["anonymous"] else ""}" id="m{m["i"]}" data-i="{m["i"]}">'
                   f'<rect class="hit" x="8" y="{y - 16}" width="{width - 16}" height="{_SEQ_ROW - 4}" '
                   f'fill="transparent"/>')
        for variant, src in variants:
            x1, x2 = x[src], x[m["dst"]]
            if x1 == x2:
                x2 = x1 + 40
            cls = f"arrow-{variant}" if m["anonymous"] else ""
            dash = ' stroke-dasharray="5,3"' if m["anonymous"] else ""
            end = "" if lost else ' marker-end="url(#arrow)"'
            xe = x1 + (x2 - x1) * (0.85 if lost else 1.0)
            out.append(f'<g class="{cls}"><line x1="{x1}" y1="{y}" x2="{xe:.1f}" y2="{y}" stroke="{color}" '
                       f'stroke-width="1.6"{dash}{end}/>')
            if lost:
                out.append(f'<text x="{xe:.1f}" y="{y + 4}" text-anchor="middle" fill="{color}" '
                           f'font-weight="bold">✕</text>')
            out.append(f'<text x="{(x1 + x2) / 2:.1f}" y="{y - 5}" text-anchor="middle" fill="#222">'
                       f'{e(label)}</text></g>')
        out.append("</g>")
    out.extend(head)
    out.append("</svg>")
    return "\n".join(out)


_TL_COLORS = {"queueing": "#DD8452", "sending": "#4C72B0", "propagating": "#CCCCCC", "receiving": "#55A868",
              "computing": "#C44E52", "sleeping": "#E0D080", "offline": "#E8E8E8"}


def _timeline_html_svg(data: dict) -> str:
    nodes = [n["id"] for n in data["nodes"]]
    spans = []  # (node, start, end, kind, message index or -1)
    for m in data["messages"]:
        if m["send"] is not None and m["tx_start"] is not None and m["tx_start"] > m["send"]:
            spans.append((m["src"], m["send"], m["tx_start"], "queueing", m["i"]))
        if m["tx_start"] is not None and m["tx_end"] is not None:
            spans.append((m["src"], m["tx_start"], m["tx_end"], "sending", m["i"]))
        if m["status"] == "delivered" and m["rx_start"] is not None:
            if m["tx_end"] is not None and m["rx_start"] > m["tx_end"]:
                spans.append((m["dst"], m["tx_end"], m["rx_start"], "propagating", m["i"]))
            spans.append((m["dst"], m["rx_start"], m["arrival"], "receiving", m["i"]))
    for c in data["compute"]:
        spans.append((c["node"], c["start"], c["end"], "sleeping" if c["label"] == "sleep" else "computing", -1))
    t_end = max([s[2] for s in spans if s[2] is not None] + [data["end"], 1e-9])
    # from the link going down to the end of the drawing, under the node's other spans
    spans[:0] = [(o["node"], o["time"], max(t_end, o["time"]), "offline", -1)
                 for o in data.get("offline_drawn", data["offline"])]
    width, left, lane_h, top = 960, 150, 30, 24
    height = top + lane_h * len(nodes) + 34
    sx = (width - left - 16) / t_end
    y = {n: top + i * lane_h for i, n in enumerate(nodes)}
    e = _html.escape
    # data-from/-to: the window drawn (the whole run, until the page's zoom menu picks a round's or
    # a step's); data-t0 and data-scale: a time t (s) is at x = t0 + t * scale in it
    out = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11" data-t0="{left}" data-scale="{sx:.6f}" data-left="{left}" '
           f'data-right="{width - 16}" data-from="0" data-to="{t_end!r}" data-end="{t_end!r}">',
           f'<text id="tl-range" x="{left}" y="14" fill="#555">simulated time, 0 to {_ms(t_end)}</text>']
    for n in nodes:
        out.append(f'<g><title>{e(n)}</title><text x="4" y="{y[n] + 17}">{e(_fit(n, 22))}</text></g>'
                   f'<line x1="{left}" y1="{y[n] + 26}" x2="{width - 10}" y2="{y[n] + 26}" stroke="#eee"/>')
    for node, s, t, kind, i in spans:
        if node not in y or s is None or t is None:
            continue
        w = max((t - s) * sx, 0.8)
        h = 8 if kind == "propagating" else 18
        yy = y[node] + (11 if kind == "propagating" else 6)
        # (propagation starts as the sender's last byte leaves: its side, for a hidden sender)
        side = "src" if kind in ("queueing", "sending", "propagating") else "dst"
        # (data-s, data-e: the exact times a zoom lays it out from, those of a computation or a
        # node offline; a message's span takes them from the message's, by its kind)
        times = f'data-s="{s!r}" data-e="{t!r}" ' if i < 0 else ""
        out.append(f'<rect class="span {kind}" data-msg="{i}" data-side="{side}" {times}'
                   f'x="{left + s * sx:.2f}" y="{yy}" width="{w:.2f}" '
                   f'height="{h}" fill="{_TL_COLORS[kind]}"><title>{e(node)}: {kind} {_ms(s)} to {_ms(t)}'
                   f'</title></rect>')
    out.append(f'<line id="cursor" x1="{left}" y1="{top - 4}" x2="{left}" y2="{height - 30}" stroke="#000" '
               f'stroke-width="1" visibility="hidden"/>')
    lx = left
    for kind, col in _TL_COLORS.items():
        out.append(f'<rect x="{lx}" y="{height - 20}" width="12" height="12" fill="{col}"/>'
                   f'<text x="{lx + 16}" y="{height - 10}">{kind}</text>')
        lx += 110
    out.append("</svg>")
    return "\n".join(out)


def _human_size(n: float) -> str:
    from ..experiment import human_bytes

    return human_bytes(n)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fedsim trace: __TITLE__</title>
<style>
body { font-family: sans-serif; margin: 16px 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px 0; } h2 { font-size: 15px; margin: 18px 0 6px 0; }
.sub { color: #555; margin-bottom: 10px; }
#controls { position: sticky; top: 0; background: #fff; padding: 8px 0; border-bottom: 1px solid #ddd; z-index: 2; }
#controls button { font-size: 14px; padding: 4px 12px; margin-right: 6px; }
#step { display: inline-block; min-width: 180px; font-weight: bold; }
#panel { border: 1px solid #ccc; border-radius: 6px; padding: 8px 12px; margin-top: 8px; background: #fafafa; }
#panel table { border-collapse: collapse; margin-top: 6px; }
#panel td, #panel th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; font-size: 13px; }
.scroll { overflow-x: auto; }
.msg { cursor: pointer; }
.msg.current line { stroke-width: 2.8; }
.msg.current text { font-weight: bold; }
.msg.current rect.hit { fill: #fff3c4; }
.note { cursor: pointer; } .note.current text { font-weight: bold; } .note.current rect.hit { fill: #fff3c4; }
body:not(.reveal) .arrow-true { display: none; }
body.reveal .arrow-hidden, body.reveal .anon-lane, body.reveal .anon-lifeline { display: none; }
#timeline.focus .span:not([data-msg="-1"]):not(.hl) { opacity: 0.25; } .span.hl { stroke: #000; stroke-width: 1.2; }
.hidden-sender { color: #8172B2; font-style: italic; }
.cut { border: 1px solid #DD8452; background: #fff4ec; border-radius: 6px; padding: 6px 10px; margin: 6px 0; }
</style></head>
<body>
<h1>fedsim trace: __TITLE__</h1>
<div class="sub">__SUMMARY__ · __COUNT__, __BYTES__ on the wire__FAULTS__. Step through the messages, and the waits
given up, dropouts and deadlocks among them where they happened, with the buttons, the arrow keys (Home and End:
the first and the last), or a click on an arrow or a note; jump to a round's first message with the round menu.</div>__CUT__
<div id="controls">
<button id="first" type="button">&#8676; first</button><button id="prev" type="button">&#8592; previous</button><button id="next" type="button">next &#8594;</button><button id="last" type="button">last &#8677;</button>
<label>round <select id="round"><option value="-1">(jump to a round)</option></select></label>
<label>timeline <select id="zoom"><option value="run">whole run</option><option value="round">zoomed to the round</option><option value="step">zoomed to the step</option></select></label>
<span id="step"></span>
<label><input type="checkbox" id="reveal"> reveal anonymous senders (the simulator's view)</label>
<div id="panel"></div>
</div>
<h2>Sequence of messages</h2>
<div class="scroll">__SEQUENCE__</div>
<h2>Timeline of every node (simulated time)</h2>
<div class="scroll">__TIMELINE__</div>
<script id="trace-data" type="application/json">__DATA__</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("trace-data").textContent);
  // the steps: the rows of the sequence diagram in order, each a message ["msg", i] or a note
  // (a wait given up, a node going offline, a deadlock: ["missing", i] ...) where it happened
  var msgs = data.messages, steps = data.sequence, idx = -1;
  var stepOfMsg = {}, stepOfNote = {}, msgsBefore = [], seen = 0, nEvents = 0;
  steps.forEach(function (s, k) {
    msgsBefore.push(seen);
    if (s[0] === "msg") { stepOfMsg[s[1]] = k; seen++; } else { stepOfNote[s[0] + "-" + s[1]] = k; nEvents++; }
  });
  // the rounds in the order of their first message (the round menu) and each step's round: a
  // message's; a wait given up's own; another note's, that of the message before it (or after)
  var rounds = [], roundOf = [], byRound = {};
  msgs.forEach(function (m, k) {
    if (!(m.round in byRound)) { byRound[m.round] = rounds.length; rounds.push(stepOfMsg[k]); }
  });
  steps.forEach(function (s, k) {
    var r = s[0] === "msg" ? byRound[msgs[s[1]].round] :
            s[0] === "missing" && data.missing[s[1]].round in byRound ? byRound[data.missing[s[1]].round] :
            k > 0 ? roundOf[k - 1] : -1;
    roundOf.push(r);
  });
  for (var k = roundOf.length - 1, after = -1; k >= 0; k--) {  // notes before the first message
    if (roundOf[k] === -1) roundOf[k] = after; else after = roundOf[k];
  }
  var menu = document.getElementById("round");
  rounds.forEach(function (k) {
    var o = document.createElement("option");
    o.value = String(k); o.textContent = msgs[steps[k][1]].round_label; menu.appendChild(o);
  });
  // each message's spans on the timeline, found once: a step changes these, not every span
  var spansOf = {}, lit = [], currentG = null;
  document.querySelectorAll(".span").forEach(function (r) {
    var k = Number(r.getAttribute("data-msg"));
    if (k >= 0) (spansOf[k] = spansOf[k] || []).push(r);
  });
  function size(n) {
    if (n < 1000) return n + " B";
    var u = ["kB", "MB", "GB", "TB"], i = -1;
    do { n /= 1000; i++; } while (n >= 999.5 && i < u.length - 1);
    return n.toPrecision(3).replace(/\\.0+$|(\\.\\d*?)0+$/, "$1") + " " + u[i];
  }
  // a size as the ledger counts it: the byte count itself, after its rounded form from 1 kB on
  function exact(n) { return n < 1000 ? n + " B" : size(n) + " (" + n + " B)"; }
  function ms(t) { return t === null ? "-" : (t * 1000).toFixed(3) + " ms"; }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\"": "&quot;"}[c]; }); }
  function reveal() { return document.body.classList.contains("reveal"); }
  function sender(m) {
    if (m.anonymous && !reveal())
      return '<span class="hidden-sender" id="sender">hidden: sent anonymously, ' + esc(m.dst) +
             ' does not learn who sent it</span>';
    return '<span id="sender">' + esc(m.src) + " (" + esc(m.src_role) + ")" +
           (m.anonymous ? " (anonymous to the receiver)" : "") + "</span>";
  }
  function render() {
    var step = document.getElementById("step"), panel = document.getElementById("panel");
    if (currentG) currentG.classList.remove("current");
    lit.forEach(function (r) { r.classList.remove("hl"); });
    lit = [];
    var cursor = document.getElementById("cursor"), tl = document.getElementById("timeline");
    tl.classList.toggle("focus", idx >= 0);  // the other messages' spans dimmed (CSS)
    layout();
    menu.selectedIndex = idx < 0 ? 0 : roundOf[idx] + 1;
    var shown = data.cut ? " shown (the run has " + data.cut.total + ")" : "";
    if (idx < 0) {
      step.textContent = "before the first message (" + msgs.length + (msgs.length === 1 ? " message" : " messages") +
                         (data.cut ? " shown of the run's " + data.cut.total : "") +
                         (nEvents ? ", " + nEvents + (nEvents === 1 ? " event" : " events") : "") + ")";
      panel.innerHTML = "Press <b>next</b> to follow the protocol message by message.";
      cursor.setAttribute("visibility", "hidden");
      stick();
      return;
    }
    if (steps[idx][0] !== "msg") {  // a note: what happened, when, and where among the messages
      var what = steps[idx][0], ev = data.steps[what][steps[idx][1]], before = msgsBefore[idx];
      step.textContent = ev.head + ", " + (before ? "after message " + before : "before message 1") + " of " +
                         msgs.length + shown;
      currentG = document.getElementById("note-" + what + "-" + steps[idx][1]);
      if (currentG) currentG.classList.add("current");
      panel.innerHTML = '<div><b id="event">' + esc(ev.head) + "</b>" +
        (ev.round_label ? " · " + esc(ev.round_label) : "") + "</div>" +
        '<div id="what">' + esc(ev.text) + "</div>";
      var xt = Number(tl.getAttribute("data-t0")) + data[what][steps[idx][1]].time * Number(tl.getAttribute("data-scale"));
      cursor.setAttribute("x1", xt); cursor.setAttribute("x2", xt);
      cursor.setAttribute("visibility", "visible");
      show(currentG);
      return;
    }
    var m = msgs[steps[idx][1]], hidden = m.anonymous && !reveal();
    step.textContent = "message " + (m.i + 1) + " of " + msgs.length + shown;
    var g = currentG = document.getElementById("m" + m.i);
    if (g) { g.classList.add("current"); }
    var rows = m.payload.map(function (f) {
      return "<tr><td>" + esc(f.name) + "</td><td>" + (f.shape ? esc(f.dtype) + "[" + f.shape.join(" × ") + "]" : "") +
             "</td><td>" + (f.shape ? size(f.bytes) : esc(f.value)) + "</td></tr>";
    }).join("");
    var fate = m.status === "lost" ? "<b>lost</b> (" + esc(m.note) + ")" :
               m.status === "in_flight" ? "still in flight when the run ended" :
               "arrived " + ms(m.arrival) + (m.read ? (m.read_at === null ? "" : ", read " + ms(m.read_at)) : ", never read");
    panel.innerHTML =
      '<div><b id="kind">' + esc(m.kind) + "</b> · " + esc(m.round_label) + "</div>" +
      "<div>from " + sender(m) + ' to <span id="receiver">' + esc(m.dst) + " (" + esc(m.dst_role) + ")</span></div>" +
      '<div id="sizes">' + exact(m.bytes) + " on the wire, " + exact(m.raw_bytes) + " of array payload</div>" +
      '<div id="times">' + (hidden ? "sent and transmitted at times hidden with the sender" :
        "sent " + ms(m.send) + ", transmitted " + ms(m.tx_start) + " to " + ms(m.tx_end)) + ", " + fate + "</div>" +
      '<table id="payload"><tr><th>field</th><th>array</th><th>size or value</th></tr>' + rows + "</table>";
    (spansOf[m.i] || []).forEach(function (r) {
      if (hidden && r.getAttribute("data-side") === "src") return;  // would show the sender
      r.classList.add("hl"); lit.push(r);
    });
    // at the send; for a hidden sender at what the receiver sees, the start of its reception (none
    // for a message that never reached it): the sender's times would point at its lane
    var at = hidden ? (m.status === "delivered" ? m.rx_start : null) : (m.send || 0);
    var x = Number(tl.getAttribute("data-t0")) + (at || 0) * Number(tl.getAttribute("data-scale"));
    cursor.setAttribute("x1", x); cursor.setAttribute("x2", x);
    cursor.setAttribute("visibility", at === null ? "hidden" : "visible");
    show(g);
  }
  // the timeline's window: the whole run, the current step's round (from its first send to the
  // last arrival, read, or note of it: a wait given up ends its round at the give-up, never at a
  // deadline as such, which the page does not know) or the current step (a message from its send to its
  // arrival, a tenth of that either side; a hidden sender's from the start of its reception; a
  // note: its round's); the spans laid out anew from their exact times when it changes
  var zoom = document.getElementById("zoom"), tlSvg = document.getElementById("timeline");
  var tlLeft = Number(tlSvg.getAttribute("data-left")), tlRight = Number(tlSvg.getAttribute("data-right"));
  var tlEnd = Number(tlSvg.getAttribute("data-end")), tlSpans = Array.prototype.slice.call(tlSvg.querySelectorAll(".span"));
  // each span's times: a message's from its fields, by the span's kind; another's from data-s/-e
  var bounds = {queueing: ["send", "tx_start"], sending: ["tx_start", "tx_end"], propagating: ["tx_end", "rx_start"],
                receiving: ["rx_start", "arrival"]};
  var tlTimes = tlSpans.map(function (r) {
    var k = Number(r.getAttribute("data-msg")), b = bounds[r.classList[1]];
    return k >= 0 && b ? [msgs[k][b[0]], msgs[k][b[1]]] : [Number(r.getAttribute("data-s")), Number(r.getAttribute("data-e"))];
  });
  var roundWin = {};
  function widen(w, t) { if (t !== null && t !== undefined) { w[0] = Math.min(w[0], t); w[1] = Math.max(w[1], t); } }
  steps.forEach(function (s, k) {
    var q = roundOf[k], w = roundWin[q] = roundWin[q] || [Infinity, -Infinity];
    if (s[0] === "msg") {
      var m = msgs[s[1]];
      [m.send, m.tx_end, m.arrival, m.read_at].forEach(function (t) { widen(w, t); });
    } else widen(w, data[s[0]][s[1]].time);
  });
  function windowOf() {
    var mode = zoom.value;
    if (idx < 0 || mode === "run") return [0, tlEnd, ""];
    var w = roundWin[roundOf[idx]], label = rounds.length && roundOf[idx] >= 0 ? msgs[steps[rounds[roundOf[idx]]][1]].round_label : "";
    if (mode === "step" && steps[idx][0] === "msg") {
      var m = msgs[steps[idx][1]], hidden = m.anonymous && !reveal();
      var lo = hidden ? m.rx_start : m.send, hi = m.arrival !== null && m.status === "delivered" ? m.arrival : m.tx_end;
      if (lo !== null) {
        hi = hi === null ? lo : Math.max(hi, lo);
        var pad = (hi - lo) / 10;
        return [Math.max(0, lo - pad), hi + pad, "message " + (m.i + 1)];
      }
    }
    return [w[0], w[1], label];
  }
  var drawn = [0, tlEnd];
  function layout() {
    var w = windowOf(), lo = w[0], hi = w[1];
    if (!(hi > lo)) { hi = lo + 1e-6; }
    var sx = (tlRight - tlLeft) / (hi - lo);
    tlSvg.setAttribute("data-t0", tlLeft - lo * sx); tlSvg.setAttribute("data-scale", sx);
    tlSvg.setAttribute("data-from", lo); tlSvg.setAttribute("data-to", hi);
    document.getElementById("tl-range").textContent = "simulated time, " + (lo ? ms(lo) : "0") + " to " + ms(hi) +
      (w[2] ? " (zoomed to " + w[2] + " of 0 to " + ms(tlEnd) + ")" : "");
    if (drawn[0] === lo && drawn[1] === hi) return;
    drawn = [lo, hi];
    tlSpans.forEach(function (r, j) {
      var s = tlTimes[j][0], e = tlTimes[j][1];
      if (e < lo || s > hi) { r.setAttribute("visibility", "hidden"); return; }
      var x0 = tlLeft + (Math.max(s, lo) - lo) * sx, x1 = tlLeft + (Math.min(e, hi) - lo) * sx;
      r.setAttribute("visibility", "visible");
      r.setAttribute("x", x0.toFixed(2)); r.setAttribute("width", Math.max(x1 - x0, 0.8).toFixed(2));
    });
  }
  zoom.addEventListener("change", function () { render(); });
  // the sequence diagram's lane headers stay in view (sticky): moved down to just under the
  // controls while the diagram's top is scrolled past them, never below its last row
  var seq = document.getElementById("sequence"), head = document.getElementById("lanehead"),
      controls = document.getElementById("controls");
  function stick() {
    if (!seq || !head) return;
    var r = seq.getBoundingClientRect(), top = Math.max(0, controls.getBoundingClientRect().bottom);
    var off = Math.max(0, Math.min(top - r.top, r.height - 50));
    head.setAttribute("transform", "translate(0," + off.toFixed(1) + ")");
  }
  // a step's arrow or note scrolled into view, not under the controls or the lane headers
  function show(el) {
    if (!el || !el.scrollIntoView) return;
    el.scrollIntoView({block: "nearest"});
    var below = Math.max(0, controls.getBoundingClientRect().bottom) + 50, r = el.getBoundingClientRect();
    if (r.top < below) window.scrollBy(0, r.top - below);
    stick();
  }
  window.addEventListener("scroll", stick, {passive: true});
  window.addEventListener("resize", stick);
  function go(k) { idx = Math.max(-1, Math.min(steps.length - 1, k)); render(); }
  document.getElementById("next").addEventListener("click", function () { go(idx + 1); });
  document.getElementById("prev").addEventListener("click", function () { go(idx - 1); });
  document.getElementById("first").addEventListener("click", function () { go(0); });
  document.getElementById("last").addEventListener("click", function () { go(steps.length - 1); });
  menu.addEventListener("change", function () { go(Number(menu.value)); });
  document.getElementById("reveal").addEventListener("change", function (ev) {
    document.body.classList.toggle("reveal", ev.target.checked); render(); });
  document.addEventListener("keydown", function (ev) {
    if (ev.target === menu || ev.target === zoom) return;  // their own arrow keys choose
    if (ev.key === "Home") { go(0); ev.preventDefault(); }
    if (ev.key === "End") { go(steps.length - 1); ev.preventDefault(); }
    if (ev.key === "ArrowRight" || ev.key === "ArrowDown") { go(idx + 1); ev.preventDefault(); }
    if (ev.key === "ArrowLeft" || ev.key === "ArrowUp") { go(idx - 1); ev.preventDefault(); }
  });
  document.querySelectorAll(".msg").forEach(function (g) {
    g.addEventListener("click", function () { go(stepOfMsg[Number(g.getAttribute("data-i"))]); });
  });
  document.querySelectorAll(".note").forEach(function (g) {
    g.addEventListener("click", function () { go(stepOfNote[g.getAttribute("data-step")]); });
  });
  render();
})();
</script>
</body></html>
"""


def _count_text(data: dict) -> str:
    """``20 messages (4 lost, 1 never read)``: the ledger's totals by fate (parts that are 0 left out)."""
    msgs = data["messages"]
    parts = [f"{n} {what}" for n, what in (
        (sum(m["status"] == "lost" for m in msgs), "lost"),
        (sum(m["status"] == "delivered" and not m["read"] for m in msgs), "never read"),
        (sum(m["status"] == "in_flight" for m in msgs), "in flight at the end")) if n]
    return plural(len(msgs), "message") + (f" ({', '.join(parts)})" if parts else "")


def _faults_text(data: dict) -> str:
    """``; 3 messages missing at a deadline; 1 node offline; deadlock: 2 actors still waiting at
    the end`` (ledger.missing, dropouts, a deadlock), or nothing."""
    missing = sum(len(g["senders"]) + g["anonymous"] for g in data["missing"])
    out = f"; {plural(missing, 'message')} missing at a deadline" if missing else ""
    out += f"; {plural(len(data['offline']), 'node')} offline" if data["offline"] else ""
    blocked = len(data["blocked"])
    return out + (f"; deadlock: {plural(blocked, 'actor')} still waiting at the end" if blocked else "")


def page_cut(data: dict, limit: int = MAX_PAGE_MESSAGES) -> dict:
    """``data`` (``trace_data``) cut to what a page of at most ``limit`` messages shows: its
    first messages in ledger order, up to the last start of a round within the limit (the first
    ``limit`` messages when the first round alone has more), the sequence's rows before the first
    message left out, the compute spans and the nodes going offline before that message's send,
    which ends the timeline; ``cut``: None when every message fits, else ``shown``, ``total``,
    ``at`` (that send time), ``last_shown`` and ``first_cut`` (the round labels of the last
    message shown and of the first left out), ``whole`` (the cut falls between rounds) and
    ``limit``. The waits given up, the nodes offline and the actors blocked stay whole (the
    header counts the run's)."""
    if limit < 1:
        raise ValueError(f"a page shows at least one message, got limit {limit!r}")
    msgs = data["messages"]
    if len(msgs) <= limit:
        return {**data, "cut": None}
    k = first_rounds([m["round"] for m in msgs], limit)
    at = msgs[k]["send"]
    end = data["sequence"].index(["msg", k])
    cut = {"shown": k, "total": len(msgs), "at": at, "last_shown": msgs[k - 1]["round_label"],
           "first_cut": msgs[k]["round_label"], "whole": msgs[k]["round"] != msgs[k - 1]["round"], "limit": limit}
    return {**data, "messages": msgs[:k], "sequence": data["sequence"][:end],
            "compute": [c for c in data["compute"] if c["start"] < at],
            "offline_drawn": [o for o in data["offline"] if o["time"] < at], "end": at, "cut": cut}


def _cut_text(data: dict) -> str:
    """The page's paragraph on what it leaves out (``page_cut``), or nothing."""
    c = data["cut"]
    if c is None:
        return ""
    left = (f"{c['first_cut']} and every round after it" if c["whole"] else
            f"the rest of {c['first_cut']} and every round after it")
    return (f'<div class="cut" id="cut"><b>Cut:</b> this page shows the first {c["shown"]} of the run\'s '
            f'{c["total"]} messages (to {_html.escape(c["last_shown"])}, sent before {_ms(c["at"])}); the other '
            f'{c["total"] - c["shown"]} ({_html.escape(left)}) are left out to keep the page usable (at most '
            f'{c["limit"]} messages). Every message is in steps.log (written by fedsim trace without --html); '
            f'trace fewer rounds or clients to step through them here.</div>')


def trace_html(net: SimNetwork, *, title: str = "", summary: str = "", limit: int = MAX_PAGE_MESSAGES) -> str:
    """The trace as one self-contained HTML page (see the module docstring): everything inline,
    nothing fetched, so the file works offline and can be mailed around. Its header counts every
    message of the run; it draws and steps through at most ``limit`` of them (``page_cut``: the
    first whole rounds), and says so."""
    whole = trace_data(net)
    total = sum(m["bytes"] for m in whole["messages"])
    data = page_cut(whole, limit)
    # no "<" at all inside the data block: "</script>" would end it, and "<!--<script>" (a kind, a
    # role, a payload's text) would make the HTML parser run the data block into the page's script,
    # which then never runs. Inside JSON strings (the only place these characters can be) \u003c
    # reads back as the same text.
    blob = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    values = {"__TITLE__": _html.escape(title), "__SUMMARY__": _html.escape(summary),
              "__COUNT__": _count_text(whole), "__BYTES__": _human_size(total), "__FAULTS__": _faults_text(whole),
              "__CUT__": _cut_text(data),
              "__SEQUENCE__": _sequence_svg(data), "__TIMELINE__": _timeline_html_svg(data), "__DATA__": blob}
    # one pass over the template: a placeholder's text inside another's value (a kind named
    # "__DATA__" in the sequence diagram) stays as it is
    return re.sub("|".join(values), lambda m: values[m.group(0)], _PAGE)
