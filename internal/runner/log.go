package runner

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sync"
	"time"
)

// logBuffer renders a run's human-readable log: one line per play, result and
// stderr line, every line already redacted. It appends each line to a file in
// the run directory and keeps the last maxTail bytes in memory for the
// ConfigMap kao stores per run.
type logBuffer struct {
	mu      sync.Mutex
	file    io.Writer
	tail    []byte
	maxTail int
}

func newLogBuffer(file io.Writer, maxTail int) *logBuffer {
	return &logBuffer{file: file, maxTail: maxTail}
}

// logTimeFormat stamps each log line, to the millisecond: whole seconds
// hide where the time of a run of quick tasks goes.
const logTimeFormat = "2006-01-02T15:04:05.000Z"

// Line appends one rendered line.
func (l *logBuffer) Line(ts time.Time, status, host, task, msg string) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %-11s", ts.UTC().Format(logTimeFormat), status)
	if host != "" {
		fmt.Fprintf(&b, " %-20s", host)
	}
	if task != "" {
		b.WriteString(" ")
		b.WriteString(task)
	}
	if msg != "" {
		if task != "" || host != "" {
			b.WriteString(" -- ")
		} else {
			b.WriteString(" ")
		}
		b.WriteString(msg)
	}
	b.WriteByte('\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_, _ = l.file.Write(b.Bytes())
	}
	l.tail = append(l.tail, b.Bytes()...)
	if over := len(l.tail) - l.maxTail; over > 0 {
		// Drop whole lines from the front.
		if i := bytes.IndexByte(l.tail[over:], '\n'); i >= 0 {
			over += i + 1
		}
		if over > len(l.tail) {
			over = len(l.tail)
		}
		l.tail = append([]byte(nil), l.tail[over:]...)
	}
}

// Tail returns the last lines kept in memory.
func (l *logBuffer) Tail() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.tail...)
}

// Gzip compresses a log tail for storage in a ConfigMap's binaryData.
func Gzip(data []byte) ([]byte, error) {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// stderrSink collects ansible-playbook's stderr (warnings and ERROR! lines)
// into the log, and keeps the first error lines to explain a failed start.
type stderrSink struct {
	mu     sync.Mutex
	redact *Redactor
	log    *logBuffer
	errors []string
	// relay passes the lines on when the run is followed from elsewhere.
	relay *relay
}

// Write implements io.Writer; go-ansible writes one line per call.
func (s *stderrSink) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		text := s.redact.Clean(string(line), 500)
		if text == "" {
			continue
		}
		s.log.Line(time.Now(), "stderr", "", "", text)
		s.relay.record(relayRecord{Event: relayStderr, Line: text})
		s.mu.Lock()
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("ERROR!")) || len(s.errors) > 0 && len(s.errors) < 6 {
			s.errors = append(s.errors, text)
		}
		s.mu.Unlock()
	}
	return len(p), nil
}

// firstError returns the ERROR! message ansible-playbook printed, if any.
func (s *stderrSink) firstError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := ""
	for _, e := range s.errors {
		msg += e + " "
	}
	return truncate(msg, maxMessage)
}
