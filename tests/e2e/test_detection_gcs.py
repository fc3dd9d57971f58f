"""--annotations on a bucket: a COCO JSON and its images on gs:// (against the
GCS emulator the tests start), converted to gs://, read back with TensorFlow."""
import os

from conftest import convert, manifest
from detection_data import make_coco
from gcs_emulator import BUCKET, download_prefix, gcs, upload_tree  # noqa: F401 (fixture)
from test_detection import check_objects, read_detection


def test_coco_from_and_to_a_bucket(gcs, tmp_path):
    src = make_coco(str(tmp_path / "coco"), n=10, seed=11)
    upload_tree(str(tmp_path / "coco"), "det")
    out = f"gs://{BUCKET}/detout"
    # The image folder is found as on disk: annotations/instances_train2017.json beside train2017/.
    assert convert("--annotations", f"gs://{BUCKET}/det/annotations/instances_train2017.json", "--output", out,
                   "--num_shards", "2") == 0
    local = str(tmp_path / "dl")
    names = download_prefix("detout", local)
    assert "label_map.pbtxt" in names
    m = manifest(local)
    assert m["options"]["inputs"]["root"] == f"gs://{BUCKET}/det/train2017"
    rows = read_detection(local, "train")
    assert set(rows) == set(src["expected"])
    for rel, row in rows.items():
        check_objects(row, src["expected"][rel])
    assert m["detection"]["reconciles"] and m["detection"]["boxes"]["written"] == \
        sum(map(len, src["expected"].values()))
