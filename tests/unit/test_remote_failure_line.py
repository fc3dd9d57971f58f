"""describe_failure on a remote worker's traceback, as a runner hands it to
the launcher (text): our errors are found by their type whatever its name
ends in, the traceback is left out, and local paths are named as what the
workers may not see."""
from tfrecord_pipelines.run.lifecycle import describe_failure

WORKER = """Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1512, in apache_beam.runners.common.DoFnRunner.process
  File "/site/tfrecord_pipelines/transforms/stages/publish.py", line 262, in _publish
    run_lock.check(out.lock_dir, out.run_id)
tfrecord_pipelines.transforms.storage.run_lock.{name}: {message}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1602, in apache_beam.runners.common.DoFnRunner._reraise_augmented
RuntimeError: {message} [while running 'Dataset/Publish/Publish']
"""


def test_our_error_is_named_by_its_type_without_the_traceback():
    text = WORKER.format(name="LockLost", message="run r1 no longer holds the lock gs://b/out/.tfrecords.lock")
    line = describe_failure(RuntimeError(text), "gs://b/out", "r1", remote=True)
    assert line == ("the job failed: LockLost: run r1 no longer holds the lock gs://b/out/.tfrecords.lock "
                    "(rerun with --debug for the worker's traceback)")


def test_a_name_not_ending_in_error_is_found_and_local_paths_are_named():
    text = WORKER.format(name="NotPublishable", message="no record to publish")
    line = describe_failure(RuntimeError("Dataflow pipeline failed. State: FAILED, Error:\n" + text), "/data/out",
                            remote=True, local_paths=(("--input", "/data/imgs"), ("--output", "/data/out")))
    assert line.startswith("the job failed: NotPublishable: no record to publish; --input /data/imgs, --output "
                           "/data/out are paths on this machine, which the remote runner's workers may not see")
    assert "Traceback" not in line and "\n" not in line


def test_an_os_error_of_a_remote_worker_names_the_path_it_may_not_see():
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/out/.tfrecords-staging-r1/a' "
            "[while running 'Dataset/WriteShards']\n")
    line = describe_failure(RuntimeError(text), "/data/out", remote=True, local_paths=(("--output", "/data/out"),))
    assert line.startswith("No such file or directory (/data/out/.tfrecords-staging-r1/a); --output /data/out is a "
                           "path on this machine, which the remote runner's workers may not see")
    # The same text from a local run: no word of workers.
    assert "workers" not in describe_failure(RuntimeError(text), "/data/out")
