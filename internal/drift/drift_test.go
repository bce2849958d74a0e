package drift

import (
	"fmt"
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
)

func TestItemsAreWhatChangedOutsideKaoWithoutTheirConsequences(t *testing.T) {
	changes := []runner.Change{
		{Host: "node1", Task: "Karmada controllers | Install the units", Action: "ansible.builtin.template",
			Item: "/etc/systemd/system/karmada-scheduler.service", Diff: "-ExecStart=a\n+ExecStart=b"},
		{Host: "node1", Task: "Karmada controllers | Reload systemd", Action: "ansible.builtin.systemd", State: "daemon-reload"},
		{Host: "node1", Task: "Karmada controllers | Restart the changed components", Action: "ansible.builtin.systemd",
			Item: "karmada-scheduler.service", State: "restarted"},
		{Host: "node2", Task: "Karmada controllers | Start and enable the components", Action: "ansible.builtin.systemd",
			Item: "karmada-webhook.service", State: "started"},
		{Host: "node3", Task: "Etcd | Install the certificates", Action: "ansible.builtin.copy",
			Item: "/etc/karmada/pki/etcd/server.crt", Diff: "-----BEGIN CERTIFICATE-----"},
		{Host: "node3", Task: "Etcd | Install the private keys", Action: "ansible.builtin.copy", Hidden: true},
		{Host: "node3", Task: "Binaries | Install the programs", Action: "ansible.builtin.copy", Item: "/usr/local/bin/etcd", Diff: "binary"},
		{Host: "node3", Task: "Karmada apiserver | Write the configuration", Action: "ansible.builtin.copy",
			Item: "/etc/karmada/audit-policy.yaml", Diff: "-a\n+b"},
		{Host: "node3", Task: "Karmada members | Join", Action: "kao_member_push", Item: "member-a"},
		{Host: "host_cluster", Task: "Karmada workloads | Apply karmada-apiserver", Action: "kubernetes.core.k8s",
			Item: "Deployment karmada-system/karmada-apiserver", Diff: "-spec.replicas: 1\n+spec.replicas: 2", State: "present"},
		{Host: "host_cluster", Task: "Karmada workloads | Apply the Secrets", Action: "kubernetes.core.k8s", Hidden: true},
		// The same change twice (a task in a role included twice) is one item.
		{Host: "node2", Task: "Karmada controllers | Start and enable the components", Action: "ansible.builtin.systemd",
			Item: "karmada-webhook.service", State: "started"},
	}
	items, dropped := Items(changes, 0)
	want := []kaov1.DriftItem{
		{Host: "node1", Kind: kaov1.DriftUnit, Item: "/etc/systemd/system/karmada-scheduler.service", Diff: "-ExecStart=a\n+ExecStart=b"},
		{Host: "node2", Kind: kaov1.DriftService, Item: "karmada-webhook.service", Diff: "stopped or not enabled: a run starts and enables it"},
		{Host: "node3", Kind: kaov1.DriftCertificate, Item: "/etc/karmada/pki/etcd/server.crt"},
		{Host: "node3", Kind: kaov1.DriftCertificate},
		{Host: "node3", Kind: kaov1.DriftBinary, Item: "/usr/local/bin/etcd"},
		{Host: "node3", Kind: kaov1.DriftFile, Item: "/etc/karmada/audit-policy.yaml", Diff: "-a\n+b"},
		{Host: "node3", Kind: kaov1.DriftOther, Item: "member-a"},
		{Host: "host_cluster", Kind: kaov1.DriftObject, Item: "Deployment karmada-system/karmada-apiserver", Diff: "-spec.replicas: 1\n+spec.replicas: 2"},
		{Host: "host_cluster", Kind: kaov1.DriftObject, Item: "(objects not shown: the task hides them)"},
	}
	checkItems(t, items, dropped, want)
	if items[0].Task != "Karmada controllers | Install the units" {
		t.Errorf("an item names its task: %+v", items[0])
	}
}

func TestItemsAreBoundedAndCountTheRest(t *testing.T) {
	var changes []runner.Change
	for i := range MaxItems + 7 {
		changes = append(changes, runner.Change{Host: "node1", Task: "Files", Action: "ansible.builtin.copy", Item: fmt.Sprintf("/etc/karmada/f%d", i)})
	}
	items, dropped := Items(changes, 3)
	if len(items) != MaxItems || dropped != 10 {
		t.Errorf("%d items and %d dropped, want %d and 10 (7 over the bound, 3 the run dropped)", len(items), dropped, MaxItems)
	}
}

// TestPlanItemsKeepTheRestartsInRunOrder proves that a plan lists what a
// run would change and the restarts that follow, in run order (an
// upgrade's restarts one per step and host), without systemd's reloads.
func TestPlanItemsKeepTheRestartsInRunOrder(t *testing.T) {
	changes := []runner.Change{
		{Host: "node1", Task: "Binaries | Install the programs", Action: "ansible.builtin.copy", Item: "/usr/local/bin/karmada-apiserver", Diff: "binary"},
		{Host: "node1", Task: "Restart | Reload systemd", Action: "ansible.builtin.systemd", State: "daemon-reload"},
		{Host: "node1", Task: "Restart | Restart the changed services", Action: "ansible.builtin.systemd", Item: "karmada-apiserver", State: "restarted"},
		{Host: "node2", Task: "Restart | Restart the changed services", Action: "ansible.builtin.systemd", Item: "karmada-apiserver", State: "restarted"},
		// The same restart reported twice by one task is one item; by
		// another task (the next step of an upgrade) it is another.
		{Host: "node2", Task: "Restart | Restart the changed services", Action: "ansible.builtin.systemd", Item: "karmada-apiserver", State: "restarted"},
		{Host: "node2", Task: "Webhook | Restart the changed services", Action: "ansible.builtin.systemd", Item: "karmada-apiserver", State: "restarted"},
		{Host: "node3", Task: "Start the components", Action: "ansible.builtin.systemd", Item: "karmada-webhook", State: "started"},
		{Host: "node3", Task: "Certificates", Action: "ansible.builtin.copy", Item: "/etc/karmada/pki/apiserver.crt", Diff: "-----BEGIN"},
	}
	items, dropped := PlanItems(changes, 0)
	want := []kaov1.DriftItem{
		{Host: "node1", Kind: kaov1.DriftBinary, Item: "/usr/local/bin/karmada-apiserver"},
		{Host: "node1", Kind: kaov1.DriftRestart, Item: "karmada-apiserver"},
		{Host: "node2", Kind: kaov1.DriftRestart, Item: "karmada-apiserver"},
		{Host: "node2", Kind: kaov1.DriftRestart, Item: "karmada-apiserver"},
		{Host: "node3", Kind: kaov1.DriftService, Item: "karmada-webhook", Diff: "stopped or not enabled: a run starts and enables it"},
		{Host: "node3", Kind: kaov1.DriftCertificate, Item: "/etc/karmada/pki/apiserver.crt"},
	}
	checkItems(t, items, dropped, want)
	if drifted, _ := Items(changes, 0); len(drifted) != 3 {
		t.Errorf("a drift check lists %d items of these, want 3 (no restarts): %+v", len(drifted), drifted)
	}
}

// checkItems compares items, their tasks left out, and none dropped, with want.
func checkItems(t *testing.T, items []kaov1.DriftItem, dropped int32, want []kaov1.DriftItem) {
	t.Helper()
	if dropped != 0 || len(items) != len(want) {
		t.Fatalf("%d items (%d dropped), want %d:\n%+v", len(items), dropped, len(want), items)
	}
	for i, w := range want {
		got := items[i]
		got.Task = ""
		if got != w {
			t.Errorf("item %d: %+v, want %+v", i, got, w)
		}
	}
}
