package runner

import (
	"encoding/base64"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redacted replaces secret material in text kao keeps or shows.
const Redacted = "[redacted]"

// minSecretLen is the shortest secret fragment that is redacted; shorter
// fragments would match ordinary words.
const minSecretLen = 8

var (
	pemBlock   = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]+-----[\s\S]*?(-----END [A-Z0-9 ]+-----|$)`)
	secretKeys = regexp.MustCompile(`(?i)((?:client-key-data|client-certificate-data|certificate-authority-data|token|password|passwd|secret|private[_-]?key)["']?\s*[:=]\s*)("[^"]*"|'[^']*'|\S+)`)
)

// Redactor removes known secret values, and anything shaped like key material,
// from text before it reaches status, Events, logs or the run directory.
type Redactor struct {
	needles []string
}

// NewRedactor returns a Redactor for the given secret values. Each value is
// matched whole, line by line (a message may show part of a multi-line key)
// and base64-encoded (kubeconfigs embed keys that way).
func NewRedactor(secrets ...[]byte) *Redactor {
	set := map[string]struct{}{}
	add := func(s string) {
		s = strings.TrimSpace(s)
		if len(s) >= minSecretLen {
			set[s] = struct{}{}
		}
	}
	for _, sec := range secrets {
		s := string(sec)
		add(s)
		add(base64.StdEncoding.EncodeToString(sec))
		for _, line := range strings.Split(s, "\n") {
			add(line)
		}
	}
	r := &Redactor{}
	for s := range set {
		r.needles = append(r.needles, s)
	}
	// Longest first, so a whole secret is replaced before its lines.
	sort.Slice(r.needles, func(i, j int) bool { return len(r.needles[i]) > len(r.needles[j]) })
	return r
}

// Redact returns s with every known secret and key-shaped value replaced.
func (r *Redactor) Redact(s string) string {
	if r != nil {
		for _, n := range r.needles {
			if strings.Contains(s, n) {
				s = strings.ReplaceAll(s, n, Redacted)
			}
		}
	}
	s = pemBlock.ReplaceAllString(s, Redacted)
	return secretKeys.ReplaceAllString(s, "${1}"+Redacted)
}

// Clean redacts s, turns it into one printable line and shortens it to at
// most max bytes, for status fields, Events and log lines.
func (r *Redactor) Clean(s string, max int) string {
	s = r.Redact(s)
	s = strings.Map(func(c rune) rune {
		if unicode.IsControl(c) || !unicode.IsPrint(c) && c != ' ' {
			return ' '
		}
		return c
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	return truncate(s, max)
}

// truncate shortens s to at most max bytes without splitting a character.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut < 0 {
		cut = 0
	}
	return s[:cut] + ellipsis
}
