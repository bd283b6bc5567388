# The official A2A 1.0 Python client (a2a-sdk 1.3.0) against `agentry serve`,
# for tests/cli/serve_a2a.rs: python a2a_client.py CONFIG_JSON
#
# CONFIG_JSON: {"base", "token", "other_token", "hook"}. Each check prints one
# JSON line {"check": NAME, ...} that the Rust test asserts on; an exception
# in a check prints {"check": NAME, "error": TYPE, "message": TEXT} and the
# next check runs.
import asyncio
import json
import sys
import traceback
import uuid

import httpx
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import (AuthenticationInfo, CancelTaskRequest,
                               DeleteTaskPushNotificationConfigRequest,
                               GetTaskPushNotificationConfigRequest, GetTaskRequest,
                               ListTaskPushNotificationConfigsRequest, ListTasksRequest, Message,
                               Part, Role, SendMessageConfiguration, SendMessageRequest,
                               SubscribeToTaskRequest, TaskPushNotificationConfig)


def out(check, **fields):
    print(json.dumps({"check": check, **fields}), flush=True)


def text_message(text, task_id=""):
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)],
                   task_id=task_id, context_id=task_id)


def data_message(data, task_id):
    value = ParseDict(data, Value())
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(data=value)],
                   task_id=task_id, context_id=task_id)


def as_dict(message):
    return MessageToDict(message)


def answer_of(task):
    return [p.get("text") for a in task.get("artifacts", []) for p in a.get("parts", [])]


async def events(client, request):
    return [as_dict(ev) for ev in [e async for e in client.send_message(request)]]


async def final_task(client, request):
    seen = await events(client, request)
    kinds = [next(iter(e)) for e in seen]
    return kinds, seen[-1].get("task") or {}


class Clients:
    def __init__(self, config):
        self.config = config
        self.http = httpx.AsyncClient(headers={"Authorization": f"Bearer {config['token']}"},
                                      timeout=60)

    async def client(self, path="", streaming=False, token=None):
        http = self.http
        if token is not None:
            http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        card = await A2ACardResolver(http, self.config["base"] + path).get_agent_card()
        return await create_client(card, ClientConfig(httpx_client=http, streaming=streaming))


async def cards(c):
    default = as_dict(await A2ACardResolver(c.http, c.config["base"]).get_agent_card())
    gated = as_dict(await A2ACardResolver(c.http, c.config["base"] + "/a2a/gated").get_agent_card())
    out("cards", default=default, gated=gated)


async def send(c):
    client = await c.client()
    kinds, task = await final_task(client, SendMessageRequest(message=text_message("hello")))
    out("send", kinds=kinds, id=task.get("id"), state=task["status"]["state"], answer=answer_of(task))
    got = as_dict(await client.get_task(GetTaskRequest(id=task["id"])))
    out("get", id=got.get("id"), state=got["status"]["state"], answer=answer_of(got))
    listed = as_dict(await client.list_tasks(ListTasksRequest(page_size=10)))
    out("list", ids=[t["id"] for t in listed.get("tasks", [])], total=listed.get("totalSize"))
    return task["id"]


async def stream(c):
    client = await c.client(streaming=True)
    seen = await events(client, SendMessageRequest(message=text_message("stream me")))
    out("stream", events=seen)


async def cancel(c):
    client = await c.client("/a2a/nap")
    request = SendMessageRequest(message=text_message("nap"),
                                 configuration=SendMessageConfiguration(return_immediately=True))
    kinds, task = await final_task(client, request)
    sub = await c.client("/a2a/nap", streaming=True)

    async def follow():
        return [as_dict(e) async for e in sub.subscribe(SubscribeToTaskRequest(id=task["id"]))]
    following = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    cancelled = as_dict(await client.cancel_task(CancelTaskRequest(id=task["id"])))
    subscribed = await asyncio.wait_for(following, 30)
    again = None
    try:
        await client.cancel_task(CancelTaskRequest(id=task["id"]))
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        again = type(e).__name__
    out("cancel", started=task["status"]["state"], state=cancelled["status"]["state"],
        subscribed=subscribed, again=again)


async def approval(c):
    client = await c.client("/a2a/gated")
    _, task = await final_task(client, SendMessageRequest(message=text_message("go")))
    status = task["status"]
    out("input_required", id=task["id"], state=status["state"], parts=status.get("message", {}).get("parts", []))
    approve = data_message({"approval": {"call_id": "a1", "approve": True}}, task["id"])
    _, done = await final_task(client, SendMessageRequest(message=approve))
    out("approved", id=done.get("id"), state=done["status"]["state"], answer=answer_of(done))


async def chat(c):
    client = await c.client("/a2a/chat")
    _, first = await final_task(client, SendMessageRequest(message=text_message("hi")))
    _, second = await final_task(client, SendMessageRequest(message=text_message("again", first["id"])))
    out("chat", id=first["id"], first=first["status"]["state"], second=second["status"]["state"],
        same=first["id"] == second["id"], answer=answer_of(second))
    # A config made on the sleeping task: the next message's updates are pushed.
    auth = AuthenticationInfo(scheme="Bearer", credentials="push-cred")
    config = TaskPushNotificationConfig(task_id=first["id"], id="cfg1", url=c.config["hook"],
                                        token="cfg-tok", authentication=auth)
    created = as_dict(await client.create_task_push_notification_config(config))
    _, third = await final_task(client, SendMessageRequest(message=text_message("third", first["id"])))
    request = ListTaskPushNotificationConfigsRequest(task_id=first["id"])
    listed = as_dict(await client.list_task_push_notification_configs(request))
    got = as_dict(await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=first["id"], id="cfg1")))
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=first["id"], id="cfg1"))
    left = as_dict(await client.list_task_push_notification_configs(request))
    out("push_config", created=created, got=got, listed=listed, left=left,
        third=third["status"]["state"])


async def artifacts(c):
    client = await c.client("/a2a/report")
    _, task = await final_task(client, SendMessageRequest(message=text_message("report")))
    got = as_dict(await client.get_task(GetTaskRequest(id=task["id"])))
    streaming = await c.client("/a2a/report", streaming=True)
    seen = await events(streaming, SendMessageRequest(message=text_message("report again")))
    out("artifacts", state=task["status"]["state"], artifacts=task.get("artifacts", []),
        got=got.get("artifacts", []), events=seen)


async def push(c):
    client = await c.client()
    config = TaskPushNotificationConfig(url=c.config["hook"], token="push-tok-5")
    request = SendMessageRequest(message=text_message("push me"),
                                 configuration=SendMessageConfiguration(task_push_notification_config=config))
    _, task = await final_task(client, request)
    out("push", id=task["id"], state=task["status"]["state"])


async def refused(c, first_id):
    try:
        client = await c.client(token="wrong-token")
        await events(client, SendMessageRequest(message=text_message("hello")))
        out("wrong_token", error=None)
    except Exception as e:  # noqa: BLE001
        out("wrong_token", error=type(e).__name__, message=str(e))
    try:
        other = await c.client(token=c.config["other_token"])
        await other.get_task(GetTaskRequest(id=first_id))
        out("other_tenant", error=None)
    except Exception as e:  # noqa: BLE001
        out("other_tenant", error=type(e).__name__, message=str(e))


async def main():
    c = Clients(json.loads(sys.argv[1]))
    first = None
    for name, check in [("cards", cards), ("send", send), ("stream", stream), ("cancel", cancel),
                        ("approval", approval), ("chat", chat), ("push", push),
                        ("artifacts", artifacts)]:
        try:
            got = await check(c)
            if name == "send":
                first = got
        except Exception as e:  # noqa: BLE001
            out(name, error=type(e).__name__, message=str(e), trace=traceback.format_exc())
    await refused(c, first or "none")
    out("end")


asyncio.run(main())
