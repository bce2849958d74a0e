package roles

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ownerCall is what one kao_owner call answered.
type ownerCall struct {
	Failed   bool   `json:"failed"`
	Changed  bool   `json:"changed"`
	Owner    string `json:"owner"`
	OtherUID string `json:"other_uid"`
	Msg      string `json:"msg"`
}

// kaoOwner runs the kao_owner module on this machine with args, as a role
// would on a host (check mode with check).
func kaoOwner(t *testing.T, args map[string]any, check bool) ownerCall {
	t.Helper()
	data, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"localhost", "-M", filepath.Join(repoRoot(t), "roles", "kao_common", "library"), "-m", "kao_owner", "-a", string(data)}
	if check {
		argv = append(argv, "--check")
	}
	cmd := exec.Command("ansible", argv...)
	cmd.Env = append(os.Environ(), "ANSIBLE_LOAD_CALLBACK_PLUGINS=1", "ANSIBLE_STDOUT_CALLBACK=json", "ANSIBLE_LOCALHOST_WARNING=0")
	out, _ := cmd.Output() // a failed module exits non-zero; its result is in the output
	var report struct {
		Plays []struct {
			Tasks []struct {
				Hosts map[string]ownerCall `json:"hosts"`
			} `json:"tasks"`
		} `json:"plays"`
	}
	if err := json.Unmarshal(out, &report); err != nil || len(report.Plays) == 0 || len(report.Plays[0].Tasks) == 0 {
		t.Fatalf("ansible -m kao_owner %s: %v\n%s", data, err, out)
	}
	return report.Plays[0].Tasks[0].Hosts["localhost"]
}

// TestKaoOwner drives the module that keeps one deployment per host and
// per etcd data directory: what it claims, refuses, takes over and releases,
// and that check mode tells the truth without writing.
func TestKaoOwner(t *testing.T) {
	requirePrerequisites(t)
	const mine, theirs = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	dir := t.TempDir()
	data := filepath.Join(dir, "karmada-etcd")
	marker := data + ".kao-owner"
	claim := func(uid string, extra map[string]any) map[string]any {
		args := map[string]any{"kind": "directory", "path": data, "uid": uid, "namespace": "team-a"}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	expect := func(what string, got ownerCall, failed, changed bool, owner, msg string) {
		t.Helper()
		if got.Failed != failed || got.Changed != changed || got.Owner != owner || !strings.Contains(got.Msg, msg) {
			t.Errorf("%s: got failed=%v changed=%v owner=%q msg=%q; want failed=%v changed=%v owner=%q msg containing %q",
				what, got.Failed, got.Changed, got.Owner, got.Msg, failed, changed, owner, msg)
		}
	}

	// Check mode tells what a claim would do and writes nothing.
	expect("a check of a new directory", kaoOwner(t, claim(mine, nil), true), false, true, "none", "")
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("check mode wrote the marker (%v)", err)
	}
	expect("a new directory", kaoOwner(t, claim(mine, nil), false), false, true, "none", "")
	if b, err := os.ReadFile(marker); err != nil || !strings.Contains(string(b), mine) {
		t.Fatalf("the marker does not name the deployment: %q %v", b, err)
	}
	expect("a second claim", kaoOwner(t, claim(mine, nil), false), false, false, "self", "")

	// Another deployment is refused, even with data in the directory, and
	// takes over only when it names the owner.
	if err := os.MkdirAll(filepath.Join(data, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	expect("another deployment's claim", kaoOwner(t, claim(theirs, nil), false), true, false, "other",
		"belongs to another KarmadaDeployment (uid "+mine+")")
	// Another namespace's deployment learns nothing and takes nothing over.
	stranger := kaoOwner(t, claim(theirs, map[string]any{"namespace": "team-b", "take_over_from": mine}), false)
	expect("another namespace's take-over", stranger, true, false, "other", "belongs to a KarmadaDeployment of another namespace")
	if strings.Contains(stranger.Msg, mine) || stranger.OtherUID != "" {
		t.Errorf("the refusal of another namespace names the owner: %+v", stranger)
	}
	expect("a take-over naming someone else", kaoOwner(t, claim(theirs, map[string]any{"take_over_from": theirs}), false), true, false, "other", "kao.io/take-over-from="+mine)
	expect("a take-over naming the owner", kaoOwner(t, claim(theirs, map[string]any{"take_over_from": mine}), false), false, true, "other", "")
	expect("the old owner's query", kaoOwner(t, claim(mine, map[string]any{"state": "query"}), false), false, false, "other", "")

	// Releasing: only the owner's release removes the marker.
	expect("a release by another", kaoOwner(t, claim(mine, map[string]any{"state": "absent"}), false), false, false, "other", "")
	expect("the owner's release", kaoOwner(t, claim(theirs, map[string]any{"state": "absent"}), false), false, true, "self", "")
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the owner's release left the marker (%v)", err)
	}

	// Data nobody marked: refused, unless it is this deployment's from
	// before markers existed.
	expect("data kao did not make", kaoOwner(t, claim(mine, nil), false), true, false, "unmarked", "holds data that kao did not put there")
	expect("the deployment's own data from before markers", kaoOwner(t, claim(mine, map[string]any{"legacy": true}), false), false, true, "unmarked", "")

	// A host: footprints of a control plane without a marker are refused.
	hostMarker := filepath.Join(dir, "etc-kao-owner")
	unit := filepath.Join(dir, "karmada-apiserver.service")
	if err := os.WriteFile(unit, []byte("[Unit]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := func(uid string, extra map[string]any) map[string]any {
		args := map[string]any{"kind": "host", "marker": hostMarker, "uid": uid, "namespace": "team-a", "footprints": []string{unit, filepath.Join(dir, "karmada-etcd.service")}}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	expect("a host with a control plane kao did not install for this deployment", kaoOwner(t, host(mine, nil), false), true, false, "unmarked",
		"holds a Karmada control plane that kao did not install for this deployment ("+unit+")")
	expect("the host of an earlier install", kaoOwner(t, host(mine, map[string]any{"legacy": true}), false), false, true, "unmarked", "")
	expect("the same host for another deployment", kaoOwner(t, host(theirs, map[string]any{"legacy": true}), false), true, false, "other", "this host belongs to another KarmadaDeployment")
}
