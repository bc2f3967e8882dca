"""Per-message completion times of communication patterns, simulated packet by packet in ns-3.

Runs under ``pip install ns3`` (3.44's flat bindings, ``from ns import ns``). Importing ns-3
costs 7-9 s and about 600 MB, so one process runs a whole list of patterns::

    python -m validation.ns3_star --all -o validation/results/ns3.json
    python -m validation.ns3_star single/wan/1MB bcast/lan/homo/n10 -o out.json
    python -m validation.ns3_star --json my_pattern.json -o out.json   # a pattern or a list

Patterns: see ``validation/patterns.py`` for the schema. The model, link by link:

- One ns-3 node per pattern node plus one router. Every node has its own point-to-point link
  to the router; the node's device sends at ``up`` (node -> router), the router's device on
  that link at ``down`` (router -> node); the channel delay is the node's ``latency``, so A ->
  B propagates A.latency + B.latency and pays serialisation at A.up and at B.down
  (store-and-forward at the router; the p2p framing adds a 2-byte PPP header per packet).
  Routing by a small hash-map protocol (hosts: everything via the router; router: the
  destination's link), the paths static routes would give, O(1) per packet. No queue discs (ns-3 would install
  fq_codel): each device has one DropTail FIFO of ``queue_packets`` packets (default 1e6,
  i.e. no drops in practice; ``router_queue_packets`` sets the router's devices apart, i.e. the
  downlinks; drops -- at the queue, or by the traffic-control layer when the device queue is
  full -- are counted and reported, as is the largest occupancy).
- Each message is its own TCP connection: a BulkSendApplication of exactly ``bytes`` bytes
  from src (bound to a port of its own) to the PacketSink of dst, opened at the message's start
  time (the handshake is part of the measured time; ``connected`` is when the first data
  was handed to the socket, after the handshake). A message with ``after`` is started
  ``delay`` seconds after the sink Rx trace of the last of them has counted all its bytes.
- TCP (the defaults below, ``SETTINGS``): CUBIC (ns-3's TcpCubic, HyStart on; Linux's
  default is also CUBIC with HyStart), PRR recovery, segment size 1448, initial cwnd 10,
  SACK, timestamps, window scaling, Nagle off, send and receive buffers 16 MiB, minimum RTO
  200 ms (Linux's; ns-3's default is 1 s), delayed ACK every 2 segments or 40 ms (Linux's
  minimum delayed-ACK timeout; ns-3's default is 200 ms), 7 SYN attempts and 15 data
  retransmissions before giving up (Linux's; ns-3's defaults are 6 and 6). The first SYN
  retransmission stays at ns-3's 3 s (Linux: 1 s): with 1 s, in fedrecpp/mobile/het/n943 a
  noise connection whose SYN had waited more than 1 s in the denoiser's deep downlink queue
  connected but never delivered a byte in ns-3 (15 retransmissions, also with 100 allowed), so
  the denoiser's sum never started; with 3 s every message completes.

Output (JSON, also returned by ``run_patterns``)::

    {"engine": "ns-3", "ns3_version": "3.44.post0", "date": "...", "kernel": "...",
     "settings": {...},
     "patterns": [{"name": ..., "hash": pattern_hash(pattern), "complete": true,
                   "round": max completion (s), "wall_s": ..., "queue_drops": 0,
                   "max_queue_packets": ..., "retransmissions": total,
                   "outliers": [ids of messages that retransmitted],
                   "messages": [{"id", "src", "dst", "bytes",
                                 "start",        # s, when the sender opened the connection
                                 "connected",    # s, first data handed to TCP (after SYN/SYN-ACK)
                                 "first_byte",   # s, first data read by the receiving application
                                 "completion",   # s, last byte read by the receiving application
                                 "duration",     # completion - start
                                 "retransmissions"}, ...]}, ...]}

Times are simulated seconds from 0; a message that did not complete before ``stop_time`` has
``completion: null`` and the pattern ``complete: false``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make "validation" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validation import patterns as P  # noqa: E402
from validation import results as R  # noqa: E402

SETTINGS: dict = {
    "congestion_control": "ns3::TcpCubic",
    "recovery": "ns3::TcpPrrRecovery",
    "segment_size": 1448,
    "initial_cwnd": 10,
    "sndbuf_bytes": 16 * 1024 * 1024,
    "rcvbuf_bytes": 16 * 1024 * 1024,
    "sack": True,
    "timestamps": True,
    "window_scaling": True,
    "nagle": False,
    "min_rto_s": 0.2,
    "clock_granularity_s": 0.001,
    "delack_count": 2,
    "delack_timeout_s": 0.04,
    "mtu": 1500,
    "queue_packets": 1_000_000,
    "router_queue_packets": None,  # the router's ports (downlinks); None = queue_packets
    "conn_timeout_s": 3.0,         # first SYN retransmission (ns-3's default; Linux: 1 s, see below)
    "conn_count": 7,               # SYN attempts: 1 + Linux's tcp_syn_retries (ns-3: 6)
    "data_retries": 15,            # retransmissions before giving up: Linux's tcp_retries2 (ns-3: 6)
    "queue_discs": None,
    "bulk_send_chunk": 16384,
    "stop_time_s": 3600.0,
}

_CPP = r"""
#include <cmath>
#include <vector>
#include <cstdint>
#include <unordered_map>
#include <algorithm>

namespace fsgt {
using namespace ns3;
const uint16_t kSinkPort = 9;       // one PacketSink per receiving node
const uint32_t kFirstPort = 10000;  // message i is sent from port kFirstPort + i

// Star routing, O(1) per packet: a host sends everything to the router, the router looks the
// destination up in a hash map (ns-3's static and global routing scan their tables linearly,
// Nix-vector routing scans the router's N devices: O(N) per forwarded packet at the hub).
class StarRouting : public Ipv4RoutingProtocol {
  public:
    static TypeId GetTypeId() {
        static TypeId tid = TypeId("fsgt::StarRouting").SetParent<Ipv4RoutingProtocol>().SetGroupName("Internet");
        return tid;
    }
    std::unordered_map<uint32_t, Ptr<Ipv4Route>> routes;  // router: host address -> route
    Ptr<Ipv4Route> defaultRoute;                           // host: via the router
    Ipv4Address local{"0.0.0.0"};                          // host: its address
    uint32_t localIf = 1;

    Ptr<Ipv4Route> Find(Ipv4Address dst) const {
        auto it = routes.find(dst.Get());
        return it != routes.end() ? it->second : defaultRoute;
    }
    Ptr<Ipv4Route> RouteOutput(Ptr<Packet>, const Ipv4Header& h, Ptr<NetDevice>,
                               Socket::SocketErrno& err) override {
        Ptr<Ipv4Route> r = Find(h.GetDestination());
        err = r ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
        return r;
    }
    bool RouteInput(Ptr<const Packet> p, const Ipv4Header& h, Ptr<const NetDevice>,
                    const UnicastForwardCallback& ucb, const MulticastForwardCallback&,
                    const LocalDeliverCallback& lcb, const ErrorCallback& ecb) override {
        if (h.GetDestination() == local) { lcb(p, h, localIf); return true; }
        Ptr<Ipv4Route> r = Find(h.GetDestination());
        if (!r) { ecb(p, h, Socket::ERROR_NOROUTETOHOST); return false; }
        ucb(r, p, h);
        return true;
    }
    void NotifyInterfaceUp(uint32_t) override {}
    void NotifyInterfaceDown(uint32_t) override {}
    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void SetIpv4(Ptr<Ipv4>) override {}
    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override {}
};

Ptr<Ipv4Route> MakeRoute(Ipv4Address dst, Ipv4Address src, Ipv4Address gw, Ptr<NetDevice> dev) {
    Ptr<Ipv4Route> r = Create<Ipv4Route>();
    r->SetDestination(dst);
    r->SetSource(src);
    r->SetGateway(gw);
    r->SetOutputDevice(dev);
    return r;
}

struct Msg {
    uint32_t src = 0, dst = 0;
    uint64_t bytes = 0;
    double start = 0, delay = 0;
    std::vector<uint32_t> after, dependents;
    uint32_t pending = 0;
    uint16_t port = 0;
    double tStart = -1, tConnected = -1, tFirst = -1, tDone = -1;
    uint64_t rx = 0;
    uint32_t retx = 0;
};

class Star {
  public:
    std::vector<double> up, down, lat;
    std::vector<Msg> msgs;
    NodeContainer hosts;
    Ptr<Node> router;
    std::vector<Ipv4Address> addr;
    uint32_t queuePackets = 1000000;
    uint32_t routerQueuePackets = 1000000;
    uint32_t sendSize = 16384;
    uint32_t mtu = 1500;
    uint64_t drops = 0;
    uint32_t maxQueue = 0;
    uint64_t done = 0;

    void AddNode(double u, double d, double l) { up.push_back(u); down.push_back(d); lat.push_back(l); }

    void AddMessage(uint32_t s, uint32_t d, uint64_t b, double start, double delay,
                    const std::vector<uint32_t>& after) {
        Msg m; m.src = s; m.dst = d; m.bytes = b; m.start = start; m.delay = delay; m.after = after;
        m.port = static_cast<uint16_t>(kFirstPort + msgs.size());
        msgs.push_back(m);
    }

    static void OnDrop(Star* self, Ptr<const Packet>) { self->drops++; }
    static void OnQueue(Star* self, uint32_t, uint32_t v) { if (v > self->maxQueue) self->maxQueue = v; }
    static void OnTx(Star* self, uint32_t i, Ptr<const Packet>) {
        Msg& m = self->msgs[i];
        if (m.tConnected < 0) m.tConnected = Simulator::Now().GetSeconds();
    }
    static void OnRetx(Star* self, uint32_t i, Ptr<const Packet>, const TcpHeader&, const Address&,
                       const Address&, Ptr<const TcpSocketBase>) { self->msgs[i].retx++; }

    static void Launch(Star* self, uint32_t i) {
        Msg& m = self->msgs[i];
        m.tStart = Simulator::Now().GetSeconds();
        BulkSendHelper bh("ns3::TcpSocketFactory", InetSocketAddress(self->addr[m.dst], kSinkPort));
        // the sender binds to the message's own port: the sink tells messages apart by it
        bh.SetAttribute("Local", AddressValue(InetSocketAddress(self->addr[m.src], m.port)));
        bh.SetAttribute("MaxBytes", UintegerValue(m.bytes));
        bh.SetAttribute("SendSize", UintegerValue(self->sendSize));
        ApplicationContainer a = bh.Install(self->hosts.Get(m.src));  // starts now (StartTime 0)
        if (!a.Get(0)->TraceConnectWithoutContext("Tx", MakeBoundCallback(&Star::OnTx, self, i)) ||
            !a.Get(0)->TraceConnectWithoutContext("TcpRetransmission", MakeBoundCallback(&Star::OnRetx, self, i)))
            NS_FATAL_ERROR("BulkSend traces missing");
    }

    static void OnRx(Star* self, Ptr<const Packet> p, const Address& from, const Address&) {
        uint32_t i = InetSocketAddress::ConvertFrom(from).GetPort() - kFirstPort;
        Msg& m = self->msgs[i];
        double now = Simulator::Now().GetSeconds();
        if (m.tFirst < 0) m.tFirst = now;
        m.rx += p->GetSize();
        if (m.rx >= m.bytes && m.tDone < 0) {
            m.tDone = now;
            self->done++;
            for (uint32_t d : m.dependents) {
                Msg& c = self->msgs[d];
                if (--c.pending == 0) Simulator::Schedule(Seconds(c.delay), &Star::Launch, self, d);
            }
            if (self->done == self->msgs.size()) Simulator::Stop();
        }
    }

    void Build() {
        uint32_t n = up.size();
        router = CreateObject<Node>();
        hosts.Create(n);
        InternetStackHelper stack;
        stack.Install(router);
        stack.Install(hosts);
        // With no queue disc, a packet meeting a full (stopped) device queue is dropped by the
        // traffic-control layer, not by the queue: count both.
        for (uint32_t i = 0; i <= n; ++i) {
            Ptr<Node> nd = i < n ? hosts.Get(i) : router;
            if (!nd->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext("TcDrop", MakeBoundCallback(&Star::OnDrop, this)))
                NS_FATAL_ERROR("no TcDrop trace");
        }
        Ptr<StarRouting> hub = CreateObject<StarRouting>();
        router->GetObject<Ipv4>()->SetRoutingProtocol(hub);
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                     QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, queuePackets)));
        Ipv4AddressHelper ah;
        ah.SetBase("10.0.0.0", "255.255.255.0");
        TrafficControlHelper tch;
        addr.resize(n);
        for (uint32_t i = 0; i < n; ++i) {
            p2p.SetChannelAttribute("Delay", TimeValue(Seconds(lat[i])));
            NetDeviceContainer dev = p2p.Install(hosts.Get(i), router);
            dev.Get(0)->SetAttribute("DataRate", DataRateValue(DataRate((uint64_t)std::llround(up[i] * 8.0))));
            dev.Get(1)->SetAttribute("DataRate", DataRateValue(DataRate((uint64_t)std::llround(down[i] * 8.0))));
            Ipv4InterfaceContainer ifs = ah.Assign(dev);
            ah.NewNetwork();
            tch.Uninstall(dev);  // no fq_codel: the device FIFO is the only queue
            DynamicCast<PointToPointNetDevice>(dev.Get(1))->GetQueue()->SetMaxSize(
                QueueSize(QueueSizeUnit::PACKETS, routerQueuePackets));
            for (uint32_t k = 0; k < 2; ++k) {
                Ptr<Queue<Packet>> q = DynamicCast<PointToPointNetDevice>(dev.Get(k))->GetQueue();
                if (!q->TraceConnectWithoutContext("Drop", MakeBoundCallback(&Star::OnDrop, this)) ||
                    !q->TraceConnectWithoutContext("PacketsInQueue", MakeBoundCallback(&Star::OnQueue, this)))
                    NS_FATAL_ERROR("queue traces missing");
            }
            addr[i] = ifs.GetAddress(0);
            Ptr<StarRouting> spoke = CreateObject<StarRouting>();
            spoke->local = ifs.GetAddress(0);
            spoke->localIf = hosts.Get(i)->GetObject<Ipv4>()->GetInterfaceForDevice(dev.Get(0));
            spoke->defaultRoute = MakeRoute(Ipv4Address::GetAny(), ifs.GetAddress(0), ifs.GetAddress(1), dev.Get(0));
            hosts.Get(i)->GetObject<Ipv4>()->SetRoutingProtocol(spoke);
            hub->routes[ifs.GetAddress(0).Get()] = MakeRoute(ifs.GetAddress(0), ifs.GetAddress(1), ifs.GetAddress(0), dev.Get(1));
        }
        std::vector<bool> hasSink(n, false);
        for (uint32_t i = 0; i < msgs.size(); ++i) {
            Msg& m = msgs[i];
            if (!hasSink[m.dst]) {
                hasSink[m.dst] = true;
                PacketSinkHelper sh("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), kSinkPort));
                ApplicationContainer a = sh.Install(hosts.Get(m.dst));
                a.Start(Seconds(0));
                if (!a.Get(0)->TraceConnectWithoutContext("RxWithAddresses", MakeBoundCallback(&Star::OnRx, this)))
                    NS_FATAL_ERROR("PacketSink trace missing");
            }
            std::vector<uint32_t> uniq(m.after);
            std::sort(uniq.begin(), uniq.end());
            uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
            m.pending = uniq.size();
            for (uint32_t a : uniq) msgs[a].dependents.push_back(i);
            if (m.pending == 0) Simulator::Schedule(Seconds(m.start), &Star::Launch, this, i);
        }
    }

    void Run(double stopTime) {
        Simulator::Stop(Seconds(stopTime));
        Simulator::Run();
    }
};

Star* NewStar() { return new Star(); }
void DeleteStar(Star* s) { delete s; }
}  // namespace fsgt
"""

_ns = None


def _load_ns():
    """Import ns-3 (once per process) and compile the harness into it."""
    global _ns
    if _ns is None:
        from ns import ns  # noqa: PLC0415  (7-9 s, 600 MB)

        ns.cppyy.cppdef(_CPP)
        _ns = ns
    return _ns


def ns3_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ns3")
    except PackageNotFoundError:
        return "unknown"


def _configure(ns, s: dict) -> None:
    def d(name, value):
        ns.Config.SetDefault(name, ns.StringValue(str(value)))

    d("ns3::TcpL4Protocol::SocketType", s["congestion_control"])
    d("ns3::TcpL4Protocol::RecoveryType", s["recovery"])
    d("ns3::TcpSocket::SegmentSize", s["segment_size"])
    d("ns3::TcpSocket::InitialCwnd", s["initial_cwnd"])
    d("ns3::TcpSocket::SndBufSize", s["sndbuf_bytes"])
    d("ns3::TcpSocket::RcvBufSize", s["rcvbuf_bytes"])
    d("ns3::TcpSocket::TcpNoDelay", "false" if s["nagle"] else "true")
    d("ns3::TcpSocket::DelAckCount", s["delack_count"])
    d("ns3::TcpSocket::DelAckTimeout", f"{s['delack_timeout_s']}s")
    d("ns3::TcpSocket::ConnTimeout", f"{s['conn_timeout_s']}s")
    d("ns3::TcpSocket::ConnCount", s["conn_count"])
    d("ns3::TcpSocket::DataRetries", s["data_retries"])
    d("ns3::TcpSocketBase::Sack", "true" if s["sack"] else "false")
    d("ns3::TcpSocketBase::Timestamp", "true" if s["timestamps"] else "false")
    d("ns3::TcpSocketBase::WindowScaling", "true" if s["window_scaling"] else "false")
    d("ns3::TcpSocketBase::MinRto", f"{s['min_rto_s']}s")
    d("ns3::TcpSocketBase::ClockGranularity", f"{s['clock_granularity_s']}s")
    # Every host has one interface, so the strong end-system model changes nothing but spares the
    # router a scan of all its N interfaces for every packet it forwards (O(N^2) per round).
    d("ns3::Ipv4::StrongEndSystemModel", "true")


def run_pattern(pattern: dict, settings: dict | None = None) -> dict:
    """Simulate one pattern; returns its result entry (see the module docstring)."""
    s = {**SETTINGS, **(settings or {})}
    P.validate(pattern)
    ns = _load_ns()
    _configure(ns, s)
    node_ids = list(pattern["nodes"])
    index = {nid: k for k, nid in enumerate(node_ids)}
    msgs = sorted(pattern["messages"], key=lambda m: m["id"])
    if len(msgs) > 65535 - 10000:
        raise ValueError("too many messages for one port each")
    pos = {m["id"]: k for k, m in enumerate(msgs)}
    t0 = time.perf_counter()
    star = ns.cppyy.gbl.fsgt.NewStar()
    try:
        star.queuePackets = int(s["queue_packets"])
        star.routerQueuePackets = int(s["router_queue_packets"] or s["queue_packets"])
        star.sendSize = int(s["bulk_send_chunk"])
        star.mtu = int(s["mtu"])
        for nid in node_ids:
            spec = pattern["nodes"][nid]
            star.AddNode(float(spec["up"]), float(spec["down"]), float(spec.get("latency", 0.0)))
        vec = ns.cppyy.gbl.std.vector["uint32_t"]
        for m in msgs:
            after = vec()
            for a in m.get("after", []):
                after.push_back(pos[a])
            star.AddMessage(index[m["src"]], index[m["dst"]], int(m["bytes"]),
                            float(m.get("start", 0.0)), float(m.get("delay", 0.0)), after)
        star.Build()
        star.Run(float(s["stop_time_s"]))
        out_msgs = []
        for k, m in enumerate(msgs):
            r = star.msgs[k]

            def t(x):
                return None if x < 0 else float(x)

            out_msgs.append({
                "id": m["id"], "src": m["src"], "dst": m["dst"], "bytes": int(m["bytes"]),
                "start": t(r.tStart), "connected": t(r.tConnected), "first_byte": t(r.tFirst),
                "completion": t(r.tDone),
                "duration": None if r.tDone < 0 else float(r.tDone - r.tStart),
                "retransmissions": int(r.retx),
            })
        drops, max_q = int(star.drops), int(star.maxQueue)
    finally:
        ns.Simulator.Destroy()
        ns.cppyy.gbl.fsgt.DeleteStar(star)
    wall = time.perf_counter() - t0
    done = [m["completion"] for m in out_msgs if m["completion"] is not None]
    return {
        "name": pattern.get("name", ""), "hash": P.pattern_hash(pattern),
        "complete": len(done) == len(out_msgs),
        "round": max(done) if len(done) == len(out_msgs) else None,
        "wall_s": round(wall, 3),
        "queue_drops": drops, "max_queue_packets": max_q,
        "retransmissions": sum(m["retransmissions"] for m in out_msgs),
        "outliers": [m["id"] for m in out_msgs if m["retransmissions"] > 0],
        "messages": out_msgs,
    }


def run_patterns(patterns: list[dict], settings: dict | None = None, log=None) -> dict:
    """Simulate every pattern in one process; returns the output document."""
    s = {**SETTINGS, **(settings or {})}
    load_start = os.getloadavg()
    t_import = time.perf_counter()
    _load_ns()
    t_import = time.perf_counter() - t_import
    results = []
    for p in patterns:
        r = run_pattern(p, s)
        results.append(r)
        if log:
            log(f"{r['name']:34s} round {r['round'] if r['round'] is None else format(r['round'], '.6f')} s  "
                f"wall {r['wall_s']:.2f} s  retx {r['retransmissions']}  drops {r['queue_drops']}  "
                f"maxq {r['max_queue_packets']}")
    return {
        "engine": "ns-3",
        "ns3_version": ns3_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "import_s": round(t_import, 2),
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "settings": s,
        "patterns": results,
    }


def _load_json_patterns(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        doc = json.loads(Path(path).read_text() if path != "-" else sys.stdin.read())
        out += doc if isinstance(doc, list) else [doc]
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Simulate communication patterns in ns-3 (one import, many patterns).")
    ap.add_argument("names", nargs="*", help="pattern names from validation.patterns")
    ap.add_argument("--all", action="store_true", help="every pattern of validation.patterns")
    ap.add_argument("--json", nargs="*", default=[], metavar="FILE", help="pattern files (a pattern or a list; - = stdin)")
    ap.add_argument("--queue-packets", type=int, help=f"device queue size (default {SETTINGS['queue_packets']})")
    ap.add_argument("--router-queue-packets", type=int,
                    help="queue size of the router's devices (the downlinks; default: --queue-packets)")
    ap.add_argument("-o", "--out", help="write the result document here (default: stdout)")
    args = ap.parse_args(argv)
    pats = P.all_patterns() if args.all else []
    if args.names:
        allp = {p["name"]: p for p in P.all_patterns()}
        pats += [allp[n] for n in args.names]
    pats += _load_json_patterns(args.json)
    if not pats:
        ap.error("no patterns given")
    settings = {}
    if args.queue_packets:
        settings["queue_packets"] = args.queue_packets
    if args.router_queue_packets:
        settings["router_queue_packets"] = args.router_queue_packets
    t_all = time.perf_counter()
    doc = run_patterns(pats, settings, log=lambda s: print(s, file=sys.stderr, flush=True))
    doc["total_wall_s"] = round(time.perf_counter() - t_all, 1)
    if args.out:
        R.dump(doc, args.out, digits=9)
    else:
        print(json.dumps(doc, indent=1))
    return 0 if all(r["complete"] for r in doc["patterns"]) else 3


if __name__ == "__main__":
    raise SystemExit(main())
