"""Lookup plugin: SHA-256 digests of files on the controller.

The binaries role checks the bundle's files against SHA256SUMS before any of
them reaches a host. Computing the digests in the controller's own process
spares starting a module for it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: kao_sha256
short_description: SHA-256 digest of files on the controller
description:
  - Returns one lowercase hex digest per path, or an empty string for a path that is not a regular
    file (missing, a directory, a link), so that the caller can say which file is wrong.
options:
  _terms:
    description: Paths on the controller.
    required: true
author: kao
"""

import hashlib
import os
import stat

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        out = []
        for term in terms:
            try:
                if not stat.S_ISREG(os.lstat(term).st_mode):
                    out.append("")
                    continue
            except FileNotFoundError:
                out.append("")
                continue
            except OSError as e:
                raise AnsibleLookupError("cannot inspect %s: %s" % (term, to_native(e)))
            digest = hashlib.sha256()
            try:
                with open(term, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        digest.update(chunk)
            except OSError as e:
                raise AnsibleLookupError("cannot read %s: %s" % (term, to_native(e)))
            out.append(digest.hexdigest())
        return out
