"""The web dashboard (``agentplane-redis dashboard``): live counts, dead letters,
waits, timers and runs of one or more tenants, read-only.

A Starlette application over sync stores: each page reads through the stores'
public API on Starlette's thread pool and renders a Jinja2 template; the
overview refreshes itself with htmx (shipped in ``static/``, nothing is fetched
from the internet). A server that does not answer shows a banner, never a
traceback, and the overview keeps asking.
"""

from .app import create_app

__all__ = ["create_app"]
