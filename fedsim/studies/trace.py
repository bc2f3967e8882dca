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

from pathlib import Path

from ..config import ConfigError, fields_of, parse_field, unknown_key_message
from ..experiment import UsageError
from ..kernel import SimNetwork
from ..protocols import REGISTRY

__all__ = ["trace", "mermaid", "timeline_svg", "step_log", "trace_options"]


def trace_options(name: str, sets: list[str]) -> dict:
    """``key=value`` strings parsed against protocol ``name``'s configuration fields."""
    spec = REGISTRY[name]
    infos = {f.name: f for f in fields_of(spec.Config)}
    out = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set expects key=value, got {s!r}")
        k, v = (x.strip() for x in s.split("=", 1))
        if k not in infos:
            raise UsageError(unknown_key_message(k, infos, f"protocol {name}"))
        try:
            out[k] = parse_field(infos[k], v, name)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    return out


def trace(name: str, out: str | Path, *, clients: int = 3, rounds: int = 1, seed: int = 0,
          profile: str = "lan", sets: list[str] | None = None) -> tuple[SimNetwork, dict[str, Path]]:
    """Run protocol ``name`` (any registered protocol, on its ``tiny`` preset) with ``clients``
    clients for ``rounds`` rounds on a traced SimNetwork and write the diagram, timeline and step
    log to ``out``. ``sets``: ``key=value`` overrides of the protocol's configuration."""
    if name not in REGISTRY:
        raise UsageError(f"cannot trace {name!r}; registered protocols: {', '.join(REGISTRY)}")
    if clients < 1 or rounds < 1:
        raise UsageError("--clients and --rounds must be at least 1")
    spec = REGISTRY[name]
    try:
        data, cfg = spec.tiny(clients, rounds, seed)
        cfg = cfg.replace(**trace_options(name, sets or []))
    except (ConfigError, ValueError) as exc:
        raise UsageError(f"{name}: {exc}") from None
    net = SimNetwork(seed=seed, profile=profile, trace=True)
    spec.build(net, data, cfg)
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
