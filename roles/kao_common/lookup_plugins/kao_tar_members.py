"""Lookup plugin: the text of the members of a tar archive on the controller.

kao's bundle ships Karmada's CRDs as the release's crds.tar.gz. Reading the
members straight from the archive spares a scratch directory, an unpack and
a search, each a task of its own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: kao_tar_members
short_description: Read the text of the regular files of a tar archive whose names match a pattern
description:
  - Returns one string per matching regular file, in name order. The archive may be compressed
    (gzip, bzip2 or xz). Links and other special members are skipped.
options:
  _terms:
    description: Path of the archive on the controller.
    required: true
  pattern:
    description: fnmatch pattern on member names (a * matches across /).
    type: str
    default: "*"
author: kao
"""

import fnmatch
import tarfile

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        pattern = self.get_option("pattern")
        out = []
        for term in terms:
            try:
                with tarfile.open(term, mode="r:*") as archive:
                    members = sorted(
                        (m for m in archive.getmembers() if m.isreg() and fnmatch.fnmatchcase(m.name, pattern)),
                        key=lambda m: m.name,
                    )
                    for member in members:
                        data = archive.extractfile(member).read()
                        out.append(to_text(data, errors="surrogate_or_strict"))
            except (OSError, tarfile.TarError, UnicodeError) as e:
                raise AnsibleLookupError("cannot read %s: %s" % (term, to_native(e)))
        return out
