"""The Tornado example service, on a loopback port, driven by a real HTTP client.

Windows follow a virtual clock that the test advances: no sleeps.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient

from streams import VirtualClock

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tornado_app.py"


@pytest.fixture(scope="module")
def app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tornado_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_post_then_get_the_running_aggregate(app: ModuleType, clock: VirtualClock) -> None:
    async def main() -> list[dict[str, Any]]:
        pipeline = app.make_pipeline(interval=1.0)
        server, port = app.serve(pipeline, 0)
        client = AsyncHTTPClient(force_instance=True)
        base = f"http://127.0.0.1:{port}"

        async def post(body: Any) -> Any:
            return await client.fetch(f"{base}/ingest", method="POST", body=json.dumps(body),
                                      raise_error=False)

        async def get() -> dict[str, Any]:
            r = await client.fetch(f"{base}/aggregate")
            return dict(json.loads(r.body))

        seen = [await get()]
        assert (await post(1)).code == 200
        assert json.loads((await post([2, 3])).body) == {"accepted": 2}
        seen.append(await get())  # window still open: nothing aggregated yet
        await clock.advance_async(1.0)
        seen.append(await get())
        await post(10)
        await clock.advance_async(1.0)
        await clock.advance_async(1.0)  # an empty window counts too
        seen.append(await get())
        await post(4)
        await pipeline.close()  # end of stream: the open window is flushed
        seen.append(await get())
        bad = await post("three")
        assert bad.code == 400
        client.close()
        server.stop()
        return seen

    seen = asyncio.run(main())
    assert seen[0] == {"windows": 0, "count": 0, "total": 0.0, "last_window_count": 0,
                       "mean": None}
    assert seen[1] == seen[0]
    assert seen[2] == {"windows": 1, "count": 3, "total": 6.0, "last_window_count": 3,
                       "mean": 2.0}
    assert seen[3]["windows"] == 3 and seen[3]["count"] == 4 and seen[3]["total"] == 16.0
    assert seen[4]["windows"] == 4 and seen[4]["count"] == 5 and seen[4]["mean"] == 4.0


def test_post_waits_for_the_pipeline(app: ModuleType, clock: VirtualClock) -> None:
    """A slow step in the pipeline holds the HTTP response: backpressure."""

    async def main() -> None:
        pipeline = app.make_pipeline(interval=1.0)
        gate, entered = asyncio.Event(), asyncio.Event()

        async def slow(x: float) -> None:
            entered.set()
            await gate.wait()

        pipeline.source.sink(slow)
        server, port = app.serve(pipeline, 0)
        client = AsyncHTTPClient(force_instance=True)
        response = asyncio.ensure_future(
            client.fetch(f"http://127.0.0.1:{port}/ingest", method="POST", body="1"))
        await entered.wait()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not response.done()
        gate.set()
        assert (await response).code == 200
        client.close()
        server.stop()

    asyncio.run(main())
