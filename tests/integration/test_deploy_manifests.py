"""Container and Kubernetes deployment (deploy/Dockerfile, deploy/k8s/, docs/DEPLOY.md).

No cluster and no container builder here, so: every manifest validates against the Kubernetes
API's schemas (tests/tools/k8s_validate.py over the pinned kubernetes-validate wheel's schemas,
offline, and shown to reject a broken object); the wiring
a schema cannot see is read field by field (FUSE device, mount propagation, the Secret, probes
on the metrics port, etcd endpoints = the StatefulSet's members); the DaemonSet's own command
line, with its environment filled in as the kubelet would, starts a real daemon against a real
etcd that the probes find ready and `ptcfs status` lists; the example Job's script reads a real
shard; and the runtime image's package list covers every library the binaries link (ldd)."""

import copy
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from typing import Optional

import yaml

import k8s_validate
from etcd_util import Etcd, live_ids
from cluster_util import write_secret
from ptcfs_harness import PTCFS, PTCFSD, Checkpoint, Daemon, free_port, require_binaries

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(REPO, "deploy", "k8s")
DOCKERFILE = os.path.join(REPO, "deploy", "Dockerfile")


def manifests():
    """[(file, object)] of every manifest but kustomization.yaml."""
    out = []
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            with open(os.path.join(K8S, name)) as f:
                out.extend((name, o) for o in yaml.safe_load_all(f) if o is not None)
    return out


def find(kind: str, name: str) -> dict:
    hits = [o for _, o in manifests() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} in deploy/k8s"
    return hits[0]


def project_version() -> str:
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(ptcfs VERSION ([0-9.]+)", f.read()).group(1)


def daemon_container() -> dict:
    ds = find("DaemonSet", "ptcfsd")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def ds_annotations() -> dict:
    return find("DaemonSet", "ptcfsd")["spec"]["template"]["metadata"]["annotations"]


def flags(args) -> dict:
    out = {}
    for a in args:
        assert a.startswith("--") and "=" in a, f"DaemonSet arg {a!r}: write flags as --name=value"
        k, v = a[2:].split("=", 1)
        out[k] = v
    return out


def expand(value: str, env: dict) -> str:
    """The kubelet's $(VAR) expansion of command, args and env values."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def container_env(c: dict, downward: dict, secrets: Optional[dict] = None, config: Optional[dict] = None) -> dict:
    """The container's environment as the kubelet sets it: values, the Downward API, keys of the
    shipped ConfigMaps (or of `config`, {name: data}, as an operator filled them in), and keys of
    `secrets` ({name: {key: value}}; an optional key not there is left unset, a required one fails)."""
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
            continue
        src = e["valueFrom"]
        if "fieldRef" in src:
            env[e["name"]] = downward[src["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            data = (config or {}).get(ref["name"]) or find("ConfigMap", ref["name"])["data"]
            env[e["name"]] = data[ref["key"]]
        else:
            ref = src["secretKeyRef"]
            value = (secrets or {}).get(ref["name"], {}).get(ref["key"])
            assert value is not None or ref.get("optional"), f"{e['name']}: Secret {ref['name']} has no {ref['key']}"
            if value is not None:
                env[e["name"]] = value
    return env


def test_every_manifest_validates_against_the_kubernetes_schemas():
    objects = [{**o, "_source": f"deploy/k8s/{f}"} for f, o in manifests()]
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for _, o in manifests())
    assert kinds == ["ConfigMap/ptcfs-s3", "DaemonSet/ptcfsd", "Job/ptcfs-read-example", "Namespace/ptcfs",
                     "NetworkPolicy/etcd", "Service/etcd", "StatefulSet/etcd"]
    assert k8s_validate.validate(objects) == []
    # The validator is live: a port given as a string, a missing selector, an unknown propagation
    # mode, an unknown field and an unknown kind are each refused, naming the object and the field.
    bad = copy.deepcopy(find("DaemonSet", "ptcfsd"))
    container = bad["spec"]["template"]["spec"]["containers"][0]
    container["ports"][0]["containerPort"] = "7070"
    del bad["spec"]["selector"]
    container["volumeMounts"][1]["mountPropagation"] = "Both"
    container["imagePullPolice"] = "Always"
    where = "broken: DaemonSet ptcfsd: "
    assert k8s_validate.validate([{**bad, "_source": "broken"}]) == [
        where + "spec: 'selector' is a required property",
        where + "spec/template/spec/containers/0: Additional properties are not allowed "
                "('imagePullPolice' was unexpected)",
        where + "spec/template/spec/containers/0/ports/0/containerPort: '7070' is not of type 'integer'",
        where + "spec/template/spec/containers/0/volumeMounts/1/mountPropagation: "
                "'Both' is not one of ['Bidirectional', 'HostToContainer', 'None']"]
    assert k8s_validate.validate([{"apiVersion": "apps/v1", "kind": "DaemonSett", "metadata": {"name": "x"},
                                   "_source": "typo"}]) == ["typo: DaemonSett x: unknown apiVersion/kind apps/v1/DaemonSett"]
    # The command line a person runs (docs/DEPLOY.md) reads the manifests from YAML.
    files = [os.path.join(K8S, n) for n in sorted(os.listdir(K8S)) if n.endswith(".yaml") and n != "kustomization.yaml"]
    r = subprocess.run([sys.executable, os.path.join(REPO, "tests", "tools", "k8s_validate.py"), *files],
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout.strip()) == (0, f"{len(objects)} objects valid (Kubernetes {k8s_validate.K8S_VERSION})")


def test_kustomization_applies_the_deployment_and_not_the_example():
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    assert k["resources"] == ["namespace.yaml", "etcd.yaml", "networkpolicy.yaml", "s3.yaml", "daemonset.yaml"]
    for r in k["resources"]:
        assert os.path.isfile(os.path.join(K8S, r)), r
    namespaces = {o["metadata"].get("namespace") for _, o in manifests() if o["kind"] != "Namespace"}
    assert namespaces == {"ptcfs"}


def test_daemonset_wiring():
    ds = find("DaemonSet", "ptcfsd")
    pod = ds["spec"]["template"]["spec"]
    c = daemon_container()
    f = flags(c["args"])
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert c["image"] == f"ptcfs:{project_version()}"
    assert c["command"] == ["/usr/local/bin/ptcfsd"]
    assert c["securityContext"]["privileged"] is True
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert {m["name"] for m in c["volumeMounts"]} == set(volumes)
    # FUSE: the host's device, and a mount point that propagates to the host for training pods.
    assert volumes[mounts["/dev/fuse"]["name"]]["hostPath"] == {"path": "/dev/fuse", "type": "CharDevice"}
    mnt = mounts[f["mount"]]
    assert mnt["mountPropagation"] == "Bidirectional"
    assert volumes[mnt["name"]]["hostPath"]["path"] == f["mount"]
    assert volumes[mounts[f["data"]]["name"]]["hostPath"]["type"] == "DirectoryOrCreate"
    # The secret file is the Secret's key, read-only.
    secret_dir, secret_key = os.path.split(f["secret-file"])
    sm = mounts[secret_dir]
    assert sm["readOnly"] is True
    sv = volumes[sm["name"]]["secret"]
    assert sv["secretName"] == "ptcfs-secret" and sv["items"] == [{"key": "secret", "path": secret_key}]
    assert sv["defaultMode"] == 0o400
    # Identity and address from the Downward API.
    env = {e["name"]: e for e in c["env"]}
    assert f["node"] == "$(NODE_NAME)" and env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert f["listen"] == "$(POD_IP):7070" and env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["PTCFS_DAEMON"]["value"] == f["listen"] and env["PTCFS_SECRET_FILE"]["value"] == f["secret-file"]
    # Probes on the cheap /healthz, the scrape annotation on /metrics, both on the node's cluster
    # address (host networking: 0.0.0.0 would serve every address of the host).
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert f["metrics"] == f"$(POD_IP):{ports['metrics']}" and f["listen"].endswith(f":{ports['control']}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    assert ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    assert f["log-format"] == "json"
    # The direct socket lies on a host path that the example training pod mounts at the same place.
    sock_dir = os.path.dirname(f["direct-socket"])
    assert volumes[mounts[sock_dir]["name"]]["hostPath"] == {"path": sock_dir, "type": "DirectoryOrCreate"}
    job = find("Job", "ptcfs-read-example")["spec"]["template"]["spec"]
    (reader,) = job["containers"]
    job_volumes = {v["name"]: v for v in job["volumes"]}
    (run,) = [m for m in reader["volumeMounts"] if m["mountPath"] == sock_dir]
    assert job_volumes[run["name"]]["hostPath"]["path"] == sock_dir
    # --etcd names every member of the StatefulSet through its headless Service.
    sts, svc = find("StatefulSet", "etcd"), find("Service", "etcd")
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == "etcd"
    client_port = {p["name"]: p["port"] for p in svc["spec"]["ports"]}["client"]
    members = [f"etcd-{i}" for i in range(sts["spec"]["replicas"])]
    assert f["etcd"].split(",") == [f"https://{m}.etcd.ptcfs.svc:{client_port}" for m in members]
    etcd_args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], True)
                     for a in sts["spec"]["template"]["spec"]["containers"][0]["command"][1:])
    assert etcd_args["initial-cluster"].split(",") == [f"{m}=https://{m}.etcd.ptcfs.svc:2380" for m in members]
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]}["peer"] == 2380
    # The daemon's etcd client certificate, CA and key come from the Secret ptcfs-etcd-client.
    for flag, key in (("etcd-ca", "ca.crt"), ("etcd-cert", "client.crt"), ("etcd-key", "client.key")):
        folder, name = os.path.split(f[flag])
        m = mounts[folder]
        assert m["readOnly"] is True and name == key, flag
        sv = volumes[m["name"]]["secret"]
        assert sv["secretName"] == "ptcfs-etcd-client" and {"key": key, "path": key} in sv["items"], flag
        assert sv["defaultMode"] == 0o400
    # The S3 tier: endpoint and durable prefix from the ConfigMap ptcfs-s3 (empty as shipped: no S3) as
    # the environment ptcfsd reads for --s3-endpoint and --s3-durable, the keys from the Secret ptcfs-s3
    # as AWS's tools read them, optional; none of it in the args.
    assert not any(a.startswith("--s3") for a in c["args"])
    assert env["AWS_ENDPOINT_URL_S3"]["valueFrom"]["configMapKeyRef"] == {"name": "ptcfs-s3", "key": "endpoint"}
    assert env["PTCFS_S3_DURABLE"]["valueFrom"]["configMapKeyRef"] == {"name": "ptcfs-s3", "key": "durable"}
    # Optional: a ConfigMap made before the key existed still starts the pods (no budget).
    assert env["PTCFS_DISK_BUDGET_MIB"]["valueFrom"]["configMapKeyRef"] == {"name": "ptcfs-s3",
                                                                             "key": "disk-budget-mib",
                                                                             "optional": True}
    assert find("ConfigMap", "ptcfs-s3")["data"] == {"endpoint": "", "durable": "", "disk-budget-mib": "0"}
    for var, key in (("AWS_ACCESS_KEY_ID", "access_key_id"), ("AWS_SECRET_ACCESS_KEY", "secret_access_key")):
        assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "ptcfs-s3", "key": key, "optional": True}


def test_etcd_demands_tls_client_certificates_and_admits_only_ptcfs():
    """etcd serves clients and peers over TLS only and refuses a connection without a certificate of
    its CA (what test_etcd_tls.py shows of a real etcd started with these flags); its probes do not
    restart a member for a lost quorum; and a NetworkPolicy admits to its ports only its members and
    the ptcfs daemons."""
    sts = find("StatefulSet", "etcd")
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], True) for a in c["command"][1:])
    for key in ("listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls"):
        assert args[key].startswith("https://"), key
    assert args["client-cert-auth"] is True and args["peer-client-cert-auth"] is True
    tls_dir = "/etc/etcd/tls"
    assert {k: args[k] for k in ("trusted-ca-file", "cert-file", "key-file", "peer-trusted-ca-file",
                                 "peer-cert-file", "peer-key-file")} == {
        "trusted-ca-file": f"{tls_dir}/ca.crt", "cert-file": f"{tls_dir}/server.crt",
        "key-file": f"{tls_dir}/server.key", "peer-trusted-ca-file": f"{tls_dir}/ca.crt",
        "peer-cert-file": f"{tls_dir}/server.crt", "peer-key-file": f"{tls_dir}/server.key"}
    (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == tls_dir]
    assert m["readOnly"] is True
    (v,) = [v for v in pod["volumes"] if v["name"] == m["name"]]
    assert v["secret"]["secretName"] == "etcd-tls" and v["secret"]["defaultMode"] == 0o400
    assert sorted(i["key"] for i in v["secret"]["items"]) == ["ca.crt", "server.crt", "server.key"]
    # Probes on the plain metrics listener (the kubelet has no client certificate); liveness from the
    # member's own state (serializable), so that a lost quorum restarts nobody.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert args["listen-metrics-urls"] == f"http://0.0.0.0:{ports['probes']}"
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "probes"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health?exclude=NOSPACE&serializable=true", "port": "probes"}
    assert c["image"] == "quay.io/coreos/etcd:v3.5.17"  # etcd 3.4 ignores `serializable` (docs/DEPLOY.md)
    # The NetworkPolicy: ingress only, members on both ports, daemons (by pod or node address) on the
    # client port, nobody on the probe port; every rule names its sources and ports.
    np = find("NetworkPolicy", "etcd")["spec"]
    assert np["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "etcd"}}
    assert np["policyTypes"] == ["Ingress"]
    rules = np["ingress"]
    assert all(r.get("from") and r.get("ports") for r in rules), rules
    admitted = {}
    for r in rules:
        for src in r["from"]:
            who = src["podSelector"]["matchLabels"]["app.kubernetes.io/name"] if "podSelector" in src else "ipBlock"
            admitted.setdefault(who, set()).update(p["port"] for p in r["ports"])
    assert admitted == {"etcd": {2379, 2380}, "ptcfsd": {2379}, "ipBlock": {2379}}, admitted
    ds = find("DaemonSet", "ptcfsd")
    assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "ptcfsd"
    assert sts["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "etcd"
    # DEPLOY.md makes the Secrets both use.
    with open(os.path.join(REPO, "docs", "DEPLOY.md")) as f:
        doc = f.read()
    assert "deploy/etcd-certs.sh" in doc
    assert "create secret generic etcd-tls" in doc and "create secret generic ptcfs-etcd-client" in doc


def test_the_s3_settings_of_the_manifests_write_a_step_through(tmp_path):
    """The ConfigMap ptcfs-s3 filled in with a real S3 server (SeaweedFS) and the Secret ptcfs-s3 with its
    keys: the DaemonSet's env, as the kubelet sets it, gives a daemon that writes an imported step
    through to the bucket; as shipped (empty), a daemon with no S3."""
    from s3_util import WRITER, S3Server

    require_binaries()
    c = daemon_container()
    s3 = S3Server(str(tmp_path / "s3"))
    s3.start()
    try:
        s3.bucket("ckpts")
        config = {"ptcfs-s3": {"endpoint": s3.endpoint, "durable": "s3://ckpts/cluster-a", "disk-budget-mib": "64"}}
        secrets = {"ptcfs-s3": {"access_key_id": WRITER[0], "secret_access_key": WRITER[1]}}
        env = container_env(c, {"spec.nodeName": "n", "status.podIP": "127.0.0.1"}, secrets, config)
        tier = ("AWS_", "PTCFS_S3_", "PTCFS_DISK_")
        s3_env = {k: v for k, v in env.items() if k.startswith(tier)}
        assert s3_env == {"AWS_ENDPOINT_URL_S3": s3.endpoint, "PTCFS_S3_DURABLE": "s3://ckpts/cluster-a",
                          "PTCFS_DISK_BUDGET_MIB": "64",
                          "AWS_ACCESS_KEY_ID": WRITER[0], "AWS_SECRET_ACCESS_KEY": WRITER[1]}
        shipped = container_env(c, {"spec.nodeName": "n", "status.podIP": "127.0.0.1"})
        off = Daemon(str(tmp_path / "off"))
        off.env = {k: v for k, v in shipped.items() if k.startswith(tier)}
        assert off.env == {"AWS_ENDPOINT_URL_S3": "", "PTCFS_S3_DURABLE": "", "PTCFS_DISK_BUDGET_MIB": "0"}
        off.start()
        try:
            assert "s3_durable" not in off.cli_json("status", "--json")
        finally:
            off.stop(cleanup_mount=True)
        d = Daemon(str(tmp_path / "node"))
        d.env = s3_env
        d.start()
        try:
            ck = Checkpoint(str(tmp_path / "ck"), tp=1, pp=2)
            d.cli("import", ck.path, "--job", "j", "--step", "1")
            deadline = time.monotonic() + 60
            while d.cli_json("ls", "j/1", "--json")["durable"]["state"] != "durable":
                assert time.monotonic() < deadline, d.log_tail()
                time.sleep(0.1)
            assert "cluster-a/j/1/ptc.json" in s3.objects("ckpts", "cluster-a/")
            assert WRITER[1] not in d.log_tail(100000)
        finally:
            d.stop(cleanup_mount=True)
    finally:
        s3.close()


def test_daemonset_command_line_starts_a_daemon_the_probes_find_ready(tmp_path):
    """The DaemonSet's args and env, expanded as the kubelet would on node k8s-node-1 (host paths
    moved under tmp, ports made free, --etcd pointed at a real local etcd with client-cert TLS and
    the etcd certificate flags at certificates of deploy/etcd-certs.sh): the daemon registers
    under the node name with the GPUs of PTCFS_GPUS, the probes' /healthz and Prometheus' /metrics
    answer, the CLI reaches it through the env the manifest sets, and the example Job's script
    reads a shard."""
    require_binaries()
    c = daemon_container()
    downward = {"spec.nodeName": "k8s-node-1", "status.podIP": "127.0.0.1"}
    env = container_env(c, downward)
    args = [expand(a, env) for a in c["args"]]
    f = flags(args)
    assert f["node"] == "k8s-node-1" and f["gpus"] == env["PTCFS_GPUS"] == "8"
    assert f["metrics"] == "127.0.0.1:9464"  # the pod IP: with host networking, the node's address
    control, metrics = free_port(), free_port()
    secret = write_secret(str(tmp_path))
    certs = str(tmp_path / "certs")
    r = subprocess.run(["bash", os.path.join(REPO, "deploy", "etcd-certs.sh"), certs, "127.0.0.1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with Etcd(str(tmp_path), tls=certs) as etcd:
        moved = {"listen": f"127.0.0.1:{control}", "metrics": f"127.0.0.1:{metrics}", "etcd": etcd.endpoints,
                 "secret-file": secret, "direct-socket": str(tmp_path / "run" / "direct.sock"),
                 **{k: os.path.join(certs, os.path.basename(f[k])) for k in ("etcd-ca", "etcd-cert", "etcd-key")}}
        run_args = [f"--{k}={moved.get(k, v)}" for k, v in f.items() if k not in ("data", "mount")]
        d = Daemon(str(tmp_path / "node"), name="k8s", port=control, secret_file=secret, flags=run_args)
        d.start()
        try:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                path = c[probe]["httpGet"]["path"]
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}{path}", timeout=10) as r:
                    assert (r.status, r.read()) == (200, b"ok\n"), probe
            scrape = ds_annotations()
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}{scrape['prometheus.io/path']}", timeout=10) as r:
                assert r.status == 200
                page = r.read().decode()
            assert re.search(r'^ptcfs_info\{[^}]*node="k8s-node-1"[^}]*\} 1$', page, re.M), page[:2000]
            assert live_ids(d) == ["k8s-node-1"]
            # The CLI as `kubectl exec ds/ptcfsd -- ptcfs status` runs it: from the env alone.
            cli_env = {**os.environ, "PTCFS_DAEMON": f"127.0.0.1:{control}", "PTCFS_SECRET_FILE": secret}
            st = subprocess.run([PTCFS, "status", "--json"], env=cli_env, capture_output=True, text=True, timeout=60)
            assert st.returncode == 0, st.stderr
            nodes = json.loads(st.stdout)["cluster"]["nodes"]
            assert [(n["id"], n["gpus"]) for n in nodes] == [("k8s-node-1", 8)]

            ck = Checkpoint(str(tmp_path / "ck"), tp=2, pp=2)
            d.cli_json("import", ck.path, "--job", "gpt", "--step", "100", "--json")
            job = find("Job", "ptcfs-read-example")
            (reader,) = job["spec"]["template"]["spec"]["containers"]
            assert reader["volumeMounts"][0]["mountPropagation"] == "HostToContainer"
            script = reader["args"][0].replace(reader["volumeMounts"][0]["mountPath"], d.mnt)
            # It reads through the direct socket, found through the mount as in the pod.
            script += "\nprint(ptcfs.direct.open(os.path.join(step, 'tp0-pp0.safetensors')).direct)\n"
            # The image's /opt/ptcfs/bin/python is, here, the project's venv with the source tree's package.
            assert reader["command"][0] == "/opt/ptcfs/bin/python"
            py = subprocess.run([sys.executable, *reader["command"][1:], script], capture_output=True,
                                text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.path.join(REPO, "python")})
            assert py.returncode == 0, py.stderr
            want = [f"{n} {tuple(a.shape)} {a.dtype}" for n, a in sorted(ck.slices[(0, 0)].items())]
            assert py.stdout.splitlines() == want + ["True"]
            # etcd gone: the liveness probe still finds the daemon alive (it fences itself; reads go on).
            etcd.stop()
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}{c['livenessProbe']['httpGet']['path']}",
                                        timeout=c["livenessProbe"]["timeoutSeconds"]) as r:
                assert (r.status, r.read()) == (200, b"ok\n")
        finally:
            d.stop()


def runtime_packages() -> set:
    with open(DOCKERFILE) as f:
        text = f.read()
    block = text.split("# runtime packages begin", 1)[1].split("# runtime packages end", 1)[0]
    words = block.replace("\\", " ").split()
    start = words.index("--no-install-recommends") + 1
    return set(words[start:words.index("&&", start)])


def apt_closure(packages) -> set:
    """The packages and everything they depend on, from the local apt lists (no download)."""
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                        "--no-breaks", "--no-replaces", "--no-enhances", *packages],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = set(packages)
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*(?:\|)?(?:Pre)?Depends: <?([^>\s:]+)", line) or re.match(r"^([a-z0-9][^\s:<>]*)$", line)
        if m:
            out.add(m.group(1))
    return out


def package_of(lib: str) -> str:
    """The Debian package that installed the file `lib` (as ldd found it; /lib is /usr/lib)."""
    for path in dict.fromkeys([lib, os.path.realpath(lib)]):
        for p in dict.fromkeys([path, re.sub(r"^/usr/", "/", path), re.sub(r"^/(lib|lib64)/", r"/usr/\1/", path)]):
            r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
            if r.returncode == 0:
                return r.stdout.split(":")[0]
    return ""


def test_runtime_image_carries_every_library_the_binaries_link():
    require_binaries()
    pkgs = runtime_packages()
    assert {"fuse3", "python3", "python3-venv"} <= pkgs
    # Debian 12's base image has the Priority: required packages and what they depend on.
    q = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Priority}\n"], capture_output=True, text=True)
    base = apt_closure(sorted(l.split()[0] for l in q.stdout.splitlines() if l.endswith(" required")))
    have = apt_closure(sorted(pkgs)) | base
    needed = {}
    for binary in (PTCFSD, PTCFS):
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"=> (/\S+)", ldd):
            name = os.path.basename(lib)
            owner = package_of(lib)
            assert owner, f"{lib} (linked by {binary}) belongs to no Debian package"
            needed[name] = owner
    missing = {lib: p for lib, p in needed.items() if p not in have}
    assert not missing, f"deploy/Dockerfile's runtime stage lacks {missing}"
    assert "libfuse3.so.3" in needed and "libprometheus-cpp-pull.so.1.0" in needed


def dockerfile_stages() -> list:
    """The Dockerfile's stages, each a list of (INSTRUCTION, arguments) with continuation lines joined."""
    with open(DOCKERFILE) as f:
        text = re.sub(r"\\\n", " ", f.read())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word == "FROM":
            stages.append([])
        stages[-1].append((word, " ".join(rest.split())))
    return stages


def test_runtime_image_installs_the_python_package_as_users_do(ptcfs_wheel, tmp_path):
    """The image's Python client is the wheel pip builds from pyproject.toml, pip-installed into the
    venv /opt/ptcfs that is first on PATH and that the example Job runs (tests/integration/
    test_pip_install.py shows such an install reading a view directly); the library inside the
    wheel links nothing the runtime lacks; C programs get the CMake-built library and its header."""
    build, runtime = dockerfile_stages()
    (run,) = [a for w, a in build if w == "RUN" and "cmake --build" in a]
    targets = re.search(r"--target ([\w ]+?)(?: &&|$)", run).group(1).split()
    assert "ptcfs_client" in targets, targets
    assert run.endswith("python3 -m venv /opt/pip && /opt/pip/bin/pip wheel --no-deps -w /wheels "
                        "-C cmake.define.PTCFS_WITH_NCCL=OFF ."), run
    assert ["--from=build", "/wheels", "/tmp/wheels"] in [a.split() for w, a in runtime if w == "COPY"]
    (install,) = [a for w, a in runtime if w == "RUN" and "pip install" in a]
    assert install == ("python3 -m venv /opt/ptcfs && /opt/ptcfs/bin/pip install --no-cache-dir "
                       "/tmp/wheels/ptcfs-*.whl && rm -rf /tmp/wheels")
    env = dict(a.split("=", 1) for w, a in runtime if w == "ENV")
    assert env["PATH"].split(":")[0] == "/opt/ptcfs/bin" and "PTCFS_CLIENT_LIB" not in env
    assert {"python3", "python3-venv"} <= runtime_packages()
    (reader,) = find("Job", "ptcfs-read-example")["spec"]["template"]["spec"]["containers"]
    assert reader["command"] == ["/opt/ptcfs/bin/python", "-c"]
    copies = [a.split() for w, a in runtime if w == "COPY" and "libptcfs_client.so" in a]
    assert copies == [["--from=build", "/build/client/libptcfs_client.so", "/usr/local/lib/"]], copies
    assert ("RUN", "ldconfig") in runtime
    with zipfile.ZipFile(ptcfs_wheel) as z:
        lib = z.extract("ptcfs/libptcfs_client.so", str(tmp_path))
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True, check=True).stdout
    linked = sorted(os.path.basename(l) for l in re.findall(r"=> (/\S+)", ldd))
    assert linked == ["libc.so.6", "libgcc_s.so.1", "libm.so.6", "libstdc++.so.6"], linked


def test_dockerfile_builds_with_the_projects_install_script_and_copies_what_k8s_runs():
    with open(DOCKERFILE) as f:
        text = f.read()
    assert re.search(r"^FROM debian:12 AS build$", text, re.M) and re.search(r"^FROM debian:12$", text, re.M)
    assert "bash deploy/install-deps.sh build" in text
    assert "COPY --from=build /build/daemon/ptcfsd /build/cli/ptcfs /usr/local/bin/" in text
    assert daemon_container()["command"][0].startswith("/usr/local/bin/")
    r = subprocess.run(["bash", os.path.join(REPO, "deploy", "install-deps.sh"), "nonsense"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "usage: install-deps.sh [build|bench|gpu]" in r.stderr
    with open(os.path.join(REPO, ".dockerignore")) as f:
        ignored = f.read().split()
    assert {".git", "build*/", "**/node_modules"} <= set(ignored)
    with open(os.path.join(REPO, "docs", "DEPLOY.md")) as f:
        doc = f.read()
    assert "docker build -f deploy/Dockerfile" in doc and "kubectl apply -k deploy/k8s" in doc
    assert "create secret generic ptcfs-secret" in doc
