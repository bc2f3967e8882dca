"""Mistakes a plug-in author makes get an error naming the protocol and what to change, from
`fedsim run` and `fedsim trace` as from Python (docs/writing-a-protocol.md). Before: a build that
forgot its return was "AttributeError: 'NoneType' object has no attribute 'collect'" from inside
fedsim/experiment, a collect returning a dict "'dict' object has no attribute 'info'", a run that
sent a kind the spec does not declare wrote its report with that kind's purpose and roles as '?'
(or, for a role typo, the declared roles instead of the ones used), a spec whose kinds were
strings "AttributeError: 'str' object has no attribute 'name'", a Config without the default
`rounds` field an AttributeError after the run, and `fedsim trace` of a build returning None
wrote a trace as if all were well."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from fedsim.cli import main
from fedsim.config import Config, param
from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY, Kind, ProtocolSpec, Result
from fedsim.protocols.contract import ContractError, check_ledger, check_result

PLUGIN = '''
from dataclasses import dataclass

from fedsim.config import Config, param
from fedsim.protocols import Kind, ProtocolSpec, Result, register
from fedsim.protocols.common import SERVER, client_names
from fedsim.protocols.contract import server_result
from fedsim.protocols.presets import tiny_ratings


@dataclass(frozen=True)
class PingConfig(Config):
    rounds: int = param(1, "rounds", min=0)


async def server(ctx, clients, cfg):
    for r in range(cfg.rounds):
        ctx.begin_round(r)
        await ctx.broadcast(clients, "ping", {{"r": r}})
        got = await ctx.gather("pong", senders=clients, timeout=1.0, round=r)
    await ctx.broadcast(clients, "stop", None)
    return cfg.rounds


async def client(ctx):
    while (msg := await ctx.receive(("ping", "stop"))).kind == "ping":
        await ctx.send(SERVER, "pong", {{"r": msg.payload["r"]}})


@dataclass
class Job:
    cfg: PingConfig

    def collect(self, run):
        result = Result({name!r}, self.cfg, {{}}, [], run, info={{"rounds": server_result(run)}})
        return {collect}


def build(net, data, cfg, *, test=None, resume=None):
    names = client_names(data.n_users)
    net.add_node(SERVER, server, names, cfg, role="server")
    for name in names:
        net.add_node(name, client)
    return {build}


def tiny(clients=3, rounds=1, seed=0):
    return {tiny}


SPEC = register(ProtocolSpec(
    name={name!r}, summary="ping", Config=PingConfig, build=build, tiny=tiny,
    kinds=(Kind("ping", "server", "client", "training"),
           Kind("pong", {pong_src!r}, "server", "training"),
           {stop})))
'''
GOOD = dict(collect="result", build="Job(cfg)", tiny="tiny_ratings(clients, seed), PingConfig(rounds=rounds)",
            pong_src="client", stop='Kind("stop", "server", "client", "control")')
_ids = itertools.count()


@pytest.fixture
def plugin(tmp_path):
    """Writes a plug-in protocol with some parts replaced; returns (path, name). Unregistered after."""
    names = []

    def make(**parts):
        name = f"ping-{next(_ids)}"
        names.append(name)
        path = tmp_path / f"{name}.py"
        path.write_text(PLUGIN.format(name=name, **{**GOOD, **parts}))
        return str(path), name

    yield make
    for name in names:
        REGISTRY.remove(name)


def _run(capsys, tmp_path, path, name, *extra):
    out = tmp_path / f"out-{name}"
    code = main(["--plugin", path, "run", name, "--out", str(out), "--quiet", *extra])
    return code, capsys.readouterr().err, out.exists()


def test_the_good_plugin_runs(plugin, capsys, tmp_path):
    path, name = plugin()
    code, err, written = _run(capsys, tmp_path, path, name)
    assert (code, err, written) == (0, "", True)


def test_a_build_that_returns_no_job_is_named(plugin, capsys, tmp_path):
    path, name = plugin(build="None")
    code, err, written = _run(capsys, tmp_path, path, name)
    assert (code, written) == (2, False)
    assert err == (f"error: protocol {name!r}: build() returned None, not a job: return an object with a "
                   "collect(run) method that makes the Result (did build forget its return?)\n")
    code = main(["--plugin", path, "trace", name, "--out", str(tmp_path / "trace")])
    assert code == 2 and "build() returned None, not a job" in capsys.readouterr().err
    assert not (tmp_path / "trace").exists()


def test_a_collect_that_returns_no_result_is_named(plugin, capsys, tmp_path):
    path, name = plugin(collect="{'rounds': 1}")
    code, err, written = _run(capsys, tmp_path, path, name)
    assert (code, written) == (2, False)
    assert err == (f"error: protocol {name!r}: collect(run) returned a dict ({{'rounds': 1}}), not a "
                   "fedsim.protocols.Result: return Result(name, config, params, metrics, run, info=...)\n")


def test_a_kind_sent_but_not_declared_is_refused_by_fedsim_run(plugin, capsys, tmp_path):
    path, name = plugin(stop="")
    code, err, written = _run(capsys, tmp_path, path, name)
    assert (code, written) == (2, False)
    assert err == (f"error: protocol {name!r} sent messages its spec does not declare: 'stop' from server to "
                   "client (no Kind 'stop' declared). Declare each kind in ProtocolSpec(kinds=...) with the roles "
                   "the ledger records at sending\n")
    # the trace is still written (it is how the author sees what was sent), with a warning
    code = main(["--plugin", path, "trace", name, "--out", str(tmp_path / "trace")])
    assert code == 0 and (tmp_path / "trace" / "trace.html").exists()
    assert "warning: protocol " + repr(name) + " sent messages its spec does not declare: 'stop' from server " \
           "to client" in capsys.readouterr().err


def test_a_kind_sent_between_roles_its_kind_does_not_allow_is_refused(plugin, capsys, tmp_path):
    path, name = plugin(pong_src="clients")
    code, err, written = _run(capsys, tmp_path, path, name)
    assert (code, written) == (2, False)
    assert f"protocol {name!r} sent messages its spec does not declare: 'pong' from client to server (its Kind " \
           "allows clients to server)." in err


def test_a_tiny_preset_that_is_not_data_and_config_is_named_by_trace(plugin, capsys, tmp_path):
    path, name = plugin(tiny="PingConfig(rounds=rounds)")
    code = main(["--plugin", path, "trace", name, "--out", str(tmp_path / "trace")])
    assert code == 2
    assert capsys.readouterr().err == (f"error: protocol {name!r}: tiny(clients, rounds, seed) returned a "
                                       "PingConfig (PingConfig(rounds=1)), not (data, config) with config a "
                                       "PingConfig\n")


@dataclasses.dataclass(frozen=True)
class EpochsConfig(Config):
    epochs: int = param(1, "epochs", min=0)


def _spec(**kw):
    base = dict(name="spec-check", summary="s", Config=EpochsConfig, build=lambda *a, **k: None,
                tiny=lambda *a: None, rounds_field="epochs", kinds=(Kind("m", "server", "client"),))
    return ProtocolSpec(**{**base, **kw})


def test_spec_mistakes_are_named_when_the_spec_is_made():
    _spec()  # the well-formed one
    with pytest.raises(TypeError, match=r"^protocol 'spec-check': kinds\[1\] is 'stop', not a Kind: declare each "
                                        r"message kind as Kind\(name, sender_role, receiver_role, purpose\)$"):
        _spec(kinds=(Kind("m", "server", "client"), "stop"))
    with pytest.raises(TypeError, match=r"^protocol 'spec-check': kinds must be a tuple of Kind"):
        _spec(kinds=Kind("m", "server", "client"))
    with pytest.raises(ValueError, match=r"^protocol 'spec-check': rounds_field 'rounds' \(the default is 'rounds'\) "
                                         r"is not a field of EpochsConfig \(its fields: epochs\)"):
        _spec(rounds_field="rounds")

    @dataclasses.dataclass(frozen=True)
    class Plain:
        epochs: int = 1

    with pytest.raises(TypeError, match=r"^protocol 'spec-check': Config must be a dataclass subclassing "
                                        r"fedsim.config.Config"):
        _spec(Config=Plain)
    with pytest.raises(TypeError, match=r"^protocol 'spec-check': build must be a function, got 'build'$"):
        _spec(build="build")
    with pytest.raises(ValueError, match=r"^Kind 'm': src must be a role name or a tuple of role names"):
        Kind("m", (), "client")
    with pytest.raises(ValueError, match=r"^Kind 'm': dst must be a role name"):
        Kind("m", "server", "")


def test_check_result_and_check_ledger_from_python():
    spec = _spec()

    async def server(ctx):
        await ctx.send("c", "x", None)

    async def c(ctx):
        await ctx.receive("x")

    net = SimNetwork(seed=0)
    net.add_node("server", server, role="server")
    net.add_node("c", c, role="client")
    run = net.run()
    with pytest.raises(ContractError, match=r"^protocol 'spec-check' sent messages its spec does not declare: 'x' "
                                            r"from server to client \(no Kind 'x' declared\)"):
        check_ledger(spec, run.ledger)
    good = Result("spec-check", EpochsConfig(), {}, [{"round": 0, "mse": 1.0}], run)
    assert check_result(spec, good, run) is good
    with pytest.raises(ContractError, match=r"metrics is not a list of dicts each with a 'round'"):
        check_result(spec, Result("spec-check", EpochsConfig(), {}, [{"mse": 1.0}], run), run)
    with pytest.raises(ContractError, match=r"params is a list \(\[1\]\), not a dict of arrays by name"):
        check_result(spec, Result("spec-check", EpochsConfig(), [1], [], run), run)
    with pytest.raises(ContractError, match=r"whose run is None, not the run it was given"):
        check_result(spec, Result("spec-check", EpochsConfig(), {}, [], None), run)
