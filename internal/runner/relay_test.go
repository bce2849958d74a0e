package runner

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayed runs a playbook of testdata with its stream relayed, and returns
// the run's own result with the relayed stream.
func relayed(t *testing.T, spec Spec) (*Result, []byte) {
	t.Helper()
	var stream bytes.Buffer
	spec.Relay = &stream
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return res, stream.Bytes()
}

// TestFollowRecordsWhatTheRunItselfRecorded runs playbooks that fail, report
// custom stats and fail inside a role, and checks that following the
// relayed stream elsewhere gives the result the run gave where it ran.
func TestFollowRecordsWhatTheRunItselfRecorded(t *testing.T) {
	for _, playbook := range []string{"fail.yml", "stats.yml", "role-fail.yml", "progress.yml"} {
		t.Run(playbook, func(t *testing.T) {
			want, stream := relayed(t, newSpec(t, playbook))
			var seen []Progress
			follower := Spec{ID: "test", Dir: filepath.Join(t.TempDir(), "followed"), Playbook: want.Playbook,
				OnProgress: func(p Progress) { seen = append(seen, p) }}
			got, ended, err := Follow(follower, want.StartTime, bytes.NewReader(stream))
			if err != nil {
				t.Fatal(err)
			}
			if !ended {
				t.Fatal("the relayed stream of a finished run has no end record")
			}
			if got.Outcome != want.Outcome || got.Message != want.Message || got.ExitCode != want.ExitCode {
				t.Errorf("followed %s %q (exit %d), the run said %s %q (exit %d)", got.Outcome, got.Message, got.ExitCode,
					want.Outcome, want.Message, want.ExitCode)
			}
			for what, pair := range map[string][2]any{
				"hosts":        {got.Hosts, want.Hosts},
				"failed tasks": {got.FailedTasks, want.FailedTasks},
				"custom stats": {got.CustomStats, want.CustomStats},
				"progress":     {got.Progress, want.Progress},
			} {
				if !reflect.DeepEqual(pair[0], pair[1]) {
					t.Errorf("followed %s %+v, the run's own %+v", what, pair[0], pair[1])
				}
			}
			if len(seen) == 0 || seen[len(seen)-1].TasksTotal == 0 {
				t.Errorf("no progress with the run's estimated total while following: %+v", seen)
			}
			if !bytes.Contains(got.Log, []byte("end")) || len(got.Log) == 0 {
				t.Errorf("the followed log lacks the run's end:\n%s", got.Log)
			}
		})
	}
}

// TestRelayedStreamHoldsNoSecret checks that what leaves the run (a Job
// pod's log) carries neither a secret a task printed nor the rest of a
// task's result, only the redacted failure message.
func TestRelayedStreamHoldsNoSecret(t *testing.T) {
	spec := newSpec(t, "secret.yml")
	secret := "tok-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-very-secret-value"
	spec.Secrets = []File{{Path: "token", Data: []byte(secret)}}
	spec.Redact = [][]byte{[]byte(secret)}
	spec.ExtraVars = map[string]any{"kao_secret_file": filepath.Join(spec.Dir, SecretsDir, "token")}
	res, stream := relayed(t, spec)
	if res.Outcome != Failed {
		t.Fatalf("want the secret playbook to fail, got %s", res.Outcome)
	}
	if bytes.Contains(stream, []byte(secret)) {
		t.Fatalf("the relayed stream holds the secret:\n%s", stream)
	}
	if !bytes.Contains(stream, []byte("bad token "+Redacted)) {
		t.Errorf("the relayed stream lacks the redacted failure message:\n%s", stream)
	}
	for _, field := range []string{`"stdout"`, `"invocation"`, `"cmd"`} {
		if bytes.Contains(stream, []byte(field)) {
			t.Errorf("the relayed stream carries the task result's %s field:\n%s", field, stream)
		}
	}
}

// TestFollowingACutStreamSaysSo checks a stream that stops before the
// run's end (the pod killed): the result is Failed, not ended, and keeps
// what was seen until then.
func TestFollowingACutStreamSaysSo(t *testing.T) {
	_, stream := relayed(t, newSpec(t, "progress.yml"))
	lines := strings.SplitAfter(string(stream), "\n")
	cut := strings.Join(lines[:len(lines)/2], "")
	got, ended, err := Follow(Spec{ID: "test", Dir: filepath.Join(t.TempDir(), "cut"), Playbook: "progress.yml"}, time.Now(), strings.NewReader(cut))
	if err != nil {
		t.Fatal(err)
	}
	if ended || got.Outcome != Failed || !strings.Contains(got.Message, "without a result") {
		t.Errorf("a cut stream gave ended=%v %s %q", ended, got.Outcome, got.Message)
	}
	if got.Progress.TasksDone == 0 {
		t.Errorf("the tasks seen before the cut were not counted: %+v", got.Progress)
	}
}
