"""Download, verify and install the MovieLens archives into a local cache.

``get("ml-100k")`` fetches the official GroupLens zip, checks its pinned sha256, unpacks it and
returns the dataset folder.  Installation is atomic and idempotent:

1. the archive is streamed into a temporary ``.part`` file inside the cache folder, hashing as
   it goes (or copied from ``from_file``);
2. on a checksum mismatch the temporary file is deleted and :class:`ChecksumError` raised:
   nothing is left in the cache;
3. the zip is unpacked into a temporary folder in the cache (member paths are checked, a zip
   bomb is refused before anything is written: see :func:`_safe_extract`; a corrupt member is a
   ``ValueError`` naming it), the dataset's ratings file must be in the folder to install (``u.data``
   for ml-100k: a zip of another dataset is refused): the archive's only top folder, whatever its
   name, else the archive's root (the first place the loaders look), a marker file ``.fedsim-install.json`` is written, and
   the folder is renamed into place.  Should another ``get`` of the same dataset have installed
   it meanwhile, that install is kept (checked as in 4) and this one discarded;
4. a later call finds the marker and returns at once, without a download.  The marker records
   the sha256 of the archive the files came from, checked or not, and every file installed with
   its size and sha256; a verifying call (the default) returns the install only when that
   recorded sha256 equals the one it expects (the pin or ``sha256=``) and the files are intact
   (all there with their sizes, the ratings file with its sha256: else :class:`ChecksumError`
   "damaged", see :func:`_check_files`).  Otherwise (an install made with ``verify=False`` from another archive,
   or with another ``sha256``, or an unreadable marker) it raises :class:`ChecksumError` naming
   the folder and leaves it alone: the archive is not kept, so the files cannot be re-checked;
   ``force=True`` (``--force``) replaces them with a verified install, ``verify=False``
   (``--insecure``) accepts them as they are.

Cache folder: ``cache_dir`` argument, else ``$FEDSIM_DATA``, else the platform cache
(``$XDG_CACHE_HOME/fedsim`` or ``~/.cache/fedsim`` on Linux, ``~/Library/Caches/fedsim`` on
macOS, ``%LOCALAPPDATA%\\fedsim\\Cache`` on Windows).  Only ``urllib`` is used.

Checksums: ml-100k and ml-1m as given in the project's shared data README; all sha256 values and
sizes match TensorFlow Datasets' published ``url_checksums/movielens.txt`` except ml-10m, whose
sha256 and size are corroborated by several independent public records that also match the MD5
GroupLens publishes (``ml-10m.zip.md5``).  The md5 values are GroupLens's own sidecars.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import lzma
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import urllib.request
import zipfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

__all__ = [
    "REGISTRY",
    "ChecksumError",
    "DatasetSpec",
    "check_installed",
    "cache_dir",
    "dataset_path",
    "default_cache_dir",
    "get",
    "install_damage",
    "is_installed",
    "list_datasets",
]

MARKER = ".fedsim-install.json"
GROUPLENS = "https://files.grouplens.org/datasets/movielens/"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    url: str
    sha256: str | None
    md5: str | None
    size: int | None
    folder: str  # top-level folder inside the official zip (informational: any single top folder is accepted)
    description: str
    ratings: str = "ratings.csv"  # the ratings file an install must hold (in the installed folder)


REGISTRY: dict[str, DatasetSpec] = {
    s.name: s
    for s in [
        DatasetSpec("ml-100k", GROUPLENS + "ml-100k.zip",
                    "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
                    "0e33842e24a9c977be4e0107933c0723", 4_924_029, "ml-100k",
                    "MovieLens 100K: 100,000 ratings, 943 users, 1,682 movies (FedRec, FedRec++)", "u.data"),
        DatasetSpec("ml-1m", GROUPLENS + "ml-1m.zip",
                    "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
                    "c4d9eecfca2ab87c1945afe126590906", 5_917_549, "ml-1m",
                    "MovieLens 1M: 1,000,209 ratings, 6,040 users, 3,706 movies (FedRec, FedRec++, PersonalFR)",
                    "ratings.dat"),
        DatasetSpec("ml-10m", GROUPLENS + "ml-10m.zip",
                    "813c411ccb6122564edfe752e7f80c4dcc5aa25fa94c93622f6877a7ba252862",
                    "ce571fd55effeba0271552578f2648bd", 65_566_137, "ml-10M100K",
                    "MovieLens 10M: 10,000,054 ratings, 69,878 users, 10,677 movies", "ratings.dat"),
        DatasetSpec("ml-20m", GROUPLENS + "ml-20m.zip",
                    "96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
                    "cd245b17a1ae2cc31bb14903e1204af3", 198_702_078, "ml-20m",
                    "MovieLens 20M: 20,000,263 ratings, 138,493 users, 26,744 movies"),
        DatasetSpec("ml-25m", GROUPLENS + "ml-25m.zip",
                    "8b21cfb7eb1706b4ec0aac894368d90acf26ebdfb6aced3ebd4ad5bd1eb9c6aa",
                    "6b51fb2759a8657d3bfcbfc42b592ada", 261_978_986, "ml-25m",
                    "MovieLens 25M: 25,000,095 ratings, 162,541 users, 59,047 movies"),
        DatasetSpec("ml-latest-small", GROUPLENS + "ml-latest-small.zip",
                    "696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
                    None, 978_202, "ml-latest-small",
                    "MovieLens latest-small (2018-09): 100,836 ratings, 610 users, 9,724 movies"),
    ]
}


class ChecksumError(ValueError):
    """The downloaded or given archive, or the one an existing install came from, does not have
    the expected sha256."""


def default_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder (not created): argument, ``$FEDSIM_DATA``, or the platform cache."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("FEDSIM_DATA")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "fedsim" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "fedsim"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "fedsim"


cache_dir = default_cache_dir


def _spec(name: str) -> DatasetSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(REGISTRY)}") from None


def dataset_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``name`` is (or would be) installed; see :func:`is_installed`."""
    _spec(name)
    return default_cache_dir(cache_dir) / name


def is_installed(name: str, cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether ``name`` has an install (its marker file) in the cache, intact or not: see
    :func:`install_damage`."""
    return (dataset_path(name, cache_dir) / MARKER).is_file()


def list_datasets(cache_dir: str | os.PathLike | None = None) -> list[dict]:
    """One dict per registered dataset: the spec fields plus ``installed`` (a marker is there),
    ``damaged`` (``None``, or what :func:`install_damage` finds wrong with the install) and
    ``path``."""
    out = []
    for name, spec in REGISTRY.items():
        d = asdict(spec)
        d["installed"] = is_installed(name, cache_dir)
        d["damaged"] = install_damage(name, cache_dir) if d["installed"] else None
        d["path"] = str(dataset_path(name, cache_dir))
        out.append(d)
    return out


class _ReadFailed(Exception):
    """Reading the source failed after ``received`` bytes were saved (``cause``: what the connection
    raised; bytes a failed read took in are not counted)."""

    def __init__(self, received: int, cause: BaseException):
        super().__init__(received, cause)
        self.received, self.cause = received, cause


class _WriteFailed(Exception):
    """Writing the ``.part`` file failed (``cause``: the ``OSError``, a full disk say)."""

    def __init__(self, cause: OSError):
        super().__init__(cause)
        self.cause = cause


MIN_RATE = 1024  # bytes per second a download must average over every RATE_WINDOW
RATE_WINDOW = 120.0  # seconds


class _TooSlow(Exception):
    """The source brought ``window_bytes`` in ``window_seconds``, less than :data:`MIN_RATE` on
    average (``received`` bytes in ``seconds`` in all)."""

    def __init__(self, received: int, seconds: float, window_bytes: int, window_seconds: float):
        super().__init__(received, seconds, window_bytes, window_seconds)
        self.received, self.seconds = received, seconds
        self.window_bytes, self.window_seconds = window_bytes, window_seconds


def _copy_hashing(src, dst, progress: Callable[[int, int | None], None] | None, total: int | None,
                  limit: int | None = None, rate: bool = False) -> tuple[str, int]:
    """Copy ``src`` into ``dst`` hashing it; returns (sha256, bytes). With ``limit``, stops once
    more than ``limit`` bytes have come (the count returned then exceeds it). A failing read raises
    :class:`_ReadFailed`, a failing write :class:`_WriteFailed`, so that the caller can tell a
    broken connection from a full disk. With ``rate`` (a download), :class:`_TooSlow` once the
    bytes of a window of at least :data:`RATE_WINDOW` seconds average less than :data:`MIN_RATE`
    a second.

    Reads take what one system call brings (``read1``): ``read(1 MiB)`` waited for a full MiB,
    each byte within the socket timeout, so a server trickling a byte a minute held one read
    for years, and no check between reads could stop it."""
    h = hashlib.sha256()
    n = 0
    read = getattr(src, "read1", src.read)
    start = window_start = time.monotonic()
    window_bytes = 0
    while True:
        want = 1 << 20 if limit is None else min(1 << 20, limit + 1 - n)
        try:
            buf = read(want)
        except (OSError, http.client.HTTPException) as e:
            # http.client.IncompleteRead (a chunked body cut off) is no OSError: it came out of
            # `fedsim data get` as a traceback; a timeout or reset said neither dataset nor address
            raise _ReadFailed(n, e) from e
        if not buf:
            break
        h.update(buf)
        try:
            dst.write(buf)
        except OSError as e:
            raise _WriteFailed(e) from e
        n += len(buf)
        if progress is not None:
            progress(n, total)
        if limit is not None and n > limit:
            break
        if rate:
            window_bytes += len(buf)
            now = time.monotonic()
            if now - window_start >= RATE_WINDOW:
                if window_bytes < MIN_RATE * (now - window_start):
                    raise _TooSlow(n, now - start, window_bytes, now - window_start)
                window_start, window_bytes = now, 0
    return h.hexdigest(), n


LEFTOVER_AGE = 24 * 3600.0  # seconds: an install that has not finished in a day was killed


def _remove_leftovers(root: Path, name: str, now: float | None = None) -> list[Path]:
    """Remove what installs of ``name`` killed mid-way left in ``root`` (their archive
    ``.NAME-*.zip.part``, extraction ``.NAME-extract-*`` and replaced ``.NAME-old-*``; an install
    removes its own unless it is killed) when older than :data:`LEFTOVER_AGE`, so that a running
    install's are never touched. Nothing trusts them (an install is its folder's marker file), but
    they hold a dataset's size each. Returns what was removed."""
    now = time.time() if now is None else now
    gone = []
    for p in root.glob(f".{name}-*"):
        rest = p.name[len(name) + 2:]
        if not (p.name.endswith(".zip.part") or rest.startswith(("extract-", "old-"))):
            continue
        try:
            if now - p.lstat().st_mtime < LEFTOVER_AGE:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError:
            continue  # another process removed it, or it cannot be: not this install's business
        gone.append(p)
    return gone


MAX_RATIO = 50  # uncompressed bytes per archive byte: MovieLens zips hold about 3 to 5
MAX_SLACK = 1 << 20  # bytes any archive may unpack to whatever its ratio (tiny test zips)


MAX_DOWNLOAD_RATIO = 10  # bytes a download may bring, in pinned archive sizes, when the pin is not checked


def _too_large(name: str, source: str, spec: DatasetSpec, pinned: bool, what: str) -> ValueError:
    if pinned:
        return ChecksumError(f"download of {name} from {source} is larger than the pinned archive ({spec.size:,} "
                             f"bytes, sha256 {spec.sha256}): {what}; nothing was installed")
    return ValueError(f"download of {name} from {source} is larger than {MAX_DOWNLOAD_RATIO} times the pinned "
                      f"archive's {spec.size:,} bytes: {what}; nothing was installed")


def _check_announced(name: str, source: str, spec: DatasetSpec, total: int | None, pinned: bool,
                     limit: int | None) -> None:
    """Refuse, before reading it, a reply whose ``Content-Length`` cannot be the archive expected:
    another size than the pinned archive's when its sha256 is expected, more than ``limit``."""
    if total is None or limit is None:
        return
    if pinned and total != spec.size:
        raise ChecksumError(f"download of {name} from {source} announces {total:,} bytes, not the pinned archive's "
                            f"{spec.size:,} (sha256 {spec.sha256}); nothing was installed")
    if total > limit:
        raise _too_large(name, source, spec, pinned, f"it announces {total:,} bytes")


def _reason(e: BaseException) -> str:
    """What a failed read or request says, with the exception's name when its text is empty."""
    text = str(e)
    return text if text and text != "None" else type(e).__name__


def _safe_extract(zf: zipfile.ZipFile, target: Path, source: str, archive_bytes: int) -> None:
    """Unpack ``zf`` into ``target``, refusing (``ValueError`` naming ``source`` and the member):
    a member path that is absolute or leaves the folder; a member that is a symbolic link or
    another special file (Unix mode bits; zipfile would write it as a plain file); members that declare more than
    ``MAX_RATIO`` times the archive's size plus ``MAX_SLACK`` bytes in all (a zip bomb; zipfile
    reads no member beyond its declared size, so the declared total bounds the disk used and the
    time taken); and a member that cannot be decompressed (corrupt data, a CRC mismatch, an
    encrypted member, an unsupported method)."""
    infos = zf.infolist()
    for info in infos:
        p = PurePosixPath(info.filename)
        if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
            raise ValueError(f"{source}: refusing to unpack unsafe member path {info.filename!r}")
        kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0  # 3: Unix modes
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            # zipfile writes a symbolic link as a file holding its target ('/etc/passwd'): a
            # dataset archive has none, so one is a sign of a hostile (or wrong) archive
            if kind == stat.S_IFLNK:
                try:
                    with zf.open(info) as f:
                        target = f.read(4096).decode("utf-8", "replace")
                    what = f"a symbolic link (to {target!r})"
                except Exception:
                    what = "a symbolic link"
            else:
                what = f"a special file (mode {info.external_attr >> 16:o})"
            raise ValueError(f"{source}: refusing to unpack member {info.filename!r}: it is {what}, "
                             "not a file or folder")
    total = sum(info.file_size for info in infos)
    if total > MAX_RATIO * archive_bytes + MAX_SLACK:
        raise ValueError(
            f"{source}: refusing to unpack: its {len(infos)} members declare {total:,} bytes uncompressed, "
            f"more than {MAX_RATIO} times the archive's {archive_bytes:,} bytes (a zip bomb, not a dataset archive)"
        )
    for info in infos:
        try:
            zf.extract(info, target)
        except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, NotImplementedError) as e:
            raise ValueError(f"{source}: member {info.filename!r} cannot be unpacked: {e}") from None
        except RuntimeError:  # an encrypted member; zipfile's text for it holds the ZipInfo's repr
            raise ValueError(f"{source}: member {info.filename!r} cannot be unpacked: it is encrypted "
                             "(a password-protected zip)") from None
        except OSError as e:
            if e.errno is not None:  # the disk (full, read-only): not the archive's fault
                if e.filename is None:  # a failed write names no file: name the cache folder
                    raise OSError(e.errno, f"{e.strerror or e} (unpacking {info.filename} from {source})",
                                  str(target.parent)) from None
                raise
            # bz2 reports corrupt data as OSError("Invalid data stream"), without errno
            raise ValueError(f"{source}: member {info.filename!r} cannot be unpacked: {e}") from None


def check_installed(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder of installed dataset ``name`` if its install came from the pinned archive (its
    marker records the pinned sha256; a dataset without a pin passes). Raises
    :class:`ChecksumError` for an install made from another archive (``--insecure``, ``--url``)
    or with an unreadable marker, ``FileNotFoundError`` if it is not installed. What loads a
    dataset by its registered name calls this, so that ``--data ml-100k`` means the real
    ml-100k; files installed unverified stay usable by their path. A damaged install (a recorded
    file missing or of another size, a ratings file of another sha256) raises
    :class:`ChecksumError` too."""
    spec = _spec(name)
    dest = dataset_path(name, cache_dir)
    if not (dest / MARKER).is_file():
        raise FileNotFoundError(f"dataset {name!r} is not downloaded: run `fedsim data get {name}`")
    if spec.sha256:
        _check_installed(name, dest, spec.sha256.lower(), accept=f"pass its folder as a path (--data {dest}) "
                         "to use the installed files as they are")
    else:
        try:
            marker = json.loads((dest / MARKER).read_text())
        except (OSError, ValueError):
            marker = {}
        _check_files(name, dest, marker if isinstance(marker, dict) else {})
    return dest


def _check_installed(name: str, dest: Path, expected: str, accept: str | None = None) -> None:
    """Raise :class:`ChecksumError` unless the marker in ``dest`` records sha256 ``expected``
    (``accept``: how to use the files anyway, for the message)."""
    try:
        marker = json.loads((dest / MARKER).read_text())
        recorded = str(marker["sha256"]).lower()
    except (OSError, ValueError, KeyError, TypeError):
        marker, recorded = {}, None
    if recorded == expected:
        _check_files(name, dest, marker)
        return
    if recorded is None:
        what = f"its marker {dest / MARKER} is unreadable or records no sha256"
    else:
        how = "verified against that sha256 when installed" if marker.get("verified") is True else (
            "not verified: installed with verify=False, --insecure")
        what = f"it was installed from {marker.get('source', '?')}, whose sha256 is {recorded} ({how})"
    raise ChecksumError(
        f"{name} in {dest} is not the expected archive (sha256 {expected}): {what}; the archive is not "
        f"kept, so the files cannot be re-checked.  Reinstall a verified copy with force=True "
        f"(fedsim data get {name} --force), or "
        + (accept or "pass verify=False (--insecure) to use the installed files as they are")
    )


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while buf := f.read(1 << 20):
            h.update(buf)
    return h.hexdigest()


def _record_files(folder: Path) -> dict[str, dict]:
    """Every file under ``folder`` (path relative to it, ``/``-separated) with its size and sha256,
    for the install marker."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.name != MARKER:
            out[p.relative_to(folder).as_posix()] = {"bytes": p.stat().st_size, "sha256": _file_sha256(p)}
    return out


def _damage(name: str, dest: Path, marker: dict, hash_ratings: bool) -> str | None:
    """What is wrong with the files of the install in ``dest`` (``None``: nothing found): a file
    the marker records missing or of another size, a record of the marker without a whole number
    of bytes and a sha256, or (``hash_ratings``) the dataset's ratings file of another sha256 than
    when installed. An install whose marker records no files (made
    before fedsim recorded them) is checked for its ratings file only."""
    ratings = _spec(name).ratings
    files = marker.get("files")
    if not isinstance(files, dict):
        return None if (dest / ratings).is_file() else f"{dest / ratings} is missing"
    for rel, rec in files.items():
        if (not isinstance(rec, dict) or type(rec.get("bytes")) is not int
                or not isinstance(rec.get("sha256"), str)):
            # (a hand-edited or foreign marker: its record formatted into a message raised TypeError)
            return f"its marker {dest / MARKER} records {rel!r} without its size and sha256 (got {rec!r})"
        p = dest / rel
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            return f"{p} is missing"
        if size != rec.get("bytes"):
            return f"{p} has {size:,} bytes, not the {rec.get('bytes'):,} it was installed with"
    rec = files.get(ratings)
    if rec is None:
        return None if (dest / ratings).is_file() else f"{dest / ratings} is missing"
    if hash_ratings:
        digest = _file_sha256(dest / ratings)
        if digest != rec.get("sha256"):
            return (f"{dest / ratings} is not the file it was installed with (sha256 {digest}, "
                    f"installed {rec.get('sha256')})")
    return None


def _damaged(name: str, dest: Path, problem: str) -> ChecksumError:
    return ChecksumError(f"{name} in {dest} is damaged: {problem}; reinstall it with force=True "
                         f"(fedsim data get {name} --force)")


def _check_files(name: str, dest: Path, marker: dict) -> None:
    """Raise :class:`ChecksumError` if a file the marker of ``dest`` records is missing or has
    another size, or if the dataset's ratings file has another sha256 than when installed (the
    files the loaders read were trusted on the marker alone: a truncated or replaced ``u.data``
    loaded as a smaller dataset). An install whose marker records no files (made before fedsim
    recorded them) is checked for its ratings file only."""
    problem = _damage(name, dest, marker, hash_ratings=True)
    if problem is not None:
        raise _damaged(name, dest, problem)


def install_damage(name: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """What is wrong with installed dataset ``name``, as the one-line message a
    :class:`ChecksumError` for it would have (``NAME in DIR is damaged: ...; reinstall it ...``),
    or ``None`` when the install is intact or there is none. The cheap checks only, what ``fedsim data list`` and ``path``
    report: every file the marker records is there with its size (the ratings file only, for an
    install whose marker records no files). The ratings file's sha256 is checked where it is
    read anyway (loading by name, a verifying :func:`get`): hashing every install's files for a
    listing would read gigabytes (about 1 s for ml-25m's ``ratings.csv`` alone), and what it adds
    is a file changed in place at its size, which the load by name still refuses."""
    dest = dataset_path(name, cache_dir)
    try:
        marker = json.loads((dest / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        marker = {}
    problem = _damage(name, dest, marker if isinstance(marker, dict) else {}, hash_ratings=False)
    return None if problem is None else str(_damaged(name, dest, problem))


def get(
    name: str,
    from_file: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    url: str | None = None,
    *,
    sha256: str | None = None,
    verify: bool = True,
    force: bool = False,
    timeout: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Install dataset ``name`` into the cache and return its folder (idempotent).

    ``from_file`` installs from a local copy of the zip instead of downloading; ``url``
    overrides the download address; ``sha256`` overrides the pinned checksum (both for mirrors
    and tests).  ``verify=False`` skips the check (needed for a dataset without a pinned
    checksum, e.g. with a custom url and no ``sha256``); it is never the default.  ``force``
    reinstalls over an existing install.

    An existing install is returned without a download when ``verify`` is false, or when the
    sha256 its marker records for the archive it came from equals the expected one (``sha256``
    or the pin); ``from_file`` and ``url`` are then not used.

    Raises :class:`ChecksumError` when the archive does not have the expected sha256, or when
    ``verify`` is true and an existing install records another sha256 (or none: an unreadable
    marker), in both cases leaving the cache as it was; ``FileExistsError`` when the folder
    exists without a marker; ``ValueError`` for an unknown name, for ``verify`` without a
    checksum to compare with, for a ``sha256`` that is not 64 hexadecimal digits (surrounding
    blanks are ignored), and for an archive that is not a safe zip (a member path leaving the
    folder, members declaring more than ``MAX_RATIO`` times the archive's size, a member that
    cannot be decompressed) or that lacks the dataset's ratings file; ``FileNotFoundError``
    for a missing ``from_file`` and ``OSError`` (``urllib.error.URLError``) for a failed download
    (``ConnectionError`` when fewer bytes arrive than the server's ``Content-Length``, when the
    connection fails mid-body or the reply is not HTTP, naming the dataset and the address; an
    ``OSError`` whose ``filename`` is the cache folder for a failed write, a full disk say).
    A download is bounded by the registry's size: checked against the pin, a ``Content-Length``
    of another size, or a reply running past that size, is a :class:`ChecksumError`; otherwise
    (``sha256``, ``verify=False``) more than ``MAX_DOWNLOAD_RATIO`` times it is a ``ValueError``.
    It is bounded in time by a rate: a window of :data:`RATE_WINDOW` seconds that brings less than
    :data:`MIN_RATE` bytes a second on average stops it with a ``ConnectionError`` (``... is too
    slow: B bytes in the last S s, ...``), so that a server trickling a byte within each
    ``timeout`` cannot hold it for ever, while a slow link above the rate always finishes.
    """
    spec = _spec(name)
    if sha256 is not None:
        # ' <hash>' (or a stray newline) passed the CLI's check but never matched a digest: a
        # "checksum mismatch" after the whole download
        if not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha256.strip()):
            raise ValueError(f"sha256 must be 64 hexadecimal digits, got {sha256!r}")
        sha256 = sha256.strip()
    root = default_cache_dir(cache_dir)
    dest = root / name
    expected = (sha256 or spec.sha256 or "").lower() or None
    if verify and expected is None:
        raise ValueError(
            f"no pinned sha256 for {name}: pass sha256=... (--sha256) or verify=False (--insecure) "
            "to install unverified data"
        )
    if (dest / MARKER).is_file() and not force:
        if verify:
            _check_installed(name, dest, expected)
        return dest
    if dest.exists() and not (dest / MARKER).is_file() and not force:
        raise FileExistsError(
            f"{dest} exists but is not a complete fedsim install; remove it or pass force=True (--force)"
        )
    root.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(root, name)
    source = str(from_file) if from_file is not None else (url or spec.url)
    # what a download may bring: the pinned archive's size exactly when its sha256 is the one
    # expected, else MAX_DOWNLOAD_RATIO times it (a mirror's other archive, --insecure)
    pinned = bool(verify and spec.sha256 and spec.size and expected == spec.sha256.lower())
    limit = spec.size if pinned else (MAX_DOWNLOAD_RATIO * spec.size if spec.size else None)
    fd, part_name = tempfile.mkstemp(dir=root, prefix=f".{name}-", suffix=".zip.part")
    part = Path(part_name)
    extract_dir: Path | None = None
    try:
        try:
            with os.fdopen(fd, "wb") as out:
                if from_file is not None:
                    src_path = Path(from_file)
                    if not src_path.is_file():
                        raise FileNotFoundError(f"no such file: {src_path}")
                    with open(src_path, "rb") as src:
                        digest, size = _copy_hashing(src, out, progress, src_path.stat().st_size)
                else:
                    req = urllib.request.Request(source, headers={"User-Agent": "fedsim-data/1"})
                    try:
                        resp = urllib.request.urlopen(req, timeout=timeout)
                    except http.client.HTTPException as e:  # a reply that is not HTTP: no URLError
                        raise ConnectionError(f"download of {name} from {source} failed: {_reason(e)}; "
                                              "nothing was installed") from None
                    with resp:
                        total = resp.headers.get("Content-Length")
                        total = int(total) if total and total.strip().isdigit() else None
                        _check_announced(name, source, spec, total, pinned, limit)
                        digest, size = _copy_hashing(resp, out, progress, total, limit, rate=True)
                    if limit is not None and size > limit:
                        # an endless reply (or one far larger than the dataset) filled the disk
                        raise _too_large(name, source, spec, pinned, f"stopped after {size:,} bytes")
                    # http.client returns a connection closed early as a short body, without an error:
                    # it was reported as a checksum mismatch (or, unverified, as "not a valid zip")
                    if total is not None and size != total:
                        raise ConnectionError(
                            f"download of {name} from {source} was cut off: {size:,} of {total:,} bytes received; "
                            "nothing was installed (run the command again)"
                        )
        except _ReadFailed as e:
            if from_file is not None:
                raise e.cause from None
            raise ConnectionError(
                f"download of {name} from {source} failed after {e.received:,} bytes: {_reason(e.cause)}; "
                "nothing was installed (run the command again)"
            ) from None
        except _TooSlow as e:
            # one byte just inside each read's timeout kept a download going for ever
            raise ConnectionError(
                f"download of {name} from {source} is too slow: {e.window_bytes:,} bytes in the last "
                f"{e.window_seconds:.1f} s, {e.received:,} bytes in {e.seconds:.1f} s in all (at least "
                f"{MIN_RATE:,} bytes/s over {RATE_WINDOW:g} s are required); nothing was installed (run the "
                f"command again, or install a copy of the zip with --from)"
            ) from None
        except _WriteFailed as e:
            # a full disk said "[Errno 28] No space left on device", naming no file or folder
            raise OSError(e.cause.errno, f"{e.cause.strerror or e.cause} (writing the download of {name})",
                          str(root)) from None
        if verify and digest != expected:
            raise ChecksumError(
                f"checksum mismatch for {name} from {source}: expected sha256 {expected}, got {digest} "
                f"({size:,} bytes); nothing was installed"
            )
        extract_dir = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-extract-"))
        try:
            with zipfile.ZipFile(part) as zf:
                _safe_extract(zf, extract_dir, source, size)
        except zipfile.BadZipFile as e:
            raise ValueError(f"{source} is not a valid zip archive: {e}") from None
        entries = [p for p in extract_dir.iterdir() if not p.name.startswith("__MACOSX")]
        content = entries[0] if len(entries) == 1 and entries[0].is_dir() else extract_dir
        if not (content / spec.ratings).is_file():
            # a zip of another dataset (or none) was installed under this name and listed as installed.
            # The file is looked for where the loaders look first, in the folder installed: the
            # archive's only top folder (whatever its name: the install is renamed NAME), else the
            # archive's root; the message said "no ml-100k/u.data" of an archive holding one beside
            # a root file, and of one whose top folder had another name
            if content is not extract_dir:
                held = sorted(str(p.relative_to(extract_dir)) for p in content.iterdir())
                where = f"in its top folder {content.name}/"
            else:
                held = sorted(p.name + ("/" if p.is_dir() else "") for p in entries)
                where = "at its root (it has no single top folder)"
            found = ", ".join(held[:8]) + (f" and {len(held) - 8} more" if len(held) > 8 else "") or "nothing"
            raise ValueError(
                f"{source} is not the {name} archive: it has no {spec.ratings} {where} "
                f"(it holds: {found}); nothing was installed"
            )
        marker = {
            "name": name, "source": source, "sha256": digest, "verified": bool(verify), "bytes": size,
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "archive_folder": content.name if content is not extract_dir else None,
            "files": _record_files(content),
        }
        try:
            (content / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        except OSError as e:
            if e.errno is None or e.filename is not None:
                raise
            raise OSError(e.errno, f"{e.strerror or e} (writing the install marker of {name})", str(root)) from None
        if dest.exists() and not force:
            # another `get` finished first: keep its install (replacing it pulled the files from
            # under whoever was reading them), and check it as if found at the start
            if not (dest / MARKER).is_file():
                raise FileExistsError(
                    f"{dest} exists but is not a complete fedsim install; remove it or pass force=True (--force)"
                )
            if verify:
                _check_installed(name, dest, expected)
            return dest
        trash = None
        if dest.exists():
            trash = root / f".{name}-old-{os.getpid()}-{time.time_ns()}"
            os.rename(dest, trash)
        try:
            os.rename(content, dest)
        except OSError:
            if (dest / MARKER).is_file():  # a concurrent install won the race
                if verify:
                    _check_installed(name, dest, expected)
                return dest
            if trash is not None:
                os.rename(trash, dest)
                trash = None
            raise
        finally:
            if trash is not None:
                shutil.rmtree(trash, ignore_errors=True)
        return dest
    finally:
        part.unlink(missing_ok=True)
        if extract_dir is not None and extract_dir.exists():
            shutil.rmtree(extract_dir, ignore_errors=True)
