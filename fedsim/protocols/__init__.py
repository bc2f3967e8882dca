"""Protocols as actors, and the registry of protocols.

Each module holds one protocol's actor coroutines, its configuration dataclass and one
``ProtocolSpec`` it registers (``fedsim.protocols.contract``); ``REGISTRY`` is the one list the
command line, the studies, the traces, the docs and the tests read. Nothing here imports simpy
or asyncio: the actors only await ``ctx``.
"""

from .contract import Kind, ProtocolSpec, Result
from .registry import (REGISTRY, PluginState, entry_points_loaded, load_plugin_state, load_plugins, plugin_files,
                       plugin_state, register)

# the built-in protocols register themselves on import, in this order
from . import demo, fedrec, fedrecpp, fpl, fcf, personalfr, fedavg_ae  # noqa: E402,F401

__all__ = ["Kind", "PROTOCOLS", "PluginState", "ProtocolSpec", "REGISTRY", "Result", "entry_points_loaded",
           "load_plugin_state", "load_plugins", "plugin_files", "plugin_state", "register"]


def __getattr__(name: str):
    # PROTOCOLS (name -> one-line summary) used to be a hand-kept dict; it is now read off the registry
    if name == "PROTOCOLS":
        return {spec.name: spec.summary for spec in REGISTRY.specs()}
    raise AttributeError(name)
