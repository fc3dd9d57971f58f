"""Reading and listing gs:// objects with one storage client per process.

Beam's FileSystems does the rest of our GCS work (writes, renames, deletes),
but not the reads and listings on the hot path, because there it cannot do
the job: `GCSFileSystem.open` builds a new `GcsIO` on every call (a new
storage client and HTTP session, a fresh TCP connection, an argparse of the
pipeline options), and reads the object's metadata before its media: three
requests and ~12 ms of CPU per image, and with 30 ms of latency we reached
1.8% of a parallel download. Its listing returns no generation or checksum,
and it cannot read a pinned generation.

Here: one client per process (rebuilt after a fork), its connection pool sized
for the reads in flight; a read is one media GET of a pinned generation, so
the writer reads exactly the object version that was validated (GCS answers
404 for a generation that is no longer live, and the client checks the
object's CRC32C as it downloads). Every request has a deadline: transient
faults (429, 5xx, resets) are retried until it, then the run fails with a
message that names the bucket (`StorageUnavailable`), rather than a hang or a
reject per image.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator, NamedTuple, Optional

from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.core.specs import DEFAULT_IO_TIMEOUT

POOL_SIZE = 64  # connections kept per process: reads in flight plus listing and writes
DEFAULT_TIMEOUT = DEFAULT_IO_TIMEOUT  # seconds; --io_timeout

_lock = threading.Lock()
_client = None
_client_pid = 0
_timeout = DEFAULT_TIMEOUT  # fsutil's reads and listings of gs:// (set_timeout: verify, inspect --io_timeout)


def set_timeout(seconds: float) -> None:
    global _timeout
    _timeout = seconds


def timeout() -> float:
    return _timeout


@contextlib.contextmanager
def deadline(seconds: float):
    """While inside, fsutil's reads and listings of gs:// wait at most
    `seconds` (a conversion's --io_timeout, while its options are checked);
    the previous deadline back on leaving."""
    kept = _timeout
    set_timeout(float(seconds))
    try:
        yield
    finally:
        set_timeout(kept)


class StorageUnavailable(ConversionError, RuntimeError):
    """The bucket did not answer (or kept failing) within the deadline."""


class NoCredentials(ConversionError, RuntimeError):
    """No Google Cloud credentials where google-auth looks (a key file named
    by GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the metadata server's)."""


CREDENTIALS_FIX = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
                   "service account's key file")


def default_credentials(scopes: list, needs: str = "this run needs them for its gs:// paths", request=None):
    """google.auth.default(scopes), or NoCredentials: one line saying what
    `needs` them and how to give them."""
    import google.auth
    from google.auth import exceptions
    try:
        return google.auth.default(scopes=scopes, request=request)
    except exceptions.DefaultCredentialsError as e:
        given = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
        if given:
            detail = " ".join(str(e).split())[:300]
            raise NoCredentials(f"GOOGLE_APPLICATION_CREDENTIALS={given} gives no usable Google Cloud credentials "
                                f"({detail}): {needs}; point it at a service account's key file, or unset it and run "
                                "`gcloud auth application-default login`") from None
        raise NoCredentials(f"no Google Cloud credentials on this machine: {needs}; {CREDENTIALS_FIX}") from None


class ObjectInfo(NamedTuple):
    """What a listing returns of an object. Records carry the size and the
    generation; not the CRC32C: a read pinned to the generation is that exact
    version, and the client checks the download against the object's CRC32C."""
    path: str          # gs://bucket/name
    size: int
    generation: int
    updated: float     # seconds since the epoch
    crc32c: str        # base64, as GCS reports it


def split_path(path: str) -> tuple[str, str]:
    if not path.startswith("gs://"):
        raise ValueError(f"not a gs:// path: {path!r}")
    bucket, _, name = path[5:].partition("/")
    return bucket, name


def client():
    """This process's storage client (anonymous against an emulator, so no
    time goes to a credentials search)."""
    global _client, _client_pid
    pid = os.getpid()
    if _client is not None and _client_pid == pid:
        return _client
    with _lock:
        if _client is None or _client_pid != pid:
            _client = _new_client()
            _client_pid = pid
    return _client


def _new_client():
    import requests
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import storage
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials
        credentials, project = AnonymousCredentials(), os.environ.get("GOOGLE_CLOUD_PROJECT", "test")
    else:
        credentials, project = default_credentials(["https://www.googleapis.com/auth/devstorage.read_write"])
    session = AuthorizedSession(credentials)
    adapter = requests.adapters.HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return storage.Client(project=project, credentials=credentials, _http=session)


def reset() -> None:
    """Forget the client (tests point STORAGE_EMULATOR_HOST elsewhere)."""
    global _client
    with _lock:
        _client = None


def _retry(timeout: float):
    """The storage client's own retry policy (429, 5xx, resets), bounded by
    `timeout` and starting sooner than its 1 s: a read is small."""
    from google.cloud.storage.retry import DEFAULT_RETRY
    return DEFAULT_RETRY.with_timeout(timeout).with_delay(initial=0.2, maximum=8.0)


def _unavailable(what: str, path: str, e: BaseException, timeout: float, flag=None) -> StorageUnavailable:
    # Reads and listings take --io_timeout; writes (Beam's) keep their own deadline.
    by_flag = what in ("reading", "listing") if flag is None else flag
    limit = f"--io_timeout {timeout:g} s" if by_flag else f"{timeout:g} s"
    fix = ", or raise --io_timeout" if by_flag else " and rerun"
    cause = getattr(e, "cause", None) or e  # a RetryError's last failure says what happened
    detail = f"{type(cause).__name__}: " + " ".join(str(cause).split())[:200]
    return StorageUnavailable(f"{what} {path} failed: no usable answer from Cloud Storage within {limit} "
                              f"({detail}); check that this machine reaches bucket "
                              f"{split_path(path)[0]} (network, proxy{_emulator_note()}){fix}")


def _emulator_note() -> str:
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    return f", STORAGE_EMULATOR_HOST={host}" if host else ""


def _is_infrastructure(e: BaseException) -> bool:
    """A failure of the service or the network (after retries), not of one object."""
    import requests
    from google.api_core import exceptions as gexc
    if isinstance(e, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                      TimeoutError, gexc.RetryError)):
        return True
    if isinstance(e, gexc.GoogleAPICallError):
        code = e.code or 0
        return code in (408, 429) or code >= 500
    return False


def read(path: str, generation: int = 0, timeout: float = DEFAULT_TIMEOUT, max_bytes: int = 0,
         size: int = -1) -> tuple[bytes, int]:
    """(bytes, generation) of the object, in one media request; with
    `generation`, exactly that version (NotFound if it is no longer live).
    Raises TooLarge past `max_bytes`, StorageUnavailable when the service does
    not answer within `timeout`. `size`, if the listing gave it, spares a
    ranged read."""
    if max_bytes and size > max_bytes:
        raise TooLarge(size)
    from google.api_core import exceptions as gexc
    bucket, name = split_path(path)
    blob = client().bucket(bucket).blob(name, generation=generation or None)
    kwargs = {"timeout": (min(timeout, 30.0), timeout), "retry": _retry(timeout)}
    if max_bytes and size < 0:
        # Size unknown (a table row): a range one byte past the cap, so a huge
        # object costs the cap. GCS's checksum covers whole objects only; the
        # writer's CRC32C check still holds the bytes to what was validated.
        kwargs.update(start=0, end=max_bytes, checksum=None)
    try:
        data = blob.download_as_bytes(**kwargs)
    except (gexc.NotFound, gexc.Forbidden):
        raise
    except Exception as e:
        if _is_infrastructure(e):
            raise _unavailable("reading", path, e, timeout) from e
        raise
    if max_bytes and len(data) > max_bytes:
        raise TooLarge(len(data))
    return data, int(blob.generation or generation or 0)


def exists(path: str, seconds: float = 0.0) -> bool:
    """Whether the object exists, asked within `seconds` (by default the
    deadline's, --io_timeout); StorageUnavailable past it."""
    seconds = seconds or timeout()
    bucket, name = split_path(path)
    try:
        return client().bucket(bucket).blob(name).exists(timeout=(min(seconds, 30.0), seconds),
                                                         retry=_retry(seconds))
    except Exception as e:
        if _is_infrastructure(e):
            raise _unavailable("reading", path, e, seconds) from e
        raise


def read_all(path: str, timeout: float = 0.0) -> bytes:
    """The whole object (FileNotFoundError if there is none), within the deadline."""
    from google.api_core import exceptions as gexc
    try:
        return read(path, timeout=timeout or _timeout)[0]
    except gexc.NotFound:
        raise FileNotFoundError(path) from None


class _Reader:
    """A read-only file of an object, read in ranged requests with the deadline;
    a failure of the service is StorageUnavailable, a missing object FileNotFoundError."""

    def __init__(self, path: str, timeout: float):
        from google.api_core import exceptions as gexc
        bucket, name = split_path(path)
        self._path, self._timeout = path, timeout
        try:
            self._f = client().bucket(bucket).blob(name).open(
                "rb", chunk_size=8 << 20, timeout=(min(timeout, 30.0), timeout), retry=_retry(timeout))
        except gexc.NotFound:
            raise FileNotFoundError(path) from None
        except Exception as e:
            if _is_infrastructure(e):
                raise _unavailable("reading", path, e, timeout) from e
            raise

    def _call(self, fn, *args):
        from google.api_core import exceptions as gexc
        try:
            return fn(*args)
        except gexc.NotFound:
            raise FileNotFoundError(self._path) from None
        except Exception as e:
            if _is_infrastructure(e):
                raise _unavailable("reading", self._path, e, self._timeout) from e
            raise

    def read(self, n: int = -1) -> bytes:
        return self._call(self._f.read, n)

    def readline(self, n: int = -1) -> bytes:
        return self._call(self._f.readline, n)

    def __iter__(self):
        while line := self.readline():
            yield line

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._call(self._f.seek, offset, whence)

    def __getattr__(self, name):  # tell, seekable, readable, ...
        if name == "_f":
            raise AttributeError(name)
        return getattr(self._f, name)

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_read(path: str, timeout: float = 0.0) -> _Reader:
    return _Reader(path, timeout or _timeout)


def read_range(path: str, start: int, end: int, timeout: float = DEFAULT_TIMEOUT) -> bytes:
    """Bytes [start, end) of an object in one request (fewer at its end).
    GCS's checksum covers whole objects only: the caller checks what it reads."""
    if end <= start:
        return b""
    from google.api_core import exceptions as gexc
    bucket, name = split_path(path)
    blob = client().bucket(bucket).blob(name)
    try:
        return blob.download_as_bytes(start=start, end=end - 1, checksum=None, retry=_retry(timeout),
                                      timeout=(min(timeout, 30.0), timeout))
    except (gexc.NotFound, gexc.Forbidden):
        raise
    except Exception as e:
        if _is_infrastructure(e):
            raise _unavailable("reading", path, e, timeout) from e
        raise


class TooLarge(Exception):
    def __init__(self, seen: int):
        super().__init__(f"larger than the cap (read {seen} bytes)")
        self.seen = seen


def list_objects(prefix: str, delimiter: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, flag: Optional[bool] = None) -> Iterator[ObjectInfo]:
    """Every object under gs:// `prefix` (literal: no glob characters), in
    name order, with the generation and checksum the listing returns."""
    bucket, name = split_path(prefix)
    try:
        blobs = client().list_blobs(bucket, prefix=name, delimiter=delimiter, timeout=(min(timeout, 30.0), timeout),
                                    retry=_retry(timeout),
                                    fields="items(name,size,generation,updated,crc32c),prefixes,nextPageToken")
        for b in blobs:
            yield ObjectInfo(f"gs://{bucket}/{b.name}", int(b.size or 0), int(b.generation or 0),
                             b.updated.timestamp() if b.updated else 0.0, b.crc32c or "")
    except Exception as e:
        if _is_infrastructure(e):
            raise _unavailable("listing", prefix, e, timeout, flag) from e
        raise


def probe(bucket: str, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Lists at most one object of `bucket`: returns if it answers; raises
    the service's NotFound or Forbidden, the credentials' errors, or
    StorageUnavailable when it gives no usable answer within `timeout`."""
    try:
        pages = client().list_blobs(bucket, max_results=1, timeout=(min(timeout, 30.0), timeout),
                                    retry=_retry(timeout), fields="items(name),nextPageToken")
        next(iter(pages), None)
    except Exception as e:
        if _is_infrastructure(e):
            raise _unavailable("listing", f"gs://{bucket}", e, timeout, True) from e
        raise


def list_prefixes(prefix: str, timeout: float = DEFAULT_TIMEOUT, flag: Optional[bool] = None) -> list[str]:
    """Names of the "folders" directly under gs:// `prefix` (a delimiter listing)."""
    bucket, name = split_path(prefix)
    try:
        pages = client().list_blobs(bucket, prefix=name, delimiter="/", timeout=(min(timeout, 30.0), timeout),
                                    retry=_retry(timeout), fields="prefixes,nextPageToken")
        for _ in pages:  # the prefixes fill in as the pages are read
            pass
    except Exception as e:
        if _is_infrastructure(e):
            raise _unavailable("listing", prefix, e, timeout, flag) from e
        raise
    return sorted(p[len(name):].rstrip("/") for p in pages.prefixes)
