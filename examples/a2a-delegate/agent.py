# A pricing agent on the official A2A Python SDK (a2a-sdk 1.3.0), for
# examples/a2a-delegate: python agent.py TOKEN
#
# Binds 127.0.0.1 on a free port and prints "PORT <n>" once it listens.
# Every JSON-RPC request needs "Authorization: Bearer TOKEN". "quote N ITEM"
# (items: widget, gadget, gizmo) works a second, then completes with
# "N ITEM cost X EUR"; anything else is REJECTED, saying what it can do.
import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
                               HTTPAuthSecurityScheme, Role, SecurityRequirement,
                               SecurityScheme, StringList)

TOKEN = sys.argv[1]
PRICES = {"widget": 12.00, "gadget": 7.50, "gizmo": 3.25}


class PricingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:  # the first event must be the Task
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.start_work()
        words = context.get_user_input().lower().split()
        if len(words) != 3 or words[0] != "quote" or not words[1].isdigit() \
                or words[2].rstrip("s") not in PRICES:
            await up.reject(new_text_message(
                f"I quote prices: 'quote N ITEM', ITEM one of {', '.join(PRICES)}",
                role=Role.ROLE_AGENT))
            return
        await asyncio.sleep(1)  # looking it up
        n, item = int(words[1]), words[2].rstrip("s")
        total = n * PRICES[item]
        await up.add_artifact([new_text_part(f"{n} {item}s cost {total:.2f} EUR")],
                              name="quote", last_chunk=True)
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if request.method == "POST" and request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    card = AgentCard(
        name="pricing", description="quotes prices of the parts catalogue", version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{port}/",
                                             protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="quote", name="Quote", description="'quote N ITEM': the price of N items",
                           tags=["pricing"], examples=["quote 3 widgets"])],
        security_schemes={"bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList(list=[])})],
    )
    handler = DefaultRequestHandler(agent_executor=PricingExecutor(),
                                    task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/"))
    app.add_middleware(Bearer)
    sock.listen(128)
    print(f"PORT {port}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
