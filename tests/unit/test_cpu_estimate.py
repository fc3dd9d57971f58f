"""The --dry_run's CPU estimate (pipelines/run/cpu_estimate.py): per KB read, by
what is done to each image, a bucket's requests on top, and the line it prints."""
import pytest

from tfrecord_pipelines.run import cpu_estimate as ce
from tfrecord_pipelines.transforms.core.images import Validation


def test_the_cost_grows_with_the_bytes_read_at_each_modes_measured_rate():
    for validation, resized, work in ((Validation.HEADER, False, "header"), (Validation.FULL, False, "full"),
                                      (Validation.HEADER, True, "resize"), (Validation.FULL, True, "resize")):
        one = ce.estimate(1_000, 100_000_000, validation, resized)
        two = ce.estimate(1_000, 200_000_000, validation, resized)
        assert one.work == work and one.sized
        assert one.local_s == pytest.approx(100_000 * ce.US_PER_KB[work] / 1e6)
        assert two.local_s == pytest.approx(2 * one.local_s)
    header, full, resize = (ce.estimate(10, 10**6, v, r).local_s
                            for v, r in ((Validation.HEADER, False), (Validation.FULL, False), (Validation.FULL, True)))
    assert header < full < resize


def test_a_bucket_adds_its_requests_per_image_and_prices_the_vcpu_hours():
    e = ce.estimate(1_280_000, 1_280_000 * 110_000, Validation.FULL, False)
    assert e.bucket_s - e.local_s == pytest.approx(1_280_000 * ce.US_PER_REMOTE_IMAGE / 1e6)
    assert e.vcpu_hours == pytest.approx(e.bucket_s / 3600)
    (line,) = ce.describe(e, remote_input=False)
    assert line.startswith("estimated CPU for the 1,280,000 images to read (140.8 GB, full validation): ")
    assert f"{e.vcpu_hours:,.2f} vCPU-h from a bucket (as on Dataflow" in line
    assert f"{e.local_s / 3600:,.2f} vCPU-h from a local disk" in line


def test_without_sizes_each_image_counts_as_the_measured_size_and_it_says_so():
    e = ce.estimate(500, 0, Validation.FULL, False)
    assert not e.sized and e.kb == 500 * ce.KB_WHEN_UNSIZED
    (line,) = ce.describe(e, remote_input=True)
    assert f"no sizes listed: ~{ce.KB_WHEN_UNSIZED} KB each" in line
    assert "from a local disk" not in line  # the input is a bucket: only that figure


def test_nothing_to_read_costs_nothing():
    e = ce.estimate(0, 0, Validation.FULL, False)
    assert e.local_s == e.bucket_s == 0
    assert ce.describe(e, remote_input=False) == ["estimated CPU: none (no image to read)"]
    small = ce.estimate(3, 30_000, Validation.HEADER, False)
    assert f"{small.local_s:.2f} CPU s from a local disk, {small.bucket_s:.2f} CPU s from a bucket" in \
        ce.describe(small, False)[0]


def test_an_incremental_versions_copies_are_priced_per_kb_copied_as_measured():
    """bench.incremental (a): 550 images read and 49,950 records copied cost
    22.8 CPU s (median of 3); the rates give that back."""
    e = ce.estimate(550, 64_100_000, Validation.FULL, False, copied=49_950, copied_bytes=5_820_000_000)
    assert e.local_s == pytest.approx(22.8, rel=0.01)
    assert e.bucket_s - e.local_s == pytest.approx(550 * ce.US_PER_REMOTE_IMAGE / 1e6)  # copies: no request each
    (line,) = ce.describe(e, remote_input=False)
    assert line.startswith("estimated CPU for the 550 images to read (64.1 MB, full validation) and the 49,950 "
                           "records to copy (5.8 GB): 23 CPU s from a local disk, "), line
    only_copies = ce.estimate(0, 0, Validation.FULL, False, copied=10, copied_bytes=1_000_000)
    assert only_copies.local_s == pytest.approx(1_000 * ce.US_PER_KB_COPIED / 1e6)
    assert ce.describe(only_copies, False)[0].startswith("estimated CPU for the 10 records to copy (1.0 MB): ")
