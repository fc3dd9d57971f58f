"""Before a remote launch builds or submits anything: that this machine has
Google credentials, that the host names the launch talks to resolve, and that
every bucket the run names answers within --io_timeout.

Without these checks a launch with no credentials or no network went on to
list its input with Beam's anonymous client and failed after 120-150 s of
retries with `BeamIOError ... RetryError('Timeout of 120.0s exceeded')`, the
cause visible only with --debug. Each check here takes at most a few seconds
(credentials: the metadata server asked with a 1 s timeout; names: at most
RESOLVE_SECONDS; a bucket: one listing of one object within --io_timeout) and
fails with one line naming the cause and the fix.

What is checked follows from the run: a DataflowRunner launch needs
credentials (unless --no_auth) and the Dataflow endpoint's name (unless
--template_location: the job is written to a file, not submitted); any remote
launch that names gs:// paths needs the storage host and the buckets, and
credentials unless STORAGE_EMULATOR_HOST points the clients at an emulator.
A local run checks nothing here: its first request says the same within a
few seconds. A Dataflow dry run needs no network and is not checked
(pipelines/run/offline.py).
"""
from __future__ import annotations

import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Mapping, Optional

from tfrecord_pipelines.options import table
from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.storage import gcs

RESOLVE_SECONDS = 10.0  # a resolver that is down answers in ~5 s per attempt; a working one in milliseconds
METADATA_SECONDS = 1.0  # the GCE metadata server answers in milliseconds where there is one
STORAGE_HOST = "storage.googleapis.com"
_BUCKET = re.compile(r"gs://([^/\s,;]+)")


class LaunchCheckFailed(ConversionError, RuntimeError):
    """A remote launch that could not succeed from this machine (no
    credentials, no name resolution, a bucket that does not answer)."""


def check(values, options, runner: str, environ: Optional[Mapping] = None) -> None:
    """Raises LaunchCheckFailed with the first problem found; returns quietly
    when the launch may go ahead. `values`: our options; `options`: Beam's."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions
    environ = os.environ if environ is None else environ
    gc = options.view_as(GoogleCloudOptions)
    dataflow = runner.lower() in ("dataflowrunner", "dataflow")
    buckets = _buckets(values, gc)
    if not dataflow and not buckets:
        return
    t = values.io_timeout  # checked by build_config, after this
    timeout = float(t) if isinstance(t, (int, float)) and 0 < t < float("inf") else gcs.DEFAULT_TIMEOUT
    emulator = environ.get("STORAGE_EMULATOR_HOST", "")
    launch = f"a {runner} launch"
    token_host = ""
    if (dataflow and not gc.no_auth) or (buckets and not emulator):
        needs = "to submit the job" if dataflow else ""
        if buckets and not emulator:
            needs += (" and " if needs else "") + f"to read gs://{sorted(buckets)[0]}"
        token_host = _credentials(launch, needs)
    hosts = []
    if dataflow and not gc.template_location:
        hosts.append(("the Dataflow API", _host(gc.dataflow_endpoint or "https://dataflow.googleapis.com")))
    if buckets:
        hosts.append(("Cloud Storage", _host(emulator) if emulator else STORAGE_HOST))
        if token_host and not emulator:
            hosts.append(("the token service", token_host))
    _resolve(hosts, min(timeout, RESOLVE_SECONDS))
    for bucket, flag in sorted(buckets.items()):
        _reachable(bucket, flag, timeout)


def _buckets(values, gc) -> dict:
    """{bucket: the first flag naming it} for every gs:// path of the run."""
    named = [(o.name, getattr(values, o.name)) for o in table.OPTIONS]
    named += [("temp_location", gc.temp_location), ("staging_location", gc.staging_location)]
    found: dict = {}
    for name, value in named:
        if isinstance(value, str):
            for m in _BUCKET.finditer(value):
                found.setdefault(m.group(1), f"--{name} {value}")
    return found


def _host(url: str) -> str:
    url = url if "://" in url else "http://" + url
    return urllib.parse.urlsplit(url).hostname or ""


class _QuickRequest:
    """google-auth's transport with the metadata server's probe bounded (it
    waits 3 s, three times, on a network that drops the packets)."""

    def __init__(self):
        import google.auth.transport.requests
        self._inner = google.auth.transport.requests.Request()

    def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **kwargs):
        bounded = METADATA_SECONDS if timeout is None else min(float(timeout), METADATA_SECONDS)
        return self._inner(url, method=method, body=body, headers=headers, timeout=bounded, **kwargs)


def _credentials(launch: str, needs: str) -> str:
    """The host of the credentials' token endpoint ("" if they name none);
    the same line as a local run's client without credentials (gcs.py)."""
    credentials, _ = gcs.default_credentials(["https://www.googleapis.com/auth/cloud-platform"],
                                             f"{launch} needs them {needs}", request=_QuickRequest())
    token_uri = getattr(credentials, "_token_uri", None) or getattr(credentials, "token_uri", None)
    return _host(token_uri) if isinstance(token_uri, str) and token_uri else ""


def _resolve(hosts: list, seconds: float) -> None:
    """Every (service, host) resolves within `seconds` (through the proxy
    the environment names, if there is one for it)."""
    proxies = urllib.request.getproxies()
    todo = []
    for service, host in hosts:
        if not host:
            continue
        proxy = proxies.get("https") or proxies.get("http")
        if proxy and not urllib.request.proxy_bypass(host):
            service, host = f"the proxy for {host} ({proxy})", _host(proxy)
        if (service, host) not in todo:
            todo.append((service, host))
    answers: dict = {}

    def lookup(host: str) -> None:
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
            answers[host] = None
        except OSError as e:
            answers[host] = e

    # A lookup cannot be cancelled: one a resolver leaves unanswered ends on
    # its own (the resolver's timeout), in a daemon thread, after we said so.
    threads = [threading.Thread(target=lookup, args=(host,), name=f"tfrecords-resolve-{host}", daemon=True)
               for _, host in todo]
    for t in threads:
        t.start()
    ends = time.monotonic() + seconds
    for t in threads:
        t.join(max(ends - time.monotonic(), 0.0))
    for service, host in todo:
        if host not in answers:
            raise LaunchCheckFailed(f"cannot resolve {host} ({service}): no answer from this machine's name "
                                    f"resolver within {seconds:g} s; check its network and DNS (or set "
                                    "HTTPS_PROXY) and rerun")
        e = answers[host]
        if e is not None:
            why = getattr(e, "strerror", None) or str(e)
            raise LaunchCheckFailed(f"cannot resolve {host} ({service}: {why}): this machine cannot reach Google "
                                    "Cloud; check its network and DNS (or set HTTPS_PROXY) and rerun")


def _reachable(bucket: str, flag: str, timeout: float) -> None:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    try:
        gcs.probe(bucket, timeout)
    except gexc.NotFound:
        raise LaunchCheckFailed(f"{flag}: bucket {bucket} does not exist (or this account cannot see it); "
                                "check the name, or create it with `gcloud storage buckets create "
                                f"gs://{bucket}`") from None
    except (gexc.Forbidden, gexc.Unauthorized) as e:
        raise LaunchCheckFailed(f"{flag}: this account may not list bucket {bucket} ({e.code}: "
                                f"{' '.join(str(e.message).split())[:200]}); grant it access to the bucket "
                                "(roles/storage.objectAdmin for the output and temp locations, objectViewer for "
                                f"inputs), or {gcs.CREDENTIALS_FIX}") from None
    except auth_exc.RefreshError as e:
        raise LaunchCheckFailed(f"the Google Cloud credentials found cannot get a token "
                                f"({' '.join(str(e).split())[:200]}); {gcs.CREDENTIALS_FIX}") from None
    except auth_exc.TransportError as e:
        raise LaunchCheckFailed(f"the Google Cloud credentials found could not get a token: no answer from the token "
                                f"service ({' '.join(str(e).split())[:200]}); check this machine's network (or set "
                                "HTTPS_PROXY) and rerun") from None
    except gcs.StorageUnavailable as e:
        raise LaunchCheckFailed(f"{flag}: {e}") from None
