"""A generated version name is new even when two runs publish within one second."""
import datetime

from tfrecord_pipelines.outputs import versions

NOW = datetime.datetime(2026, 12, 2, 12, 9, 20, tzinfo=datetime.timezone.utc)


def test_the_name_is_the_utc_second():
    assert versions.new_version_name(NOW) == "v20261202-120920"
    assert versions.new_version_name(NOW, previous="v20261202-120919") == "v20261202-120920"


def test_a_run_within_the_same_second_gets_the_next_suffix():
    assert versions.new_version_name(NOW, previous="v20261202-120920") == "v20261202-120920-2"
    assert versions.new_version_name(NOW, previous="v20261202-120920-2") == "v20261202-120920-3"
    for previous in ("v20261202-120920", "v20261202-120920-2"):
        name = versions.new_version_name(NOW, previous=previous)
        assert name != previous and name > previous and versions.VERSION_NAME.match(name)
