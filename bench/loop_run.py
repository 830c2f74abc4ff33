"""`python bench/loop_run.py asyncio|uvloop ARGS…` = `python -m gpu_enricher ARGS…` on the
chosen event loop, whatever the exporter would pick itself (for the scrape benchmark).

`uvloop` needs uvloop installed in the venv.
"""

import asyncio
import sys
from collections.abc import Callable

import gpu_enricher.app
from gpu_enricher.cli.main import main

if __name__ == "__main__":
    kind = sys.argv.pop(1)
    factory: Callable[[], asyncio.AbstractEventLoop]
    if kind == "uvloop":
        import uvloop  # type: ignore[import-not-found, unused-ignore]

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        factory = uvloop.new_event_loop
    elif kind == "asyncio":
        asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
        factory = asyncio.new_event_loop
    else:
        sys.exit(f"usage: {sys.argv[0]} asyncio|uvloop [gpu-enricher args]")
    if hasattr(gpu_enricher.app, "new_event_loop"):  # the exporter picks its loop here
        gpu_enricher.app.new_event_loop = factory
    sys.exit(main())
