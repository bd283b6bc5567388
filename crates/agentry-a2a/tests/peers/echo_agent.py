# An A2A 1.0 agent on the official Python SDK (a2a-sdk 1.3.0), for
# agentry-a2a's tests: python echo_agent.py TOKEN RECORD_FILE
#
# Binds 127.0.0.1 on a free port and prints "PORT <n>" once it listens.
# Every JSON-RPC request needs "Authorization: Bearer TOKEN" (the cards do
# not). Its executor: "ask" -> INPUT_REQUIRED ("which one?"), and an answer
# to that task completes it with "echo: <answer>"; "slow" -> works for 30 s
# ("slow N": N s, saying "half way" as it works at half time), then completes with "echo: slow…"; "meta" -> COMPLETED
# with the request's "agentry" metadata as JSON text;
# "fail" -> FAILED ("the disk is full"); "reject" -> REJECTED ("not my job");
# "parts" -> COMPLETED with text, data, url and raw parts; anything else ->
# COMPLETED with the artifact "echo: <text>". RECORD_FILE gets a line per
# event: "task <id>" for each task it creates, "message <message id>" for
# each message it runs, "cancel <task id>" for each cancel, "method <name>"
# for each JSON-RPC request.
# Its card: description "echoes what it is told", skills Echo and Question.
# /old/.well-known/agent-card.json serves a card with only a 0.3 interface.
import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import (new_data_part, new_raw_part, new_task_from_user_message,
                                      new_text_message, new_text_part, new_url_part)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
                               HTTPAuthSecurityScheme, Role, SecurityRequirement,
                               SecurityScheme, StringList, TaskState)

TOKEN, RECORD = sys.argv[1], sys.argv[2]


def note(line: str) -> None:
    with open(RECORD, "a") as f:
        f.write(line + "\n")


class EchoExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task
        if task is None:  # the first event must be the Task
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            note(f"task {task.id}")
        note(f"message {context.message.message_id}")
        answering = task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.start_work()
        if text == "ask" and not answering:
            await up.requires_input(new_text_message("which one?", role=Role.ROLE_AGENT))
            return
        if text.split(" ")[0] == "slow":
            words = text.split(" ")
            secs = float(words[1]) if len(words) > 1 else 30
            await asyncio.sleep(secs / 2)
            await up.start_work(new_text_message("half way", role=Role.ROLE_AGENT))
            await asyncio.sleep(secs / 2)
        if text == "meta":
            said = json.dumps(context.metadata.get("agentry", {}), sort_keys=True)
            await up.add_artifact([new_text_part(said)], name="result", last_chunk=True)
            await up.complete()
            return
        if text == "fail":
            await up.failed(new_text_message("the disk is full", role=Role.ROLE_AGENT))
            return
        if text == "reject":
            await up.reject(new_text_message("not my job", role=Role.ROLE_AGENT))
            return
        if text == "parts":
            await up.add_artifact([new_text_part("three parts"), new_data_part({"n": 1}),
                                   new_url_part("https://files.invalid/f.txt", "text/plain", "f.txt"),
                                   new_raw_part(b"12345", "application/octet-stream")],
                                  name="result", last_chunk=True)
            await up.complete()
            return
        await up.add_artifact([new_text_part(f"echo: {text}")], name="result", last_chunk=True)
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        note(f"cancel {context.task_id}")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if request.method == "POST" and request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if request.method == "POST":
            try:
                note(f"method {json.loads(await request.body()).get('method')}")
            except ValueError:
                pass
        return await call_next(request)


def card(base: str, version: str) -> AgentCard:
    return AgentCard(
        name="echo", description="echoes what it is told", version="0.1.0",
        supported_interfaces=[AgentInterface(url=base + "/", protocol_binding="JSONRPC",
                                             protocol_version=version)],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="echoes", tags=["demo"],
                           examples=["hello"]),
                AgentSkill(id="ask", name="Question", description="asks which one before it answers",
                           tags=["demo"], examples=["ask"])],
        security_schemes={"bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList(list=[])})],
    )


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    main_card = card(base, "1.0")
    handler = DefaultRequestHandler(agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(),
                                    agent_card=main_card)
    routes = (create_agent_card_routes(main_card)
              + create_agent_card_routes(card(base, "0.3.0"),
                                         card_url="/old/.well-known/agent-card.json")
              + create_jsonrpc_routes(handler, rpc_url="/"))
    app = Starlette(routes=routes)
    app.add_middleware(Bearer)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    # Printed before serving: the socket is bound and listening already
    # (uvicorn listens on it; connections wait in the backlog meanwhile).
    sock.listen(128)
    print(f"PORT {port}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
