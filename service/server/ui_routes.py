"""``GET /ui``: the demo page (``service/demo.html``), to upload or record audio and see who said what."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from service.server.state import ServerContext

DEMO_PAGE = Path(__file__).resolve().parent.parent / "demo.html"


def routes(context: ServerContext) -> list[Route]:
    """The page's route; the page is read once, with the settings it shows filled in."""
    page = DEMO_PAGE.read_text().replace(
        "{{DEMO_JOB_MIN_DURATION_S}}", f"{context.server_settings.demo_job_min_duration_s:g}"
    )
    return [Route("/ui", partial(demo_page, page), methods=["GET"])]


async def demo_page(page: str, request: Request) -> Response:
    return HTMLResponse(page)
