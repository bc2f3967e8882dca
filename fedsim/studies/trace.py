"""Teaching traces: run a protocol with a handful of clients and draw every message.

``trace(name, clients=3, rounds=1)`` writes to a folder:

- ``sequence.mmd``: a Mermaid sequence diagram, one arrow per ledger row (sender, receiver,
  kind, bytes, simulated send and arrival times). Anonymous messages are dashed arrows labelled
  *anonymous* (the receiver never learns the sender); lost ones end in a cross.
- ``timeline.svg`` (and ``timeline.png`` with matplotlib): one lane per node showing when it is
  sending (egress port busy), receiving (ingress port busy), computing, and the propagation of
  each message between lanes.
- ``steps.log``: the same events as plain text, in time order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..experiment import Param, UsageError, parse_value
from ..kernel import SimNetwork

__all__ = ["TRACEABLE", "trace", "mermaid", "timeline_svg", "step_log"]


@dataclass(frozen=True)
class Traceable:
    description: str
    build: Callable[..., None]
    params: dict[str, Param]


def _tiny(clients: int, seed: int):
    from ..data import generate

    r = generate("tiny", seed=seed)
    keep = r.users < clients
    return r.users[keep], r.items[keep], r.values[keep].astype(np.float32), clients, r.n_items


def _build_demo(net, clients, rounds, seed, **_):
    from ..protocols import demo

    demo.build(net, n_clients=clients, dim=4, rounds=rounds, seed=seed)


def _build_fedrec(net, clients, rounds, seed, model="PMF(B)", rho=1.0, strategy="hf", d=8, **_):
    from ..protocols import fedrec

    lr = 0.8 if model == "PMF(B)" else 0.01
    cfg = fedrec.FedRecConfig(model, d=d, T=rounds, lr=lr, rho=rho, strategy=strategy)
    fedrec.build(net, *_tiny(clients, seed), cfg)


def _build_fedrecpp(net, clients, rounds, seed, eta=1, rho=1.0, d=8, **_):
    from ..protocols import fedrecpp

    cfg = fedrecpp.FedRecPPConfig(d=d, T=rounds, rho=rho, eta=eta, allow_exposed=True)
    fedrecpp.build(net, *_tiny(clients, seed), cfg)


def _tiny_items(clients: int, seed: int):
    users, items, _, n_users, n_items = _tiny(clients, seed)
    return [items[users == u].astype(np.int64) for u in range(n_users)], n_items


def _build_fpl(net, clients, rounds, seed, preset="pFPL", pi=0.5, T=3, d=4, **_):
    from ..protocols import fpl

    user_items, n_items = _tiny_items(clients, seed)
    k = clients if preset.startswith("p") else 1
    cfg = fpl.FPLConfig(clients_per_round=k, triples=T, rounds=rounds, d=d, pi=pi, preset=preset)
    fpl.build(net, user_items, n_items, cfg, catalogue=np.unique(np.concatenate(user_items)))


def _build_fcf(net, clients, rounds, seed, d=4, **_):
    from ..protocols import fcf

    user_items, n_items = _tiny_items(clients, seed)
    fcf.build(net, user_items, n_items, fcf.FCFConfig(rounds=rounds, d=d))


def _ae_setup(clients: int, seed: int, users_per_client: int, rounds: int, hidden: tuple, fraction: float):
    from ..data import generate, partition_users, per_user_random
    from ..math import ae_train
    from ..protocols.personalfr import FedAEConfig

    r = generate("tiny", seed=seed)
    n_users = min(r.n_users, clients * users_per_client)
    r = r.subset(r.users < n_users)  # same index space: users >= n_users simply have no rows
    train, test = per_user_random(r, 0.2, seed=seed)
    task = ae_train.prepare((train.users, train.items, train.values), (test.users, test.items, test.values),
                            r.n_users, r.n_items)
    groups = partition_users(n_users, clients, seed=seed)
    cfg = FedAEConfig(rounds=rounds, fraction=fraction, local_epochs=1, hidden=hidden, batch=10)
    return task, groups, cfg


def _build_personalfr(net, clients, rounds, seed, users=2, fraction=1.0, hidden=(8, 4), **_):
    from ..protocols import personalfr

    personalfr.build(net, *_ae_setup(clients, seed, users, rounds, tuple(hidden), fraction), evaluate=False)


def _build_fedavg_ae(net, clients, rounds, seed, users=2, fraction=1.0, hidden=(8, 4), **_):
    from ..protocols import fedavg_ae

    fedavg_ae.build(net, *_ae_setup(clients, seed, users, rounds, tuple(hidden), fraction), evaluate=False)


_AE_PARAMS = {
    "users": Param(2, "users per client"),
    "fraction": Param(1.0, "fraction C of clients per round"),
    "hidden": Param([8, 4], "encoder widths (the decoder mirrors them; the paper: 256,128)", kind="ints"),
}

TRACEABLE: dict[str, Traceable] = {
    "demo": Traceable("federated gradient descent (kernel demo)", _build_demo, {}),
    "fedrec": Traceable("FedRec", _build_fedrec, {
        "model": Param("PMF(B)", "model", choices=("PMF(B)", "PMF(S)", "SVD++(S)")),
        "rho": Param(1.0, "sampling parameter"), "strategy": Param("hf", "ua or hf", choices=("ua", "hf")),
        "d": Param(8, "latent dimension")}),
    "fedrecpp": Traceable("FedRec++ (denoisers on an anonymous channel)", _build_fedrecpp, {
        "eta": Param(1, "denoisers"), "rho": Param(1.0, "sampling parameter"), "d": Param(8, "latent dimension")}),
    "fpl": Traceable("FPL (Theta_S down, T negative + Bernoulli(pi) positive item updates up)", _build_fpl, {
        "preset": Param("pFPL", "pFPL: every client per round; sFPL: one", choices=("pFPL", "sFPL")),
        "pi": Param(0.5, "probability of sending each positive update"), "T": Param(3, "triples per client"),
        "d": Param(4, "latent dimension")}),
    "fcf": Traceable("FCF (Q down, gradients for all m items up)", _build_fcf, {"d": Param(4, "latent dimension")}),
    "personalfr": Traceable("PersonalFR (rated-item indices up once; active decoder rows down and up, the encoder "
                            "never leaves)", _build_personalfr, _AE_PARAMS),
    "fedavg-ae": Traceable("FedAvg on the autoencoder (whole model down and up)", _build_fedavg_ae, _AE_PARAMS),
}


def register(name: str, description: str, build: Callable[..., None], params: dict[str, Param] | None = None) -> None:
    """Make a protocol traceable: ``build(net, clients, rounds, seed, **options)``."""
    TRACEABLE[name] = Traceable(description, build, params or {})


def _options(t: Traceable, sets: list[str]) -> dict[str, Any]:
    out = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set expects key=value, got {s!r}")
        k, v = s.split("=", 1)
        if k not in t.params:
            raise UsageError(f"unknown trace option {k!r}; known: {', '.join(sorted(t.params)) or 'none'}")
        out[k] = parse_value(k, v, t.params[k])
    return out


def trace(name: str, out: str | Path, *, clients: int = 3, rounds: int = 1, seed: int = 0,
          profile: str = "lan", sets: list[str] | None = None) -> tuple[SimNetwork, dict[str, Path]]:
    """Run protocol ``name`` with ``clients`` clients for ``rounds`` rounds on a traced
    SimNetwork and write the diagram, timeline and step log to ``out``."""
    if name not in TRACEABLE:
        raise UsageError(f"cannot trace {name!r}; traceable protocols: {', '.join(sorted(TRACEABLE))}")
    if clients < 1 or rounds < 1:
        raise UsageError("--clients and --rounds must be at least 1")
    t = TRACEABLE[name]
    net = SimNetwork(seed=seed, profile=profile, trace=True)
    t.build(net, clients, rounds, seed, **_options(t, sets or []))
    net.run()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"mermaid": out / "sequence.mmd", "svg": out / "timeline.svg", "log": out / "steps.log"}
    paths["mermaid"].write_text(mermaid(net))
    paths["svg"].write_text(timeline_svg(net))
    paths["log"].write_text(step_log(net))
    png = timeline_png(net, out / "timeline.png")
    if png:
        paths["png"] = png
    return net, paths


# --------------------------------------------------------------------------------------------
# renderers


def _participants(net: SimNetwork) -> list[str]:
    order = {"server": 0}
    return sorted(net.nodes, key=lambda n: (order.get(net.ledger.roles.get(n, ""), 1), n))


def _alias(i: int) -> str:
    return f"N{i}"


def _ms(t: float) -> str:
    return "-" if t != t else f"{t * 1000:.3f} ms"


def mermaid(net: SimNetwork) -> str:
    """A Mermaid ``sequenceDiagram`` with one arrow per ledger row, in ledger order."""
    names = _participants(net)
    alias = {n: _alias(i) for i, n in enumerate(names)}
    roles = net.ledger.roles
    lines = ["sequenceDiagram"]
    for n in names:
        lines.append(f"    participant {alias[n]} as {n} ({roles.get(n, '?')})")
    last_round = None
    for r in net.ledger.records():
        if r["round"] != last_round:
            last_round = r["round"]
            label = "setup" if r["round"] < 0 else f"round {r['round']}"
            lines.append(f"    Note over {alias[names[0]]}: {label}")
        src, dst = alias[r["src"]], alias[r["dst"]]
        if r["status"] == "lost":
            arrow = "-x"
        elif r["anonymous"]:
            arrow = "-->>"
        else:
            arrow = "->>"
        tag = " (anonymous)" if r["anonymous"] else ""
        lost = f" LOST {r['note']}" if r["status"] == "lost" else ""
        text = (f"{r['kind']}{tag} {r['bytes']} B, sent {_ms(r['send_time'])}, "
                f"arrived {_ms(r['arrival_time'])}{lost}")
        lines.append(f"    {src}{arrow}{dst}: {_mermaid_text(text)}")
        if r["anonymous"]:
            lines.append(f"    Note right of {dst}: sender hidden from {r['dst']}")
    return "\n".join(lines) + "\n"


def _mermaid_text(s: str) -> str:
    # characters with meaning in Mermaid message text
    return s.replace(";", ",").replace("#", "no.").replace(":", " ")


def step_log(net: SimNetwork) -> str:
    """Every send, arrival, computation and actor log line, in simulated-time order."""
    # at equal times: arrivals (of messages sent earlier), then computations, then sends, then
    # arrivals of messages sent at that very instant (zero-delay links)
    events: list[tuple[float, int, str]] = []
    for r in net.ledger.records():
        anon = " anonymously" if r["anonymous"] else ""
        events.append((r["send_time"], 2, f"{r['src']} sends {r['kind']} ({r['bytes']} B){anon} to {r['dst']}"))
        if r["status"] == "delivered":
            rank = 0 if r["arrival_time"] > r["send_time"] else 3
            events.append((r["arrival_time"], rank, f"{r['dst']} receives {r['kind']} from "
                           f"{'(anonymous)' if r['anonymous'] else r['src']}"
                           f"{'' if r['read'] else ' (never read)'}"))
        else:
            events.append((r["send_time"], 3, f"{r['kind']} from {r['src']} to {r['dst']} is lost ({r['note']})"))
    for node, start, end, label in net.trace:
        events.append((start, 1, f"{node} {label}s for {(end - start) * 1000:.3f} ms"))
    for t, node, text in net.steps:
        events.append((t, 1, f"{node}: {text}"))
    events.sort(key=lambda e: (e[0], e[1]))
    return "".join(f"{t * 1000:12.3f} ms  {text}\n" for t, _, text in events)


_COLORS = {"sending": "#4C72B0", "receiving": "#55A868", "compute": "#C44E52", "propagating": "#8C8C8C"}


def _spans(net: SimNetwork):
    lanes = _participants(net)
    spans = []  # (lane, start, end, kind)
    arrows = []  # (from lane, to lane, t0, t1, anonymous)
    for r in net.ledger.records():
        if r["tx_end"] == r["tx_end"]:
            spans.append((r["src"], r["tx_start"], r["tx_end"], "sending"))
        if r["status"] == "delivered":
            spans.append((r["dst"], r["rx_start"], r["arrival_time"], "receiving"))
            arrows.append((r["src"], r["dst"], r["tx_end"], r["rx_start"], r["anonymous"]))
    for node, start, end, label in net.trace:
        spans.append((node, start, end, "compute"))
    return lanes, spans, arrows


def timeline_svg(net: SimNetwork) -> str:
    """The timeline as a standalone SVG (no plotting library needed)."""
    lanes, spans, arrows = _spans(net)
    t_end = max([s[2] for s in spans] + [1e-9])
    width, left, lane_h, top = 900, 170, 34, 30
    height = top + lane_h * len(lanes) + 40
    x = lambda t: left + (width - left - 20) * (t / t_end)
    y = {n: top + i * lane_h for i, n in enumerate(lanes)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16">simulated time, 0 to {t_end * 1000:.3f} ms</text>']
    for n in lanes:
        out.append(f'<text x="5" y="{y[n] + 18}">{n} ({net.ledger.roles.get(n, "")})</text>')
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


def timeline_png(net: SimNetwork, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    lanes, spans, arrows = _spans(net)
    idx = {n: i for i, n in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(lanes) + 1.5), dpi=110)
    for lane, s, e, kind in spans:
        ax.broken_barh([(s * 1000, max((e - s) * 1000, 1e-6))], (idx[lane] - 0.35, 0.7),
                       facecolors=_COLORS[kind], alpha=0.85)
    for a, b, t0, t1, anon in arrows:
        ax.plot([t0 * 1000, t1 * 1000], [idx[a], idx[b]], color=_COLORS["propagating"], lw=0.6,
                ls="--" if anon else "-")
    ax.set_yticks(range(len(lanes)), [f"{n} ({net.ledger.roles.get(n, '')})" for n in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (ms)")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in _COLORS.items()], loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
