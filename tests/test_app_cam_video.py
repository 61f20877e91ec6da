"""The Explain a clip tab's handler: a clip in, the explained clip, the score plot, the contact sheet
and the table out; refusals name the argument and the limit (never a server path)."""

from __future__ import annotations

from pathlib import Path

import av
import gradio as gr
import pytest
from _clipnet import moving_square
from _media import write_clip
from PIL import Image

from nstcam._mark import mark_height
from nstcam.app.config import AppConfig, Models
from nstcam.app.tabs.cam_video import CLIP_METHODS, cam_video_handler


@pytest.fixture(scope="module")
def models():
    return Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return write_clip(
        tmp_path_factory.mktemp("camv") / "square.mp4", moving_square(24, 5, 12), fps=12, audio=True
    )


def test_a_clip_gives_an_overlay_clip_with_audio_a_score_plot_and_a_sheet(models, clip):
    seen = []
    video, plot, sheet, rows = cam_video_handler(
        models, str(clip), "r3d_18", "gradcam", 2, progress=lambda d, t: seen.append((d, t)) or True
    )
    assert Path(video).name == "square_cam.mp4" and Path(sheet).name == "square_sheet.png"
    with av.open(video) as f:
        assert sum(1 for _ in f.decode(video=0)) == 24 and len(f.streams.audio) == 1
    assert Image.open(plot).size == (720, 260 + mark_height(720))  # random weights: said below the plot
    shown = Image.open(sheet)  # a row per class: a 64 px frame and its caption below, then the mark
    rows_h = shown.height - mark_height(shown.width)
    assert rows_h % 2 == 0 and rows_h // 2 > 64 and shown.text["nstcam:random_weights"] == "true"
    assert Image.open(plot).text["nstcam:random_weights"] == "true"  # the plot says so, as the rows do
    assert [r[0] for r in rows] == [1, 2] and all("(random weights)" in r[2] for r in rows)
    assert all(0 <= r[3] <= 1 and "-" in r[4] for r in rows)
    windows = 2  # 24 frames, 16-frame windows, stride 8: starts 0 and 8
    assert seen[-1] == (3 * windows, 3 * windows)  # top classes, maps, drawing
    assert "layercam" in CLIP_METHODS and "scorecam" not in CLIP_METHODS and "fullgrad" not in CLIP_METHODS


def test_an_image_classifier_runs_frame_by_frame_in_the_tab(models, clip):
    video, _, _, rows = cam_video_handler(models, str(clip), "resnet18", "gradcam", 1, smooth=2)
    assert Path(video).exists() and len(rows) == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"model": "resnet9000"}, "model must be one of r3d_18, mc3_18, r2plus1d_18, resnet18"),
        ({"method": "scorecam"}, "method on a clip must be one of gradcam"),
        ({"top_k": 6}, "top_k must be between 1 and 5"),
        ({"stride": 17}, "stride must be between 0 and 16"),
        ({"smooth": 11}, "smooth must be between 0 and 10"),
    ],
)
def test_bad_arguments_are_named_with_their_limits(models, clip, params, message):
    with pytest.raises(gr.Error, match=message):
        cam_video_handler(models, str(clip), **params)


def test_a_long_clip_is_refused_unless_trimmed_and_a_playlist_never_opens(models, tmp_path):
    long = write_clip(tmp_path / "long.mp4", moving_square(132, 5, 12), fps=12)  # 11 s > CPU's 10 s
    with pytest.raises(gr.Error, match=r"long.mp4: 11.0 s is over the limit of 10 s.*Tick Trim") as e:
        cam_video_handler(models, str(long))
    assert str(tmp_path) not in str(e.value)
    # trimmed to a server's limit: at 2 s (24 frames, two windows) where the CPU's 10 s took eight
    short = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_video_seconds=2))
    with pytest.raises(gr.Error, match=r"long.mp4: 11.0 s is over the limit of 2 s"):
        cam_video_handler(short, str(long))
    _, _, _, rows = cam_video_handler(short, str(long), top_k=1, trim=True, stride=16)
    assert len(rows) == 1
    playlist = tmp_path / "list.mp4"
    playlist.write_text("#EXTM3U\n#EXTINF:1,\nhttp://169.254.169.254/latest\n")
    with pytest.raises(gr.Error, match="Bad video: list.mp4") as e:
        cam_video_handler(models, str(playlist))
    assert str(tmp_path) not in str(e.value)
