// Package runner runs ansible-playbook for kao: one private run directory per
// run, extra vars and secrets in 0600 files (never on the command line), an
// ansible.cfg with host key checking on, the ansible.posix.jsonl event stream
// (through kao_jsonl, which adds the host a delegated result ran on)
// read line by line into live progress and per-host results, and the whole
// process group killed on cancel or timeout.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/apenella/go-ansible/v2/pkg/execute"
	"github.com/apenella/go-ansible/v2/pkg/playbook"

	"github.com/kao-io/kao/internal/etcdsnapshot"
)

// Outcome is how a run ended.
type Outcome string

const (
	// Succeeded means every host finished without failed or unreachable tasks.
	Succeeded Outcome = "Succeeded"
	// Failed means a task failed, a host was unreachable, the run timed out or ansible-playbook could not run.
	Failed Outcome = "Failed"
	// Cancelled means the caller cancelled the run.
	Cancelled Outcome = "Cancelled"
	// Detached means the run goes on elsewhere (a Job) after the operator
	// stopped following it; the next operator process follows it again.
	Detached Outcome = "Detached"
)

// ErrStopping is the cause of a run's cancellation when the operator stops
// rather than the run's object asking: an in-process run ends with the
// process, a run elsewhere is left to finish.
var ErrStopping = errors.New("the operator is stopping")

// File is a file the run needs in its directory, such as a kubeconfig taken
// from a Secret. Secret files are written 0600 and removed when the run ends.
type File struct {
	// Path is relative to the run directory's secrets/ directory.
	Path string
	// Data is the content.
	Data []byte
}

// Spec describes one run.
type Spec struct {
	// ID identifies the run in status, logs and its directory name.
	ID string
	// Dir is the run directory. Run creates it with mode 0700; it must not exist.
	Dir string
	// Playbook is the entry playbook's path.
	Playbook string
	// Inventory is the inventory in the YAML inventory layout, as JSON.
	Inventory []byte
	// Groups maps every inventory group, "all" included, to its hosts; it sizes
	// the forks and the progress estimate.
	Groups map[string][]string
	// ExtraVars are written to a 0600 JSON file passed with --extra-vars=@file.
	ExtraVars map[string]any
	// SSHPrivateKey is the key Ansible connects with; nil for local runs.
	SSHPrivateKey []byte
	// KnownHosts pins the hosts' keys. Host key checking is always on.
	KnownHosts []byte
	// SSHConnectTimeout bounds each SSH connection attempt; 10s when zero.
	SSHConnectTimeout time.Duration
	// Secrets are extra secret files, written under the run's secrets/ directory.
	Secrets []File
	// Files are files the run needs that are not secret, such as a generated
	// playbook and the roles it runs: written under the run directory (Path
	// relative to it, outside secrets/ and kao's own files) and kept with the
	// run's log. Playbook may name one of them.
	Files []File
	// RolesPath lists directories holding roles.
	RolesPath []string
	// FactCacheDir keeps gathered facts between runs of one deployment.
	FactCacheDir string
	// MaxForks caps Ansible's parallelism; forks are sized to the hosts, at most this.
	MaxForks int
	// Timeout bounds the whole run; none when zero.
	Timeout time.Duration
	// Redact lists secret values to scrub from everything kept or shown.
	Redact [][]byte
	// OnProgress is called after every task result. It must not block long.
	OnProgress func(Progress)
	// AnsiblePlaybook is the ansible-playbook binary; found in PATH when empty.
	AnsiblePlaybook string
	// Relay, when set, receives the run's relayed stream (see Follow): what
	// a process elsewhere needs to record the run, redacted.
	Relay io.Writer
	// Owner is the object the run is for. The in-process runner does not
	// use it; an executor that runs playbooks elsewhere labels its work with it.
	Owner Owner
	// Meta is non-secret data the caller wants back when it finds the run
	// again from another process (an executor that runs playbooks elsewhere
	// keeps it with the run).
	Meta map[string]string
	// Attach asks an executor that runs playbooks elsewhere to follow the
	// run with this ID that an earlier process started, and never to start
	// one. The in-process runner refuses it.
	Attach bool
	// Fetch, when set, is a file the run copies from a host over SSH before
	// ansible-playbook starts; the extra var it names gets the copy's path.
	Fetch *Fetch
	// Check runs the playbook in check mode (--check): modules that support
	// it report what they would change and change nothing.
	Check bool
	// Diff asks modules for the differences they make or would make
	// (--diff), which Result.Changes carries.
	Diff bool
	// Tags, when set, runs only the plays and tasks with one of these tags
	// (--tags), and those tagged always.
	Tags []string
}

// Owner names the Kubernetes object a run is for.
type Owner struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        string
}

// Result is the outcome of a run.
type Result struct {
	ID       string
	Playbook string
	Outcome  Outcome
	// Message explains in one line why the run did not succeed.
	Message   string
	ExitCode  int
	StartTime time.Time
	EndTime   time.Time
	// Hosts are the per-host counts from Ansible's final stats.
	Hosts map[string]HostStats
	// FailedTasks are the failures the final stats confirm, in order.
	FailedTasks []FailedTask
	// CustomStats are the per-host data the playbook reported with set_stats
	// (per_host), as JSON objects by host. Roles report facts kao keeps in
	// status this way, such as the versions a host runs; they must never
	// report secrets.
	CustomStats map[string]json.RawMessage
	// Changes are the results that changed something (in check mode: would
	// change), in order, at most maxChanges of them.
	Changes []Change
	// ChangesDropped counts the changed results beyond maxChanges.
	ChangesDropped int
	// Progress is the last progress seen.
	Progress Progress
	// Log is the tail of the rendered, redacted log.
	Log []byte
}

// SecretsDir is where a run's secret files live inside its directory; it is
// removed when the run ends.
const SecretsDir = "secrets"

// EndOfRunDirs are the directories of a run directory that go when the run
// ends: its secret files and its compiled templates. A run whose process
// died leaves them for the operator's sweep (internal/controller/pipeline).
var EndOfRunDirs = []string{SecretsDir, JinjaCacheDir}

// logTailBytes bounds the log tail kept in memory for the run's ConfigMap.
const logTailBytes = 2 << 20

// safePath matches the paths kao writes into ansible.cfg and SSH arguments.
var safePath = regexp.MustCompile(`^/[-_./a-zA-Z0-9]*$`)

// Run runs one playbook and returns its result. The error is non-nil only when
// the run could not be prepared; a playbook that fails is a Result with Outcome Failed.
func Run(ctx context.Context, spec Spec) (*Result, error) {
	if spec.Attach {
		return nil, fmt.Errorf("run %s: the in-process runner cannot follow a run started by another process", spec.ID)
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	if spec.Fetch != nil {
		spec.ExtraVars = withFetchVar(&spec)
	}
	dir, err := prepare(&spec)
	if err != nil {
		return nil, err
	}
	defer dir.cleanup()

	redact := NewRedactor(append(spec.Redact, spec.SSHPrivateKey, fetchKey(spec.Fetch))...)
	logFile, err := os.OpenFile(filepath.Join(spec.Dir, "ansible.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating run log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	log := newLogBuffer(logFile, logTailBytes)

	total, err := EstimateResults(spec.Playbook, spec.RolesPath, spec.Groups, spec.Tags)
	if err != nil {
		log.Line(time.Now(), "note", "", "", "progress has no total: "+redact.Clean(err.Error(), 300))
	}
	track := newTracker(total, redact, log, spec.OnProgress)
	stderr := &stderrSink{redact: redact, log: log}
	track.relay = newRelay(spec.Relay, redact)
	stderr.relay = track.relay
	track.relay.record(relayRecord{Event: relayStart, Total: total})

	runCtx := ctx
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	if spec.Fetch != nil {
		if err := fetch(runCtx, &spec); err != nil {
			res := &Result{ID: spec.ID, Playbook: filepath.Base(spec.Playbook), StartTime: start, EndTime: time.Now(), ExitCode: -1,
				Outcome: Failed, Message: redact.Clean(err.Error(), 500)}
			if ctx.Err() != nil {
				res.Outcome, res.Message = Cancelled, "cancelled while fetching "+spec.Fetch.Name
			}
			log.Line(res.EndTime, "end", "", "", fmt.Sprintf("%s before ansible-playbook started: %s", res.Outcome, res.Message))
			track.relay.record(relayRecord{Event: relayEnd, Outcome: res.Outcome, Message: res.Message, ExitCode: res.ExitCode})
			res.Log = log.Tail()
			return res, nil
		}
	}
	bin := spec.AnsiblePlaybook
	if bin == "" {
		bin = "ansible-playbook"
	}
	opts := &playbook.AnsiblePlaybookOptions{Inventory: dir.inventory, Check: spec.Check, Diff: spec.Diff, Tags: strings.Join(spec.Tags, ",")}
	if err := opts.AddExtraVarsFile(dir.extraVars); err != nil {
		return nil, fmt.Errorf("adding extra vars file: %w", err)
	}
	cmd := playbook.NewAnsiblePlaybookCmd(
		playbook.WithBinary(bin),
		playbook.WithPlaybooks(spec.Playbook),
		playbook.WithPlaybookOptions(opts),
	)
	groupExec := &groupExecutable{env: dir.env, dir: spec.Dir}
	exe := execute.NewDefaultExecute(
		execute.WithCmd(cmd),
		execute.WithExecutable(groupExec),
		execute.WithWrite(track),
		execute.WithWriteError(stderr),
	)
	exe.Quiet() // drops -v flags, which would corrupt the JSON stream

	log.Line(time.Now(), "start", "", "", fmt.Sprintf("run %s: %s, about %d task results", spec.ID, filepath.Base(spec.Playbook), total))
	// The error is not used for the outcome or shown anywhere: go-ansible
	// puts the whole command line into it. The exit code and the stats decide.
	_ = exe.Execute(runCtx)

	res := &Result{ID: spec.ID, Playbook: filepath.Base(spec.Playbook), StartTime: start, EndTime: time.Now(), ExitCode: -1}
	if c := groupExec.lastCmd(); c != nil {
		_ = c.Wait() // idempotent: makes sure the group is gone and the code is known
		res.ExitCode = c.exitCode
	}
	decide(res, track.snapshot(), stderr.firstError(), ctx.Err(), runCtx.Err(), spec.Timeout)
	log.Line(res.EndTime, "end", "", "", fmt.Sprintf("%s (exit code %d) %s", res.Outcome, res.ExitCode, res.Message))
	track.relay.record(relayRecord{Event: relayEnd, Outcome: res.Outcome, Message: res.Message, ExitCode: res.ExitCode})
	res.Log = log.Tail()
	return res, nil
}

// decide sets the outcome from what the run showed: cancellation first, then
// the final stats (exit code 4 means both "unreachable" and "parse error", so
// the code alone cannot say), then the exit code.
func decide(res *Result, o outcome, stderrErr string, parentErr, runErr error, timeout time.Duration) {
	res.Progress = o.progress
	res.Hosts = o.stats
	res.CustomStats = o.custom
	res.FailedTasks = realFailures(o.failed, o.stats)
	res.Changes, res.ChangesDropped = o.changes, o.dropped
	switch {
	case parentErr != nil:
		res.Outcome = Cancelled
		res.Message = "the run was cancelled"
		return
	case runErr != nil:
		res.Outcome = Failed
		res.Message = fmt.Sprintf("the run did not finish within %s and was stopped", timeout)
		return
	}
	if !o.sawStats {
		res.Outcome = Failed
		res.Message = "ansible-playbook ended without a result"
		if stderrErr != "" {
			res.Message = "ansible-playbook could not run: " + stderrErr
		} else if res.ExitCode >= 0 {
			res.Message = fmt.Sprintf("ansible-playbook exited with code %d before running any task", res.ExitCode)
		}
		return
	}
	failedHosts, unreachable := []string{}, []string{}
	for _, h := range sortedKeys(o.stats) {
		s := o.stats[h]
		if s.Failures > 0 {
			failedHosts = append(failedHosts, h)
		}
		if s.Unreachable > 0 {
			unreachable = append(unreachable, h)
		}
	}
	switch {
	case len(failedHosts) > 0 || len(unreachable) > 0:
		res.Outcome = Failed
		res.Message = summarizeFailures(failedHosts, unreachable, res.FailedTasks)
	case res.ExitCode != 0:
		res.Outcome = Failed
		res.Message = fmt.Sprintf("ansible-playbook exited with code %d", res.ExitCode)
		if stderrErr != "" {
			res.Message += ": " + stderrErr
		}
	default:
		res.Outcome = Succeeded
		res.Progress.TasksTotal = res.Progress.TasksDone
	}
}

func summarizeFailures(failedHosts, unreachable []string, failed []FailedTask) string {
	parts := []string{}
	if len(unreachable) > 0 {
		parts = append(parts, "unreachable: "+strings.Join(unreachable, ", "))
	}
	if len(failedHosts) > 0 {
		parts = append(parts, "failed: "+strings.Join(failedHosts, ", "))
	}
	msg := strings.Join(parts, "; ")
	if len(failed) > 0 {
		f := failed[0]
		msg += fmt.Sprintf(" (first: task %q on %s: %s)", f.Task, f.Host, f.Message)
	}
	return truncate(msg, maxMessage)
}

func (s *Spec) validate() error {
	switch {
	case s.ID == "" || strings.ContainsAny(s.ID, "/ \t\n"):
		return fmt.Errorf("run ID %q must be a non-empty word", s.ID)
	case !safePath.MatchString(s.Dir):
		return fmt.Errorf("run directory %q must be an absolute path of letters, digits, '-', '_', '.' and '/'", s.Dir)
	case s.FactCacheDir != "" && !safePath.MatchString(s.FactCacheDir):
		return fmt.Errorf("fact cache directory %q must be an absolute path of letters, digits, '-', '_', '.' and '/'", s.FactCacheDir)
	case s.Playbook == "":
		return errors.New("no playbook given")
	case len(s.Inventory) == 0:
		return errors.New("no inventory given")
	case s.Fetch != nil && (s.Fetch.Var == "" || strings.ContainsAny(s.Fetch.Var, "{}% \t\n")):
		return fmt.Errorf("the fetched file's extra var %q must be a plain name", s.Fetch.Var)
	case s.Fetch != nil && !etcdsnapshot.FileName.MatchString(s.Fetch.Name):
		return fmt.Errorf("the fetched file's name %q is not a snapshot file name", s.Fetch.Name)
	}
	for _, p := range s.RolesPath {
		if !safePath.MatchString(p) {
			return fmt.Errorf("roles path %q must be an absolute path of letters, digits, '-', '_', '.' and '/'", p)
		}
	}
	provided := false
	for _, f := range s.Files {
		clean := filepath.Clean(f.Path)
		top := strings.SplitN(filepath.ToSlash(clean), "/", 2)[0]
		if f.Path == "" || filepath.IsAbs(f.Path) || clean != f.Path || top == ".." ||
			slices.Contains([]string{SecretsDir, "inventory", "home", "tmp", pluginsDir, JinjaCacheDir, "extravars.json", "ansible.cfg", "ansible.log"}, top) {
			return fmt.Errorf("run file %q must be a clean relative path outside the run's own files", f.Path)
		}
		provided = provided || filepath.Join(s.Dir, clean) == s.Playbook
	}
	if !provided {
		if _, err := os.Stat(s.Playbook); err != nil {
			return fmt.Errorf("playbook: %w", err)
		}
	}
	return nil
}

// runDir is a prepared run directory.
type runDir struct {
	root       string
	inventory  string
	extraVars  string
	controlDir string
	env        []string
}

// prepare writes the run directory: inventory, extra vars, ansible.cfg and
// the secret files, and computes the scrubbed environment.
func prepare(spec *Spec) (_ *runDir, err error) {
	if err := os.MkdirAll(filepath.Dir(spec.Dir), 0o700); err != nil {
		return nil, fmt.Errorf("creating runs directory: %w", err)
	}
	if err := os.Mkdir(spec.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	// SSH control sockets get a short directory of their own: a Unix socket
	// path holds at most 107 bytes, and ssh names a socket by a 40-character
	// hash plus a 17-character temporary suffix.
	controlDir, err := os.MkdirTemp(os.TempDir(), "kao-cp-")
	if err != nil {
		return nil, fmt.Errorf("creating the SSH control directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(controlDir)
		}
	}()
	if len(controlDir)+1+40+17 > 107 || !safePath.MatchString(controlDir) {
		return nil, fmt.Errorf("the temporary directory %s is too long or unusual for SSH control sockets: set TMPDIR to a short path such as /tmp", os.TempDir())
	}
	d := &runDir{
		root:       spec.Dir,
		inventory:  filepath.Join(spec.Dir, "inventory", "hosts.json"),
		extraVars:  filepath.Join(spec.Dir, "extravars.json"),
		controlDir: controlDir,
	}
	for _, sub := range []string{"inventory", "home", "tmp", SecretsDir, JinjaCacheDir} {
		if err := os.Mkdir(filepath.Join(spec.Dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("creating run directory: %w", err)
		}
	}
	if spec.FactCacheDir != "" {
		if err := os.MkdirAll(spec.FactCacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("creating fact cache: %w", err)
		}
	}
	extra := spec.ExtraVars
	if extra == nil {
		extra = map[string]any{}
	}
	ev, err := json.Marshal(extra)
	if err != nil {
		return nil, fmt.Errorf("encoding extra vars: %w", err)
	}
	files := []File{{Path: "../inventory/hosts.json", Data: spec.Inventory}, {Path: "../extravars.json", Data: ev}}
	keyPath, knownHosts := "", filepath.Join(spec.Dir, SecretsDir, "known_hosts")
	if spec.SSHPrivateKey != nil {
		keyPath = filepath.Join(spec.Dir, SecretsDir, "ssh_key")
		files = append(files, File{Path: "ssh_key", Data: spec.SSHPrivateKey})
	}
	files = append(files, File{Path: "known_hosts", Data: spec.KnownHosts})
	files = append(files, spec.Secrets...)
	files = append(files, File{Path: "../ansible.cfg", Data: ansibleConfig(spec, keyPath, knownHosts, d.controlDir)})
	for _, f := range files {
		if err := writePrivate(filepath.Join(spec.Dir, SecretsDir, f.Path), f.Data); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		if err := writePrivate(filepath.Join(spec.Dir, f.Path), f.Data); err != nil {
			return nil, err
		}
	}
	for name, source := range map[string][]byte{jinjaCachePlugin: jinjaCacheSource, eventsPlugin: eventsSource} {
		if err := writePrivate(filepath.Join(spec.Dir, pluginsDir, "callback", name), source); err != nil {
			return nil, err
		}
	}
	d.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(spec.Dir, "home"),
		"TMPDIR=" + filepath.Join(spec.Dir, "tmp"),
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"PYTHONUNBUFFERED=1", // events must arrive as they happen, not in 8 KiB blocks
		"ANSIBLE_CONFIG=" + filepath.Join(spec.Dir, "ansible.cfg"),
		"ANSIBLE_STDOUT_CALLBACK=" + eventsCallback,
		"ANSIBLE_NOCOLOR=1",
		"ANSIBLE_FORCE_COLOR=0",
		JinjaCacheEnv + "=" + filepath.Join(spec.Dir, JinjaCacheDir),
	}
	return d, nil
}

// writePrivate writes a file readable by its owner only.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// cleanup closes the run's SSH control masters (they outlive ansible-playbook
// by ControlPersist and sit outside its process group) and removes every
// secret file. The rest of the run directory stays for inspection.
func (d *runDir) cleanup() {
	sockets, _ := filepath.Glob(filepath.Join(d.controlDir, "*"))
	for _, s := range sockets {
		_ = exec.Command("ssh", "-o", "ControlPath="+s, "-O", "exit", "kao-control-master").Run()
	}
	_ = os.RemoveAll(d.controlDir)
	for _, sub := range EndOfRunDirs {
		_ = os.RemoveAll(filepath.Join(d.root, sub))
	}
}
