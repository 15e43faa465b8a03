"""HTTP plumbing between a deployment's processes: client sessions and the server runner.

Owns how the router and the instances talk to each other, not what they say:

* connections stay open (:data:`KEEPALIVE_S` on both ends), as a KV transfer engine's
  peer connections do. With aiohttp's defaults (15 s client, 75 s server) an idle pair
  of instances reconnects, and on the emulated WAN every reconnect adds a handshake
  round trip (30 ms) to whichever transfer or handoff happens to come next;
* the *bulk* session marks its sockets as bulk traffic (:func:`pddbench.netem.qos.mark_bulk`)
  so that KV bytes ride the WAN's lower-priority class while requests, token streams and
  handoff messages use the control class. Only KV payloads may use it;
* every peer socket uses the emulated network's congestion control
  (:func:`pddbench.netem.tcp.congestion_from_env`; a namespace's default cannot be set).
"""

from __future__ import annotations

import socket
from typing import Any

import aiohttp
from aiohttp import web

from pddbench.netem.qos import mark_bulk
from pddbench.netem.tcp import congestion_from_env

KEEPALIVE_S = 3600.0


def _socket(addr_info: tuple[Any, ...], *, bulk: bool) -> socket.socket:
    """A peer socket with the emulated network's congestion control (and the bulk mark)."""
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    congestion_from_env(sock)
    if bulk:
        mark_bulk(sock)
    return sock


def _bulk_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    return _socket(addr_info, bulk=True)


def _control_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    return _socket(addr_info, bulk=False)


def internal_session(*, bulk: bool = False) -> aiohttp.ClientSession:
    """A client session for internal traffic (``bulk``: DSCP-marked, for KV bytes only)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=0,
            enable_cleanup_closed=True,
            keepalive_timeout=KEEPALIVE_S,
            socket_factory=_bulk_socket if bulk else _control_socket,
        ),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
    )


def internal_runner(app: web.Application) -> web.AppRunner:
    """The runner of a router or instance HTTP server (peer connections kept open)."""
    return web.AppRunner(
        app, handler_cancellation=True, access_log=None, keepalive_timeout=KEEPALIVE_S
    )
