// Package hosts is kao's test ground of SSH-reachable hosts: a small, air-gapped
// "bare-metal data centre" of Debian bookworm machines booted with systemd on the
// local Linux machine.
//
// Each host is a systemd-nspawn container that boots a real systemd as PID 1 from
// an overlay over one shared, cached Debian base root. Each host has its own
// network namespace with a veth whose peer sits on a bridge that the harness
// creates in the root namespace. The bridge holds the subnet's .1 address so that
// processes on the machine (the operator, ansible) reach the hosts; the hosts
// reach each other and the bridge address and nothing else: they have no default
// route and nothing forwards their traffic.
//
// Hosts are reached over SSH as root with a harness-generated ed25519 key and with
// host key checking on: every host gets its own host keys before it first boots,
// and the harness writes them to a known_hosts file.
//
// Several instances (clusters) may run at once. Each has a name, its own state
// directory, bridge and /24 subnet; subnets and link names are allocated under a
// lock in a shared state root (DefaultStateRoot). Everything an instance creates
// (network namespaces, links, cgroups, processes) is recorded in its state
// directory before it is created, and Down removes exactly those.
//
// The same implementation backs the hack/testhosts CLI and the Start helper for
// Go tests. It needs root, systemd-nspawn, debootstrap, iproute2 and OpenSSH.
// Start skips its test in -short mode; otherwise a machine that lacks any of
// these fails the test with what to install or do, never skips it.
package hosts
