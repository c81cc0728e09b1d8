"""The one place that refuses a NUL character in any text of a request: INVALID_ARGUMENT "FIELD: holds a NUL
character", before any handler runs.

PostgreSQL's text cannot hold NUL: a query that compares a column with such a value fails in the driver
(DataError), which reached the client as UNKNOWN with the SQL, and the server's log as a traceback per call;
SQLite stores it, so the two databases answered differently. Names, ids, tokens and labels never need it, so
every request of one message (the unary calls and the server-streaming ones, such as GetSamples and
WatchJobs), of every service, is checked here, through nested messages, repeated fields and maps. The
agents' streamed batches (StreamSamples) are checked per sample by server/validation.py validate_sample, with
the same ``nul_field``. Page tokens carry text too, once decoded: server/listings.py page_key refuses NUL in
them.
"""

from __future__ import annotations

import inspect

import grpc
from google.protobuf.descriptor import FieldDescriptor

NUL_DETAILS = "holds a NUL character"


def _in_value(field, value, where: str) -> str | None:
    if field.type == FieldDescriptor.TYPE_STRING:
        return where if "\x00" in value else None
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return nul_field(value, where + ".")
    return None


def _repeated(field) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 5.29 (``label`` is gone in 6)
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


def nul_field(message, prefix: str = "") -> str | None:
    """The path of the first text field of ``message`` holding NUL ("selection.labels[key]",
    "id_prefixes[3]"), or None. Only the fields that are set are visited (ListFields)."""
    for field, value in message.ListFields():
        where = prefix + field.name
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                if isinstance(key, str) and "\x00" in key:
                    return f"{where} (a key)"
                if (found := _in_value(value_field, item, f"{where}[{key!r}]")) is not None:
                    return found
        elif _repeated(field):
            if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
                continue
            for index, item in enumerate(value):
                if (found := _in_value(field, item, f"{where}[{index}]")) is not None:
                    return found
        elif (found := _in_value(field, value, where)) is not None:
            return found
    return None


class NulRefusal(grpc.aio.ServerInterceptor):
    """Refuses, before the handler runs, a one-message request with NUL in any of its texts."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        for kind in ("unary_unary", "unary_stream"):  # stream_*: validated per message (validate_sample)
            behavior = getattr(handler, kind)
            if behavior is not None:
                return handler._replace(**{kind: _checked(behavior)})
        return handler


async def _refuse(request, context) -> None:
    if (field := nul_field(request)) is not None:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field[:200]}: {NUL_DETAILS}")


def _checked(behavior):
    if inspect.isasyncgenfunction(behavior):
        async def streaming(request, context):
            await _refuse(request, context)
            async for response in behavior(request, context):
                yield response
        return streaming

    async def unary(request, context):
        await _refuse(request, context)
        return await behavior(request, context)
    return unary
