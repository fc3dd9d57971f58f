"""Shared test helpers: tiny generated images and trees, a conversion runner,
and reading shards back with TensorFlow."""
from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Runs pin the files they write in the user's state folder (transforms/storage/copy_trust.py): the tests' own,
# shared by the test processes and the conversions they start, not the developer's ~/.local/state.
os.environ.setdefault("XDG_STATE_HOME", os.path.join("/tmp", f"tfrecord-pipelines-tests-state-{os.getuid()}"))


# What a test module of the pure core may not import: Beam, or the parts of ours that import it.
_NOT_CORE = ("apache_beam", "tfrecord_pipelines.run", "tfrecord_pipelines.api", "tfrecord_pipelines.options",
             "tfrecord_pipelines.speed", "tfrecord_pipelines.console", "tfrecord_pipelines.outputs",
             "tfrecord_pipelines.commands", "tfrecord_pipelines.transforms.storage",
             "tfrecord_pipelines.transforms.stages", "subprocess")


def _is_core_module(path: str, cache: dict = {}) -> bool:  # noqa: B006 (a cache for the session)
    """A test module of tests/unit that imports only the pure core (no Beam, no
    conversion): `make test-core` runs these in well under a minute."""
    if path not in cache:
        import ast
        if os.sep + "unit" + os.sep not in path:
            cache[path] = False
        else:
            names = set()
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                if isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names.add(node.module)
                    names.update(f"{node.module}.{a.name}" for a in node.names)
            bad = [n for n in names if n.startswith(_NOT_CORE) or n in ("conftest.convert", "tfrecord_pipelines")]
            cache[path] = not bad
    return cache[path]


def pytest_sessionfinish(session, exitstatus):
    """`-m core` runs without Beam: say so if a core test imported it."""
    if session.config.getoption("-m", default="") == "core" and "apache_beam" in sys.modules:
        session.exitstatus = 1
        print("\nerror: a test marked core imported apache_beam", file=sys.stderr)


def pytest_collection_modifyitems(config, items):
    """Marks `workers` the tests that run worker processes (a multi-process
    local run): `make test` runs them a second time with the speed layer off,
    on Beam's own worker processes (pipelines/run/runtime.py). Marks `core`
    the tests of the pure core (tests/unit modules importing no Beam)."""
    import inspect
    for item in items:
        if _is_core_module(str(item.fspath)):
            item.add_marker(pytest.mark.core)
        fn = getattr(item, "function", None)
        try:
            src = inspect.getsource(fn) if fn else ""
        except (OSError, TypeError):
            src = ""
        if "in_memory=False" in src or "direct_num_workers" in src:
            item.add_marker(pytest.mark.workers)


def image_bytes(w: int = 24, h: int = 16, fmt: str = "JPEG", mode: str = "RGB", seed: int = 0, **save) -> bytes:
    """A small noisy image of the given size, mode and format."""
    rng = np.random.RandomState(seed)
    arr = (rng.rand(h, w, 3) * 255).astype("uint8")
    im = Image.fromarray(arr).convert(mode) if mode != "RGB" else Image.fromarray(arr)
    buf = io.BytesIO()
    im.save(buf, fmt, **save)
    return buf.getvalue()


def within(seconds: float, fn):
    """fn() on a thread, failing (not hanging) past `seconds`."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed back to the test
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def write(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def make_tree(root: str, classes=("cat", "dog", "bird"), per_class: int = 6, fmt: str = "JPEG") -> dict:
    """root/<class>/<k>.jpg; returns {relative path: class}."""
    out = {}
    for c, name in enumerate(classes):
        for k in range(per_class):
            rel = f"{name}/{k}.{'jpg' if fmt == 'JPEG' else fmt.lower()}"
            write(os.path.join(root, rel), image_bytes(16 + k, 12 + c, fmt=fmt, seed=c * 100 + k))
            out[rel] = name
    return out


def settle() -> None:
    """Waits until files just written are older than a run started now by the
    margin a --versioned run trusts (transforms/core/provenance.py
    RACY_MARGIN_NS): a file changed closer to a listing than that is treated as
    changed by the next run, as its times could hide a later rewrite."""
    import time
    from tfrecord_pipelines.transforms.core.provenance import RACY_MARGIN_NS
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.1)


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def shard_checksums(path: str) -> dict:
    """A shard file's whole-file checksums as a manifest may record them."""
    import base64

    import google_crc32c
    with open(path, "rb") as f:
        data = f.read()
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "crc32c": base64.b64encode(google_crc32c.Checksum(data).digest()).decode()}


def assert_shard_matches(out: str, entry: dict) -> None:
    """The shard file matches its manifest entry: size and the recorded checksum."""
    got = shard_checksums(os.path.join(out, entry["name"]))
    keys = [k for k in ("sha256", "crc32c") if k in entry]
    assert keys, entry
    for k in ["bytes"] + keys:
        assert got[k] == entry[k], (entry["name"], k)


def convert(*args, in_memory: bool = True) -> int:
    """Runs a conversion in this process on the local runner: in Beam's
    in_memory mode, or (in_memory=False) with worker processes on all cores,
    even for an input small enough to run in-process by default
    (pipelines/run/small_run.py)."""
    from tfrecord_pipelines.commands.convert import run
    extra = ["--progress", "off"]
    if in_memory and not any(str(a).startswith("--direct_running_mode") for a in args):
        extra += ["--direct_running_mode", "in_memory"]
    elif not any(str(a).startswith(("--direct_running_mode", "--direct_num_workers")) for a in args):
        extra += ["--direct_running_mode", "multi_processing"]
    return run([str(a) for a in args] + extra)


def files_of(folder: str) -> dict:
    """{relative name: bytes} of every file an output holds but its manifest and report."""
    out = {}
    for dirpath, _, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), folder)
            if rel not in ("manifest.json", "report.html"):
                with open(os.path.join(dirpath, n), "rb") as f:
                    out[rel] = f.read()
    return out


def manifest(out: str) -> dict:
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def shard_files(out: str, split: str = "") -> list:
    """The shard files, by the glob readers use (indexes are in index/, out of it)."""
    pattern = f"{split}-*" if split else "*-?????-of-?????.tfrecord*"
    return sorted(glob.glob(os.path.join(out, pattern)))


def read_examples(out: str, split: str, spec: dict = None) -> list[dict]:
    """Every record of a split, in shard order, parsed with tf.io.parse_example
    (VarLen features, so an empty extra column reads back as an empty list);
    every image decoded with tf.io.decode_image and held to its recorded shape."""
    import tensorflow as tf
    kinds = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    m = manifest(out)
    spec = spec or {k: v for k, v in m["features"].items()}
    files = [os.path.join(out, s["name"]) for s in m["splits"][split]["shards"]]
    ds = tf.data.TFRecordDataset(files, compression_type=m["tf_compression_type"])
    features = {k: tf.io.VarLenFeature(kinds[v]) for k, v in spec.items()}
    rows = []
    for batch in ds.batch(64):
        parsed = tf.io.parse_example(batch, features)
        batch_rows = [{k: [] for k in spec} for _ in range(int(tf.shape(batch)[0]))]
        for k, sp in parsed.items():
            for (i, _), v in zip(sp.indices.numpy(), sp.values.numpy()):
                batch_rows[i][k].append(v)
        rows += batch_rows
    roles = m["feature_roles"]
    for row in rows:
        if "encoded" in roles:
            img = tf.io.decode_image(row[roles["encoded"]][0], expand_animations=False)
            assert img.shape.rank == 3
            if "height" in roles:
                assert img.shape[0] == row[roles["height"]][0]
                assert img.shape[1] == row[roles["width"]][0]
                assert img.shape[2] == row[roles["channels"]][0]
    return rows


def scalar(row: dict, key: str):
    v = row[key]
    assert len(v) == 1, (key, v)
    return v[0].decode("utf-8") if isinstance(v[0], bytes) else v[0]


def read_all(out: str) -> tuple[dict, dict]:
    """Every record of every split, read back with read_examples: ({filename: row},
    {filename: split}). A filename written twice fails."""
    rows, splits = {}, {}
    for split in manifest(out)["splits"]:
        for r in read_examples(out, split):
            rel = scalar(r, "image/filename")
            assert rel not in rows, f"{rel} written twice"
            rows[rel], splits[rel] = r, split
    return rows, splits


def check_against_source(out: str, expected: dict, source, label_key: str = "image/class/text") -> dict:
    """Reads every shard of `out` back with TensorFlow and holds it against the source:
    exactly the files of `expected` ({relative path: label}) are written, each with its
    label (a float label is compared to 1e-6), the source's bytes unchanged and their
    sha256. `source` is a folder, or a function from relative path to bytes.
    Returns {filename: row}."""
    rows, _ = read_all(out)
    assert set(rows) == set(expected), (sorted(set(rows) - set(expected)), sorted(set(expected) - set(rows)))
    for rel, r in rows.items():
        want, got = expected[rel], scalar(r, label_key)
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-6), rel
        else:
            assert got == want, (rel, got, want)
        if callable(source):
            data = source(rel)
        else:
            with open(os.path.join(source, rel), "rb") as f:
                data = f.read()
        assert r["image/encoded"][0] == data, f"{rel}: written bytes differ from the source"
        assert scalar(r, "image/key/sha256") == hashlib.sha256(data).hexdigest(), rel
    return rows


@pytest.fixture
def tree(tmp_path):
    root = str(tmp_path / "images")
    labels = make_tree(root)
    return root, labels


@pytest.fixture
def copy(good, tmp_path):
    """A scratch copy of the module's `good` output, to damage."""
    out = str(tmp_path / "copy")
    shutil.copytree(good, out)
    return out


def run_printed(tmp_path, code: str, driver: str, manifest_path: str) -> list:
    """Runs printed reader code (`tfrecords spec`) as a user would, through a
    driver script that imports it and prints one JSON line per record."""
    (tmp_path / "reader.py").write_text(code)
    (tmp_path / "driver.py").write_text(driver)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    got = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "reader.py"), manifest_path],
                         capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    return [json.loads(line) for line in got.stdout.splitlines()]


def converted(base, per_class: int, num_shards: int) -> str:
    """A small tree of three classes converted into base/out (module fixtures share one)."""
    root = str(base / "images")
    make_tree(root, per_class=per_class)
    out = str(base / "out")
    assert convert("--input", root, "--output", out, "--num_shards", str(num_shards)) == 0
    return out


@pytest.fixture(scope="session")
def installed_package(tmp_path_factory) -> str:
    """The package as pip installs it (a wheel built from the checkout,
    unpacked into a folder of its own): put the folder first on PYTHONPATH and
    `tfrecord_pipelines` comes from there, not from the checkout's editable
    install. Its dependencies stay those of this environment."""
    work = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(work / "dist"), ROOT], check=True, capture_output=True, text=True)
    wheel = glob.glob(str(work / "dist" / "*.whl"))
    assert len(wheel) == 1, wheel
    target = str(work / "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, wheel[0]],
                   check=True, capture_output=True, text=True)
    return target


def users_project(folder) -> str:
    """A user's own project folder, with the generic module names many Beam
    projects use (a `transforms.py`, a `pipelines/` package): code run from here
    has them first on sys.path, as Beam's worker processes do."""
    os.makedirs(os.path.join(folder, "pipelines"), exist_ok=True)
    with open(os.path.join(folder, "transforms.py"), "w") as f:
        f.write("raise ImportError('the user\\'s own transforms.py was imported')\n")
    with open(os.path.join(folder, "pipelines", "__init__.py"), "w") as f:
        f.write("raise ImportError('the user\\'s own pipelines package was imported')\n")
    return str(folder)


# google-auth looks up the access boundary of the tests' service-account key (tests/gcs_emulator.py) on a thread
# of its own, which cannot reach Google from here: its retries' warnings are the test key's, not the command's.
KEY_LOOKUP = "WARNING:urllib3.connectionpool:Retrying"


def own_lines(stderr: str) -> list:
    """A command's stderr lines, without the test key's access-boundary lookup."""
    return [line for line in stderr.strip().splitlines() if not line.startswith(KEY_LOOKUP)]
