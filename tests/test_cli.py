"""The command line, run as a user would (random weights, tiny sizes)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_marked, marked
from PIL import Image

from nstcam.cli import main


def _img(path, seed):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((40, 56, 3)) * 255).astype(np.uint8)).save(path)
    return path


def test_stylize_cli_blends_and_skips_bad_files(tmp_path, caplog):
    a = _img(tmp_path / "a.png", 1)
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image")
    s1, s2 = _img(tmp_path / "s1.png", 2), _img(tmp_path / "s2.png", 3)
    out = tmp_path / "out"
    rc = main(
        [
            "stylize",
            str(a),
            str(bad),
            "--style",
            str(s1),
            "--style",
            str(s2),
            "--style-weights",
            "0.7,0.3",
            "-o",
            str(out),
            "--size",
            "32",
            "--steps",
            "2",
            "--seed",
            "5",
            "--weights",
            "random",
            "--preserve-color",
        ]
    )
    assert rc == 1  # one input failed, the other completed
    assert "bad.jpg" in caplog.text and "RANDOM weights" in caplog.text
    img = Image.open(out / "a_stylized.png")
    assert img.size == marked((32, 23))
    meta = json.loads((out / "a_stylized.json").read_text())
    assert meta["params"]["blend"] == [0.7, 0.3] and meta["params"]["preserve_color"] == "luminance"
    assert meta["params"]["seed"] == 5


def test_stylize_cli_offline_imagenet_fails_cleanly(tmp_path, caplog):
    a = _img(tmp_path / "a.png", 1)
    rc = main(["stylize", str(a), "--style", str(a), "-o", str(tmp_path / "o")])
    assert rc == 1 and "nstcam weights download vgg16_bn" in caplog.text
    assert "--weights random" in caplog.text and "weights='random'" not in caplog.text


def test_console_entry_point_help():
    out = subprocess.run(
        [sys.executable, "-m", "nstcam", "stylize", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--preserve-color" in out.stdout and "--style-weights" in out.stdout


def test_cam_cli_writes_overlays_and_json(tmp_path, caplog):
    a = _img(tmp_path / "a.png", 1)
    bad = tmp_path / "b.png"
    bad.write_bytes(b"")
    out = tmp_path / "cam"
    rc = main(
        [
            "cam",
            str(a),
            str(bad),
            "-o",
            str(out),
            "--arch",
            "resnet18",
            "--weights",
            "random",
            "--top-k",
            "2",
            "--method",
            "gradcam++",
        ]
    )
    assert rc == 1 and "b.png" in caplog.text and "empty" in caplog.text
    meta = json.loads((out / "a_cam.json").read_text())
    assert [c["rank"] for c in meta["classes"]] == [1, 2]
    assert meta["classes"][0]["score"] >= meta["classes"][1]["score"]
    assert all(c["random_weights"] and c["method"] == "gradcam++" for c in meta["classes"])
    for c in meta["classes"]:
        assert Image.open(c["overlay"]).size == marked((56, 40))


def test_cam_cli_new_methods_smoothing_and_layers(tmp_path, caplog):
    """--method takes every method; --layer a,b --fuse, --aug-smooth, --eigen-smooth reach the map, and a
    method refused for the model says why before any work."""
    a = _img(tmp_path / "a.png", 1)
    base = ["cam", str(a), "--arch", "resnet18", "--weights", "random"]
    rc = main([*base, "-o", str(tmp_path / "x"), "--method", "layercam", "--layer", "layer3,layer4",
               "--fuse", "product", "--aug-smooth", "--eigen-smooth"])  # fmt: skip
    meta = json.loads((tmp_path / "x" / "a_cam.json").read_text())
    assert (
        rc == 0
        and meta["classes"][0]["layer"] == "layer3,layer4"
        and meta["classes"][0]["method"] == "layercam"
    )
    plain = main([*base, "-o", str(tmp_path / "y"), "--method", "layercam", "--layer", "layer3,layer4"])
    assert plain == 0
    one = np.asarray(
        Image.open(json.loads((tmp_path / "x" / "a_cam.json").read_text())["classes"][0]["overlay"])
    )
    two = np.asarray(
        Image.open(json.loads((tmp_path / "y" / "a_cam.json").read_text())["classes"][0]["overlay"])
    )
    assert one.shape == two.shape and np.abs(one.astype(int) - two).max() > 0
    rc = main([*base, "-o", str(tmp_path / "z"), "--method", "legrad"])
    assert rc == 1 and "'legrad' reads a torchvision VisionTransformer" in caplog.text
    assert not (tmp_path / "z" / "a_cam.json").exists()


def test_stylize_cli_subject_aware_with_report(tmp_path):
    a = _img(tmp_path / "a.png", 1)
    s = _img(tmp_path / "s.png", 2)
    out = tmp_path / "out"
    rc = main(
        [
            "stylize",
            str(a),
            "--style",
            str(s),
            "-o",
            str(out),
            "--size",
            "32",
            "--steps",
            "2",
            "--weights",
            "random",
            "--subject-aware",
            "background",
            "--cam-arch",
            "resnet18",
            "--report",
        ]
    )
    assert rc == 0
    meta = json.loads((out / "a_stylized.json").read_text())
    assert meta["params"]["style_mask"] == "56x40" and meta["params"]["mask_mode"] == "optimize"
    rep = json.loads((out / "a_stylized_report.json").read_text())
    assert {"iou", "same_top1", "kept_in_top_k", "before", "after"} <= set(rep)
    assert 0 <= rep["iou"] <= 1 and len(rep["before"]) == 3


def test_stylize_cli_mask_file(tmp_path):
    a = _img(tmp_path / "a.png", 1)
    m = tmp_path / "mask.png"
    Image.new("L", (10, 10), 255).save(m)
    rc = main(
        [
            "stylize",
            str(a),
            "--style",
            str(a),
            "-o",
            str(tmp_path / "o"),
            "--size",
            "32",
            "--steps",
            "1",
            "--weights",
            "random",
            "--mask",
            str(m),
            "--mask-mode",
            "blend",
        ]
    )
    assert rc == 0
    meta = json.loads((tmp_path / "o" / "a_stylized.json").read_text())
    assert meta["params"]["mask_mode"] == "blend" and meta["params"]["style_mask"] == "10x10"


def test_stylize_cli_a_mask_per_style_gives_each_style_its_region(tmp_path, caplog):
    a, b, c = _img(tmp_path / "a.png", 1), _img(tmp_path / "b.png", 2), _img(tmp_path / "c.png", 3)
    left = np.zeros((20, 30), np.uint8)
    left[:, :15] = 255
    Image.fromarray(left).save(tmp_path / "left.png")
    base = [str(a), "-o", str(tmp_path / "o"), "--size", "32", "--steps", "1", "--weights", "random"]
    style_args = [
        "--style",
        str(b),
        "--mask",
        str(tmp_path / "left.png"),
        "--style",
        str(c),
        "--mask",
        "rest",
    ]
    assert main(["stylize", *base, *style_args]) == 0
    meta = json.loads((tmp_path / "o" / "a_stylized.json").read_text())
    assert meta["params"]["style_masks"] == ["30x20", None]
    rc = main(["stylize", *base, "--overwrite", "--style", str(b), "--style", str(c), "--style", str(a),
               "--mask", str(tmp_path / "left.png"), "--mask", "rest"])  # fmt: skip
    assert rc == 2 and "one --mask per --style (3 styles, 2 masks)" in caplog.text


def test_cam_cli_evaluate_writes_metrics_to_json_and_csv(tmp_path, capsys):
    import csv

    from nstcam import GradCAM

    a = _img(tmp_path / "a.png", 1)
    b = _img(tmp_path / "b.png", 2)
    out = tmp_path / "cam"
    args = ["cam", str(a), str(b), "-o", str(out), "--arch", "resnet18", "--weights", "random"]
    rc = main([*args, "--evaluate", "--evaluate-steps", "4", "--top-k", "2", "--input-size", "64"])
    assert rc == 0
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [(r["image"][-5:], r["rank"]) for r in rows] == [
        ("a.png", "1"),
        ("a.png", "2"),
        ("b.png", "1"),
        ("b.png", "2"),
    ]
    meta = json.loads((out / "a_cam.json").read_text())
    want = GradCAM("resnet18", weights="random", device="cpu", input_size=64).explain(
        str(a), top_k=2, evaluate=True, evaluate_steps=4
    )
    for row, entry, r in zip(rows, meta["classes"], want, strict=False):
        assert entry["faithfulness"] == r.faithfulness.as_dict()
        assert float(row["deletion_auc"]) == r.faithfulness.as_dict()["deletion_auc"]
        assert float(row["random_road"]) == r.baseline.as_dict()["road"]
    printed = capsys.readouterr().out
    assert "deletion_auc" in printed and "random map" in printed and "average drop" in printed
    assert all(r["random_weights"] == "True" for r in rows) and "RANDOM weights" in printed
    assert main([*args, "--evaluate", "--ray"]) == 2


def test_stylize_cli_tile_and_histogram_colour(tmp_path):
    a = _img(tmp_path / "a.png", 1)
    s = _img(tmp_path / "s.png", 2)
    out = tmp_path / "out"
    args = ["stylize", str(a), "--style", str(s), "-o", str(out), "--size", "96", "--steps", "1"]
    rc = main(
        [*args, "--weights", "random", "--tile", "64", "--preserve-color", "histogram", "--optimizer", "adam"]
    )
    assert rc == 0
    params = json.loads((out / "a_stylized.json").read_text())["params"]
    assert params["tile"] == 64 and params["tile_overlap"] == 16 and params["preserve_color"] == "histogram"
    assert params["tiles_per_scale"][-1] > 1


def test_stylize_cli_wasserstein_style_stats_and_average(tmp_path):
    a, s = _img(tmp_path / "a.png", 1), _img(tmp_path / "s.png", 2)
    out = tmp_path / "out"
    args = ["stylize", str(a), "--style", str(s), "-o", str(out), "--size", "64", "--steps", "2"]
    extra = [
        "--style-loss",
        "wasserstein",
        "--init",
        "style_stats",
        "--average",
        "0.9",
        "--optimizer",
        "adam",
    ]
    assert main([*args, "--weights", "random", *extra, "--optimizer", "adam"]) == 0
    params = json.loads((out / "a_stylized.json").read_text())["params"]
    assert (params["style_loss"], params["init"], params["average"]) == ("wasserstein", "style_stats", 0.9)
    try:
        main([*args, "--weights", "random", "--style-loss", "sinkhorn"])
    except SystemExit as e:  # argparse: the choices named
        assert e.code == 2
    else:
        raise AssertionError("--style-loss sinkhorn was accepted")


def test_messages_speak_the_cli_and_bars_show_where_a_person_watches(tmp_path, caplog, monkeypatch):
    """A rerun says --overwrite (not the Python keyword); a terminal gets a bar of the steps, a log
    file or pipe does not."""
    import io
    import logging

    a, s = _img(tmp_path / "a.png", 1), _img(tmp_path / "s.png", 2)
    args = ["stylize", str(a), "--style", str(s), "-o", str(tmp_path / "o"), "--size", "32", "--steps", "3"]
    caplog.set_level(logging.INFO)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main([*args, "--weights", "random"]) == 0
    shown = term.getvalue()
    assert "0/3" in shown and "step/s" in shown and "img/s" in shown  # the steps' bar and the images' bar
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert main([*args, "--weights", "random", "--overwrite"]) == 0
    assert "step" not in pipe.getvalue()
    caplog.clear()
    assert main([*args, "--weights", "random"]) == 0
    assert "add --overwrite to redo" in caplog.text and "overwrite=True" not in caplog.text


def test_app_help_has_a_line_for_every_option():
    app = Path(__file__).resolve().parent.parent / "app.py"
    out = subprocess.run(
        [sys.executable, str(app), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in ("--random-weights", "--device", "--host", "--port", "--mcp"):
        line = next(x for x in out.splitlines() if x.strip().startswith(flag))
        block = out[out.index(line) : out.index(line) + 300]
        assert len(block.split()) > 3, f"{flag} has no help"
    assert "``" not in out and "NSTCAM_MCP" in out


# -- one rule for outputs, clean refusals, readable figures (issue 29) -----------------------------
def test_every_command_keeps_outputs_that_exist_unless_overwrite(tmp_path, caplog, capsys):
    from _media import panning, write_clip

    a, b = _img(tmp_path / "a.png", 1), _img(tmp_path / "b.png", 2)
    clip = write_clip(tmp_path / "walk.mp4", panning(2, 1, w=48, h=32), fps=4)
    caplog.set_level("INFO", logger="nstcam")
    video = [
        "video",
        str(clip),
        "--style",
        str(b),
        "-o",
        str(tmp_path / "v.mp4"),
        "--size",
        "48",
        "--steps",
        "1",
    ]
    runs = {
        "features": ["features", str(a), "--layer", "relu1_1", "--top", "4", "-o", str(tmp_path / "f.png")],
        "video": video,
    }
    for name, args in runs.items():
        out = Path(args[args.index("-o") + 1])
        assert main([*args, "--weights", "random"]) == 0 and out.exists()
        stamp = out.stat().st_mtime_ns
        caplog.clear()
        assert main([*args, "--weights", "random"]) == 0
        assert out.stat().st_mtime_ns == stamp, f"{name} rewrote {out}"
        assert "add --overwrite to redo it" in caplog.text
        assert main([*args, "--weights", "random", "--overwrite"]) == 0
        assert out.stat().st_mtime_ns != stamp, f"{name} --overwrite kept {out}"

    cams = tmp_path / "cams"
    cam = ["cam", "--arch", "resnet18", "--weights", "random", "-o", str(cams)]
    assert main([*cam, str(a), str(b), "--top-k", "3"]) == 0
    assert len(list(cams.glob("a_cam*_*.png"))) == 6  # 3 overlays, 3 heatmaps
    stamp = (cams / "a_cam.json").stat().st_mtime_ns
    assert main([*cam, str(a), "--top-k", "1"]) == 0  # kept: a is explained there already
    assert (cams / "a_cam.json").stat().st_mtime_ns == stamp
    assert main([*cam, str(a), "--top-k", "1", "--overwrite"]) == 0
    assert len(list(cams.glob("a_cam*_*.png"))) == 2  # no stale a_cam2/a_cam3 left behind
    rows = (cams / "explanations.csv").read_text().splitlines()
    assert [r.split(",")[:2] for r in rows[1:]] == [[str(a), "1"]] + [[str(b), str(k)] for k in (1, 2, 3)]


def test_refused_runs_leave_no_folder_and_say_the_random_notice_once(tmp_path, caplog):
    gone = str(tmp_path / "gone.png")
    refused = [
        ["cam", gone, "-o", str(tmp_path / "c")],
        ["stylize", gone, "--style", gone, "-o", str(tmp_path / "s")],
        ["features", gone, "--layer", "relu1_1", "-o", str(tmp_path / "f" / "x.png")],
    ]
    for args in refused:
        caplog.clear()
        assert main([*args, "--weights", "random"]) != 0
        assert sum("RANDOM weights" in r.getMessage() for r in caplog.records) <= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no empty output folders
    a = _img(tmp_path / "a.png", 1)
    caplog.clear()
    assert main(["cam", str(a), "--arch", "resnet18", "--weights", "random", "-o", str(tmp_path / "c")]) == 0
    assert sum("RANDOM weights" in r.getMessage() for r in caplog.records) == 1  # built, then the engine


def test_weights_list_columns_line_up_and_the_warping_error_keeps_its_digits(tmp_path, capsys, caplog):
    assert main(["weights", "list"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines()[1:] if x.strip()]
    states = {x.index(" absent") if " absent" in x else x.index(" present") for x in lines}
    assert len(states) == 1, lines  # the state column starts at one place for every name
    fast = [x.split()[0] for x in lines if "fast/" in x]
    assert fast == ["multistyle26", "arbitrary"], lines  # issue 62: the fast networks' weights listed too
    from _media import panning, write_clip

    clip = write_clip(tmp_path / "pan.mp4", panning(3, 1, w=48, h=32), fps=4)
    style = _img(tmp_path / "s.png", 3)
    caplog.set_level("INFO", logger="nstcam")
    assert main(["video", str(clip), "--style", str(style), "-o", str(tmp_path / "v.mp4"), "--size", "48",
                 "--steps", "1", "--weights", "random"]) == 0  # fmt: skip
    said = [(r.name, r.getMessage()) for r in caplog.records]
    line = next(m for name, m in said if name == "nstcam.cli.video" and "warping" in m)
    frames = [m for name, m in said if name == "nstcam.cli._common" and "done ·" in m]
    assert [f.split(" ·")[0] for f in frames] == [f"frame {k}/3 done" for k in (1, 2, 3)]  # issue 62: no tty
    err = line.split("warping error ")[1].split(" ")[0]
    assert float(err) > 0 and err == f"{float(err):.3g}"  # three significant digits, never 0.00000


def test_app_names_a_broken_torch_pair_instead_of_a_traceback(tmp_path):
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    app = Path(__file__).resolve().parent.parent / "app.py"
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, str(app), "--random-weights"], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "torchvision" in run.stderr and "do not load together" in run.stderr
    assert "operator torchvision::nms does not exist" in run.stderr and "pip install torch==" in run.stderr


def test_cam_cli_explains_detections_and_segments(tmp_path, caplog):
    img = _img(tmp_path / "street.png", 4)
    det = tmp_path / "det"
    args = [
        "cam",
        str(img),
        "--arch",
        "fasterrcnn_mobilenet_v3_large_fpn",
        "--weights",
        "random",
        "-o",
        str(det),
    ]
    assert main([*args, "--score-threshold", "0", "--max-detections", "2"]) == 0
    header, *rows = (det / "explanations.csv").read_text().splitlines()
    assert header.endswith("random_weights,x0,y0,x1,y1") and len(rows) == 2  # a row per detection, its box
    meta = json.loads((det / "street_cam.json").read_text())
    assert [len(c["box"]) for c in meta["classes"]] == [4, 4] and meta["layer"] == "backbone"
    assert len(list(det.glob("street_cam?_*_heatmap.png"))) == 2
    caplog.clear()
    assert main([*args, "--top-k", "3", "--overwrite"]) == 1
    assert "--top-k: a detector explains boxes" in caplog.text  # the CLI's words (issue 37.11)
    assert "use --score-threshold and --max-detections (or --classes" in caplog.text
    seg = tmp_path / "seg"
    assert main(["cam", str(img), "--arch", "lraspp_mobilenet_v3_large", "--weights", "random",
                 "--classes", "person,cat", "-o", str(seg)]) == 0  # fmt: skip
    labels = [r.split(",")[3] for r in (seg / "explanations.csv").read_text().splitlines()[1:]]
    assert labels == ["person", "cat"]
    caplog.clear()
    assert main(["cam", str(img), "--arch", "resnet18", "--weights", "random", "--classes", "cat",
                 "-o", str(tmp_path / "c")]) == 2  # fmt: skip
    assert "--classes picks a detector's or segmenter's classes" in caplog.text


def test_every_failed_stylize_run_leaves_no_output_folder(tmp_path, caplog):
    """One rule for every command (issue 37.5): a folder the run made and left empty goes again."""
    a, s = _img(tmp_path / "a.png", 1), _img(tmp_path / "s.png", 2)
    (tmp_path / "bad.png").write_bytes(b"not a png")
    inputs = {p.name for p in tmp_path.iterdir()}
    base = [str(a), "--weights", "random", "--steps", "1", "--size", "32"]
    failing = [
        ["--style", str(s), "--size", "0"],
        ["--style", str(s), "--steps", "-3"],
        ["--style", str(tmp_path / "bad.png")],
        ["--style", str(tmp_path / "missing.png")],
        ["--style", str(s), "--tile", "-5"],
        ["--style", str(s), "--style", str(s), "--style-weights", "1,2,3"],
        ["--style", str(s), "--size", "100000"],
    ]
    for i, extra in enumerate(failing):
        out = tmp_path / f"run{i}" / "deeper"
        assert main(["stylize", *base, *extra, "-o", str(out)]) != 0, extra
        assert {p.name for p in tmp_path.iterdir()} == inputs, (extra, sorted(tmp_path.iterdir()))
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main(["stylize", *base, "--style", str(s), "--size", "0", "-o", str(kept)]) != 0
    assert kept.is_dir()  # a folder that was there before stays
    assert main(["stylize", *base, "--style", str(s), "-o", str(tmp_path / "ok")]) == 0
    assert (tmp_path / "ok" / "a_stylized.png").is_file()


def test_messages_say_the_cli_flags_not_python(tmp_path, caplog):
    """Issue 37.11: `size=2777 or less, or tile=512` reads `--size 2777 or less, or --tile 512`; a
    bad layer gives the closest names, not a Python recipe; --top-k 0 is refused before any model."""
    a = _img(tmp_path / "a.png", 1)
    caplog.set_level("INFO")
    cam = ["cam", str(a), "--arch", "resnet18", "--weights", "random", "-o", str(tmp_path / "c")]
    assert main([*cam, "--layer", "layer9"]) == 1
    assert "Closest valid names: layer4" in caplog.text and "named_modules" not in caplog.text
    caplog.clear()
    big = ["stylize", str(a), "--style", str(a), "--size", "100000", "--weights", "random"]
    assert main([*big, "--scales", "50000,100000", "-o", str(tmp_path / "s")]) == 1  # scales given: no print
    said = next(r.getMessage() for r in caplog.records if "GiB" in r.getMessage())
    assert re.search(r"use --size \d+ or less, or --tile \d+$", said) and str(a) in said, said
    caplog.clear()
    assert main([*big, "-o", str(tmp_path / "s")]) == 1  # a print: tiled already (issue 76), still too big
    said = [r.getMessage() for r in caplog.records if "GiB" in r.getMessage()]
    assert said[0].startswith("a 100000 px print needs about ") and "in tiles of 512 px" in said[0]
    assert re.search(r"in tiles of 512 px needs about .* use --size \d+ or less$", said[1]), said
    caplog.clear()
    assert main(["cam", str(a), "--arch", "resnet18", "--top-k", "0", "-o", str(tmp_path / "c")]) == 2
    assert caplog.records[-1].getMessage() == "--top-k must be at least 1, got 0"
    assert not any("RANDOM" in r.getMessage() or "weights" in r.name for r in caplog.records)  # none built


def test_cli_outputs_of_random_weights_say_so_in_metadata_and_visibly(tmp_path):
    a, s = _img(tmp_path / "a.png", 1), _img(tmp_path / "s.png", 2)
    out = tmp_path / "out"
    run = ["stylize", str(a), "--style", str(s), "--weights", "random", "--steps", "1", "--size", "96"]
    assert main([*run, "-o", str(out)]) == 0
    assert main(["cam", str(a), "--arch", "resnet18", "--weights", "random", "-o", str(out)]) == 0
    assert (
        main(["features", str(a), "--layer", "relu1_1", "--weights", "random", "-o", str(out / "grid.png")])
        == 0
    )
    for name in (
        "a_stylized.png",
        "grid.png",
        *[p.name for p in out.glob("a_cam1_*.png") if "heatmap" not in p.name],
    ):
        img = Image.open(out / name)
        assert img.text.get("nstcam:random_weights") == "true", name
        assert_marked(img)
    heat = Image.open(next(out.glob("a_cam1_*_heatmap.png")))
    assert heat.text.get("nstcam:random_weights") == "true" and heat.mode == "L"
    assert_marked(heat)  # below the data, which stays as computed


@pytest.mark.subprocess
def test_the_top_level_help_loads_no_torch_and_is_the_full_parsers():
    """Issue 62: `nstcam --help` took 18-28 s on a busy machine, 14 s of it imports (torch first)."""
    import io
    from contextlib import redirect_stdout

    from nstcam.cli import build_parser

    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nstcam", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "manage pretrained weight files" in run.stdout
    imported = [line.split("|")[-1].strip() for line in run.stderr.splitlines() if "|" in line]
    assert not [m for m in imported if m.split(".")[0] in ("torch", "torchvision", "numpy", "gradio")], (
        imported
    )
    full = io.StringIO()
    with redirect_stdout(full), pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    assert run.stdout == full.getvalue()  # the same words as the whole parser's: one place for both


def test_features_takes_the_apps_default_layer_when_none_is_given(tmp_path):
    """Issue 88.16: ``nstcam features IMAGE`` required ``--layer`` where the app defaults to relu3_1
    (vgg16_bn) and to the model's Grad-CAM layer otherwise; now the CLI does the same."""
    import json

    a = _img(tmp_path / "a.png", 1)
    for model, layer in (("vgg16_bn", "relu3_1"), ("resnet18", "layer4")):
        out = tmp_path / f"{model}.png"
        args = ["features", str(a), "--model", model, "--weights", "random", "--top", "2", "-o", str(out)]
        assert main(args) == 0
        assert json.loads(out.with_suffix(".json").read_text())["layer"] == layer
