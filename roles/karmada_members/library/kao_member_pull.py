#!/usr/bin/python
"""Ansible module: join member clusters to Karmada in Pull mode, all at once.

For each member, what the role's Pull join did as a chain of tasks (and
`karmadactl register` does with a bootstrap token), in kao's words and with
kao's checks:

1. read the member's kubeconfig (https server, inline CA, inline client
   certificate or token) and its cluster ID, the UID of its kube-system
   namespace;
2. refuse a Cluster name another cluster holds, a cluster already joined
   under another name (or given twice in this call), or a change of sync
   mode;
3. in karmada-apiserver: the member's execution space (karmada-es-<member>)
   and karmada-agent's per-cluster RBAC, bound to the user of the agent
   certificate kao issued (system:karmada:agent:<member>);
4. in the member: the agent's namespace, its kubeconfig Secret (Karmada's
   CA and the agent's own certificate and key, nothing of an
   administrator's), its service account and RBAC, and the karmada-agent
   Deployment, last. The agent registers the Cluster itself; nothing waits
   for its Pods (the member may have no nodes yet).

Members are joined concurrently, one thread each, in this one process, and
each member's Deployment is applied as soon as that member's own steps are
done: the chain of tasks cost the controller about half a second of CPU per
task and member (the Python Kubernetes client's import alone), and since
Ansible runs a task for every member before the next, no Deployment landed
before every member's earlier steps were done, a minute and more with
twenty members. The module itself never fails for a member: it reports
every member's outcome under `members`, and the role fails each member's
own host with its message (tasks/join_pull_report.yml), so one member's
failure stops only that member.

Every object is server-side applied, with the same names, labels and
contents the task chain applied: a second call changes nothing, and a
member the task chain joined is not changed either. The Deployment's Pod
template names the digest of the agent's certificate, so a renewed or
rotated certificate rolls the agents onto it. Keys never appear in the
result or in a message.

In check mode every apply is a server-side dry run (dryRun=All), so
`applied` lists what would change, as the API servers themselves decide it,
and nothing is stored.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kao_member_pull
short_description: Join member clusters to Karmada in Pull mode, concurrently
description:
  - Grants each member's karmada-agent its per-cluster RBAC in karmada-apiserver and installs the agent in the member
    (kubeconfig Secret, service account, RBAC, Deployment), with server-side apply. Does not wait for the agent.
    Reports each member's outcome instead of failing.
options:
  members:
    description: The members to join.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The Karmada Cluster name of the member.
        type: str
        required: true
      kubeconfig:
        description: Path of the member's kubeconfig on the controller.
        type: path
        required: true
      context:
        description: Context of the kubeconfig to use; its current context when empty.
        type: str
        default: ""
      agent_user:
        description: The user of the agent's certificate, bound to the agent's RBAC in karmada-apiserver.
        type: str
        required: true
      agent_cert:
        description: Path of the agent's client certificate (PEM), issued by Karmada's CA.
        type: path
        required: true
      agent_key:
        description: Path of its key.
        type: path
        required: true
      execution_namespace:
        description: The member's execution space in karmada-apiserver, where its Work objects live.
        type: str
        required: true
      agent_rbac:
        description: Name of the agent's ClusterRole and ClusterRoleBinding in karmada-apiserver.
        type: str
        required: true
      agent_secret_rbac:
        description: Name of the agent's Role and RoleBinding for its credential Secrets, in cluster_namespace.
        type: str
        required: true
      agent_work_rbac:
        description: Name of the agent's Role and RoleBinding for its Work objects, in execution_namespace.
        type: str
        required: true
      secret:
        description: Name of the Secret in karmada-apiserver the agent registers with the member's CA and token.
        type: str
        required: true
      impersonator_secret:
        description: Name of the Secret in karmada-apiserver the agent registers with the impersonator's token.
        type: str
        required: true
      provider:
        description: The Cluster's provider (--cluster-provider).
        type: str
        default: ""
      region:
        description: The Cluster's region (--cluster-region).
        type: str
        default: ""
      zones:
        description: The Cluster's zones (--cluster-zones).
        type: list
        elements: str
        default: []
  karmada_server:
    description: karmada-apiserver's URL, https://host:port, for kao and for the agents.
    type: str
    required: true
  karmada_ca:
    description: Path of Karmada's CA certificate; the agents get it too.
    type: path
    required: true
  karmada_cert:
    description: Path of kao's administrator client certificate.
    type: path
    required: true
  karmada_key:
    description: Path of its key.
    type: path
    required: true
  cluster_namespace:
    description: Namespace of the members' credentials in karmada-apiserver (Karmada's --cluster-namespace).
    type: str
    default: karmada-cluster
  agent_namespace:
    description: Namespace of karmada-agent in the members, and of its leader-election lease in karmada-apiserver.
    type: str
    default: karmada-system
  agent_name:
    description: Name of the agent's Deployment, ClusterRole and ClusterRoleBinding in the members.
    type: str
    default: karmada-agent
  agent_service_account:
    description: The agent's service account in the members.
    type: str
    default: karmada-agent-sa
  agent_kubeconfig_secret:
    description: The Secret in the members with the agent's kubeconfig for karmada-apiserver.
    type: str
    default: karmada-kubeconfig
  agent_kubeconfig_key:
    description: Its key, and the file name the agent reads.
    type: str
    default: karmada-kubeconfig
  agent_kubeconfig_dir:
    description: Where the agent's container mounts the Secret.
    type: str
    default: /etc/karmada/kubeconfig
  agent_image:
    description: karmada-agent's image.
    type: str
    required: true
  agent_image_pull_policy:
    description: The agent container's imagePullPolicy.
    type: str
    default: IfNotPresent
  agent_replicas:
    description: The number of agent Pods.
    type: int
    default: 2
  agent_status_update_frequency:
    description: The agent's --cluster-status-update-frequency.
    type: str
    default: 10s
  labels:
    description: Labels of every object the module applies.
    type: dict
    default: {}
  field_manager:
    description: Server-side apply field manager.
    type: str
    default: kao-members
author: kao
"""

RETURN = r"""
members:
  description: >-
    For each member name: failed (bool), msg (why, when failed), applied (kind/name of every object created or
    changed), cluster_id and server (the member's API server URL, the agent's --cluster-api-endpoint).
  type: dict
  returned: always
"""

import base64
import hashlib
import http.client
import json
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kao_join import Claims, JoinFailed, namespace_object
from ansible.module_utils.kao_kube import KubeError, from_files, from_kubeconfig, object_path

# Most members joined at once; each thread holds two connections.
MAX_THREADS = 32

# The annotation of the agent's Pod template with its certificate's digest.
CERT_DIGEST_ANNOTATION = "kao.io/agent-certificate-sha256"


def karmada_rbac(p):
    """What karmada-agent may do in karmada-apiserver, as `karmadactl
    register` grants it, bound to the user of kao's agent certificate: its
    own Cluster and Cluster status, its credential Secrets in the cluster
    namespace, and the Work objects of its execution space. Nothing else of
    Karmada is the agent's to touch."""
    labels, name, user = p["labels"], p["name"], p["agent_user"]
    subjects = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]

    def meta(n, namespace=None):
        m = {"name": n}
        if namespace is not None:
            m["namespace"] = namespace
        m["labels"] = labels
        return m

    def binding(kind, n, namespace=None):
        role = "ClusterRole" if kind == "ClusterRoleBinding" else "Role"
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta(n, namespace),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": n}, "subjects": subjects}

    cluster_rules = [
        {"apiGroups": ["cluster.karmada.io"], "resources": ["clusters"], "resourceNames": [name], "verbs": ["get", "delete"]},
        {"apiGroups": ["cluster.karmada.io"], "resources": ["clusters"], "verbs": ["create", "list", "watch"]},
        {"apiGroups": ["cluster.karmada.io"], "resources": ["clusters/status"], "resourceNames": [name], "verbs": ["update"]},
        {"apiGroups": ["config.karmada.io"],
         "resources": ["resourceinterpreterwebhookconfigurations", "resourceinterpretercustomizations"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["patch", "create", "update"]},
    ]
    secret_rules = [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [p["secret"], p["impersonator_secret"]],
         "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    work_rules = [
        {"apiGroups": ["work.karmada.io"], "resources": ["works"], "verbs": ["get", "create", "list", "watch", "update", "delete"]},
        {"apiGroups": ["work.karmada.io"], "resources": ["works/status"], "verbs": ["patch", "update"]},
    ]
    ns, es = p["cluster_namespace"], p["execution_namespace"]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(p["agent_rbac"]),
         "rules": cluster_rules},
        binding("ClusterRoleBinding", p["agent_rbac"]),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(p["agent_secret_rbac"], ns),
         "rules": secret_rules},
        binding("RoleBinding", p["agent_secret_rbac"], ns),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(p["agent_work_rbac"], es),
         "rules": work_rules},
        binding("RoleBinding", p["agent_work_rbac"], es),
    ]


def agent_kubeconfig(p, ca_text, cert_text, key_text):
    """The agent's kubeconfig for karmada-apiserver, byte for byte what the
    role's template made (each PEM stripped of trailing whitespace, then
    base64; values as JSON strings), so that a member joined before changes
    nothing."""

    def b64(text):
        return base64.b64encode(text.rstrip().encode("utf-8")).decode("ascii")

    user = json.dumps(p["agent_user"])
    return "".join([
        "apiVersion: v1\n",
        "kind: Config\n",
        "clusters:\n",
        "  - name: karmada-apiserver\n",
        "    cluster:\n",
        "      server: %s\n" % json.dumps(p["karmada_server"]),
        "      certificate-authority-data: %s\n" % json.dumps(b64(ca_text)),
        "users:\n",
        "  - name: %s\n" % user,
        "    user:\n",
        "      client-certificate-data: %s\n" % json.dumps(b64(cert_text)),
        "      client-key-data: %s\n" % json.dumps(b64(key_text)),
        "contexts:\n",
        "  - name: karmada\n",
        "    context:\n",
        "      cluster: karmada-apiserver\n",
        "      user: %s\n" % user,
        "current-context: karmada\n",
    ])


def agent_command(p, server):
    """karmada-agent's command line, after Karmada's own (register.go and
    artifacts/agent): the agent registers the member under its name with
    the member's API server URL and topology, keeps its leader-election
    lease in the agent namespace of karmada-apiserver, and serves metrics
    and health on the Pod's IP."""
    cmd = ["/bin/karmada-agent",
           "--karmada-kubeconfig=%s/%s" % (p["agent_kubeconfig_dir"], p["agent_kubeconfig_key"]),
           "--cluster-name=" + p["name"],
           "--cluster-api-endpoint=" + server]
    if p["provider"]:
        cmd.append("--cluster-provider=" + p["provider"])
    if p["region"]:
        cmd.append("--cluster-region=" + p["region"])
    if p["zones"]:
        cmd.append("--cluster-zones=" + ",".join(p["zones"]))
    return cmd + ["--cluster-namespace=" + p["cluster_namespace"],
                  "--controllers=*",
                  "--leader-elect-resource-namespace=" + p["agent_namespace"],
                  "--cluster-status-update-frequency=" + p["agent_status_update_frequency"],
                  "--metrics-bind-address=$(POD_IP):8080",
                  "--health-probe-bind-address=$(POD_IP):10357",
                  "--v=2"]


def member_objects(p, server, kubeconfig_text, cert_text):
    """karmada-agent in the member, in the order it is applied: its
    kubeconfig Secret, its service account with full rights over the member
    (it applies whatever Karmada propagates there), and the Deployment,
    last, so that the agent never starts without the rest."""
    ns, labels, name, sa = p["agent_namespace"], p["labels"], p["agent_name"], p["agent_service_account"]
    deployment_labels = dict(labels)
    deployment_labels["app"] = name
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": p["agent_kubeconfig_secret"], "namespace": ns, "labels": labels},
              "data": {p["agent_kubeconfig_key"]: base64.b64encode(kubeconfig_text.encode("utf-8")).decode("ascii")}}
    container = {
        "name": name,
        "image": p["agent_image"],
        "imagePullPolicy": p["agent_image_pull_policy"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "command": agent_command(p, server),
        "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 10357, "scheme": "HTTP"},
                          "initialDelaySeconds": 15, "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "karmada-kubeconfig", "mountPath": p["agent_kubeconfig_dir"], "readOnly": True}],
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": deployment_labels},
        "spec": {
            "replicas": p["agent_replicas"],
            "selector": {"matchLabels": {"app": name}},
            "template": {
                # karmada-agent reads its kubeconfig once, at start: a
                # renewed certificate changes this digest, and so the Pod
                # template, and the Deployment rolls the agents onto it.
                "metadata": {"labels": {"app": name},
                             "annotations": {CERT_DIGEST_ANNOTATION: hashlib.sha256(cert_text.encode("utf-8")).hexdigest()}},
                "spec": {
                    "serviceAccountName": sa,
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"},
                                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
                    "containers": [container],
                    "volumes": [{"name": "karmada-kubeconfig", "secret": {"secretName": p["agent_kubeconfig_secret"]}}],
                },
            },
        },
    }
    return [
        secret,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns, "labels": labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name, "labels": labels},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]},
        deployment,
    ]


def check_cluster_name(name, clusters, cluster_id):
    """Refuse to join over someone else's Cluster; '' when the name is free
    for this member. In the order the role's checks had: another cluster
    holding the name, this cluster joined under other names, then a Cluster
    of this name in Push mode (an empty syncMode counts as Pull)."""
    holder = {}
    for c in clusters:
        if c["metadata"]["name"] == name:
            holder = c.get("spec") or {}
    if holder.get("id") not in (None, "", cluster_id):
        return ("another cluster holds the name %s in Karmada: its Cluster has ID %s, this member is %s"
                % (name, holder.get("id"), cluster_id))
    others = [c["metadata"]["name"] for c in clusters
              if c["metadata"]["name"] != name and (c.get("spec") or {}).get("id") == cluster_id]
    if others:
        return "this cluster (ID %s) is already joined to Karmada as %s" % (cluster_id, ", ".join(others))
    mode = holder.get("syncMode") or "Pull"
    if mode != "Pull":
        return "it is joined in %s mode, not Pull: unjoin it first, then join it in the new mode" % mode
    return ""


def read_text(path, what, name):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise JoinFailed("%s: %s %s cannot be read" % (name, what, path))


def cluster_id_of(member, name):
    """The member's cluster ID, the UID of its kube-system namespace; the
    member's API server must answer with the kubeconfig kao was given."""
    path = object_path("Namespace", "kube-system", None)
    status, body = member.request("GET", path)
    if status == 404:
        raise JoinFailed("%s: its API server at %s has no kube-system namespace" % (name, member.server))
    if status != 200 or not isinstance(body, dict):
        # As the role's task said it: the status, and the API server's own
        # message.
        why = "HTTP %d %s" % (status, http.client.responses.get(status, ""))
        if isinstance(body, dict) and body.get("message"):
            why += ": " + body["message"]
        raise JoinFailed("%s: its API server at %s did not answer with the kubeconfig kao was given: %s"
                         % (name, member.server, why[:300]))
    return body["metadata"]["uid"]


def join_one(p, claims, open_karmada, ca_text):
    """Join one member (p: the module's shared settings merged with the
    member's); return its outcome for the `members` result."""
    name = "member %s" % p["name"]
    applied = []
    out = {"failed": False, "msg": "", "applied": applied, "cluster_id": "", "server": ""}

    def apply(client, obj):
        _, changed = client.apply(obj, p["field_manager"], dry_run=p["check"])
        if changed:
            applied.append("%s/%s" % (obj["kind"], obj["metadata"]["name"]))

    try:
        member = from_kubeconfig(p["kubeconfig"], p["context"] or None, name=name)
        karmada = open_karmada()
        with member, karmada:
            out["server"] = member.server
            cluster_id = out["cluster_id"] = cluster_id_of(member, name)
            problem = claims.claim(p["name"], cluster_id)
            if problem:
                raise JoinFailed("%s: %s" % (name, problem))
            cert_text = read_text(p["agent_cert"], "the agent certificate", name)
            key_text = read_text(p["agent_key"], "the agent key", name)

            # Karmada's cluster controller would make the execution space
            # when the Cluster appears; the agent's Work RBAC lives there, so
            # it comes first.
            apply(karmada, namespace_object(p["execution_namespace"], p["labels"]))
            for obj in karmada_rbac(p):
                apply(karmada, obj)

            apply(member, namespace_object(p["agent_namespace"], p["labels"]))
            kubeconfig = agent_kubeconfig(p, ca_text, cert_text, key_text)
            for obj in member_objects(p, member.server, kubeconfig, cert_text):
                apply(member, obj)
    except (KubeError, JoinFailed) as e:
        msg = str(e)
        if not msg.startswith(name + ":"):
            msg = "%s: %s" % (name, msg)
        out["failed"], out["msg"] = True, msg
    except Exception as e:  # a bug must fail this member, not hide the others' outcomes
        out["failed"], out["msg"] = True, "%s: the join failed unexpectedly: %s" % (name, e.__class__.__name__)
    return out


def run(module):
    shared = dict((k, v) for k, v in module.params.items() if k != "members")
    shared["check"] = module.check_mode

    def open_karmada():
        return from_files(shared["karmada_server"], shared["karmada_ca"], shared["karmada_cert"], shared["karmada_key"])

    members = module.params["members"]
    results = {}
    if not members:
        return dict(changed=False, members=results)

    def all_failed(msg):
        return dict(changed=False, members=dict((m["name"], {"failed": True, "msg": "member %s: %s" % (m["name"], msg),
                                                                "applied": [], "cluster_id": "", "server": ""})
                                               for m in members))

    # What every member needs of Karmada, once: the Clusters there are, the
    # namespace of the Clusters' Secrets (the agent's Secret RBAC lives
    # there), and Karmada's CA for the agents' kubeconfigs.
    try:
        with open(shared["karmada_ca"], "rb") as f:
            ca_text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return all_failed("Karmada's CA %s cannot be read" % shared["karmada_ca"])
    try:
        with open_karmada() as karmada:
            clusters = karmada.list("Cluster")
            _, ns_changed = karmada.apply(namespace_object(shared["cluster_namespace"], shared["labels"]),
                                          shared["field_manager"], dry_run=shared["check"])
    except KubeError as e:
        return all_failed("the Pull join could not start: %s" % e)
    claims = Claims(clusters, check_cluster_name)
    with ThreadPoolExecutor(max_workers=min(len(members), MAX_THREADS)) as pool:
        futures = {}
        for m in members:
            p = dict(shared)
            p.update(m)
            futures[m["name"]] = pool.submit(join_one, p, claims, open_karmada, ca_text)
        for n, f in futures.items():
            results[n] = f.result()
    return dict(changed=ns_changed or any(r["applied"] for r in results.values()), members=results)


def main():
    member_spec = dict(
        name=dict(type="str", required=True),
        kubeconfig=dict(type="path", required=True),
        context=dict(type="str", default=""),
        agent_user=dict(type="str", required=True),
        agent_cert=dict(type="path", required=True),
        agent_key=dict(type="path", required=True, no_log=False),
        execution_namespace=dict(type="str", required=True),
        agent_rbac=dict(type="str", required=True),
        agent_secret_rbac=dict(type="str", required=True, no_log=False),
        agent_work_rbac=dict(type="str", required=True),
        secret=dict(type="str", required=True, no_log=False),
        impersonator_secret=dict(type="str", required=True, no_log=False),
        provider=dict(type="str", default=""),
        region=dict(type="str", default=""),
        zones=dict(type="list", elements="str", default=[]),
    )
    module = AnsibleModule(
        argument_spec=dict(
            members=dict(type="list", elements="dict", required=True, options=member_spec),
            karmada_server=dict(type="str", required=True),
            karmada_ca=dict(type="path", required=True),
            karmada_cert=dict(type="path", required=True),
            karmada_key=dict(type="path", required=True, no_log=False),
            cluster_namespace=dict(type="str", default="karmada-cluster"),
            agent_namespace=dict(type="str", default="karmada-system"),
            agent_name=dict(type="str", default="karmada-agent"),
            agent_service_account=dict(type="str", default="karmada-agent-sa"),
            agent_kubeconfig_secret=dict(type="str", default="karmada-kubeconfig", no_log=False),
            agent_kubeconfig_key=dict(type="str", default="karmada-kubeconfig", no_log=False),
            agent_kubeconfig_dir=dict(type="str", default="/etc/karmada/kubeconfig"),
            agent_image=dict(type="str", required=True),
            agent_image_pull_policy=dict(type="str", default="IfNotPresent"),
            agent_replicas=dict(type="int", default=2),
            agent_status_update_frequency=dict(type="str", default="10s"),
            labels=dict(type="dict", default={}),
            field_manager=dict(type="str", default="kao-members"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
