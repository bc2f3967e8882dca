"""Node link and speed specifications, named network profiles and seeded heterogeneity.

A node's *link* is its access network: an uplink and a downlink bandwidth in bytes per second
(``math.inf`` = no transmission delay) and a one-way latency in seconds to the network core. A
message from A to B propagates for ``A.latency + B.latency`` (see docs/network-model.md).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import NetworkConfigError

__all__ = ["Faults", "LinkSpec", "NodeSpec", "Profile", "PROFILES", "get_profile"]


def _as_float(value: object) -> float:
    """``float(value)`` of a number, or NaN for what is not one (``'fast'``, None, a bool:
    ``uplink=True`` was 1 byte/s, ``loss=True`` every message lost; a str, even ``'0.1'``:
    float() took it, and a ``NetSpec`` kept the str): every check below refuses NaN with a
    message naming its parameter, where float() would name none."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


_MIN_RATE = sys.float_info.min  # the smallest normal float: below it, 1 / rate overflows to inf


def _check_rate(name: str, value: float, unit: str = "bytes/s") -> float:
    v = _as_float(value)
    if math.isnan(v) or v <= 0:
        raise NetworkConfigError(f"{name} must be a positive number of {unit} (or inf), got {value!r}")
    if v < _MIN_RATE:  # subnormal: one byte (one FLOP) would take inf seconds, and every time after it
        raise NetworkConfigError(f"{name} of {value!r} {unit} is too small for finite times: it must be at least "
                                 f"{_MIN_RATE!r} (or inf)")
    return v


def _check_nonneg(name: str, value: float, allow_inf: bool = False) -> float:
    v = _as_float(value)
    if math.isnan(v) or v < 0 or (math.isinf(v) and not allow_inf):
        raise NetworkConfigError(f"{name} must be a finite non-negative number, got {value!r}")
    return v


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """Uplink and downlink bandwidth (bytes/s, ``inf`` allowed) and one-way latency (s).
    Raises ``NetworkConfigError`` naming the field for a rate that is not a positive number or a
    latency that is not a finite non-negative number (a str or a bool is no number)."""

    uplink: float = math.inf
    downlink: float = math.inf
    latency: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "uplink", _check_rate("uplink", self.uplink))
        object.__setattr__(self, "downlink", _check_rate("downlink", self.downlink))
        object.__setattr__(self, "latency", _check_nonneg("latency", self.latency))


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Everything the kernel needs to know about one node besides its actor.

    ``flops`` is the node's compute speed in floating-point operations per second (``inf`` makes
    ``compute`` free); ``loss`` the probability that a message it sends is lost; ``offline_at``
    the simulated time at which the node drops out (``None``: never).
    """

    link: LinkSpec = field(default_factory=LinkSpec)
    flops: float = math.inf
    loss: float = 0.0
    offline_at: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.link, LinkSpec):
            raise NetworkConfigError(f"link must be a LinkSpec, got {type(self.link).__name__}")
        object.__setattr__(self, "flops", _check_rate("flops", self.flops, "FLOP/s"))
        loss = _as_float(self.loss)
        if not 0.0 <= loss <= 1.0:  # also NaN
            raise NetworkConfigError(f"loss must be a probability in [0, 1], got {self.loss!r}")
        object.__setattr__(self, "loss", loss)
        if self.offline_at is not None:
            object.__setattr__(self, "offline_at", _check_nonneg("offline_at", self.offline_at))


@dataclass(frozen=True, slots=True)
class Profile:
    """A named network setting: a median NodeSpec for servers and one for every other role,
    with log-normal spread (``sigma``) of bandwidths and compute speed across nodes.

    Raises ``NetworkConfigError`` for a ``name`` that is not a non-empty str, a ``server`` or
    ``client`` that is not a ``NodeSpec``, a ``sigma`` that is not a finite non-negative number,
    or a ``description`` that is not a str."""

    name: str
    server: NodeSpec
    client: NodeSpec
    sigma: float = 0.0
    description: str = ""

    def __post_init__(self) -> None:
        # (a name of 5 or "" and a description of None were kept as given)
        if not isinstance(self.name, str) or not self.name:
            raise NetworkConfigError(f"a profile's name is a non-empty str, got {type(self.name).__name__} "
                                     f"{self.name!r:.80}")
        if not isinstance(self.description, str):
            raise NetworkConfigError(f"profile {self.name!r}: description must be a str, got "
                                     f"{type(self.description).__name__} {self.description!r:.80}")
        # a NaN sigma drew NaN rates (refused later by LinkSpec, without the profile's name), a
        # negative one was taken for 0, an infinite one drew rates of 0 or inf
        for role in ("server", "client"):
            if not isinstance(getattr(self, role), NodeSpec):
                raise NetworkConfigError(f"profile {self.name!r}: {role} must be a NodeSpec, "
                                         f"got {type(getattr(self, role)).__name__}")
        sigma = _as_float(self.sigma)
        if not 0.0 <= sigma < math.inf:  # also NaN
            raise NetworkConfigError(f"profile {self.name!r}: sigma must be a finite non-negative number, "
                                     f"got {self.sigma!r}")
        object.__setattr__(self, "sigma", sigma)

    def draw(self, role: str, rng: np.random.Generator | None) -> NodeSpec:
        """The spec of one node of ``role``; with ``sigma > 0`` its bandwidths and speed are the
        median times independent log-normal factors drawn from ``rng``.

        Raises ``NetworkConfigError`` naming the profile if a factor takes a finite median rate
        out of range (to inf, which would mean "no delay", or below the smallest rate that gives
        finite times)."""
        base = self.server if role == "server" else self.client
        if self.sigma <= 0 or rng is None or role == "server":
            return base
        # math.exp (the C library's), not np.exp: NumPy's float64 exp takes a SIMD path on CPUs
        # with AVX512F whose last bits differ from libm's, which moved every time in a wan or mobile
        # ledger from one machine to another (the normals themselves are exact integer arithmetic)
        f_up, f_down, f_cpu = (math.exp(z) for z in rng.normal(0.0, self.sigma, size=3).tolist())
        up, down, flops = base.link.uplink * f_up, base.link.downlink * f_down, base.flops * f_cpu
        for name, median, v in (("uplink", base.link.uplink, up), ("downlink", base.link.downlink, down),
                                ("flops", base.flops, flops)):
            if (v == math.inf and median != math.inf) or not v >= _MIN_RATE:
                raise NetworkConfigError(f"profile {self.name!r}: a {role} {name} drawn from the median {median!r} "
                                         f"with spread sigma {self.sigma!r} came out as {v!r}, out of range")
        link = LinkSpec(up, down, base.link.latency)
        return replace(base, link=link, flops=flops)


_MBIT = 1e6 / 8  # bytes/s in one Mbit/s

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in [
        Profile("ideal", NodeSpec(), NodeSpec(),
                description="infinite bandwidth, zero latency, free compute: pure protocol logic"),
        Profile("lan",
                NodeSpec(LinkSpec(1000 * _MBIT, 1000 * _MBIT, 0.0005), flops=1e11),
                NodeSpec(LinkSpec(1000 * _MBIT, 1000 * _MBIT, 0.0005), flops=2e10),
                description="1 Gbit/s symmetric, 0.5 ms, homogeneous"),
        Profile("wan",
                NodeSpec(LinkSpec(1000 * _MBIT, 1000 * _MBIT, 0.005), flops=1e11),
                NodeSpec(LinkSpec(10 * _MBIT, 50 * _MBIT, 0.025), flops=1e10),
                sigma=0.5,
                description="clients on home broadband (10 up / 50 down Mbit/s, 25 ms), log-normal spread 0.5"),
        Profile("mobile",
                NodeSpec(LinkSpec(1000 * _MBIT, 1000 * _MBIT, 0.005), flops=1e11),
                NodeSpec(LinkSpec(2 * _MBIT, 10 * _MBIT, 0.06), flops=2e9),
                sigma=0.8,
                description="clients on 4G phones (2 up / 10 down Mbit/s, 60 ms), log-normal spread 0.8"),
    ]
}


def get_profile(profile: str | Profile) -> Profile:
    """Look up a named profile (or pass a ``Profile`` through). Raises ``NetworkConfigError``."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise NetworkConfigError(
            f"unknown network profile {profile!r}; known: {', '.join(sorted(PROFILES))}"
        ) from None


@dataclass(frozen=True, slots=True)
class Faults:
    """Seeded faults a network applies to the nodes it is given (``Network(faults=...)``).

    Every node whose role (when added) is in ``roles`` loses each message it sends with
    probability ``loss`` and drops out with probability ``dropout``, at a time drawn uniformly
    from ``window`` (seconds; ``(a, a)`` for a fixed instant). Both draws come from a generator
    derived from (seed, "dropout:" + node id), so a node's fate does not depend on which other
    nodes exist. A node given an explicit ``loss`` or ``offline_at`` in ``add_node`` keeps it.
    The default spares the server: its dropout ends any protocol (see ``IncompleteRunError``).
    ``roles`` is a tuple of role names, or one name as a str.

    Raises ``NetworkConfigError`` naming the field for a ``loss`` or ``dropout`` that is not a
    number in [0, 1] (a str or a bool is none), a ``window`` that is not ``(start, end)`` numbers
    with ``0 <= start <= end < inf``, or ``roles`` that name no role (empty, an empty name, or a
    name that is no str). A network given faults that no node's role
    matches refuses to run (``Network.check_faults``).
    """

    loss: float = 0.0
    dropout: float = 0.0
    window: tuple[float, float] = (0.0, 0.0)
    roles: tuple[str, ...] = ("client",)

    def __post_init__(self) -> None:
        for name in ("loss", "dropout"):
            value = getattr(self, name)
            v = _as_float(value)
            if not 0.0 <= v <= 1.0:  # also NaN
                raise NetworkConfigError(f"faults: {name} must be a probability in [0, 1], got {value!r}")
            object.__setattr__(self, name, v)
        try:
            lo, hi = (_as_float(x) for x in self.window)  # ("1" and True were taken for 1.0)
        except (TypeError, ValueError):  # not a pair
            lo = hi = math.nan
        if math.isnan(lo) or math.isnan(hi) or lo < 0 or hi < lo or math.isinf(hi):
            raise NetworkConfigError(f"faults: window must be (start, end) with 0 <= start <= end < inf seconds, "
                                     f"got {self.window!r}")
        object.__setattr__(self, "window", (lo, hi))
        # a str is one role: iterated, "client" was the roles c, l, i, e, n, t, which no node has
        roles = (self.roles,) if isinstance(self.roles, str) else self.roles
        try:
            roles = tuple(roles)
        except TypeError:  # not iterable
            roles = ()
        # (str() made a role 'None' of None and '1' of 1, which no node has)
        if not roles or not all(isinstance(r, str) and r for r in roles):
            raise NetworkConfigError(f"faults: roles must name at least one role (a tuple of names, or one name), "
                                     f"got {self.roles!r}")
        object.__setattr__(self, "roles", roles)

    @property
    def active(self) -> bool:
        return bool(self.loss or self.dropout)

    def offline_at(self, rng: np.random.Generator) -> float | None:
        """This node's dropout time, or None (two draws from ``rng`` either way)."""
        u, v = rng.random(2)
        if u >= self.dropout:
            return None
        lo, hi = self.window
        return lo + (hi - lo) * float(v)
