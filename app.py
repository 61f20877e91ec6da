"""nstcam web app: neural style transfer and Grad-CAM in the browser, over HTTP and as MCP tools.

Runs locally (python app.py, then open http://127.0.0.1:7860) or unchanged as a Hugging Face Space.
Every option also reads an environment variable, named in its help, so that a Space can set it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys

PAIR = "pip install torch==2.14.1 torchvision==0.29.1"
"""A pair known to work together (README's install lines pin it)."""


def check_torch_pair() -> None:
    """Exits with a message naming both versions when torch and torchvision do not load together.

    A torchvision built for another torch fails on import with "operator torchvision::nms does not
    exist" deep in a traceback; this says which pair is broken and how to install a matching one.
    """
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except (ImportError, OSError, RuntimeError) as e:

        def version(name: str) -> str:
            try:
                return importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                return "(not installed)"

        sys.exit(
            f"nstcam cannot start: torch {version('torch')} and torchvision {version('torchvision')} do not "
            f"load together ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r}). Install "
            f"a matching pair in one command, e.g. {PAIR} (on a CPU-only machine add --index-url "
            "https://download.pytorch.org/whl/cpu)."
        )


def check_gradio() -> None:
    """Exits with one line naming the installed Gradio and the tested range when the app was not
    tested on it (it patches Gradio's internals: :mod:`nstcam.app.gradio_internals`)."""
    from nstcam.app.gradio_internals import version_problem

    problem = version_problem()
    if problem:
        sys.exit(f"nstcam cannot start: {problem}")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python app.py``."""
    p = argparse.ArgumentParser(prog="python app.py", description=__doc__)
    p.add_argument(
        "--random-weights",
        action="store_true",
        default=_flag("NSTCAM_RANDOM_WEIGHTS"),
        help="run offline on seeded random weights; every page and result says they are not meaningful "
        "(env NSTCAM_RANDOM_WEIGHTS=1)",
    )
    p.add_argument(
        "--device",
        default=os.environ.get("NSTCAM_DEVICE"),
        help="cpu, cuda or mps (env NSTCAM_DEVICE; default: the best available)",
    )
    p.add_argument(
        "--host",
        default=os.environ.get("GRADIO_SERVER_NAME"),
        help="address to listen on (env GRADIO_SERVER_NAME; default 127.0.0.1)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("GRADIO_SERVER_PORT") or 7860),
        help="port to listen on (env GRADIO_SERVER_PORT; default 7860)",
    )
    p.add_argument(
        "--mcp",
        action="store_true",
        default=_flag("NSTCAM_MCP"),
        help="also serve the app's endpoints as Model Context Protocol tools for AI agents, at "
        "/gradio_api/mcp/ (env NSTCAM_MCP=1)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    check_torch_pair()
    check_gradio()
    from nstcam.app import AppConfig, Models, build_demo, launch_kwargs
    from nstcam.app.guard import start_process
    from nstcam.app.run import zerogpu

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = AppConfig(random_weights=args.random_weights, device=args.device)
    models = Models(config)
    # what crashed servers left goes (only theirs); stopped by a signal (a Space restarting, kill,
    # Ctrl+C) at any moment, the process exits 0 with its runs stopped and its files removed
    holder: dict = {}
    start_process(models, holder)
    models.preload()  # once per process: weights are fetched at start-up, never per request
    zerogpu.serve(models)  # on ZeroGPU, the worker forked for a request inherits them
    demo = holder["demo"] = build_demo(config, models)
    demo.launch(server_name=args.host, server_port=args.port, **launch_kwargs(config, mcp=args.mcp))


if __name__ == "__main__":
    main()
