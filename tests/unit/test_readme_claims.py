"""Every sentence of the docs (README.md, docs/*.md) that says the tests check something names tests that
exist. CLAIMS maps each such sentence (a distinctive part of it) to the tests
that back it; a claim about the tests that is not in CLAIMS fails here,
and so does a claim whose test was renamed or removed. Rows of the faults table
name their own test and are checked by tests/unit/test_integrity_table.py."""
import ast
import glob
import os
import re

from conftest import HERE
from docs_text import doc_files, read

CLAIMS = {
    "(`tests/e2e/test_process_state.py` compares a process's state before and after two": [
        "test_process_state.py::test_a_library_call_leaves_the_process_as_it_found_it"],
    "The import direction is enforced by `tests/unit/test_layering.py`": [
        "test_layering.py::test_the_check_sees_a_stage_imported_in_any_form",
        "test_layering.py::test_a_stage_never_imports_another_stage",
        "test_layering.py::test_each_room_imports_only_the_rooms_it_may",
        "test_layering.py::test_only_the_command_line_applies_the_speed_layer",
        "test_layering.py::test_the_product_code_has_no_import_cycle",
        "test_layering.py::test_the_cycle_check_sees_a_cycle_through_a_function_import",
        "test_layering.py::test_only_the_dispatcher_imports_the_commands",
        "test_layering.py::test_every_command_has_its_module_and_the_dispatcher_routes_to_it"],
    "`tests/e2e/test_docs_site.py` builds the site with `mkdocs build --strict`": [
        "test_docs_site.py::test_the_site_builds_in_strict_mode"],
    "every sentence saying the tests check something names its tests": [
        "test_readme_claims.py::test_every_claim_about_the_tests_is_mapped",
        "test_readme_claims.py::test_every_named_test_exists"],
    "the test suite builds it in strict mode": [
        "test_docs_site.py::test_the_site_builds_in_strict_mode",
        "test_docs_snippets.py::test_every_block_is_run_or_says_why_not"],
    "(`tests/e2e/test_small_run.py` holds shards, rejects, label map and manifest to that)": [
        "test_small_run.py::test_a_small_input_runs_in_process_and_writes_what_workers_write",
        "test_small_run.py::test_the_command_imports_beam_lean_and_writes_the_same_bytes"],
    "the test suite checks every accepted case against TensorFlow": [
        "test_corpus.py::test_folder_corpus", "test_corpus.py::test_table_corpus",
        "test_images.py::test_valid_images_decode_in_tensorflow_to_the_recorded_shape"],
    "converted by `tests/e2e/test_corpus.py` with each written record decoded by `tf.io.decode_image`": [
        "test_corpus.py::test_folder_corpus", "test_corpus.py::test_readme_table_tells_the_truth"],
    "cannot produce that case, because the tests run as root": [],  # says what is not tested
    "Each guarantee below is checked by the test suite": [
        "test_faults.py::test_replayed_bundles_give_the_same_output",
        "test_faults.py::test_attempts_failing_midway_then_retried_on_a_fresh_dofn",
        "test_faults.py::test_killed_while_writing_shards", "test_faults.py::test_killed_while_publishing",
        "test_verify.py::test_bit_flips", "test_verify.py::test_shard_cut_at_a_record_boundary_is_caught_by_the_count",
        "test_verify.py::test_trailing_garbage", "test_verify.py::test_missing_and_stale_shards",
        "test_verify.py::test_image_bytes_swapped_inside_a_valid_record",
        "test_readme_promises.py::test_overwrite_removes_stale_shards_of_another_compression_and_split",
        "test_faults.py::test_two_conversions_into_one_output", "test_faults.py::test_two_conversions_started_at_once",
        "test_security.py::test_absolute_paths_only_when_allowed",
        "test_security.py::test_split_names_from_data_cannot_leave_the_output",
        "test_security.py::test_no_credentials_in_logs_or_manifest"],
    "the tests check that none of them reach the manifest, the rejects or the logs": [
        "test_security.py::test_no_credentials_in_logs_or_manifest"],
    "`tests/unit/test_integrity_table.py` checks that the test exists": [
        "test_integrity_table.py::test_every_row_names_a_test_that_asserts_its_message"],
    "The tests run all of this against a GCS emulator": [
        "test_gcs.py::test_gs_to_gs_multi_process", "test_gcs.py::test_local_to_gs_and_table_on_gcs",
        "test_gcs.py::test_shards_larger_than_an_upload_chunk", "test_gcs.py::test_verify_and_inspect_on_gs"],
    "builds the sdist that `--setup_file` stages": [
        "test_packaging.py::test_the_staged_sdist_installs_and_converts_in_a_clean_virtualenv"],
    "builds the Dataflow job in Beam's dry-run mode and checks its stages": [
        "test_dataflow.py::test_dry_run_builds_the_dataflow_job"],
    "checks that it matches the options": ["test_dataflow.py::test_template_metadata_matches_the_options"],
    "Offline, the tests check the dry-run job, the template entry point and the scripts": [
        "test_dataflow.py::test_dry_run_builds_the_dataflow_job",
        "test_dataflow.py::test_flex_template_launch_of_the_scheduled_body",
        "test_dataflow.py::test_build_and_run_scripts", "test_dataflow.py::test_scheduler_job"],
    "`tests/e2e/test_versions.py`, `tests/e2e/test_readme_promises.py`, `tests/e2e/test_gcs.py` and "
    "`tests/e2e/test_publish_guards.py` check:": [
        "test_readme_promises.py::test_latest_moves_only_after_the_manifest",
        "test_versions.py::test_versions_latest_unchanged_and_stable_ids",
        "test_readme_promises.py::test_an_unchanged_versioned_run_reads_no_image",
        "test_versions.py::test_a_failed_run_never_moves_the_pointer",
        "test_gcs.py::test_versioned_dataset_in_a_bucket",
        "test_publish_guards.py::test_latest_never_moves_to_an_empty_or_shrunken_version",
        "test_publish_guards.py::test_a_run_that_read_latest_before_another_published_stops"],
    "`tests/e2e/test_incremental.py` holds each step to a fresh full conversion": [
        "test_incremental.py::test_ten_increments_are_each_byte_identical_to_a_full_conversion"],
    "`tests/e2e/test_incremental.py` and `tests/e2e/test_incremental_gcs.py` check, each output": [
        "test_incremental.py::test_ten_increments_are_each_byte_identical_to_a_full_conversion",
        "test_incremental.py::test_a_label_changed_in_a_table_is_re_read_and_the_rest_copied",
        "test_incremental_gcs.py::test_increments_in_a_bucket_are_byte_identical_and_read_only_what_changed",
        "test_incremental.py::test_changed_options_or_full_convert_everything_and_say_why",
        "test_incremental.py::test_incremental_with_other_options_is_byte_identical",
        "test_incremental.py::test_compressed_or_array_record_shards_are_converted_in_full",
        "test_incremental.py::test_a_missing_or_damaged_previous_shard_is_read_from_the_sources",
        "test_incremental.py::test_damaged_or_forged_provenance_never_yields_a_wrong_record",
        "test_incremental.py::test_killed_while_writing_then_resumed_is_byte_identical",
        "test_incremental.py::test_killed_while_publishing_then_resumed_is_byte_identical",
        "test_incremental.py::test_an_incremental_run_killed_and_resumed_is_byte_identical_to_a_full_one",
        "test_incremental_gcs.py::test_a_killed_run_into_a_bucket_resumes_from_its_resume_area",
        "test_incremental.py::test_two_runs_racing_on_one_root_the_lock_refuses_one",
        "test_incremental.py::test_keep_versions_removes_the_oldest_and_says_so",
        "test_incremental.py::test_a_dry_run_says_what_would_happen_and_reads_and_writes_nothing"],
    "checks that the scheduler body uses only declared template parameters": [
        "test_dataflow.py::test_flex_template_launch_of_the_scheduled_body", "test_dataflow.py::test_scheduler_job"],
    "`tests/e2e/test_spill.py` holds the two to byte-identical shards, rejects and label maps": [
        "test_spill.py::test_same_output_whether_metadata_waits_in_files_or_in_the_runner",
        "test_spill.py::test_same_output_for_a_table_and_a_versioned_rerun"],
    "runs conversions in a pseudo-terminal and checks the bar's": [
        "test_progress.py::test_a_terminal_shows_a_bar_with_total_rate_and_time_left",
        "test_progress.py::test_two_reads_show_validation_then_writing"],
    "converts a tree with rejects, from local disk and from the GCS emulator to it, and holds": [
        "test_portable.py::test_portable_runner_gives_the_direct_runners_output",
        "test_portable.py::test_portable_runner_from_and_to_a_bucket"],
    "converts one input with both virtualenvs' Beams and compares every byte": [
        "test_beam_range.py::test_the_oldest_and_the_newest_beam_write_the_same_bytes",
        "test_packaging.py::test_pip_install_beside_the_installed_beam_keeps_it"],
    "The tests hold its output byte for byte against": [
        "test_codec.py::test_encoding_is_protobufs_deterministic_serialization",
        "test_codec.py::test_tensorflow_reads_our_records"],
}

# A sentence that says tests check something: "the tests check", "checked by the test
# suite", "tests/test_x.py builds ... and checks", "The tests hold", "They cover", ...
CLAIM = re.compile(r"\b(?:[Tt]ests?(?: suite)?|tests/(?:\w+/)?test_\w+\.py`?)\b[^.|]{0,160}?"
                   r"\b(?:check|checks|checked|cover|covers|hold|holds|builds|run all)\b"
                   r"|\bchecked by the test suite\b|\bconverted by `tests/")


def readme() -> str:
    """All the documentation's prose, one file after another (HTML comments, such as the
    snippets' not-run reasons, left out)."""
    texts = []
    for rel in doc_files():
        lines = re.sub(r"<!--.*?-->", "", read(rel), flags=re.S).splitlines()
        # Table rows name their own tests (tests/unit/test_integrity_table.py, tests/e2e/test_corpus.py).
        texts.append(re.sub(r"\s+", " ", " ".join(line for line in lines if not line.lstrip().startswith("|"))))
    return " \n ".join(texts)


def find_test_file(filename: str) -> str:
    """tests/<group>/<filename> (unit, stages, e2e), or "" if there is none."""
    found = glob.glob(os.path.join(HERE, "*", filename))
    return found[0] if found else ""


def defined_tests(filename: str) -> set:
    with open(find_test_file(filename), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def test_every_claim_about_the_tests_is_mapped():
    text = readme()
    spans = []
    for claim in CLAIMS:
        start = text.find(claim)
        assert start >= 0, f"the docs no longer say {claim!r}: update CLAIMS"
        # the whole sentence around the claim
        begin = max(text.rfind(". ", 0, start) + 1, 0)
        end = text.find(". ", start + len(claim))
        spans.append((begin, len(text) if end < 0 else end + 1))
    found = list(CLAIM.finditer(text))
    assert len(found) >= 10, [m.group(0) for m in found]  # the pattern still finds the claims
    unmapped = [m.group(0) for m in found if not any(b <= m.start() < e for b, e in spans)]
    assert not unmapped, f"claims in the docs about the tests that name no test (add them to CLAIMS): {unmapped}"


def test_every_named_test_exists():
    missing = []
    for claim, tests in CLAIMS.items():
        for node in tests:
            filename, name = node.split("::")
            if not find_test_file(filename) or name not in defined_tests(filename):
                missing.append((claim, node))
    assert not missing, missing


def test_every_test_file_the_readme_names_exists():
    text = readme()
    for name in set(re.findall(r"tests/((?:\w+/)?test_\w+\.py|corpus\.py|gcs_emulator\.py)", text)):
        assert os.path.exists(os.path.join(HERE, name)), name
