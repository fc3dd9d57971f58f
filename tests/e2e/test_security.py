"""Security: table paths stay inside the image root unless absolute paths are
explicitly allowed, output paths are never built from labels or names, and
no credentials or tokens end up in logs or the manifest."""
import json
import os
import subprocess
import sys

from conftest import ROOT, convert, image_bytes, make_tree, manifest, read_examples, scalar, write


def test_absolute_paths_only_when_allowed(tmp_path):
    outside = write(str(tmp_path / "elsewhere" / "x.jpg"), image_bytes())
    root = str(tmp_path / "root")
    write(os.path.join(root, "in.jpg"), image_bytes(seed=1))
    table = write(str(tmp_path / "t.csv"), f"filename,label\nin.jpg,a\n{outside},b\n".encode())
    out = str(tmp_path / "refused")
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--max_reject_fraction", "1") == 0
    assert manifest(out)["rejects_by_reason"] == {"unsafe_path": 1}
    out = str(tmp_path / "allowed")
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--allow_absolute_paths") == 0
    assert sorted(scalar(r, "image/filename") for r in read_examples(out, "train")) == [outside, "in.jpg"]


def test_split_names_from_data_cannot_leave_the_output(tmp_path):
    root = str(tmp_path / "root")
    for i, split in enumerate(["train", "../../escape", "a/b", "train-x", "ok_2"]):
        write(os.path.join(root, f"{i}.jpg"), image_bytes(seed=i))
    rows = "".join(f"{i}.jpg,cat,{s}\n" for i, s in enumerate(["train", "../../escape", "a/b", "train-x", "ok_2"]))
    table = write(str(tmp_path / "t.csv"), ("filename,label,split\n" + rows).encode())
    out = str(tmp_path / "out")
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--max_reject_fraction", "1") == 0
    m = manifest(out)
    assert set(m["splits"]) == {"train", "ok_2"} and m["rejects_by_reason"] == {"bad_split": 3}
    assert sorted(os.listdir(tmp_path)) == ["out", "root", "t.csv"]


def test_no_credentials_in_logs_or_manifest(tmp_path):
    images, out = str(tmp_path / "images"), str(tmp_path / "out")
    make_tree(images, per_class=1)
    key = write(str(tmp_path / "key.json"), json.dumps({
        "type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----SECRETKEYMATERIAL",
        "client_email": "robot@secret-project.iam.gserviceaccount.com"}).encode())
    env = dict(os.environ, GOOGLE_APPLICATION_CREDENTIALS=key, TFRECORDS_TOKEN="tok-SECRETTOKEN")
    p = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", "--input", images, "--output", out,
                        "--progress", "on", "--service_account_email", "sa-SECRETACCOUNT@x.iam.gserviceaccount.com",
                        "--impersonate_service_account", "imp-SECRETIMPERSONATE@x.iam.gserviceaccount.com",
                        "--labels", "team=SECRETLABEL", "--direct_running_mode", "in_memory"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    written = p.stdout + p.stderr
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            written += f.read().decode("utf-8", "replace")
    for secret in ("SECRETKEYMATERIAL", "secret-project", "SECRETTOKEN", "SECRETACCOUNT", "SECRETIMPERSONATE",
                   "SECRETLABEL", key):
        assert secret not in written, secret
