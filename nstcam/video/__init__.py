"""Video: clips stylised with temporal consistency (Ruder et al. 2016), read and written with PyAV.

Layout: ``_container`` (the one safe way media reaches FFmpeg: an allow-list of container formats,
no protocols), ``source`` (probing and decoding clips, :class:`VideoError`, limits), ``sink`` (writing
video files with the source's audio, or folders of frames), ``flow`` (optical flow: OpenCV's DIS or
torchvision's RAFT), ``warping`` (warping, flow certainty, the warping error) and ``stylize`` (the
frames' loop on a style engine's public API: init images and pixel anchors).
"""

from nstcam.video._container import CONTAINERS, MediaError, check_media, open_media
from nstcam.video.flow import FLOW_METHODS, FlowEstimator, optical_flow
from nstcam.video.sink import CODECS, VideoWriter, even_size
from nstcam.video.source import (
    VIDEO_EXTENSIONS,
    VideoError,
    VideoInfo,
    check_limits,
    probe_video,
    read_frames,
)
from nstcam.video.stylize import (
    DEFAULT_TEMPORAL_WEIGHT,
    TEMPORAL_WEIGHT_RANGE,
    FrameInfo,
    VideoResult,
    stylize_video,
)
from nstcam.video.warping import certainty, warp, warping_error

__all__ = [
    "CODECS",
    "CONTAINERS",
    "DEFAULT_TEMPORAL_WEIGHT",
    "TEMPORAL_WEIGHT_RANGE",
    "FLOW_METHODS",
    "FlowEstimator",
    "FrameInfo",
    "MediaError",
    "VIDEO_EXTENSIONS",
    "VideoError",
    "VideoInfo",
    "VideoResult",
    "VideoWriter",
    "certainty",
    "check_media",
    "check_limits",
    "even_size",
    "open_media",
    "optical_flow",
    "probe_video",
    "read_frames",
    "stylize_video",
    "warp",
    "warping_error",
]
