"""A small Kubernetes REST client for kao's member modules.

kubernetes.core costs about half a second of CPU per task to import the
Python client; joining many members at once spent most of its time there.
This client needs only the standard library and PyYAML (which Ansible itself
needs): it reads a kubeconfig or kao's certificate files, keeps one
keep-alive HTTPS connection per API server, and speaks the few requests a
join needs (get, list, server-side apply, delete).

Credentials never leave this module's process: errors carry the request's
method, path, HTTP status and the API server's own message, never a token or
a key, and client keys are written to a private temporary directory that
close() removes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import http.client
import json
import os
import shutil
import ssl
import tempfile
import urllib.parse

import yaml

# API paths of the kinds kao's member modules touch: (group/version prefix,
# plural, namespaced).
KINDS = {
    "Namespace": ("api/v1", "namespaces", False),
    "ServiceAccount": ("api/v1", "serviceaccounts", True),
    "Secret": ("api/v1", "secrets", True),
    "ClusterRole": ("apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "Deployment": ("apis/apps/v1", "deployments", True),
    "Cluster": ("apis/cluster.karmada.io/v1alpha1", "clusters", False),
}

# Seconds one request may take; the callers bound their waits themselves.
REQUEST_TIMEOUT = 15


class KubeError(Exception):
    """A request failed; str() is safe to show (no credentials)."""

    def __init__(self, msg, status=0):
        super(KubeError, self).__init__(msg)
        self.status = status


class Client(object):
    """One API server, one identity, one keep-alive connection."""

    def __init__(self, server, ca_pem, cert_pem=None, key_pem=None, token=None, name="the API server", unreachable_hint=""):
        url = urllib.parse.urlsplit(server)
        if url.scheme != "https" or not url.hostname:
            raise KubeError("%s: the server %r is not an https:// URL" % (name, server))
        self.name = name
        self.unreachable_hint = unreachable_hint
        self.server = server
        self.ca_data = ""
        self.host = url.hostname
        self.port = url.port or 443
        self.prefix = url.path.rstrip("/")
        self.token = token
        self._dir = None
        self._conn = None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=_text(ca_pem))
        if cert_pem and key_pem:
            # ssl takes client certificates only from files: a private
            # directory holds them until close().
            self._dir = tempfile.mkdtemp(prefix="kao-kube-")
            cert_file = os.path.join(self._dir, "client.crt")
            key_file = os.path.join(self._dir, "client.key")
            for path, data in ((cert_file, cert_pem), (key_file, key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(_bytes(data))
            try:
                ctx.load_cert_chain(cert_file, key_file)
            except ssl.SSLError:
                raise KubeError("%s: the client certificate and key do not load (not PEM, or not a pair)" % name)
        self._ctx = ctx

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, method, path, body=None, content_type="application/json", query=None):
        """Send one request; return (status, decoded JSON body or None)."""
        url = self.prefix + "/" + path.lstrip("/")
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json", "User-Agent": "kao-members"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = content_type
        # A keep-alive connection the server closed meanwhile fails on first
        # use: try once more on a new one.
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=REQUEST_TIMEOUT, context=self._ctx)
            try:
                self._conn.request(method, url, body=data, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError) as e:
                self._conn.close()
                self._conn = None
                retry = isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError))
                if attempt == 2 or not retry:
                    raise KubeError("%s at %s did not answer%s: %s" % (self.name, self.server, self.unreachable_hint, _reason(e)))
        decoded = None
        if raw:
            try:
                decoded = json.loads(raw.decode("utf-8"))
            except ValueError:
                decoded = None
        return resp.status, decoded

    def _check(self, method, path, status, body, ok=(200, 201)):
        if status in ok:
            return
        msg = ""
        if isinstance(body, dict):
            msg = body.get("message") or body.get("reason") or ""
        raise KubeError("%s: %s %s: HTTP %d %s" % (self.name, method, path, status, msg), status)

    def get(self, kind, name, namespace=None):
        """The object, or None when it does not exist."""
        path = object_path(kind, name, namespace)
        status, body = self.request("GET", path)
        if status == 404:
            return None
        self._check("GET", path, status, body)
        return body

    def list(self, kind):
        path = collection_path(kind, None)
        status, body = self.request("GET", path)
        self._check("GET", path, status, body)
        return body.get("items") or []

    def apply(self, obj, field_manager, dry_run=False):
        """Server-side apply obj; return (object after, changed).

        With dry_run the API server applies it without storing anything
        (dryRun=All: admission, defaulting and validation all run), and
        changed says whether the stored object would differ."""
        kind = obj["kind"]
        meta = obj["metadata"]
        if dry_run and meta.get("namespace") and self.get("Namespace", meta["namespace"]) is None:
            # Its namespace would be created first, which a dry run does
            # not store: the object would be created, and that is all the
            # API server could say.
            return obj, True
        before = self.get(kind, meta["name"], meta.get("namespace"))
        path = object_path(kind, meta["name"], meta.get("namespace"))
        query = {"fieldManager": field_manager, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        status, body = self.request("PATCH", path, body=obj, content_type="application/apply-patch+yaml", query=query)
        self._check("PATCH", path, status, body)
        if dry_run:
            return body, before is None or _content(before) != _content(body)
        changed = before is None or before["metadata"].get("resourceVersion") != body["metadata"].get("resourceVersion")
        return body, changed

    def delete(self, kind, name, namespace=None):
        """Delete; return True when something was deleted."""
        path = object_path(kind, name, namespace)
        status, body = self.request("DELETE", path, body={"propagationPolicy": "Background"})
        if status == 404:
            return False
        self._check("DELETE", path, status, body, ok=(200, 202))
        return True


# The metadata the API server keeps for itself: a dry run's answer differs
# from the stored object in these even when nothing else would change.
_SERVER_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid", "selfLink")


def _content(obj):
    """obj without its status and the metadata the server keeps for itself."""
    out = dict((k, v) for k, v in obj.items() if k != "status")
    out["metadata"] = dict((k, v) for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_METADATA)
    return out


def collection_path(kind, namespace):
    prefix, plural, namespaced = KINDS[kind]
    if namespaced:
        return "%s/namespaces/%s/%s" % (prefix, urllib.parse.quote(namespace, safe=""), plural)
    return "%s/%s" % (prefix, plural)


def object_path(kind, name, namespace):
    return collection_path(kind, namespace) + "/" + urllib.parse.quote(name, safe="")


def from_kubeconfig(path, context=None, name="the member"):
    """A Client for a kubeconfig's context (its current one by default).

    Only what can be checked here is accepted: an https:// server, its CA
    inline (certificate-authority-data), and a client certificate and key or
    a bearer token inline. Anything else fails with a message saying what.
    """
    try:
        with open(path, "rb") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        raise KubeError("%s: its kubeconfig is not readable YAML" % name)
    if not isinstance(doc, dict):
        raise KubeError("%s: its kubeconfig is not a kubeconfig" % name)
    ctx_name = context or doc.get("current-context") or ""
    ctx = _named(doc.get("contexts"), ctx_name)
    if ctx is None:
        raise KubeError("%s: its kubeconfig has no context %s" % (name, json.dumps(ctx_name)))
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""))
    user = _named(doc.get("users"), ctx.get("user", "")) or {}
    if cluster is None:
        raise KubeError("%s: context %s of its kubeconfig names no cluster" % (name, json.dumps(ctx_name)))
    server = cluster.get("server") or ""
    if not server.startswith("https://"):
        raise KubeError("%s: context %s of its kubeconfig names no cluster with an https:// server (got %s)"
                        % (name, json.dumps(ctx_name), json.dumps(server)))
    if cluster.get("insecure-skip-tls-verify"):
        raise KubeError("%s: its kubeconfig sets insecure-skip-tls-verify; kao joins members only with a verified CA" % name)
    ca = _b64(cluster.get("certificate-authority-data"))
    if not ca or b"-----BEGIN CERTIFICATE-----" not in ca:
        if cluster.get("certificate-authority"):
            raise KubeError("%s: its kubeconfig names the CA as a file (certificate-authority: %s); put the CA inline as "
                            "certificate-authority-data" % (name, cluster["certificate-authority"]))
        raise KubeError("%s: its kubeconfig has no certificate-authority-data with a PEM certificate for %s" % (name, server))
    cert = _b64(user.get("client-certificate-data"))
    key = _b64(user.get("client-key-data"))
    token = user.get("token")
    if not (cert and key) and not token:
        kinds = sorted(k for k in ("exec", "auth-provider", "client-certificate", "tokenFile", "username") if k in user)
        raise KubeError("%s: the user of context %s in its kubeconfig has no inline client certificate and key "
                        "(client-certificate-data, client-key-data) and no token%s" %
                        (name, json.dumps(ctx_name), (" (it uses %s, which kao does not run)" % ", ".join(kinds)) if kinds else ""))
    try:
        c = Client(server, ca, cert, key, token, name="%s: its API server" % name,
                   unreachable_hint=" with the kubeconfig kao was given")
    except ssl.SSLError:
        raise KubeError("%s: the CA in its kubeconfig does not load" % name)
    # The CA as the kubeconfig has it (base64), for whoever must hand it on.
    c.ca_data = "".join(str(cluster.get("certificate-authority-data")).split())
    return c


def from_files(server, ca_file, cert_file, key_file, name="karmada-apiserver"):
    """A Client with PEM files (kao's CA and administrator certificate)."""
    with open(ca_file, "rb") as f:
        ca = f.read()
    with open(cert_file, "rb") as f:
        cert = f.read()
    with open(key_file, "rb") as f:
        key = f.read()
    return Client(server, ca, cert, key, name=name)


def condition(obj, ctype):
    """The condition of type ctype in obj's status, or {}."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def _named(entries, name):
    for e in entries or []:
        if isinstance(e, dict) and e.get("name") == name:
            inner = [v for k, v in e.items() if k != "name"]
            return inner[0] if inner and isinstance(inner[0], dict) else {}
    return None


def _b64(value):
    if not value:
        return b""
    try:
        return base64.b64decode(value, validate=False)
    except (ValueError, TypeError):
        return b""


def _bytes(v):
    return v if isinstance(v, bytes) else v.encode("utf-8")


def _text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else v


def _reason(e):
    if isinstance(e, ssl.SSLCertVerificationError):
        return "certificate verify failed: %s" % (e.verify_message or "the server's certificate is not trusted")
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or e.__class__.__name__
