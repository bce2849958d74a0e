package jobexec

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/runner"
)

// TestARequestCarriesEveryFieldOfTheRun: every runner.Spec field a pod
// needs survives the trip through the run's Secret, so that a field added
// to runner.Spec is not silently lost in Jobs. The fields only the operator
// uses are listed.
func TestARequestCarriesEveryFieldOfTheRun(t *testing.T) {
	operatorOnly := map[string]bool{"OnProgress": true, "AnsiblePlaybook": true, "Relay": true, "Owner": true, "Meta": true, "Attach": true}
	spec := runner.Spec{
		ID: "id", Dir: "/d", Playbook: "/p.yml", Inventory: []byte(`{}`), Groups: map[string][]string{"all": {"h"}},
		ExtraVars: map[string]any{"k": "v"}, SSHPrivateKey: []byte("key"), KnownHosts: []byte("known"), SSHConnectTimeout: time.Second,
		Secrets: []runner.File{{Path: "s", Data: []byte("x")}}, Files: []runner.File{{Path: "f", Data: []byte("y")}},
		RolesPath: []string{"/r"}, FactCacheDir: "/c", MaxForks: 3, Timeout: time.Minute, Redact: [][]byte{[]byte("z")},
		Fetch: &runner.Fetch{Var: "v", Name: "n.db"}, Check: true, Diff: true, Tags: []string{"hosts"},
	}
	data, err := json.Marshal(requestOf(spec))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadRequestData(data)
	if err != nil {
		t.Fatal(err)
	}
	want, have := reflect.ValueOf(spec), reflect.ValueOf(got)
	for i := 0; i < want.NumField(); i++ {
		name := want.Type().Field(i).Name
		if operatorOnly[name] {
			continue
		}
		if want.Field(i).IsZero() {
			t.Errorf("the test sets no %s: set it, or list it as the operator's only", name)
			continue
		}
		if !reflect.DeepEqual(want.Field(i).Interface(), have.Field(i).Interface()) {
			t.Errorf("%s: sent %v, the pod read %v", name, want.Field(i).Interface(), have.Field(i).Interface())
		}
	}
}
