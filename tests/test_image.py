"""load_image on every kind of input, its refusals, and the shared image helpers."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from nstcam import ImageError, load_image
from nstcam.image import (
    denormalize,
    image_to_tensor,
    normalize,
    resize_long_side,
    save_image,
    tensor_to_image,
)


def px(img: Image.Image, xy=(0, 0)) -> tuple[int, int, int]:
    assert img.mode == "RGB"
    return img.getpixel(xy)


def gradient_rgb(w=40, h=30) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([xx * 6 % 256, yy * 8 % 256, (xx + yy) * 3 % 256], -1).astype(np.uint8)


# -- sources --------------------------------------------------------------------------------------
def test_path_bytes_fileobj_pil_give_same_pixels(tmp_path):
    a = gradient_rgb()
    p = tmp_path / "g.png"
    Image.fromarray(a).save(p)
    data = p.read_bytes()
    for src in (p, str(p), data, bytearray(data), io.BytesIO(data), Image.fromarray(a), a):
        img = load_image(src)
        assert img.mode == "RGB" and img.size == (40, 30)
        np.testing.assert_array_equal(np.asarray(img), a)


def test_missing_path_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.png"):
        load_image(tmp_path / "nope.png")


def test_caller_image_not_modified():
    src = Image.new("RGBA", (20, 20), (10, 20, 30, 0))
    out = load_image(src)
    assert src.mode == "RGBA" and out is not src
    assert px(out) == (255, 255, 255)


# -- modes ----------------------------------------------------------------------------------------
def test_greyscale_l(tmp_path):
    p = tmp_path / "l.png"
    Image.new("L", (20, 20), 77).save(p)
    assert px(load_image(p)) == (77, 77, 77)


def test_la_composited_on_white(tmp_path):
    p = tmp_path / "la.png"
    im = Image.new("LA", (20, 20), (0, 0))  # fully transparent black
    im.putpixel((5, 5), (0, 255))  # one opaque black pixel
    im.putpixel((6, 6), (0, 128))  # half-transparent black
    im.save(p)
    out = load_image(p)
    assert px(out, (0, 0)) == (255, 255, 255)
    assert px(out, (5, 5)) == (0, 0, 0)
    assert abs(px(out, (6, 6))[0] - 127) <= 1


def test_palette_with_transparency(tmp_path):
    p = tmp_path / "p.png"
    im = Image.new("P", (20, 20), 0)
    im.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    im.putpixel((3, 3), 1)
    im.info["transparency"] = 0
    im.save(p, transparency=0)
    out = load_image(p)
    assert px(out, (0, 0)) == (255, 255, 255)  # red index is transparent -> white
    assert px(out, (3, 3)) == (0, 0, 255)


def test_rgba_composited_on_white(tmp_path):
    p = tmp_path / "rgba.png"
    a = np.zeros((20, 20, 4), np.uint8)
    a[..., 0] = 200
    a[:10, :, 3] = 255
    Image.fromarray(a, "RGBA").save(p)
    out = load_image(p)
    assert px(out, (0, 0)) == (200, 0, 0)
    assert px(out, (0, 15)) == (255, 255, 255)


def test_cmyk(tmp_path):
    p = tmp_path / "cmyk.tif"
    Image.new("CMYK", (20, 20), (0, 255, 255, 0)).save(p)  # pure red in CMYK
    assert px(load_image(p)) == (255, 0, 0)


def test_16bit_greyscale_scaled_not_clipped(tmp_path):
    p = tmp_path / "g16.png"
    a = np.full((20, 20), 32768, np.uint16)
    a[0, 0] = 65535
    a[0, 1] = 0
    Image.fromarray(a).save(p)
    out = load_image(p)
    assert px(out, (2, 2))[0] == 128  # mid-grey, not clipped to 255
    assert px(out, (0, 0)) == (255, 255, 255)
    assert px(out, (1, 0)) == (0, 0, 0)


def test_32bit_int_and_float_greyscale(tmp_path):
    p = tmp_path / "i32.tif"
    a = np.linspace(0, 1_000_000, 400).reshape(20, 20).astype(np.int32)
    Image.fromarray(a, "I").save(p)
    out = np.asarray(load_image(p))[..., 0]
    assert out[0, 0] == 0 and out[-1, -1] == 255 and 100 < out[10, 0] < 160  # min-max scaled

    p = tmp_path / "f.tif"
    Image.fromarray(np.full((20, 20), 0.5, np.float32), "F").save(p)
    assert px(load_image(p))[0] == 128  # floats in [0, 1] map to 0-255


def test_exif_orientation_applied(tmp_path):
    p = tmp_path / "rot.jpg"
    a = np.zeros((20, 40, 3), np.uint8)
    a[:, :20] = 255  # left half white, 40 wide x 20 high
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW when displayed
    Image.fromarray(a).save(p, exif=exif.tobytes(), quality=95)
    out = load_image(p)
    assert out.size == (20, 40)
    arr = np.asarray(out)
    assert arr[:20].mean() > 200 and arr[20:].mean() < 50  # white half is now on top


def test_animation_first_frame(tmp_path):
    p = tmp_path / "anim.gif"
    frames = [Image.new("RGB", (20, 20), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    frames[0].save(p, save_all=True, append_images=frames[1:], duration=50, loop=0)
    im = Image.open(p)
    im.seek(2)  # a PIL image positioned on a later frame
    assert px(load_image(p)) == (255, 0, 0)
    assert px(load_image(im)) == (255, 0, 0)


# -- numpy ----------------------------------------------------------------------------------------
def test_arrays_of_each_shape_and_dtype():
    assert px(load_image(np.full((20, 20), 9, np.uint8))) == (9, 9, 9)
    assert px(load_image(np.full((20, 20, 1), 9, np.uint8))) == (9, 9, 9)
    assert px(load_image(np.full((20, 20, 3), 0.5, np.float32))) == (128, 128, 128)
    rgba = np.zeros((20, 20, 4), np.float64)
    rgba[..., 1] = 1.0
    rgba[:, :10, 3] = 1.0
    out = load_image(rgba)
    assert px(out, (0, 0)) == (0, 255, 0) and px(out, (15, 0)) == (255, 255, 255)


@pytest.mark.parametrize(
    ("arr", "match"),
    [
        (np.zeros((20, 20, 2), np.uint8), r"shape \(20, 20, 2\)"),
        (np.zeros((3, 20, 20), np.uint8), r"channels last"),
        (np.zeros((2, 20, 20, 3), np.uint8), r"shape \(2, 20, 20, 3\)"),
        (np.full((20, 20), np.nan, np.float32), "NaN or infinite"),
        (np.full((20, 20), np.inf, np.float32), "NaN or infinite"),
        (np.full((20, 20), 2.0, np.float32), r"\[0, 1\]"),
        (np.zeros((20, 20), np.int64), "dtype int64"),
    ],
)
def test_bad_arrays_refused(arr, match):
    with pytest.raises(ImageError, match=match):
        load_image(arr)


# -- refusals -------------------------------------------------------------------------------------
def test_non_image_empty_truncated_refused(tmp_path):
    p = tmp_path / "notes.png"
    p.write_text("this is text, not a picture")
    with pytest.raises(ImageError, match="not an image"):
        load_image(p)
    with pytest.raises(ImageError, match="not an image"):
        load_image(b"\x00\x01garbage")
    e = tmp_path / "empty.jpg"
    e.write_bytes(b"")
    with pytest.raises(ImageError, match="empty"):
        load_image(e)
    with pytest.raises(ImageError, match="empty"):
        load_image(b"")
    buf = io.BytesIO()
    Image.fromarray(gradient_rgb(200, 200)).save(buf, "PNG")
    with pytest.raises(ImageError, match="truncated"):
        load_image(buf.getvalue()[: len(buf.getvalue()) // 2])
    buf = io.BytesIO()
    Image.fromarray(gradient_rgb(200, 200)).save(buf, "JPEG")
    with pytest.raises(ImageError, match="truncated"):
        load_image(buf.getvalue()[:-400])
    with pytest.raises(ImageError, match="binary mode"):
        load_image(io.StringIO("text"))
    with pytest.raises(ImageError, match="cannot load an image from int"):
        load_image(42)
    with pytest.raises(ImageError, match="directory"):
        load_image(tmp_path)


def test_too_small_refused_with_limit():
    with pytest.raises(ImageError, match=r"8x40 px; each side must be at least 16 px"):
        load_image(np.zeros((40, 8), np.uint8))
    assert load_image(np.zeros((40, 8), np.uint8), min_side=8).size == (8, 40)


def _png_header_only(w: int, h: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 10))


def test_pixel_limit_checked_before_decoding(monkeypatch):
    loads = []
    monkeypatch.setattr(Image.Image, "load", lambda self: loads.append(1))
    bomb = _png_header_only(10_000, 10_000)  # claims 100 megapixels in a few bytes
    with pytest.raises(
        ImageError, match=r"10000x10000 = 100\.0 MP, over the limit of 40\.0 MP; scale it down"
    ):
        load_image(bomb)  # advice a person can follow in the app and the CLI (no "raise max_pixels")
    bomb = _png_header_only(100_000, 100_000)  # 10 gigapixels: Pillow's own guard fires first,
    with pytest.raises(ImageError, match=r"100000x100000 = 10000\.0 MP, over the limit of 40\.0 MP"):
        load_image(bomb)  # and the message still says its size (issue 37.13), not Pillow's text
    assert loads == [], "the image was decoded before its size was checked"
    monkeypatch.undo()
    with pytest.raises(ImageError, match=r"over the limit of 0\.0 MP"):
        load_image(np.zeros((100, 100), np.uint8), max_pixels=1000)
    buf = io.BytesIO()
    Image.new("RGB", (100, 100)).save(buf, "PNG")
    with pytest.raises(ImageError, match=r"100x100"):
        load_image(buf.getvalue(), max_pixels=5000)
    assert load_image(buf.getvalue(), max_pixels=None).size == (100, 100)


# -- helpers --------------------------------------------------------------------------------------
def test_resize_long_side_keeps_aspect():
    img = Image.fromarray(gradient_rgb(200, 100))
    assert resize_long_side(img, 64).size == (64, 32)
    assert resize_long_side(img, 400).size == (400, 200)
    assert resize_long_side(img, 400, upscale=False).size == (200, 100)
    flat = Image.new("RGB", (300, 100), (10, 200, 30))
    assert px(resize_long_side(flat, 30), (5, 5)) == (10, 200, 30)  # Lanczos keeps flat colour
    with pytest.raises(ValueError, match="long_side"):
        resize_long_side(img, 0)


def test_tensor_round_trip_and_normalisation():
    a = gradient_rgb()
    t = image_to_tensor(Image.fromarray(a))
    assert t.shape == (1, 3, 30, 40) and t.dtype == torch.float32
    assert 0 <= t.min() and t.max() <= 1
    np.testing.assert_array_equal(np.asarray(tensor_to_image(t)), a)
    n = normalize(torch.ones(1, 3, 2, 2) * torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
    torch.testing.assert_close(n, torch.zeros_like(n))
    torch.testing.assert_close(denormalize(normalize(t)), t)
    assert px(tensor_to_image(torch.full((3, 20, 20), 2.0))) == (255, 255, 255)  # clamped
    with pytest.raises(ValueError, match="batch of 2"):
        tensor_to_image(torch.zeros(2, 3, 4, 4))


def test_save_png_and_jpeg(tmp_path):
    img = Image.fromarray(gradient_rgb())
    p = save_image(img, tmp_path / "sub" / "out.png")
    np.testing.assert_array_equal(np.asarray(Image.open(p)), np.asarray(img))
    j = save_image(img, tmp_path / "out.jpg")
    assert Image.open(j).format == "JPEG"
    assert np.abs(np.asarray(Image.open(j), np.int16) - np.asarray(img, np.int16)).mean() < 4
    with pytest.raises(ValueError, match=r"\.png, \.jpg or \.jpeg"):
        save_image(img, tmp_path / "out.bmp")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.jpg", "sub"]  # no temp file left


def test_saved_files_get_the_umask_permissions(tmp_path):
    """save_image writes a temporary file and renames it: that file must not stay 0600 while the
    JSON and CSV beside it are 0644 (anyone serving the folder would be locked out)."""
    import os

    from nstcam._files import new_file_mode
    from nstcam.image import save_image

    old = os.umask(0o022)
    try:
        assert new_file_mode() == 0o644
        for name in ("a.png", "b.jpg"):
            out = save_image(Image.new("RGB", (8, 8)), tmp_path / name)
            (tmp_path / f"{name}.json").write_text("{}")
            assert out.stat().st_mode & 0o777 == 0o644 == (tmp_path / f"{name}.json").stat().st_mode & 0o777
        os.umask(0o077)
        assert save_image(Image.new("RGB", (8, 8)), tmp_path / "c.png").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp left
