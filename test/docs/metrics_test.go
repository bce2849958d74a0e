package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kao-io/kao/internal/metrics"
)

// metricRow is a row of docs/metrics.md's tables: name, type, labels.
var metricRow = regexp.MustCompile("(?m)^\\| `(kao_[a-z_]+)` \\| ([a-z]+) \\| ([a-z_, ]+) \\|")

// TestMetricsAreDocumented checks that docs/metrics.md has a row for every
// metric kao exports, with its type and labels, and none for a metric it
// does not export.
func TestMetricsAreDocumented(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, m := range metricRow.FindAllStringSubmatch(string(text), -1) {
		rows[m[1]] = m[2:]
	}
	for _, m := range metrics.Catalog {
		row, ok := rows[m.Name]
		if !ok {
			t.Errorf("docs/metrics.md has no row for %s", m.Name)
			continue
		}
		delete(rows, m.Name)
		if row[0] != string(m.Type) {
			t.Errorf("docs/metrics.md: %s is a %s, not a %s", m.Name, m.Type, row[0])
		}
		if got, want := strings.TrimSpace(row[1]), strings.Join(m.Labels, ", "); got != want {
			t.Errorf("docs/metrics.md: %s has labels %q, the docs say %q", m.Name, want, got)
		}
	}
	for name := range rows {
		t.Errorf("docs/metrics.md documents %s, which kao does not export", name)
	}
}
