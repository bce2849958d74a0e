# -*- coding: utf-8 -*-
"""What kao's two join modules (kao_member_push, kao_member_pull) share:
the error a member's join ends with, the Namespace objects they apply, and
the claims that keep two members of one run from taking one cluster."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading


class JoinFailed(Exception):
    """A member cannot join; str() is its message, without credentials."""


def namespace_object(name, labels):
    """The Namespace name with labels, as kao applies it."""
    # kube-apiserver sets the name label itself; applying it too keeps the
    # field ours, so that the next apply changes nothing.
    labels = dict(labels)
    labels["kubernetes.io/metadata.name"] = name
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


class Claims(object):
    """What the members of one call may take in Karmada: the Clusters that
    existed when the call began (one LIST for all members), and the cluster
    IDs members of this call claimed since. Two members given the same
    cluster cannot both pass. Claiming is in memory, under a lock, so no
    member waits on another's requests to Karmada.

    check(name, clusters, cluster_id) is the module's own test of a name
    against the existing Clusters: '' when the name is free for the member,
    else why not."""

    def __init__(self, clusters, check):
        self.clusters = clusters
        self.check = check
        self.taken = {}  # cluster ID -> member name
        self.lock = threading.Lock()

    def uid_of(self, name):
        """The UID of the Cluster name when the call began, or None."""
        for c in self.clusters:
            if c["metadata"]["name"] == name:
                return c["metadata"].get("uid")
        return None

    def claim(self, name, cluster_id):
        """'' when the member may join as name with cluster_id, else why not."""
        with self.lock:
            problem = self.check(name, self.clusters, cluster_id)
            if problem:
                return problem
            holder = self.taken.get(cluster_id)
            if holder is not None and holder != name:
                return "this cluster (ID %s) is also given as member %s of the same run" % (cluster_id, holder)
            self.taken[cluster_id] = name
            return ""
