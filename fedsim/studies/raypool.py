"""Independent tasks (grid points) as Ray tasks: the ``ray`` backend of ``fedsim sweep``.

Ray is an optional extra (``pip install 'fedsim-rec[ray]'``); nothing here imports it before a
:class:`RaySession` starts. A session either starts a local Ray instance (``address=None``:
``ray.init(address="local")`` with ``cpus`` CPUs, no dashboard; it is shut down, every process it
started included, when the session ends) or connects to an existing cluster (``address``: what
``ray.init`` takes, ``HOST:PORT`` of a head node, ``ray://HOST:10001`` or ``auto``; the session
only disconnects). A Ray that the caller initialised already is used as it is and left running.

On a cluster the workers import the driver's fedsim, not whatever is installed there: the session
stages a copy of the driver's ``fedsim`` package (stamped with its git revision, as a built
package is) and hands it to Ray as a ``py_modules`` runtime environment, which Ray uploads once
and puts first on every worker's path. The cluster's Python must be the driver's minor version
(Ray requires it) and have fedsim's dependencies (numpy, msgpack, tqdm; matplotlib for plots).

:func:`ray_map` runs ``fn`` on each task as a Ray task of one CPU and hands each result to the
driver as it arrives. Ctrl-C (KeyboardInterrupt in the driver) cancels every task: queued ones
at once, running ones first by Ray's KeyboardInterrupt in the task (``ray.cancel``), then, after
:data:`STOP_GRACE` seconds, by killing their worker processes (``force=True``); a second Ctrl-C
meanwhile cuts the wait short, once every task has been told.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..experiment import UsageError
from ..signals import sigint_deferred

__all__ = ["ADDRESS_FORMS", "CPU_WAIT", "CPU_WAIT_VAR", "RAY_MISSING", "RaySession", "STOP_GRACE", "address_error",
           "address_problem", "cpu_wait_from_env", "import_ray", "ray_available", "ray_map"]

RAY_MISSING = ("--backend ray needs Ray, which is not installed: pip install 'fedsim-rec[ray]' "
               "(or pip install ray)")
STOP_GRACE = 3.0  # seconds running tasks get to leave after ray.cancel before their workers are killed
POLL = 0.25  # seconds between looks at the running tasks (so Ctrl-C is seen promptly)


ADDRESS_FORMS = ("HOST:PORT (a cluster's head node, port 6379 unless it was started with another), "
                 "ray://HOST:PORT (Ray Client, port 10001 by default) or auto")


def address_problem(address: str) -> str | None:
    """What is wrong with ``address`` as the address of a Ray cluster (the reason, naming the
    forms :data:`ADDRESS_FORMS` expected), or None for ``auto``, ``HOST:PORT`` (``[IPv6]:PORT``)
    and ``ray://HOST[:PORT]``. Checked before Ray is imported: Ray's own messages for a web
    address, a missing or bad port or an empty one ("Invalid address format", "Name or service
    not known", a port of another host) did not say what it wanted, and an empty address was
    reported as "a local Ray instance"."""
    a = address.strip() if isinstance(address, str) else address
    if not isinstance(a, str) or not a:
        return f"expected {ADDRESS_FORMS} (or no --address for a local Ray instance)"
    if a == "auto":
        return None
    if a == "local":
        return "a local Ray instance is what no --address starts; give a cluster's address: " + ADDRESS_FORMS
    scheme, sep, rest = a.partition("://")
    if sep and scheme != "ray":
        what = " (a web address: the Ray dashboard's, port 8265, is not where tasks are sent)" \
            if scheme.lower() in ("http", "https") else ""
        return f"{scheme}:// is not a Ray address{what}; expected {ADDRESS_FORMS}"
    client = bool(sep)
    hostport = rest if client else a
    if "/" in hostport or any(c.isspace() for c in hostport):
        return f"not a host and port; expected {ADDRESS_FORMS}"
    if hostport.startswith("["):  # [IPv6]:PORT
        host, close, tail = hostport[1:].partition("]")
        has_port, port = tail.startswith(":"), tail[1:]
        if not close or (tail and not has_port):
            return f"not a host and port; expected {ADDRESS_FORMS}"
    else:
        host, colon, port = hostport.rpartition(":")
        has_port = bool(colon)
        if not has_port:
            host = hostport
        elif ":" in host:
            return f"an IPv6 address takes brackets ([ADDRESS]:PORT); expected {ADDRESS_FORMS}"
    if not host:
        return f"no host; expected {ADDRESS_FORMS}"
    if not has_port:
        return None if client else f"no port; expected {ADDRESS_FORMS}"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"the port {port!r} is not a number from 1 to 65535; expected {ADDRESS_FORMS}"
    return None


def address_error(address: str, where: str = "--address") -> UsageError | None:
    """The error for a malformed ``address`` (see :func:`address_problem`), naming it as
    ``where`` (the option, or a config file's key), or None."""
    problem = address_problem(address)
    if problem is None:
        return None
    shown = f"{where} {address}" if isinstance(address, str) and address.strip() else f"{where} is empty"
    return UsageError(f"{shown}: {problem}")


def ray_available() -> bool:
    """Whether Ray is installed (found on the path; without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # an import hook that refuses it; a "ray" module without a spec
        return False


def import_ray(local: bool = False) -> Any:
    """``import ray``, or ``UsageError``: Ray not installed (:data:`RAY_MISSING`), or installed
    but failing as it imports (a shared library or a dependency missing, another protobuf): that
    error came out as a traceback. ``local``: for a local instance (see below)."""
    if local and "ray" not in sys.modules:
        # A local instance serves this machine only: this makes Ray bind it to the loopback
        # interface instead of every interface (read when ray is imported, and by the
        # processes it starts; connecting to a cluster later from this process would then
        # announce a loopback address, so a cluster sweep wants a process of its own)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name == "ray":
            raise UsageError(RAY_MISSING) from None
        why = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    else:
        return ray
    raise UsageError(f"--backend ray: Ray is installed but does not import ({why}); reinstall it: "
                     "pip install 'fedsim-rec[ray]' (or pip install ray)")


class RaySession:
    """A connection to Ray for the duration of a ``with`` block (see the module docstring).

    ``cpus``: the CPUs of a local instance (default one per core; ignored with ``address``).
    ``log_to_driver``: forward the workers' stdout and stderr to this process. Entering blocks
    until Ray is up (a local instance takes seconds to start: ``startup_s`` says how many) and
    raises ``UsageError`` when Ray is not installed or the address cannot be reached (a malformed
    ``address``, see :func:`address_problem`, is refused at construction) or when the cluster
    has no CPU (``cluster_resources``: a head started with ``--num-cpus=0`` and no other node;
    Ray kept every task pending, for ever): at once for a local instance or a Ray initialised
    already, after ``cpu_wait`` seconds (default ``$FEDSIM_RAY_CPU_WAIT`` or :data:`CPU_WAIT`;
    0: at once) for a cluster (``address``), which may get a node with CPUs meanwhile (an
    autoscaling one is asked for one; ``say(text)``, if given, tells the user of the wait); leaving
    shuts down what the session started (``shutdown_s``) or disconnects. SIGTERM keeps the
    handler it had while Ray starts (Ray's own are kept out: :class:`_sigterm_kept`), an
    ignored one stays ignored; a local instance's daemons get a process group of their own
    (:class:`_daemons_apart`), so a SIGTERM to this process's group reaches this process alone.
    """

    def __init__(self, address: str | None = None, *, cpus: int | None = None, log_to_driver: bool = False,
                 cpu_wait: float | None = None, say: Callable[[str], None] | None = None) -> None:
        if address is not None:
            error = address_error(address)
            if error:
                raise error
            address = address.strip()
        self.cpu_wait = cpu_wait_from_env() if cpu_wait is None else float(cpu_wait)
        self.say = say
        self.address = address
        self.cpus = cpus
        self.log_to_driver = log_to_driver
        self.startup_s = 0.0
        self.shutdown_s = 0.0
        self.owned = False  # whether leaving shuts Ray down (we started or connected it)
        self.cluster_cpus: float | None = None

    def __enter__(self) -> "RaySession":
        if not ray_available():
            raise UsageError(RAY_MISSING)
        ray = import_ray(local=self.address is None)

        t0 = time.perf_counter()
        if not ray.is_initialized():
            # a sweep runs offline: Ray would otherwise try to send usage statistics to its servers
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            kw: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR,
                                  "log_to_driver": self.log_to_driver}
            target = self.address
            if self.address is not None:
                target = _ray_target(self.address)
                _check_reachable(target, given=self.address)
                _check_token(target, given=self.address)
            staged = None
            # ray.init puts its own SIGTERM handlers in place of the process's (sys.exit(15) in
            # Python, under a C++ one that prints a stack and aborts): a SIGTERM to a sweep's
            # driver then wrote its sweep.json "finished" over points not run, ended it with
            # status 134, and left Ray's agents running. The handler in place before is kept
            # while Ray starts (see _sigterm_kept) and put back after.
            term = _sigterm_handler()
            try:
                with _sigterm_kept(term), _daemons_apart():
                    if self.address is None:
                        ray.init(address="local", num_cpus=self.cpus or max(1, os.cpu_count() or 1), **kw)
                    else:
                        staged = stage_package()
                        ray.init(address=target, runtime_env={"py_modules": [str(staged / "fedsim")]}, **kw)
            except Exception as exc:  # whatever stopped Ray from starting or connecting: say what
                _quiet_shutdown()
                where = f"--address {self.address}" if self.address else "a local Ray instance"
                raise UsageError(f"{where}: Ray did not start ({type(exc).__name__}: {exc})") from None
            except SystemExit as exc:
                # a SIGTERM while ray.init ran met Ray's handler, sys.exit(15) (where it was not
                # kept out: SIGTERM's default action, a Ray without set_sigterm_handler): the
                # sweep ended with status 15 and not a word; it goes to the handler it was meant
                # for (SIG_DFL: the process ends as SIGTERM ends it, Ray stopped first)
                _quiet_shutdown()
                _restore_sigterm(term)
                if exc.code == signal.SIGTERM and term is not None:
                    if callable(term):
                        term(signal.SIGTERM, None)
                    elif term == signal.SIG_DFL:
                        os.kill(os.getpid(), signal.SIGTERM)
                raise
            except BaseException:  # Ctrl-C while Ray starts: leave nothing running
                _quiet_shutdown()
                raise
            finally:
                _restore_sigterm(term)
                if staged is not None:
                    shutil.rmtree(staged, ignore_errors=True)
            self.owned = True
        self.startup_s = time.perf_counter() - t0
        try:
            self.cluster_cpus = float(ray.cluster_resources().get("CPU", 0.0))
        except Exception:  # informative only
            self.cluster_cpus = None
        waited = None
        if self.cluster_cpus is not None and self.cluster_cpus < 1 and self.owned and self.address is not None \
                and self.cpu_wait > 0:
            # a cluster that may yet get CPUs (an autoscaling one, whose head has none, adds a worker
            # node when asked): it was refused at once, as a head that never would
            try:
                self.cluster_cpus = _wait_for_cpus(ray, self.cpu_wait, self.say, self.address)
            except BaseException:  # Ctrl-C meanwhile: leave nothing running
                _quiet_shutdown()
                self.owned = False
                raise
            waited = self.cpu_wait
        if self.cluster_cpus is not None and self.cluster_cpus < 1:
            # each task asks for one CPU: Ray kept every one pending, and the sweep waited for ever
            where = ("the Ray already initialised in this process" if not self.owned
                     else f"--address {self.address}: the Ray cluster there" if self.address
                     else "the local Ray instance")
            if self.owned:
                _quiet_shutdown()
                self.owned = False
            if waited is not None:
                raise UsageError(
                    f"{where} has had {self.cluster_cpus:g} CPUs for {waited:g} s (Ray's cluster_resources()), and "
                    "each point runs as a Ray task of one CPU: none could start. Give it a node with CPUs (ray "
                    f"start --address HEAD --num-cpus N); for an autoscaling cluster that takes longer to add one, "
                    f"{CPU_WAIT_VAR}=SECONDS waits longer")
            raise UsageError(f"{where} has {self.cluster_cpus:g} CPUs (Ray's cluster_resources()), and each point "
                             "runs as a Ray task of one CPU: none could start. Give it a node with CPUs (ray start "
                             "--address HEAD --num-cpus N; an autoscaling cluster: a worker with CPUs kept up)")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.owned:
            t0 = time.perf_counter()
            _quiet_shutdown()
            self.shutdown_s = time.perf_counter() - t0

    def describe(self) -> str:
        where = f"cluster at {self.address}" if self.address else "local instance"
        if not self.owned:
            where = "an already initialised Ray"
        cpus = f", {self.cluster_cpus:g} CPUs" if self.cluster_cpus else ""
        return f"Ray {where}{cpus}, up in {self.startup_s:.1f} s"


CONNECT_TIMEOUT = 10.0  # seconds to reach a cluster's address before giving up
CPU_WAIT = 300.0  # seconds a cluster of no CPU (--address) gets for a node with CPUs to join
CPU_WAIT_VAR = "FEDSIM_RAY_CPU_WAIT"  # the environment variable that sets it


def cpu_wait_from_env() -> float:
    """The seconds a :class:`RaySession` on a cluster without CPUs waits for some to join:
    ``$FEDSIM_RAY_CPU_WAIT`` (0: refuse at once), default :data:`CPU_WAIT`; ``UsageError`` for a
    value that is not a number of seconds of 0 or more."""
    text = os.environ.get(CPU_WAIT_VAR, "").strip()
    if not text:
        return CPU_WAIT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value != float("inf")):
        raise UsageError(f"${CPU_WAIT_VAR}={text}: expected the seconds a Ray cluster without CPUs gets for a node "
                         f"with CPUs to join (a number, 0 or more; 0 refuses such a cluster at once; default "
                         f"{CPU_WAIT:g})")
    return value


def _wait_for_cpus(ray: Any, wait: float, say: Callable[[str], None] | None, address: str) -> float:
    """Wait up to ``wait`` seconds for the cluster to have a CPU (``cluster_resources()``), asking
    an autoscaler for a node of one CPU meanwhile (``ray.autoscaler.sdk.request_resources``: an
    autoscaler adds nodes for the demand it sees, and no task is pending yet; the request is
    withdrawn after: the tasks are then the demand); ``say`` tells the user. Returns the CPUs
    there are at the end (0 if none came)."""
    if say:
        say(f"the Ray cluster at {address} has no CPU (a head without CPUs, no worker node yet): waiting up to "
            f"{wait:g} s for a node with CPUs to join ({CPU_WAIT_VAR} sets how long) ...")
    try:
        from ray.autoscaler.sdk import request_resources
    except ImportError:  # another Ray's internals: no request, only the wait
        request_resources = None
    asked = False
    if request_resources is not None:
        try:
            request_resources(bundles=[{"CPU": 1}])
            asked = True
        except Exception:  # no autoscaler to ask: the wait alone
            pass
    deadline = time.monotonic() + wait
    cpus = 0.0
    try:
        while True:
            try:
                cpus = float(ray.cluster_resources().get("CPU", 0.0))
            except Exception:  # a passing failure to read them: look again
                cpus = 0.0
            left = deadline - time.monotonic()
            if cpus >= 1 or left <= 0:
                return cpus
            time.sleep(min(POLL * 2, left))
    finally:
        if asked:
            try:
                request_resources(bundles=[])
            except Exception:
                pass


def _ray_target(address: str) -> str:
    """The ``HOST:PORT`` Ray connects to for ``address``: for ``auto``, ``RAY_ADDRESS``, a Ray
    running on this machine, or the last cluster started here, recorded in Ray's temporary
    folder (a killed one's address stays there, and Ray then retried it for minutes); raises
    ``UsageError`` when Ray finds none. For a loopback host (``127.0.0.1``, ``localhost``), the
    address Ray puts in its place (this machine's address, where a cluster started here
    listens): checked at the loopback address, something listening there alone (a Redis on Ray's
    port 6379) passed the check, and Ray then retried the other address for over ten minutes.
    Ray Client addresses (``ray://``) are returned as they are."""
    if address.startswith("ray://"):
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray's internals: leave the address to ray.init
        return address
    try:
        return canonicalize_bootstrap_address(address) or address
    except ConnectionError as exc:
        raise UsageError(f"--address {address}: {exc}") from None
    except Exception:  # an address Ray will refuse itself, with its own message
        return address


# the start of an HTTP/2 connection (RFC 9113, 3.4): the client's preface and an empty SETTINGS
# frame; a gRPC server (Ray's GCS, its client server) answers with a SETTINGS frame of its own
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4  # the frame type of SETTINGS


def _check_reachable(address: str, given: str | None = None) -> None:
    """Raise ``UsageError`` unless a gRPC server answers at ``address`` (``HOST:PORT`` or
    ``ray://HOST:PORT``; ``given``: what the user wrote, when Ray connects to ``address`` for
    it) within CONNECT_TIMEOUT: it accepts a TCP connection and answers the start of an HTTP/2
    connection as gRPC does. Ray itself keeps retrying an address where nothing listens for
    minutes, and waited forever on one where something else listens (a web server, an idle
    port forward). Other forms are left to Ray."""
    import socket
    import time

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    where = "there" if given in (None, address) else f"at {address}, the address Ray found for it"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT) as conn:
            # one bound for the whole answer: a timeout per read let a peer that sends a byte now
            # and then hold the check for nine times CONNECT_TIMEOUT
            end = time.monotonic() + CONNECT_TIMEOUT
            head, closed, late = b"", False, False
            try:
                conn.settimeout(CONNECT_TIMEOUT)
                conn.sendall(HTTP2_PREFACE)
                while len(head) < 9:  # a frame's header: length (3 bytes), type, flags, stream
                    left = end - time.monotonic()
                    if left <= 0:
                        late = True
                        break
                    conn.settimeout(left)
                    got = conn.recv(9 - len(head))
                    if not got:
                        closed = True
                        break
                    head += got
            except socket.timeout:
                late = True
            except OSError:  # the connection reset
                closed = True
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.gaierror):  # "Name or service not known" alone did not say of what
            why = f"the host {host} is not known: {why}"
        raise UsageError(f"--address {given or address}: no Ray cluster answers {where} ({why})") from None
    if len(head) < 9 or head[3] != HTTP2_SETTINGS:
        said = ("answered in another protocol" if len(head) >= 9 or (head and closed)
                else f"did not finish its answer within {CONNECT_TIMEOUT:g} s" if head and late
                else "closed the connection" if closed else f"did not answer within {CONNECT_TIMEOUT:g} s")
        raise UsageError(f"--address {given or address}: something listens {where} but it is not a Ray cluster (it "
                         f"{said}, not as Ray's gRPC server does)") from None


AUTH_HELP = ("give this process the cluster's token as for Ray: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=TOKEN "
             "(or the token in a file: RAY_AUTH_TOKEN_PATH=FILE, or ~/.ray/auth_token)")


def _check_token(address: str, given: str | None = None) -> None:
    """Raise ``UsageError`` when the Ray head at ``address`` (``HOST:PORT``, one that answers:
    :func:`_check_reachable`; ``given``: what the user wrote) refuses this process's
    authentication token (Ray's token authentication: none, or another). ``ray.init`` retried
    such a head for 20 s, printing one warning line a try on stderr from Ray's C++ client (not
    Python logging: ``logging_level`` does not reach it), then failed with "Failed to connect to
    Ray cluster", which did not say why. One connection of Ray's GCS client tells in about a
    second; what it prints meanwhile is held, and written to stderr unless it is the refusal this
    error says. Ray Client addresses (``ray://``) and a Ray without that client are left to
    ``ray.init``, as is any other failure."""
    if address.startswith("ray://"):
        return
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray's internals
        return
    refused = None
    with _stderr_held() as held:
        try:
            GcsClient(address=address)
        except AuthenticationError as exc:
            refused = str(exc).split(". ")[0]  # "RPC error: InvalidAuthToken: Authentication token is missing or incorrect"
        except Exception:  # left to ray.init, which says what
            pass
    if refused is not None:
        where = "there" if given in (None, address) else f"at {address}, the address Ray found for it,"
        raise UsageError(f"--address {given or address}: the Ray cluster {where} refuses this process's "
                         f"authentication token ({refused}): {AUTH_HELP}") from None
    if held.text:
        sys.stderr.write(held.text)


class _Held:
    text = ""


class _stderr_held:
    """File descriptor 2 (what C++ code writes too, not only ``sys.stderr``) into a temporary
    file for the ``with`` block; its text in ``text`` afterwards. Only around work that starts
    no process (a child would keep the file as its stderr)."""

    def __enter__(self) -> _Held:
        sys.stderr.flush()
        self.held = _Held()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self.held

    def __exit__(self, *exc: Any) -> None:
        try:
            sys.stderr.flush()
        finally:
            os.dup2(self.saved, 2)
            os.close(self.saved)
        self.file.seek(0)
        self.held.text = self.file.read().decode(errors="replace")
        self.file.close()


def _sigterm_handler() -> Any:
    """SIGTERM's handler now, to put back with :func:`_restore_sigterm` (None outside the main
    thread, where no handler can be set, or for one set outside Python, which cannot be)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGTERM)


def _restore_sigterm(handler: Any) -> None:
    if handler is not None:
        signal.signal(signal.SIGTERM, handler)


_ABSENT = object()  # an attribute _sigterm_kept set where the module had none


def _ignore_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM ignored, as a Python handler (see :func:`_sigterm_kept`)."""


class _sigterm_kept:
    """Ray's SIGTERM handlers kept out of this process while ``ray.init`` runs in the ``with``
    block, when SIGTERM's handler ``term`` (:func:`_sigterm_handler`) is a Python one or
    ``SIG_IGN``; the caller puts ``term`` back after the block (:func:`_restore_sigterm`).

    ``ray.init`` sets ``sys.exit(15)`` as SIGTERM's handler as it begins, and the core worker it
    creates sets a C++ one (Ray's failure-signal handler, for SIGSEGV, SIGABRT and others too),
    which writes "*** SIGTERM received" and a stack on stderr before calling the handler before
    it. A SIGTERM while Ray started, or just after ``ray.init`` returned and before ``term`` was
    back, then ended a sweep with status 15 and not a word, or with that stack on stderr; a
    sweep started with SIGTERM ignored (``nohup``-like launchers, batch systems) was ended by
    one. Here Ray's ``set_sigterm_handler`` does nothing and the driver's core worker sets no
    failure-signal handler (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``: a crash in Ray's C++ code
    in the driver then ends it without Ray's stack; Ray's workers keep theirs), so a SIGTERM
    meets ``term`` throughout: the command line's stops the sweep as Ctrl-C does. An ignored
    SIGTERM is ignored by a Python handler meanwhile, not ``SIG_IGN``, which Ray's processes
    started meanwhile would inherit (an ignored signal stays ignored across ``exec``) and which
    would then outlive ``ray.shutdown``'s SIGTERM. A Ray without these (another version's
    internals), SIGTERM's default action, a handler set outside Python and threads other than
    the main one are left as they were."""

    def __init__(self, term: Any) -> None:
        self.term = term
        self.undo: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> None:
        if not (callable(self.term) or self.term == signal.SIG_IGN):
            return
        try:
            import ray._private.ray_constants as ray_constants
            import ray._private.utils as ray_utils
        except ImportError:
            return
        if not hasattr(ray_utils, "set_sigterm_handler"):
            return
        for obj, name, value in ((ray_utils, "set_sigterm_handler", _keep_sigterm),
                                 (ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", True)):
            self.undo.append((obj, name, getattr(obj, name, _ABSENT)))
            setattr(obj, name, value)
        if self.term == signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _ignore_sigterm)

    def __exit__(self, *exc: Any) -> None:
        for obj, name, value in reversed(self.undo):
            if value is _ABSENT:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
        self.undo.clear()


class _daemons_apart:
    """The processes ``ray.init`` starts in the ``with`` block (a local instance's GCS, raylet, log
    monitor, dashboard: through Ray's ``services.ConsolePopen``) in a session, so a process group,
    of their own: they were in the driver's, and a SIGTERM to that group (a batch system's or a
    service manager's stop, ``kill -- -PGID``) reached them as Ray started. The raylet or the GCS
    then left while the driver's core worker connected to them, and Ray's C++ code ended the driver
    with status 1 and its own lines ("Failed to register worker to Raylet", or a minute of "Failed
    to connect to GCS"), without fedsim's message. Apart, they are stopped by the driver, which
    handles the SIGTERM as Ctrl-C (``ray.shutdown``); they still end with it if it dies (Ray's
    kernel fate-sharing, ``PR_SET_PDEATHSIG``). (Ray already blocks SIGINT in them: a terminal's
    Ctrl-C.) A Ray without ``ConsolePopen`` (another version's internals) is left as it is."""

    def __enter__(self) -> None:
        self.services = None
        if sys.platform == "win32":
            return
        try:
            import ray._private.services as services
        except ImportError:
            return
        popen = getattr(services, "ConsolePopen", None)
        if not (isinstance(popen, type) and issubclass(popen, subprocess.Popen)):
            return

        class ApartPopen(popen):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.setdefault("start_new_session", True)
                super().__init__(*args, **kwargs)

        self.services, self.popen = services, popen
        services.ConsolePopen = ApartPopen

    def __exit__(self, *exc: Any) -> None:
        if self.services is not None:
            self.services.ConsolePopen = self.popen


def _keep_sigterm(handler: Any) -> None:
    """Ray's ``set_sigterm_handler`` while :class:`_sigterm_kept` holds: SIGTERM keeps its handler."""


def _quiet_shutdown() -> None:
    import ray

    try:
        ray.shutdown()
    except Exception:  # nothing more to stop
        pass


def stage_package() -> Path:
    """A temporary folder holding a copy of this fedsim package (without caches, symbolic links
    resolved) with its git revision stamped in ``_revision.txt``, so results run from the copy
    name the same revision. The caller removes it."""
    import fedsim
    from ..experiment.report import REVISION_FILE, git_revision

    src = Path(fedsim.__file__).resolve().parent
    root = Path(tempfile.mkdtemp(prefix="fedsim-ray-stage-"))
    dst = root / "fedsim"
    try:
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))
        rev = git_revision()
        if rev:
            (dst / REVISION_FILE).write_text(rev + "\n", encoding="utf-8")
    except BaseException:  # (a Ctrl-C, a full disk: the caller has no folder to remove yet)
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def ray_map(fn: Callable[[Any], Any], tasks: Sequence[Any], *, limit: int | None = None,
            on_done: Callable[[int, Any], None] | None = None,
            on_error: Callable[[int, BaseException], None] | None = None) -> None:
    """Run ``fn(task)`` for each task as a Ray task of one CPU, inside a :class:`RaySession`.

    ``fn`` must be a module-level function the workers can import, tasks and results
    picklable. ``limit``: at most that many tasks submitted at once (default all: Ray runs as
    many as there are CPUs). As each task finishes, in the driver: ``on_done(i, result)``, or
    ``on_error(i, exc)`` when Ray could not run it (its worker or node died, its runtime
    environment failed, ``fn`` raised); a task whose worker dies is retried once by Ray first.
    A failing task does not stop the others.

    Blocks until every task has finished. KeyboardInterrupt (Ctrl-C) cancels every task (see the
    module docstring), waits for them to go, and is raised again; the tasks finished before it
    have had their callback."""
    import ray
    from ray.exceptions import RayError

    remote = ray.remote(num_cpus=1, max_retries=1)(fn)
    todo = list(range(len(tasks)))[::-1]  # popped from the end: task order
    running: dict[Any, int] = {}
    cap = len(tasks) if not limit else max(1, int(limit))
    try:
        while todo or running:
            while todo and len(running) < cap:
                i = todo.pop()
                running[remote.remote(tasks[i])] = i
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL)
            for ref in ready:
                i = running.pop(ref)
                try:
                    res = ray.get(ref)
                except RayError as exc:
                    if on_error:
                        on_error(i, exc)
                    continue
                if on_done:
                    on_done(i, res)
    except BaseException:
        _cancel(list(running))
        raise


def _cancel(refs: list) -> None:
    """Cancel ``refs``: Ray's KeyboardInterrupt in running tasks, then after STOP_GRACE seconds
    kill the workers of those still running; returns when all have ended (or after another
    STOP_GRACE: Ray itself may be going down with the same Ctrl-C). A second Ctrl-C (or SIGTERM)
    meanwhile is raised once every task has been told (one ``ray.cancel`` each), and cuts the
    wait short."""
    import ray

    for force in (False, True):
        # (raised in the middle, it left the tasks after that one uncancelled: on a cluster they
        # ran on until Ray killed them as the driver went, their temporary folders left there)
        with sigint_deferred():
            for ref in refs:
                try:
                    ray.cancel(ref, force=force)
                except Exception:  # finished meanwhile, or Ray is already down
                    pass
        deadline = time.monotonic() + STOP_GRACE
        while refs and time.monotonic() < deadline:
            try:
                _, refs = ray.wait(refs, num_returns=len(refs), timeout=POLL)
            except Exception:
                return
        if not refs:
            return
