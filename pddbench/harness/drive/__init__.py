"""Driving load: the replay and its two backends (``aio``: asyncio; ``locust``: distributed).

Shared by both backends: the HTTP framing, the stream accounting, the request bodies
(``client``), the live view and the scraping of the servers' metrics. "Engine" is kept for
real inference engines (``harness.engines``); a way of driving load is a backend.
"""
