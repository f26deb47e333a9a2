"""The ``rosettaserve scheduler`` process: its security set-up, its port, the PD scheduler
(pd/scheduler.py) behind it; SIGTERM drains and stops."""

from __future__ import annotations

import asyncio
import signal

from rosettaserve.observability.startup import say
from rosettaserve.pd.options import SchedulerOptions
from rosettaserve.pd.scheduler import Scheduler
from rosettaserve.server import security_setup as setup
from rosettaserve.server.settings import SecurityOptions
from rosettaserve.transport.h1 import HttpServer
from rosettaserve.transport.h1_head import H1Limits
from rosettaserve.transport.sockets import bind
from rosettaserve.web.app import HttpApp


async def serve(options: SchedulerOptions, security: SecurityOptions, limits: H1Limits) -> None:
    """Listen, print ``http: http://HOST:PORT``, watch the instances; SIGTERM drains and stops.
    ``security``: its front (TLS, API keys) and its peers; ``limits``: its clients'."""
    tls = setup.server_tls(security)
    scheduler = Scheduler(options, setup.peer_client(security))
    sock = bind(options.host, options.http_port)
    app = HttpApp(scheduler.routes())
    guard = setup.guard(security)
    app.guard = guard
    http = HttpServer(app, options.max_request_size, limits=limits)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    setup.reload_on_hangup(security, tls, guard)
    await http.start(sock, None if tls is None else tls.http.context)
    scheduler.pool.start()
    say(f"rosettaserve scheduler: prefill {', '.join(options.prefill)}")
    say(f"rosettaserve scheduler: decode {', '.join(options.decode)} (policy {options.policy})")
    say(f"http: {setup.http_address(options.host, sock.getsockname()[1], tls)}")
    await stopping.wait()
    say("rosettaserve scheduler: draining in-flight requests, then stopping")
    await http.shutdown(timeout=30.0)
    await scheduler.pool.stop()
    say("rosettaserve scheduler stopped")
