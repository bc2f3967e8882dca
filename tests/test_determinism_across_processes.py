""""A seed fixes everything" across processes, not only within one: every registered protocol's
tiny runs (with loss, dropout, deadlines, secure aggregation, FedRec++'s anonymous noise and
gather(count=), other link models, evaluations, a trace and a tap), the privacy attacks on
recorded runs and ``fedsim trace``'s files give the same bytes in processes whose string hashes
differ (``PYTHONHASHSEED``: set and dict-of-set iteration order), and the same bytes with numba and
with the pure-Python kernels where the docs promise it.

The runs are ``tests/determinism_probe.py`` (one subprocess per setting, all runs in each; a few
seconds each). A run that differs is named with the parts that differ (ledger, params, metrics,
info, run outcome, trace, tap, an attack's answer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsim.math.jit import jit_disabled
from fedsim.protocols import REGISTRY, load_plugins

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "determinism_probe.py"
HASH_SEEDS = ("0", "1", "12345")

# numba against the pure-Python kernels: bit-identical for these protocols' kernels (docs/fedrec.md,
# "numba ... compiles the same source ..."; docs/fpl.md: the compiled client round "the same numbers
# to the last bit"; fedsim/math/jit.py: no fast-math unless a module says so). The autoencoder
# protocols' compiled steps re-associate their sums (fedsim/math/ae_kernels.py FASTMATH;
# docs/personalfr.md: "results agree to float rounding, not bit for bit"): for them only what does
# not depend on the parameters' last bits must agree (the messages, their sizes and times).
NOT_BIT_IDENTICAL = {"personalfr", "fedavg-ae"}
WITHOUT_FLOATS = {"ledger", "missing", "run", "facts", "personalfr_indices", "size_only"}

load_plugins(entry_points=False)


def probe(**env: str) -> dict:
    """The probe's digests in a fresh process with ``env`` added (and FEDSIM_NO_NUMBA only if given)."""
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "FEDSIM_NO_NUMBA")}
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    res = subprocess.run([sys.executable, str(PROBE)], env=full, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"probe with {env} failed:\n{res.stderr[-4000:]}"
    return json.loads(res.stdout)


def protocol_of(run: str) -> str:
    """The protocol a probe run name is about ("fedrec/faults", "audit/fpl"; "trace" holds one
    entry per protocol)."""
    head, _, rest = run.partition("/")
    return rest if head == "audit" else head


def differences(a: dict, b: dict, parts=None) -> list[str]:
    out = []
    for run in sorted(set(a) | set(b)):
        if run not in a or run not in b:
            out.append(f"{run}: only in one")
            continue
        for part in sorted(set(a[run]) | set(b[run])):
            if run == "trace":
                if parts is not None and part in NOT_BIT_IDENTICAL:
                    continue
            elif parts is not None and protocol_of(run) in NOT_BIT_IDENTICAL and part not in parts:
                continue
            if a[run].get(part) != b[run].get(part):
                out.append(f"{run}: {part}")
    return out


@pytest.fixture(scope="module")
def by_hash_seed() -> dict[str, dict]:
    return {h: probe(PYTHONHASHSEED=h) for h in HASH_SEEDS}


def test_the_probe_covers_every_protocol_and_its_variants_bite(by_hash_seed):
    got = by_hash_seed[HASH_SEEDS[0]]
    for name in REGISTRY:
        assert {f"{name}/wan", f"{name}/faults", f"{name}/lossy-fair"} <= set(got), name
        assert name in got["trace"]
        f = got[f"{name}/faults"]["facts"]
        assert f["lost"] > 0 and f["missing"] > 0 and f["offline"] > 0, (name, f)
        f = got[f"{name}/lossy-fair"]["facts"]
        assert f["lost"] > 0 and f["missing"] > 0, (name, f)
    facts = {run: v["facts"] for run, v in got.items() if "facts" in v}
    for run in ("fedrec/secagg-faults", "fpl/secagg-faults"):
        assert {"keys", "peers", "masked"} <= set(facts[run]["kinds"]) and facts[run]["lost"] > 0, run
    for run in ("fedrecpp/secure-noise-faults", "fedrecpp/secure-noise-trace-tap"):
        assert {"keys", "noise", "denoised"} <= set(facts[run]["kinds"]) and facts[run]["anonymous"] > 0, run
    # the denoisers gather(count=) the anonymous noise; with loss, some groups are left out
    assert "denoised" in facts["fedrecpp/eta2-faults"]["kinds"] and facts["fedrecpp/eta2-faults"]["missing"] > 0
    assert facts["fedrec/server-loss"]["lost"] > 0
    for run in ("fedrec/eval-loss", "fpl/eval-loss", "personalfr/eval-loss", "fedavg-ae/eval-loss"):
        assert facts[run]["metrics"] > 0 and facts[run]["lost"] > 0, run
    assert facts["fedrecpp/secure-noise-trace-tap"]["trace"] > 0 and "tap" in got["fedrecpp/secure-noise-trace-tap"]
    assert facts["fpl/trace-tap"]["trace"] > 0 and "tap" in got["fpl/trace-tap"]
    assert {"audit/fedrec", "audit/fedrecpp", "audit/fpl", "audit/fcf", "audit/personalfr"} <= set(got)
    assert {"fpl_sign", "fpl_never_negative", "imia", "size_only"} <= set(got["audit/fpl"])


@pytest.mark.parametrize("other", HASH_SEEDS[1:])
def test_the_same_bytes_whatever_the_string_hash_seed(by_hash_seed, other):
    assert differences(by_hash_seed[HASH_SEEDS[0]], by_hash_seed[other]) == []


@pytest.mark.skipif(jit_disabled() is not None, reason=f"numba not in use here: {jit_disabled()}")
def test_numba_and_the_python_kernels_give_the_same_bytes_where_promised(by_hash_seed):
    python = probe(PYTHONHASHSEED="1", FEDSIM_NO_NUMBA="1")
    numba = by_hash_seed[HASH_SEEDS[0]]
    assert differences(numba, python, parts=WITHOUT_FLOATS) == []
    # the exemption is needed, i.e. the test does compare two backends: the autoencoders' last bits move
    loose = differences(numba, python)
    assert loose and {protocol_of(d.split(":")[0]) for d in loose} == NOT_BIT_IDENTICAL
