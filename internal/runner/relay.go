package runner

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// A run can take place away from the process that records it: in a Job's
// pod, ansible-playbook runs under Run with Spec.Relay set, and the operator
// reads what Run relays (the pod's log) with Follow. The relayed stream is
// one JSON object per line:
//
//   - a start record with the estimated number of task results;
//   - every event of the ansible.posix.jsonl stream, reduced to the fields
//     kao reads, with a failed result's message already worked out and
//     redacted, so no other part of a task's result (which may hold what a
//     role forgot to mark no_log) reaches the pod's log;
//   - ansible-playbook's stderr and stray stdout lines, redacted;
//   - an end record with the outcome, its message and the exit code.
const (
	relayStart  = "kao_start"
	relayStderr = "kao_stderr"
	relayOutput = "kao_output"
	relayEnd    = "kao_end"
)

// relayRecord is one of the relay's own records.
type relayRecord struct {
	Event    string  `json:"_event"`
	Total    int     `json:"total,omitempty"`
	Line     string  `json:"line,omitempty"`
	Outcome  Outcome `json:"outcome,omitempty"`
	Message  string  `json:"message,omitempty"`
	ExitCode int     `json:"exit_code,omitempty"`
}

// relayedResult is what a host result becomes in the relayed stream.
type relayedResult struct {
	Changed bool   `json:"changed,omitempty"`
	Msg     string `json:"msg,omitempty"`
	// Changes are what a changed result changed, redacted.
	Changes []changeDetail `json:"kao_changes,omitempty"`
}

// relay writes the relayed stream. A nil relay writes nothing.
type relay struct {
	mu     sync.Mutex
	w      io.Writer
	redact *Redactor
}

func newRelay(w io.Writer, redact *Redactor) *relay {
	if w == nil {
		return nil
	}
	return &relay{w: w, redact: redact}
}

func (r *relay) write(v any) {
	if r == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(append(b, '\n'))
}

func (r *relay) record(rec relayRecord) { r.write(rec) }

// event relays one jsonl event with its host results reduced.
func (r *relay) event(ev *jsonlEvent) {
	if r == nil {
		return
	}
	out := *ev
	if len(ev.Hosts) > 0 {
		out.Hosts = make(map[string]json.RawMessage, len(ev.Hosts))
		for host, raw := range ev.Hosts {
			res := hostResult{}
			_ = json.Unmarshal(raw, &res)
			reduced := relayedResult{Changed: res.Changed}
			if ev.Event == eventFailed || ev.Event == eventUnreachable {
				reduced.Msg = r.redact.Redact(failureMessage(&res))
			}
			if ev.Event == eventOK && res.Changed {
				reduced.Changes = changesOf(raw, r.redact)
			}
			out.Hosts[host], _ = json.Marshal(reduced)
		}
	}
	r.write(out)
}

// Follow reads the relayed stream of a run that takes place elsewhere and
// returns its result as Run would have: progress through spec.OnProgress,
// the rendered log in spec.Dir's ansible.log (started afresh, so a stream
// read again from its start is not counted twice) and its tail, the hosts'
// stats and failures, and the outcome the run itself decided. ended is false
// when the stream stopped before the run's end record (the pod was killed,
// or the stream broke); the result then says the run ended without a result,
// and the caller knows better why. Only spec's ID, Dir, Playbook, Redact and
// OnProgress are used.
func Follow(spec Spec, start time.Time, stream io.Reader) (res *Result, ended bool, err error) {
	if !safePath.MatchString(spec.Dir) {
		return nil, false, fmt.Errorf("run directory %q must be an absolute path of letters, digits, '-', '_', '.' and '/'", spec.Dir)
	}
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("creating run directory: %w", err)
	}
	for _, f := range spec.Files {
		if err := writePrivate(filepath.Join(spec.Dir, filepath.Clean(f.Path)), f.Data); err != nil {
			return nil, false, err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(spec.Dir, "ansible.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("creating run log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	redact := NewRedactor(append(spec.Redact, spec.SSHPrivateKey)...)
	log := newLogBuffer(logFile, logTailBytes)
	track := newTracker(0, redact, log, spec.OnProgress)
	stderr := &stderrSink{redact: redact, log: log}

	var end *relayRecord
	lines := bufio.NewReader(stream)
	for end == nil {
		line, readErr := lines.ReadBytes('\n')
		if len(line) > 0 {
			end = followLine(line, track, stderr, log)
		}
		if readErr != nil {
			if !errors.Is(readErr, io.EOF) {
				log.Line(time.Now(), "note", "", "", "the run's stream broke: "+redact.Clean(readErr.Error(), 300))
			}
			break
		}
	}

	res = &Result{ID: spec.ID, Playbook: filepath.Base(spec.Playbook), StartTime: start, EndTime: time.Now(), ExitCode: -1}
	o := track.snapshot()
	res.Progress = o.progress
	res.Hosts = o.stats
	res.CustomStats = o.custom
	res.FailedTasks = realFailures(o.failed, o.stats)
	res.Changes, res.ChangesDropped = o.changes, o.dropped
	if end == nil {
		res.Outcome = Failed
		res.Message = "the run ended without a result"
		if e := stderr.firstError(); e != "" {
			res.Message += ": " + e
		}
	} else {
		res.Outcome, res.ExitCode = end.Outcome, end.ExitCode
		res.Message = redact.Clean(end.Message, 1000)
		if res.Outcome == Succeeded {
			res.Progress.TasksTotal = res.Progress.TasksDone
		}
		log.Line(res.EndTime, "end", "", "", fmt.Sprintf("%s (exit code %d) %s", res.Outcome, res.ExitCode, res.Message))
	}
	res.Log = log.Tail()
	return res, end != nil, nil
}

// followLine hands one relayed line to the part of the run that reads it,
// and returns the end record when the line is one.
func followLine(line []byte, track *tracker, stderr *stderrSink, log *logBuffer) *relayRecord {
	rec := relayRecord{}
	if json.Unmarshal(line, &rec) != nil {
		track.handleLine(line)
		return nil
	}
	switch rec.Event {
	case relayStart:
		track.mu.Lock()
		track.progress.TasksTotal = rec.Total
		track.mu.Unlock()
		log.Line(time.Now(), "start", "", "", fmt.Sprintf("about %d task results", rec.Total))
	case relayStderr:
		_, _ = stderr.Write([]byte(rec.Line))
	case relayOutput:
		track.handleLine([]byte(rec.Line))
	case relayEnd:
		return &rec
	default:
		track.handleLine(line)
	}
	return nil
}
