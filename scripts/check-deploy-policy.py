"""Checks a rendered overlay for what made the first manifest crash-loop or misbehave, beyond
what schemas and checkov know about this worker:

- the pod runs as a non-root user that can read its Secret files (root-owned: through fsGroup and a
  group-read mode), and no other user can;
- every file the ConfigMap names (signing keys, results key, database URL, credential keys) is in a
  mounted Secret that a first install has (no previous.pem required);
- an init container runs `auth-worker migrate` and the worker does not migrate again on start;
- every container has resources;
- the admin console runs as a Deployment of its own (`auth-worker admin`), listening beyond loopback
  only behind TLS (AUTH_CONSOLE_BEHIND_TLS), probed on /healthz, with a Service and a NetworkPolicy
  of its own; never on the worker's pods.

Usage: check-deploy-policy.py RENDERED.yaml (run by scripts/check-deploy).
"""
import sys

import yaml

FIRST_INSTALL = {"auth-worker-keys": {"current.pem", "results.key"}, "auth-worker-database": {"database-url"}}
FILE_VARIABLES = ("AUTH_SIGNING_KEYS", "AUTH_RESULTS_KEY_FILE", "AUTH_DATABASE_URL_FILE", "AUTH_CREDENTIAL_KEYS")


def component(deployment):
    return deployment["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")


def check(documents):
    deployments = [d for d in documents if d["kind"] == "Deployment"]
    workers = [d for d in deployments if component(d) == "worker"]
    consoles = [d for d in deployments if component(d) == "console"]
    if len(workers) != 1 or len(consoles) != 1 or len(deployments) != 2:
        return [f"one worker and one console Deployment expected, found {[component(d) for d in deployments]}"]
    config = next((d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "auth-worker"), None)
    if config is None:
        return ["no auth-worker ConfigMap"]
    problems = check_pod(workers[0], config, worker=True)
    problems += check_pod(consoles[0], config, worker=False)
    problems += check_console(consoles[0], documents)
    return problems


def check_console(deployment, documents):
    problems = []
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    if container.get("args") != ["admin"]:
        problems.append("the console Deployment must run `auth-worker admin`")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if env.get("AUTH_CONSOLE_ADDRESS", "127.0.0.1") != "127.0.0.1" and env.get("AUTH_CONSOLE_BEHIND_TLS") != "true":
        problems.append("the console listens beyond loopback without AUTH_CONSOLE_BEHIND_TLS=true")
    probe = container.get("readinessProbe", {}).get("httpGet", {})
    if probe.get("path") != "/healthz":
        problems.append("the console's readiness probe must ask /healthz")
    ports = {p["containerPort"] for p in container.get("ports", [])}
    services = [s for s in documents if s["kind"] == "Service"
                and s["spec"].get("selector", {}).get("app.kubernetes.io/component") == "console"]
    if not services or not {p.get("port") for p in services[0]["spec"]["ports"]} <= ports | {8090}:
        problems.append("the console needs a Service of its own, on its port")
    policies = [p for p in documents if p["kind"] == "NetworkPolicy"
                and p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") == "console"]
    if not policies:
        problems.append("the console needs a NetworkPolicy of its own")
    for service in documents:
        if service["kind"] == "Service" and service["spec"].get("selector", {}).get(
                "app.kubernetes.io/component") == "worker":
            if any(p.get("port") == 8090 for p in service["spec"]["ports"]):
                problems.append("the worker's Service must not expose the console's port")
    return problems


def check_pod(deployment, config, worker):
    pod = deployment["spec"]["template"]["spec"]
    containers = pod["containers"] + pod.get("initContainers", [])
    problems = []

    security = pod.get("securityContext", {})
    user, group = security.get("runAsUser"), security.get("fsGroup")
    if not security.get("runAsNonRoot") or not user:
        problems.append("the pod must run as a non-root user")
    for volume in pod.get("volumes", []):
        secret = volume.get("secret")
        if secret is None:
            continue
        mode = secret.get("defaultMode", 0o644)
        if not group or not mode & 0o040:
            problems.append(f"volume {volume['name']}: mode {oct(mode)} with fsGroup {group} is unreadable by uid {user}")
        if mode & 0o007:
            problems.append(f"volume {volume['name']}: mode {oct(mode)} lets other users read secrets")

    mounts = {}
    for container in containers:
        for mount in container.get("volumeMounts", []):
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            mounts[mount["mountPath"].rstrip("/")] = volume.get("secret", {}).get("secretName")
    for variable in FILE_VARIABLES:
        for path in (p.strip() for p in config["data"].get(variable, "").split(",")):
            if not path:
                continue
            directory, _, name = path.rpartition("/")
            secret = mounts.get(directory)
            if secret is None:
                problems.append(f"{variable}: {path} is not in a mounted Secret")
            elif name not in FIRST_INSTALL.get(secret, set()):
                problems.append(f"{variable}: a first install's {secret} Secret has no {name}")

    if worker and not any(c.get("args") == ["migrate"] for c in pod.get("initContainers", [])):
        problems.append("no init container runs `auth-worker migrate`")
    if config["data"].get("AUTH_MIGRATE_ON_START") != "false":
        problems.append("the init container migrates: AUTH_MIGRATE_ON_START must be \"false\"")
    for container in containers:
        if "limits" not in container.get("resources", {}) or "requests" not in container.get("resources", {}):
            problems.append(f"container {container['name']} has no resource requests and limits")
    return problems


def main():
    documents = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    problems = check(documents)
    for problem in problems:
        print(f"[deploy] {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
