"""Media reach FFmpeg only through an allow-list of real containers recognised from their bytes, with
no protocol: a playlist or list that names other files (HLS, DASH, concat, ffconcat, SDP...), under
any name, is refused before anything is opened, so a private clip on the server never comes back."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from _media import write_clip

from nstcam.video import (
    CONTAINERS,
    MediaError,
    VideoError,
    check_media,
    open_media,
    probe_video,
    read_frames,
)

RED = (200, 30, 30)


def _frames(color, n=4, w=32, h=24):
    return [np.full((h, w, 3), color, np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> Path:
    """A clip outside the uploads (the server's secret): red frames, as .ts and .mp4."""
    d = tmp_path_factory.mktemp("private")
    write_clip(d / "private.mp4", _frames(RED))
    with av.open(str(d / "private.ts"), "w", format="mpegts") as out:
        s = out.add_stream("mpeg4", rate=10)
        s.width, s.height, s.pix_fmt = 32, 24, "yuv420p"
        for f in _frames(RED):
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return d


def playlists(private: Path, uploads: Path) -> dict[str, str]:
    """Files that make FFmpeg read the private clip: HLS (absolute, relative, file://), DASH,
    concat and ffconcat lists, SDP, a subfile: URL; each as the text FFmpeg would follow."""
    ts, mp4 = private / "private.ts", private / "private.mp4"
    rel = Path("..") / ".." / private.relative_to(private.parent.parent) / "private.ts"
    hls = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n{}\n#EXT-X-ENDLIST\n"
    return {
        "hls_absolute.m3u8": hls.format(ts),
        "hls_relative.m3u8": hls.format(rel),
        "hls_file_url.m3u8": hls.format(f"file://{ts}"),
        "dash.mpd": (
            '<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" '
            'mediaPresentationDuration="PT1S"><Period><AdaptationSet mimeType="video/mp4"><Representation '
            f'id="1" bandwidth="1000"><BaseURL>file://{mp4}</BaseURL></Representation></AdaptationSet>'
            "</Period></MPD>"
        ),
        "list.ffconcat": f"ffconcat version 1.0\nfile '{mp4}'\n",
        "list.concat": f"file '{mp4}'\n",
        "stream.sdp": "v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 127.0.0.1\nm=video 5004 RTP/AVP 96\n",
        "nested.m3u8": hls.format(f"subfile,,start,0,end,0,,:{ts}"),
    }


@pytest.fixture(scope="module")
def hostile(private, tmp_path_factory) -> list[Path]:
    """Every playlist under its own name and renamed .mp4 / .mkv, in an uploads folder."""
    up = tmp_path_factory.mktemp("uploads") / "abc"
    up.mkdir()
    out = []
    for name, text in playlists(private, up).items():
        for as_name in (name, Path(name).stem + ".mp4", Path(name).stem + "_2.mkv"):
            (up / as_name).write_text(text)
            out.append(up / as_name)
    return out


def test_every_playlist_is_refused_by_name_before_ffmpeg_opens_it(hostile, monkeypatch):
    opened = []
    monkeypatch.setattr(av, "open", lambda *a, **k: opened.append(a) or pytest.fail("FFmpeg opened it"))
    for path in hostile:
        with pytest.raises(VideoError) as e:
            probe_video(path, name=path.name)
        msg = str(e.value)
        assert msg.startswith(f"{path.name} is not a video file nstcam opens"), msg
        assert str(path.parent) not in msg and "HLS, DASH, concat" in msg
        with pytest.raises(MediaError):
            check_media(path)
    assert not opened


def test_the_style_engine_refuses_a_playlist_named_mp4_before_any_work(hostile, tmp_path):
    from nstcam import StyleTransfer

    st = StyleTransfer(weights="random", device="cpu")
    clip = next(p for p in hostile if p.name == "hls_absolute.mp4")
    style = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(VideoError, match="hls_absolute.mp4 is not a video file nstcam opens"):
        st.stylize_video(clip, style, tmp_path / "out.mp4", size=32, steps=1)
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("ext", [".mp4", ".mov", ".mkv", ".webm", ".avi", ".ts", ".gif"])
def test_real_containers_still_open_from_any_name(ext, tmp_path):
    frames = [np.full((24, 32, 3), (30 + 40 * i, 200, 30), np.uint8) for i in range(3)]
    fmt = {".ts": "mpegts", ".webm": "webm", ".mov": "mov", ".avi": "avi"}.get(ext)
    path = tmp_path / f"clip{ext}"
    if ext in (".mp4", ".gif", ".mkv"):
        write_clip(path, frames)
    else:
        codec = "libvpx" if ext == ".webm" else "mpeg4"
        with av.open(str(path), "w", format=fmt) as out:
            s = out.add_stream(codec, rate=10)
            s.width, s.height, s.pix_fmt = 32, 24, "yuv420p"
            for f in frames:
                for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                    out.mux(p)
            for p in s.encode():
                out.mux(p)
    renamed = path.rename(tmp_path / "renamed.bin")  # recognised from its bytes, not its name
    info = probe_video(renamed, name="renamed.bin")
    got = list(read_frames(info))
    assert info.frames == len(got) == 3
    tol = 40 if ext == ".gif" else 12  # GIF's palette
    assert np.abs(got[1].reshape(-1, 3).mean(0) - (70, 200, 30)).max() < tol
    assert check_media(renamed) in CONTAINERS


def test_ffmpeg_gets_a_file_object_the_allowed_demuxer_and_no_protocol(tmp_path, monkeypatch):
    path = write_clip(tmp_path / "clip.mp4", _frames((10, 200, 10)))
    seen = {}
    real_open = av.open

    def spy(file, mode="r", **kw):
        seen.update(kw, file=file)
        return real_open(file, mode, **kw)

    monkeypatch.setattr(av, "open", spy)
    with open_media(path, "clip.mp4", {"skip_frame": "all"}) as c:
        assert c.streams.video
    assert not isinstance(seen["file"], (str, Path))  # never parsed as a URL
    assert seen["format"] == "mov"
    assert seen["options"]["protocol_whitelist"] == "none"
    assert seen["options"]["enable_drefs"] == "0" and seen["options"]["skip_frame"] == "all"


def test_no_protocol_means_a_demuxer_that_follows_files_gets_nothing(private, tmp_path):
    """The second wall: even HLS itself, with the whitelist open_media sets, reads no segment."""
    playlist = tmp_path / "p.m3u8"
    playlist.write_text(playlists(private, tmp_path)["hls_absolute.m3u8"])
    with open(playlist, "rb") as fh, pytest.raises(av.error.FFmpegError):
        with av.open(fh, format="hls", options={"protocol_whitelist": "none"}) as c:
            next(c.decode(video=0))
    with open(playlist, "rb") as fh, av.open(fh, format="hls", options={"protocol_whitelist": "file"}) as c:
        leaked = next(c.decode(video=0)).to_ndarray(format="rgb24")  # what "file" alone would allow
    assert np.abs(leaked.reshape(-1, 3).mean(0) - RED).max() < 12


def test_sniffing_reads_only_the_first_bytes(tmp_path):
    from nstcam.video._container import container_format

    assert container_format(b"\x00\x00\x00\x18ftypmp42" + b"\0" * 16) == "mov"
    assert container_format(b"\x1a\x45\xdf\xa3" + b"\0" * 16) == "matroska"
    assert container_format(b"RIFF\0\0\0\0AVI LIST") == "avi"
    assert container_format(b"GIF89a" + b"\0" * 10) == "gif"
    assert container_format(bytes([0x47] + [0] * 187) * 3) == "mpegts"
    for text in (b"#EXTM3U\n", b"ffconcat version 1.0\n", b"<?xml", b"v=0\n", b"", b"\x00\x00\x00\x04ftyp"):
        assert container_format(text) is None
    with pytest.raises(FileNotFoundError, match="video file not found: gone.mp4"):
        check_media(tmp_path / "gone.mp4")
