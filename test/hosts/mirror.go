package hosts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// aptSource is one "deb" entry of an apt sources file.
type aptSource struct {
	uri    string
	suites []string
}

// aptMirror returns the Debian archive to build the base root from: the first
// "deb" source of the machine's apt configuration (below root, "/" in
// production) that is not a security archive, preferring one that carries the
// wanted suite. It never falls back to a built-in address.
func aptMirror(root, suite string) (string, error) {
	srcs, err := readAptSources(root)
	if err != nil {
		return "", err
	}
	return pickMirror(srcs, suite)
}

// readAptSources reads sources.list, sources.list.d/*.list (one-line style) and
// sources.list.d/*.sources (deb822 style) below root.
func readAptSources(root string) ([]aptSource, error) {
	etc := filepath.Join(root, "etc", "apt")
	files := []string{filepath.Join(etc, "sources.list")}
	for _, pattern := range []string{"*.list", "*.sources"} {
		matches, err := filepath.Glob(filepath.Join(etc, "sources.list.d", pattern))
		if err != nil {
			return nil, fmt.Errorf("listing apt sources: %w", err)
		}
		sort.Strings(matches)
		files = append(files, matches...)
	}
	var srcs []aptSource
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading apt sources: %w", err)
		}
		if strings.HasSuffix(f, ".sources") {
			srcs = append(srcs, parseDeb822Sources(string(data))...)
		} else {
			srcs = append(srcs, parseOneLineSources(string(data))...)
		}
	}
	return srcs, nil
}

// parseOneLineSources parses "deb [options] URI suite [component...]" lines.
func parseOneLineSources(data string) []aptSource {
	var srcs []aptSource
	for _, line := range strings.Split(data, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			// Options run up to the token that ends with ']'.
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) < 2 {
			continue
		}
		srcs = append(srcs, aptSource{uri: f[0], suites: []string{f[1]}})
	}
	return srcs
}

// parseDeb822Sources parses deb822 stanzas (Types/URIs/Suites fields).
func parseDeb822Sources(data string) []aptSource {
	var srcs []aptSource
	for _, stanza := range splitStanzas(data) {
		if enabled, ok := stanza["enabled"]; ok && strings.EqualFold(strings.TrimSpace(enabled), "no") {
			continue
		}
		if !contains(strings.Fields(stanza["types"]), "deb") {
			continue
		}
		suites := strings.Fields(stanza["suites"])
		for _, uri := range strings.Fields(stanza["uris"]) {
			srcs = append(srcs, aptSource{uri: uri, suites: suites})
		}
	}
	return srcs
}

// splitStanzas splits deb822 text into stanzas of lower-cased field names to
// values, joining continuation lines and dropping comments.
func splitStanzas(data string) []map[string]string {
	var stanzas []map[string]string
	cur := map[string]string{}
	last := ""
	flush := func() {
		if len(cur) > 0 {
			stanzas = append(stanzas, cur)
		}
		cur, last = map[string]string{}, ""
	}
	for _, line := range strings.Split(data, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			cur[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return stanzas
}

// pickMirror chooses the archive URI: among http(s)/file sources that are not
// security archives, the first that lists the wanted suite, else the first.
func pickMirror(srcs []aptSource, suite string) (string, error) {
	var candidates []aptSource
	for _, s := range srcs {
		u := strings.ToLower(s.uri)
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "file:/") {
			continue
		}
		if strings.Contains(u, "security") || allSecuritySuites(s.suites) {
			continue
		}
		candidates = append(candidates, s)
	}
	for _, s := range candidates {
		if contains(s.suites, suite) {
			return s.uri, nil
		}
	}
	if len(candidates) > 0 {
		return candidates[0].uri, nil
	}
	return "", fmt.Errorf("no Debian archive found in the machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d); set %s", EnvMirror)
}

func allSecuritySuites(suites []string) bool {
	if len(suites) == 0 {
		return false
	}
	for _, s := range suites {
		if !strings.HasSuffix(s, "-security") && !strings.HasSuffix(s, "/updates") {
			return false
		}
	}
	return true
}

func contains(list []string, want string) bool {
	for _, v := range list {
		if v == want {
			return true
		}
	}
	return false
}
