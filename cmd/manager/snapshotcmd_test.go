package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kao-io/kao/internal/controller/etcdbackup"
)

// TestSnapshotCommandWritesItsResultAndExitCode runs `kao-manager snapshot`
// as a Job's pod does, on requests that cannot give a snapshot: the result
// file says why in JSON, and the exit code tells the Job. A stored snapshot
// is TestSnapshotsInJobs' (internal/controller/etcdbackup: a real etcd and
// backup host) and test/incluster's (a real Job on a real node).
func TestSnapshotCommandWritesItsResultAndExitCode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		request string
		code    int
		result  string
	}{
		{"a snapshot name kao never writes", `{"name":"../../etc/passwd","etcd":{}}`, 1, "is not a snapshot file name"},
		{"an unusable client certificate", `{"name":"kd-20261127T000000Z.db","etcd":{"ca":"bm8=","cert":"bm8=","key":"bm8="}}`, 1, "client certificate in the request is unusable"},
		{"a request that is not JSON", `not json`, 1, "decoding the snapshot's request"},
	} {
		result := filepath.Join(dir, "result-"+strings.ReplaceAll(tc.name, " ", "-"))
		var out bytes.Buffer
		code := snapshotCommand([]string{"--request=" + write("request.json", tc.request), "--result=" + result, "--tmp=" + dir}, &out)
		if code != tc.code {
			t.Errorf("%s: exit code %d, want %d\n%s", tc.name, code, tc.code, out.String())
		}
		data, err := os.ReadFile(result)
		got := etcdbackup.SnapshotOutcome{}
		if err != nil || json.Unmarshal(data, &got) != nil || !strings.Contains(got.Error, tc.result) || got.Snapshot != nil {
			t.Errorf("%s: result %q (%v), want an error saying %q", tc.name, data, err, tc.result)
		}
	}
	var out bytes.Buffer
	if code := snapshotCommand([]string{"--request=/nonexistent/request.json", "--result=" + filepath.Join(dir, "r")}, &out); code != 3 {
		t.Errorf("a missing request: exit code %d, output %q", code, out.String())
	}
}
