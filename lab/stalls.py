"""Event-loop stall watch for the lab's client and origin.

A process starved of CPU (other work on the machine) answers late or sends late, and that
would show in the figures as if nginx had done it. Each process ticks every 20 ms and records
every tick that came more than 50 ms late; the report flags a run with a stall of 100 ms or
more (lab/README.md, "Lab issues").
"""

import asyncio
import time

TICK = 0.02
RECORD = 0.05


async def watch(stop, out):
    last = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(TICK)
        now = time.monotonic()
        late = now - last - TICK
        if late > RECORD:
            out.append([round(time.time() - late, 3), round(late, 3)])
        last = now
