"""nstcam web app: ``python app.py`` locally, or unchanged as a Hugging Face Space.

Flags: ``--random-weights`` (or NSTCAM_RANDOM_WEIGHTS=1) runs offline with seeded random weights and
a banner saying results are not meaningful; ``--device``; ``--port``/``--host`` (default from
GRADIO_SERVER_PORT / GRADIO_SERVER_NAME).
"""

from __future__ import annotations

import argparse
import logging
import os

from nstcam.app import AppConfig, Models, build_demo, launch_kwargs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--random-weights",
        action="store_true",
        default=os.environ.get("NSTCAM_RANDOM_WEIGHTS", "").lower() in ("1", "true", "yes"),
    )
    p.add_argument("--device", default=os.environ.get("NSTCAM_DEVICE"))
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME"))
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT") or 7860))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = AppConfig(random_weights=args.random_weights, device=args.device)
    models = Models(config)
    models.preload()  # once per process: weights are fetched at start-up, never per request
    build_demo(config, models).launch(server_name=args.host, server_port=args.port, **launch_kwargs(config))


if __name__ == "__main__":
    main()
