"""The asyncio drive backend: one event loop, a keep-alive HTTP/1.1 pool, the journal."""
