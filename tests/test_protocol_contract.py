"""The protocol contract, checked for every protocol in the registry (a protocol added to the
registry is covered without writing a test): it builds and runs on its tiny preset on SimNetwork
and on AsyncioNetwork with the same seed and gets identical final parameters and identical
payload bytes per message kind; two SimNetwork runs give a byte-identical ledger; every ledger
row's (sender role, receiver role, kind) is one the spec declares; collect returns a Result."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedsim.config import Config, fields_of
from fedsim.kernel import AsyncioNetwork, SimNetwork
from fedsim.protocols import REGISTRY, ProtocolSpec, Result, load_plugins
from fedsim.protocols.contract import check_job, check_ledger, check_result, check_tiny

# docs/writing-a-protocol.md: `FEDSIM_PLUGINS=fedavg_mf.py pytest tests/test_protocol_contract.py`
# checks a plug-in; nothing loaded $FEDSIM_PLUGINS here, so that command checked the built-ins only
# (tests/test_docs_tutorial.py::test_fedsim_plugins_puts_the_plugin_under_the_contract_test)
load_plugins(entry_points=False)
NAMES = list(REGISTRY)
SEED = 11


def run(name: str, net, clients: int = 3, rounds: int = 2):
    spec = REGISTRY[name]
    # the checks name the protocol and what it returned (a plug-in's mistake was an AttributeError
    # on 'NoneType' here, or a bare `assert (False)` below)
    data, cfg = check_tiny(spec, spec.tiny(clients, rounds, SEED))
    job = check_job(spec, spec.build(net, data, cfg))
    run_result = net.run() if isinstance(net, SimNetwork) else net.run(timeout=120)
    return check_result(spec, job.collect(run_result), run_result)


def bytes_per_kind(ledger) -> dict:
    return {k: (t.messages, t.payload_bytes) for k, t in ledger.view().group("kind").items()}


@pytest.mark.parametrize("link_model", ["fifo", "fair", "tcp"])
@pytest.mark.parametrize("name", NAMES)
def test_same_parameters_and_bytes_on_both_transports(name, link_model):
    """On every link model (only arrival times move) and on the asyncio transport."""
    sim = run(name, SimNetwork(seed=SEED, profile="wan", link_model=link_model))
    aio = run(name, AsyncioNetwork(seed=SEED, time_scale=0.001))
    assert isinstance(sim, Result) and isinstance(aio, Result)
    assert sim.protocol == aio.protocol == name
    assert sim.params and sim.params.keys() == aio.params.keys()
    for key, value in sim.params.items():
        assert np.array_equal(np.asarray(value), np.asarray(aio.params[key])), f"{name}: {key} differs"
    assert bytes_per_kind(sim.ledger) == bytes_per_kind(aio.ledger)
    assert sim.run.complete and aio.run.complete
    assert sim.duration > 0 and aio.duration > 0


@pytest.mark.parametrize("link_model", ["fifo", "tcp"])
@pytest.mark.parametrize("name", NAMES)
def test_same_seed_byte_identical_ledger(name, link_model):
    a = run(name, SimNetwork(seed=SEED, profile="mobile", link_model=link_model))
    b = run(name, SimNetwork(seed=SEED, profile="mobile", link_model=link_model))
    assert a.ledger.to_csv() == b.ledger.to_csv()
    assert len(a.ledger) > 0


@pytest.mark.parametrize("name", NAMES)
def test_every_message_is_declared_by_the_spec(name):
    spec = REGISTRY[name]
    res = run(name, SimNetwork(seed=SEED, profile="lan"), clients=4, rounds=3)
    check_ledger(spec, res.ledger)  # a ContractError naming each undeclared (roles, kind)
    assert spec.undeclared(res.ledger) == []
    used = {k for k in res.ledger.view().group("kind")}
    declared = {k.name for k in spec.kinds}
    assert used <= declared
    # anonymous rows only for kinds declared anonymous, and every declared-anonymous row is anonymous
    for row in res.ledger.records():
        assert bool(row["anonymous"]) == spec.kind(row["kind"]).anonymous, (name, row["kind"])


@pytest.mark.filterwarnings("ignore::UserWarning")  # (FedRec++'s one denoiser has no ordinary client)
@pytest.mark.parametrize("name", [n for n in NAMES if n != "fpl"])  # (one FPL client: no negative item)
@pytest.mark.parametrize("profile", ["ideal", "wan"])
def test_every_message_of_a_one_client_run_is_declared_by_the_spec(name, profile):
    # `fedsim trace fedrecpp --clients 1` warned of an undeclared 'collect' from server to client:
    # with no ordinary client the server sends round 0's collect right after the assign, before
    # the only client has read it and become a denoiser
    spec = REGISTRY[name]
    res = run(name, SimNetwork(seed=SEED, profile=profile), clients=1, rounds=2)
    assert len(res.ledger) >= 4 and spec.undeclared(res.ledger) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_spec_is_complete(name):
    spec = REGISTRY[name]
    assert spec.name == name and spec.summary
    assert issubclass(spec.Config, Config) and dataclasses.is_dataclass(spec.Config)
    infos = fields_of(spec.Config)
    assert infos and all(f.help for f in infos), "every hyperparameter has a line of help"
    assert spec.rounds_field in {f.name for f in infos}
    assert spec.Config() == spec.Config()  # the defaults validate
    data, cfg = check_tiny(spec, spec.tiny(2, 1, 0))
    assert isinstance(cfg, spec.Config)
    assert getattr(cfg, spec.rounds_field) == 1


KIND_LISTS = {"EVAL_KINDS": "evaluation", "TRAINING_KINDS": "training"}


def kind_list_modules():
    import importlib
    import pkgutil

    import fedsim.protocols as pkg
    out = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"fedsim.protocols.{info.name}")
        spec = getattr(mod, "SPEC", None)
        for attr, purpose in KIND_LISTS.items():
            if isinstance(spec, ProtocolSpec) and hasattr(mod, attr):
                out.append(pytest.param(mod, attr, purpose, id=f"{info.name}.{attr}"))
    return out


@pytest.mark.parametrize("mod,attr,purpose", kind_list_modules())
def test_module_kind_lists_are_the_specs(mod, attr, purpose):
    # fedrec's and fedae's EVAL_KINDS were hand lists ("eval", "evaluate") that nothing tied to the
    # kinds their specs declare for evaluation; they are now read off the spec, in its order
    assert getattr(mod, attr) == mod.SPEC.kinds_for(purpose)
    assert getattr(mod, attr)  # every protocol that exports such a list declares such kinds


def test_every_protocol_with_evaluation_kinds_is_covered():
    covered = {p.values[0].SPEC.name for p in kind_list_modules() if p.values[1] == "EVAL_KINDS"}
    assert covered == {"fedrec", "fedavg-ae", "personalfr"}
