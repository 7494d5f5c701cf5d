"""The documented path of the middleware shapes and chains (docs/api.md, "Middleware");
defined in ``conveyor.client.middleware``."""

from conveyor.client.middleware import (
    AsyncServerMiddleware,
    ClientChain,
    ClientMiddleware,
    MiddlewareChain,
    ServerChain,
    ServerMiddleware,
)

__all__ = ["AsyncServerMiddleware", "ClientChain", "ClientMiddleware", "MiddlewareChain",
           "ServerChain", "ServerMiddleware"]
