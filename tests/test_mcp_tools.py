"""Every MCP tool with every parameter, lists and nulls included, through the ``mcp`` package's client
(issue 88.4): the schemas resolve and take the nulls their descriptions offer, a list of files and an
editor's mask are read as files, and a clip comes back as its bytes, never as a server path."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import av
import jsonschema
import numpy as np
import pytest
from _media import panning, write_clip
from PIL import Image

from nstcam.app.mcp import tool_schema


def _data_url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _picture(seed: int, w: int = 64, h: int = 48) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))


def _mask(w: int = 64, h: int = 48) -> Image.Image:
    a = np.zeros((h, w, 4), np.uint8)
    a[:, : w // 2] = 255  # the left half painted
    return Image.fromarray(a, "RGBA")


def _calls(tmp_path) -> dict[str, dict]:
    """Each tool and a value for every one of its parameters (nulls where the default is None)."""
    photo, painting = _data_url(_picture(1)), _data_url(_picture(2, 48, 48))
    clip = write_clip(tmp_path / "walk.mp4", panning(6, dx=2, w=64, h=48), fps=6)
    video = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    editor = {"background": photo, "layers": [_data_url(_mask())], "composite": _data_url(_mask())}
    cam = {"image": photo, "model": "resnet18", "layer": "layer4", "method": "gradcam"}
    return {
        "stylize": dict(
            content=photo,
            style=painting,
            style_b=None,
            blend=0.0,
            size=64,
            steps=2,
            style_weight=None,
            content_weight=1.0,
            tv_weight=5.0,
            preserve_color="off",
            seed=0,
            optimizer="adam",
            tile=0,
            style_loss="gram",
            init="content",
            average=0.0,
            mask_a=editor,
            mask_b=None,
            mode="optimise",
            strength=1.0,
            builtin_a=-1,
            builtin_b=-1,
            style_file=None,
        ),
        "learn_style": dict(
            painting=painting,
            photos=[photo, _data_url(_picture(3))],
            size=64,
            steps=2,
            batch=1,
            seed=0,
            content_weight=1.0,
        ),
        "stylize_video": dict(
            video=video,
            style=painting,
            size=64,
            steps=1,
            temporal_weight=50.0,
            max_seconds=0,
            trim=True,
            seed=0,
            fast=True,
            style_file=None,
        ),
        "gradcam": dict(
            **cam,
            top_k=1,
            aug_smooth=False,
            eigen_smooth=False,
            classes=[],
            score_threshold=0.5,
            max_detections=5,
        ),
        "faithfulness": dict(**cam, aug_smooth=False, eigen_smooth=False),
        "trust": dict(
            image=photo, model="resnet18", layer="layer4", methods=["gradcam", "randomcam"], box=""
        ),
        "gradcam_video": dict(
            video=video,
            model="r3d_18",
            method="gradcam",
            top_k=1,
            stride=8,
            smooth=0,
            max_seconds=0,
            trim=True,
        ),
        "subject_aware": dict(
            content=photo,
            style=painting,
            mode="background",
            threshold=0.4,
            feather=4,
            size=64,
            steps=2,
            model="resnet18",
        ),
        "features": dict(image=photo, model="resnet18", layer="layer2", top=4),
    }


def _image(result) -> np.ndarray:
    image = next(c for c in result.content if c.type == "image")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(image.data))).convert("RGB"), np.float32)


def test_every_tool_takes_every_parameter_lists_and_nulls_and_names_no_server_path(
    server, server_uploads, tmp_path
):
    import mcp.client.streamable_http as transport
    from mcp import ClientSession

    connect = getattr(transport, "streamable_http_client", None) or transport.streamablehttp_client
    calls = _calls(tmp_path)

    async def session():
        async with connect(server + "gradio_api/mcp/") as (read, write, _), ClientSession(read, write) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            results = {name: await s.call_tool(name, args) for name, args in calls.items()}
            results["stylize_whole"] = await s.call_tool("stylize", {**calls["stylize"], "mask_a": None})
            return tools, results

    tools, results = asyncio.run(asyncio.wait_for(session(), 420))
    assert set(calls) == set(tools)
    for name, args in calls.items():
        schema = tools[name].inputSchema
        assert set(args) == set(schema["properties"]), name  # every parameter of the tool is sent
        jsonschema.validate(args, schema)  # the schema resolves ($refs at its root) and takes the nulls
        result = results[name]
        said = " ".join(c.text for c in result.content if c.type == "text")
        assert not result.isError, (name, said[:500])
        wire = json.dumps([c.model_dump(mode="json") for c in result.content])
        assert str(server_uploads) not in wire and "/gradio_api/file=" not in wire, name
    # the photos (a list of files) and the mask (an editor's layers) were read as files: the
    # stylised half is the painted one, the other half the photo's own pixels
    assert "done" in " ".join(c.text for c in results["learn_style"].content if c.type == "text")
    masked, whole = (_image(results[name]) for name in ("stylize", "stylize_whole"))
    assert np.abs(masked - whole).mean() > 0.5  # the same call without the mask
    # a clip comes back as its bytes: an MP4 the agent decodes, frames at the size asked
    for name in ("stylize_video", "gradcam_video"):
        clips = [c for c in results[name].content if c.type == "resource"]
        assert len(clips) == 1 and clips[0].resource.mimeType == "video/mp4", name
        with av.open(io.BytesIO(base64.b64decode(clips[0].resource.blob))) as box:
            frame = next(box.decode(video=0))
        assert max(frame.width, frame.height) >= 48, (name, frame.width, frame.height)


def test_a_schema_with_defs_in_a_property_resolves_at_its_root_and_takes_null():
    gradio_like = {
        "type": "object",
        "properties": {
            "photos": {
                "$defs": {"FileData": {"type": "string", "format": "Gradio File Input - a url"}},
                "items": {
                    "$ref": "#/$defs/FileData",
                    "type": "string",
                    "format": "Gradio File Input - a url",
                },
                "type": "array",
            },
            "mask": {
                "$defs": {"Part": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                "properties": {"part": {"$ref": "#/$defs/Part"}},
                "type": "object",
            },
            "weight": {"type": "number"},
        },
    }
    schema = tool_schema(gradio_like, {"photos", "weight"})
    assert (
        "$ref" not in schema["properties"]["photos"]["items"]
        and "$defs" not in schema["properties"]["photos"]
    )
    assert set(schema["$defs"]) == {"FileData", "Part"}  # referenced ones at the root
    jsonschema.validate({"photos": ["data:x"], "mask": {"part": {"x": 1}}, "weight": None}, schema)
    jsonschema.validate({"photos": None}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"mask": None}, schema)  # a parameter whose default is not None stays non-null
