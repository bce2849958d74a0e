package badinput

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Outcomes a case expects (expectation.Outcome).
const (
	// rejected: the API server refuses the create or update with Message.
	rejected = "Rejected"
	// refused: the API server accepts the object; the operator sets Condition
	// with Message, emits a Warning Event and starts no playbook run.
	refused = "Refused"
	// accepted: the API server accepts hostile strings; the operator's
	// inventory carries each of them only as an __ansible_unsafe string.
	accepted = "Accepted"
)

// What the test tolerates while a known gap is open (expectation.Today).
const (
	// todayRun: the operator starts a run instead of refusing; the run can
	// reach no host, so it fails without touching anything.
	todayRun = "Run"
	// todayNoEvent: the operator sets the condition but emits no Event.
	todayNoEvent = "NoEvent"
)

// Operations a case applies its last document with (expectation.On).
const (
	onCreate = "Create"
	onUpdate = "Update"
)

// expectation is the first document of a case file: what must happen.
type expectation struct {
	// Tried says in a line what the case tries; docs/bad-input.md repeats it.
	Tried string `json:"tried"`
	// Outcome is Rejected, Refused or Accepted.
	Outcome string `json:"outcome"`
	// Operation is Create (the default) or Update. For Update the last document is a
	// JSON merge patch of the object of the same kind and name earlier in the
	// file; a KarmadaDeployment updated this way is first made to look
	// installed (see testdata/README.md).
	Operation string `json:"operation,omitempty"`
	// Message must be part of the API server's error (Rejected) or of the
	// condition's message and the Event's note (Refused). {ns} stands for the
	// test's namespace.
	Message string `json:"message,omitempty"`
	// Condition is the condition a Refused case ends with, as Type=Status/Reason.
	Condition string `json:"condition,omitempty"`
	// Event is the reason of the Warning Event of a Refused case; the
	// condition's reason when empty.
	Event string `json:"event,omitempty"`
	// Unsafe lists strings of an Accepted case that must reach the inventory,
	// each inside an __ansible_unsafe value.
	Unsafe []string `json:"unsafe,omitempty"`
	// MustNotLeak lists secret strings that are not Secret values (a password
	// in a URL): like Secret values they must appear in no status, Event or log.
	MustNotLeak []string `json:"mustNotLeak,omitempty"`
	// Gap says what kao does today instead of Outcome, and where the fix belongs.
	Gap string `json:"gap,omitempty"`
	// Today is what the test tolerates while Gap is open: Run or NoEvent.
	Today string `json:"today,omitempty"`
}

// testCase is one file of testdata/.
type testCase struct {
	// id is the file name without .yaml.
	id string
	// expect is the file's first document.
	expect expectation
	// objects are the other documents, in order; the last is the subject.
	objects []*unstructured.Unstructured
	// secrets are every Secret value of the file and MustNotLeak, for leak checks.
	secrets []string
}

// subject is the object the case is about: its last document.
func (c *testCase) subject() *unstructured.Unstructured { return c.objects[len(c.objects)-1] }

// base is, for an Update case, the earlier document the subject patches.
func (c *testCase) base() *unstructured.Unstructured {
	s := c.subject()
	for _, o := range c.objects[:len(c.objects)-1] {
		if o.GetKind() == s.GetKind() && o.GetName() == s.GetName() {
			return o
		}
	}
	return nil
}

// loadCorpus reads every case of dir, with the material filled in.
func loadCorpus(t *testing.T, dir string, m material) []*testCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	cases := []*testCase{}
	names := map[string]string{}
	for _, f := range files {
		c, err := loadCase(f, m)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range c.objects {
			if c.expect.Operation == onUpdate && o == c.subject() {
				continue
			}
			key := o.GetKind() + "/" + o.GetName()
			if other, dup := names[key]; dup {
				t.Fatalf("%s and %s both create %s: every case needs its own object names", other, c.id, key)
			}
			names[key] = c.id
		}
		cases = append(cases, c)
	}
	return cases
}

func loadCase(file string, m material) (*testCase, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	data, err := m.expandBytes(raw)
	if err != nil {
		return nil, err
	}
	c := &testCase{id: strings.TrimSuffix(filepath.Base(file), ".yaml")}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if i == 0 {
			header := struct {
				Expect *expectation `json:"expect"`
			}{}
			if err := yaml.UnmarshalStrict(doc, &header); err != nil {
				return nil, fmt.Errorf("reading the first document, `expect: {...}`: %w", err)
			}
			if header.Expect == nil {
				return nil, errors.New("the first document must be `expect: {...}`")
			}
			c.expect = *header.Expect
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		c.objects = append(c.objects, obj)
		values, err := secretValues(obj)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		c.secrets = append(c.secrets, values...)
	}
	c.secrets = append(c.secrets, c.expect.MustNotLeak...)
	if c.expect.Operation == "" {
		c.expect.Operation = onCreate
	}
	return c, c.validate()
}

// validate checks that a case says all the test needs to judge it.
func (c *testCase) validate() error {
	e := c.expect
	switch {
	case e.Tried == "":
		return errors.New("expect.tried is required")
	case len(c.objects) == 0:
		return errors.New("the case has no object")
	case e.Operation != onCreate && e.Operation != onUpdate:
		return fmt.Errorf("expect.operation is %q, want Create or Update", e.Operation)
	case e.Operation == onUpdate && c.base() == nil:
		return errors.New("an Update case needs the object it patches earlier in the file")
	case (e.Gap == "") != (e.Today == ""):
		return errors.New("expect.gap and expect.today go together")
	}
	switch e.Outcome {
	case rejected:
		if e.Message == "" {
			return errors.New("a Rejected case needs expect.message")
		}
		if e.Today != "" {
			return errors.New("a Rejected case has no known gap: the API server either rejects it or the case is Refused")
		}
	case refused:
		if _, _, _, err := parseCondition(e.Condition); err != nil {
			return fmt.Errorf("a Refused case needs expect.condition: %w", err)
		}
		if e.Message == "" {
			return errors.New("a Refused case needs expect.message")
		}
		if e.Today != "" && e.Today != todayRun && e.Today != todayNoEvent {
			return fmt.Errorf("a Refused case tolerates only today: Run or NoEvent, not %q", e.Today)
		}
	case accepted:
		if c.subject().GetKind() != "KarmadaDeployment" {
			return errors.New("an Accepted case is about a KarmadaDeployment")
		}
		if paused, _, _ := unstructured.NestedBool(c.subject().Object, "spec", "paused"); !paused {
			return errors.New("an Accepted case's KarmadaDeployment must be paused: no run may start")
		}
	default:
		return fmt.Errorf("expect.outcome is %q, want Rejected, Refused or Accepted", e.Outcome)
	}
	return nil
}

// parseCondition splits Type=Status/Reason.
func parseCondition(s string) (typ, status, reason string, err error) {
	typ, rest, ok1 := strings.Cut(s, "=")
	status, reason, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || typ == "" || status == "" || reason == "" {
		return "", "", "", fmt.Errorf("condition %q is not Type=Status/Reason", s)
	}
	return typ, status, reason, nil
}

// secretValues returns the values of a Secret's data and stringData.
func secretValues(obj *unstructured.Unstructured) ([]string, error) {
	if obj.GetKind() != "Secret" {
		return nil, nil
	}
	out := []string{}
	data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
	for k, v := range data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("Secret %s data %s is not base64: %w", obj.GetName(), k, err)
		}
		out = append(out, string(b))
	}
	str, _, _ := unstructured.NestedStringMap(obj.Object, "stringData")
	for _, v := range str {
		out = append(out, v)
	}
	return out, nil
}
