#!/usr/bin/python
"""Ansible module: claim, check and release what a KarmadaDeployment owns on a host.

Two deployments must never install onto one host, and kao must never purge
a directory it did not make. A marker file records the owner: the
deployment's UID. For a host it is /etc/kao/owner; for a data directory it
sits beside the directory (<dir>.kao-owner), outside what the service reads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kao_owner
short_description: Claim, check or release a host or directory for one KarmadaDeployment
description:
  - C(state=present) claims the target for I(uid), or fails when it belongs to
    another deployment, or shows kao's footprints (or, for a directory, holds
    data) without a marker, unless I(legacy) says they are this deployment's
    from before markers existed.
  - C(state=absent) releases the target when its marker names I(uid).
  - C(state=query) changes nothing and tells who owns the target.
  - Check mode is truthful: it reports what C(present) or C(absent) would change.
options:
  kind:
    description: C(host) (the marker is /etc/kao/owner) or C(directory) (the marker is I(path).kao-owner).
    type: str
    choices: [host, directory]
    required: true
  path:
    description: The directory, for C(kind=directory).
    type: path
  marker:
    description: The marker file; /etc/kao/owner for a host and I(path).kao-owner for a directory by default.
    type: path
  uid:
    description: The UID of the deployment that claims, releases or asks.
    type: str
    required: true
  namespace:
    description: >-
      The deployment's namespace, recorded in the marker. A deployment of another namespace is never named in a
      message and never taken over.
    type: str
    default: ""
  name:
    description: The deployment's name, recorded likewise.
    type: str
    default: ""
  take_over_from:
    description: >-
      A deployment UID whose targets this deployment may take over (the annotation kao.io/take-over-from); only a
      deployment of the same I(namespace) can be taken over.
    type: str
    default: ""
  footprints:
    description: Paths whose presence shows kao installed something on a host.
    type: list
    elements: path
    default: []
  legacy:
    description: An unmarked target with footprints (or data) is this deployment's, installed before markers existed.
    type: bool
    default: false
  state:
    description: present, absent or query.
    type: str
    choices: [present, absent, query]
    default: present
author: kao
"""

RETURN = r"""
owner:
  description: >-
    Who owned the target before the call: C(self), C(other) (another deployment), C(none) (no marker, nothing
    of kao's there), or C(unmarked) (no marker, but footprints or data).
  type: str
  returned: always
other_uid:
  description: The UID the marker names when the owner is another deployment of the same namespace.
  type: str
  returned: when owner is other and in I(namespace)
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

HOST_MARKER = "/etc/kao/owner"


def _read_marker(path):
    """Return (uid, namespace) of a marker, None when there is none.

    A marker kao cannot read still says somebody claimed the target: its uid
    is then "unreadable".
    """
    try:
        with open(path, "r") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(data)
        uid, namespace = record.get("uid", ""), record.get("namespace", "")
    except (ValueError, AttributeError):
        uid, namespace = "", ""
    if not isinstance(uid, str) or not uid:
        return "unreadable", ""
    return uid, namespace if isinstance(namespace, str) else ""


def _has_data(path):
    try:
        return len(os.listdir(path)) > 0
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return True


def _write_marker(path, record):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    # A fresh temporary file (never one that someone placed there), renamed
    # over the marker.
    fd, tmp = tempfile.mkstemp(prefix=".kao-owner-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kind=dict(type="str", required=True, choices=["host", "directory"]),
            path=dict(type="path"),
            marker=dict(type="path"),
            uid=dict(type="str", required=True),
            namespace=dict(type="str", default=""),
            name=dict(type="str", default=""),
            take_over_from=dict(type="str", default=""),
            footprints=dict(type="list", elements="path", default=[]),
            legacy=dict(type="bool", default=False),
            state=dict(type="str", default="present", choices=["present", "absent", "query"]),
        ),
        required_if=[("kind", "directory", ["path"])],
        supports_check_mode=True,
    )
    p = module.params
    uid = p["uid"]
    if not uid:
        module.fail_json(msg="kao_owner needs the deployment's uid")
    if p["kind"] == "host":
        marker, what = p["marker"] or HOST_MARKER, "this host"
        found = [f for f in p["footprints"] if os.path.lexists(f)]
    else:
        marker, what = p["marker"] or p["path"] + ".kao-owner", "data directory " + p["path"]
        found = [p["path"]] if _has_data(p["path"]) else []

    record = _read_marker(marker)
    current, current_ns = record if record is not None else (None, "")
    if current == uid:
        owner = "self"
    elif current is not None:
        owner = "other"
    elif found:
        owner = "unmarked"
    else:
        owner = "none"
    result = dict(changed=False, owner=owner, marker=marker)
    # Another namespace's deployment is not named: a tenant learns nothing
    # about other tenants' deployments from a refusal.
    same_namespace = current_ns != "" and current_ns == p["namespace"]
    if owner == "other" and same_namespace:
        result["other_uid"] = current

    state = p["state"]
    if state == "query":
        module.exit_json(**result)
    if state == "absent":
        if owner == "self":
            result["changed"] = True
            if not module.check_mode:
                try:
                    os.remove(marker)
                except OSError as e:
                    module.fail_json(msg="removing %s: %s" % (marker, to_native(e)), **result)
        module.exit_json(**result)

    # state == present. A deployment takes over only what a deployment of
    # its own namespace left (kao.io/take-over-from names it).
    taking_over = owner == "other" and same_namespace and p["take_over_from"] and current == p["take_over_from"]
    if owner == "other" and not taking_over:
        if current == "unreadable":
            msg = "%s has an owner marker kao cannot read (%s): kao changes nothing there" % (what, marker)
        elif same_namespace:
            msg = (
                "%s belongs to another KarmadaDeployment (uid %s): kao changes nothing there. If that deployment is "
                "gone for good, annotate this one kao.io/take-over-from=%s, or remove %s on the host"
                % (what, current, current, marker)
            )
        else:
            msg = "%s belongs to a KarmadaDeployment of another namespace: kao changes nothing there" % what
        module.fail_json(msg=msg, **result)
    if owner == "unmarked" and not p["legacy"]:
        if p["kind"] == "host":
            msg = (
                "this host holds a Karmada control plane that kao did not install for this deployment (%s): "
                "kao changes nothing there" % ", ".join(sorted(found))
            )
        else:
            msg = (
                "%s exists and holds data that kao did not put there for this deployment: kao neither uses nor "
                "purges it. Choose another data directory, or move that data away" % what
            )
        module.fail_json(msg=msg, **result)
    if owner == "self":
        module.exit_json(**result)
    result["changed"] = True
    if not module.check_mode:
        try:
            _write_marker(marker, {"uid": uid, "namespace": p["namespace"], "name": p["name"]})
        except OSError as e:
            module.fail_json(msg="writing %s: %s" % (marker, to_native(e)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
