// Package observability tests what an SRE installs beside kao: the alerting
// rules of config/prometheus and the Grafana dashboard of config/grafana.
//
//   - the rules are valid and their unit tests on synthetic series pass
//     (promtool check rules, promtool test rules), and those tests have, for
//     every alert, a case where it fires and one where it stays silent;
//   - every series the rules and the dashboard read is one kao exports
//     (internal/metrics), with the labels they match and group by, but for
//     the one non-kao series an alert may read (controller-runtime's
//     leader-election gauge, for KaoOperatorNotLeading); and every metric kao
//     exports is read by an alert or the dashboard;
//   - every dashboard query is valid PromQL (promtool check rules on the
//     queries written as recording rules);
//   - every alert has a severity, a summary, a description and a runbook
//     that docs/alerts.md has a section for; KaoOperatorNotLeading watches
//     the lease cmd/manager elects its leader with;
//   - the PrometheusRule and the chart's copy hold the rules' groups, and the
//     dashboard is a Grafana dashboard: panels on the grid without overlap,
//     queries on the datasource variable, the namespace and deployment
//     variables.
//
// The tests that run promtool (the promtool tool set of hack/tools.sh) skip
// under -short; the others need nothing but the repository.
package observability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/docs"
)

const (
	rulesPath     = "config/prometheus/rules.yaml"
	ruleTestsPath = "test/observability/testdata/rules_test.yaml"
	dashboardPath = "config/grafana/kao-dashboard.json"
	alertsDocPath = "docs/alerts.md"
	runbookPrefix = "https://github.com/kao-io/kao/blob/main/docs/alerts.md#"
)

func repoPath(rel string) string { return filepath.Join(testenv.RepoRoot(), rel) }

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(repoPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// promtool is the promtool of hack/tools.sh's promtool set.
func promtool(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode: needs the promtool of make tools")
	}
	return testenv.ToolPath(t, "promtool", "promtool")
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// The rule file, as much of it as the tests read.

type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	if err := yaml.UnmarshalStrict(readFile(t, rulesPath), &f); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesPath)
	}
	return rules
}

func TestRulesPassPromtool(t *testing.T) {
	root := testenv.RepoRoot()
	runPromtool(t, root, "check", "rules", rulesPath)
	// promtool finds the rule file relative to the test file.
	runPromtool(t, filepath.Dir(repoPath(ruleTestsPath)), "test", "rules", filepath.Base(ruleTestsPath))
}

// Every alert has a unit test where it fires and one where it does not.
func TestRuleTestsCoverEveryAlert(t *testing.T) {
	var tests struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			Name       string `json:"name"`
			AlertTests []struct {
				EvalTime  string `json:"eval_time"`
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, ruleTestsPath), &tests); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(testenv.RepoRoot(), rulesPath)
	if len(tests.RuleFiles) != 1 || filepath.Join(filepath.Dir(repoPath(ruleTestsPath)), tests.RuleFiles[0]) != want {
		t.Errorf("%s tests %v, want %s", ruleTestsPath, tests.RuleFiles, rulesPath)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertTests {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname]++
			} else {
				silent[at.Alertname]++
			}
		}
	}
	alerts := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if fires[r.Alert] == 0 {
			t.Errorf("%s: no test where %s fires", ruleTestsPath, r.Alert)
		}
		if silent[r.Alert] == 0 {
			t.Errorf("%s: no test where %s stays silent", ruleTestsPath, r.Alert)
		}
	}
	for name := range mergeKeys(fires, silent) {
		if !alerts[name] {
			t.Errorf("%s tests %s, which %s does not define", ruleTestsPath, name, rulesPath)
		}
	}
}

func mergeKeys(maps ...map[string]int) map[string]bool {
	out := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

func TestAlertsAreDocumented(t *testing.T) {
	anchors := docs.Anchors(docs.Parse(alertsDocPath, string(readFile(t, alertsDocPath))))
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			t.Errorf("recording rule %s: the rule file holds alerts only", r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s is defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if !regexp.MustCompile(`^Kao[A-Z][A-Za-z]+$`).MatchString(r.Alert) {
			t.Errorf("alert %s: names start with Kao, in CamelCase", r.Alert)
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		for _, a := range []string{"summary", "description"} {
			if r.Alert == leaderElectionAlert {
				// About kao itself, not a deployment: it names the managers'
				// namespace when there is one.
				if !strings.Contains(r.Annotations[a], "{{ with $labels.namespace }}") {
					t.Errorf("alert %s: its %s does not name the namespace ({{ with $labels.namespace }})", r.Alert, a)
				}
				continue
			}
			for _, l := range []string{"namespace", "deployment"} {
				if !strings.Contains(r.Annotations[a], "{{ $labels."+l+" }}") {
					t.Errorf("alert %s: its %s does not name the %s ({{ $labels.%s }})", r.Alert, a, l, l)
				}
			}
		}
		if want := runbookPrefix + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !anchors[strings.ToLower(r.Alert)] {
			t.Errorf("%s has no section %q for alert %s", alertsDocPath, "## "+r.Alert, r.Alert)
		}
	}
}

// The PrometheusRule and the chart's copy hold the same groups as the rule
// file (make manifests writes both).
func TestPrometheusRuleMatchesRules(t *testing.T) {
	var rules, chart map[string]any
	if err := yaml.Unmarshal(readFile(t, rulesPath), &rules); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, "charts/kao/files/prometheus-rules.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, "config/prometheus/prometheusrule.yaml"), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("config/prometheus/prometheusrule.yaml is a %s %s", pr.APIVersion, pr.Kind)
	}
	if !reflect.DeepEqual(pr.Spec, rules) {
		t.Errorf("config/prometheus/prometheusrule.yaml's spec differs from %s: run make manifests", rulesPath)
	}
	if !reflect.DeepEqual(chart, rules) {
		t.Errorf("charts/kao/files/prometheus-rules.yaml differs from %s: run make manifests", rulesPath)
	}
	if got, want := readFile(t, "charts/kao/files/kao-dashboard.json"), readFile(t, dashboardPath); !bytes.Equal(got, want) {
		t.Errorf("charts/kao/files/kao-dashboard.json differs from %s: run make manifests", dashboardPath)
	}
}

// The dashboard, as much of it as the tests read.

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// allPanels flattens the rows' panels (a collapsed row holds its own).
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// query is one PromQL expression of the rules or the dashboard, named for
// the messages; alert is the alert it is the expression of, if any.
type query struct {
	where, expr, alert string
}

// foreignSeries are the series that kao does not export and that an alert
// may read all the same: only the alert named, with only the labels given.
// Nothing else outside internal/metrics may appear in a query.
var foreignSeries = map[string]struct {
	labels []string
	alert  string
}{
	// controller-runtime's leader-election gauge, 1 on the replica holding
	// the lease named by its label name. Its namespace is the manager pod's,
	// attached by Kubernetes service discovery.
	"leader_election_master_status": {labels: []string{"name", "namespace"}, alert: "KaoOperatorNotLeading"},
}

// leaderElectionAlert is the alert on foreignSeries' leader-election gauge.
const leaderElectionAlert = "KaoOperatorNotLeading"

// seriesFor are the series q may read: kao's, and the foreign ones allowed
// to its alert.
func seriesFor(q query) map[string]metrics.Metric {
	series := metrics.SeriesNames()
	for name, f := range foreignSeries {
		if q.alert != "" && q.alert == f.alert {
			series[name] = metrics.Metric{Name: name, Type: metrics.Gauge, Labels: f.labels}
		}
	}
	return series
}

// labelValues is a Grafana variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var qs []query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, query{where: fmt.Sprintf("panel %d %q, query %s", p.ID, p.Title, tg.RefID), expr: tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		// The label it lists must be on the metric: check it as a grouping.
		qs = append(qs, query{where: "variable " + v.Name, expr: "max by (" + m[2] + ") (" + m[1] + ")"})
	}
	return qs
}

func ruleQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, r := range loadRules(t) {
		qs = append(qs, query{where: "alert " + r.Alert, expr: r.Expr, alert: r.Alert})
	}
	return qs
}

// PromQL scanning: enough of the language to find the series an expression
// reads and the labels it matches and groups by.

var (
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	kaoName     = regexp.MustCompile(`\bkao_[a-zA-Z0-9_:]*`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	braces      = regexp.MustCompile(`\{[^}]*\}`)
	brackets    = regexp.MustCompile(`\[[^\]]*\]`)
	labelLists  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identifier  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	matcher     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*""`)
	grouping    = regexp.MustCompile(`\b(by|without)\s*\(([^)]*)\)`)
	identTail   = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*$`)
	aggregators = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
	// keywords are PromQL's words that are no series names.
	keywords = []string{"and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "Inf", "NaN"}
)

// labelsOf are the labels a series has: the catalog's, and le on a
// histogram's buckets.
func labelsOf(series string, m metrics.Metric) []string {
	labels := slices.Clone(m.Labels)
	if m.Type == metrics.Histogram && strings.HasSuffix(series, "_bucket") {
		labels = append(labels, "le")
	}
	return labels
}

// balanced returns the index just past the parenthesis that closes the one
// at open, or -1.
func balanced(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// opening returns the index of the parenthesis that the one at closing
// closes, or -1.
func opening(s string, closing int) int {
	depth := 0
	for i := closing; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// groupingScope returns the part of code a by or without clause at [start,
// end) aggregates over: the parenthesised operand after `agg by (...)`, or
// before `agg (...) by (...)`.
func groupingScope(code string, start, end int) (string, error) {
	before := strings.TrimRight(code[:start], " \t\n")
	if strings.HasSuffix(before, ")") {
		open := opening(before, len(before)-1)
		if open < 0 {
			return "", fmt.Errorf("unbalanced parentheses before %q", code[start:end])
		}
		return before[open:], nil
	}
	if !slices.Contains(aggregators, identTail.FindString(before)) {
		return "", fmt.Errorf("%q follows no aggregation", code[start:end])
	}
	rest := code[end:]
	open := strings.Index(rest, "(")
	if open < 0 || strings.TrimSpace(rest[:open]) != "" {
		return "", fmt.Errorf("%q is followed by no operand", code[start:end])
	}
	closeAt := balanced(rest, open)
	if closeAt < 0 {
		return "", fmt.Errorf("unbalanced parentheses after %q", code[start:end])
	}
	return rest[open:closeAt], nil
}

// withoutStrings blanks the string literals of a PromQL expression.
func withoutStrings(expr string) string {
	return stringLit.ReplaceAllStringFunc(expr, func(s string) string { return s[:1] + s[len(s)-1:] })
}

// seriesNames are the metric names code (without strings) reads: the
// identifiers left once matchers, ranges and label lists are blanked, that
// call nothing, are no keyword and are not part of a number or duration.
func seriesNames(code string) []string {
	code = braces.ReplaceAllString(code, "{}")
	code = brackets.ReplaceAllString(code, "[]")
	code = labelLists.ReplaceAllString(code, " ")
	var names []string
	for _, loc := range identifier.FindAllStringIndex(code, -1) {
		name := code[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(code[loc[0]-1])) {
			continue // 1e3, 0x1f, 5m
		}
		if rest := strings.TrimLeft(code[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || slices.Contains(keywords, name) {
			continue
		}
		names = append(names, name)
	}
	return names
}

// checkQuery reports every series q reads that is not in series (kao's,
// and the foreign ones its alert may read), and every label matched or
// grouped by that the series it applies to lacks.
func checkQuery(q query, series map[string]metrics.Metric) []string {
	var problems []string
	code := withoutStrings(q.expr)
	used := 0
	for _, name := range seriesNames(code) {
		used++
		if _, ok := series[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s: %s is not a series kao exports (internal/metrics), nor one this query may read", q.where, name))
		}
	}
	for _, m := range selector.FindAllStringSubmatch(code, -1) {
		metric, ok := series[m[1]]
		if !ok {
			continue
		}
		for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(labelsOf(m[1], metric), lm[1]) {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s (it has %v)", q.where, m[1], lm[1], labelsOf(m[1], metric)))
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatchIndex(code, -1) {
		clause := code[g[0]:g[1]]
		scope, err := groupingScope(code, g[0], g[1])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", q.where, err))
			continue
		}
		var labels []string
		for l := range strings.SplitSeq(code[g[4]:g[5]], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		for _, name := range seriesNames(scope) {
			metric, ok := series[name]
			if !ok {
				continue
			}
			for _, l := range labels {
				if !slices.Contains(labelsOf(name, metric), l) {
					problems = append(problems, fmt.Sprintf("%s: %q over %s, which has no label %s", q.where, clause, name, l))
				}
			}
		}
	}
	if used == 0 {
		problems = append(problems, fmt.Sprintf("%s: %q reads no series", q.where, q.expr))
	}
	return problems
}

// The checker itself: it must catch what it is for.
func TestCheckQueryCatches(t *testing.T) {
	dashboardQuery := query{where: "test"}
	leaderAlert := query{where: "test", alert: leaderElectionAlert}
	for _, tc := range []struct {
		q    query
		expr string
		want string
	}{
		{dashboardQuery, `kao_no_such_metric`, "not a series kao exports"},
		{dashboardQuery, `kao_etcd_members{member="a"}`, "has no label member"},
		{dashboardQuery, `max by (namespace, certificate) (kao_etcd_members)`, "has no label certificate"},
		{dashboardQuery, `sum(kao_etcd_members) by (member)`, "has no label member"},
		{dashboardQuery, `histogram_quantile(0.9, sum by (le) (rate(kao_runs_started_total[5m])))`, "has no label le"},
		{dashboardQuery, `up`, "up is not a series kao exports"},
		{dashboardQuery, `kao_etcd_members / on (namespace) group_left process_start_time_seconds`, "process_start_time_seconds is not"},
		{dashboardQuery, `vector(1)`, "reads no series"},
		// The leader-election gauge: only for its alert, only its labels.
		{dashboardQuery, `max(leader_election_master_status{name="kao-manager.kao.io"}) == 0`, "leader_election_master_status is not"},
		{query{where: "test", alert: "KaoControlPlaneNotReady"}, `max(leader_election_master_status) == 0`, "leader_election_master_status is not"},
		{leaderAlert, `max by (pod) (leader_election_master_status) == 0`, "has no label pod"},
		{leaderAlert, `leader_election_slowpath_total > 0`, "leader_election_slowpath_total is not"},
	} {
		tc.q.expr = tc.expr
		problems := checkQuery(tc.q, seriesFor(tc.q))
		if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s (alert %q): got %q, want a problem saying %q", tc.expr, tc.q.alert, problems, tc.want)
		}
	}
	for _, q := range []query{
		{expr: `histogram_quantile(0.9, sum by (le, playbook) (rate(kao_run_duration_seconds_bucket{namespace=~"$namespace"}[5m])))`},
		{expr: `time() - (max by (namespace, backup) (kao_etcdbackup_last_success_timestamp_seconds) or max by (namespace, backup) (kao_etcdbackup_created_timestamp_seconds))`},
		{expr: `sum(kao_members{deployment="by (certificate)"}) by (namespace)`},
		{expr: `max by (namespace) (kao_members) - 30 * 24 * 3600 > 1e3 unless on (namespace) kao_members offset 5m`},
		{expr: `max by (namespace, deployment, member) (kao_member_ready) > on (namespace, deployment) group_left () (max by (namespace, deployment) (kao_members) > time() - 3600)`},
		{expr: `max by (namespace) (leader_election_master_status{name="kao-manager.kao.io"}) == 0`, alert: leaderElectionAlert},
	} {
		q.where = "test"
		if problems := checkQuery(q, seriesFor(q)); len(problems) > 0 {
			t.Errorf("%s: %q", q.expr, problems)
		}
	}
}

func TestMetricNamesAndLabels(t *testing.T) {
	series := metrics.SeriesNames()
	// Every kao_ name anywhere in the rule file, comments included.
	for _, name := range kaoName.FindAllString(string(readFile(t, rulesPath)), -1) {
		if _, ok := series[name]; !ok {
			t.Errorf("%s names %s, which kao does not export", rulesPath, name)
		}
	}
	d := loadDashboard(t)
	qs := append(ruleQueries(t), dashboardQueries(t, d)...)
	used := map[string]bool{}
	for _, q := range qs {
		for _, p := range checkQuery(q, seriesFor(q)) {
			t.Error(p)
		}
		for _, name := range seriesNames(withoutStrings(q.expr)) {
			if m, ok := series[name]; ok {
				used[m.Name] = true
			}
		}
	}
	// A metric nobody reads is either missing from the alerts and the
	// dashboard, or should not be exported.
	for _, m := range metrics.Catalog {
		if !used[m.Name] {
			t.Errorf("%s is neither alerted on (%s) nor shown (hack/dashboard)", m.Name, rulesPath)
		}
	}
	t.Logf("%d queries checked", len(qs))
}

// KaoOperatorNotLeading watches the lease cmd/manager elects its leader
// with: the name of the gauge's series is the LeaderElectionID.
func TestLeaderElectionAlertWatchesKaosLease(t *testing.T) {
	m := regexp.MustCompile(`LeaderElectionID:\s*"([^"]+)"`).FindSubmatch(readFile(t, "cmd/manager/main.go"))
	if m == nil {
		t.Fatal("cmd/manager/main.go sets no LeaderElectionID")
	}
	for _, r := range loadRules(t) {
		if r.Alert != leaderElectionAlert {
			continue
		}
		want := `leader_election_master_status{name="` + string(m[1]) + `"}`
		if !strings.Contains(r.Expr, want) {
			t.Errorf("alert %s: %q does not read %s", r.Alert, r.Expr, want)
		}
		return
	}
	t.Errorf("%s has no alert %s", rulesPath, leaderElectionAlert)
}

// grafanaVariable is a dashboard variable in a query: $name, ${name} or
// ${name:format}.
var grafanaVariable = regexp.MustCompile(`\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*`)

// concrete replaces the dashboard's variables by what Prometheus could be
// sent: a duration for the interval variables, a regular expression for the
// others (they are used in =~ matchers).
func concrete(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		switch strings.Trim(v, "${}") {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		default:
			return ".*"
		}
	})
}

func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	bin := promtool(t)
	d := loadDashboard(t)
	var rules []rule
	for i, q := range dashboardQueries(t, d) {
		expr := concrete(q.expr)
		if strings.Contains(expr, "$") {
			t.Errorf("%s: a variable is left in %q", q.where, expr)
		}
		rules = append(rules, rule{Record: fmt.Sprintf("kao_dashboard:query_%d", i), Expr: expr})
		t.Logf("%s: %s", q.where, expr)
	}
	data, err := json.MarshalIndent(ruleFile{Groups: []ruleGroup{{Name: "dashboard", Rules: rules}}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(string(out), want) {
		t.Errorf("promtool check rules: want %q in\n%s", want, out)
	}
}

func TestDashboardModel(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want 39 or more", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s does not query ${datasource}", v.Name)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "namespace": "query", "deployment": "query"} {
		if vars[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, vars[name], typ)
		}
	}

	var rows []string
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] || p.ID <= 0 {
			t.Errorf("panel %q: id %d is not unique and positive", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q: gridPos %+v is not on the 24-column grid", p.ID, p.Title, p.GridPos)
			continue
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panel %d %q overlaps %s at %d,%d", p.ID, p.Title, other, x, y)
				}
				taken[cell{x, y}] = fmt.Sprintf("panel %d %q", p.ID, p.Title)
			}
		}
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %d %q: datasource %+v, want the ${datasource} variable", p.ID, p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d %q has no query", p.ID, p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %d %q: query %q has no expr or no unique refId", p.ID, p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d %q, query %s: datasource %+v, want ${datasource}", p.ID, p.Title, tg.RefID, tg.Datasource)
			}
			if !strings.Contains(tg.Expr, `namespace=~"$namespace"`) || !strings.Contains(tg.Expr, `deployment=~"$deployment"`) {
				t.Errorf("panel %d %q, query %s: %q ignores the namespace or deployment variable", p.ID, p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	want := []string{"Control planes", "Runs", "etcd", "Certificates", "Members", "Backups", "Restores"}
	if !slices.Equal(rows, want) {
		t.Errorf("rows %v, want one per concern: %v", rows, want)
	}
}
