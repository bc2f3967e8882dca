"""Optional numba compilation of kernel modules written in numba's subset of Python.

A kernel module (``fedsim.math._sgd_numba``, ``fedsim.math.fpl_kernels``) is plain Python when
imported normally: that copy is the pure-Python fallback. :func:`compiled_copy` loads a *second*
copy of the same file under another module name and replaces each named kernel in it by its
``numba.njit`` version, so compiled kernels call compiled kernels and Python ones call Python ones.
Both run the same operations in the same order (no fast-math: no re-association, no fused
multiply-add), which is what makes their results bit-identical.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["compiled_copy", "jit_disabled", "warm_up"]

_SUFFIX = "__jit"
_cache: dict[str, ModuleType | str] = {}  # module name -> compiled copy, or why there is none


def jit_disabled() -> str | None:
    """Why numba is not used (``FEDSIM_NO_NUMBA`` set, or numba not importable), or None."""
    if os.environ.get("FEDSIM_NO_NUMBA"):
        return "disabled by FEDSIM_NO_NUMBA"
    try:
        import numba  # noqa: F401
    except ImportError as exc:  # numba is the optional extra ``fast``
        return str(exc)
    return None


def compiled_copy(module_name: str, path: str, kernels: tuple[str, ...],
                  options: dict[str, dict] | None = None) -> ModuleType | str:
    """The compiled copy of the kernel module ``module_name`` (file ``path``), loaded once per
    process; or a string saying why numba cannot be used. Compilation of each kernel happens on
    its first call (``cache=True``: later processes load it from numba's cache). ``options``:
    extra ``numba.njit`` options per kernel name (e.g. ``{"fastmath": {"reassoc"}}`` for a sum
    that may be re-associated: then that kernel's results are not bit-identical to its Python
    copy's, and its module must say so)."""
    got = _cache.get(module_name)
    if got is not None:
        return got
    why = jit_disabled()
    if why is not None:
        _cache[module_name] = why
        return why
    import numba

    name = module_name + _SUFFIX
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    for kname in kernels:
        setattr(mod, kname, numba.njit(cache=True, **(options or {}).get(kname, {}))(getattr(mod, kname)))
    _cache[module_name] = mod
    return mod


_warm = False  # whether warm_up has run in this process (or in the one it was forked from)


def _one(x):
    return x + 1


def warm_up() -> bool:
    """Initialise numba's compiler in this process, when numba is used (else nothing): compile
    and call a one-line function. A process's first compile, whatever it compiles, costs some
    50 MB and a quarter of a second of CPU (LLVM's start); each kernel then loads from numba's
    cache at its first call. A process about to fork workers that will call compiled kernels
    (``TcpNetwork``, through ``Network.before_run``) calls this once for all of them. Returns
    True when it started the compiler now; False when it had run in this process (or in the one
    this one was forked from) or numba is not used (``jit_disabled``). Never raises for want of
    numba."""
    global _warm
    if _warm:
        return False
    _warm = True
    if jit_disabled() is not None:
        return False
    import numba

    numba.njit(_one)(1)
    return True
