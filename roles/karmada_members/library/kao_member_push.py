#!/usr/bin/python
"""Ansible module: join member clusters to Karmada in Push mode, all at once.

For each member, what `karmadactl join` does, in kao's words and with kao's
checks:

1. read the member's kubeconfig (https server, inline CA, inline client
   certificate or token) and its cluster ID, the UID of its kube-system
   namespace;
2. refuse a Cluster name another cluster holds, a cluster already joined
   under another name, or a change of sync mode;
3. in the member: the cluster namespace (once a namespace left over from
   an unjoin, still being deleted, is gone), the service accounts
   karmada-<member> (full rights, bound by a ClusterRole) and
   karmada-impersonator, each with a service-account token Secret; wait
   until the member's kube-controller-manager filled both tokens;
4. in karmada-apiserver: the cluster namespace, the Cluster (syncMode Push,
   apiEndpoint, id, provider/region/zones) and its two Secrets (the member's
   CA and tokens), owned by the Cluster;
5. once every member is created, wait, bounded, until Karmada reports
   each Cluster Ready, and report Karmada's reason for those it does not.

Members are joined concurrently, one thread each, in this one process: a
task per member and step cost half a second of CPU each (the Python
Kubernetes client's import alone), and a module process per member still
about as much; twenty members now cost one process. The module itself never
fails for a member: it reports every member's outcome under `members`, and
the role fails each member's own host with its message (tasks/join_push.yml),
so one member's failure stops only that member.

Every object is server-side applied: a second call changes nothing. Tokens
and keys never appear in the result or in a message.

In check mode every apply is a server-side dry run (dryRun=All), so
`applied` lists what would change, as the API servers themselves decide it,
and nothing is stored or waited for. A member not joined yet has no
service-account tokens to compare: its Cluster and two Secrets are listed as
what would be created, and its `msg` says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kao_member_push
short_description: Join member clusters to Karmada in Push mode, concurrently
description:
  - Creates what karmadactl join creates, in each member and in karmada-apiserver, with server-side apply, then waits
    for each Cluster to be Ready. Reports each member's outcome instead of failing.
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
      service_account:
        description: Service account Karmada's controllers act as in the member.
        type: str
        required: true
      cluster_role:
        description: Name of the ClusterRole and ClusterRoleBinding granting service_account its rights.
        type: str
        required: true
      secret:
        description: Name of the Secret in karmada-apiserver with the member's CA and token.
        type: str
        required: true
      impersonator_secret:
        description: Name of the Secret in karmada-apiserver with the impersonator's token.
        type: str
        required: true
      provider:
        description: The Cluster's spec.provider.
        type: str
        default: ""
      region:
        description: The Cluster's spec.region.
        type: str
        default: ""
      zones:
        description: The Cluster's spec.zones.
        type: list
        elements: str
        default: []
  karmada_server:
    description: karmada-apiserver's URL, https://host:port.
    type: str
    required: true
  karmada_ca:
    description: Path of Karmada's CA certificate.
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
    description: Namespace of the members' credentials, in karmada-apiserver and in the members.
    type: str
    default: karmada-cluster
  impersonator_service_account:
    description: Service account karmada-aggregated-apiserver impersonates users with, in every member.
    type: str
    default: karmada-impersonator
  labels:
    description: Labels of every object the module applies.
    type: dict
    default: {}
  field_manager:
    description: Server-side apply field manager.
    type: str
    default: kao-members
  token_timeout:
    description: Seconds to wait for a member to fill the service-account tokens.
    type: int
    default: 60
  ready_timeout:
    description: Seconds to wait, once every member's objects are created, for their Clusters to be Ready; 0 does not wait.
    type: int
    default: 120
author: kao
"""

RETURN = r"""
members:
  description: >-
    For each member name: failed (bool), msg (why, when failed), applied (kind/name of every object created or
    changed), cluster_id and server (the member's API server URL, the Cluster's apiEndpoint).
  type: dict
  returned: always
"""

import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kao_join import Claims, JoinFailed, namespace_object
from ansible.module_utils.kao_kube import KubeError, condition, from_files, from_kubeconfig

# How often the waits look again, in seconds.
POLL = 0.25

# Most members joined at once; each thread holds two connections.
MAX_THREADS = 32

# The finalizer of Karmada's cluster controller (karmada.io/cluster-controller
# in every Karmada release kao installs).
CLUSTER_CONTROLLER_FINALIZER = "karmada.io/cluster-controller"


def member_objects(p):
    ns, labels = p["cluster_namespace"], p["labels"]

    def meta(name, namespaced=True, **extra):
        m = {"name": name, "labels": labels}
        if namespaced:
            m["namespace"] = ns
        m.update(extra)
        return m

    out = []
    for sa in (p["impersonator_service_account"], p["service_account"]):
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(sa)})
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                    "metadata": meta(sa, annotations={"kubernetes.io/service-account.name": sa})})
    out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": meta(p["cluster_role"], namespaced=False),
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                          {"nonResourceURLs": ["*"], "verbs": ["get"]}]})
    out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": meta(p["cluster_role"], namespaced=False),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": p["cluster_role"]},
                "subjects": [{"kind": "ServiceAccount", "name": p["service_account"], "namespace": ns}]})
    return out


def cluster_object(p, cluster_id, server):
    spec = {
        "id": cluster_id,
        "syncMode": "Push",
        "apiEndpoint": server,
        "secretRef": {"namespace": p["cluster_namespace"], "name": p["secret"]},
        "impersonatorSecretRef": {"namespace": p["cluster_namespace"], "name": p["impersonator_secret"]},
    }
    for key in ("provider", "region"):
        if p[key]:
            spec[key] = p[key]
    if p["zones"]:
        spec["zones"] = p["zones"]
    # The Cluster is created with the finalizer of Karmada's cluster
    # controller, the one that controller adds to every Cluster and removes
    # once it cleaned up after a deleted one. Karmada's cluster status
    # controller does not look at a Cluster without it: it requeues the
    # Cluster through its rate limiter (a per-Cluster back-off doubling from
    # 5 ms, and 10 requeues a second for all Clusters together), so a
    # hundred new Clusters waiting their turn with the cluster controller
    # (5 at a time) wait seconds more for their first health check.
    meta = {"name": p["name"], "labels": {"app.kubernetes.io/managed-by": "kao"},
            "finalizers": [CLUSTER_CONTROLLER_FINALIZER]}
    return {"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": meta, "spec": spec}


def credential_secrets(p, cluster_uid, ca_b64, token_b64, impersonator_b64):
    """The Cluster's two Secrets; owned by the Cluster when cluster_uid is set."""
    out = []
    for name, data in ((p["secret"], {"caBundle": ca_b64, "token": token_b64}),
                       (p["impersonator_secret"], {"token": impersonator_b64})):
        meta = {"name": name, "namespace": p["cluster_namespace"], "labels": p["labels"]}
        if cluster_uid:
            meta["ownerReferences"] = [{"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "name": p["name"],
                                        "uid": cluster_uid, "controller": True, "blockOwnerDeletion": True}]
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta, "data": data})
    return out


def check_cluster_name(name, clusters, cluster_id):
    """Refuse to join over someone else's Cluster; '' when the name is free for us.

    The Cluster of this name is looked at first: another cluster holding the
    name is the more useful thing to say.
    """
    for c in clusters:
        if c["metadata"]["name"] != name:
            continue
        spec = c.get("spec") or {}
        if spec.get("id") not in (None, "", cluster_id):
            return ("another cluster holds the name %s in Karmada: its Cluster has ID %s, this member is %s"
                    % (name, spec.get("id"), cluster_id))
        if spec.get("syncMode", "Push") != "Push":
            return "it is joined in %s mode, not Push: unjoin it first, then join it in the new mode" % spec.get("syncMode")
    others = sorted(c["metadata"]["name"] for c in clusters
                    if c["metadata"]["name"] != name and (c.get("spec") or {}).get("id") == cluster_id)
    if others:
        return "this cluster (ID %s) is already joined to Karmada as %s" % (cluster_id, ", ".join(others))
    return ""


def read_tokens(member, p):
    """The member's two service-account tokens, or None while either is missing."""
    names = (p["service_account"], p["impersonator_service_account"])
    tokens = {}
    for n in names:
        s = member.get("Secret", n, p["cluster_namespace"])
        tok = ((s or {}).get("data") or {}).get("token")
        if tok:
            tokens[n] = tok
    if len(tokens) == len(names):
        return tokens
    return None


def wait_tokens(member, p):
    deadline = time.time() + p["token_timeout"]
    while True:
        tokens = read_tokens(member, p)
        if tokens is not None:
            return tokens
        if time.time() > deadline:
            return None
        time.sleep(POLL)


def wait_namespace_usable(client, p):
    """Wait, bounded by token_timeout, while the cluster namespace is being
    deleted (a member unjoined a moment ago: its namespace lingers until the
    member's namespace controller emptied it); nothing can be created in it
    meanwhile. Returns False when it is still being deleted."""
    deadline = time.time() + p["token_timeout"]
    while True:
        ns = client.get("Namespace", p["cluster_namespace"])
        if ns is None or not (ns.get("metadata") or {}).get("deletionTimestamp"):
            return True
        if time.time() > deadline:
            return False
        time.sleep(POLL)


def wait_all_ready(open_karmada, timeout, results):
    """Wait, bounded by timeout from now, until Karmada reports Ready the
    Cluster of every member in results that joined; fail in results each
    one that is not, with Karmada's reason.

    Every member is waited for here, after all of them were created: a
    member waiting in its own thread would hold that thread, and members
    beyond the pool's size would only start joining once others were
    Ready. One LIST of Clusters per poll answers for every member, where a
    GET per member would cost karmada-aggregated-apiserver as many
    requests as there are members."""
    waiting = sorted(n for n, r in results.items() if not r["failed"])
    last, listed = {}, ""
    deadline = time.time() + timeout
    try:
        with open_karmada() as karmada:
            while waiting:
                try:
                    clusters = dict((c["metadata"]["name"], c) for c in karmada.list("Cluster"))
                except KubeError as e:
                    # A slow or restarting karmada-apiserver: look again
                    # until the deadline, and say so if it comes first.
                    clusters, listed = None, str(e)
                if clusters is not None:
                    for n in waiting:
                        last[n] = condition(clusters.get(n), "Ready")
                    waiting = [n for n in waiting if last[n].get("status") != "True"]
                if not waiting:
                    return
                if time.time() > deadline:
                    break
                time.sleep(2 * POLL)
    except KubeError as e:
        listed = str(e)
    for n in waiting:
        c = last.get(n)
        if c is None:
            why = "Karmada's Clusters could not be read: %s" % listed
        else:
            why = "%s: %s" % (c.get("reason") or "no reason", c.get("message") or "Karmada has not reported on it yet")
        results[n]["failed"] = True
        results[n]["msg"] = "member %s: its Cluster is not Ready after %d s: %s" % (n, timeout, why)


def join_one(p, claims, open_karmada):
    """Join one member (p: the module's shared settings merged with the
    member's); return its outcome for the `members` result."""
    name = "member %s" % p["name"]
    applied = []
    out = {"failed": False, "msg": "", "applied": applied, "cluster_id": "", "server": ""}

    def apply(client, obj):
        after, changed = client.apply(obj, p["field_manager"], dry_run=p["check"])
        if changed:
            applied.append("%s/%s" % (obj["kind"], obj["metadata"]["name"]))
        return after

    try:
        member = from_kubeconfig(p["kubeconfig"], p["context"] or None, name=name)
        karmada = open_karmada()
        with member, karmada:
            kube_system = member.get("Namespace", "kube-system")
            if kube_system is None:
                raise JoinFailed("%s: its API server has no kube-system namespace" % name)
            cluster_id = out["cluster_id"] = kube_system["metadata"]["uid"]
            out["server"] = member.server

            problem = claims.claim(p["name"], cluster_id)
            if problem:
                raise JoinFailed("%s: %s" % (name, problem))

            if not wait_namespace_usable(member, p):
                raise JoinFailed("%s: its namespace %s is still being deleted after %d s (left over from an unjoin); "
                                 "it can join once the member's namespace controller has removed it"
                                 % (name, p["cluster_namespace"], p["token_timeout"]))
            apply(member, namespace_object(p["cluster_namespace"], p["labels"]))
            for obj in member_objects(p):
                apply(member, obj)
            if p["check"]:
                tokens = read_tokens(member, p)
                if tokens is None:
                    # A member not joined yet: its tokens exist only once its
                    # service accounts do. The Cluster and its Secrets would
                    # be created; what they would hold cannot be known.
                    apply(karmada, cluster_object(p, cluster_id, member.server))
                    applied.extend(["Secret/%s" % p["secret"], "Secret/%s" % p["impersonator_secret"]])
                    out["msg"] = ("%s would join: its service-account tokens do not exist yet, so the Secrets "
                                  "of its Cluster cannot be compared" % name)
                    return out
            else:
                tokens = wait_tokens(member, p)
            if tokens is None:
                raise JoinFailed("%s: its service-account tokens (%s/%s and %s) were not filled within %d s; the member's "
                                 "kube-controller-manager must run its serviceaccount-token controller"
                                 % (name, p["cluster_namespace"], p["service_account"], p["impersonator_service_account"],
                                    p["token_timeout"]))

            def secrets(uid):
                return credential_secrets(p, uid, member.ca_data, tokens[p["service_account"]],
                                          tokens[p["impersonator_service_account"]])

            # The Secrets name the Cluster as their owner, so they need its
            # UID; but a Cluster whose Secrets do not exist yet fails
            # karmada-controller-manager's first health check, and a Cluster
            # that was unhealthy must then stay healthy for
            # --cluster-success-threshold (30 s) before it is Ready. A new
            # Cluster therefore gets its Secrets first, without an owner,
            # and the owner once it exists; a Cluster there already (a
            # re-run) keeps its UID, and its Secrets are applied once.
            uid = claims.uid_of(p["name"])
            if uid is None:
                for sec in secrets(None):
                    apply(karmada, sec)
            cluster = apply(karmada, cluster_object(p, cluster_id, member.server))
            for sec in secrets(cluster["metadata"]["uid"]):
                apply(karmada, sec)
    except (KubeError, JoinFailed) as e:
        out["failed"], out["msg"] = True, str(e)
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
    # What every member needs of Karmada, once: the Clusters there are, and
    # the namespace of the Clusters' Secrets.
    try:
        with open_karmada() as karmada:
            clusters = karmada.list("Cluster")
            _, ns_changed = karmada.apply(namespace_object(shared["cluster_namespace"], shared["labels"]),
                                          shared["field_manager"], dry_run=shared["check"])
    except KubeError as e:
        msg = "the Push join could not start: %s" % e
        return dict(changed=False, members=dict((m["name"], {"failed": True, "msg": "member %s: %s" % (m["name"], msg),
                                                                "applied": [], "cluster_id": "", "server": ""})
                                               for m in members))
    claims = Claims(clusters, check_cluster_name)
    with ThreadPoolExecutor(max_workers=min(len(members), MAX_THREADS)) as pool:
        futures = {}
        for m in members:
            p = dict(shared)
            p.update(m)
            futures[m["name"]] = pool.submit(join_one, p, claims, open_karmada)
        for n, f in futures.items():
            results[n] = f.result()
    if shared["ready_timeout"] > 0 and not shared["check"]:
        wait_all_ready(open_karmada, shared["ready_timeout"], results)
    return dict(changed=ns_changed or any(r["applied"] for r in results.values()), members=results)


def main():
    member_spec = dict(
        name=dict(type="str", required=True),
        kubeconfig=dict(type="path", required=True),
        context=dict(type="str", default=""),
        service_account=dict(type="str", required=True),
        cluster_role=dict(type="str", required=True),
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
            impersonator_service_account=dict(type="str", default="karmada-impersonator"),
            labels=dict(type="dict", default={}),
            field_manager=dict(type="str", default="kao-members"),
            token_timeout=dict(type="int", default=60),
            ready_timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
