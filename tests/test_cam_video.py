"""Grad-CAM in space and time: layouts of clips, every method over (t, h, w), parity with
pytorch-grad-cam's 5D Grad-CAM, known-answer clips and volumes, clips in and explained clips out."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from _clipnet import BrightNet, SquareNet, moving_square, square_boxes
from _media import write_clip
from _numeric import bound
from PIL import Image
from torch import nn

from nstcam.cam import SPACETIME_METHODS, GradCAM
from nstcam.cam.clips import tent, window_starts
from nstcam.cam.registry import REGISTRY
from nstcam.cam.volumes import MAX_VOXELS, load_volume
from nstcam.layouts import LayoutError, detect_layout, to_channels_first, token_grid
from nstcam.video import VideoError

FIRST, LAST, N = 20, 29, 48


def pearson(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.corrcoef(a, b)[0, 1])


def square_cam(method: str = "gradcam", **kw) -> GradCAM:
    net = SquareNet()
    return GradCAM(
        net,
        target_layer="relu",
        method=method,
        input_size=64,
        frames=8,
        mean=0.45,
        std=0.225,
        device="cpu",
        **kw,
    )


@pytest.fixture(scope="module")
def square_clip(tmp_path_factory) -> Path:
    return write_clip(
        tmp_path_factory.mktemp("clips") / "square.mp4", moving_square(N, FIRST, LAST), audio=True
    )


# -- layouts ---------------------------------------------------------------------------------------
def test_clip_layouts_are_read_from_the_shape_and_refused_when_two_fit():
    assert detect_layout((1, 512, 2, 7, 7), 16, 112, 112) == "ncthw"
    assert detect_layout((1, 8, 7, 7, 768), 16, 224, 224) == "nthwc"
    assert token_grid(393, 16, 224, 224) == (1, 8, 7, 7)  # MViT: not 2 x 14 x 14 (time downsampled more)
    assert token_grid(197, 224, 224) == (1, 14, 14)  # images unchanged
    assert detect_layout((1, 393, 768), 16, 224, 224) == "tokens"
    with pytest.raises(LayoutError, match="layout='ncthw' or layout='nthwc'"):
        detect_layout((1, 8, 8, 8, 8), 8, 8, 8)
    with pytest.raises(LayoutError, match="choose another layer"):
        detect_layout((1, 512, 7, 7), 16, 112, 112)  # a 4D activation of a clip


def test_channels_first_keeps_each_cell_where_it_was():
    a = torch.randn(2, 5, 8, 7, 7)  # (N, C, t, h, w): MViT's grid of a 16 x 224 x 224 clip
    last = a.permute(0, 2, 3, 4, 1).contiguous()
    tokens = torch.cat([torch.randn(2, 1, 5), last.reshape(2, 8 * 7 * 7, 5)], 1)
    assert torch.equal(to_channels_first(last, "nthwc", 16, 224, 224), a)
    assert torch.equal(to_channels_first(tokens, "tokens", 16, 224, 224), a)
    assert to_channels_first(a, "ncthw", 16, 224, 224) is a
    with pytest.raises(LayoutError, match="does not fit"):
        to_channels_first(a, "nchw", 16, 224, 224)


# -- video classifiers by name ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arch", "layer", "layout", "raw"),
    [("r3d_18", "layer4", "ncthw", (2, 7, 7)), ("mc3_18", "layer4", "ncthw", (16, 7, 7))],
)
def test_video_resnets_give_maps_over_time(arch, layer, layout, raw):
    cam = GradCAM(arch, weights="random", device="cpu")
    assert (cam.target_layer, cam.layout, cam.frames, cam.input_size) == (layer, layout, 16, 112)
    assert len(cam.categories) == 400 and cam.label(0) == "abseiling"  # Kinetics-400
    assert cam.preprocessing.mean == pytest.approx((0.43216, 0.394666, 0.37645))
    x = torch.randn(2, 3, 16, 112, 112, generator=torch.Generator().manual_seed(0))
    maps = cam.compute(x, targets=[3, 4])
    peaks = maps.amax(dim=(1, 2, 3))  # 1, or 0 where ReLU leaves nothing (random weights)
    assert maps.shape == (2, 16, 112, 112) and maps.min() >= 0 and set(peaks.tolist()) <= {0.0, 1.0}
    assert peaks.max() == 1
    assert cam.compute(x, raw=True).shape == (2, *raw)
    from nstcam.cam.targets import ClassTarget

    assert cam.compute(x, targets=ClassTarget(3, softmax=True)).shape == (2, 16, 112, 112)  # target objects
    with pytest.raises(ValueError, match=r"\(N, C, T, H, W\)"):
        cam.compute(x[:, :, 0])
    with pytest.raises(ValueError, match="explain_video"):
        cam.explain(Image.new("RGB", (64, 64)))


@pytest.mark.parametrize(
    ("arch", "layer", "layout", "raw"),
    [
        ("r2plus1d_18", "layer4", "ncthw", (2, 7, 7)),
        ("s3d", "features.15", "ncthw", (2, 7, 7)),
        ("mvit_v2_s", "blocks.15.norm1", "tokens", (8, 7, 7)),
        ("swin3d_t", "norm", "nthwc", (8, 7, 7)),
    ],
)
def test_every_video_family_reads_its_default_layer_without_reshape_code(arch, layer, layout, raw):
    cam = GradCAM(arch, weights="random", device="cpu")
    assert (cam.target_layer, cam.layout) == (layer, layout)
    s = cam.input_size
    x = torch.randn(1, 3, 16, s, s, generator=torch.Generator().manual_seed(0))
    raws, probs = cam.class_maps(x, [0, 1])
    assert raws.shape == (2, 1, *raw) and probs.shape == (1, 400)
    assert cam.compute(x, targets=1).shape == (1, 16, s, s)


def test_mvit_takes_exactly_its_window_and_image_models_take_no_frames():
    with pytest.raises(ValueError, match="exactly 16 frames"):
        GradCAM("mvit_v2_s", weights="random", device="cpu", frames=8)
    with pytest.raises(ValueError, match="leave frames unset"):
        GradCAM("resnet18", weights="random", device="cpu", frames=8)


def test_methods_that_do_not_generalise_say_why_and_the_others_all_run_over_time():
    for name in ("fullgrad", "guided-backprop", "guided-gradcam", "legrad"):
        with pytest.raises(ValueError, match="does not explain clips or volumes: .+; use one of gradcam"):
            square_cam(name)
    x = torch.randn(1, 3, 4, 12, 16, generator=torch.Generator().manual_seed(0))  # KPCA: 768 positions
    x[:, :, 1:3, 3:8, 4:10] += 4  # a bright block: class 1's evidence
    for name in SPACETIME_METHODS:
        if name == "cam":
            continue  # reads a pooled linear head; SquareNet's logits are that, checked below
        cam = square_cam(name, n_samples=2, scorecam_batch=8)
        maps = cam.compute(x, targets=1)
        assert maps.shape == (1, 4, 12, 16), name
        inside = maps[0, 1:3, 3:8, 4:10].sum() / maps[0].sum()
        if name != "randomcam":
            assert inside > 0.5, (name, float(inside))
    assert square_cam("cam").compute(x, targets=1).shape == (1, 4, 12, 16)
    assert {"gradcam", "scorecam", "ablationcam", "eigencam", "layercam"} <= set(SPACETIME_METHODS)
    assert all(REGISTRY[m].flat_only for m in REGISTRY if m not in SPACETIME_METHODS)


# -- parity: pytorch-grad-cam's 5D Grad-CAM, and the papers' formulas in float64 -------------------
def _float64_terms(model: nn.Module, layer: nn.Module, x: torch.Tensor, classes: list[int]):
    """(A, G) of ``layer`` in float64 for each image's class (G of the sum of their logits)."""
    m = model.double()
    got = {}
    handle = layer.register_forward_hook(lambda _m, _i, o: got.setdefault("a", o))
    try:
        out = m(x.double())
    finally:
        handle.remove()
        model.float()
    a = got["a"]
    (g,) = torch.autograd.grad(out.gather(1, torch.tensor(classes)[:, None]).sum(), a)
    return a.detach(), g


@pytest.mark.parametrize("arch", ["r3d_18", "r2plus1d_18"])
def test_5d_grad_cam_equals_pytorch_grad_cam_and_the_float64_formulas(arch):
    pgc = pytest.importorskip("pytorch_grad_cam")
    from pytorch_grad_cam.utils.image import scale_cam_image
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    cam = GradCAM(arch, weights="random", device="cpu")
    x = torch.randn(2, 3, 16, 48, 48, generator=torch.Generator().manual_seed(1))  # layer4: 2 x 3 x 3
    classes = cam.predict(x).argmax(1).tolist()  # each clip's top class
    a, g = _float64_terms(cam.model, cam.model.layer4, x, classes)
    dims = (2, 3, 4)
    want = {
        "gradcam": (g.mean(dims)[..., None, None, None] * a).sum(1).relu(),
        "layercam": (g.relu() * a).sum(1).relu(),
        "hirescam": (g * a).sum(1).relu(),
        "xgradcam": (((a * g).sum(dims) / (a.sum(dims) + 1e-7))[..., None, None, None] * a).sum(1).relu(),
    }
    g2, g3 = g**2, g**3
    alpha = g2 / (2 * g2 + a.sum(dims, keepdim=True) * g3)
    alpha = torch.where(torch.isfinite(alpha), alpha, 0)
    want["gradcam++"] = (((alpha * g.relu()).sum(dims))[..., None, None, None] * a).sum(1).relu()
    refs = {
        "gradcam": pgc.GradCAM,
        "layercam": pgc.LayerCAM,
        "hirescam": pgc.HiResCAM,
        "xgradcam": pgc.XGradCAM,
    }
    for name, formula in want.items():
        raw = GradCAM(cam.model, method=name, device="cpu").compute(x, targets=classes, raw=True)
        for i in range(2):
            assert pearson(raw[i], formula[i]) >= 0.9999, (name, i)
            assert float((raw[i].double() - formula[i]).abs().max()) <= 1e-4 * float(formula[i].max()) + 1e-9
        if name not in refs:
            continue  # pytorch-grad-cam's Grad-CAM++ adds an eps that changes the map (test_cam_parity.py)
        with refs[name](model=cam.model, target_layers=[cam.model.layer4]) as ref:
            theirs = ref(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes])
            acts = ref.activations_and_grads
            their_raw = np.maximum(
                ref.get_cam_image(
                    x, None, None, acts.activations[0].numpy(), acts.gradients[0].numpy(), False
                ),
                0,
            )
        ours_their_way = scale_cam_image(raw.numpy(), (48, 48, 16))  # their resizing: a cubic spline zoom
        for i in range(2):
            assert pearson(raw[i], their_raw[i]) >= 0.999, (name, i)
            assert pearson(ours_their_way[i], theirs[i]) >= 0.999, (name, i)


# -- clips in, explained clips out -----------------------------------------------------------------
def test_windows_cover_every_frame_and_blend_with_a_tent():
    assert window_starts(48, 8, 4)[-1] == 40 and window_starts(50, 8, 4)[-2:] == [40, 42]
    assert window_starts(5, 16, 8) == [0]
    assert list(tent(4)) == [1, 2, 2, 1] and list(tent(1)) == [1]


def test_the_known_answer_clip_maps_the_square_and_scores_its_frames(square_clip, tmp_path):
    cam = square_cam()
    r = cam.explain_video(
        square_clip,
        target=1,
        stride=4,
        output=tmp_path / "out.mp4",
        contact_sheet=tmp_path / "sheet.png",
        csv_path=tmp_path / "scores.csv",
        evaluate=True,
    )
    c = r.classes[0]
    f = c.faithfulness  # over space and time, on the strongest window: 0.28 / 0.60 against 0.38 / 0.50
    assert (
        f["deletion_auc"] < f["random_deletion_auc"] - 0.05
        and f["insertion_auc"] > f["random_insertion_auc"] + 0.05
    )
    assert r.frames == N and r.window == 8 and len(r.windows) == 11 and c.index == 1
    assert FIRST <= c.peak_frame <= LAST and FIRST - 4 <= c.peak[0] and c.peak[1] <= LAST + 4
    outside = np.r_[c.frame_scores[: FIRST - 8], c.frame_scores[LAST + 8 :]]
    assert c.frame_scores[FIRST:LAST].min() > outside.max() + 0.05
    boxes = square_boxes(N, FIRST, LAST)
    for t, (x0, y0, x1, y1) in boxes.items():
        m = c.frame_map(t, (96, 64))
        assert m[max(0, y0 - 3) : y1 + 3, max(0, x0 - 3) : x1 + 3].sum() >= 0.95 * m.sum(), t
    assert c.maps[: FIRST - 2].max() == 0 and c.maps[LAST + 2 :].max() == 0 and c.maps.max() == 1
    with av.open(str(r.output)) as f:
        kinds = sorted(s.type for s in f.streams)
        frames = sum(1 for _ in f.decode(video=0))
    assert kinds == ["audio", "video"] and frames == N
    rows = list(csv.reader(open(r.csv)))
    assert rows[0][:3] == ["window", "first_frame", "last_frame"] and len(rows) == 1 + len(r.windows)
    assert float(rows[1 + 5][5]) == pytest.approx(c.window_scores[5], abs=1e-6)
    sheet = Image.open(r.contact_sheet)
    assert sheet.width >= 8 * 96 and sheet.height > 64  # each 96x64 frame, its caption below it
    assert np.asarray(sheet.convert("L"))[64:].mean() < 60  # the caption's dark strip, white text


def test_top_classes_come_from_the_whole_clip_and_progress_can_cancel(square_clip, tmp_path):
    cam = square_cam()
    seen = []
    r = cam.explain_video(square_clip, top_k=2, stride=8, progress=lambda d, t: seen.append((d, t)))
    assert [c.index for c in r.classes] == [0, 1]  # class 0's constant logit wins on most windows
    assert seen[-1][0] == seen[-1][1] == 2 * len(r.windows)
    with pytest.raises(ValueError, match="cancelled after 2 of"):
        cam.explain_video(square_clip, target=1, output=tmp_path / "x.mp4", progress=lambda d, t: d < 2)
    assert not (tmp_path / "x.mp4").exists()


def test_a_clip_shorter_than_a_window_is_padded_and_explained(tmp_path):
    clip = write_clip(tmp_path / "short.mp4", moving_square(5, 1, 3))
    r = square_cam().explain_video(clip, target=1)
    assert r.frames == 5 and r.windows == [(0, 4)] and r.classes[0].maps.shape[0] == 5


def test_an_image_classifier_explains_a_clip_frame_by_frame_with_smoothing(square_clip):
    cam = GradCAM(BrightNet(2, 3), target_layer="relu", input_size=64, mean=0.45, std=0.225, device="cpu")
    plain = cam.explain_video(square_clip, target=1)
    smooth = cam.explain_video(square_clip, target=1, smooth=2)
    assert plain.window == 1 and len(plain.windows) == N
    p, s = plain.classes[0], smooth.classes[0]
    assert p.maps[:FIRST].max() == 0 and p.maps[FIRST : LAST + 1].max(axis=(1, 2)).min() > 0.5
    assert s.maps[FIRST - 2].max() > 0 and s.maps[FIRST - 3].max() == 0  # two frames each side, no more
    jitter = lambda m: np.abs(np.diff(m, axis=0)).mean()  # noqa: E731
    # the square moves 3 px a frame
    bound("smoothed / plain frame-to-frame jitter", jitter(s.maps) / jitter(p.maps), "<", 0.7)
    assert np.argmax(p.frame_scores) in range(FIRST, LAST + 1)


def test_clip_explanations_from_threads_equal_sequential_ones(square_clip):
    cam = square_cam()
    want = [cam.explain_video(square_clip, target=t, stride=4).classes[0].maps for t in (0, 1)]
    got: dict[int, np.ndarray] = {}

    def run(t: int) -> None:
        got[t] = cam.explain_video(square_clip, target=t, stride=4).classes[0].maps

    threads = [threading.Thread(target=run, args=(t,)) for t in (0, 1, 1, 0)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t in (0, 1):
        np.testing.assert_array_equal(got[t], want[t])


def test_clips_meet_the_media_safety_and_limits_of_the_video_tab(square_clip, tmp_path):
    cam = square_cam()
    playlist = tmp_path / "clip.mp4"
    playlist.write_text("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n")
    with pytest.raises(VideoError, match="clip.mp4") as e:
        cam.explain_video(playlist, target=1)
    assert str(tmp_path) not in str(e.value)
    with pytest.raises(VideoError, match="over the limit of 2 s"):
        cam.explain_video(square_clip, target=1, max_seconds=2)
    r = cam.explain_video(square_clip, target=1, max_seconds=2, trim=True)
    assert r.frames == 24
    for bad, match in [
        ({"top_k": 11}, "top_k"),
        ({"stride": 9}, "stride"),
        ({"target": 400}, "target"),
        ({"smooth": -1}, "smooth"),
        ({"target": 1, "classes": [1]}, "not both"),
    ]:
        with pytest.raises(ValueError, match=match):
            cam.explain_video(square_clip, **bad)


# -- volumes ---------------------------------------------------------------------------------------
def test_a_volume_map_sits_on_its_own_voxels_and_npy_files_are_read_safely(tmp_path):
    vol = np.zeros((1, 20, 24, 28), np.float32)
    vol[0, 5:9, 12:18, 3:10] = 1.0  # the bright cube
    np.save(tmp_path / "vol.npy", vol)
    cam = GradCAM(BrightNet(3, 1), target_layer="relu", layout="ncthw", device="cpu", mean=0.0, std=1.0)
    (r,) = cam.explain_volume(tmp_path / "vol.npy", target=1)
    assert r.heatmap.shape == (20, 24, 28) and r.heatmap.max() == 1
    assert r.heatmap[4:10, 11:19, 2:11].sum() >= 0.95 * r.heatmap.sum()
    z, y, x = np.unravel_index(np.argmax(r.heatmap), r.heatmap.shape)
    assert 5 <= z < 9 and 12 <= y < 18 and 3 <= x < 10
    grid = r.slices(axis=0, n=8, columns=4)
    assert grid.info["nstcam"]["random_weights"] is False  # a model of the user's: not random weights
    assert grid.size == (4 * 28, 2 * 24)
    assert cam.explain_volume(vol[0], top_k=2)[0].index == 0  # (D, H, W): one channel
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="obj.npy holds Python objects"):
        load_volume(tmp_path / "obj.npy")
    big = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.uint8, shape=(MAX_VOXELS + 1,))
    del big
    with pytest.raises(ValueError, match="over the limit"):
        load_volume(tmp_path / "big.npy")
    with pytest.raises(ValueError, match="not a .npy file"):
        load_volume(tmp_path / "vol.txt")
    with pytest.raises(ValueError, match="takes images"):
        GradCAM(BrightNet(2, 3), target_layer="relu", device="cpu", mean=0.5, std=0.5).explain_volume(vol)


# -- the command line ------------------------------------------------------------------------------
def test_cam_cli_explains_clips_with_a_video_classifier_and_goes_on_past_a_bad_one(
    square_clip, tmp_path, caplog, capsys
):
    from nstcam.cli import main

    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42 but nothing else")
    out = tmp_path / "cams"
    rc = main(["cam", str(square_clip), str(bad), "-o", str(out), "--arch", "r3d_18", "--weights", "random",
               "--top-k", "2", "--stride", "16"])  # fmt: skip
    assert rc == 1 and "broken.mp4" in caplog.text  # named, and the next clip is explained
    assert capsys.readouterr().out.count("(RANDOM weights: not meaningful)") == 2  # each class said
    meta = json.loads((out / "square_cam.json").read_text())
    assert (
        meta["arch"] == "r3d_18" and meta["window"] == 16 and meta["windows"] == [[0, 15], [16, 31], [32, 47]]
    )
    assert [c["rank"] for c in meta["classes"]] == [1, 2] and all(
        c["random_weights"] for c in meta["classes"]
    )
    with av.open(meta["video"]) as f:
        assert len(f.streams.audio) == 1 and sum(1 for _ in f.decode(video=0)) == N
    rows = list(csv.DictReader(open(out / "explanations.csv")))
    assert [r["rank"] for r in rows] == ["1", "2"] and rows[0]["image"].endswith("square.mp4")
    assert (out / "square_sheet.png").is_file() and (out / "square_scores.csv").is_file()
    assert (
        main(["cam", str(square_clip), "-o", str(out), "--arch", "r3d_18", "--weights", "random"]) == 0
    )  # kept


def test_clips_replay_from_captured_graphs_and_equal_eager():
    """The graphed path (CUDA graphs; a traced capture on CPU) keys clips by their 5D shape too."""
    from test_cam_graphs import traced_capture

    from nstcam.cam._graphed import CamGraphs

    eager = square_cam()
    graphed = square_cam()
    graphed._graphs = CamGraphs(capture=traced_capture)
    for seed in range(4):
        x = torch.randn(1, 3, 8, 32, 48, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(
            graphed.compute(x, targets=1), eager.compute(x, targets=1), atol=1e-5, rtol=0
        )
    stats = graphed.graph_stats
    assert stats["captures"] == 1 and stats["replays"] >= 2 and stats["mismatches"] == 0


def test_the_contact_sheet_has_its_eight_evenly_spread_frames_with_the_strongest_among_them():
    """Issue 62: the sheet had 9 frames at uneven times (the peak added) where the docs say 8."""
    from types import SimpleNamespace

    from nstcam.cam.clips import SHEET_COLUMNS, _sheet_frames

    for frames, peak in [(40, 17), (40, 0), (40, 39), (5, 3), (100, 50)]:
        result = SimpleNamespace(frames=frames, classes=[SimpleNamespace(peak_frame=peak)])
        picks = _sheet_frames(result)
        assert len(picks) == min(SHEET_COLUMNS, frames) and peak in picks, (frames, peak, picks)
        assert picks[0] in (0, peak) and picks == sorted(set(picks))
