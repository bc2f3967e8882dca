"""``NetSpec``: which network to build for a run, as plain data (picklable, JSON-friendly).

Scenarios and studies describe the network they want once (profile, link model, faults,
transport) and build one per run with ``spec.build(seed)``; worker processes receive the
description, not a network. ``NetSpec.of("wan")`` accepts a bare profile name.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, replace
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import NetworkConfigError
from .links import Faults, get_profile
from .registry import (LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY, factory_class, source_digest,
                       unknown_option)

__all__ = ["NetSpec", "OWN_FIELDS", "TRANSPORTS", "frames_itself"]

TRANSPORTS = TRANSPORT_REGISTRY
"""The registered transports (``fedsim.kernel.registry``): as a mapping, name -> description
(``sim``, ``asyncio``, ``tcp``, then those plug-ins register). A live view: it was a plain dict of
the three built-in names."""


@dataclass(frozen=True)
class NetSpec:
    """A network to build: ``profile`` (node specs), ``link_model`` (``fifo``, ``fair``, ``tcp``,
    or one a plug-in registered: ``register_link_model``; for transports that take link models
    only, as ``sim``), ``loss``/``dropout``/``window`` (``Faults`` for the clients),
    ``transport`` (``sim``, ``asyncio``, ``tcp``: each simulates loss and dropout alike; or one a
    plug-in registered: ``register_transport``),
    ``framing_bytes``, and ``options`` passed to the transport's
    constructor (e.g. ``processes`` for tcp): a mapping or (key, value) pairs, kept as pairs
    sorted by key (so the spec hashes, and equal options make equal specs in whatever order);
    ``link_options`` alike, passed to the link model's registered factory (``--link-option
    KEY=VALUE``: ``factory(**link_options)`` makes the network's link model), checked as
    ``options`` are against the factory's signature, and their values by making one link model
    (a constructor should start nothing), which is dropped.
    Raises ``NetworkConfigError`` naming what it
    refuses: an unknown profile, link model or transport, a link model the transport does not
    take, a ``loss``, ``dropout`` or ``window`` ``Faults`` refuses (a str too), a
    ``framing_bytes`` that is not a whole number >= 0 or that the transport fixes itself,
    ``options`` that are not a mapping or pairs with str keys, or that name a key twice; an option
    that is one of the spec's own fields or ``build``'s ``seed`` (``seed``, ``profile``, ``faults``,
    ``link_model``, ``framing_bytes``: the fields replaced ``link_model`` and ``framing_bytes``
    options silently), one the transport's constructor does not take (named with the options it
    takes and a did-you-mean; not checked for a factory that takes any ``**kwargs``), and a value
    the transport refuses (``options for transport 'tcp': processes must be ...``): for the
    built-in transports (``sim``, ``asyncio``, ``tcp``) a network is made from the spec, and
    dropped, to check them, when there are options (their constructors start no process and
    open no socket); a plug-in's factory is not called before ``build``, which is where the
    values it refuses are refused."""

    profile: str = "ideal"
    link_model: str = "fifo"
    loss: float = 0.0
    dropout: float = 0.0
    window: tuple[float, float] = (0.0, 0.0)
    transport: str = "sim"
    framing_bytes: int = 0
    options: tuple[tuple[str, Any], ...] = ()
    link_options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        get_profile(self.profile)  # raises NetworkConfigError for an unknown profile
        LINK_MODEL_REGISTRY.entry(self.link_model)  # NetworkConfigError: the registered names
        transport = TRANSPORT_REGISTRY.entry(self.transport)
        if not transport.link_models and self.link_model != "fifo":
            takes = [t.name for t in TRANSPORT_REGISTRY.entries() if t.link_models]
            also = f" (transports that take a link model: {', '.join(takes)})" if takes != ["sim"] else ""
            raise NetworkConfigError(f"link model {self.link_model!r} applies to the simulator only, "
                                     f"not to transport {self.transport!r}{also}")
        fb = self.framing_bytes
        # (checked when a network was built from it: a run that had made its folder, or a
        # sweep's every point, failed then)
        if isinstance(fb, bool) or not isinstance(fb, numbers.Real) or not math.isfinite(fb) \
                or not float(fb).is_integer() or fb < 0:
            raise NetworkConfigError(f"framing_bytes must be a whole number >= 0, got {fb!r}")
        object.__setattr__(self, "framing_bytes", int(fb))
        if self.framing_bytes and frames_itself(transport):
            from .tcp import FRAME_OVERHEAD

            if self.framing_bytes != FRAME_OVERHEAD:  # build() would silently leave it out
                raise NetworkConfigError(f"framing_bytes is fixed by transport {self.transport!r} (its frame "
                                         f"header, {FRAME_OVERHEAD} bytes), got {self.framing_bytes!r}")
        # a dict was kept as given: the spec did not hash ("unhashable type: 'dict'") and a dict
        # equal to the pairs made another spec; pairs that were no pairs failed at build
        object.__setattr__(self, "options", _options(self.options))
        object.__setattr__(self, "link_options", _options(self.link_options, "link_options"))
        f = Faults(loss=self.loss, dropout=self.dropout, window=self.window)  # refuses bad ones, naming them
        # as floats (a NumPy float or an int was kept as given, in results.json too)
        for name in ("loss", "dropout", "window"):
            object.__setattr__(self, name, getattr(f, name))
        if self.options:  # (kept until build: a sweep's every run failed then, naming neither option nor transport)
            self._check_options(transport)
        if self.link_options:
            self._check_link_options(transport)

    def _check_link_options(self, transport) -> None:
        """Refuse link options for a transport that takes no link model, an option the link model's
        factory does not take (with a did-you-mean), and a value it refuses (one is made, and
        dropped)."""
        if not transport.link_models:
            raise NetworkConfigError(f"link_options: transport {self.transport!r} takes no link model (it runs "
                                     f"without one), so no link model options")
        entry = LINK_MODEL_REGISTRY.entry(self.link_model)
        for key, _ in self.link_options:
            error = unknown_option("link model", self.link_model, entry.factory, key)
            if error is not None:
                raise NetworkConfigError(f"link_options: {error}")
        from .sim import get_link_model

        get_link_model(self.link_model, self.link_options)  # (its values: what the factory refuses, named)

    def link_model_argument(self) -> Any:
        """What a transport that takes a link model is given as ``link_model``: the name, or, with
        ``link_options``, a new instance made by the name's factory with them."""
        if not self.link_options:
            return self.link_model
        from .sim import get_link_model

        return get_link_model(self.link_model, self.link_options)

    def _check_options(self, transport) -> None:
        """Refuse an option that is one of the spec's own fields, one ``transport``'s factory does not
        take, or (a built-in transport's) a value its constructor refuses."""
        for key, _ in self.options:
            if key in OWN_FIELDS:
                raise NetworkConfigError(f"options: {OWN_FIELDS[key]}, not an option")
        for key, _ in self.options:
            error = unknown_option("transport", self.transport, transport.factory, key, OWN_FIELDS)
            if error is not None:
                raise NetworkConfigError(f"options: {error}")
        from .aio import AsyncioNetwork
        from .sim import SimNetwork
        from .tcp import TcpNetwork

        # a built-in transport's constructor starts nothing (no process, no socket): one is made and
        # dropped; a plug-in's factory is not called before build (it may count or log what it makes)
        if transport.factory in (SimNetwork, AsyncioNetwork, TcpNetwork):
            try:
                self.build(0)
            except (TypeError, ValueError, AttributeError) as exc:  # (NetworkConfigError is a ValueError)
                raise NetworkConfigError(f"options for transport {self.transport!r}: {exc}") from exc

    @classmethod
    def of(cls, spec: "NetSpec | str | None") -> "NetSpec":
        """``spec`` itself, or a NetSpec with profile ``spec`` (None: the defaults)."""
        if isinstance(spec, NetSpec):
            return spec
        return cls() if spec is None else cls(profile=str(spec))

    @property
    def faults(self) -> Faults | None:
        f = Faults(loss=self.loss, dropout=self.dropout, window=self.window)
        return f if f.active else None

    def replace(self, **changes: Any) -> "NetSpec":
        return replace(self, **changes)

    def build(self, seed: int, **kwargs: Any):
        """A fresh network of this description (``kwargs``: more constructor arguments, e.g.
        ``trace=True``). Raises ``NetworkConfigError`` for a keyword of ``kwargs`` the spec gives
        itself (``profile``, ``faults``, ``link_model``, ``framing_bytes``; or one of its
        ``options``): it was "dict() got multiple values for keyword argument", or (``link_model``,
        ``framing_bytes``) replaced by the spec's silently; ``NetworkConfigError`` naming the transport
        when its factory returns something that is not a ``Network`` (a plug-in's); and what the
        transport's constructor raises."""
        given = dict(self.options)
        for key in kwargs:
            if key in OWN_FIELDS:
                raise NetworkConfigError(f"build: {OWN_FIELDS[key].split(' (')[0]}; spec.replace("
                                         f"{'loss' if key == 'faults' else key}=...) describes another")
            if key in given:
                raise NetworkConfigError(f"build: {key} is given both here and as one of the NetSpec's options "
                                         f"({key}={given[key]!r:.80})")
        common = dict(seed=seed, profile=self.profile, faults=self.faults, **dict(self.options), **kwargs)
        transport = TRANSPORT_REGISTRY.entry(self.transport)  # (registered: sim, asyncio, tcp, plug-ins')
        if not frames_itself(transport):
            common["framing_bytes"] = self.framing_bytes
        if transport.link_models:
            common["link_model"] = self.link_model_argument()
        net = transport.factory(**common)
        from .network import Network

        if not isinstance(net, Network):  # (a plug-in's factory: it failed at add_node, naming nothing)
            raise NetworkConfigError(f"transport {self.transport!r}: its factory {transport.factory!r:.80} returned "
                                     f"{type(net).__name__} {net!r:.80}, not a fedsim.kernel.Network")
        return net

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-friendly data (results.json's ``network``, a sweep point's key), plus,
        for a link model or transport a plug-in registered, ``link_model_source`` /
        ``transport_source``: a digest of the plug-in's code (``registry.source_digest``), so that a
        point run with another version of the plug-in is another configuration; ``link_options``
        only when there are some (the points of sweeps run before they existed are the same points)."""
        d = asdict(self)
        d["window"] = list(self.window)
        d["options"] = dict(self.options)
        # (only when given: a point run before link options existed has none, and is the same point)
        if self.link_options:
            d["link_options"] = dict(self.link_options)
        else:
            del d["link_options"]
        for field, registry, name in (("link_model_source", LINK_MODEL_REGISTRY, self.link_model),
                                      ("transport_source", TRANSPORT_REGISTRY, self.transport)):
            digest = source_digest(registry, name)
            if digest is not None:
                d[field] = digest
        return d

    def describe(self) -> str:
        """A few words for reports: ``wan, fair links, loss 0.1, 30% dropout in [0, 60] s``."""
        bits = [self.profile]
        if self.transport != "sim" or self.options:
            bits.append(f"{self.transport} transport" + (f" ({_described(self.options)})" if self.options else ""))
        if self.link_model != "fifo":
            bits.append(f"{self.link_model} link model"
                        + (f" ({_described(self.link_options)})" if self.link_options else ""))
        if self.loss:
            bits.append(f"loss {self.loss:g}")
        if self.dropout:
            # the percentage to six digits (it was rounded to a whole one: 0.004 read "0% dropout",
            # 0.996 "100% dropout"), the window's ends as given (it read "[0, 1e+06] s")
            bits.append(f"{100 * self.dropout:g}% dropout in [{_plain(self.window[0])}, {_plain(self.window[1])}] s")
        return ", ".join(bits)


def _described(options: tuple) -> str:
    return ", ".join(f"{k}={v!r:.40}" for k, v in options)


def _plain(x: float) -> str:
    """``x`` written out without an exponent (``1000000``, ``0.05``, ``30``)."""
    import numpy as np

    return np.format_float_positional(float(x), trim="-")


# what build() gives a transport from the spec itself (and its seed): never an option
OWN_FIELDS = {
    "seed": "seed is build(seed)'s argument",
    "profile": "profile is the NetSpec's own field (NetSpec(profile=...))",
    "faults": "faults are the NetSpec's own loss, dropout and window",
    "link_model": "link_model is the NetSpec's own field (NetSpec(link_model=...))",
    "framing_bytes": "framing_bytes is the NetSpec's own field (NetSpec(framing_bytes=...))",
}


def _options(options: Any, field: str = "options") -> tuple[tuple[str, Any], ...]:
    """``options`` (a mapping or an iterable of (key, value) pairs) as pairs sorted by key;
    ``NetworkConfigError`` naming ``options`` for anything else, a key that is not a str, or a
    key given twice."""
    if isinstance(options, Mapping):
        pairs = list(options.items())
    elif isinstance(options, (str, bytes)) or not isinstance(options, Iterable):
        raise NetworkConfigError(f"{field} must be a mapping or (key, value) pairs, got "
                                 f"{type(options).__name__} {options!r:.80}")
    else:
        pairs = []
        for p in options:
            if isinstance(p, (str, bytes)) or not isinstance(p, Iterable) or len(p := tuple(p)) != 2:
                raise NetworkConfigError(f"{field} must be a mapping or (key, value) pairs, got the element "
                                         f"{p!r:.80}")
            pairs.append(p)
    keys = [k for k, _ in pairs]
    bad = [k for k in keys if not isinstance(k, str)]
    if bad:
        raise NetworkConfigError(f"{field}: a key is a str (a constructor argument's name), got {bad[0]!r:.80}")
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise NetworkConfigError(f"{field}: key {twice[0]!r} given twice")
    return tuple(sorted(pairs, key=lambda kv: kv[0]))


def frames_itself(transport) -> bool:
    """Whether the registered ``transport`` (its name or its registry entry) fixes its framing
    itself: ``tcp`` and any ``TcpNetwork`` subclass (or ``functools.partial`` of one) a plug-in registers (the frame header;
    ``TcpNetwork`` refuses another ``framing_bytes``, the default 0 too: ``build`` passing it made a
    plug-in's subclass fail). Any other transport takes a ``NetSpec``'s ``framing_bytes``."""
    from .tcp import TcpNetwork

    if isinstance(transport, str):
        transport = TRANSPORT_REGISTRY.entry(transport)
    cls = factory_class(transport.factory)  # (a class, or a functools.partial of one)
    return cls is not None and issubclass(cls, TcpNetwork)
