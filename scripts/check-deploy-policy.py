"""Checks a rendered overlay for what made the first manifest crash-loop or misbehave, beyond
what schemas and checkov know about this worker:

- the pod runs as a non-root user that can read its Secret files (root-owned: through fsGroup and a
  group-read mode), and no other user can;
- every file the ConfigMap names (signing keys, results key, database URL, credential keys) is in a
  mounted Secret that a first install has (no previous.pem required);
- an init container runs `auth-worker migrate` and the worker does not migrate again on start;
- every container has resources.

Usage: check-deploy-policy.py RENDERED.yaml (run by scripts/check-deploy).
"""
import sys

import yaml

FIRST_INSTALL = {"auth-worker-keys": {"current.pem", "results.key"}, "auth-worker-database": {"database-url"}}
FILE_VARIABLES = ("AUTH_SIGNING_KEYS", "AUTH_RESULTS_KEY_FILE", "AUTH_DATABASE_URL_FILE", "AUTH_CREDENTIAL_KEYS")


def check(documents):
    deployments = [d for d in documents if d["kind"] == "Deployment"]
    if len(deployments) != 1:
        return [f"one Deployment expected, found {len(deployments)}"]
    config = next((d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "auth-worker"), None)
    if config is None:
        return ["no auth-worker ConfigMap"]
    pod = deployments[0]["spec"]["template"]["spec"]
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

    if not any(c.get("args") == ["migrate"] for c in pod.get("initContainers", [])):
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
