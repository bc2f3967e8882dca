"""Faults around `fedsim data get` and the cache: broken connections, corrupted installs, a full
disk, hostile archives, endless responses, two processes at once. Servers are http.server on
127.0.0.1 started here (bounded: every response ends)."""

import errno
import hashlib
import http.server
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from fedsim.data import download, resolve
from fedsim.data.cli import main
import test_data_download as _dl
from test_data_download import U_DATA, cache_files, make_zip

served, fixture_zip = _dl.served, _dl.fixture_zip  # the fixtures of the download tests, shared


def _server(handler_cls):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    return server, t, f"http://127.0.0.1:{server.server_address[1]}/ml-100k.zip"


def _stop(server, t):
    server.shutdown()
    server.server_close()
    t.join(5)


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


# --- interrupted downloads ------------------------------------------------------------------------

def test_ctrl_c_during_the_download_leaves_nothing_and_a_retry_installs(tmp_path, fixture_zip):
    url, sha, _, _ = fixture_zip
    cache = tmp_path / "cache"

    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        download.get("ml-100k", cache_dir=cache, url=url, sha256=sha, progress=interrupt)
    assert cache_files(cache) == []
    path = download.get("ml-100k", cache_dir=cache, url=url, sha256=sha)
    assert (path / "u.data").read_text() == U_DATA


def test_a_chunked_download_cut_off_is_one_error_naming_dataset_and_address(tmp_path, capsys):
    # a chunked response whose connection closes mid-chunk: http.client raises IncompleteRead, an
    # HTTPException (not an OSError), which came out of `fedsim data get` as a traceback
    class Handler(_Quiet):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"1000\r\n" + b"PK\x03\x04" + b"x" * 96)
            self.wfile.flush()
            self.close_connection = True

    server, t, url = _server(Handler)
    try:
        cache = tmp_path / "cache"
        with pytest.raises(ConnectionError) as ei:
            download.get("ml-100k", cache_dir=cache, url=url, sha256="0" * 64)
        # the 100 bytes sent before the cut are counted: reads take what arrives (read1), not a full MiB
        assert str(ei.value) == (f"download of ml-100k from {url} failed after 100 bytes: IncompleteRead(0 bytes read); "
                                 "nothing was installed (run the command again)")
        assert cache_files(cache) == []
        assert main(["get", "ml-100k", "--url", url, "--sha256", "0" * 64, "--cache-dir", str(cache), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == f"error: {ei.value}\n"
        assert cache_files(cache) == []
    finally:
        _stop(server, t)


def test_a_download_that_stalls_is_one_error_naming_dataset_and_address(tmp_path, capsys):
    # a read timing out mid-body said "error: timed out": neither the dataset nor the address
    release = threading.Event()

    class Handler(_Quiet):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "5000")
            self.end_headers()
            self.wfile.write(b"PK\x03\x04" + b"x" * 96)
            self.wfile.flush()
            release.wait(5)

    server, t, url = _server(Handler)
    try:
        cache = tmp_path / "cache"
        with pytest.raises(ConnectionError) as ei:
            download.get("ml-100k", cache_dir=cache, url=url, sha256="0" * 64, timeout=0.3)
        assert str(ei.value) == (f"download of ml-100k from {url} failed after 100 bytes: timed out; "
                                 "nothing was installed (run the command again)")
        assert cache_files(cache) == []
    finally:
        release.set()
        _stop(server, t)


def test_a_trickling_download_is_cut_off_below_the_minimum_rate(tmp_path, monkeypatch, capsys):
    # a byte just inside each read's timeout was never cut off (read(1 MiB) even waited for a
    # full MiB): now every window of RATE_WINDOW seconds must average MIN_RATE bytes a second.
    # Scaled down: a byte every 20 ms (50 bytes/s) against 200 bytes/s over 0.2 s
    monkeypatch.setattr(download, "MIN_RATE", 200)
    monkeypatch.setattr(download, "RATE_WINDOW", 0.2)
    sent, release = [], threading.Event()

    class Handler(_Quiet):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "5000")
            self.end_headers()
            try:
                while not release.is_set() and len(sent) < 5000:
                    sent.append(1)  # (before the write: the client may read the byte before this thread runs on)
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    release.wait(0.02)
            except OSError:  # the client hung up
                pass

    server, t, url = _server(Handler)
    try:
        cache = tmp_path / "cache"
        with pytest.raises(ConnectionError) as ei:
            download.get("ml-100k", cache_dir=cache, url=url, sha256="0" * 64, timeout=5)
        msg = str(ei.value)
        m = re.fullmatch(
            rf"download of ml-100k from {re.escape(url)} is too slow: (\d+) bytes in the last ([\d.]+) s, "
            r"(\d+) bytes in ([\d.]+) s in all \(at least 200 bytes/s over 0.2 s are required\); nothing was "
            r"installed \(run the command again, or install a copy of the zip with --from\)", msg)
        assert m, msg
        window_bytes, window_s, received, seconds = int(m[1]), float(m[2]), int(m[3]), float(m[4])
        # the first window failed: it is the whole download, at least 0.2 s long, below 200 bytes/s
        assert window_bytes == received and window_s == seconds
        assert window_s >= 0.2 - 0.05 and 1 <= received < 200 * (window_s + 0.05)
        assert received <= len(sent) < 5000
        assert cache_files(cache) == []
        # the command line: one error line, status 2
        assert main(["get", "ml-100k", "--url", url, "--sha256", "0" * 64, "--cache-dir", str(cache), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: download of ml-100k from {url} is too slow: ") and err.count("\n") == 1
        assert cache_files(cache) == []
    finally:
        release.set()
        _stop(server, t)


def test_a_slow_steady_download_spanning_several_windows_installs(tmp_path, fixture_zip, monkeypatch):
    # the bound is a rate, not a deadline: a link above it finishes however long it takes
    _, sha, zpath, _ = fixture_zip
    data = zpath.read_bytes()
    monkeypatch.setattr(download, "MIN_RATE", 200)
    monkeypatch.setattr(download, "RATE_WINDOW", 0.1)
    # 5 pieces of ~58 bytes, 0.07 s apart: a window with one piece in it stays above the rate for
    # 0.29 s, a late server thread on a loaded machine (10 pieces of 29 bytes 0.03 s apart failed
    # the install when one came 0.145 s after the last window's end)
    pieces, gap = 5, 0.07

    class Handler(_Quiet):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            step = -(-len(data) // pieces)
            for i in range(0, len(data), step):
                self.wfile.write(data[i:i + step])
                self.wfile.flush()
                time.sleep(gap)

    server, t, url = _server(Handler)
    try:
        assert len(data) / (pieces * gap) > 4 * 200  # well above the rate, over about three windows
        # (a window holds two pieces, fewer bytes than MIN_RATE: a check that left out the
        # window's seconds would stop it)
        assert 2 * -(-len(data) // pieces) < 200
        t0 = time.monotonic()
        path = download.get("ml-100k", cache_dir=tmp_path / "cache", url=url, sha256=sha)
        assert time.monotonic() - t0 >= 0.25
        assert (path / "u.data").read_text() == U_DATA
    finally:
        _stop(server, t)


@pytest.mark.parametrize("module, sig, status, line", [
    ("fedsim", "SIGINT", 130, "interrupted: nothing was installed"),
    ("fedsim", "SIGTERM", 143, "terminated (SIGTERM): nothing was installed"),
    ("fedsim.data", "SIGINT", 130, "interrupted: nothing was installed"),
    # `python -m fedsim.data` died at once on SIGTERM, leaving its .part download for a day
    ("fedsim.data", "SIGTERM", 143, "terminated (SIGTERM): nothing was installed"),
])
def test_ctrl_c_or_sigterm_stops_a_download_process_leaving_nothing(tmp_path, module, sig, status, line):
    # `fedsim data get` stopped mid-download said "interrupted: the run's output folder was not
    # written" (a data command writes no run folder); `python -m fedsim.data get` a traceback
    import signal
    import time

    asked, release = threading.Event(), threading.Event()

    class Handler(_Quiet):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "5000")
            self.end_headers()
            self.wfile.write(b"PK\x03\x04" + b"x" * 96)
            self.wfile.flush()
            asked.set()
            release.wait(20)

    server, t, url = _server(Handler)
    try:
        cache = tmp_path / "cache"
        env = dict(os.environ, PYTHONPATH=str(Path(download.__file__).parents[2]))
        cmd = [sys.executable, "-m", module] + (["data"] if module == "fedsim" else [])
        cmd += ["get", "ml-100k", "--url", url, "--sha256", "0" * 64, "--cache-dir", str(cache), "--quiet"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert asked.wait(30)
        deadline = time.monotonic() + 10
        while not list(cache.glob(".ml-100k-*.zip.part")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(cache.glob(".ml-100k-*.zip.part"))  # the download is under way
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
        assert (proc.returncode, out, err.splitlines()) == (status, "", [line])
        assert cache_files(cache) == []
    finally:
        release.set()
        _stop(server, t)


def test_a_file_url_installs_and_the_cache_dir_option_beats_the_environment(tmp_path, fixture_zip, monkeypatch, capsys):
    _, sha, zpath, _ = fixture_zip
    monkeypatch.setenv("FEDSIM_DATA", str(tmp_path / "env"))
    cache = tmp_path / "opt"
    assert main(["get", "ml-100k", "--url", zpath.as_uri(), "--sha256", sha, "--cache-dir", str(cache), "--quiet"]) == 0
    assert capsys.readouterr().out == f"{cache / 'ml-100k'}\n"
    assert (cache / "ml-100k" / "u.data").read_text() == U_DATA and not (tmp_path / "env").exists()
    assert main(["path", "ml-100k"]) == 1  # $FEDSIM_DATA's cache has none


def test_a_truncated_zip_is_one_error_and_leaves_nothing(tmp_path, fixture_zip, capsys):
    _, _, zpath, _ = fixture_zip
    cut = tmp_path / "cut.zip"
    cut.write_bytes(zpath.read_bytes()[:-40])  # the end of the central directory is gone
    cache = tmp_path / "cache"
    assert main(["get", "ml-100k", "--from", str(cut), "--insecure", "--cache-dir", str(cache), "--quiet"]) == 2
    assert capsys.readouterr().err == f"error: {cut} is not a valid zip archive: File is not a zip file\n"
    assert cache_files(cache) == []
    sha = hashlib.sha256(cut.read_bytes()).hexdigest()
    assert main(["get", "ml-100k", "--from", str(cut), "--cache-dir", str(cache), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: checksum mismatch for ml-100k from {cut}: expected sha256 "
                   f"{download.REGISTRY['ml-100k'].sha256}, got {sha} ({cut.stat().st_size:,} bytes); "
                   "nothing was installed\n")
    assert cache_files(cache) == []


# --- endless and oversized responses ---------------------------------------------------------------

def _endless(sent: list, limit: int, length: str | None = None):
    class Handler(_Quiet):
        def do_GET(self):
            self.send_response(200)
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            block = b"\0" * 65536
            try:
                while sent[0] < limit:
                    self.wfile.write(block)
                    sent[0] += len(block)
            except OSError:
                pass
            self.close_connection = True
    return Handler


def test_an_endless_response_is_cut_at_the_pinned_size(tmp_path, monkeypatch):
    # a response without Content-Length that never ends was written to the cache until the disk
    # was full; the pinned archive's size bounds it (here the server stops at 64 MB)
    monkeypatch.setitem(download.REGISTRY, "ml-100k", replace(download.REGISTRY["ml-100k"], size=100_000))
    sent = [0]
    server, t, url = _server(_endless(sent, 64 << 20))
    try:
        cache = tmp_path / "cache"
        with pytest.raises(download.ChecksumError) as ei:
            download.get("ml-100k", cache_dir=cache, url=url)
        assert str(ei.value) == (f"download of ml-100k from {url} is larger than the pinned archive "
                                 f"(100,000 bytes, sha256 {download.REGISTRY['ml-100k'].sha256}): stopped "
                                 "after 100,001 bytes; nothing was installed")
        assert sent[0] < 16 << 20
        assert cache_files(cache) == []
    finally:
        _stop(server, t)


def test_a_content_length_other_than_the_pinned_size_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setitem(download.REGISTRY, "ml-100k", replace(download.REGISTRY["ml-100k"], size=100_000))
    sent = [0]
    server, t, url = _server(_endless(sent, 64 << 20, length=str(10 << 30)))
    try:
        cache = tmp_path / "cache"
        with pytest.raises(download.ChecksumError) as ei:
            download.get("ml-100k", cache_dir=cache, url=url)
        assert str(ei.value) == (f"download of ml-100k from {url} announces 10,737,418,240 bytes, not the pinned "
                                 f"archive's 100,000 (sha256 {download.REGISTRY['ml-100k'].sha256}); nothing was "
                                 "installed")
        assert sent[0] < 16 << 20
        assert cache_files(cache) == []
    finally:
        _stop(server, t)


def test_without_the_pin_an_endless_response_is_still_bounded(tmp_path, monkeypatch):
    # --sha256 (a mirror's other archive) or --insecure: the pinned size does not hold, a bound does
    monkeypatch.setitem(download.REGISTRY, "ml-100k", replace(download.REGISTRY["ml-100k"], size=100_000))
    monkeypatch.setattr(download, "MAX_DOWNLOAD_RATIO", 20)
    sent = [0]
    server, t, url = _server(_endless(sent, 64 << 20))
    try:
        cache = tmp_path / "cache"
        for kw in ({"sha256": "0" * 64}, {"verify": False}):
            sent[0] = 0
            with pytest.raises(ValueError) as ei:
                download.get("ml-100k", cache_dir=cache, url=url, **kw)
            assert str(ei.value) == (f"download of ml-100k from {url} is larger than 20 times the pinned archive's "
                                     "100,000 bytes: stopped after 2,000,001 bytes; nothing was installed")
            assert sent[0] < 16 << 20
            assert cache_files(cache) == []
    finally:
        _stop(server, t)


# --- a full disk, an unwritable cache ---------------------------------------------------------------

class _FullDisk:
    """A file object whose writes fail as on a full disk."""

    def __init__(self, f):
        self._f = f

    def write(self, b):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, k):
        return getattr(self._f, k)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_a_full_disk_while_downloading_is_one_error_naming_the_cache(tmp_path, fixture_zip, monkeypatch, capsys):
    url, sha, _, _ = fixture_zip
    cache = tmp_path / "cache"
    real = os.fdopen
    monkeypatch.setattr(download.os, "fdopen", lambda *a, **k: _FullDisk(real(*a, **k)))
    assert main(["get", "ml-100k", "--url", url, "--sha256", sha, "--cache-dir", str(cache), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err == f"error: cache folder {cache}: No space left on device (writing the download of ml-100k)\n"
    assert cache_files(cache) == []


def test_a_full_disk_while_unpacking_is_one_error_naming_the_cache(tmp_path, fixture_zip, monkeypatch, capsys):
    _, sha, zpath, _ = fixture_zip
    cache = tmp_path / "cache"

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(zipfile.shutil, "copyfileobj", full)  # what ZipFile.extract writes with
    assert main(["get", "ml-100k", "--from", str(zpath), "--sha256", sha, "--cache-dir", str(cache), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: cache folder {cache}: No space left on device (unpacking ml-100k/u.data from {zpath})\n")
    assert cache_files(cache) == []


def test_an_unwritable_cache_folder_is_one_error_naming_it(tmp_path, fixture_zip, monkeypatch, capsys):
    url, sha, _, _ = fixture_zip
    cache = tmp_path / "cache"
    cache.mkdir()

    def denied(*a, dir=None, **k):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(Path(dir) / ".ml-100k-x.zip.part"))

    monkeypatch.setattr(download.tempfile, "mkstemp", denied)
    assert main(["get", "ml-100k", "--url", url, "--sha256", sha, "--cache-dir", str(cache), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"error: {cache / '.ml-100k-x.zip.part'}: Permission denied (cache folder {cache})"]


# --- hostile archives -----------------------------------------------------------------------------

def _zip_with_symlink(path: Path) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ml-100k/u.data", U_DATA)
        info = zipfile.ZipInfo("ml-100k/u.item")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_symlink_member_is_refused(tmp_path):
    zpath = tmp_path / "ml-100k.zip"
    sha = _zip_with_symlink(zpath)
    cache = tmp_path / "cache"
    with pytest.raises(ValueError) as ei:
        download.get("ml-100k", from_file=zpath, cache_dir=cache, sha256=sha)
    assert str(ei.value) == (f"{zpath}: refusing to unpack member 'ml-100k/u.item': it is a symbolic link "
                             "(to '/etc/passwd'), not a file or folder")
    assert cache_files(cache) == []


@pytest.mark.parametrize("member", ["/etc/x", "../x", "ml-100k/../../x", "C:/x"])
def test_member_paths_leaving_the_folder_are_refused(tmp_path, member):
    zpath = tmp_path / "ml-100k.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("ml-100k/u.data", U_DATA)
        zf.writestr(zipfile.ZipInfo(member), "x")
    sha = hashlib.sha256(zpath.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="unsafe member path"):
        download.get("ml-100k", from_file=zpath, cache_dir=cache, sha256=sha)
    assert cache_files(cache) == [] and not (tmp_path / "x").exists()


# --- corrupted installs -----------------------------------------------------------------------------

@pytest.fixture
def pinned_install(monkeypatch, tmp_path, fixture_zip):
    url, sha, zpath, _ = fixture_zip
    monkeypatch.setitem(download.REGISTRY, "ml-100k", replace(download.REGISTRY["ml-100k"], sha256=sha,
                                                              size=zpath.stat().st_size))
    monkeypatch.setenv("FEDSIM_DATA", str(tmp_path / "cache"))
    return download.get("ml-100k", url=url), zpath


@pytest.mark.parametrize("damage", ["truncated", "replaced", "removed"])
def test_a_damaged_install_is_reported_not_loaded_as_a_smaller_dataset(pinned_install, damage, capsys):
    path, zpath = pinned_install
    u = path / "u.data"
    if damage == "truncated":
        u.write_text(U_DATA.splitlines(keepends=True)[0])
        what = f"{u} has {len(U_DATA.splitlines()[0]) + 1} bytes, not the {len(U_DATA)} it was installed with"
    elif damage == "replaced":
        u.write_text(U_DATA.replace("4", "1"))
        what = f"{u} is not the file it was installed with (sha256"
    else:
        u.unlink()
        what = f"{u} is missing"
    with pytest.raises(download.ChecksumError) as ei:
        resolve("ml-100k")
    msg = str(ei.value)
    assert msg.startswith(f"ml-100k in {path} is damaged: {what}")
    assert "fedsim data get ml-100k --force" in msg
    # `get` reports it too (it returned the damaged install as installed), and --force repairs it
    assert main(["get", "ml-100k", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"error: ml-100k in {path} is damaged: {what}")
    assert main(["get", "ml-100k", "--from", str(zpath), "--force", "--quiet"]) == 0
    assert u.read_text() == U_DATA and len(resolve("ml-100k")) == 3


@pytest.mark.parametrize("damage", ["truncated", "removed", "other file"])
def test_list_and_path_say_a_damaged_install_is_damaged(pinned_install, damage, capsys):
    # `data list` said "installed" and `data path` printed the folder of an install whose files
    # were cut short or gone (they only looked for the marker); loading it by name then failed
    path, _ = pinned_install
    victim = path / ("README" if damage == "other file" else "u.data")
    size = victim.stat().st_size
    if damage == "removed":
        victim.unlink()
        what = f"{victim} is missing"
    else:
        victim.write_bytes(victim.read_bytes()[:3])
        what = f"{victim} has 3 bytes, not the {size} it was installed with"
    msg = (f"ml-100k in {path} is damaged: {what}; reinstall it with force=True "
           "(fedsim data get ml-100k --force)")
    assert download.install_damage("ml-100k") == msg
    rows = {d["name"]: d for d in download.list_datasets()}
    assert (rows["ml-100k"]["installed"], rows["ml-100k"]["damaged"]) == (True, msg)
    assert (rows["ml-1m"]["installed"], rows["ml-1m"]["damaged"]) == (False, None)
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["ml-100k", "damaged"] and out[2].split()[:2] == ["ml-1m", "-"]
    assert out[1 + len(download.REGISTRY):] == [msg]
    assert main(["path", "ml-100k"]) == 1
    assert capsys.readouterr() == ("", f"fedsim data: {msg}\n")


def test_list_and_path_check_sizes_and_leave_the_ratings_sha256_to_the_load(pinned_install, capsys):
    # a ratings file changed in place at its size: list and path do not hash the files (a listing
    # would read every install's gigabytes); the load by name, which reads the file anyway, refuses it
    path, _ = pinned_install
    assert download.install_damage("ml-100k") is None
    assert main(["path", "ml-100k"]) == 0 and capsys.readouterr() == (f"{path}\n", "")
    assert main(["list"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["ml-100k", "installed"]
    (path / "u.data").write_text(U_DATA.replace("4", "1"))
    assert download.install_damage("ml-100k") is None
    with pytest.raises(download.ChecksumError, match=" is damaged: .*u.data is not the file it was installed with"):
        resolve("ml-100k")


def test_an_install_whose_marker_records_no_files_is_checked_for_its_ratings_file(pinned_install):
    # installs made before markers recorded their files: the ratings file must be there (a missing
    # one was a FileNotFoundError from the loader naming neither the dataset nor --force)
    path, _ = pinned_install
    marker = json.loads((path / download.MARKER).read_text())
    del marker["files"]
    (path / download.MARKER).write_text(json.dumps(marker))
    assert len(resolve("ml-100k")) == 3
    (path / "u.data").unlink()
    with pytest.raises(download.ChecksumError) as ei:
        resolve("ml-100k")
    assert str(ei.value) == (f"ml-100k in {path} is damaged: {path / 'u.data'} is missing; reinstall it with "
                             "force=True (fedsim data get ml-100k --force)")


def test_an_install_marker_records_every_file_with_its_size_and_sha256(pinned_install):
    path, _ = pinned_install
    files = json.loads((path / download.MARKER).read_text())["files"]
    assert files == {
        "README": {"bytes": 8, "sha256": hashlib.sha256(b"fixture\n").hexdigest()},
        "u.data": {"bytes": len(U_DATA), "sha256": hashlib.sha256(U_DATA.encode()).hexdigest()},
    }


# --- two processes at once ------------------------------------------------------------------------

def test_two_processes_getting_one_dataset_both_end_with_the_verified_install(tmp_path):
    # the server answers once both processes have asked (then sends the zip in 40 pieces, 10 ms
    # apart), so that the two downloads, unpackings and renames overlap
    zpath = tmp_path / "ml-100k.zip"
    sha = make_zip(zpath, {"ml-100k/u.data": U_DATA * 2000, "ml-100k/README": "fixture\n"})
    data = zpath.read_bytes()
    served_to = []
    both = threading.Barrier(2, timeout=30)

    class Handler(_Quiet):
        def do_GET(self):
            served_to.append(self.path)
            both.wait()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            step = len(data) // 40 + 1
            for k in range(0, len(data), step):
                self.wfile.write(data[k:k + step])
                self.wfile.flush()
                threading.Event().wait(0.01)

    server, t, url = _server(Handler)
    try:
        cache = tmp_path / "cache"
        env = dict(os.environ, PYTHONPATH=str(Path(download.__file__).parents[2]))
        cmd = [sys.executable, "-m", "fedsim.data", "get", "ml-100k", "--url", url, "--sha256", sha,
               "--cache-dir", str(cache), "--quiet"]
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        assert [o for o, _ in outs] == [f"{cache / 'ml-100k'}\n"] * 2
        assert cache_files(cache) == ["ml-100k", "ml-100k/.fedsim-install.json", "ml-100k/README", "ml-100k/u.data"]
        assert (cache / "ml-100k" / "u.data").read_text() == U_DATA * 2000
        assert json.loads((cache / "ml-100k" / download.MARKER).read_text())["sha256"] == sha
        assert len(served_to) == 2
    finally:
        _stop(server, t)


@pytest.mark.parametrize("record", [{"sha256": "0" * 64}, 5, {"bytes": "7", "sha256": "0" * 64}, {"bytes": True}])
def test_a_marker_whose_file_record_is_malformed_is_a_damaged_install_not_a_crash(pinned_install, record, capsys):
    # a file record without a whole number of bytes made list, path and the load by name raise
    # TypeError ("unsupported format string passed to NoneType.__format__"), AttributeError or a
    # bare "Cannot specify ',' with 's'.", naming neither the dataset nor the marker
    path, _ = pinned_install
    marker = json.loads((path / download.MARKER).read_text())
    marker["files"]["u.data"] = record
    (path / download.MARKER).write_text(json.dumps(marker))
    msg = (f"ml-100k in {path} is damaged: its marker {path / download.MARKER} records 'u.data' without "
           f"its size and sha256 (got {record!r}); reinstall it with force=True (fedsim data get ml-100k --force)")
    assert download.install_damage("ml-100k") == msg
    with pytest.raises(download.ChecksumError) as ei:
        resolve("ml-100k")
    assert str(ei.value) == msg
    assert main(["list"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == msg
    assert main(["path", "ml-100k"]) == 1
    assert capsys.readouterr() == ("", f"fedsim data: {msg}\n")
