"""The start of the lab's own processes (client and origin): each reads its spec from the JSON
file named on its command line and runs one asyncio coroutine."""

import asyncio
import gc
import json
import resource
import sys

try:
    import uvloop
except ImportError:  # the lab still works, a little slower
    uvloop = None


def run(make):
    """Runs `make(spec).main()` on the fastest event loop at hand."""
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # A run lives a minute: the cyclic collector's full passes over the growing log stalled the
    # loop by 100-600 ms under load, so it stays off (reference counting frees the rest).
    gc.disable()
    if uvloop is not None:
        uvloop.install()
    asyncio.run(make(spec).main())
