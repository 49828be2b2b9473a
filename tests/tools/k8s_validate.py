"""Validates Kubernetes objects against the API's OpenAPI schemas, offline: the JSON schemas
that the pinned kubernetes-validate wheel carries (python/requirements.lock), in their strict
form, so that types, required fields, enums and unknown fields are all checked. Every error of
every object is reported, each naming where the object came from, its kind and name, and the
field's path.

    validate(objects)                   -> ["<source>: <Kind> <name>: <path>: <message>", ...]
    python k8s_validate.py FILE.yaml..  prints one line per error, exit 1 when there is any
"""

import sys

import jsonschema
import referencing
from kubernetes_validate import utils as kv

# The Kubernetes API version the schemas are taken from: the newest the pinned wheel carries.
K8S_VERSION = kv.latest_version()

# Enumerations of the Kubernetes API that the wheel's schemas (made from the OpenAPI v2 document,
# which has no enums) leave as free strings; the values are those of the API reference
# (kubernetes.io/docs/reference/kubernetes-api, the OpenAPI v3 document's "enum"). Only fields our
# manifests set: a typo in one of them is what a cluster refuses at apply time.
ENUMS = {
    "io.k8s.api.core.v1.VolumeMount": {"mountPropagation": ["Bidirectional", "HostToContainer", "None"]},
    "io.k8s.api.core.v1.Container": {"imagePullPolicy": ["Always", "IfNotPresent", "Never"]},
    "io.k8s.api.core.v1.ContainerPort": {"protocol": ["SCTP", "TCP", "UDP"]},
    "io.k8s.api.core.v1.ServicePort": {"protocol": ["SCTP", "TCP", "UDP"]},
    "io.k8s.api.core.v1.PodSpec": {"restartPolicy": ["Always", "Never", "OnFailure"],
                                   "dnsPolicy": ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]},
    "io.k8s.api.core.v1.HostPathVolumeSource": {"type": ["", "BlockDevice", "CharDevice", "Directory",
                                                         "DirectoryOrCreate", "File", "FileOrCreate", "Socket"]},
}


def _schema_dir() -> str:
    return f"kubernetes-json-schema/v{K8S_VERSION}-local-strict"


def _validator(api_version: str, kind: str):
    group = api_version.split("/")[0].split(".")[0] + "-" if "/" in api_version else ""
    version = api_version.split("/")[-1]
    try:
        schema = kv.schema_contents(f"{_schema_dir()}/{kind.lower()}-{group}{version}.json", K8S_VERSION)
    except FileNotFoundError:
        return None
    defs = kv.schema_contents(f"{_schema_dir()}/_definitions.json", K8S_VERSION)
    for name, fields in ENUMS.items():
        props = defs["$defs"][name]["properties"]
        for field, values in fields.items():
            props[field] = {**props[field], "enum": values}
    registry = referencing.Resource.from_contents(defs) @ (referencing.Resource.from_contents(schema)
                                                           @ referencing.Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(objects) -> list:
    """Errors of `objects` (dicts, each with an optional "_source" naming where it came from)."""
    errors = []
    for obj in objects:
        obj = dict(obj)
        source = obj.pop("_source", "?")
        kind, api = obj.get("kind"), obj.get("apiVersion")
        where = f"{source}: {kind or '?'} {(obj.get('metadata') or {}).get('name', '?')}"
        if not isinstance(api, str) or not isinstance(kind, str):
            errors.append(f"{where}: apiVersion and kind are required")
            continue
        v = _validator(api, kind)
        if v is None:
            errors.append(f"{where}: unknown apiVersion/kind {api}/{kind}")
            continue
        for e in sorted(v.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
            path = "/".join(str(p) for p in e.absolute_path) or "(object)"
            errors.append(f"{where}: {path}: {e.message}")
    return errors


def main(argv) -> int:
    import yaml
    objects = []
    for name in argv:
        with open(name) as f:
            objects.extend({**o, "_source": name} for o in yaml.safe_load_all(f) if o is not None)
    errors = validate(objects)
    print("\n".join(errors) if errors else f"{len(objects)} objects valid (Kubernetes {K8S_VERSION})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
