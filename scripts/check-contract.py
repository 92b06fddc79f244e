"""Checks the machine-readable contract, and real messages against it.

    python3 scripts/check-contract.py                   the schemas and the AsyncAPI document
    python3 scripts/check-contract.py --messages DIR    and every DIR/<schema>--*.json against
                                                        contract/schemas/<schema>.json

1. Every schema in contract/schemas is a valid JSON Schema 2020-12 document (its metaschema).
2. contract/asyncapi.yaml is checked as AsyncAPI 3.0 requires of the objects it uses: the fields
   each object may have and must have, every $ref resolving (in the document or to a schema file),
   operations' actions, channels and replies, message correlation ids, headers and payload schemas
   valid. (No AsyncAPI 3.0 validator is packaged for this machine; these are the rules of the
   specification's sections 3.3-3.20 for those objects.)
3. Each message file validates against its schema, formats (date-time, uuid, uri) included; a
   message the worker produced (file name without the `request` role) may not carry a member the
   schema does not document, at any depth, so the schemas cannot fall behind the code.
4. Every schema has at least one message when --messages is given: every type was seen for real.
5. Requests the worker refuses for a missing credential are refused by the request schema too.
"""
import argparse
import json
import os
import re
import sys

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT = os.path.join(ROOT, "contract")
SCHEMAS = os.path.join(CONTRACT, "schemas")
problems = []


def problem(text):
    problems.append(text)


def check_sealed_schemas():
    """schemas/sealed/: what sealed members hold once opened (not messages of their own)."""
    folder = os.path.join(SCHEMAS, "sealed")
    count = 0
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".json"):
            continue
        count += 1
        schema = json.load(open(os.path.join(folder, name)))
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            problem(f"schemas/sealed/{name}: not a valid JSON Schema 2020-12: {error.message}")
    return count


def load_schemas():
    schemas = {}
    for name in sorted(os.listdir(SCHEMAS)):
        if not name.endswith(".json"):
            continue
        schema = json.load(open(os.path.join(SCHEMAS, name)))
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            problem(f"schemas/{name}: not a valid JSON Schema 2020-12: {error.message}")
        if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
            problem(f"schemas/{name}: $schema must name draft 2020-12")
        if not schema.get("$id", "").startswith("urn:auth-worker:schema:"):
            problem(f"schemas/{name}: $id must be urn:auth-worker:schema:<type>:<version>")
        schemas[name[:-5]] = schema
    return schemas


# The fields AsyncAPI 3.0 allows (and requires) on the objects this document uses.
OBJECTS = {
    "document": ({"asyncapi", "id", "info", "servers", "defaultContentType", "channels", "operations", "components"},
                 {"asyncapi", "info"}),
    "info": ({"title", "version", "description", "termsOfService", "contact", "license", "tags", "externalDocs"},
             {"title", "version"}),
    "license": ({"name", "url"}, {"name"}),
    "server": ({"host", "protocol", "protocolVersion", "pathname", "description", "title", "summary", "variables",
                "security", "tags", "externalDocs", "bindings"}, {"host", "protocol"}),
    "channel": ({"address", "messages", "title", "summary", "description", "servers", "parameters", "tags",
                 "externalDocs", "bindings"}, set()),
    "operation": ({"action", "channel", "title", "summary", "description", "security", "tags", "externalDocs",
                   "bindings", "traits", "messages", "reply"}, {"action", "channel"}),
    "reply": ({"address", "channel", "messages"}, set()),
    "message": ({"headers", "payload", "correlationId", "contentType", "name", "title", "summary", "description",
                 "tags", "externalDocs", "bindings", "examples", "traits"}, set()),
    "correlationId": ({"description", "location"}, {"location"}),
    "multiFormatSchema": ({"schemaFormat", "schema"}, {"schemaFormat", "schema"}),
    "components": ({"schemas", "servers", "channels", "operations", "messages", "securitySchemes",
                    "serverVariables", "parameters", "correlationIds", "replies", "replyAddresses", "externalDocs",
                    "tags", "operationTraits", "messageTraits", "serverBindings", "channelBindings",
                    "operationBindings", "messageBindings"}, set()),
}
RUNTIME_EXPRESSION = re.compile(r"^\$message\.(header|payload)#(/[^/]*)*$")


def fields(kind, value, where):
    allowed, required = OBJECTS[kind]
    if not isinstance(value, dict):
        problem(f"asyncapi {where}: a {kind} must be an object")
        return False
    if "$ref" in value:
        return True
    for key in value:
        if key not in allowed and not key.startswith("x-"):
            problem(f"asyncapi {where}: {kind} has no field {key}")
    for key in required:
        if key not in value:
            problem(f"asyncapi {where}: {kind} needs {key}")
    return True


def resolve(document, reference, where):
    """The object a local reference points at, or the schema file a relative one names."""
    if reference.startswith("#/"):
        node = document
        for part in reference[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                problem(f"asyncapi {where}: $ref {reference} does not resolve")
                return None
            node = node[part]
        return node
    # A file, or a part of one by a JSON pointer after `#` (`./schemas/login-request.json#/properties/data`).
    file, _, pointer = reference.partition("#")
    path = os.path.normpath(os.path.join(CONTRACT, file))
    if not os.path.isfile(path):
        problem(f"asyncapi {where}: $ref {reference} names no file")
        return None
    node = json.load(open(path))
    for part in (pointer[1:].split("/") if pointer.startswith("/") else []):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            problem(f"asyncapi {where}: $ref {reference} does not resolve")
            return None
        node = node[part]
    return node


def deref(document, value, where):
    while isinstance(value, dict) and "$ref" in value:
        value = resolve(document, value["$ref"], where)
    return value


def check_schema_object(document, schema, where):
    schema = deref(document, schema, where)
    if schema is None:
        return
    try:
        jsonschema.Draft7Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        problem(f"asyncapi {where}: not a valid schema: {error.message}")


def check_asyncapi(schemas):
    document = yaml.safe_load(open(os.path.join(CONTRACT, "asyncapi.yaml")))
    fields("document", document, "/")
    if document.get("asyncapi") != "3.0.0":
        problem("asyncapi: the document must declare asyncapi: 3.0.0")
    if fields("info", document.get("info", {}), "/info") and "license" in document["info"]:
        fields("license", document["info"]["license"], "/info/license")
    for name, server in document.get("servers", {}).items():
        fields("server", server, f"/servers/{name}")
    channels = document.get("channels", {})
    for name, channel in channels.items():
        fields("channel", channel, f"/channels/{name}")
        for message_name, message in channel.get("messages", {}).items():
            if deref(document, message, f"/channels/{name}/messages/{message_name}") is None:
                continue
    for name, operation in document.get("operations", {}).items():
        where = f"/operations/{name}"
        fields("operation", operation, where)
        if operation.get("action") not in ("send", "receive"):
            problem(f"asyncapi {where}: action must be send or receive")
        channel_ref = operation.get("channel", {}).get("$ref", "")
        if not channel_ref.startswith("#/channels/"):
            problem(f"asyncapi {where}: channel must be a $ref to #/channels/…")
        channel = resolve(document, channel_ref, where) if channel_ref else None
        for message in operation.get("messages", []):
            reference = message.get("$ref", "")
            if not reference.startswith(channel_ref + "/messages/"):
                problem(f"asyncapi {where}: message {reference} is not one of its channel's messages")
            resolve(document, reference, where)
        if "reply" in operation:
            reply = operation["reply"]
            fields("reply", reply, where + "/reply")
            reply_channel = reply.get("channel", {}).get("$ref", "")
            resolve(document, reply_channel, where + "/reply")
            for message in reply.get("messages", []):
                if not message.get("$ref", "").startswith(reply_channel + "/messages/"):
                    problem(f"asyncapi {where}/reply: message is not one of the reply channel's messages")
        if channel is not None and not channel.get("messages"):
            problem(f"asyncapi {where}: its channel has no messages")
    payloads = {}
    for name, message in document.get("components", {}).get("messages", {}).items():
        where = f"/components/messages/{name}"
        fields("message", message, where)
        if "correlationId" in message:
            fields("correlationId", message["correlationId"], where + "/correlationId")
            if not RUNTIME_EXPRESSION.match(message["correlationId"].get("location", "")):
                problem(f"asyncapi {where}: correlationId location is not a runtime expression")
        if "headers" in message:
            check_schema_object(document, message["headers"], where + "/headers")
        payload = message.get("payload")
        if isinstance(payload, dict) and "schemaFormat" in payload:
            fields("multiFormatSchema", payload, where + "/payload")
            if not payload["schemaFormat"].startswith("application/schema+json;version=draft-2020-12"):
                problem(f"asyncapi {where}: payload schemaFormat must be JSON Schema 2020-12")
            reference = payload.get("schema", {}).get("$ref", "")
            if resolve(document, reference, where + "/payload") is not None:
                payloads[os.path.basename(reference)[:-5]] = message.get("name")
        elif payload is not None:
            check_schema_object(document, payload, where + "/payload")
    for name, schema in schemas.items():
        if name not in payloads:
            problem(f"asyncapi: schemas/{name}.json is no message's payload")
        elif schema["properties"]["type"].get("const") != payloads[name]:
            problem(f"asyncapi: message {payloads[name]} has the payload of type {schema['properties']['type']}")
    return document


def undocumented(instance, schema, root, path):
    """Members of `instance` that `schema` (following local $refs and allOf/then) does not name."""
    while "$ref" in schema:
        node = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    found = []
    if isinstance(instance, dict) and "properties" in schema:
        for key, value in instance.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}".lstrip("."))
            else:
                found += undocumented(value, schema["properties"][key], root, f"{path}.{key}")
    return found


def check_messages(directory, schemas):
    seen = {name: 0 for name in schemas}
    checker = jsonschema.FormatChecker()
    # Without its optional helpers jsonschema passes every date-time and uri: refuse to check then.
    if checker.conforms("not a time", "date-time") or checker.conforms("not a uri", "uri"):
        problem("jsonschema cannot check date-time and uri here: install rfc3339-validator and rfc3986-validator")
        return 0
    for file in sorted(os.listdir(directory)):
        if not file.endswith(".json"):
            continue
        name, _, rest = file.partition("--")
        if name not in schemas:
            problem(f"{file}: no schema {name}.json")
            continue
        message = json.load(open(os.path.join(directory, file)))
        validator = jsonschema.Draft202012Validator(schemas[name], format_checker=checker)
        for error in sorted(validator.iter_errors(message), key=lambda e: list(e.path)):
            at = "/".join(str(part) for part in error.path)
            problem(f"{file}: at /{at}: {error.message}")
        if not rest.startswith("request"):
            for member in undocumented(message, schemas[name], schemas[name], ""):
                problem(f"{file}: {member} is not in schemas/{name}.json")
        seen[name] += 1
    for name, count in seen.items():
        if count == 0:
            problem(f"no message of schemas/{name}.json was checked")
    return sum(seen.values())


# Requests the worker refuses for a missing credential: the request schema must refuse them too,
# so a gateway that validates before it sends learns it before the worker answers.
REFUSED_REQUESTS = [
    {"method": "register", "email": "a@example.com"},
    {"method": "register", "email": "a@example.com", "sealed_credentials": {}},
    {"method": "password", "email": "a@example.com"},
    {"method": "password", "email": "a@example.com", "sealed_credentials": {"identity_token": "a.b.c.d.e"}},
    {"method": "apple", "sealed_credentials": {"password": "a.b.c.d.e"}},
    {"method": "refresh", "sealed_credentials": {"access_token": "a.b.c.d.e"}},
    {"method": "logout", "sealed_credentials": {}},
]
ACCEPTED_REQUESTS = [
    {"method": "register", "email": "a@example.com", "password": "correct horse"},
    {"method": "password", "email": "a@example.com", "sealed_credentials": {"password": "a.b.c.d.e"}},
    {"method": "refresh", "sealed_credentials": {"refresh_token": "a.b.c.d.e"}},
]


def check_requests(schemas):
    validator = jsonschema.Draft202012Validator(schemas["login-request"])
    envelope = {"specversion": "1.0", "id": "r-1", "source": "/gateway", "type": "auth.login.request"}
    for data in REFUSED_REQUESTS:
        if validator.is_valid(dict(envelope, data=data)):
            problem(f"schemas/login-request.json accepts {json.dumps(data)}, which the worker refuses")
    for data in ACCEPTED_REQUESTS:
        if not validator.is_valid(dict(envelope, data=data)):
            problem(f"schemas/login-request.json refuses {json.dumps(data)}, which the worker takes")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", help="a directory of <schema>--<anything>.json messages")
    args = parser.parse_args()
    schemas = load_schemas()
    check_asyncapi(schemas)
    check_requests(schemas)
    sealed = check_sealed_schemas()
    count = check_messages(args.messages, schemas) if args.messages else 0
    for text in problems:
        print(f"[contract] {text}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"[contract] {len(schemas)} schemas, {sealed} of sealed contents, and the AsyncAPI document are valid"
          + (f"; {count} real messages match them" if args.messages else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
