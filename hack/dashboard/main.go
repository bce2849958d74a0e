// Command dashboard writes kao's Grafana dashboard (`make manifests` runs it):
//
//	go run ./hack/dashboard -o config/grafana/kao-dashboard.json
//
// The dashboard has one row per concern: control planes, runs, etcd,
// certificates, members, backups and restores. Its data source, namespace and
// deployment are template variables. Every query is PromQL over the metrics of
// internal/metrics; test/observability checks the names, the labels and that
// each query parses. The JSON is the dashboard model of Grafana 10 and later
// (schemaVersion 39), written from the small structs below, so that a change
// here shows as a reviewable diff of the generated file.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Grafana's dashboard model: only the fields kao's dashboard uses.

type dashboard struct {
	ID            *int        `json:"id"`
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	Description   string      `json:"description"`
	Tags          []string    `json:"tags"`
	Editable      bool        `json:"editable"`
	GraphTooltip  int         `json:"graphTooltip"`
	Refresh       string      `json:"refresh"`
	SchemaVersion int         `json:"schemaVersion"`
	Version       int         `json:"version"`
	Time          timeRange   `json:"time"`
	Timezone      string      `json:"timezone"`
	Annotations   annotations `json:"annotations"`
	Templating    templating  `json:"templating"`
	Panels        []*panel    `json:"panels"`
}

type timeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type annotations struct {
	List []any `json:"list"`
}

type templating struct {
	List []variable `json:"list"`
}

type variable struct {
	Type        string      `json:"type"`
	Name        string      `json:"name"`
	Label       string      `json:"label"`
	Datasource  *datasource `json:"datasource,omitempty"`
	Query       any         `json:"query"`
	Definition  string      `json:"definition,omitempty"`
	Refresh     int         `json:"refresh"`
	Regex       string      `json:"regex"`
	Sort        int         `json:"sort"`
	Multi       bool        `json:"multi"`
	IncludeAll  bool        `json:"includeAll"`
	AllValue    string      `json:"allValue,omitempty"`
	Hide        int         `json:"hide"`
	Current     struct{}    `json:"current"`
	Options     []struct{}  `json:"options"`
	SkipURLSync bool        `json:"skipUrlSync"`
}

// variableQuery is a Prometheus query variable's query.
type variableQuery struct {
	Query string `json:"query"`
	RefID string `json:"refId"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// prometheus is the data source every panel and query uses: the one the
// datasource variable names.
var prometheus = &datasource{Type: "prometheus", UID: "${datasource}"}

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type panel struct {
	ID              int              `json:"id"`
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	Description     string           `json:"description,omitempty"`
	GridPos         gridPos          `json:"gridPos"`
	Collapsed       *bool            `json:"collapsed,omitempty"`
	Panels          []*panel         `json:"panels,omitempty"`
	Datasource      *datasource      `json:"datasource,omitempty"`
	Targets         []target         `json:"targets,omitempty"`
	FieldConfig     *fieldConfig     `json:"fieldConfig,omitempty"`
	Options         map[string]any   `json:"options,omitempty"`
	Transformations []transformation `json:"transformations,omitempty"`
}

type target struct {
	RefID        string      `json:"refId"`
	Datasource   *datasource `json:"datasource"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat,omitempty"`
	Format       string      `json:"format,omitempty"`
	Instant      bool        `json:"instant"`
	Range        bool        `json:"range"`
}

type fieldConfig struct {
	Defaults  fieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

type fieldDefaults struct {
	Unit       string         `json:"unit,omitempty"`
	Decimals   *int           `json:"decimals,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Thresholds *thresholds    `json:"thresholds,omitempty"`
	Mappings   []mapping      `json:"mappings"`
	Color      map[string]any `json:"color,omitempty"`
	Custom     map[string]any `json:"custom,omitempty"`
}

type thresholds struct {
	Mode  string `json:"mode"`
	Steps []step `json:"steps"`
}

// step is a threshold step; the first has no value (null: from minus infinity).
type step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

type mapping struct {
	Type    string                  `json:"type"`
	Options map[string]mappingValue `json:"options"`
}

type mappingValue struct {
	Text  string `json:"text"`
	Color string `json:"color"`
	Index int    `json:"index"`
}

type transformation struct {
	ID      string         `json:"id"`
	Options map[string]any `json:"options"`
}

// Helpers for the queries.

// scope is the selector of the namespace and deployment variables; every
// metric kao exports has both labels.
const scope = `namespace=~"$namespace", deployment=~"$deployment"`

// sel is a series selector of metric within the chosen namespaces and
// deployments, with more matchers when given.
func sel(metric string, matchers ...string) string {
	return metric + "{" + strings.Join(append([]string{scope}, matchers...), ", ") + "}"
}

func num(f float64) *float64 { return &f }

func intp(n int) *int { return &n }

func steps(base string, more ...any) *thresholds {
	t := &thresholds{Mode: "absolute", Steps: []step{{Color: base}}}
	for i := 0; i+1 < len(more); i += 2 {
		t.Steps = append(t.Steps, step{Color: more[i+1].(string), Value: num(more[i].(float64))})
	}
	return t
}

// boolMapping shows 0 and 1 as words in red and green.
func boolMapping(no, yes string) []mapping {
	return []mapping{{Type: "value", Options: map[string]mappingValue{
		"0": {Text: no, Color: "red", Index: 0},
		"1": {Text: yes, Color: "green", Index: 1},
	}}}
}

// Panels.

type query struct {
	expr, legend string
}

func q(expr, legend string) query { return query{expr: expr, legend: legend} }

func targets(instant bool, qs []query) []target {
	var out []target
	for i, x := range qs {
		t := target{RefID: string(rune('A' + i)), Datasource: prometheus, Expr: x.expr, LegendFormat: x.legend, Range: !instant, Instant: instant}
		if instant {
			t.Format = "table"
		}
		out = append(out, t)
	}
	return out
}

func timeseries(title, description, unit string, qs ...query) *panel {
	return &panel{
		Type: "timeseries", Title: title, Description: description, Datasource: prometheus,
		Targets: targets(false, qs),
		FieldConfig: &fieldConfig{Defaults: fieldDefaults{
			Unit: unit, Min: num(0), Mappings: []mapping{},
			Color:  map[string]any{"mode": "palette-classic"},
			Custom: map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false},
		}, Overrides: []any{}},
		Options: map[string]any{
			"legend":  map[string]any{"showLegend": true, "displayMode": "list", "placement": "bottom", "calcs": []string{}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		},
	}
}

func stat(title, description, unit string, th *thresholds, qs ...query) *panel {
	return &panel{
		Type: "stat", Title: title, Description: description, Datasource: prometheus,
		Targets: targets(false, qs),
		FieldConfig: &fieldConfig{Defaults: fieldDefaults{
			Unit: unit, Thresholds: th, Mappings: []mapping{}, Color: map[string]any{"mode": "thresholds"},
		}, Overrides: []any{}},
		Options: map[string]any{
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"colorMode":     "background", "graphMode": "area", "textMode": "auto",
			"justifyMode": "auto", "orientation": "auto",
		},
	}
}

// table is an instant table of one query per column: the rows are merged on
// their labels, Time is hidden and each query's value column gets the
// header given by columns (in query order).
func table(title, description string, columns []string, sortBy string, defaults fieldDefaults, qs ...query) *panel {
	rename := map[string]any{}
	if len(qs) == 1 {
		rename["Value"] = columns[0]
	} else {
		for i := range qs {
			rename["Value #"+string(rune('A'+i))] = columns[i]
		}
	}
	p := &panel{
		Type: "table", Title: title, Description: description, Datasource: prometheus,
		Targets: targets(true, qs),
		Options: map[string]any{"showHeader": true, "cellHeight": "sm", "footer": map[string]any{"show": false}},
		Transformations: []transformation{
			{ID: "merge", Options: map[string]any{}},
			{ID: "organize", Options: map[string]any{"excludeByName": map[string]any{"Time": true}, "renameByName": rename}},
		},
	}
	if sortBy != "" {
		p.Options["sortBy"] = []map[string]any{{"displayName": sortBy, "desc": false}}
	}
	if defaults.Mappings == nil {
		defaults.Mappings = []mapping{}
	}
	defaults.Custom = map[string]any{"align": "auto", "cellOptions": map[string]any{"type": "color-text"}}
	p.FieldConfig = &fieldConfig{Defaults: defaults, Overrides: []any{}}
	return p
}

// Layout: 24 columns; panels flow left to right and wrap; each row starts
// on a line of its own.

type layout struct {
	panels []*panel
	id     int
	x, y   int
	height int // of the current line
}

func (l *layout) row(title string) {
	l.newline()
	l.id++
	collapsed := false
	l.panels = append(l.panels, &panel{ID: l.id, Type: "row", Title: title, Collapsed: &collapsed, Panels: []*panel{}, GridPos: gridPos{H: 1, W: 24, X: 0, Y: l.y}})
	l.y++
}

func (l *layout) newline() {
	l.y += l.height
	l.x, l.height = 0, 0
}

func (l *layout) add(w, h int, p *panel) {
	if l.x+w > 24 {
		l.newline()
	}
	l.id++
	p.ID = l.id
	p.GridPos = gridPos{H: h, W: w, X: l.x, Y: l.y}
	l.x += w
	l.height = max(l.height, h)
	l.panels = append(l.panels, p)
}

func build() *dashboard {
	var l layout
	ready := boolMapping("Not ready", "Ready")
	byCP := "{{namespace}}/{{deployment}}"

	l.row("Control planes")
	l.add(4, 8, stat("Control planes", "KarmadaDeployments kao reports on.", "none", steps("blue"),
		q(`count(max by (namespace, deployment) (`+sel("kao_deployment_info")+`))`, "")))
	l.add(4, 8, stat("Not Ready", "Control planes whose Ready condition is not True.", "none", steps("green", 1.0, "red"),
		q(`count(max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="Ready"`, `status="True"`)+`) == 0) or vector(0)`, "")))
	l.add(16, 8, table("Conditions", "1 where the condition is True. Ready: the control plane and etcd pass their probes, "+
		"the last run succeeded and every member is Ready; the others say which part is not.",
		[]string{"Ready", "Control plane", "etcd", "Members", "Certificates", "Last run"}, "Ready",
		fieldDefaults{Mappings: boolMapping("no", "yes")},
		q(`max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="Ready"`, `status="True"`)+`)`, ""),
		q(`max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="ControlPlaneReady"`, `status="True"`)+`)`, ""),
		q(`max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="EtcdHealthy"`, `status="True"`)+`)`, ""),
		q(`max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="MembersReady"`, `status="True"`)+`)`, ""),
		q(`max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="CertificatesValid"`, `status="True"`)+`)`, ""),
		q(`max by (namespace, deployment) (`+sel("kao_deployment_condition", `condition="PlaybookSucceeded"`, `status="True"`)+`)`, "")))
	l.add(8, 8, table("Components", "Each control-plane component: Ready when every instance passes its health check.",
		[]string{"Ready"}, "Ready", fieldDefaults{Mappings: ready},
		q(`max by (namespace, deployment, component) (`+sel("kao_component_ready")+`)`, "")))
	l.add(8, 8, table("Component versions", "The version each component runs and, while it differs, the version the spec asks for.",
		[]string{"Info"}, "", fieldDefaults{},
		q(`max by (namespace, deployment, component, version, target_version) (`+sel("kao_component_info")+`)`, "")))
	l.add(8, 8, table("Control plane versions", "Each control plane's mode and the Karmada version it last reached.",
		[]string{"Info"}, "", fieldDefaults{},
		q(`max by (namespace, deployment, mode, version) (`+sel("kao_deployment_info")+`)`, "")))

	l.row("Runs")
	l.add(8, 8, timeseries("Runs by result", "Playbook runs started, and finished by result, per hour.", "none",
		q(`sum(rate(`+sel("kao_runs_started_total")+`[$__rate_interval])) * 3600`, "started"),
		q(`sum by (result) (rate(`+sel("kao_runs_finished_total")+`[$__rate_interval])) * 3600`, "{{result}}")))
	l.add(8, 8, timeseries("Run duration", "p50 and p95 of the runs that finished in the last day, by playbook.", "s",
		q(`histogram_quantile(0.5, sum by (le, playbook) (rate(`+sel("kao_run_duration_seconds_bucket")+`[1d])))`, "p50 {{playbook}}"),
		q(`histogram_quantile(0.95, sum by (le, playbook) (rate(`+sel("kao_run_duration_seconds_bucket")+`[1d])))`, "p95 {{playbook}}")))
	l.add(8, 8, timeseries("Failed tasks by role", "Tasks that failed or found their host unreachable in the last hour, by role.", "none",
		q(`sum by (role) (increase(`+sel("kao_run_failed_tasks_total")+`[1h]))`, "{{role}}")))
	consecutive := timeseries("Consecutive failures", "Failed runs in a row of the current generation; KaoRunFailingRepeatedly fires at 3.", "none",
		q(`max by (namespace, deployment) (`+sel("kao_deployment_consecutive_failures")+`)`, byCP))
	consecutive.FieldConfig.Defaults.Thresholds = steps("green", 3.0, "red")
	consecutive.FieldConfig.Defaults.Custom["thresholdsStyle"] = map[string]any{"mode": "line"}
	l.add(6, 8, consecutive)
	l.add(6, 8, table("Next retry", "When kao runs again after a failed run.",
		[]string{"In"}, "In", fieldDefaults{Unit: "s"},
		q(`max by (namespace, deployment) (`+sel("kao_deployment_next_retry_timestamp_seconds")+`) - time()`, "")))
	l.add(6, 8, timeseries("Time since the last successful run", "", "s",
		q(`time() - max by (namespace, deployment) (`+sel("kao_deployment_last_success_timestamp_seconds")+`)`, byCP)))
	l.add(6, 8, timeseries("Runs in progress and retries", "Runs in progress, and retries scheduled in the last hour.", "none",
		q(`max by (namespace, deployment, playbook) (`+sel("kao_deployment_run_in_progress")+`)`, "running "+byCP+" {{playbook}}"),
		q(`sum by (namespace, deployment) (increase(`+sel("kao_run_retries_total")+`[1h]))`, "retries "+byCP)))

	l.row("etcd")
	l.add(6, 8, timeseries("Healthy members", "Voting etcd members that answer a health check, the voting members "+
		"(quorum is a majority of them), and every member probed, learners included.", "none",
		q(`max by (namespace, deployment) (`+sel("kao_etcd_members_healthy")+`)`, "healthy "+byCP),
		q(`max by (namespace, deployment) (`+sel("kao_etcd_voting_members")+`)`, "voting "+byCP),
		q(`max by (namespace, deployment) (`+sel("kao_etcd_members")+`)`, "members "+byCP)))
	leader := timeseries("Leader", "1 while the etcd cluster reports a leader.", "none",
		q(`max by (namespace, deployment) (`+sel("kao_etcd_leader_present")+`)`, byCP))
	leader.FieldConfig.Defaults.Mappings = boolMapping("no leader", "leader")
	leader.FieldConfig.Defaults.Custom["drawStyle"] = "bars"
	l.add(6, 8, leader)
	l.add(6, 8, timeseries("DB size", "Size of each member's database file.", "bytes",
		q(`max by (namespace, deployment, member) (`+sel("kao_etcd_db_size_bytes")+`)`, byCP+" {{member}}")))
	l.add(6, 8, table("etcd members", "Each member: healthy when it answered a health check.",
		[]string{"Healthy"}, "Healthy", fieldDefaults{Mappings: boolMapping("Unhealthy", "Healthy")},
		q(`max by (namespace, deployment, member) (`+sel("kao_etcd_member_healthy")+`)`, "")))

	l.row("Certificates")
	days := fieldDefaults{Unit: "d", Decimals: intp(0), Thresholds: steps("red", 7.0, "orange", 30.0, "green")}
	days.Color = map[string]any{"mode": "thresholds"}
	l.add(12, 10, table("Days to expiry", "Certificates kao issued, the soonest to expire first. kao renews a leaf "+
		"certificate spec.certificates.renewBefore (30 days by default) ahead.",
		[]string{"Days left"}, "Days left", days,
		q(`(max by (namespace, deployment, certificate) (`+sel("kao_certificate_expiration_timestamp_seconds")+`) - time()) / 86400`, "")))
	l.add(6, 10, table("Pull members' agent certificates", "Days until the karmada-agent certificate of each Pull member expires.",
		[]string{"Days left"}, "Days left", days,
		q(`(max by (namespace, deployment, member) (`+sel("kao_member_agent_certificate_expiration_timestamp_seconds")+`) - time()) / 86400`, "")))
	l.add(6, 10, table("Next renewal", "Days until kao renews certificates next.",
		[]string{"Days"}, "Days", fieldDefaults{Unit: "d", Decimals: intp(1)},
		q(`(max by (namespace, deployment) (`+sel("kao_certificate_next_renewal_timestamp_seconds")+`) - time()) / 86400`, "")))

	l.row("Members")
	l.add(12, 8, timeseries("Members", "Member clusters in spec.members, joined to Karmada, and Ready.", "none",
		q(`sum(max by (namespace, deployment) (`+sel("kao_members")+`))`, "in spec"),
		q(`sum(max by (namespace, deployment) (`+sel("kao_members_joined")+`))`, "joined"),
		q(`sum(max by (namespace, deployment) (`+sel("kao_members_ready")+`))`, "ready")))
	l.add(12, 8, table("Member clusters", "Each member cluster, Ready or not, by sync mode.",
		[]string{"Ready"}, "Ready", fieldDefaults{Mappings: ready},
		q(`max by (namespace, deployment, member, sync_mode) (`+sel("kao_member_ready")+`)`, "")))

	l.row("Backups")
	l.add(8, 8, timeseries("Time since the last successful snapshot", "Per EtcdBackup; KaoEtcdBackupStale fires past twice its schedule.", "s",
		q(`time() - max by (namespace, deployment, backup) (`+sel("kao_etcdbackup_last_success_timestamp_seconds")+`)`, "{{namespace}}/{{backup}}")))
	l.add(8, 8, timeseries("Last snapshot size", "", "bytes",
		q(`max by (namespace, deployment, backup) (`+sel("kao_etcdbackup_last_size_bytes")+`)`, "{{namespace}}/{{backup}}")))
	l.add(8, 8, timeseries("Snapshots retained", "Snapshots kept by retention.", "none",
		q(`max by (namespace, deployment, backup) (`+sel("kao_etcdbackup_snapshots_retained")+`)`, "{{namespace}}/{{backup}}")))
	l.add(8, 8, timeseries("Snapshot attempts by result", "Snapshots attempted in the last hour, by result; pruned ones apart.", "none",
		q(`sum by (namespace, backup, result) (increase(`+sel("kao_etcdbackup_snapshots_total")+`[1h]))`, "{{namespace}}/{{backup}} {{result}}"),
		q(`sum by (namespace, backup) (increase(`+sel("kao_etcdbackup_snapshots_pruned_total")+`[1h]))`, "{{namespace}}/{{backup}} pruned")))
	l.add(8, 8, timeseries("Snapshot duration", "p95 of the time to take, verify and store a successful snapshot, over the last day.", "s",
		q(`histogram_quantile(0.95, sum by (le, namespace, backup) (rate(`+sel("kao_etcdbackup_duration_seconds_bucket")+`[1d])))`, "{{namespace}}/{{backup}}")))

	l.row("Restores")
	l.add(12, 8, table("Restores", "Each EtcdRestore and the phase it is in.",
		[]string{"Info"}, "", fieldDefaults{},
		q(`max by (namespace, deployment, restore, phase) (`+sel("kao_etcdrestore_phase")+`)`, "")))
	l.add(12, 8, timeseries("Restores finished by result", "Restores that ended in the last day, by result.", "none",
		q(`sum by (namespace, deployment, result) (increase(`+sel("kao_etcdrestore_finished_total")+`[1d]))`, byCP+" {{result}}")))

	namespaces := `label_values(kao_deployment_info, namespace)`
	deployments := `label_values(kao_deployment_info{namespace=~"$namespace"}, deployment)`
	return &dashboard{
		UID:           "kao",
		Title:         "kao: Karmada control planes",
		Description:   "Control planes, runs, etcd, certificates, members, backups and restores of kao, the Karmada Ansible Operator.",
		Tags:          []string{"kao", "karmada"},
		Editable:      true,
		GraphTooltip:  1,
		Refresh:       "1m",
		SchemaVersion: 39,
		Version:       1,
		Time:          timeRange{From: "now-24h", To: "now"},
		Annotations:   annotations{List: []any{}},
		Templating: templating{List: []variable{
			{Type: "datasource", Name: "datasource", Label: "Data source", Query: "prometheus", Refresh: 1, Options: []struct{}{}},
			{Type: "query", Name: "namespace", Label: "Namespace", Datasource: prometheus, Definition: namespaces,
				Query:   variableQuery{Query: namespaces, RefID: "PrometheusVariableQueryEditor-VariableQuery"},
				Refresh: 2, Sort: 1, Multi: true, IncludeAll: true, AllValue: ".*", Options: []struct{}{}},
			{Type: "query", Name: "deployment", Label: "Deployment", Datasource: prometheus, Definition: deployments,
				Query:   variableQuery{Query: deployments, RefID: "PrometheusVariableQueryEditor-VariableQuery"},
				Refresh: 2, Sort: 1, Multi: true, IncludeAll: true, AllValue: ".*", Options: []struct{}{}},
		}},
		Panels: l.panels,
	}
}

func main() {
	out := flag.String("o", "", "file to write (standard output when empty)")
	flag.Parse()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(build()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *out == "" {
		_, _ = os.Stdout.Write(buf.Bytes())
		return
	}
	// Written beside the target and renamed: a failed run leaves the old file.
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".dashboard-*")
	if err == nil {
		_, err = tmp.Write(buf.Bytes())
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644) //nolint:gosec // G302: a file of the repository, read by everyone like its neighbours
		}
		if err == nil {
			err = os.Rename(tmp.Name(), *out)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
