package runner

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Event names written by the ansible.posix.jsonl stdout callback (kao_jsonl
// writes its stream).
const (
	eventPlayStart        = "v2_playbook_on_play_start"
	eventTaskStart        = "v2_playbook_on_task_start"
	eventHandlerTaskStart = "v2_playbook_on_handler_task_start"
	eventRunnerStart      = "v2_runner_on_start"
	eventOK               = "v2_runner_on_ok"
	eventFailed           = "v2_runner_on_failed"
	eventSkipped          = "v2_runner_on_skipped"
	eventUnreachable      = "v2_runner_on_unreachable"
	eventStats            = "v2_playbook_on_stats"
)

// plugins/callback/kao_jsonl.py is the run's stdout callback: the
// ansible.posix.jsonl event stream the tracker reads, with the host a
// delegated result (or loop item) was delegated to (Change.Host).
const (
	eventsPlugin   = "kao_jsonl.py"
	eventsCallback = "kao_jsonl"
)

//go:embed plugins/callback/kao_jsonl.py
var eventsSource []byte

// jsonlEvent is one line of the ansible.posix.jsonl callback. Host results
// stay raw: only the fields kao reads are decoded, and nothing else of a
// result (which may hold secrets a role forgot to mark no_log) is kept.
type jsonlEvent struct {
	Event     string                     `json:"_event"`
	Timestamp string                     `json:"_timestamp"`
	Play      *jsonlName                 `json:"play"`
	Task      *jsonlName                 `json:"task"`
	Hosts     map[string]json.RawMessage `json:"hosts"`
	Stats     map[string]HostStats       `json:"stats"`
	// CustomStats are what the playbook's set_stats tasks reported per host
	// (the stats event carries them; show_custom_stats is on).
	CustomStats map[string]json.RawMessage `json:"custom_stats"`
}

type jsonlName struct {
	Name string `json:"name"`
	// Path is the file and line a task comes from.
	Path string `json:"path"`
}

// hostResult holds the fields of a task result that explain a failure.
type hostResult struct {
	Msg          json.RawMessage `json:"msg"`
	Stderr       string          `json:"stderr"`
	ModuleStderr string          `json:"module_stderr"`
	RC           *int            `json:"rc"`
	Changed      bool            `json:"changed"`
	NoLog        bool            `json:"_ansible_no_log"`
	Results      []hostResult    `json:"results"`
	Failed       bool            `json:"failed"`
}

// HostStats are Ansible's final counts for one host.
type HostStats struct {
	OK          int `json:"ok"`
	Changed     int `json:"changed"`
	Failures    int `json:"failures"`
	Unreachable int `json:"unreachable"`
	Skipped     int `json:"skipped"`
	Rescued     int `json:"rescued"`
	Ignored     int `json:"ignored"`
}

// FailedTask is one task that failed, or found its host unreachable.
type FailedTask struct {
	Host string
	Task string
	// Play is the play the task ran in.
	Play string
	// Role is the role the task belongs to; empty for a play's own task.
	Role        string
	Unreachable bool
	Message     string
}

// Progress is how far a run has come.
type Progress struct {
	Play       string
	Task       string
	Host       string
	TasksDone  int
	TasksTotal int
}

// Percent is TasksDone out of TasksTotal, held at 99 until the run ends: the
// total is an estimate made before the run (dynamic includes, handlers and
// failed hosts move the real count).
func (p Progress) Percent() int {
	if p.TasksTotal <= 0 {
		return 0
	}
	pct := p.TasksDone * 100 / p.TasksTotal
	if pct > 99 {
		pct = 99
	}
	return pct
}

// tracker consumes the event stream of one run: it counts results, remembers
// failures and the final stats, renders the human log, and reports progress.
type tracker struct {
	mu       sync.Mutex
	progress Progress
	stats    map[string]HostStats
	custom   map[string]json.RawMessage
	failed   []FailedTask
	sawStats bool
	raw      []string // non-JSON lines on stdout, such as go-ansible's own notes
	// changes are the changed results, at most maxChanges; dropped counts the rest.
	changes []Change
	dropped int

	redact   *Redactor
	log      *logBuffer
	onChange func(Progress)
	// relay passes the stream on when the run is followed from elsewhere.
	relay *relay
}

func newTracker(total int, redact *Redactor, log *logBuffer, onChange func(Progress)) *tracker {
	return &tracker{progress: Progress{TasksTotal: total}, redact: redact, log: log, onChange: onChange}
}

// Write implements io.Writer. go-ansible's default result printer calls it
// once per stdout line, with no limit on the line's length.
func (t *tracker) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		t.handleLine(line)
	}
	return len(p), nil
}

func (t *tracker) handleLine(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	ev := jsonlEvent{}
	if line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Event == "" {
		text := t.redact.Clean(string(line), 300)
		t.mu.Lock()
		if len(t.raw) < 20 {
			t.raw = append(t.raw, text)
		}
		t.mu.Unlock()
		t.log.Line(time.Now(), "output", "", "", text)
		t.relay.record(relayRecord{Event: relayOutput, Line: text})
		return
	}
	t.relay.event(&ev)
	t.handleEvent(&ev)
}

func (t *tracker) handleEvent(ev *jsonlEvent) {
	ts := parseTimestamp(ev.Timestamp)
	t.mu.Lock()
	var notify *Progress
	switch ev.Event {
	case eventPlayStart:
		if ev.Play != nil {
			t.progress.Play = ev.Play.Name
			t.log.Line(ts, "play", "", ev.Play.Name, "")
		}
	case eventTaskStart, eventHandlerTaskStart, eventRunnerStart:
		if ev.Task != nil {
			t.progress.Task = ev.Task.Name
		}
	case eventOK, eventFailed, eventSkipped, eventUnreachable:
		task, role := "", ""
		if ev.Task != nil {
			task, role = ev.Task.Name, roleOf(ev.Task.Path)
			t.progress.Task = task
		}
		for _, host := range sortedKeys(ev.Hosts) {
			t.progress.TasksDone++
			t.progress.Host = host
			t.recordResult(ts, ev.Event, host, task, role, ev.Hosts[host])
		}
		p := t.progress
		notify = &p
	case eventStats:
		t.stats = ev.Stats
		t.custom = ev.CustomStats
		t.sawStats = true
	}
	t.mu.Unlock()
	if notify != nil && t.onChange != nil {
		t.onChange(*notify)
	}
}

// recordResult logs one host result and remembers failures. Called with mu held.
func (t *tracker) recordResult(ts time.Time, event, host, task, role string, raw json.RawMessage) {
	res := hostResult{}
	_ = json.Unmarshal(raw, &res)
	switch event {
	case eventOK:
		status := "ok"
		if res.Changed {
			status = "changed"
			for _, d := range changesOf(raw, t.redact) {
				if len(t.changes) >= maxChanges {
					t.dropped++
					continue
				}
				changed := host
				if d.Host != "" {
					changed = d.Host
				}
				t.changes = append(t.changes, Change{Host: changed, Task: t.redact.Clean(task, 256), Role: role,
					Action: d.Action, Item: d.Item, Diff: d.Diff, Hidden: d.Hidden, State: d.State})
			}
		}
		t.log.Line(ts, status, host, task, "")
	case eventSkipped:
		t.log.Line(ts, "skipped", host, task, "")
	case eventFailed, eventUnreachable:
		unreachable := event == eventUnreachable
		text := failureMessage(&res)
		if unreachable {
			text = explainUnreachable(text)
		}
		msg := t.redact.Clean(text, maxMessage)
		status := "failed"
		if unreachable {
			status = "unreachable"
		}
		t.log.Line(ts, status, host, task, msg)
		t.failed = append(t.failed, FailedTask{Host: host, Task: t.redact.Clean(task, 256), Play: t.redact.Clean(t.progress.Play, 256),
			Role: role, Unreachable: unreachable, Message: msg})
	}
}

// maxMessage bounds a failure message kept for status.
const maxMessage = 400

// failureMessage explains a failed result in one line: the module's msg, the
// failed loop item's msg, stderr, or the return code.
func failureMessage(res *hostResult) string {
	if res.NoLog {
		return "the output was hidden because the task has no_log set"
	}
	msg := rawString(res.Msg)
	if strings.Contains(msg, "One or more items failed") || msg == "" {
		for i := range res.Results {
			if res.Results[i].Failed {
				if inner := failureMessage(&res.Results[i]); inner != "" {
					return inner
				}
			}
		}
	}
	parts := []string{}
	if msg != "" && msg != "non-zero return code" {
		parts = append(parts, msg)
	}
	if res.RC != nil && *res.RC != 0 {
		parts = append(parts, fmt.Sprintf("rc=%d", *res.RC))
	}
	for _, s := range []string{res.Stderr, res.ModuleStderr} {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, lastLines(s, 3))
			break
		}
	}
	return strings.Join(parts, ": ")
}

// explainUnreachable turns SSH's connection failures, which arrive wrapped in
// banners and advice, into the one sentence a user acts on.
func explainUnreachable(msg string) string {
	switch {
	case strings.Contains(msg, "REMOTE HOST IDENTIFICATION HAS CHANGED"):
		return "Host key verification failed: the host's SSH key differs from the one pinned in known_hosts; " +
			"kao never accepts a changed key (update the known_hosts Secret if the host was reinstalled)"
	case strings.Contains(msg, "Host key verification failed"):
		return "Host key verification failed: the host is not in the pinned known_hosts, or its key differs"
	case strings.Contains(msg, "Permission denied"):
		return "SSH authentication failed: the host refused the private key (Permission denied)"
	}
	for _, line := range strings.Split(msg, "\n") {
		if i := strings.Index(line, "ssh: connect to host"); i >= 0 {
			return strings.TrimSpace(line[i:])
		}
	}
	return msg
}

// rawString renders a JSON value as text: strings unquoted, anything else compact.
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	s := ""
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func parseTimestamp(s string) time.Time {
	if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return ts
	}
	return time.Now().UTC()
}

// outcome is what the tracker saw, read once the run has ended.
type outcome struct {
	progress Progress
	stats    map[string]HostStats
	custom   map[string]json.RawMessage
	failed   []FailedTask
	sawStats bool
	raw      []string
	changes  []Change
	dropped  int
}

func (t *tracker) snapshot() outcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	return outcome{progress: t.progress, stats: t.stats, custom: t.custom, failed: append([]FailedTask(nil), t.failed...), sawStats: t.sawStats, raw: t.raw,
		changes: append([]Change(nil), t.changes...), dropped: t.dropped}
}

// realFailures keeps the failures the final stats confirm. The jsonl callback
// reports failures that ignore_errors or a rescue block handled exactly like
// real ones; the stats count only the real ones, which are a host's last.
func realFailures(failed []FailedTask, stats map[string]HostStats) []FailedTask {
	if stats == nil {
		return failed
	}
	keep := map[string]int{}
	for host, s := range stats {
		keep[host] = s.Failures + s.Unreachable
	}
	out := []FailedTask{}
	for i := len(failed) - 1; i >= 0; i-- {
		f := failed[i]
		if keep[f.Host] > 0 {
			keep[f.Host]--
			out = append(out, f)
		}
	}
	// Back to the order they happened in.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// roleOf names the role a task belongs to from the file it comes from
// (path is "file:line"): the directory that holds the role's tasks/
// directory, for kao's roles and for user roles alike; "" for a play's own
// task. Only the path counts: it is made of kao's and the roles' directory
// names, while a task's name may carry any text.
func roleOf(path string) string {
	parts := strings.Split(path, "/")
	for i := len(parts) - 2; i >= 1; i-- {
		if parts[i] == "tasks" && parts[i-1] != "" {
			return parts[i-1]
		}
	}
	return ""
}
