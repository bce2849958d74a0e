#!/usr/bin/python
"""Ansible module: stat many paths, with SHA-256 digests, in one call.

The binaries role compares every installed binary with the bundle's
SHA256SUMS. A stat task per binary cost a round trip to the host each time;
this module answers for all of them at once and changes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kao_stat
short_description: Report type, mode, owner and SHA-256 of many paths in one call
description:
  - Never changes anything. Symbolic links are not followed.
options:
  paths:
    description: Absolute paths to inspect.
    type: list
    elements: path
    required: true
  checksum:
    description: Compute the SHA-256 digest of regular files.
    type: bool
    default: true
author: kao
"""

RETURN = r"""
stat:
  description: >-
    For each requested path: exists, and when it exists isreg, isdir, mode (octal string like 0755),
    owner, group, and for regular files sha256.
  type: dict
  returned: always
"""

import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _inspect(path, checksum):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    info = {
        "exists": True,
        "isreg": stat.S_ISREG(st.st_mode),
        "isdir": stat.S_ISDIR(st.st_mode),
        "mode": "%04o" % stat.S_IMODE(st.st_mode),
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
    }
    if checksum and info["isreg"]:
        info["sha256"] = _sha256(path)
    return info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", required=True),
            checksum=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    result = {}
    for path in module.params["paths"]:
        if not os.path.isabs(path):
            module.fail_json(msg="%s: kao_stat needs absolute paths" % path)
        try:
            result[path] = _inspect(path, module.params["checksum"])
        except OSError as e:
            module.fail_json(msg="cannot inspect %s: %s" % (path, to_native(e)))
    module.exit_json(changed=False, stat=result)


if __name__ == "__main__":
    main()
