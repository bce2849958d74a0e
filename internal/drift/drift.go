// Package drift tells, from what a check-mode run of the install playbook
// would change, what drifted on the hosts since the last run: the changes
// made outside kao, classified (a unit, a file, a certificate, a binary, a
// service, an object of the host cluster), without the restarts and reloads a run would
// make because of them. For a plan of a generation not applied yet it
// lists the restarts too.
package drift

import (
	"path"
	"strings"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
)

// MaxItems is how many drifted items status.drift lists; the API bounds
// the list at this length.
const MaxItems = 100

// Items turns what a check run would change into drift items: the
// changes made outside kao (a unit, a file, a certificate, a binary, a
// stopped or disabled service), without the reloads
// and restarts a run would make because of them. The second value counts
// the items beyond MaxItems, with the changes the run itself dropped.
func Items(changes []runner.Change, dropped int) ([]kaov1.DriftItem, int32) {
	return collect(changes, dropped, item)
}

// PlanItems turns what a check-mode run of a generation not applied yet
// would change into the items of a plan: Items' kinds, in run order, and
// the restarts too (kind Restart), which a person approving a change wants
// to see; reloads of systemd's units are left out.
func PlanItems(changes []runner.Change, dropped int) ([]kaov1.DriftItem, int32) {
	return collect(changes, dropped, planItem)
}

// collect classifies changes into items, in order, at most MaxItems, and
// counts the rest with dropped.
func collect(changes []runner.Change, dropped int, classify func(runner.Change) (kaov1.DriftItem, bool)) ([]kaov1.DriftItem, int32) {
	items := []kaov1.DriftItem{}
	seen := map[string]bool{}
	extra := dropped
	for _, c := range changes {
		it, ok := classify(c)
		if !ok {
			continue
		}
		// A path two roles install, or a task a role runs twice, is one item;
		// changes that name nothing, and restarts (an upgrade restarts a
		// service once per step), stay apart by task.
		key := it.Host + "\x00" + string(it.Kind) + "\x00" + it.Item
		if it.Item == "" || it.Kind == kaov1.DriftRestart {
			key += "\x00" + it.Task
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if len(items) == MaxItems {
			extra++
			continue
		}
		items = append(items, it)
	}
	return items, int32(extra) //nolint:gosec // bounded by the run's changes
}

// planItem classifies one change for a plan: as item does, and a restart
// as an item of its own.
func planItem(c runner.Change) (kaov1.DriftItem, bool) {
	it, ok := item(c)
	if ok || c.State != "restarted" {
		return it, ok
	}
	it.Kind, it.Diff = kaov1.DriftRestart, ""
	if it.Item == "" {
		it.Item = "(unnamed service)"
	}
	return it, true
}

// item classifies one change; false for a consequence of another
// change (a restart, a daemon-reload) rather than drift of its own. The
// runner bounds a change's task and item to 256 bytes and its diff to about
// 2000, within the API's bounds of a drift item.
func item(c runner.Change) (kaov1.DriftItem, bool) {
	item := kaov1.DriftItem{Host: c.Host, Task: c.Task, Item: c.Item, Diff: c.Diff}
	module := path.Ext("." + c.Action)[1:] // ansible.builtin.systemd -> systemd
	lowerTask := strings.ToLower(c.Task)
	switch {
	case module == "k8s":
		// An object of a Kubernetes API; a task that hides its objects (the
		// Secrets) says only that some of them would change.
		item.Kind = kaov1.DriftObject
		if c.Hidden {
			item.Item, item.Diff = "(objects not shown: the task hides them)", ""
		}
	case module == "systemd" || module == "systemd_service" || module == "service":
		switch c.State {
		case "restarted", "reloaded", "daemon-reload":
			return item, false
		}
		item.Kind = kaov1.DriftService
		if item.Item == "" {
			item.Item = "(unnamed service)"
		}
		item.Diff = serviceDrift(c.State)
	case c.Hidden:
		item.Kind = kaov1.DriftOther
		if strings.Contains(lowerTask, "key") || strings.Contains(lowerTask, "certificate") {
			item.Kind = kaov1.DriftCertificate
		}
		item.Diff = ""
	default:
		item.Kind = fileKind(c.Item)
		if item.Kind == kaov1.DriftCertificate || item.Kind == kaov1.DriftBinary {
			// A certificate's text says nothing a person can compare, and a
			// program's bytes are not text.
			item.Diff = ""
		}
	}
	return item, true
}

// fileKind classifies a changed path.
func fileKind(p string) kaov1.DriftKind {
	base := path.Base(p)
	switch {
	case p == "":
		return kaov1.DriftOther
	case strings.HasSuffix(base, ".service") || strings.Contains(p, "/systemd/system/"):
		return kaov1.DriftUnit
	case strings.HasSuffix(base, ".crt") || strings.HasSuffix(base, ".key") || strings.HasSuffix(base, ".pem"):
		return kaov1.DriftCertificate
	case strings.Contains(p, "/bin/"):
		return kaov1.DriftBinary
	case strings.HasPrefix(p, "/"):
		return kaov1.DriftFile
	}
	return kaov1.DriftOther
}

// serviceDrift says what a run would do to a service it starts or enables.
func serviceDrift(state string) string {
	switch state {
	case "started":
		return "stopped or not enabled: a run starts and enables it"
	case "stopped":
		return "running: a run stops it"
	case "enabled":
		return "not enabled: a run enables it"
	}
	return ""
}
